"""Timers: device time of one call, p20/p50/p80 in microseconds, with a run-to-run spread.

* CUDA, ``"cudagraph"`` (the default through ``"auto"``): :func:`graph_time_us`. One CUDA graph holds ``calls``
  back-to-back calls cycling through the rotated input sets; it is replayed R times with a CUDA event pair around each
  replay; one sample = replay time / calls. Capturing takes the host (Python, dispatch, launch: 100–250 µs per call
  on the H200 machine) out of the measurement: what is left is the device time of the call plus the gap between
  kernels inside a graph (~1 µs). ``calls`` and R are chosen from one pre-measured replay so that a case costs about
  ``budget_s`` (0.5 s): tiny kernels get up to 256 calls per replay and up to 100 replays, a 50–80 ms reference
  gets calls = 1 and R = 5. Warm-up (Triton compilation, cuBLAS workspaces) runs on a side stream before capture,
  as PyTorch's graph docs require.
* CUDA, ``"events"`` (:func:`events_time_us`; the fallback when capture fails, e.g. an op that syncs the host, and
  the timer of the layer view and the ceilings): one event pair around each call, the 256 MB L2 flush of
  ``triton.testing.do_bench`` before it, and a GPU sleep (``torch.cuda._sleep``) long enough for the host to enqueue
  the call before the device gets to it, so host launch latency is not in the interval. An op that syncs the host
  inside the call gets no head start (its host time is part of what it costs); the note says so.
* NPU (torch_npu): device events (``torch.npu.Event``) around each call after an L2 flush, same statistics.
* CPU: wall clock (``time.perf_counter``), a few reps after one warm-up call.

Spread: ``spread_pct = (p80 − p20) / p50 · 100`` over the samples of one run. docs/performance.md says what a re-run
reproduces (p50 within ``spread_pct`` + :data:`REPRO_FLOOR_PCT`) and ``perf/repro_check.py`` checks it.

:func:`host_call_us` measures back-to-back eager calls (host + device, synchronised once): the dispatch-overhead view.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Sequence

import torch

REPRO_FLOOR_PCT = 3.0
"""Added to a row's ``spread_pct`` when judging whether a re-run reproduced its p50 (clock and thermal drift between
processes, allocation addresses; see docs/performance.md)."""

HOST_BOUND_SPREAD_PCT = 60.0
"""Spread floor of a row whose call syncs the host (the amla and mla_prolog references: Python loops with device →
host copies; not capturable, timed by events that include host time): such rows move far more between processes
than within one, so their spread column says at least ±60 %."""


def rerun_tolerance_pct(spread_pct: float | None) -> float:
    """How far (± %) a re-run's p50 may land from a row's p50 and still reproduce it: the row's spread plus
    :data:`REPRO_FLOOR_PCT` (perf/repro_check.py judges with it; so does ``--merge`` for the checks it keeps)."""
    return float(spread_pct or 0.0) + REPRO_FLOOR_PCT


GRAPH_MAX_CALLS = 256        # calls per graph: capture costs ~host time per call, 256 × 250 µs ≈ 64 ms
GRAPH_TARGET_REPLAY_US = 2000.0
MIN_REPLAYS, MAX_REPLAYS = 5, 100
FLUSH_BYTES = 256 << 20      # as triton.testing.do_bench


@dataclasses.dataclass
class Timing:
    """One timed op call: the 20th / 50th / 80th percentile of µs per call over ``samples`` samples."""
    p20_us: float
    p50_us: float
    p80_us: float
    method: str           # "events" | "cudagraph" | "wall" | "npu-events"
    note: str = ""
    calls: int = 1        # calls per sample (graph: calls per replay)
    samples: int = 0      # replays / repetitions the quantiles are over
    host_bound: bool = False  # the call syncs the host: events include host time (see HOST_BOUND_SPREAD_PCT)
    samples_us: list[float] = dataclasses.field(default_factory=list, repr=False)   # µs per call, each sample

    @property
    def spread_pct(self) -> float | None:
        """(p80 − p20) / p50 · 100: the run's own spread, in % of the median; at least HOST_BOUND_SPREAD_PCT for a
        call that syncs the host (its events hold host time, which moves between runs far more than within one)."""
        if not self.p50_us or self.p50_us <= 0 or math.isnan(self.p50_us):
            return None
        own = 100.0 * (self.p80_us - self.p20_us) / self.p50_us
        return max(own, HOST_BOUND_SPREAD_PCT) if self.host_bound else own

    def describe(self) -> str:
        if self.method == "cudagraph":
            return f"cudagraph {self.calls} calls × {self.samples} replays"
        if self.samples:
            return f"{self.method} × {self.samples}"
        return self.method


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


def _as_fns(fn) -> list[Callable[[], object]]:
    return list(fn) if isinstance(fn, (list, tuple)) else [fn]


def time_fn(fn: Callable[[], object] | Sequence[Callable[[], object]], device: str | torch.device, *,
            mode: str = "auto", quick: bool = False, reps: int | None = None, budget_s: float | None = None,
            warm: bool = True) -> Timing:
    """Time one call on ``device``. ``fn``: a zero-argument callable, or a list of them (one per rotated input set;
    calls cycle through the list). ``mode`` (CUDA): ``auto`` = :func:`graph_time_us`, :func:`events_time_us` when
    capture fails (reason in ``note``); ``cudagraph`` = graph only (raises RuntimeError when capture fails);
    ``events``. Ignored elsewhere. ``budget_s``: seconds one timing may take (default: CUDA 0.5, 0.25 with
    ``quick``; CPU 2.0, 0.5 with ``quick``); ``reps``: repetitions (events / CPU / NPU; CPU default 10, 5 with
    ``quick``); ``warm``: the events timer calls each fn once first. Returns a :class:`Timing` (µs per call).
    Raises ValueError for a mode other than auto / cudagraph / events."""
    if mode not in ("auto", "cudagraph", "events"):
        raise ValueError(f"mode must be 'auto', 'cudagraph' or 'events', got {mode!r}")
    dev = torch.device(device)
    fns = _as_fns(fn)
    if dev.type == "cuda":
        budget = budget_s if budget_s is not None else (0.25 if quick else 0.5)
        if mode == "events":
            return events_time_us(fns, budget_s=budget, reps=reps, warm=warm)
        try:
            return graph_time_us(fns, budget_s=budget)
        except CaptureError as e:  # capture fails on ops that sync the host; report it
            torch.cuda.synchronize()
            why = f"graph capture failed ({e})"
            if mode == "cudagraph":
                raise RuntimeError(why) from e
            t = events_time_us(fns, budget_s=budget, reps=reps, warm=False)
            t.note = "; ".join(x for x in (why, t.note) if x)
            return t
    if dev.type == "npu":  # pragma: no cover - needs an NPU
        return _time_npu(fns, quick, reps)
    return _time_wall(fns, dev, reps=reps or (5 if quick else 10), budget_s=budget_s or (0.5 if quick else 2.0))


class CaptureError(RuntimeError):
    """CUDA-graph capture of the timed calls failed (typically: the op syncs the host)."""


def capture_failure_reason(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return f"{type(e).__name__}: {s[0][:140] if s else ''}"


# ----------------------------------------------------------------------------------------------
# CPU
# ----------------------------------------------------------------------------------------------
def _time_wall(fns, dev, *, reps: int, budget_s: float) -> Timing:
    _sync(dev)
    t0 = time.perf_counter()
    fns[0]()  # warm-up
    _sync(dev)
    first = time.perf_counter() - t0
    n = max(3, min(reps, int(budget_s / max(first, 1e-6))))
    samples = []
    for i in range(n):
        f = fns[i % len(fns)]
        t0 = time.perf_counter()
        f()
        _sync(dev)
        samples.append((time.perf_counter() - t0) * 1e6)
    q = _quantiles(samples)
    return Timing(q[0], q[1], q[2], "wall", f"{n} reps", calls=1, samples=n, samples_us=samples)


# ----------------------------------------------------------------------------------------------
# CUDA
# ----------------------------------------------------------------------------------------------
def _cycles_per_us() -> float:
    try:
        khz = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "clock_rate", 0) or 0
    except Exception:  # noqa: BLE001
        khz = 0
    return khz / 1e3 if khz > 0 else 2000.0


def _gpu_sleep_us(us: float) -> None:
    """Keep the current stream busy for about ``us`` µs (so the host can enqueue work ahead of the device)."""
    if us > 0:
        torch.cuda._sleep(int(us * _cycles_per_us()))


def _warm_up(fns: Sequence[Callable[[], object]]) -> None:
    """Every fn once on the current stream (compiles Triton kernels, fills caches), then once on a side stream (as
    PyTorch requires before capture: lazy cuBLAS/cuDNN workspace set-up must not happen inside the graph)."""
    for f in fns:
        f()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()


def _capture(fns: Sequence[Callable[[], object]], calls: int) -> "torch.cuda.CUDAGraph":
    """``calls`` calls cycling through ``fns``, captured on a side stream into one graph with its own private memory
    pool. Unlike ``with torch.cuda.graph(...)`` the caller's stream is restored even when capture fails (an op that
    syncs the host), and no gc.collect() runs per capture. Each graph gets its own pool: a pool shared between the
    pre-measure graph and the timed graph trips CUDACachingAllocator's ``use_count > 0`` assert."""
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        g.capture_begin()
        err = None
        try:
            for i in range(calls):
                fns[i % len(fns)]()
        except BaseException as e:  # noqa: BLE001 - end the capture first, then report the op's own error
            err = e
        try:
            g.capture_end()
        except Exception as e:  # noqa: BLE001
            if err is None:
                raise CaptureError(capture_failure_reason(e)) from e
        if err is not None:
            raise CaptureError(capture_failure_reason(err)) from err
    cur.wait_stream(side)
    return g


def _replay_times_us(g, replays: int, head_start_us: float) -> list[float]:
    """Event pair around each of ``replays`` back-to-back replays (no host sync in between; a GPU sleep first lets
    the host enqueue ahead, so the intervals hold device time only)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    torch.cuda.synchronize()
    _gpu_sleep_us(head_start_us)
    for i in range(replays):
        starts[i].record()
        g.replay()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


def plan_calls(one_us: float, host_per_call_s: float, n_sets: int, budget_s: float) -> int:
    """Calls per graph from one pre-measured call (``one_us`` device µs, ``host_per_call_s`` host seconds to
    capture it): enough for a replay of about :data:`GRAPH_TARGET_REPLAY_US`, rounded up to whole passes over the
    ``n_sets`` input sets (also when one pass lasts up to 5× the target), at most :data:`GRAPH_MAX_CALLS`, and no
    more than a fifth of ``budget_s`` of capture (host) time — but at least one pass over the sets while that stays
    under the maximum."""
    calls = max(1, math.ceil(GRAPH_TARGET_REPLAY_US / max(one_us, 1e-3)))
    if calls >= n_sets or n_sets * one_us <= 5 * GRAPH_TARGET_REPLAY_US:
        calls = n_sets * math.ceil(calls / n_sets)
    cap = max(1, int(0.2 * budget_s / max(host_per_call_s, 1e-6)))
    calls = max(1, min(calls, GRAPH_MAX_CALLS, max(cap, min(n_sets, GRAPH_MAX_CALLS))))
    return calls // n_sets * n_sets if calls >= n_sets else calls


def plan_replays(left_s: float, replay_us: float) -> int:
    """Timed replays that fit the ``left_s`` seconds of the budget, :data:`MIN_REPLAYS` to :data:`MAX_REPLAYS`."""
    return int(max(MIN_REPLAYS, min(MAX_REPLAYS, left_s / max(replay_us * 1e-6, 1e-7))))


def graph_time_us(fns: list[Callable[[], object]], calls: int | None = None, replays: int | None = None,
                  budget_s: float = 0.5) -> Timing:
    """Device time of one call by CUDA-graph replay.

    fns:      zero-argument callables, one per rotated input set (a list of one is fine); the graph cycles through
              them, so with sets totalling ≥ 3× the L2 each call finds its data in HBM, not in L2.
    calls:    calls captured into the graph (default: chosen so one replay lasts about 2 ms, at most 256, at least
              one pass over ``fns`` unless a single call already exceeds the target).
    replays:  timed replays (default: as many as fit ``budget_s``, 5 to 100).
    budget_s: seconds the timing may take after warm-up.

    Returns Timing(p20, p50, p80) in µs per call over the replays (method ``"cudagraph"``; ``calls``/``samples``
    hold calls per replay and the number of replays). Raises :class:`CaptureError` (a RuntimeError) when capture
    fails (an op that syncs the host: ``cudaErrorStreamCaptureUnsupported`` and the like) — callers fall back to
    :func:`events_time_us`; errors of the calls themselves (in warm-up) propagate as they are."""
    fns = list(fns)
    if not fns:
        raise ValueError("graph_time_us: fns is empty")
    t_start = time.perf_counter()
    _warm_up(fns)
    notes = []
    g, warm = None, None
    if calls is None:
        # one pre-measured call: a graph of the first set only, replayed twice (the first replay uploads the graph)
        t0 = time.perf_counter()
        g1 = _capture(fns, 1)
        host_per_call = time.perf_counter() - t0
        ts = _replay_times_us(g1, 2, head_start_us=50.0)
        one_us = max(ts[-1], 1e-3)
        calls = plan_calls(one_us, host_per_call, len(fns), budget_s)
        if calls == 1:             # a slow call: the pre-measure graph is the graph
            g, warm = g1, one_us
        else:
            del g1
    if g is None:
        g = _capture(fns, calls)
        warm = _replay_times_us(g, 1, head_start_us=50.0)[0]     # upload + first touch
    if replays is None:
        left = budget_s - (time.perf_counter() - t_start)
        replays = plan_replays(left, warm)
    head = min(5000.0, 30.0 * replays) if warm < 1000 else 200.0
    samples = [t / calls for t in _replay_times_us(g, replays, head_start_us=head)]
    del g
    q = _quantiles(samples)
    if calls < len(fns):
        notes.append(f"{calls} of {len(fns)} input sets per replay")
    return Timing(q[0], q[1], q[2], "cudagraph", "; ".join(notes), calls=calls, samples=replays, samples_us=samples)


_FLUSH: dict[int, torch.Tensor] = {}


def _flush_buffer() -> torch.Tensor:
    dev = torch.cuda.current_device()
    if dev not in _FLUSH:
        _FLUSH[dev] = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=f"cuda:{dev}")
    return _FLUSH[dev]


def events_time_us(fns: list[Callable[[], object]], *, budget_s: float = 0.5, reps: int | None = None,
                   flush_l2: bool = True, warm: bool = True) -> Timing:
    """Device time of one call with a CUDA event pair around each call (L2 flushed before each; calls cycle through
    ``fns``). A GPU sleep before each call, longer than the host needs to enqueue it (measured), keeps host launch
    latency out of the interval; an op that syncs the host inside the call gets none (noted). ``reps`` samples
    (default: what fits ``budget_s``, 5 to 100). ``warm``: call each fn once first (compilation); pass False when
    the caller has just run them."""
    fns = list(fns)
    flush = _flush_buffer() if flush_l2 else None
    if warm:
        for f in fns:
            f()
    torch.cuda.synchronize()
    # host time to enqueue one call while the device is busy (a call that syncs the host waits for the sleep)
    _gpu_sleep_us(20000.0)
    t0 = time.perf_counter()
    fns[0]()
    host_us = (time.perf_counter() - t0) * 1e6
    torch.cuda.synchronize()
    syncs = host_us > 15000.0
    t0 = time.perf_counter()
    fns[0]()
    torch.cuda.synchronize()
    one_s = time.perf_counter() - t0
    head = 0.0 if syncs else min(1.3 * host_us + 20.0, 20000.0)
    per_sample = one_s + head * 1e-6 + 1e-4
    n = reps or plan_replays(budget_s, per_sample * 1e6)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        if flush is not None:
            flush.zero_()
        _gpu_sleep_us(head)
        starts[i].record()
        fns[i % len(fns)]()
        ends[i].record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    q = _quantiles(samples)
    note = (f"the call syncs the host: events include its host time (spread floor {HOST_BOUND_SPREAD_PCT:g} %)"
            if syncs else "")
    return Timing(q[0], q[1], q[2], "events", note, calls=1, samples=n, host_bound=syncs, samples_us=samples)


# ----------------------------------------------------------------------------------------------
# NPU
# ----------------------------------------------------------------------------------------------
def _time_npu(fns, quick: bool, reps: int | None) -> Timing:  # pragma: no cover - needs an NPU
    import torch_npu  # noqa: F401
    flush = torch.empty(512 << 20, dtype=torch.int8, device="npu")
    for i in range(3 if quick else 10):
        fns[i % len(fns)]()
    torch.npu.synchronize()
    n = reps or (20 if quick else 100)
    starts = [torch.npu.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.npu.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        flush.zero_()
        starts[i].record()
        fns[i % len(fns)]()
        ends[i].record()
    torch.npu.synchronize()
    samples = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    q = _quantiles(samples)
    return Timing(q[0], q[1], q[2], "npu-events", "512 MiB flush", calls=1, samples=n, samples_us=samples)


def host_call_us(fn: Callable[[], object], device: str | torch.device, *, budget_s: float = 0.02,
                 max_calls: int = 100) -> float:
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
