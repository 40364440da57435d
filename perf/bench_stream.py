"""How fast one kernel can stream S bytes from HBM in the report's harness (the floor's yardstick).

The weight-streaming floors of issue 4 compare a kernel's weight bytes per second with the 1 GiB device copy
(4.25 TB/s). A decode GEMM streams only 15–120 MB per call, so launch, ramp-up and tail weigh in. This bench
times, with the same timer as the report (CUDA-graph replay of back-to-back calls, buffers rotated past 2× L2),
kernels that do nothing but read S bytes:

* ``read pN wW`` — a Triton kernel, N programs per SM of W warps, each summing a contiguous share of the
  buffer (BLOCK int32 per load, the sum stored once so the loads stay);
* ``copy`` — ``dst.copy_(src)`` of S bytes (reads S, writes S; "GB/s" counts the S bytes read).

Usage: ``python3 perf/bench_stream.py --out docs/perf/stream_floor.md`` (H200: ~30 s). ``--smoke``: CPU
interpreter, tiny sizes (a code check; times mean nothing).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

L2_BYTES = 50 * 2**20
# (name, bytes): the weights each floor streams per call (int8 K-major quant_matmul weights; mla_prolog totals)
SIZES = [("qkv_a int8 K7168 N2112", 7168 * 2112), ("q_b int8 K1536 N24576", 1536 * 24576),
         ("mla_prolog a8w8 weights", 69_700_000), ("mla_prolog bf16 weights", 122_600_000)]


@triton.jit
def _stream_read(x_ptr, out_ptr, n, per_prog, BLOCK: tl.constexpr):
    """Program p sums the int32 words [p·per_prog, (p+1)·per_prog) ∩ [0, n) and stores the sum at out[p]."""
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * per_prog
    acc = tl.zeros([BLOCK], tl.int32)
    for off in range(0, per_prog, BLOCK):
        idx = start + off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + idx, mask=(idx < n) & (off + tl.arange(0, BLOCK) < per_prog), other=0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def _read_fn(buf: torch.Tensor, out: torch.Tensor, programs: int, warps: int, block: int):
    n = buf.numel()
    per = triton.cdiv(triton.cdiv(n, programs), block) * block
    return lambda: _stream_read[(programs,)](buf, out, n, per, BLOCK=block, num_warps=warps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="markdown file for the table (default: stdout only)")
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny sizes")
    a = ap.parse_args()
    lines: list[str] = []

    def emit(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    dev = torch.device("cpu" if a.smoke else "cuda")
    sizes = [("tiny", 1 << 16)] if a.smoke else SIZES
    sms = 1 if a.smoke else torch.cuda.get_device_properties(0).multi_processor_count
    configs = [(1, 4, 1024)] if a.smoke else [(1, 4, 2048), (1, 8, 4096), (2, 4, 2048), (4, 4, 1024), (8, 4, 1024),
                                              (16, 4, 512)]
    if a.smoke:
        def timer(fns):
            t0 = time.perf_counter()
            fns[0]()
            return (time.perf_counter() - t0) * 1e6
        copy_gbs = float("nan")
    else:
        from perf.peaks import copy_tbs
        from perf.timers import graph_time_us

        def timer(fns):
            return graph_time_us(fns, calls=20, replays=10).p50_us
        copy_gbs = copy_tbs(dev) * 1e3
    emit("# Streaming floor: one kernel reading S bytes, CUDA-graph replay, buffers rotated past 2× L2")
    emit()
    name = "CPU interpreter (smoke)" if a.smoke else torch.cuda.get_device_name()
    emit(f"{name}, torch {torch.__version__}, triton {triton.__version__}, {sms} SMs; "
         f"device copy (1 GiB) {copy_gbs:.0f} GB/s. Command: `python3 perf/bench_stream.py {' '.join(sys.argv[1:])}`")
    emit()
    emit("| bytes | what | kernel | µs | GB/s read | % of copy BW | 50 % floor µs |")
    emit("|---|---|---|---|---|---|---|")
    for what, nbytes in sizes:
        words = nbytes // 4
        copies = max(1, min(16, -(-2 * L2_BYTES // max(nbytes, 1)) + 1))
        bufs = [torch.randint(-2**30, 2**30, (words,), dtype=torch.int32, device=dev) for _ in range(copies)]
        dsts = [torch.empty_like(b) for b in bufs]
        floor_us = nbytes / (0.5 * copy_gbs * 1e3)
        rows = []
        for ppc, w, blk in configs:
            out = torch.empty(ppc * sms, dtype=torch.int32, device=dev)
            fns = [_read_fn(b, out, ppc * sms, w, blk) for b in bufs]
            rows.append((f"read p{ppc} w{w} BLOCK {blk}", timer(fns)))
            if not a.smoke:   # the kernel really summed: compare one program's sum with torch
                fns[0]()
                per = triton.cdiv(triton.cdiv(words, ppc * sms), blk) * blk
                ref = bufs[0][:per].sum(dtype=torch.int64).item()
                got = out[0].item()
                assert (ref - got) % 2**32 == 0, f"stream_read sum mismatch: {got} vs {ref}"
        rows.append(("copy (dst.copy_(src))", timer([lambda s=s, d=d: d.copy_(s) for s, d in zip(bufs, dsts)])))
        for kernel, us in rows:
            gbs = nbytes / us / 1e3
            emit(f"| {nbytes / 1e6:.1f} MB | {what} | {kernel} | {us:.2f} | {gbs:.0f} | {100 * gbs / copy_gbs:.0f} % "
                 f"| {floor_us:.2f} |")
        del bufs, dsts
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
