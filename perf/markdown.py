"""``python -m perf --markdown [REPORT]``: one markdown performance table per device of a report, for the README
and docs/performance.md to paste. REPORT is a results.json or its folder (default: the committed H200 report,
:data:`perf.report.H200_REPORT`). Rows: op, shape, backend, µs (p50), the achieved rate of the bound that applies
(TFLOP/s — TOP/s for int8 — when compute-bound, TB/s when memory-bound), its % of the device's datasheet peak, the
bound. Only timed rows whose check passed (or the reference itself) are listed; modeled 910B rows get a table of
their own, headed as modeled.
"""
from __future__ import annotations

import os
import sys
from typing import Sequence

from .header import is_modeled
from .report import REPO, _fmt, _md_table, load_json, results_path


def resolve(path: str) -> str:
    """``path`` as given, or relative to the repository root when it does not exist here (the default constant)."""
    if os.path.exists(path) or os.path.isabs(path):
        return path
    return os.path.join(REPO, path)


def achieved(row: dict) -> tuple[str, float | None]:
    """(text, % of peak) of the achieved rate for the bound that applies to ``row``."""
    if row.get("bound") == "compute" and row.get("tflops") is not None:
        unit = "TOP/s" if row.get("compute") == "int8" else "TFLOP/s"
        return f"{_fmt(row['tflops'])} {unit}", row.get("pct_peak_compute")
    if row.get("gbps") is not None:
        return f"{_fmt(row['gbps'] / 1e3)} TB/s", row.get("pct_peak_bw")
    return "–", row.get("pct_peak")


def tables(js: dict, ops: Sequence[str] | None = None, backends: Sequence[str] | None = None) -> str:
    """The markdown text: one ``### <device>`` section with one table per device of the report ``js``."""
    meta = js.get("meta") or {}
    by_dev: dict[str, list[dict]] = {}
    skipped = 0
    for r in js.get("rows") or []:
        if (ops and r["op"] not in ops) or (backends and r["backend"] not in backends):
            continue
        if r.get("us_p50") in (None, "") or r.get("check") not in ("PASS", "baseline"):
            skipped += 1
            continue
        by_dev.setdefault(r.get("device") or meta.get("device") or "?", []).append(r)
    out: list[str] = []
    for dev, rows in by_dev.items():
        modeled = any(is_modeled(r) for r in rows)
        title = dev if not modeled or "modeled" in dev else f"{dev} (modeled)"
        what = ("time from the Ascend C pipe model (ops._ascendc.modeled), outputs checked on the CPU twin"
                if modeled else f"measured; timer: {str(meta.get('timer_doc') or '?').split(':')[0]}")
        out += [f"### {title}", "",
                f"{what}; torch {meta.get('torch')}, triton {meta.get('triton')}, git {meta.get('git_sha')}, "
                f"{str(meta.get('timestamp') or '?')[:10]}. % of peak: of the datasheet rate of the bound that "
                "applies (perf/peaks.py).", ""]
        body = []
        for r in rows:
            rate, pct = achieved(r)
            body.append([r["op"], r["shape"], r["backend"], _fmt(r["us_p50"]), rate, _fmt(pct), str(r.get("bound") or "–")])
        out += [_md_table(["op", "shape", "backend", "µs", "achieved", "% of peak", "bound"], body), ""]
    if skipped:
        out.append(f"({skipped} rows without a timing or a passing check are left out.)")
    return "\n".join(out).rstrip() + "\n"


def print_markdown(path: str, ops: Sequence[str] | None = None, backends: Sequence[str] | None = None) -> int:
    """Print :func:`tables` of the report at ``path``; 0, or 2 (with the reason on stderr) when it is not a
    readable report."""
    p = resolve(path)
    try:
        js = load_json(p)
        if not isinstance(js.get("rows"), list):
            raise ValueError("no 'rows' list")
    except (OSError, ValueError, AttributeError) as e:
        print(f"python -m perf --markdown: {results_path(p)} is not a readable perf report ({e})", file=sys.stderr)
        return 2
    sys.stdout.write(tables(js, ops, backends))
    return 0
