#!/usr/bin/env python3
"""Probe (session 14): how the A8W8 T ≤ 2 mla_prolog launches depend on the down GEMM's split count. Prints the
per-kernel device µs (torch.profiler, eager, rotated weights) and the graph-replayed call for the down kernel at
split_k 1 / 2 / 4 / 8 (a "down" override selects the down kernel), so the fused row + query launch's share of the
partial sums is seen apart from the down GEMM. "table": as shipped (since session 14 the streaming GEMV at
T = 1, whose time the profile lists as the down GEMM's). Usage: python3 tests/gpu/probe_prolog_split.py"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from perf import bench_mla_prolog as B  # noqa: E402

for T in (1, 2):
    inp = B.make("a8w8", T, 128)
    sets = B.rotations(inp)
    for sk in (None, 1, 2, 4, 8):
        ov = None if sk is None else {"down": {"split_k": sk}}
        kt = B.profile_kernels(sets, ov)
        g = B.graph_us([B.kernel_call(s, ov) for s in sets] * 2)
        print(f"a8w8 T={T} down split_k {sk or 'table'}: call {g:.2f} us; {B.kernel_us_text(kt)}", flush=True)
