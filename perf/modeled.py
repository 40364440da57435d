"""Rows for the Ascend C kernels run through the CPU twin: the twin's outputs are checked against the reference like
any backend's, but its wall time says nothing about an NPU, so the row's time is the **modeled 910B** time that
``ops._ascendc.modeled(op_name, inputs)`` computes from the kernel's own pipe schedule
(``{"time_us", "pipes", "bound", "label"}``), and its % of peak is against the 910B's peaks (perf/peaks.py, with
sources). Such a row is labelled "modeled 910B" in every output (``time_kind`` column, ``timer``, ``device``).
"""
from __future__ import annotations

from typing import Any

from . import peaks as P

LABEL = "modeled 910B"
MODELED_CHIP = "ascend_910b3"   # the PEAKS entry a modeled time is compared with, unless the model's label names one


def chip_for(label: str) -> P.DevicePeaks:
    """The 910B variant a model label names (``910B2`` / ``910B3``), else :data:`MODELED_CHIP`."""
    compact = (label or "").upper().replace(" ", "")
    for key in ("ascend_910b2", "ascend_910b3"):
        if key.split("_")[1].upper() in compact:
            return P.PEAKS[key]
    return P.PEAKS[MODELED_CHIP]


def modeled_columns(op_name: str, inputs: dict, flops: int, nbytes: int, compute: str) -> dict[str, Any]:
    """The timing and roofline columns of an Ascend C twin row from ``ops._ascendc.modeled(op_name, inputs)``:
    ``us_p50`` (= p20 = p80, spread 0: a model has no run-to-run spread), TFLOPS, GB/s and % of the 910B's peaks,
    ``bound`` as the model states it (else from the intensity), ``time_kind`` "modeled 910B", ``device`` the chip.
    Raises AttributeError when ``ops._ascendc`` has no ``modeled``, and whatever the model raises."""
    from ops import _ascendc
    from .runner import roofline_metrics
    m = _ascendc.modeled(op_name, inputs)
    t = float(m["time_us"])
    chip = chip_for(str(m.get("label") or ""))
    out = roofline_metrics(flops, nbytes, t, compute, chip, {})
    pipes = m.get("pipes") or {}
    pipes_s = ", ".join(f"{k} {float(v):.3g} µs" for k, v in pipes.items()) if isinstance(pipes, dict) else str(pipes)
    out.update(us_p20=t, us_p50=t, us_p80=t, spread_pct=0.0, time_kind=LABEL,
               timer=f"{LABEL} ({m.get('label') or 'ops._ascendc.modeled'})" + (f"; pipes: {pipes_s}" if pipes_s else ""),
               device=f"{chip.name} ({LABEL})", device_key=chip.key)
    if m.get("bound"):
        out["bound"] = str(m["bound"])
    return out


def twin_status() -> str:
    """One line on the Ascend C CPU twin: available (and whether the model exists) or why not."""
    try:
        from ops import _ascendc
    except Exception as e:  # noqa: BLE001
        return f"not available ({type(e).__name__}: {e})"
    why = _ascendc.unavailable_reason("cpu")
    if why is not None:
        return f"not available ({why})"
    if not callable(getattr(_ascendc, "modeled", None)):
        return "built; no 910B time model (ops._ascendc.modeled is missing): its rows are checked, not timed"
    return f"built: its rows are checked against the reference and timed by the {LABEL} pipe model"
