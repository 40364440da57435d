#!/usr/bin/env python3
"""Does programmatic dependent launch overlap kernels here, eagerly and inside a CUDA graph? (session 10 probe)

1. A one-program spin kernel without gdc_wait, 20 launches back to back: with PDL honoured they run concurrently
   (total ≈ one spin), without it serially (≈ 20 spins).
2. quant_matmul decode buckets at several stage counts, table / pdl, by CUDA-graph replay. (Round 59 also timed a
   variant that asked L2 for the weights before the wait, the since-removed key ``pdl_prefetch`` of commit 942af53:
   docs/perf/quant_sweep12_pdl_probe.txt.)
"""
from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ops.triton import quant as TQ  # noqa: E402
from perf.timers import graph_time_us  # noqa: E402
from reference import quant as RQ  # noqa: E402


@triton.jit
def _spin(out_ptr, n, TRIGGER: tl.constexpr):
    if TRIGGER:
        tl.extra.cuda.gdc_launch_dependents()
    acc = tl.program_id(0).to(tl.float32)
    for i in range(n):
        acc = acc * 0.999 + 1.0
    tl.store(out_ptr + tl.program_id(0), acc)


def eager_us(fns, reps=5):
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)   # ~10 ms of device sleep: the host queues every call before the first runs
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for f in fns:
            f()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / len(fns))
    return statistics.median(ts)


def main():
    out = torch.empty(1, device="cuda")
    for pdl in (False, True):
        launch = dict(launch_pdl=True) if pdl else {}
        f = lambda: _spin[(1,)](out, 20000, TRIGGER=pdl, num_warps=1, **launch)
        f()
        print(f"spin x20 pdl={pdl}: eager {eager_us([f] * 20):.2f} us/call, "
              f"graph {graph_time_us([f], calls=20, replays=10).p50_us:.2f} us/call", flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    cfg = TQ._all_configs()["cuda"]["quant_matmul"]
    for K, N, M, stages in ((7168, 2112, 16, (8, 5, 4, 3)), (1536, 24576, 16, (5, 3, 2)), (7168, 2112, 64, (5, 3)),
                            (7168, 2112, 128, (4, 3)), (7168, 2112, 2, (1,)), (7168, 2112, 1, (1,))):
        sets = []
        for _ in range(max(2, min(16, -(-100 * 2**20 // (K * N)) + 1))):
            w = RQ.pack_weight(torch.randint(-127, 128, (K, N), generator=g, device="cuda", dtype=torch.int8), "cuda")
            sets.append((torch.randint(-127, 128, (M, K), generator=g, device="cuda", dtype=torch.int8), w,
                         torch.rand(N, generator=g, device="cuda"), torch.rand(M, generator=g, device="cuda")))
        b = dict(TQ._bucket(M, cfg, N, K))
        ref = [TQ.quant_matmul_config(*s) for s in sets]
        for st in stages:
            for name, c in (("table", dict(b, num_stages=st)), ("pdl", dict(b, pdl=True, num_stages=st))):
                fns = [lambda s=s, c=c: TQ.quant_matmul_config(*s, config=c) for s in sets]
                same = all(torch.equal(f(), r) for f, r in zip(fns, ref))
                ge = statistics.median(graph_time_us(fns, calls=20, replays=10).p50_us for _ in range(3))
                print(f"M{M} K{K} N{N} s{st} {name:13s}: graph {ge:.2f} us  same={same}", flush=True)


if __name__ == "__main__":
    main()
