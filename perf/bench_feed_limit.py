#!/usr/bin/env python3
"""What feeds the decode ``quant_matmul`` at M 16–128: the subset kernel (the "cuda" table) against the same GEMM
with features that the triton-ascend 3.2 subset forbids (DESIGN.md "Triton portability rules"), timed side by side.

* ``table``  — ``ds::quant_matmul`` as dispatched (cp.async pipelines, one CTA per SM, the subset).
* ``tma``    — an experiment kept in this file only, never dispatched: the same int32-accumulating ``tl.dot`` and
  fp32 epilogue (bit-identical to the reference), but x and the K-major weight are fed by TMA descriptors
  (``TensorDescriptor``, bulk async copies issued by one thread); ``ws`` adds ``warp_specialize=True`` on the
  K loop (a producer warp) where this Triton supports it.
* ``cublas`` — ``torch._int_mm`` (int32 out, no epilogue): cuBLASLt's own TMA + warp-specialised kernels.

    python3 perf/bench_feed_limit.py [--shapes 16,32,64,128] [--rounds 3] [--out FILE]

CUDA-graph replay of 20 back-to-back calls over weight copies rotated past 2× L2 (every call streams its weights
from HBM); median of the rounds; (%) = weight bytes / time against the measured copy rate. A candidate that does
not build on this Triton is reported as failed, not skipped. Exit status 1 if any output differs from the
reference (cublas: its int32 product against the exact one).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ops.triton import quant as TQ  # noqa: E402
from perf.bench_pdl_ab import _inputs  # noqa: E402  (rotated K-major weight sets past 2× L2)
from perf.peaks import copy_tbs  # noqa: E402
from perf.report import print_and_write_lines  # noqa: E402
from perf.timers import median_graph_us  # noqa: E402
from reference import quant as RQ  # noqa: E402

K, N = 7168, 2112          # qkv_a (W_DQ ‖ W_DKV_KR); the floor shape of issue 4
# (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps): one wave or less at M 16–128 on 132 SMs
TMA_TILES = [(64, 16, 256, 6, 4), (64, 32, 256, 5, 4), (64, 32, 128, 8, 4), (64, 64, 256, 4, 4),
             (128, 32, 256, 4, 8), (128, 64, 128, 4, 8)]


@triton.jit
def _tma_qmm(x_desc, w_desc, ws_ptr, xs_ptr, out_ptr, M, N, K, stride_om, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr, WS: tl.constexpr):
    """out[m, n] = ((fp32 Σ_k x[m, k]·w[n, k]) · ws[n]) · xs[m] → bf16 (the reference's order); w is K-major [N, K].
    Out of the subset on purpose (TMA descriptor loads, optional warp specialisation): an experiment only."""
    n_m = tl.cdiv(M, BLOCK_M)
    pid_m = tl.program_id(0) % n_m
    pid_n = tl.program_id(0) // n_m
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    if WS:   # a separate loop, so a Triton without the keyword still builds the plain variant
        for k in tl.range(0, K, BLOCK_K, num_stages=NUM_STAGES, warp_specialize=True):
            acc = tl.dot(x_desc.load([off_m, k]), w_desc.load([off_n, k]).T, acc, out_dtype=tl.int32)
    else:
        for k in tl.range(0, K, BLOCK_K, num_stages=NUM_STAGES):
            acc = tl.dot(x_desc.load([off_m, k]), w_desc.load([off_n, k]).T, acc, out_dtype=tl.int32)
    om = off_m + tl.arange(0, BLOCK_M)
    on = off_n + tl.arange(0, BLOCK_N)
    mmask = om < M
    nmask = on < N
    ws = tl.load(ws_ptr + on, mask=nmask, other=0.0)
    xs = tl.load(xs_ptr + om, mask=mmask, other=0.0)
    o = acc.to(tl.float32) * ws[None, :] * xs[:, None]
    tl.store(out_ptr + om.to(tl.int64)[:, None] * stride_om + on[None, :], o.to(tl.bfloat16),
             mask=mmask[:, None] & nmask[None, :])


def _tma_call(tile, ws_flag: bool):
    """A launcher for one TMA tile: f(x, w_kn, w_scale, x_scale) → bf16 [M, N]. Descriptors are built per call
    (host-side, as a dispatcher would); the output is allocated per call like ds::quant_matmul's."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    bm, bn, bk, stages, warps = tile

    def f(x, w_kn, w_scale, x_scale):
        M = x.shape[0]
        w_nk = w_kn.t()                      # the packed [N, K] memory (K-major weights)
        out = torch.empty(M, N, device=x.device, dtype=torch.bfloat16)
        xd = TensorDescriptor.from_tensor(x, [bm, bk])
        wd = TensorDescriptor.from_tensor(w_nk, [bn, bk])
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        _tma_qmm[grid](xd, wd, w_scale, x_scale, out, M, N, K, out.stride(0), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                       NUM_STAGES=stages, WS=ws_flag, num_warps=warps)
        return out
    return f


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="16,32,64,128", help="token counts M (K 7168, N 2112)")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds, alternating the candidates (default 3)")
    ap.add_argument("--out", default=None, help="markdown file to write (default: print only)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device (this torch sees none)")
    dev = torch.device("cuda")
    # device-side scratch for descriptors, if this Triton wants one
    if hasattr(triton, "set_allocator"):
        triton.set_allocator(lambda size, align, stream: torch.empty(size, device=dev, dtype=torch.int8))
    g = torch.Generator(device=dev).manual_seed(0)
    copy = copy_tbs(dev)
    cands = {"table": lambda x, w, ws, xs: TQ.quant_matmul(x, w, ws, xs),
             "cublas": lambda x, w, ws, xs: torch._int_mm(x, w)}
    for t in TMA_TILES:
        cands["tma {}x{}x{} s{} w{}".format(*t)] = _tma_call(t, False)
    for t in TMA_TILES[:4]:
        cands["tma+ws {}x{}x{} s{} w{}".format(*t)] = _tma_call(t, True)
    lines = [f"# quant_matmul K{K} N{N}: the subset kernel against TMA / warp-specialised feeds "
             f"({torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
             f"copy {copy:.2f} TB/s)", "",
             f"Command: `python3 perf/bench_feed_limit.py --shapes {a.shapes} --rounds {a.rounds}`. µs per call, "
             "CUDA-graph replay of 20 back-to-back calls over rotated weights, median of the rounds; (%) = weight "
             "bytes / time against the copy rate (floor 50 %). `tma*` are experiments outside the triton-ascend 3.2 "
             "subset, never dispatched; `cublas` is `torch._int_mm` (int32 out, no epilogue).", "",
             "| candidate | " + " | ".join(f"M {m}" for m in a.shapes.split(",")) + " |",
             "|---|" + "---|" * len(a.shapes.split(","))]
    cells: dict[str, list[str]] = {c: [] for c in cands}
    bad = 0
    for m in a.shapes.split(","):
        M = int(m)
        sets = _inputs(M, K, N, dev, g)
        x, w, ws, xs = sets[0]
        ref = RQ.quant_matmul(x.cpu(), w.cpu(), ws.cpu(), xs.cpu())
        exact = RQ.int8_matmul_exact(x.cpu(), w.cpu())
        ok_fns = {}
        for c, f in cands.items():
            try:
                o = f(x, w, ws, xs)
                torch.cuda.synchronize()
                good = torch.equal(o.cpu(), exact if c == "cublas" else ref)
            except Exception as e:  # noqa: BLE001 - a candidate this Triton / torch cannot build is reported
                msg = (str(e).splitlines() or [type(e).__name__])[0][:70]
                cells[c].append(f"failed ({type(e).__name__}: {msg})")
                print(f"M{M} {c}: {type(e).__name__}: {msg}", flush=True)
                continue
            if not good:
                bad += 1
                cells[c].append("WRONG")
                print(f"M{M} {c}: output differs from the reference", flush=True)
                continue
            ok_fns[c] = [lambda s=s, f=f: f(*s) for s in sets]
        times = median_graph_us(ok_fns, a.rounds, calls=20, replays=10)
        for c in cands:
            if c in times:
                t = times[c]
                cells[c].append(f"{t:.2f} ({100 * K * N / (t * 1e-6) / (copy * 1e12):.0f} %)")
        print(f"M{M}: " + ", ".join(f"{c} {times[c]:.2f}" for c in times), flush=True)
    for c in cands:
        lines.append(f"| {c} | " + " | ".join(cells[c]) + " |")
    print_and_write_lines(lines, a.out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
