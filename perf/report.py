"""Report writers: long-format CSV and JSON, a markdown summary, a roofline PNG, and the terminal table."""
from __future__ import annotations

import csv
import json
import math
import os
from typing import Any, Sequence

from .header import backend_label, checked_against_reference, has_peak_column, header_lines, is_modeled
from .layer import OTHER

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H200_REPORT = "docs/perf/h200"
"""The committed H200 report (results.json, summary.md, roofline PNG), relative to the repository root."""

# column order of the CSV/JSON rows (docs/performance.md explains each)
COLUMNS = [
    "op", "backend", "shape", "shape_dict", "scaled", "dtype", "compute",
    "us_p20", "us_p50", "us_p80", "spread_pct", "timer", "time_kind",
    "flops", "bytes", "tflops", "gbps", "intensity", "ridge", "bound",
    "pct_peak", "pct_peak_compute", "pct_peak_bw", "pct_achievable",
    "check", "check_detail", "dispatch_us_registered", "dispatch_us_eager",
    "device", "device_key", "torch", "triton", "torch_npu", "git_sha", "timestamp", "repro", "note",
]


def _fmt(v: Any, nd: int = 1) -> str:
    """Compact number: thousands separators above 1000, 1 decimal above 10, 2 above 0.01, else 2 significant."""
    if v is None or v == "":
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1000:
        return f"{v:,.0f}"
    if isinstance(v, int):
        return str(v)
    if a >= 10:
        return f"{v:.1f}"
    if a >= 0.01:
        return f"{v:.2f}"
    return f"{v:.2g}"


def write_csv(rows: Sequence[dict], path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (json.dumps(r[k]) if isinstance(r.get(k), (dict, list)) else r.get(k)) for k in COLUMNS})


def write_json(rows: Sequence[dict], meta: dict, layer: dict, path: str, notes: Sequence[str] = ()) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": [{k: r.get(k) for k in COLUMNS} for r in rows], "layer": layer,
                   "notes": list(notes)}, f, indent=1, default=str)


SUMMARY_COLS = [("backend", "backend"), ("shape", "shape"), ("us_p50", "µs p50"), ("us_p20", "p20"),
                ("us_p80", "p80"), ("spread_pct", "spread %"), ("tflops", "TFLOPS"), ("gbps", "GB/s"), ("pct_peak", "% peak"),
                ("pct_achievable", "% ceil"), ("intensity", "FLOP/B"), ("bound", "bound"), ("check", "check"),
                ("dispatch_us_registered", "µs torch.ops"), ("dispatch_us_eager", "µs eager")]


def _md_table(header: list[str], body: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    return "\n".join(out)


def write_markdown(rows: Sequence[dict], meta: dict, layer: dict, notes: Sequence[str], path: str,
                   png_name: str | None) -> None:
    L: list[str] = [f"# ds-ops performance report — {meta['device']}", ""]
    L += [f"  * {line.strip()}" if line.startswith("  ") else f"* {line}" for line in header_lines(meta, rows)[1:]]
    L += [f"* command: `{meta['command']}`", f"* when: {meta['timestamp']}; git {meta['git_sha']}; torch {meta['torch']}; "
          f"triton {meta['triton']}" + (f"; torch_npu {meta['torch_npu']}" if meta.get("torch_npu") else ""),
          ]
    if meta.get("golden"):
        L.append(f"* check against: {meta['golden']}")
    if meta.get("parts"):
        L.append("* merged from: " + "; ".join(f"`{p['command']}` ({p.get('elapsed_s', '?')} s, {p.get('timestamp')})"
                                                for p in meta["parts"]))
    floor = meta.get("repro_floor_pct", 3.0)
    L += [f"* reproducing a row: re-running its `repro` command measures a p50 within ± (`spread %` + {floor:g} %) "
          "of the p50 here (`spread %` = (p80 − p20)/p50 of this run's samples; the "
          f"{floor:g} % covers clock/thermal drift between processes). `python -m perf.repro_check results.json -n N` "
          "checks N random rows" + ("; its result is at the end" if meta.get("repro_check") else "") + ".", ""]
    L += ["## Ceilings", ""]
    body = []
    pk = meta.get("peaks") or {}
    for kind, unit in (("bf16", "TFLOPS"), ("int8", "TOPS"), ("fp32", "TFLOPS"), ("hbm_tbs", "TB/s")):
        p = pk.get(kind)
        c = (meta.get("ceilings") or {}).get(kind) or {}
        body.append([kind, unit, _fmt(p["value"]) + (" (derived)" if p.get("derived") else "") if p else "–",
                     _fmt(c.get("value"), 2), (p or {}).get("source", "no datasheet peak for this device"),
                     c.get("method", "") + (f" — failed: {c['error']}" if c.get("error") else "")])
    L.append(_md_table(["", "unit", "peak", "measured", "peak source", "measured by"], body))
    L += ["", "`% peak` = roofline time at the datasheet peaks (max(FLOPs/peak, bytes/bandwidth)) over the measured "
          "time; `% ceil` the same against the measured ceilings; `bound` compares the intensity with the ridge point.",
          ""]
    if png_name:
        L += [f"![roofline]({png_name})", ""]
    ops_order: list[str] = []
    for r in rows:
        if r["op"] not in ops_order:
            ops_order.append(r["op"])
    for op in ops_order:
        L += [f"## {op}", ""]
        body = [[table_cell(r, k) for k, _ in SUMMARY_COLS] for r in rows if r["op"] == op]
        L.append(_md_table([h for _, h in SUMMARY_COLS], body))
        fails = [r for r in rows if r["op"] == op and r.get("check") not in ("PASS", "baseline")]
        for r in fails:
            L.append(f"* {r['backend']} {r['shape']}: {r['check']} — {r.get('check_detail') or r.get('note') or ''}")
        second = [r for r in rows if r["op"] == op and "vs on-device reference: FAIL" in (r.get("check_detail") or "")]
        for r in second:
            L.append(f"* {r['backend']} {r['shape']}: PASS against the CPU reference, FAIL against the on-device "
                     f"reference — {r['check_detail']}")
        timers = sorted({(r.get("timer") or "").split(" ")[0] for r in rows if r["op"] == op and r.get("timer")})
        fell = [r for r in rows if r["op"] == op and "graph capture" in (r.get("note") or "")]
        if fell:
            L.append(f"* timed with events (graph capture failed): "
                     f"{', '.join(sorted({r['backend'] for r in fell}))} — {fell[0]['note']}")
        if any(t in ("cudagraph", "events") for t in timers):
            L.append(f"* timers: {', '.join(timers)} (column `timer` in results.csv has calls × replays)")
        L.append("")
    L += ["## Layer view", ""]
    if not layer.get("available"):
        L.append(f"layer view: unavailable ({layer.get('reason')})")
    for v in layer.get("views", []):
        L += [f"### {v['layer']}", "",
              f"{_fmt(v.get('total_us'), 1)} µs per layer call (median); {_fmt(float(v.get('layer_flops') or 0))} "
              f"FLOPs counted (FlopCounterMode). Per-op times are {v.get('time_basis')}; '% of layer' is of "
              f"{_fmt(v.get('profiled_us'), 1)} µs profiled; `{OTHER}` is the time and FLOPs outside every ds op.",
              ""]
        L.append(_md_table(["op", "calls", "FLOPs", "µs", "% of layer", "TFLOPS", "% peak", "% ceil"],
                           [[o["op"], _fmt(o["calls"]), _fmt(float(o["flops"])), _fmt(o["time_us"]),
                             _fmt(o["share_pct"]), _fmt(o["tflops"], 3), _fmt(o["pct_peak"]),
                             _fmt(o["pct_achievable"])] for o in v.get("ops", [])]))
        L.append("")
    if layer.get("available") and layer.get("reason"):
        L += [f"(partly unavailable: {layer['reason']})", ""]
    L.append("")
    if notes:
        L += ["## Notes", ""] + [f"* {n}" for n in notes] + [""]
    L += ["## Reproduce a row", "", "Each row's `repro` column in results.csv holds its command, e.g.:", ""]
    L += [f"    {r['repro']}" for r in rows[:3]]
    L.append("")
    rc = meta.get("repro_check") or []
    if rc:
        ok = sum(1 for x in rc if x.get("within"))
        L += [f"### Re-run check: {ok} of {len(rc)} re-run rows within ± (spread + {floor:g} %)", "",
              "Rows picked at random and re-run in-process after the report (`perf/repro_check.py`).", ""]
        L.append(_md_table(["op", "backend", "shape", "report p50 µs", "re-run p50 µs", "Δ %", "allowed ± %", "ok"],
                           [[x["op"], x["backend"], x["shape"], _fmt(x.get("report_p50")), _fmt(x.get("rerun_p50")),
                             _fmt(x.get("delta_pct")), _fmt(x.get("tol_pct")), "yes" if x.get("within") else "NO"]
                            for x in rc]))
        L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def write_all(rows: Sequence[dict], meta: dict, layer: dict, notes: list[str], out: str, *,
              print_table_too: bool = True) -> None:
    """results.csv, results.json, summary.md and roofline_<device>.png in ``out`` (and the terminal table)."""
    os.makedirs(out, exist_ok=True)
    png = f"roofline_{meta['device_key']}.png"
    err = plot_roofline(rows, meta, os.path.join(out, png))
    if err:
        if err not in notes:
            notes.append(err)
        png = None
    write_csv(rows, os.path.join(out, "results.csv"))
    write_json(rows, meta, layer, os.path.join(out, "results.json"), notes)
    write_markdown(rows, meta, layer, notes, os.path.join(out, "summary.md"), png)
    if print_table_too:
        print_table(rows, layer, notes, meta)
    print(f"wrote {out}/results.csv, results.json, summary.md" + (f", {png}" if png else "")
          + (f" ({meta['elapsed_s']} s)" if meta.get("elapsed_s") is not None else ""), flush=True)


def results_path(path: str) -> str:
    """A report's results.json: ``path`` itself, or the results.json in it when it is a folder."""
    return os.path.join(path, "results.json") if os.path.isdir(path) else path


def load_json(path: str) -> dict:
    """The parsed results.json of a report (``path``: the file or its folder)."""
    with open(results_path(path)) as f:
        return json.load(f)


def _canonical_order(rows: list[dict]) -> list[dict]:
    """Rows by op (first appearance), the op's named-shape order, then backend (first appearance): a re-measured
    row merged from a later run sits where a full run would have put it."""
    try:
        import ops  # noqa: F401  (registers every op's OpSpec)
        from ops._library import SPECS
    except Exception:  # noqa: BLE001 - ordering is cosmetic; keep the given order without the registry
        return rows
    first_op: dict[str, int] = {}
    first_backend: dict[str, int] = {}
    for r in rows:
        first_op.setdefault(r["op"], len(first_op))
        first_backend.setdefault(r["backend"], len(first_backend))

    def key(ir):
        i, r = ir
        names = list(getattr(SPECS.get(r["op"]), "shapes", None) or [])
        pos = names.index(r["shape"]) if r["shape"] in names else len(names) + i
        return first_op[r["op"]], pos, first_backend[r["backend"]], i
    return [r for _, r in sorted(enumerate(rows), key=key)]


def merge_reports(dirs: Sequence[str], out: str) -> int:
    """Combine the ``results.json`` of several runs into one report in ``out``. A row (op, backend, shape) that
    appears twice keeps the later run's numbers; rows are listed by op (first appearance), then in the order of
    the op's named shapes (``OpSpec.shapes``; unknown shapes after them), then by backend. Ceilings and provenance
    come from the first run (each run's command, time and ceilings are listed under ``meta.parts``); the layer view
    from the first run that has one. Returns 1 if a merged row is FAIL/ERROR, else 0. Raises FileNotFoundError /
    KeyError for a missing or malformed results.json (the CLI refuses those first, with a usage error)."""
    parts = [load_json(d) for d in dirs]
    rows: dict[tuple, dict] = {}
    notes: list[str] = []
    layer = {"available": False, "reason": "no merged run has a layer view", "views": []}
    repro: list[tuple[int, dict]] = []
    src: dict[tuple, int] = {}
    for i, (d, js) in enumerate(zip(dirs, parts)):
        for r in js["rows"]:
            rows[(r["op"], r["backend"], r["shape"])] = r       # a later run's row replaces it in place
            src[(r["op"], r["backend"], r["shape"])] = i
        for n in js.get("notes", []):
            if n not in notes:
                notes.append(n)
        if not layer.get("available") and (js.get("layer") or {}).get("available"):
            layer = js["layer"]
        repro += [(i, x) for x in js["meta"].get("repro_check") or []]
    meta = dict(parts[0]["meta"])
    # a merged report given as input contributes its own parts (provenance is never collapsed by re-merging)
    meta["parts"] = [p for d, js in zip(dirs, parts) for p in (js["meta"].get("parts") or [
        dict(dir=d, command=js["meta"].get("command"), elapsed_s=js["meta"].get("elapsed_s"),
             timestamp=js["meta"].get("timestamp"), git_sha=js["meta"].get("git_sha"),
             ceilings=js["meta"].get("ceilings"))])]
    meta["command"] = " + ".join(str(p["command"]) for p in meta["parts"])
    meta["elapsed_s"] = round(sum(float(p["elapsed_s"] or 0) for p in meta["parts"]), 1)
    # a re-run check of a row that a later run replaced describes a number no longer in the report: drop it
    meta["repro_check"] = [x for i, x in repro if src.get((x.get("op"), x.get("backend"), x.get("shape")), i) == i]
    for key in ("git_sha", "torch", "triton", "device"):
        vals = {str(p.get(key, js["meta"].get(key))) for js in parts for p in (js["meta"].get("parts") or [{}])}
        note = f"merged runs differ in {key}: {', '.join(sorted(vals))}"
        if len(vals) > 1 and note not in notes:
            notes.append(note)
    merged = _canonical_order(list(rows.values()))
    # a host-bound row's spread is at least HOST_BOUND_SPREAD_PCT (perf/timers.py), in every merged part too; the kept
    # re-run checks are judged against the spread written beside their rows
    from .timers import HOST_BOUND_SPREAD_PCT, rerun_tolerance_pct
    for r in merged:
        if "syncs the host" in str(r.get("note") or "") and r.get("spread_pct") is not None:
            r["spread_pct"] = max(float(r["spread_pct"]), HOST_BOUND_SPREAD_PCT)
    for x in meta["repro_check"]:
        row = rows.get((x.get("op"), x.get("backend"), x.get("shape")))
        if row is not None and row.get("spread_pct") is not None and x.get("delta_pct") is not None:
            x["tol_pct"] = rerun_tolerance_pct(row["spread_pct"])
            x["within"] = abs(float(x["delta_pct"])) <= x["tol_pct"]
    write_all(merged, meta, layer, notes, out, print_table_too=False)
    return 1 if any(r.get("check") in ("FAIL", "ERROR") for r in merged) else 0


def plot_roofline(rows: Sequence[dict], meta: dict, path: str) -> str | None:
    """Roofline PNG (matplotlib, Agg): each row with FLOPs > 0 at (intensity, achieved TFLOPS); datasheet roofs solid,
    measured ceilings dashed. Returns None (and writes nothing) when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001
        return "matplotlib is not importable: no roofline plot"
    pts = [r for r in rows if r.get("tflops") and r.get("intensity") and r["tflops"] > 0 and r["intensity"] > 0
           and not is_modeled(r)]    # modeled 910B rows belong to another device's roofline
    fig, ax = plt.subplots(figsize=(10, 7), dpi=110)
    xs = [r["intensity"] for r in pts] or [1.0]
    peaks = meta.get("peaks") or {}
    ceil = meta.get("ceilings") or {}
    bw_p = (peaks.get("hbm_tbs") or {}).get("value")
    bw_m = (ceil.get("hbm_tbs") or {}).get("value")
    ridges = []
    for kind in ("bf16", "int8", "fp32"):
        for src, bw in ((peaks, bw_p), (ceil, bw_m)):
            v = (src.get(kind) or {}).get("value")
            if v and bw:
                ridges.append(v / bw)
    lo = min(xs + ridges) / 4
    hi = max(xs + ridges) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    colors = {"bf16": "tab:blue", "int8": "tab:red", "fp32": "tab:green"}
    for kind in ("bf16", "int8", "fp32"):
        for src, bw, style, label in ((peaks, bw_p, "-", "peak"), (ceil, bw_m, "--", "measured")):
            v = (src.get(kind) or {}).get("value")
            if not v or not bw:
                continue
            ax.plot(grid, [min(v, x * bw) for x in grid], style, color=colors[kind], lw=1.5,
                    label=f"{kind} {label} roof ({v:.3g} T/s, {bw:.3g} TB/s)")
    markers = {"reference": "o", "triton": "^", "ascendc": "s"}
    ops = sorted({r["op"] for r in pts})
    cmap = plt.get_cmap("tab10")
    for i, op in enumerate(ops):
        for r in [p for p in pts if p["op"] == op]:
            ax.scatter(r["intensity"], r["tflops"], marker=markers.get(r["backend"], "D"), color=cmap(i % 10),
                       edgecolors="k" if r.get("check") in ("PASS", "baseline") else "red", linewidths=0.6, s=36,
                       zorder=3)
        ax.scatter([], [], marker="o", color=cmap(i % 10), label=op)
    for b, m in markers.items():
        if any(p["backend"] == b for p in pts):
            ax.scatter([], [], marker=m, color="grey", label=f"backend {b}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved TFLOPS (TOPS for int8)")
    ax.set_title(f"ds-ops roofline — {meta['device']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None


def table_columns(rows: Sequence[dict], cpu: bool = False) -> list[tuple[str, str]]:
    """The terminal table's columns: % peak only when some row has a datasheet peak, check only when a backend
    other than the reference ran (the header says why a column is missing); GFLOP/s instead of TFLOPS on a CPU."""
    cols = [("op", "op"), ("backend", "backend"), ("shape", "shape"), ("us_p50", "µs p50"),
            ("gflops", "GFLOP/s") if cpu else ("tflops", "TFLOPS"), ("gbps", "GB/s")]
    if has_peak_column(rows):
        cols.append(("pct_peak", "% peak"))
    cols += [("pct_achievable", "% ceil"), ("intensity", "FLOP/B"), ("bound", "bound")]
    if checked_against_reference(rows):
        cols.append(("check", "check"))
    return cols + [("dispatch", "µs ds/eager")]


def table_cell(r: dict, k: str) -> str:
    if k == "dispatch":
        a, b = r.get("dispatch_us_registered"), r.get("dispatch_us_eager")
        return "–" if a is None else f"{_fmt(a)}/{_fmt(b)}"
    if k == "backend":
        return backend_label(r)
    if k == "gflops":
        return _fmt(None if r.get("tflops") is None else r["tflops"] * 1e3)
    if k == "check" and r.get("check") == "baseline":
        return "golden"
    return _fmt(r.get(k))


def print_table(rows: Sequence[dict], layer: dict, notes: Sequence[str], meta: dict | None = None) -> None:
    """The header (what was timed, how, what the columns mean), the table, the layer view and the notes on
    stdout (rich if importable, else plain text)."""
    cols = table_columns(rows, cpu=bool(meta) and meta.get("device_type") == "cpu")
    head = header_lines(meta, rows) if meta else []
    layer_caption = (f"`{OTHER}`: the time and FLOPs outside every ds op (norms, RoPE, residual adds, the expert "
                     "combine)")
    try:
        from rich.console import Console
        from rich.table import Table
    except Exception:  # noqa: BLE001
        for line in head:
            print(line)
        print("\t".join(h for _, h in cols))
        for r in rows:
            print("\t".join(table_cell(r, k) for k, _ in cols))
        for v in layer.get("views", []):
            print("layer view:", v["layer"])
            for o in v["ops"]:
                print(f"  {o['op']}: {_fmt(o['calls'])} calls, {_fmt(o['time_us'])} µs, {_fmt(o['share_pct'])}% of layer")
        if layer.get("views"):
            print(layer_caption)
        if not layer.get("available"):
            print(f"layer view: unavailable ({layer.get('reason')})")
        for n in notes:
            print("note:", n)
        return
    width = max(160, int(os.environ.get("COLUMNS", "0") or 0))
    con = Console(width=width, soft_wrap=False)
    for line in head:
        con.print(line, markup=False, highlight=False)
    t = Table(title="ds-ops perf", show_lines=False, pad_edge=False)
    for k, h in cols:
        t.add_column(h, overflow="fold", no_wrap=k in ("op", "shape", "backend"),
                     justify="right" if k not in ("op", "backend", "shape", "bound", "check") else "left")
    keys = [k for k, _ in cols]
    for r in rows:
        cells = [table_cell(r, k) for k in keys]
        if "check" in keys:
            i = keys.index("check")
            if r.get("check") == "PASS":
                cells[i] = "[green]PASS[/]"
            elif r.get("check") not in ("baseline", None):
                cells[i] = f"[red]{r.get('check')}[/]"
        t.add_row(*cells)
    con.print(t)
    for v in layer.get("views", []):
        lt = Table(title=f"layer view: {v['layer']} — {_fmt(v.get('total_us'))} µs per call; the rows split one "
                         f"call ({_fmt(v.get('profiled_us'))} µs, {v.get('time_basis')})")
        peak = any(o.get("pct_peak") is not None for o in v["ops"])
        giga = ("gflops", "GFLOP/s") in cols
        for h in ("op", "calls", "µs", "% of layer", "GFLOP/s" if giga else "TFLOPS") + (("% peak",) if peak else ()):
            lt.add_column(h)
        for o in v["ops"]:
            lt.add_row(o["op"], _fmt(o["calls"]), _fmt(o["time_us"]), _fmt(o["share_pct"]),
                       table_cell(o, "gflops") if giga else _fmt(o["tflops"], 3),
                       *((_fmt(o["pct_peak"]),) if peak else ()))
        con.print(lt)
    if layer.get("views"):
        con.print(layer_caption, markup=False, highlight=False)
    if not layer.get("available"):
        con.print(f"layer view: unavailable ({layer.get('reason')})", markup=False)
    for n in notes:
        con.print(f"note: {n}", markup=False, highlight=False)
