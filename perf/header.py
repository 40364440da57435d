"""What a report's table shows, in words: the lines printed above the terminal table and at the top of summary.md
(what was timed, on what, with which timer, what each column means, what the check compares)."""
from __future__ import annotations

from typing import Sequence

from .modeled import LABEL as MODELED


def is_modeled(row: dict) -> bool:
    """A row whose time is the modeled 910B time (an Ascend C kernel run through the CPU twin)."""
    return row.get("time_kind") == MODELED


def backend_label(row: dict) -> str:
    return f"{row['backend']} ({MODELED})" if is_modeled(row) else str(row["backend"])


def checked_against_reference(rows: Sequence[dict]) -> bool:
    """True when some backend other than the reference has a row: the check column then means something."""
    return any(r.get("backend") != "reference" for r in rows)


def has_peak_column(rows: Sequence[dict]) -> bool:
    return any(r.get("pct_peak") is not None for r in rows)


def _ceilings_text(meta: dict) -> str:
    c = meta.get("ceilings") or {}
    parts = []
    for kind, what, unit, scale in (("bf16", "bf16 matmul", "GFLOP/s", 1e3), ("int8", "int8 matmul", "GOP/s", 1e3),
                                    ("hbm_tbs", "memory copy", "GB/s", 1e3)):
        v = (c.get(kind) or {}).get("value")
        if v:
            parts.append(f"{what} {v * scale:,.0f} {unit}")
    return ", ".join(parts) or "none measured"


def header_lines(meta: dict, rows: Sequence[dict]) -> list[str]:
    """The header of a report: plain text lines (markdown-safe)."""
    cpu = meta.get("device_type") == "cpu"
    ops = list(dict.fromkeys(r["op"] for r in rows))
    backends = list(dict.fromkeys(backend_label(r) for r in rows))
    dev = meta.get("device", "?") + (f", {meta['threads']} torch threads" if cpu and meta.get("threads") else "")
    L = [f"ds-ops performance report on {dev} (torch {meta.get('torch')}, triton {meta.get('triton')}, "
         f"git {meta.get('git_sha')})",
         f"timed: {len(rows)} rows; ops {', '.join(ops) or 'none'}; backends {', '.join(backends) or 'none'}",
         f"shapes: {meta.get('shapes_doc') or 'see the shape column'}",
         f"timer: {meta.get('timer_doc')}"]
    if any(is_modeled(r) for r in rows):
        L.append(f"{MODELED}: the Ascend C kernels run through the CPU twin, so their outputs are checked here, but the "
                 f"time of those rows is the {MODELED} pipe model (ops._ascendc.modeled), not a measurement, and their "
                 "% peak is against the 910B's peaks in perf/peaks.py (derived figures, sources there)")
    if checked_against_reference(rows):
        L.append("check: each backend's outputs against the reference's on the same inputs (tolerances: "
                 "ops/tolerances.py): PASS / FAIL; the reference row is the golden itself")
    else:
        L.append("check: only the reference ran, so there is nothing to compare it with (column left out)")
    if meta.get("ascendc_twin"):
        L.append(f"Ascend C CPU twin: {meta['ascendc_twin']}")
    L.append("columns:")
    L += [f"  {k:13s} {v}" for k, v in column_doc(rows, cpu, meta).items()]
    return L


def column_doc(rows: Sequence[dict], cpu: bool, meta: dict) -> dict[str, str]:
    """Column heading -> what it holds, for the columns the table shows."""
    doc = {"µs p50": "median time per call",
           ("GFLOP/s, GB/s" if cpu else "TFLOPS, GB/s"): "the op's FLOPs and fewest bytes moved (OpSpec.flops / "
                                                        ".bytes) over that time"}
    if has_peak_column(rows):
        doc["% peak"] = ("the roofline time at the device's datasheet peaks (perf/peaks.py) over the time"
                         + ("; measured CPU rows have none (a CPU has no datasheet peak there)" if cpu else ""))
    doc["% ceil"] = "the roofline time at this machine's measured ceilings over the time" + (
        f" ({_ceilings_text(meta)}; a CPU has no datasheet peak in perf/peaks.py, so no % peak; above 100 when the "
        "inputs fit in the caches, which are faster than the measured copy)" if cpu and not has_peak_column(rows)
        else "")
    doc["FLOP/B"] = "FLOPs per byte moved (arithmetic intensity)"
    doc["bound"] = "compute when FLOP/B is at or above the ridge (peak FLOP/s over peak bytes/s), else memory"
    if checked_against_reference(rows):
        doc["check"] = "PASS / FAIL against the reference; golden = the reference row itself"
    doc["µs ds/eager"] = ("wall time per call through torch.ops.ds / the eager helper (host overhead included; – "
                          "where one call is too long for host overhead to matter)")
    return doc
