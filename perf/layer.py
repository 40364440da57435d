"""Layer view: each ``ds`` op's share of a DeepSeek-V3 decoder layer's time, and its utilization there.

Needs ``ops/deepseek_layer.py`` to expose a builder of a small random layer. The first of :data:`HOOKS` found is
called with whichever of ``device``, ``dtype``, ``generator`` it accepts and may return

* ``(fn, args)`` or ``(fn, args, kwargs)`` — the layer's forward and its inputs, or
* an object with ``forward``/``__call__`` and an ``example_inputs()`` method returning args (tuple) or kwargs (dict).

The layer runs once under ``torch.utils.flop_counter.FlopCounterMode`` (FLOPs per ``ds`` op, from the formulas the
ops register) and once under ``torch.profiler`` (time per ``ds`` op: device time on CUDA, CPU time on CPU). While it
runs, eager calls of ``DsOp`` objects are routed through ``torch.ops.ds.<name>`` so both tools see every op (the eager
fast path skips the dispatcher, where they hook in). Anything missing yields ``available: False`` and a reason.
"""
from __future__ import annotations

import contextlib
import inspect
from typing import Any

import torch

HOOKS = ("perf_layer", "random_layer", "make_random_layer", "build_random_layer", "small_random_layer", "example_layer")


@contextlib.contextmanager
def route_through_dispatcher():
    """Make ``DsOp.__call__`` call ``torch.ops.ds.<name>`` inside the block (restored after)."""
    from ops._library import DsOp
    orig = DsOp.__call__

    def call(self, *args, **kwargs):
        return getattr(torch.ops.ds, self.name)(*args, **kwargs)

    DsOp.__call__ = call
    try:
        yield
    finally:
        DsOp.__call__ = orig


def _op_name(key: Any) -> str:
    s = str(key)
    return s.split("::")[-1].split(".")[-1] if ("ds." in s or "ds::" in s) else s


def _build(device: torch.device, dtype: torch.dtype):
    try:
        import ops.deepseek_layer as mod
    except ModuleNotFoundError as e:
        if "deepseek_layer" in str(e):
            return None, "ops/deepseek_layer.py does not exist"
        return None, f"importing ops.deepseek_layer failed: {e}"
    except Exception as e:  # noqa: BLE001
        return None, f"importing ops.deepseek_layer failed: {type(e).__name__}: {e}"
    hook = next((getattr(mod, h) for h in HOOKS if callable(getattr(mod, h, None))), None)
    if hook is None:
        return None, f"ops.deepseek_layer exposes none of {', '.join(HOOKS)}"
    try:
        params = inspect.signature(hook).parameters
    except (TypeError, ValueError):
        params = {}
    offer = dict(device=device, dtype=dtype, generator=torch.Generator().manual_seed(0))
    kw = {k: v for k, v in offer.items() if k in params}
    try:
        built = hook(**kw)
    except Exception as e:  # noqa: BLE001
        return None, f"{hook.__name__}({', '.join(kw)}) failed: {type(e).__name__}: {e}"
    if isinstance(built, tuple) and len(built) in (2, 3) and callable(built[0]):
        fn, args = built[0], tuple(built[1]) if isinstance(built[1], (tuple, list)) else (built[1],)
        kwargs = dict(built[2]) if len(built) == 3 else {}
    elif callable(built) and callable(getattr(built, "example_inputs", None)):
        ex = built.example_inputs()
        fn = built
        args, kwargs = ((), dict(ex)) if isinstance(ex, dict) else (tuple(ex), {})
    else:
        return None, f"{hook.__name__} returned {type(built).__name__}, expected (fn, args[, kwargs]) or a module " \
                     "with example_inputs()"
    return (fn, args, kwargs), None


def layer_view(device: str | torch.device, *, dtype: torch.dtype = torch.bfloat16, peaks=None, ceilings=None,
               specs: dict | None = None) -> dict:
    """Run the layer view; returns ``{"available": bool, "reason": str, "total_us": float, "ops": [rows]}`` where a
    row is ``{op, calls, flops, time_us, share_pct, tflops, pct_peak, pct_achievable}``."""
    from .peaks import ceiling_value
    from .timers import time_fn
    dev = torch.device(device)
    built, reason = _build(dev, dtype)
    if built is None:
        return {"available": False, "reason": reason, "ops": []}
    fn, args, kwargs = built
    try:
        with torch.no_grad():
            call = lambda: fn(*args, **kwargs)  # noqa: E731
            call()
            total = time_fn(call, dev, mode="events", quick=True)
            with route_through_dispatcher():
                from torch.utils.flop_counter import FlopCounterMode
                with FlopCounterMode(display=False) as fc:
                    call()
                flops = {_op_name(k): int(v) for k, v in fc.get_flop_counts().get("Global", {}).items()}
                from torch.profiler import ProfilerActivity, profile
                acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
                with profile(activities=acts) as prof:
                    call()
                    if dev.type == "cuda":
                        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        return {"available": False, "reason": f"running the layer failed: {type(e).__name__}: {e}", "ops": []}

    use_device = dev.type == "cuda"
    times: dict[str, float] = {}
    calls: dict[str, int] = {}
    whole = 0.0
    for ev in prof.key_averages():
        t_self = (getattr(ev, "self_device_time_total", 0.0) if use_device else ev.self_cpu_time_total) or 0.0
        whole += t_self
        if ev.key.startswith("ds::"):
            name = ev.key[4:]
            t = (getattr(ev, "device_time_total", 0.0) if use_device else ev.cpu_time_total) or 0.0
            times[name] = times.get(name, 0.0) + t
            calls[name] = calls.get(name, 0) + ev.count
    if not use_device:
        whole = max(whole, total.p50_us)
    rows = []
    specs = specs or {}
    for name in sorted(set(times) | {k for k in flops if k in specs}):
        t = times.get(name, 0.0)
        f = flops.get(name, 0)
        tfl = f / (t * 1e-6) / 1e12 if t > 0 else None
        kind = getattr(specs.get(name), "compute", "bf16")
        pk = peaks.compute(kind).value if peaks is not None and peaks.compute(kind) else None
        ach = ceiling_value(ceilings or {}, kind)
        rows.append(dict(op=name, calls=calls.get(name, 0), flops=f, time_us=t,
                         share_pct=100 * t / whole if whole else None, tflops=tfl,
                         pct_peak=100 * tfl / pk if (tfl and pk) else None,
                         pct_achievable=100 * tfl / ach if (tfl and ach) else None))
    return {"available": True, "reason": "", "total_us": total.p50_us, "profiled_us": whole,
            "time_basis": "device (CUDA profiler)" if use_device else "CPU time (profiler)", "ops": rows}
