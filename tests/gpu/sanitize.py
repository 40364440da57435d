"""The driver tests/gpu/test_sanitize_gpu.py runs under NVIDIA compute-sanitizer memcheck: every Triton kernel,
no read or write outside an allocation. By hand, from the repository root:
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
        python -m tests.gpu.sanitize [--budget-s 400] [--only PREFIXES] [--self-test]

PYTORCH_NO_CUDA_MEMORY_CACHING=1 gives every tensor its own cudaMalloc, so memcheck knows each tensor's bounds
(with the caching allocator an access past a tensor usually lands in another block of the same segment and goes
unseen). The cases cover each op's launch buckets (gemv_stream, the small-M tile, split-K with the in-kernel
reduction, swap-AB, the multi-sweep quant rows, every AMLA tile with KV splits and both merges, every mla_prolog
mode with skipped cache slots), on exactly sized tensors, plus caller errors run with the eager checks off (an
out-of-range used page id, cache_index ids past the cache: :func:`caller_errors`). Outputs are not compared here (the
other tests/gpu/ tests do that); a failed launch raises. Exit status: compute-sanitizer's (9 on any memcheck error), else this script's.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

import ops
from ops import amla as A, mla_prolog as MP, moe_gating as G, quant as Q


def cases():
    bf = torch.bfloat16
    for shape in (dict(B=3, S_q=2, N=16, seq_lens=[0, 37, 300], block_size=16),       # rows ≤ 16 tile, causal MTP
                  dict(B=2, S_q=2, N=16, seq_lens=[700, 5], block_size=64),           # 17–32 rows tile
                  dict(B=2, S_q=2, N=128, seq_lens=[64, 1029], block_size=64),         # compute tile (q_in_loop)
                  dict(B=1, S_q=1, N=16, seq_lens=[4096], block_size=128),             # many splits: vector merge
                  dict(B=4, S_q=1, N=32, seq_lens=[1, 2, 3, 2000], block_size=128)):   # short rows, loop merge
        yield "amla", A.amla, A.make_inputs(shape, dtype=bf, device="cuda", generator=torch.Generator().manual_seed(0))
    for M in (1, 2, 3, 4, 16, 17, 32, 64, 128, 300):   # small M, the k_batch tiles, the PDL and split-K tiles
        for K, N in ((7168, 2112), (1536, 24576), (1368, 100), (2048, 7168)):
            if N == 24576 and M > 64 or N == 7168 and M not in (16, 64):
                continue
            inp = Q.make_inputs_quant_matmul(dict(M=M, K=K, N=N, bias=M % 2 == 1), dtype=bf, device="cuda",
                                             generator=torch.Generator().manual_seed(M))
            yield f"quant_matmul M{M} K{K} N{N}", Q.quant_matmul, inp
    inp = Q.make_inputs_quant_matmul(dict(M=5, K=1000, N=300), dtype=bf, device="cuda")
    inp["weight_int8"] = inp["weight_int8"].contiguous()                          # row-major [K, N]
    yield "quant_matmul row-major weight", Q.quant_matmul, inp
    yield from k_batch_cases()
    for M in (1, 2):   # the wide streaming GEMV (N > 2560, K >= 2048) at odd K and N
        for K, N, layout in ((2048, 2563, "kmajor"), (2052, 4099, "kmajor"), (2050, 2570, "kmajor"),
                             (2048, 2601, "rowmajor")):
            inp = Q.make_inputs_quant_matmul(dict(M=M, K=K, N=N, bias=True), dtype=bf, device="cuda",
                                             generator=torch.Generator().manual_seed(M + K + N))
            if layout == "rowmajor":
                inp["weight_int8"] = inp["weight_int8"].contiguous()
            yield f"quant_matmul wide GEMV M{M} K{K} N{N} {layout}", Q.quant_matmul, inp
    for T in (1, 5, 130):
        for K in (7168, 1536, 20000):
            g = torch.Generator().manual_seed(T + K)
            yield (f"dynamic_quant T{T} K{K}", Q.dynamic_quant,
                   Q.make_inputs_dynamic_quant(dict(T=T, K=K), dtype=bf, device="cuda", generator=g))
            yield (f"rms_norm_dynamic_quant T{T} H{K}", Q.rms_norm_dynamic_quant,
                   Q.make_inputs_rms_norm_dynamic_quant(dict(T=T, H=K), dtype=bf, device="cuda", generator=g))
    for T in (1, 17, 300):
        for dt in (bf, torch.float32):
            yield (f"moe_gating_top_k T{T} {dt}", G.moe_gating_top_k,
                   G.make_inputs(dict(T=T), dtype=dt, device="cuda", generator=torch.Generator().manual_seed(T)))
    for mode in MP.MODES:
        for T in (1, 5, 33, 130):
            shape = dict(T=T, N=8, He=256, Hcq=192, block_size=16, mode=mode)
            yield (f"mla_prolog {mode} T{T}", MP.mla_prolog,
                   MP.make_inputs(shape, dtype=bf, device="cuda", generator=torch.Generator().manual_seed(T)))
    yield from caller_errors()
    for mode in ("bf16", "a8w8"):                                                     # the DeepSeek-V3 tiles
        for T in (1, 32):
            shape = dict(T=T, N=128, He=7168, Hcq=1536, mode=mode)
            yield (f"mla_prolog {mode} T{T} N128 DeepSeek", MP.mla_prolog,
                   MP.make_inputs(shape, dtype=bf, device="cuda", generator=torch.Generator().manual_seed(T)))


def k_batch_cases():
    """quant_matmul's batched K step (bucket key k_batch) beyond the table's two tiles: K tails inside a slice,
    wrapped and masked rows, split-K with both reductions, row-major and no-unit-stride weights."""
    from ops.triton import quant as TQ
    bf = torch.bfloat16
    for kb, (bm, bn, bk), split, reduce, mask_m, (M, K, N), layout in (
            (4, (16, 16, 512), 1, "atomic", True, (5, 1000, 300), "kmajor"),
            (4, (32, 16, 512), 1, "atomic", False, (17, 1368, 40), "kmajor"),
            (2, (16, 16, 256), 3, "atomic", True, (9, 700, 20), "rowmajor"),
            (4, (16, 16, 128), 2, "kernel", False, (3, 520, 24), "anystride")):
        inp = Q.make_inputs_quant_matmul(dict(M=M, K=K, N=N, bias=True), dtype=bf, device="cuda",
                                         generator=torch.Generator().manual_seed(M + K))
        if layout == "rowmajor":
            inp["weight_int8"] = inp["weight_int8"].contiguous()
        elif layout == "anystride":                      # strides (2N, 2): W_LAYOUT 2
            big = torch.zeros((K, 2 * N), dtype=torch.int8, device="cuda")
            big[:, ::2] = inp["weight_int8"]
            inp["weight_int8"] = big[:, ::2]
        cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=4, num_stages=3, split_k=split,
                   reduce=reduce, mask_m=mask_m, k_batch=kb)
        yield (f"quant_matmul k_batch {kb} {bm}x{bn}x{bk} split {split} {reduce} M{M} K{K} N{N} {layout}",
               lambda cfg=cfg, **k: TQ.quant_matmul_config(**k, config=cfg), inp)


def self_test() -> None:
    """The negative control: a Triton kernel that reads one element past its input's end. Under memcheck this
    must be reported (exit 9); if it is not, a clean run of the cases proves nothing."""
    import triton
    import triton.language as tl

    @triton.jit
    def _read_past_end(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i <= n, other=0.0), mask=i < n)   # i == n: one past the end

    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    _read_past_end[(1,)](x, y, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    print("self-test kernel ran (memcheck must report an invalid global read above)", flush=True)


def caller_errors():
    """Inputs the eager checks refuse, run with the checks off (DS_OPS_CHECKS=0, as under CUDA graphs): a used
    block_table entry outside [0, num_blocks) (the kernel redirects it to page 0, flat and per-key addressing) and
    cache_index ids ≥ num_blocks·block_size (never written). Nothing may be read or written outside the tensors."""
    from ops.triton import amla as TA
    bf = torch.bfloat16
    for flat in (True, False):
        for bad in (-7, 10 ** 6):
            inp = A.make_inputs(dict(B=2, S_q=1, N=16, seq_lens=[200, 90], block_size=64), dtype=bf, device="cuda",
                                generator=torch.Generator().manual_seed(1))
            inp["block_table"][0, 1] = bad
            yield (f"amla used page id {bad} (flat {flat}, checks off)",
                   lambda flat=flat, **k: TA.amla_variant(config={"flat": flat}, **k), inp)
    for mode in ("bf16", "a8w8_c8"):
        inp = MP.make_inputs(dict(T=9, N=8, He=256, Hcq=192, block_size=16, mode=mode), dtype=bf, device="cuda",
                             generator=torch.Generator().manual_seed(2))
        slots = inp["kv_cache"].shape[0] * inp["kv_cache"].shape[1]
        ci = inp["cache_index"].clone()
        ci[0], ci[3], ci[5] = slots, slots + 7, 2 ** 40
        inp["cache_index"] = ci
        yield f"mla_prolog {mode} cache_index ≥ slots (checks off)", MP.mla_prolog, inp


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-s", type=float, default=400.0, help="stop starting new cases after this many seconds")
    ap.add_argument("--self-test", action="store_true", help="only run the out-of-bounds negative control")
    ap.add_argument("--only", default="", help="run only the cases whose name starts with one of these comma-separated "
                    "prefixes (e.g. quant_matmul,dynamic_quant)")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return 0
    os.environ["DS_OPS_CHECKS"] = "0"      # caller_errors() runs what the eager checks would refuse
    t0 = time.perf_counter()
    n = skipped = 0
    with ops.backend("triton"):
        for name, fn, inp in cases():
            if not name.startswith(tuple(args.only.split(","))):
                continue
            if time.perf_counter() - t0 > args.budget_s:
                skipped += 1
                continue
            fn(**inp)
            torch.cuda.synchronize()
            n += 1
            print(f"[{time.perf_counter() - t0:6.1f}s] ok  {name}", flush=True)
    print(f"{n} cases ran, {skipped} skipped (budget {args.budget_s:.0f} s)", flush=True)
    return 0 if skipped == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
