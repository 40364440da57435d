"""Re-run random rows of a perf report and compare: does a row's ``repro`` command reproduce its p50?

    python -m perf.repro_check perf_out/results.json -n 8            # 8 random timed rows, seed 0
    python -m perf.repro_check DIR --rows amla/triton/b64_sq2_n16_l4096,quant_matmul/reference/o_proj_M1
    python -m perf --device cuda ... --repro-check 6                 # the same, right after a report

Each picked row's ``repro`` command (``python -m perf --device D --ops OP --shapes SHAPE --backends B``) is parsed
and run in this process (same code path as the command: inputs from the same seed, same check, same timer; the
layer view, peers and dispatch timing left out, the ceilings not re-measured). A row reproduces when
``|p50_rerun − p50_report| / p50_report ≤ spread_pct + REPRO_FLOOR_PCT`` (perf/timers.py; 3 %). Prints one line
per row and ``REPRO k/N within``; writes the same to ``--out`` (default: repro_check.txt beside the JSON) and adds
the result to the JSON's ``meta.repro_check`` (and regenerates summary.md there) unless ``--no-update``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from typing import Sequence

from .timers import REPRO_FLOOR_PCT, rerun_tolerance_pct


def pick_rows(rows: list[dict], n: int, seed: int, want: Sequence[str] = ()) -> list[dict]:
    """Timed, checked rows (not peers); ``want`` = ``op/backend/shape`` keys, else ``n`` at random, spread over
    the backends (alternating) so the kernels and the references are both sampled."""
    ok = [r for r in rows if r.get("us_p50") not in (None, "") and r.get("check") in ("PASS", "baseline")
          and not str(r.get("backend", "")).startswith("peer:") and r.get("repro")
          and r.get("time_kind") != "modeled 910B"]      # a model has nothing to re-measure
    if want:
        keys = {tuple(w.split("/", 2)) for w in want}
        return [r for r in ok if (r["op"], r["backend"], r["shape"]) in keys]
    rng = random.Random(seed)
    by_b: dict[str, list[dict]] = {}
    for r in ok:
        by_b.setdefault(r["backend"], []).append(r)
    for v in by_b.values():
        rng.shuffle(v)
    out, order = [], sorted(by_b, key=lambda b: (b == "reference", b))   # kernels first
    while len(out) < n and any(by_b.values()):
        for b in order:
            if by_b[b] and len(out) < n:
                out.append(by_b[b].pop())
    return out


def rerun(row: dict, ceilings: dict | None = None, extra_ops: Sequence = ()) -> tuple[float | None, str]:
    """(p50 µs, detail) of one row re-run in-process from its repro command."""
    from . import __main__ as M
    argv = shlex.split(row["repro"])
    i = argv.index("perf") + 1 if "perf" in argv else 0
    cmd = argv[i:] + ["--no-layer", "--no-peers", "--no-dispatch", "--out", os.devnull]
    args = M.parse_args(cmd)
    runner, plan = M.setup(args, cmd, ceilings=ceilings or {}, extra_ops=extra_ops)
    M.run_plan(runner, plan, time.perf_counter(), None)
    hit = [r for r in runner.rows if r["backend"] == row["backend"] and r["shape"] == row["shape"]]
    if not hit or hit[0].get("us_p50") is None:
        return None, (hit[0].get("check_detail") or hit[0].get("note") or "no timing") if hit else "row not produced"
    r = hit[0]
    return float(r["us_p50"]), f"{r.get('timer')}; spread {r.get('spread_pct') or 0:.1f} %; check {r.get('check')}"


def repro_check(path: str, *, n: int = 8, seed: int = 0, rows: Sequence[str] = (), out: str | None = None,
                ceilings: dict | None = None, update: bool = True, extra_ops: Sequence = ()) -> list[dict]:
    """Re-run rows of the report at ``path`` (results.json or its folder) in this process and compare their p50.

    n, seed: how many timed rows to pick at random, and the seed; rows: "op/backend/shape" keys to re-run
    instead; out: the text log (default: repro_check.txt next to the report); ceilings: the run's ceilings
    (default: the report's); update: append the results to the report's meta and rewrite results.json and
    summary.md; extra_ops: OpEntry rows that are not registered ops (tests). Returns one dict per re-run row
    (op, backend, shape, report_p50 and rerun_p50 in µs, delta_pct, tol_pct, within, detail, repro, seconds).
    Raises FileNotFoundError for a missing report. See the module docstring for the tolerance."""
    from .report import load_json, results_path
    jpath = results_path(path)
    js = load_json(jpath)
    if ceilings is None:
        from .peaks import Ceiling
        ceilings = {k: Ceiling(v.get("value"), v.get("method", ""), v.get("error"))
                    for k, v in (js["meta"].get("ceilings") or {}).items()}
    picked = pick_rows(js["rows"], n, seed, rows)
    lines, results = [], []
    hdr = f"{'op':24s} {'backend':10s} {'shape':24s} {'report p50':>11s} {'re-run p50':>11s} {'Δ %':>7s} {'±allowed':>8s}  ok"
    print(hdr, flush=True)
    lines.append(hdr)
    for r in picked:
        rep = float(r["us_p50"])
        tol = rerun_tolerance_pct(r.get("spread_pct"))
        t0 = time.perf_counter()
        try:
            p50, detail = rerun(r, ceilings, extra_ops)
        except Exception as e:  # noqa: BLE001
            p50, detail = None, f"{type(e).__name__}: {e}"[:200]
        delta = None if p50 is None else 100.0 * (p50 - rep) / rep
        within = delta is not None and abs(delta) <= tol
        res = dict(op=r["op"], backend=r["backend"], shape=r["shape"], report_p50=rep, rerun_p50=p50,
                   delta_pct=delta, tol_pct=tol, within=within, detail=detail, repro=r["repro"],
                   seconds=round(time.perf_counter() - t0, 1))
        results.append(res)
        line = (f"{r['op']:24s} {r['backend']:10s} {r['shape']:24s} {rep:11.2f} "
                f"{(p50 if p50 is not None else float('nan')):11.2f} {(delta if delta is not None else float('nan')):7.2f} "
                f"{tol:8.2f}  {'yes' if within else 'NO'}   ({detail}; {res['seconds']} s)")
        print(line, flush=True)
        lines.append(line)
    k = sum(1 for x in results if x["within"])
    summary = f"REPRO {k}/{len(results)} within ± (spread_pct + {REPRO_FLOOR_PCT:g} %)"
    print(summary, flush=True)
    lines.append(summary)
    out = out or os.path.join(os.path.dirname(os.path.abspath(jpath)), "repro_check.txt")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    if update:
        from . import report as R
        js["meta"]["repro_check"] = (js["meta"].get("repro_check") or []) + results
        with open(jpath, "w") as f:
            json.dump(js, f, indent=1, default=str)
        md = os.path.join(os.path.dirname(os.path.abspath(jpath)), "summary.md")
        png = next((p for p in os.listdir(os.path.dirname(os.path.abspath(jpath))) if p.startswith("roofline_")
                    and p.endswith(".png")), None)
        R.write_markdown(js["rows"], js["meta"], js.get("layer") or {}, js.get("notes") or [], md, png)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m perf.repro_check RESULTS [-n N] ...``: returns 0 when every re-run row is within its tolerance,
    else 1; a usage error (argparse) exits 2."""
    ap = argparse.ArgumentParser(prog="python -m perf.repro_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="results.json of a report, or its folder")
    ap.add_argument("-n", type=int, default=8, help="rows to re-run (default 8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", default="", help="comma list of op/backend/shape to re-run instead of random ones")
    ap.add_argument("--out", default=None, help="text output (default repro_check.txt beside the JSON)")
    ap.add_argument("--no-update", action="store_true", help="leave results.json / summary.md alone")
    a = ap.parse_args(argv)
    if a.n < 1:
        ap.error(f"-n must be >= 1, got {a.n}")
    if not os.path.exists(a.results):
        ap.error(f"results {a.results!r} does not exist (give a report's results.json or its folder)")
    import ops  # noqa: F401
    res = repro_check(a.results, n=a.n, seed=a.seed, rows=[x for x in a.rows.split(",") if x], out=a.out,
                      update=not a.no_update)
    return 0 if res and all(x["within"] for x in res) else 1


if __name__ == "__main__":
    sys.exit(main())
