"""``python -m perf --amla-batch-invariance``: the cost of ds::amla's batch-invariant mode, off and on side by side in
one run, on CUDA.

Grid: B ∈ {1, 16, 64}, S_q ∈ {1, 2}, N ∈ {16, 128}, L ∈ {1K, 4K, 16K} (the ``amla`` OpSpec shapes of those names).
Mode on = inside ``ops.batch_invariant()``; mode off = outside it with ``DS_OPS_BATCH_INVARIANT`` unset. Each case is
timed by CUDA-graph replay (perf/timers.py) over rotated input sets, off / on / on / off, and each mode's time is the
median of its timings, so drift hits both alike. The on output is checked against the off output with the op's
tolerance (both are checked against the reference by the main report and the tests), and "bits equal" says whether
the two outputs are identical (where the default path splits a request differently they are not: a column of
"yes" everywhere means the mode did not change the kernels' plan). Prints a markdown table (µs off, µs on,
on / off) and writes it with the raw numbers to ``--out`` (batch_invariance.md / .json).
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys

import torch

GRID = dict(B=(1, 16, 64), S_q=(1, 2), N=(16, 128), L=(1024, 4096, 16384))
ENV = "DS_OPS_BATCH_INVARIANT"


def mode(on: bool):
    """The context for one side: ``ops.batch_invariant()`` when on; the environment variable unset when off.
    Raises RuntimeError when this checkout's ops has no ``batch_invariant``."""
    import ops
    cm = getattr(ops, "batch_invariant", None)
    if not callable(cm):
        raise RuntimeError("ops.batch_invariant() does not exist in this checkout: ds::amla's batch-invariant mode "
                           f"(ops.batch_invariant() / {ENV}=1) is needed for --amla-batch-invariance")
    return cm() if on else _env_unset()


@contextlib.contextmanager
def _env_unset():
    old = os.environ.pop(ENV, None)
    try:
        yield
    finally:
        if old is not None:
            os.environ[ENV] = old


def shape_names() -> list[str]:
    return [f"b{B}_sq{S}_n{N}_l{L}" for B in GRID["B"] for S in GRID["S_q"] for N in GRID["N"] for L in GRID["L"]]


def run_grid(names: list[str], dev: torch.device, *, backend: str = "triton", timer=None,
             budget_s: float = 0.5) -> list[dict]:
    """One row per ``amla`` shape name: µs off / on (median of the off, on, on, off timings by ``timer``, default
    :func:`perf.timers.graph_time_us`), on / off, the check of the on output against the off output and whether
    they are bit for bit equal."""
    import ops
    from ops._library import SPECS
    from .check import check_outputs
    from .runner import _arg_checks, make_inputs
    from .specs import OpEntry, find_dsop
    from .timers import graph_time_us
    timer = timer or graph_time_us
    spec = SPECS["amla"]
    op, mod = find_dsop("amla")
    entry = OpEntry(spec, op, mod)
    rows = []
    with ops.backend(backend), _arg_checks(False):   # the data-dependent checks sync the host: off, as in graphs
        for name in names:
            sets = [make_inputs(entry, spec.shapes[name], dtype=torch.bfloat16, device=dev, seed=i) for i in range(4)]
            fns = [lambda kw=kw: op(**kw) for kw in sets]
            times: dict[bool, list[float]] = {False: [], True: []}
            for on in (False, True, True, False):
                with mode(on):
                    times[on].append(timer(fns, budget_s=budget_s).p50_us)
            with mode(False):
                off_out = op(**sets[0])
            with mode(True):
                on_out = op(**sets[0])
            v = check_outputs(on_out, off_out, spec.tolerance)
            t_off, t_on = statistics.median(times[False]), statistics.median(times[True])
            rows.append(dict(shape=name, us_off=t_off, us_on=t_on, ratio=t_on / t_off, samples_off=times[False],
                             samples_on=times[True], check=v.label, check_detail=v.detail,
                             bitwise_equal=all(torch.equal(a, b) for a, b in zip(on_out, off_out))))
            print(f"{name}: off {t_off:.2f} µs, on {t_on:.2f} µs, on/off {t_on / t_off:.3f}, {v.label}",
                  file=sys.stderr, flush=True)
            del sets, fns
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def table(rows: list[dict], device_name: str) -> str:
    lines = [f"ds::amla batch-invariant mode on {device_name}: CUDA-graph replay, median of 2 timings per mode "
             "(off / on / on / off), 4 rotated input sets", "",
             "| shape | µs off | µs on | on / off | on vs off | bits equal |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['shape']} | {r['us_off']:.2f} | {r['us_on']:.2f} | {r['ratio']:.3f} | {r['check']} | "
              f"{'yes' if r['bitwise_equal'] else 'no'} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(device: str | None = None, quick: bool = False, out: str = "perf_out") -> int:
    """Run the comparison over :data:`GRID`; returns 0, 1 when an on output is outside the tolerance of the off
    output. Raises RuntimeError without the mode or without CUDA, before any work."""
    mode(True)                          # fail before any work when the mode does not exist
    if not torch.cuda.is_available() or (device and not device.startswith("cuda")):
        raise RuntimeError("--amla-batch-invariance runs on CUDA only (the Triton kernel's split policy is what it "
                           "measures)")
    dev = torch.device(device or "cuda")
    rows = run_grid(shape_names(), dev, budget_s=0.25 if quick else 0.5)
    text = table(rows, torch.cuda.get_device_name(dev))
    print(text)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "batch_invariance.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "batch_invariance.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return 1 if any(r["check"] != "PASS" for r in rows) else 0
