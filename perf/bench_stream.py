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


@triton.jit
def _stream_tiles(x_ptr, out_ptr, n_rows, K_words, rows_per_prog, ROWS: tl.constexpr, BKW: tl.constexpr):
    """A GEMM program's weight walk without the GEMM: program p owns rows [p·rows_per_prog, …) of a [n_rows,
    K_words] int32 matrix (a K-major weight: one row = one output column's K bytes) and reads them as [ROWS, BKW]
    tiles, K-step by K-step (ROWS rows × BKW·4 bytes at a stride of K_words·4), summing what it loads."""
    pid = tl.program_id(0)
    acc = tl.zeros([ROWS, BKW], tl.int32)
    r_lo = pid * rows_per_prog
    for r0 in range(r_lo, r_lo + rows_per_prog, ROWS):
        r = r0 + tl.arange(0, ROWS)
        r_m = (r < n_rows) & (r < r_lo + rows_per_prog)
        for k in range(0, K_words, BKW):
            kk = k + tl.arange(0, BKW)
            acc += tl.load(x_ptr + r.to(tl.int64)[:, None] * K_words + kk[None, :],
                           mask=r_m[:, None] & (kk < K_words)[None, :], other=0)
    tl.store(out_ptr + pid, tl.sum(tl.sum(acc, axis=1), axis=0))


# --tiles: the weight walks of the decode kernels that stay below the floor, as pure reads, against a contiguous
# read of the same bytes by the same number of programs: (what, K bytes, weight rows, rows per program, ROWS, BK
# bytes, warps; ROWS is a power of two ≥ the rows per program, the rest masked). mla_prolog query (A8W8): one program per head = its 192 W_UQ_QR rows of 1536 bytes in 128-byte
# K-steps; qkv_a M = 16: 16 rows of 7168 bytes per program in 512-byte steps.
TILE_WALKS = [("mla_prolog query int8 W_UQ_QR, 1 head per program", 1536, 24576, 192, 256, 128, 8),
              ("same, 96 rows per program (2 per head)", 1536, 24576, 96, 128, 128, 4),
              ("same, 256-byte K-steps", 1536, 24576, 192, 256, 256, 8),
              ("qkv_a int8 M16 tile, 16 rows per program", 7168, 2112, 16, 16, 512, 4),
              ("same, 1024-byte K-steps", 7168, 2112, 16, 16, 1024, 4)]


def _read_fn(buf: torch.Tensor, out: torch.Tensor, programs: int, warps: int, block: int):
    n = buf.numel()
    per = triton.cdiv(triton.cdiv(n, programs), block) * block
    return lambda: _stream_read[(programs,)](buf, out, n, per, BLOCK=block, num_warps=warps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="markdown file for the table (default: stdout only)")
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny sizes")
    ap.add_argument("--tiles", action="store_true", help="only the TILE_WALKS table (weight walks vs contiguous)")
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
    if a.tiles:
        _tile_table(emit, dev, sms, timer, copy_gbs, a.smoke)
        sizes = []
    else:
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


def _tile_table(emit, dev, sms, timer, copy_gbs, smoke) -> None:
    """TILE_WALKS: each weight walk as a pure read, and the same bytes read contiguously by as many programs."""
    emit("| walk | bytes | programs | tiled walk µs | GB/s | contiguous read (same programs, ~same bytes per step) µs | GB/s |")
    emit("|---|---|---|---|---|---|---|")
    for what, kb, n_rows, rpp, rows, bk, w in TILE_WALKS:
        if smoke:
            kb, n_rows, rpp, rows = 256, 64, 16, 16
            bk = min(bk, 128)
        kw, nbytes = kb // 4, kb * n_rows
        progs = -(-n_rows // rpp)
        copies = max(1, min(16, -(-2 * L2_BYTES // nbytes) + 1))
        bufs = [torch.randint(-2**30, 2**30, (n_rows * kw,), dtype=torch.int32, device=dev) for _ in range(copies)]
        out = torch.empty(progs, dtype=torch.int32, device=dev)
        t_tile = timer([lambda b=b: _stream_tiles[(progs,)](b, out, n_rows, kw, rpp, ROWS=rows, BKW=bk // 4,
                                                            num_warps=w) for b in bufs])
        if not smoke:   # the walk really summed program 0's rows
            _stream_tiles[(progs,)](bufs[0], out, n_rows, kw, rpp, ROWS=rows, BKW=bk // 4, num_warps=w)
            ref = bufs[0][: rpp * kw].sum(dtype=torch.int64).item()
            assert (ref - out[0].item()) % 2**32 == 0, "stream_tiles sum mismatch"
        blk = min(8192, triton.next_power_of_2(rpp * bk // 4))   # about the walk's bytes per step
        t_cont = timer([_read_fn(b, out, progs, w, blk) for b in bufs])
        emit(f"| {what} ({rows} rows × {bk} B per step, {w} warps) | {nbytes / 1e6:.1f} MB | {progs} "
             f"({progs / sms:.2f}/SM) | {t_tile:.2f} | {nbytes / t_tile / 1e3:.0f} | {t_cont:.2f} | "
             f"{nbytes / t_cont / 1e3:.0f} |")
        del bufs


if __name__ == "__main__":
    main()
