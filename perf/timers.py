"""Timers: device time of one call, p20/p50/p80 in microseconds.

* CUDA: ``triton.testing.do_bench`` (CUDA events around each call, L2 flushed before each call by zeroing a 256 MB
  buffer, warm-up first; quantiles 0.2/0.5/0.8) — ``"events"``; or ``triton.testing.do_bench_cudagraph`` (one graph of
  many calls, replayed; no launch gaps) — ``"cudagraph"``, for tiny kernels where launch overhead (~3 µs) would
  dominate. ``"auto"`` times with events and re-times with a graph when the median is under
  :data:`CUDAGRAPH_BELOW_US` (falls back to events, with the reason, when capture fails: e.g. a host sync).
* NPU (torch_npu): device events (``torch.npu.Event``) around each call after an L2 flush, same statistics;
  :func:`profile_device_time_us` gives the profiler's summed device-kernel time (best effort).
* CPU: wall clock (``time.perf_counter``), a few reps after one warm-up call, median.

Callers pass a zero-argument callable; to defeat caches across calls, the callable itself rotates among several
input sets (see ``perf.__main__``). :func:`host_call_us` measures back-to-back eager calls (host + device), which is
what dispatch overhead shows up in.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import torch

CUDAGRAPH_BELOW_US = 30.0


@dataclasses.dataclass
class Timing:
    p20_us: float
    p50_us: float
    p80_us: float
    method: str           # "events" | "cudagraph" | "wall" | "npu-events"
    note: str = ""


def _quantiles(samples: list[float], qs=(0.2, 0.5, 0.8)) -> list[float]:
    s = sorted(samples)
    out = []
    for q in qs:
        pos = q * (len(s) - 1)
        lo, hi = int(pos), min(int(pos) + 1, len(s) - 1)
        out.append(s[lo] + (s[hi] - s[lo]) * (pos - lo))
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":  # pragma: no cover - needs an NPU
        torch.npu.synchronize()


def time_fn(fn: Callable[[], object], device: str | torch.device, *, mode: str = "auto", quick: bool = False,
            reps: int | None = None, budget_s: float | None = None) -> Timing:
    """Time ``fn()`` on ``device``; see the module docstring for the methods. ``mode``: ``auto``, ``events``,
    ``cudagraph`` (CUDA), ignored elsewhere. ``quick`` shortens warm-up and repetitions; ``reps`` (CPU/NPU) and
    ``budget_s`` (CPU wall-time budget for the repetitions) bound the work."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return _time_cuda(fn, mode, quick)
    if dev.type == "npu":  # pragma: no cover - needs an NPU
        return _time_npu(fn, quick, reps)
    return _time_wall(fn, dev, reps=reps or (5 if quick else 10), budget_s=budget_s or (0.5 if quick else 2.0))


def _time_wall(fn, dev, *, reps: int, budget_s: float) -> Timing:
    _sync(dev)
    t0 = time.perf_counter()
    fn()  # warm-up
    _sync(dev)
    first = time.perf_counter() - t0
    n = max(3, min(reps, int(budget_s / max(first, 1e-6))))
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        samples.append((time.perf_counter() - t0) * 1e6)
    q = _quantiles(samples)
    return Timing(q[0], q[1], q[2], "wall", f"{n} reps")


def _time_cuda(fn, mode: str, quick: bool) -> Timing:
    import triton.testing as tt
    warmup, rep = (10, 40) if quick else (25, 100)
    note = ""
    if mode in ("auto", "events"):
        q = tt.do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.2, 0.5, 0.8])
        t = Timing(q[0] * 1e3, q[1] * 1e3, q[2] * 1e3, "events")
        if mode == "events" or t.p50_us >= CUDAGRAPH_BELOW_US:
            return t
    try:
        # do_bench_cudagraph captures on its own side stream; the op path must not sync the host
        q = tt.do_bench_cudagraph(fn, rep=rep // 2 if quick else rep, quantiles=[0.2, 0.5, 0.8])
        return Timing(q[0] * 1e3, q[1] * 1e3, q[2] * 1e3, "cudagraph")
    except Exception as e:  # noqa: BLE001 - capture fails on ops that sync the host; report it
        torch.cuda.synchronize()
        note = f"graph capture failed ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
        if mode == "cudagraph":
            q = tt.do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.2, 0.5, 0.8])
            return Timing(q[0] * 1e3, q[1] * 1e3, q[2] * 1e3, "events", note)
        t.note = note
        return t


def _time_npu(fn, quick: bool, reps: int | None) -> Timing:  # pragma: no cover - needs an NPU
    import torch_npu  # noqa: F401
    flush = torch.empty(512 << 20, dtype=torch.int8, device="npu")
    for _ in range(3 if quick else 10):
        fn()
    torch.npu.synchronize()
    n = reps or (20 if quick else 100)
    starts = [torch.npu.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.npu.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        flush.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.npu.synchronize()
    q = _quantiles([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])
    return Timing(q[0], q[1], q[2], "npu-events", f"{n} reps, 512 MiB flush")


def profile_device_time_us(fn: Callable[[], object], device: str | torch.device, *, reps: int = 5) -> float | None:
    """Summed device-kernel time of one ``fn()`` call (µs) from the profiler (torch.profiler on CUDA,
    torch_npu.profiler on NPU), averaged over ``reps`` calls; None when the profiler is unavailable. Best effort."""
    dev = torch.device(device)
    try:
        fn()
        _sync(dev)
        if dev.type == "cuda":
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(reps):
                    fn()
                _sync(dev)
            total = sum(getattr(e, "self_device_time_total", 0.0) or 0.0 for e in prof.key_averages())
            return total / reps
        if dev.type == "npu":  # pragma: no cover - needs an NPU
            import torch_npu
            with torch_npu.profiler.profile(activities=[torch_npu.profiler.ProfilerActivity.NPU]) as prof:
                for _ in range(reps):
                    fn()
                torch.npu.synchronize()
            total = sum(getattr(e, "self_device_time_total", 0.0) or getattr(e, "self_npu_time_total", 0.0) or 0.0
                        for e in prof.key_averages())
            return total / reps
    except Exception:  # noqa: BLE001 - best effort
        return None
    return None


def host_call_us(fn: Callable[[], object], device: str | torch.device, *, budget_s: float = 0.05,
                 max_calls: int = 200) -> float:
    """Wall µs per call of back-to-back calls of ``fn`` (synchronised once at the end): host overhead where the
    kernel is short, device time where it is long. Used to compare ``torch.ops.ds.<op>`` with the eager fast path."""
    dev = torch.device(device)
    fn()
    _sync(dev)
    t0 = time.perf_counter()
    fn()
    _sync(dev)
    one = time.perf_counter() - t0
    n = max(3, min(max_calls, int(budget_s / max(one, 1e-7))))
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    _sync(dev)
    return (time.perf_counter() - t0) / n * 1e6
