"""The report's cases as pytest-benchmark benchmarks: ``pytest perf --benchmark-only`` (perf/test_benchmarks.py).

One benchmark per op × named shape × backend that can run here, with the shapes the report picks
(:func:`perf.specs.plan_shapes`: on CPU the op's CPU-sized shapes; on an accelerator every DeepSeek-V3 shape).
Backends: the reference; Triton on CUDA; the Ascend C kernels on an NPU, or through the CPU twin when
``ops._ascendc.unavailable_reason("cpu")`` is None. Each case runs through the report's own runner
(perf/runner.py: the same inputs, the same check against the reference, the same timer — CUDA-graph replay or
events on CUDA, wall clock on CPU), and its per-call samples become the benchmark's rounds, so pytest-benchmark's
statistics, ``--benchmark-save`` and ``--benchmark-compare`` work on the device times. ``extra_info`` holds FLOPs,
bytes, TFLOPS, GB/s, % of peak, % of the measured ceiling, the bound and the timer; an Ascend C twin row's rounds are
the twin's CPU wall time and its modeled 910B time sits under ``extra_info["modeled 910B"]``. ``DS_OPS_PERF_DEVICE``
chooses the device (default: cuda, else npu, else cpu).
"""
from __future__ import annotations

import gc
import os
from typing import Any

import torch

from . import peaks as P
from . import specs as S
from .modeled import LABEL as MODELED
from .runner import Runner

INFO_KEYS = ("flops", "bytes", "tflops", "gbps", "intensity", "bound", "pct_peak", "pct_peak_compute", "pct_peak_bw",
             "pct_achievable", "timer", "check", "check_detail", "device", "dtype")


def device() -> torch.device:
    return torch.device(os.environ.get("DS_OPS_PERF_DEVICE") or P.default_device())


def runnable_backends(entry: S.OpEntry, dev: torch.device) -> list[str]:
    """The backends of ``entry`` that can run on ``dev`` (the Triton interpreter is not a benchmark)."""
    out = []
    for b in S.backends_of(entry):
        if b == "triton" and dev.type != "cuda":
            continue
        if b == "ascendc":
            from ops import _ascendc
            if _ascendc.unavailable_reason(dev.type) is not None:
                continue
        out.append(b)
    return out


def cases(dev: torch.device) -> list[tuple[S.OpEntry, S.ShapeCase, str]]:
    """(entry, shape case, backend) of every benchmark on ``dev``."""
    import ops  # noqa: F401 - registers the ops
    out = []
    for e in S.collect_ops():
        for c in S.plan_shapes(e, None, device_type=dev.type, quick=False):
            out += [(e, c, b) for b in runnable_backends(e, dev)]
    return out


def make_runner(dev: torch.device) -> Runner:
    """A report runner for ``dev`` (no layer view, peers or dispatch timing), its ceilings measured once."""
    from .__main__ import setup, parse_args
    argv = ["--device", dev.type, "--no-layer", "--no-peers", "--no-dispatch", "--out", os.devnull]
    runner, _ = setup(parse_args(argv), argv)
    return runner


def run(runner: Runner, entry: S.OpEntry, case: S.ShapeCase, backend: str) -> dict:
    """The report's row for one case and backend: checked and timed (``samples_us``: µs per call, each sample).
    An Ascend C row on CPU also gets ``samples_us`` of the twin's wall time and ``modeled`` (its modeled columns)."""
    runner.args.backends = [backend]
    runner.rows.clear()
    runner.run_case(entry, case)
    (row,) = [r for r in runner.rows if r["backend"] == backend]
    if runner.dev.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
    if backend == "ascendc" and runner.dev.type == "cpu" and row.get("check") in ("PASS", "FAIL"):
        row["modeled"] = {k: row.get(k) for k in ("us_p50", "tflops", "gbps", "pct_peak", "pct_peak_compute",
                                                  "pct_peak_bw", "bound", "timer", "device", "note")}
        row.update(twin_wall(runner, entry, case))
    return row


def twin_wall(runner: Runner, entry: S.OpEntry, case: S.ShapeCase) -> dict:
    """The Ascend C CPU twin's wall time per call and the roofline columns of it against this CPU's ceilings."""
    import ops
    from .runner import make_inputs, roofline_metrics
    from .timers import time_fn
    inputs = make_inputs(entry, case.shape, dtype=runner.dtype, device=runner.dev, seed=0)
    flops, nbytes = int(entry.spec.flops(**inputs)), int(entry.spec.bytes(**inputs))
    with ops.backend("ascendc"):
        t = time_fn(lambda: entry.op(**inputs), runner.dev)
    out = roofline_metrics(flops, nbytes, t.p50_us, entry.spec.compute, None, runner.ceilings)
    return dict(out, us_p50=t.p50_us, samples_us=t.samples_us, timer="CPU twin wall clock: " + t.describe(),
                device=runner.meta["device"])


def extra_info(row: dict) -> dict[str, Any]:
    """What ``benchmark.extra_info`` records for a row (the report's columns; modeled 910B ones apart)."""
    info = {k: row.get(k) for k in INFO_KEYS}
    info["shape"] = row.get("shape_dict")
    info["pct_ceiling"] = info.pop("pct_achievable")
    if row.get("modeled"):
        m = dict(row["modeled"])
        m["time_us"] = m.pop("us_p50")
        info[MODELED] = m
    return info


def record(benchmark, samples_us: list[float]) -> None:
    """Hand ``samples_us`` (µs per call) to pytest-benchmark as its rounds: each round advances a virtual clock by
    one sample, so its statistics are those of the report's timer, not of its own wall clock around the call."""
    if not samples_us:
        raise ValueError("no timing samples to record")
    clock = [0.0]
    it = iter(samples_us)

    def one_sample() -> None:
        clock[0] += next(it) * 1e-6

    benchmark._timer = lambda: clock[0]      # the clock pytest-benchmark reads around each round
    benchmark.pedantic(one_sample, rounds=len(samples_us), iterations=1, warmup_rounds=0)
