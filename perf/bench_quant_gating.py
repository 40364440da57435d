#!/usr/bin/env python3
"""Benchmarks of the Triton quant / gating kernels vs the unfused PyTorch reference and cuBLAS, on one GPU.

    python3 perf/bench_quant_gating.py --out docs/perf/quant_gating_results.md [--sweep] [--json sweep.json]

Method (DESIGN §Performance methodology): every number is the median over 10 replays of a CUDA graph
holding ``calls`` back-to-back calls, divided by ``calls`` (no launch overhead, the way a serving engine
runs decode). Memory-bound cases rotate through enough input copies that they exceed 2× the L2 cache
(H200: 50 MB), so weights are streamed from HBM. Copy bandwidth is measured in the same run
(``dst.copy_(src)`` on 1 GiB, 2 bytes moved per byte copied) and weight-streaming efficiency is quoted
against it. TOPS = 2·M·N·K / t. The unfused references are the functions in reference/ (eager
PyTorch, captured in the same kind of graph); cuBLAS is ``torch._int_mm`` + the same fp32 epilogue in
PyTorch (M > 16 only: cuBLAS rejects M ≤ 16).

``--sweep`` also times candidate launch configs per shape (the data for ops/triton/configs/*.json) and
prints the best; without it only the configs in the JSON are timed. Eager dispatch overhead (host µs per
call: direct kernel call, ``DsOp`` fast path, ``torch.ops.ds``) is reported at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
if "--smoke" in sys.argv:  # must precede the first @triton.jit
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

try:
    import ops  # noqa: F401
    HAVE_OPS = True
except Exception as e:  # noqa: BLE001
    print(f"[warn] import ops failed ({type(e).__name__}: {e}); timing kernel modules directly")
    sys.modules.pop("ops", None)
    pkg = types.ModuleType("ops")
    pkg.__path__ = [os.path.join(REPO, "ops")]
    sys.modules["ops"] = pkg
    HAVE_OPS = False

import triton  # noqa: E402

from ops.triton import moe_gating as TG  # noqa: E402
from ops.triton import quant as TQ  # noqa: E402
from reference import moe_gating as RG  # noqa: E402
from reference import quant as RQ  # noqa: E402

L2_BYTES = 50 * 2**20
OUT: list[str] = []
_OUT_FILE: list = []  # written line by line, so a run cut short keeps its numbers


def emit(line: str = "") -> None:
    print(line, flush=True)
    OUT.append(line)
    if _OUT_FILE:
        _OUT_FILE[0].write(line + "\n")
        _OUT_FILE[0].flush()


SWEEP_JSON: list[str] = []
FLOORS_ONLY = [False]  # --floors: only the shapes the issue sets floors for
SWEEP_DEADLINE = [float("inf")]  # time.time() after which no more sweep candidates are timed


def _dump_sweep(log: list) -> None:
    if SWEEP_JSON:
        with open(SWEEP_JSON[0], "w") as f:
            json.dump(log, f, indent=0)


def graph_time_us(fns, calls: int = 20, replays: int = 10) -> float:
    """Median µs per call of ``calls`` back-to-back calls (cycling through ``fns``) replayed in a CUDA graph
    (perf/timers.py ``graph_time_us``, the report's timer)."""
    if SMOKE[0]:  # CPU interpreter smoke run: one plain call
        t0 = time.perf_counter()
        fns[0]()
        return (time.perf_counter() - t0) * 1e6
    from perf.timers import graph_time_us as _graph
    return _graph(fns, calls=calls, replays=replays).p50_us


def copies_for(nbytes: int) -> int:
    return max(1, min(16, -(-2 * L2_BYTES // max(nbytes, 1)) + 1))


def copy_bandwidth(dev) -> float:
    """Device copy bandwidth in GB/s, bytes read + written (perf/peaks.py ``copy_tbs``, the report's ceiling)."""
    from perf.peaks import copy_tbs
    return copy_tbs(dev) * 1e3


# ----------------------------------------------------------------------------------------------
# quant_matmul
# ----------------------------------------------------------------------------------------------
def qmm_inputs(M, K, N, dev, ncopies, layout="kmajor"):
    g = torch.Generator(device=dev).manual_seed(0)
    sets = []
    for _ in range(ncopies):
        w = torch.randint(-127, 128, (K, N), generator=g, device=dev, dtype=torch.int8)
        if layout == "kmajor":
            w = RQ.pack_weight(w, "cuda")
        x = torch.randint(-127, 128, (M, K), generator=g, device=dev, dtype=torch.int8)
        ws = torch.rand(N, generator=g, device=dev) * 1e-4
        xs = torch.rand(M, generator=g, device=dev) * 1e-2
        sets.append((x, w, ws, xs))
    return sets


def small_m_candidates(M):
    bm = 16 if M <= 16 else (32 if M <= 32 else (64 if M <= 64 else 128))
    c = []
    for bn, bk, st, wp in ((64, 256, 5, 4), (32, 512, 4, 4), (128, 256, 4, 4), (64, 512, 3, 4), (128, 128, 6, 4)):
        c.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=wp, num_stages=st, split_k="auto"))
    c.append(dict(BLOCK_M=bm, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=5, split_k=1))
    if M > 64:
        c.append(dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=4, split_k="auto"))
        c.append(dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4, split_k="auto"))
    return c


def large_m_candidates():
    return [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=w, num_stages=s, split_k=1)
            for bm, bn, bk, w, s in ((128, 256, 128, 8, 4), (128, 256, 128, 8, 3), (256, 128, 128, 8, 4),
                                     (128, 128, 128, 8, 5), (128, 256, 64, 8, 6))]


def time_qmm(sets, config=None):
    fns = [lambda s=s: TQ.quant_matmul_config(*s, config=config, out_dtype=QMM_OUT[0]) for s in sets]
    return graph_time_us(fns)


def bench_quant_matmul(dev, bw_gbs, sweep, sweep_log):
    emit("\n## quant_matmul (bf16 out, weights K-major = `pack_weight(w, 'cuda')`)\n")
    emit("| M | K | N | config (BM×BN×BK, warps, stages, split) | µs | TOPS | weight GB/s | % of copy BW | "
         "cuBLAS _int_mm + epilogue µs | unfused reference µs | row-major weight µs |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|")
    shapes = [(M, 7168, 2112) for M in (1, 16, 64, 128)] + [(M, 1536, 24576) for M in (1, 16, 64, 128)] + \
             [(4096, 7168, 2048)]
    if not FLOORS_ONLY[0]:
        shapes += [(M, 16384, 7168) for M in (16, 128)] + [(4096, 7168, 2112), (4096, 1536, 24576)]
    for M, K, N in shapes:
        try:
            nc = copies_for(K * N)
            sets = qmm_inputs(M, K, N, dev, nc)
            plan = TQ.plan_quant_matmul(M, N, K, dev)
            t = time_qmm(sets)
            best = (t, None)
            if sweep:
                cands = large_m_candidates() if M >= 1024 else small_m_candidates(M)
                for c in cands:
                    if time.time() > SWEEP_DEADLINE[0]:
                        emit("<!-- sweep budget spent -->")
                        break
                    try:
                        tc = time_qmm(sets, c)
                        p = TQ.plan_quant_matmul(M, N, K, dev, c)
                        sweep_log.append(dict(op="quant_matmul", M=M, K=K, N=N, config=c, split=p["SPLIT_K"], us=tc))
                        _dump_sweep(sweep_log)
                        emit(f"<!-- sweep M={M} K={K} N={N} {c} split={p['SPLIT_K']}: {tc:.2f} us -->")
                        if tc < best[0]:
                            best = (tc, c)
                    except Exception as e:  # noqa: BLE001
                        emit(f"<!-- sweep M={M} K={K} N={N} {c}: {type(e).__name__}: {str(e)[:200]} -->")
            cub = ""
            if M > 16:
                def cublas(s):
                    x, w, ws, xs = s
                    acc = torch._int_mm(x, w)
                    return (acc.float() * ws[None, :] * xs[:, None]).to(torch.bfloat16)
                try:
                    cub = f"{graph_time_us([lambda s=s: cublas(s) for s in sets]):.1f}"
                except Exception as e:  # noqa: BLE001
                    cub = f"n/a ({type(e).__name__})"
            ref = f"{graph_time_us([lambda s=s: RQ.quant_matmul(*s) for s in sets[:2]], calls=4):.1f}"
            row = ""
            if M <= 128 or M == 4096 and N == 2048:
                rsets = qmm_inputs(M, K, N, dev, nc, layout="rowmajor")
                row = f"{time_qmm(rsets):.1f}"
                del rsets
            cfg = f"{plan['BLOCK_M']}×{plan['BLOCK_N']}×{plan['BLOCK_K']}, {plan['num_warps']}, {plan['num_stages']}, {plan['SPLIT_K']}"
            tops = 2 * M * N * K / (t * 1e-6) / 1e12
            wgbs = K * N / (t * 1e-6) / 1e9
            emit(f"| {M} | {K} | {N} | {cfg} | {t:.2f} | {tops:.0f} | {wgbs:.0f} | {100 * wgbs / bw_gbs:.0f}% | {cub} | {ref} | {row} |")
            if best[1] is not None:
                bp = TQ.plan_quant_matmul(M, N, K, dev, best[1])
                emit(f"<!-- best M={M} K={K} N={N}: {best[0]:.2f} us with {best[1]} split={bp['SPLIT_K']} -->")
            del sets
        except Exception:  # noqa: BLE001
            emit(f"<!-- M={M} K={K} N={N} failed: {traceback.format_exc()[-600:]} -->")
        torch.cuda.empty_cache()


def bench_quant_pipeline(dev):
    emit("\n## dynamic_quant + quant_matmul at M=4096, K=7168, N=2048 (bf16 activations)\n")
    M, K, N = 4096, 7168, 2048
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, K, generator=g, device=dev).to(torch.bfloat16)
    w = RQ.pack_weight(torch.randint(-127, 128, (K, N), generator=g, device=dev, dtype=torch.int8))
    ws = torch.rand(N, generator=g, device=dev) * 1e-4
    q, sc = TQ.dynamic_quant(x)
    t_dq = graph_time_us([lambda: TQ.dynamic_quant(x)])
    t_mm = graph_time_us([lambda: TQ.quant_matmul(q, w, ws, sc)])

    def both():
        qq, ss = TQ.dynamic_quant(x)
        return TQ.quant_matmul(qq, w, ws, ss)
    t_both = graph_time_us([both])
    def both_ref():
        qq, ss = RQ.dynamic_quant(x)
        return RQ.quant_matmul(qq, w, ws, ss)
    t_ref = graph_time_us([both_ref], calls=3)
    fl = 2 * M * N * K
    emit("| what | µs | TOPS (2MNK / t) |")
    emit("|---|---|---|")
    emit(f"| dynamic_quant [4096, 7168] bf16 | {t_dq:.1f} | – ({3 * M * K / (t_dq * 1e-6) / 1e9:.0f} GB/s) |")
    emit(f"| quant_matmul | {t_mm:.1f} | {fl / (t_mm * 1e-6) / 1e12:.0f} |")
    emit(f"| dynamic_quant + quant_matmul | {t_both:.1f} | {fl / (t_both * 1e-6) / 1e12:.0f} (effective) |")
    emit(f"| unfused reference (dynamic_quant + quant_matmul) | {t_ref:.1f} | {fl / (t_ref * 1e-6) / 1e12:.0f} |")


def bench_row_quant(dev, bw_gbs):
    emit("\n## dynamic_quant / rms_norm_dynamic_quant (bf16 in; smooth scales; residual for the norm)\n")
    emit("| op | T | H | µs | GB/s | % of copy BW | unfused reference µs |")
    emit("|---|---|---|---|---|---|---|")
    for T in (1, 16, 128, 4096):
        for H in (7168, 1536):
            g = torch.Generator(device=dev).manual_seed(0)
            nbytes = T * H * 2
            nc = copies_for(nbytes * 2)
            xs = [torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16) for _ in range(nc)]
            rs = [torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16) for _ in range(nc)]
            gm = (torch.rand(H, generator=g, device=dev) + 0.5).to(torch.bfloat16)
            sm = torch.rand(H, generator=g, device=dev) + 0.5
            t = graph_time_us([lambda x=x: TQ.dynamic_quant(x, smooth_scales=sm) for x in xs])
            tr = graph_time_us([lambda x=x: RQ.dynamic_quant(x, smooth_scales=sm) for x in xs[:2]], calls=6)
            by = T * H * 3 + T * 4
            emit(f"| dynamic_quant | {T} | {H} | {t:.2f} | {by / (t * 1e-6) / 1e9:.0f} | {100 * by / (t * 1e-6) / 1e9 / bw_gbs:.0f}% | {tr:.1f} |")
            t = graph_time_us([lambda x=x, r=r: TQ.rms_norm_dynamic_quant(x, gm, epsilon=1e-6, residual=r, smooth_scales=sm)
                               for x, r in zip(xs, rs)])
            tr = graph_time_us([lambda x=x, r=r: RQ.rms_norm_dynamic_quant(x, gm, epsilon=1e-6, residual=r, smooth_scales=sm)
                                for x, r in zip(xs[:2], rs[:2])], calls=6)
            by = T * H * (2 + 2 + 2 + 1) + T * 4
            emit(f"| rms_norm_dynamic_quant | {T} | {H} | {t:.2f} | {by / (t * 1e-6) / 1e9:.0f} | {100 * by / (t * 1e-6) / 1e9 / bw_gbs:.0f}% | {tr:.1f} |")
            del xs, rs


DS = dict(k_group=4, group_count=8, group_select_mode=1, renorm=0, norm_type=1, routed_scaling_factor=2.5, eps=1e-20)


def bench_gating(dev, sweep, sweep_log):
    emit("\n## moe_gating_top_k (E=256, 8 groups, top-4 groups, k=8, sigmoid, fp32 bias)\n")
    emit("| T | logits | µs (graph replay) | config (BLOCK_T, warps) | unfused reference µs (graph) | reference eager µs (events) |")
    emit("|---|---|---|---|---|---|")
    g = torch.Generator(device=dev).manual_seed(0)
    bias = 0.5 * torch.randn(256, generator=g, device=dev)
    cands = [dict(BLOCK_T=bt, num_warps=w) for bt, w in ((1, 1), (1, 2), (2, 2), (4, 2), (4, 4), (8, 4))]
    for T in (1, 16, 64, 128, 256, 4096):
        for dt in (torch.bfloat16, torch.float32):
            x = (2 * torch.randn(T, 256, generator=g, device=dev)).to(dt)
            t = graph_time_us([lambda: TG.moe_gating_top_k(x, 8, bias=bias, **DS)], calls=50)
            cfg = TG._all_configs()["cuda"]
            bt = max(1, min(cfg["tile_elems"] // 256, cfg["max_block_t"], triton.next_power_of_2(T)))
            if sweep and dt == torch.bfloat16 and T in (1, 64, 256, 4096):
                for c in cands:
                    if time.time() > SWEEP_DEADLINE[0]:
                        break
                    try:
                        tc = graph_time_us([lambda c=c: TG.moe_gating_top_k_config(x, 8, bias=bias, config=c, **DS)], calls=50)
                        sweep_log.append(dict(op="moe_gating_top_k", T=T, config=c, us=tc))
                        _dump_sweep(sweep_log)
                        emit(f"<!-- sweep gating T={T} {c}: {tc:.2f} us -->")
                    except Exception as e:  # noqa: BLE001
                        emit(f"<!-- sweep gating T={T} {c}: {type(e).__name__}: {str(e)[:200]} -->")
            tr = graph_time_us([lambda: RG.moe_gating_top_k(x, 8, bias=bias, **DS)], calls=10)
            s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(3):
                RG.moe_gating_top_k(x, 8, bias=bias, **DS)
            s0.record()
            for _ in range(20):
                RG.moe_gating_top_k(x, 8, bias=bias, **DS)
            s1.record()
            s1.synchronize()
            te = s0.elapsed_time(s1) * 1e3 / 20
            emit(f"| {T} | {str(dt)[6:]} | {t:.2f} | {bt}, {cfg['num_warps']} | {tr:.1f} | {te:.1f} |")


def bench_dispatch(dev):
    if not HAVE_OPS:
        return
    import ops as _ops
    emit("\n## eager dispatch overhead (host µs per call, T=16 gating; GPU work is ~3 µs and overlaps)\n")
    x = torch.randn(16, 256, device=dev)
    bias = torch.randn(256, device=dev) * 0.1
    rows = []
    with _ops.backend("triton"):
        for name, fn in (("direct kernel call (ops.triton.moe_gating)", lambda: TG.moe_gating_top_k(x, 8, bias=bias, **DS)),
                         ("DsOp eager fast path (ops.moe_gating.moe_gating_top_k)", lambda: _ops.moe_gating.moe_gating_top_k(x, 8, bias=bias, **DS)),
                         ("registered op (torch.ops.ds.moe_gating_top_k)", lambda: torch.ops.ds.moe_gating_top_k(x, 8, bias=bias, **DS))):
            for _ in range(50):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            torch.cuda.synchronize()
            rows.append((name, (time.perf_counter() - t0) / 2000 * 1e6))
    emit("| path | µs / call |")
    emit("|---|---|")
    for n, t in rows:
        emit(f"| {n} | {t:.1f} |")



# ----------------------------------------------------------------------------------------------
# --sweep2: candidate launch configs for the open floors (issue 4), one batched GPU run (≤ 120 s)
# ----------------------------------------------------------------------------------------------
OLD_ROW = {"max_block_k": 8192, "tile_elems": 8192, "num_warps": 8, "grid_cap": 0}  # the defaults before the sweep


def _rc(mbk, tile, w, fast=True, **kw):
    """Row config: BLOCK_K = min(next_pow2(K), mbk), rows per program = max(1, tile // BLOCK_K)."""
    return dict(max_block_k=mbk, tile_elems=tile, num_warps=w, grid_cap=0, fast=fast, **kw)


ROW_CANDS = {  # name -> row config (ops/triton/quant.py _make_row_launch keys); bmN = rows per program at K=7168
    "old_default": OLD_ROW,
    "old_tiles_fast": dict(OLD_ROW, fast=True),
    "single_bm1_w8": _rc(8192, 2048, 8), "single_bm1_w16": _rc(8192, 2048, 16), "single_bm1_w4": _rc(8192, 2048, 4),
    "single_bm2_w8": _rc(8192, 16384, 8), "single_bm4_w8": _rc(8192, 32768, 8),
    "chunk2048_bm1_w4": _rc(2048, 2048, 4), "chunk1024_bm1_w4": _rc(1024, 1024, 4), "chunk2048_bm1_w8": _rc(2048, 2048, 8),
    "chunk4096_bm1_w8": _rc(4096, 4096, 8), "chunk1024_bm2_w4": _rc(1024, 2048, 4), "chunk512_bm4_w4": _rc(512, 2048, 4),
    "chunk1024_bm1_w2": _rc(1024, 1024, 2),
}
ROW_SMALL = ["old_default", "old_tiles_fast", "single_bm1_w8", "single_bm1_w16", "single_bm1_w4", "single_bm2_w8",
             "chunk2048_bm1_w4", "chunk1024_bm1_w4"]
ROW_LARGE = list(ROW_CANDS)


def _qc(bm, bn, bk, w, st, split="auto", reduce="atomic", target=0, gm=1, mma=None):
    c = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, num_warps=w, num_stages=st, split_k=split, reduce=reduce)
    if target:
        c["split_target"] = target
    if mma:
        c["mma"] = mma
    return c


def _mm(c):
    return dict(c, mask_m=True)


def _sw(bm, bn, bk, w, st, **kw):
    """Swap-AB (``mma: "swap"``): acc^T[BLOCK_N, BLOCK_M] = w^T tile · x tile^T; BLOCK_N weight rows fill the
    MMA's M slot (wgmma: 64 per warpgroup), BLOCK_M tokens its N slot; x rows past M masked."""
    return _mm(_qc(bm, bn, bk, w, st, mma="swap", **kw))


def _gs(bn, bk, w, ppc, split=1, dp4a=True, reduce="atomic", pf=False):
    """Streaming GEMV (``mma: "gemv_stream"``, M <= 4): SMs x ppc programs, each a contiguous run of BN weight
    rows x (K / split) items, int32 products accumulated elementwise over K, one reduction per output;
    ``dp4a``: 4 int8 products per dp4a.s32.s32 on int32-word loads (else one int32 product per int8)."""
    c = dict(BLOCK_M=4, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=w, num_stages=1, split_k=split, reduce=reduce,
             mma="gemv_stream", programs_per_sm=ppc)
    if dp4a:
        c["dp4a"] = True
    if pf:
        c["prefetch"] = True   # register double buffer: step k+1's weight tile loads before step k's MACs
    return c


# Round 7 (issue 4, M = 1 qkv_a 8.43 us -> <= 7.1 us): the streaming GEMV, shaped like perf/bench_stream.py's read
# kernel (5.43-5.70 us at 4-8 programs x 4 warps per SM). Name: gs_BNxBK (weight rows x K bytes per step), _wW warps,
# _pP programs per SM, _kS K splits (atomic last-arriving reduction), _dp4a / _i32 (portable int32 products);
# _pf register double buffer of the weight tile; "B/thr": weight bytes per thread per step. (Round 5's GEMV,
# mma "gemv", 9.94 us, was removed from quant_matmul with the other switches that lost in every sweep.)
QMM_GEMV_GROUPS = {
    "m1_gemv": dict(Ms=(1,), shapes=[(7168, 2112)], keys=dict(max_m=1, max_n=2560), cands={
        "gs_4x1024_w4_p4_i32": _gs(4, 1024, 4, 4, dp4a=False),              # same tiles, hoisted epilogue, int32 MACs
        "gs_4x1024_w4_p4": _gs(4, 1024, 4, 4),                              # 528 programs, 32 B/thr (read p4)
        "gs_2x1024_w2_p8": _gs(2, 1024, 2, 8),                              # 1056 x 2 warps, 32 B/thr
        "gs_4x1024_w4_p4_i32_pf": _gs(4, 1024, 4, 4, dp4a=False, pf=True),  # int32 MACs + register double buffer
        "gs_4x1024_w4_p4_pf": _gs(4, 1024, 4, 4, pf=True),                  # dp4a + register double buffer
        "gs_8x1024_w4_p2": _gs(8, 1024, 4, 2),                              # 264 x 4 warps, 64 B/thr
        "gs_8x1024_w8_p2": _gs(8, 1024, 8, 2),                              # 264 x 8 warps, 32 B/thr
        "gs_1x1024_w1_p16": _gs(1, 1024, 1, 16),                            # 2112 one-warp programs: warp-only sum
        "gs_8x1024_w4_k2_p4": _gs(8, 1024, 4, 4, split=2),                  # 528 items, 64 B/thr, split-K 2
        "gs_4x1024_w4_k2_p8": _gs(4, 1024, 4, 8, split=2),                  # 1056 items, 8/SM, 32 B/thr
        "gs_8x1024_w8_k2_p4": _gs(8, 1024, 8, 4, split=2),                  # 528 items x 8 warps, 32 B/thr
        "gs_2x1024_w2_k2_p16": _gs(2, 1024, 2, 16, split=2),                # 2112 items, 16 x 2 warps/SM
        "gs_4x1024_w4_k7_p8": _gs(4, 1024, 4, 8, split=7),                  # 3696 items, 8/SM, ~3.5 items each
    }),
    # round 8: the M = 1 winner (gs_1x1024_w1_p16, 6.03 us) and its neighbours at M = 2..4 against the BN16 tile
    "m4_gemv": dict(Ms=(2, 4), shapes=[(7168, 2112)], keys=dict(max_m=4, max_n=2560), cands={
        "gs_1x1024_w1_p16": _gs(1, 1024, 1, 16),
        "gs_1x512_w1_p16": _gs(1, 512, 1, 16),
        "gs_2x1024_w2_p8": _gs(2, 1024, 2, 8),
        "gs_4x1024_w4_p4_pf": _gs(4, 1024, 4, 4, pf=True),
    }),
}

# Round 9 (session 5; issue 4: qkv_a M 16 / 64 / 128 at 43 / 36 / 29 % of copy). Nsight Compute shows the default M16
# tile as one 4-warp CTA per SM, latency-bound (tests/gpu/results/session5_ncu_qmm_m16.txt), while a read kernel
# needs 4-8 programs per SM (stream_floor.md). These are tiny MMA CTAs (1-2 warps, 12-40 KB of shared memory, 5-13
# resident per SM by the offline sm_90a compile) with K split 4-14 ways so that 4-14 of them stream per SM; the
# last-arriving split of a tile reduces (int32 counter). Name: t + BMxBNxBK, _wW warps, _sS stages, _kS splits.
QMM_TINY_GROUPS = {
    "m16_tiny": dict(Ms=(16,), shapes=[(7168, 2112)], keys=dict(max_m=16, max_n=2560), cands={
        "t16x16x256_w1_s3_k4": _mm(_qc(16, 16, 256, 1, 3, split=4)),
        "t16x16x256_w1_s3_k7": _mm(_qc(16, 16, 256, 1, 3, split=7)),
        "t16x16x256_w1_s4_k7": _mm(_qc(16, 16, 256, 1, 4, split=7)),
        "t16x16x128_w1_s4_k7": _mm(_qc(16, 16, 128, 1, 4, split=7)),
        "t16x16x512_w1_s2_k7": _mm(_qc(16, 16, 512, 1, 2, split=7)),
        "t16x16x256_w2_s3_k7": _mm(_qc(16, 16, 256, 2, 3, split=7)),
        "t16x32x256_w1_s3_k7": _mm(_qc(16, 32, 256, 1, 3, split=7)),
        "t16x16x256_w1_s3_k14": _mm(_qc(16, 16, 256, 1, 3, split=14)),
    }),
    "m64_tiny": dict(Ms=(64,), shapes=[(7168, 2112)], keys=dict(max_m=64, max_n=2560), cands={
        "t64x16x128_w1_s4_k7": _qc(64, 16, 128, 1, 4, split=7),
        "t64x16x256_w1_s3_k4": _qc(64, 16, 256, 1, 3, split=4),
        "t64x32x128_w2_s3_k7": _qc(64, 32, 128, 2, 3, split=7),
        "t64x16x128_w1_s4_k14": _qc(64, 16, 128, 1, 4, split=14),
    }),
    "m128_tiny": dict(Ms=(128,), shapes=[(7168, 2112)], keys=dict(max_m=128, max_n=2560), cands={
        "t128x16x128_w2_s3_k7": _qc(128, 16, 128, 2, 3, split=7),
        "t128x16x128_w2_s3_k4": _qc(128, 16, 128, 2, 3, split=4),
        "t128x32x128_w4_s3_k7": _qc(128, 32, 128, 4, 3, split=7),
        "t128x32x128_w2_s3_k7": _qc(128, 32, 128, 2, 3, split=7),
    }),
}

# Round 6 (issue 4: decode floors of K7168 N2112 at M 1/16/64/128 and q_b K1536 N24576 at M 128). Earlier rounds:
# docs/perf/quant_sweep2.md .. quant_sweep5.md (round 5: GEMV, swap-AB, unrolled reductions and persistent grids at
# M <= 64 all lost to the defaults; its clear losers are gone from this table). Name: BMxBNxBK (tokens x weight
# columns x K), _sS stages, _wW warps, _kS split_k forced to S (else "auto": split until ~132 work items, or _tT
# items), _gG GROUP_M, sw_ = swap-AB, _mm = x rows past M masked (the reduce_unroll / persistent-grid / GEMV
# candidates of rounds 5-6 lost in every sweep and were removed with their switches). "cta/SM" in the comments: CTAs resident per SM by shared memory and registers
# (offline sm_90a compile, tests/gpu/results/qmm_round6_offline.md). Each group: the M values and (K, N) shapes it
# is judged on (worst shape), the bucket keys its WINNER line carries (paste before the bucket it replaces in
# configs/quant.json "cuda").
QMM_OUT = [torch.bfloat16]  # --smoke: fp32 (the interpreter truncates fp32 -> bf16, the reference rounds)
QMM_GROUPS = {
    # M <= 64, N2112: the defaults again (regression rows) and round 5's closest runners-up (within 2-5 %)
    "m1_n2112": dict(Ms=(1,), shapes=[(7168, 2112)], keys=dict(max_m=1, max_n=2560), cands={
        "sw_16x64x256_s6": _sw(16, 64, 256, 4, 6),
    }),
    "m16_n2112": dict(Ms=(1, 16), shapes=[(7168, 2112)], keys=dict(max_m=16, max_n=2560), cands={
        "sw_16x64x128_s8": _sw(16, 64, 128, 4, 8),
    }),
    "m64_n2112": dict(Ms=(64,), shapes=[(7168, 2112)], keys=dict(max_m=64, max_n=2560), cands={
        "64x16x256_s6_k1": _qc(64, 16, 256, 4, 6, split=1),
    }),
    "m128_n2112": dict(Ms=(128,), shapes=[(7168, 2112)], keys=dict(max_m=128, max_n=2560), cands={
        # the default (BM64 BN32 BK256 s4, 2 splits: 264 items at 2 CTA/SM = one wave); round 6's unrolled-reduction
        # neighbours (_u4) went with reduce_unroll
        # GROUP_M 2: the two 64-token tiles of a weight column are neighbours (the second read hits L2)
        "64x32x256_s4_k2_g2": _qc(64, 32, 256, 4, 4, split=2, gm=2),
    }),
    "m128_qb": dict(Ms=(65, 128), shapes=[(1536, 24576)], keys=dict(max_m=128, min_n=8192, max_k=2048), cands={
        # default = round 5's winner sw_128x256x128_w8_s3 (96 tiles on 132 SMs, 1 CTA/SM, 2 stages in flight); split_k 1
        # as in the bucket (a 4-split plan at N 8192 / K 2048 would take the partials kernel, which spilled for 128x256)
        "old_128x64x128_s4": _qc(128, 64, 128, 4, 4, split=1),              # the default before round 6 (19.50 us)
        # the 96 wide tiles with more loads in flight: 4 stages of BK128 / 6-8 of BK64 (192 / 144 / 192 KB)
        "sw_128x256x128_w8_s4": _sw(128, 256, 128, 8, 4, split=1), "sw_128x256x64_w8_s6": _sw(128, 256, 64, 8, 6, split=1),
        "sw_128x256x64_w8_s8": _sw(128, 256, 64, 8, 8, split=1),
        # every SM busy in one wave: 384 BN64 tiles at 3 CTA/SM (72 KB each), 192 BN128 tiles at 2 CTA/SM (96 KB)
        "128x64x128_s3": _qc(128, 64, 128, 4, 3, split=1), "sw_128x64x128_s3": _sw(128, 64, 128, 4, 3, split=1),
        "sw_128x128x128_w4_s3": _sw(128, 128, 128, 4, 3, split=1), "128x128x128_w4_s3": _qc(128, 128, 128, 4, 3, split=1),
    }),
    # the dense MLP at M 65..128 (N >= 8192, K 7168: the bucket after the q_b one, max_k 2048 keeps it off the
    # 96-tile swap tile): dense_gate (one of gate / up) and the fused gate_up the layer runs; 132 / 264 MB weights
    "m128_dense": dict(Ms=(128,), shapes=[(7168, 18432), (7168, 36864)], keys=dict(max_m=128, min_n=8192), cands={
        "sw_128x256x128_w8_s3": _sw(128, 256, 128, 8, 3),          # the q_b tile: 72 / 144 tiles of 1 CTA/SM
        "128x64x128_s3": _qc(128, 64, 128, 4, 3), "sw_128x64x128_s3": _sw(128, 64, 128, 4, 3),
        "sw_128x128x128_w4_s3": _sw(128, 128, 128, 4, 3), "128x128x128_w4_s3": _qc(128, 128, 128, 4, 3),
    }),
}
ROW_SHAPES = [(4096, 7168, True), (4096, 7168, False), (4096, 1536, True), (128, 7168, True), (16, 7168, True),
              (1, 7168, True), (16, 1536, True), (128, 1536, True)]  # (T, H, smooth scales)
PIPE_MKN = (4096, 7168, 2048)
SMOKE = [False]  # --smoke: CPU interpreter, tiny shapes, plain timing (checks that the sweep code runs)


class _Sweep:
    def __init__(self, dev, bw_gbs, deadline):
        self.dev, self.bw, self.deadline = dev, bw_gbs, deadline
        self.results: list[dict] = []

    def late(self) -> bool:
        return time.time() > self.deadline


def _precompile(jobs, threads=12):
    """Run each job once (compiles its kernels) in a thread pool; exceptions are kept for the report."""
    from concurrent.futures import ThreadPoolExecutor
    errs = {}

    def run(j):
        name, fn = j
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            errs[name] = f"{type(e).__name__}: {str(e)[:200]}"
    t0 = time.time()
    if SMOKE[0]:
        for j in jobs:
            run(j)
    else:
        # one launch per kernel function first, serially: Triton's lazy one-time set-up (triton_key, driver,
        # launcher) is not thread-safe (triton-lang/triton#5933); then the rest in threads (the MLIR/LLVM
        # passes and ptxas release the GIL; triton ≥ 3.4's AsyncCompileMode compiles in threads the same way)
        seen, first, rest = set(), [], []
        for j in jobs:
            (rest if j[0].split()[0] in seen else first).append(j)
            seen.add(j[0].split()[0])
        for j in first:
            run(j)
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(run, rest))
        torch.cuda.synchronize()
    return errs, time.time() - t0


def _rows_inputs(T, H, dev, g, nc, rms):
    xs = [torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16) for _ in range(nc)]
    rs = [torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16) for _ in range(nc)] if rms else None
    return xs, rs


def _check_dq(q, sc, rq, rs) -> str:
    if torch.equal(q.cpu(), rq) and torch.equal(sc.cpu(), rs):
        return ""
    d = (q.cpu().int() - rq.int()).abs().max().item() if q.numel() else 0
    return f"dq differs (max {d} LSB, scale equal={torch.equal(sc.cpu(), rs)})"


def _check_rms(out, ref, x, r, gm, sm) -> str:
    q, sc, ro = out
    rq, rs, rro = ref
    if not torch.equal(ro, rro):
        return "residual_out differs"
    if ((sc - rs).abs() > 2e-6 * rs.abs()).any():
        return "scale rel err > 2e-6"
    d = (q.int() - rq.int()).abs()
    if d.max() > 1:
        return f"{d.max().item()} LSB"
    bad = d > 0
    if bad.any():
        y = RQ.rms_norm(x.float() + r.float(), gm, 1e-6) * sm
        t = (y.double() / rs.double()[:, None])[bad].abs()
        if ((t - t.floor() - 0.5).abs() > 1e-3).any():
            return "1-LSB difference away from a tie"
    return ""


def prepare_rows(S: _Sweep):
    """Inputs for the row sweep and one compile job per (op, candidate, shape)."""
    dev = S.dev
    g = torch.Generator(device=dev).manual_seed(1)
    data = {}
    for T, H, _ in ROW_SHAPES:
        if (T, H) in data:
            continue
        nc = copies_for(T * H * 2 * 2)
        xs, rs = _rows_inputs(T, H, dev, g, nc, True)
        gm = (torch.rand(H, generator=g, device=dev) + 0.5).to(torch.bfloat16)
        sm = torch.rand(H, generator=g, device=dev) + 0.5
        data[(T, H)] = (xs, rs, gm, sm)
    jobs = []
    for T, H, smooth in ROW_SHAPES:
        xs, rs, gm, sm = data[(T, H)]
        for name in (ROW_LARGE if T > 256 else ROW_SMALL):
            c = ROW_CANDS[name]
            jobs.append((f"dq {name} {T} {H} {smooth}", lambda c=c, x=xs[0], s=(sm if smooth else None):
                         TQ.dynamic_quant_config(x, smooth_scales=s, config=c)))
            if smooth:
                jobs.append((f"rms {name} {T} {H}", lambda c=c, x=xs[0], r=rs[0], gm=gm, sm=sm:
                             TQ.rms_norm_dynamic_quant_config(x, gm, epsilon=1e-6, residual=r, smooth_scales=sm, config=c)))
    return data, jobs


def sweep_rows(S: _Sweep, data):
    """dynamic_quant / rms_norm_dynamic_quant: candidates per (T, H); WINNER per op and bucket (small T ≤ 256, large T)."""
    dev = S.dev
    shapes = ROW_SHAPES
    emit("\n## sweep2: row kernels (bf16 in, µs per call, CUDA-graph replay, inputs rotated past L2)\n")
    emit("| op | T | H | smooth | candidate | config | µs | GB/s | % of copy | check |")
    emit("|---|---|---|---|---|---|---|---|---|---|")
    for op in ("dynamic_quant", "rms_norm_dynamic_quant"):
        for T, H, smooth in shapes:
            if op == "rms_norm_dynamic_quant" and not smooth:
                continue
            xs, rs, gm, sm = data[(T, H)]
            s = sm if smooth else None
            if op == "dynamic_quant":
                ref = RQ.dynamic_quant(xs[0].cpu(), smooth_scales=s.cpu() if s is not None else None)
                by = T * H * 3 + T * 4
            else:
                ref = tuple(t.to(dev) for t in RQ.rms_norm_dynamic_quant(
                    xs[0].cpu(), gm.cpu(), epsilon=1e-6, residual=rs[0].cpu(), smooth_scales=sm.cpu()))
                by = T * H * 7 + T * 4
            cands = ["default"] + (ROW_LARGE if T > 256 else ROW_SMALL)
            for name in cands:
                if S.late():
                    emit("<!-- sweep2 budget spent -->")
                    return
                c = None if name == "default" else ROW_CANDS[name]
                try:
                    if op == "dynamic_quant":
                        out = TQ.dynamic_quant_config(xs[0], smooth_scales=s, config=c)
                        bad = _check_dq(*out, *ref)
                        fns = [lambda x=x, c=c: TQ.dynamic_quant_config(x, smooth_scales=s, config=c) for x in xs]
                    else:
                        out = TQ.rms_norm_dynamic_quant_config(xs[0], gm, epsilon=1e-6, residual=rs[0], smooth_scales=sm, config=c)
                        bad = _check_rms(out, ref, xs[0], rs[0], gm, sm)
                        fns = [lambda x=x, r=r, c=c: TQ.rms_norm_dynamic_quant_config(
                            x, gm, epsilon=1e-6, residual=r, smooth_scales=sm, config=c) for x, r in zip(xs, rs)]
                    t = graph_time_us(fns)
                except Exception as e:  # noqa: BLE001
                    emit(f"<!-- {op} {name} T={T} H={H}: {type(e).__name__}: {str(e)[:200]} -->")
                    continue
                gbs = by / (t * 1e-6) / 1e9
                cfg_s = "(quant.json)" if c is None else json.dumps(c)
                emit(f"| {op} | {T} | {H} | {smooth} | {name} | `{cfg_s}` | {t:.2f} | {gbs:.0f} | {100 * gbs / S.bw:.0f}% | {bad or 'exact' if op == 'dynamic_quant' else bad or 'ok'} |")
                S.results.append(dict(kind="row", op=op, T=T, H=H, smooth=smooth, name=name, config=c, us=t, ok=not bad))


def prepare_qmm(S: _Sweep):
    dev = S.dev
    sets = {}
    for grp in QMM_GROUPS.values():
        for K, N in grp["shapes"]:
            for M in grp["Ms"]:
                if (M, K, N) not in sets:
                    sets[(M, K, N)] = qmm_inputs(M, K, N, dev, copies_for(K * N))
    jobs = []
    for gname, grp in QMM_GROUPS.items():
        for name, c in grp["cands"].items():
            for K, N in grp["shapes"]:
                M = grp["Ms"][-1]
                jobs.append((f"{gname} {name} {K} {N}", lambda c=c, s=sets[(M, K, N)][0]: TQ.quant_matmul_config(*s, config=c)))
    return sets, jobs


def sweep_qmm(S: _Sweep, sets):
    dev = S.dev
    emit("\n## sweep2: quant_matmul decode (K-major int8 weights rotated past L2, bf16 out, µs per call, CUDA-graph replay)\n")
    emit("| group | M | K | N | candidate | split | work items | µs | weight GB/s | % of copy | check |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|")
    for gname, grp in QMM_GROUPS.items():
        for M in grp["Ms"]:
            for K, N in grp["shapes"]:
                ss = sets[(M, K, N)]
                ref = RQ.quant_matmul(*ss[0], out_dtype=QMM_OUT[0])
                for name in ["default"] + list(grp["cands"]):
                    if S.late():
                        emit("<!-- sweep2 budget spent -->")
                        return
                    c = None if name == "default" else grp["cands"][name]
                    try:
                        o1 = TQ.quant_matmul_config(*ss[0], config=c, out_dtype=QMM_OUT[0])
                        o2 = TQ.quant_matmul_config(*ss[0], config=c, out_dtype=QMM_OUT[0])
                        bad = "" if torch.equal(o1, ref) and torch.equal(o2, ref) else \
                            f"differs from the reference (max {(o1.float() - ref.float()).abs().max().item():.3g})"
                        t = time_qmm(ss, c)
                        plan = TQ.plan_quant_matmul(M, N, K, dev, c)
                    except Exception as e:  # noqa: BLE001
                        emit(f"<!-- qmm {gname} {name} M={M} K={K} N={N}: {type(e).__name__}: {str(e)[:200]} -->")
                        continue
                    items = -(-M // int(plan["BLOCK_M"])) * -(-N // int(plan["BLOCK_N"])) * plan["SPLIT_K"]
                    wgbs = K * N / (t * 1e-6) / 1e9
                    emit(f"| {gname} | {M} | {K} | {N} | {name} | {plan['SPLIT_K']} | {items} | {t:.2f} | {wgbs:.0f} | "
                         f"{100 * wgbs / S.bw:.0f}% | {bad or 'exact'} |")
                    S.results.append(dict(kind="qmm", bucket=gname, M=M, K=K, N=N, name=name, config=c, us=t, ok=not bad,
                                          ideal=K * N / (S.bw * 1e9) * 1e6))
    # the counters must be back at zero after all those calls
    bad_cnt = [k for k, (buf, _) in TQ._COUNTERS.items() if int(buf.abs().sum().item()) != 0]
    emit(f"\n<!-- split-K counters all zero after the sweep: {not bad_cnt} -->")


def sweep_pipeline(S: _Sweep, row_cfg):
    """dynamic_quant (no smooth) + quant_matmul at 4096×7168×2048: the effective-TOPS floor, default vs row winner."""
    dev = S.dev
    emit("\n## sweep2: dynamic_quant + quant_matmul at M=4096, K=7168, N=2048 (same x every call, as the floor's measurement)\n")
    M, K, N = PIPE_MKN
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, K, generator=g, device=dev).to(torch.bfloat16)
    w = RQ.pack_weight(torch.randint(-127, 128, (K, N), generator=g, device=dev, dtype=torch.int8))
    ws = torch.rand(N, generator=g, device=dev) * 1e-4
    fl = 2 * M * N * K
    emit("| row config | dynamic_quant µs | quant_matmul µs | both µs | effective TOPS |")
    emit("|---|---|---|---|---|")
    q, sc = TQ.dynamic_quant(x)
    t_mm = graph_time_us([lambda: TQ.quant_matmul(q, w, ws, sc)])
    for name, c in (("default", None), ("old_default", OLD_ROW), ("row winner", row_cfg)):
        if c is None and name != "default":
            continue
        t_dq = graph_time_us([lambda: TQ.dynamic_quant_config(x, config=c)])

        def both(c=c):
            qq, ss = TQ.dynamic_quant_config(x, config=c)
            return TQ.quant_matmul(qq, w, ws, ss)
        t_b = graph_time_us([both])
        emit(f"| {name} `{json.dumps(c) if c else ''}` | {t_dq:.1f} | {t_mm:.1f} | {t_b:.1f} | {fl / (t_b * 1e-6) / 1e12:.0f} |")


def _winners(S: _Sweep):
    emit("\n## sweep2 winners (paste into ops/triton/configs/quant.json \"cuda\")\n")
    row_large = None
    for op in ("dynamic_quant", "rms_norm_dynamic_quant"):
        for cls, pred in (("small T<=256", lambda r: r["T"] <= 256), ("large T>256", lambda r: r["T"] > 256)):
            rs = [r for r in S.results if r["kind"] == "row" and r["op"] == op and pred(r)]
            keys = sorted({(r["T"], r["H"], r["smooth"]) for r in rs})
            base = {k: next((r["us"] for r in rs if r["name"] == "default" and (r["T"], r["H"], r["smooth"]) == k), float("nan"))
                    for k in keys}
            best_t = {k: min((r["us"] for r in rs if r["ok"] and (r["T"], r["H"], r["smooth"]) == k), default=float("nan"))
                      for k in keys}
            score = {}
            for name in {r["name"] for r in rs}:
                mine = {(r["T"], r["H"], r["smooth"]): r for r in rs if r["name"] == name}
                if len(mine) < len(keys) or not all(r["ok"] for r in mine.values()):
                    continue
                score[name] = sum(mine[k]["us"] / best_t[k] for k in keys) / len(keys)  # mean time relative to the best
            if not score:
                emit(f"WINNER {op} {cls}: none measured")
                continue
            best = min(score, key=score.get)
            cfg = ROW_CANDS.get(best) if best != "default" else None
            if cfg is not None:
                cfg = dict(max_m=256 if cls.startswith("small") else 1073741824, **cfg)
            detail = ", ".join(f"T={k[0]} H={k[1]}{' s' if k[2] else ''}: {next(r['us'] for r in rs if r['name'] == best and (r['T'], r['H'], r['smooth']) == k):.1f} µs (default {base[k]:.1f})" for k in keys)
            emit(f"WINNER {op} {cls}: {json.dumps(cfg) if cfg else '(the quant.json default)'}  mean t/t_best={score[best]:.3f} "
                 f"(default {score.get('default', float('nan')):.3f}); {detail}")
            if op == "dynamic_quant" and cls.startswith("large"):
                row_large = {k: v for k, v in cfg.items() if k != "max_m"} if cfg else None
    for bucket, grp in QMM_GROUPS.items():
        rs = [r for r in S.results if r["kind"] == "qmm" and r["bucket"] == bucket]
        keys = sorted({(r["M"], r["K"], r["N"]) for r in rs})
        score = {}
        for name in {r["name"] for r in rs}:
            mine = {(r["M"], r["K"], r["N"]): r for r in rs if r["name"] == name}
            if len(mine) < len(keys) or not all(r["ok"] for r in mine.values()):
                continue
            score[name] = max(mine[k]["us"] / mine[k]["ideal"] for k in keys)  # worst shape: t / t_copy
        if not score:
            emit(f"WINNER quant_matmul {bucket}: none measured")
            continue
        best = min(score, key=score.get)
        cfg = grp["cands"].get(best) if best != "default" else None
        detail = ", ".join(f"M={k[0]} K={k[1]} N={k[2]}: {next(r['us'] for r in rs if r['name'] == best and (r['M'], r['K'], r['N']) == k):.2f} µs" for k in keys)
        pct = 100 / score[best]
        dpct = 100 / score["default"] if "default" in score else float("nan")
        emit(f"WINNER quant_matmul {bucket}: {json.dumps(dict(grp['keys'], **cfg)) if cfg else '(the quant.json default)'}  "
             f"{best} worst shape at {pct:.0f}% of copy BW (floor 50%: {'met' if pct >= 50 else 'NOT met'}; "
             f"default {dpct:.0f}%); {detail}")
    return row_large


def sweep2(dev, bw_gbs, budget_s, parts=("qmm", "rows", "pipeline")):
    S = _Sweep(dev, bw_gbs, time.time() + budget_s)
    t0 = time.time()
    emit(f"\nDefaults under test (ops/triton/configs/quant.json cuda): dynamic_quant "
         f"{json.dumps(TQ._all_configs()['cuda']['dynamic_quant'])}; quant_matmul buckets "
         f"{json.dumps(TQ._all_configs()['cuda']['quant_matmul']['buckets'][:4])}")
    sets, qjobs = prepare_qmm(S) if "qmm" in parts else ({}, [])
    data, rjobs = prepare_rows(S) if "rows" in parts else (None, [])
    t1 = time.time()
    errs, tc = _precompile(qjobs + rjobs)     # every candidate kernel compiled up front, in threads
    emit(f"\n<!-- inputs {t1 - t0:.1f} s; {len(qjobs) + len(rjobs)} candidate launches precompiled in "
         f"{tc:.1f} s, {len(errs)} errors -->")
    for k, v in list(errs.items())[:12]:
        emit(f"<!-- compile/launch error {k}: {v} -->")
    for fn, arg in ((sweep_qmm, sets), (sweep_rows, data)):
        if (fn is sweep_qmm and "qmm" not in parts) or (fn is sweep_rows and "rows" not in parts):
            continue
        try:
            fn(S, arg)
        except Exception:  # noqa: BLE001
            emit(f"\n<!-- {fn.__name__} failed:\n{traceback.format_exc()[-1500:]}\n-->")
    del sets, data
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    row_cfg = _winners(S)
    if "pipeline" not in parts:
        return
    try:
        sweep_pipeline(S, row_cfg)
    except Exception:  # noqa: BLE001
        emit(f"\n<!-- sweep_pipeline failed:\n{traceback.format_exc()[-1500:]}\n-->")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "perf", "quant_gating_results.md"))
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--json", default=None, help="write the sweep log here")
    ap.add_argument("--floors", action="store_true", help="quant_matmul: only the floor shapes")
    ap.add_argument("--sweep-budget", type=float, default=1e9, help="seconds of sweeping at most")
    ap.add_argument("--only", default="", help="comma list of sections: qmm,pipeline,rows,gating,dispatch")
    ap.add_argument("--sweep2", action="store_true",
                    help="only the issue-4 candidate sweep (row kernels, decode quant_matmul, the 4096x7168x2048 "
                         "pipeline): correctness-checked, prints WINNER lines; ~100 s on an H200")
    ap.add_argument("--sweep2-budget", type=float, default=75.0, help="seconds of sweep2 (compile + timing) at most")
    ap.add_argument("--sweep2-parts", default="qmm,rows,pipeline", help="with --sweep2: which of qmm,rows,pipeline")
    ap.add_argument("--smoke", action="store_true", help="with --sweep2: CPU interpreter, tiny shapes (code check only)")
    ap.add_argument("--sweep2-groups", default="",
                    help="with --sweep2 qmm: comma list of quant_matmul groups to run (default: every group of "
                         f"QMM_GROUPS; also selectable: {', '.join(list(QMM_GEMV_GROUPS) + list(QMM_TINY_GROUPS))})")
    args = ap.parse_args()
    if args.sweep2_groups:
        pool = dict(QMM_GROUPS, **QMM_GEMV_GROUPS, **QMM_TINY_GROUPS)
        want = [g for g in args.sweep2_groups.split(",") if g]
        unknown = [g for g in want if g not in pool]
        if unknown:
            ap.error(f"unknown --sweep2-groups {unknown}; known: {sorted(pool)}")
        QMM_GROUPS.clear()
        QMM_GROUPS.update({g: pool[g] for g in want})
    if args.smoke:
        global ROW_SHAPES, PIPE_MKN
        SMOKE[0] = True
        ROW_SHAPES = [(300, 96, True), (300, 96, False), (3, 96, True), (3, 40, True)]
        PIPE_MKN = (40, 256, 64)
        QMM_OUT[0] = torch.float32
        for grp in QMM_GROUPS.values():  # interpreter: tiny shapes, every candidate (each kernel variant runs)
            grp["shapes"] = [(1152, 80)]   # K not a multiple of BLOCK_K >= 256, N not a multiple of BLOCK_N
            grp["Ms"] = tuple(sorted({1, min(grp["Ms"][-1], 20)}))
        for k in list(ROW_CANDS)[5:]:
            ROW_SMALL[:] = [n for n in ROW_SMALL if n != k]
            ROW_LARGE.remove(k)
            del ROW_CANDS[k]
    dev = torch.device("cpu" if args.smoke else "cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    _OUT_FILE.append(open(args.out, "w"))
    emit(f"# quant / gating benchmarks — {time.strftime('%Y-%m-%d %H:%M')}")
    if args.smoke:
        bw = 1.0
        emit("smoke run (CPU interpreter)")
        sweep2(dev, bw, args.sweep2_budget, args.sweep2_parts.split(","))
        _OUT_FILE[0].close()
        return 0
    emit(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
         f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs. Command: `python3 perf/bench_quant_gating.py "
         f"{' '.join(sys.argv[1:])}`. µs = median per call over CUDA-graph replays (inputs rotated past L2).")
    bw = copy_bandwidth(dev)
    emit(f"\nMeasured device copy bandwidth: **{bw:.0f} GB/s** (1 GiB fp32 dst.copy_(src), bytes read + written).")
    sweep_log: list[dict] = []
    SWEEP_DEADLINE[0] = time.time() + args.sweep_budget
    FLOORS_ONLY[0] = args.floors
    if args.json:
        SWEEP_JSON.append(args.json)
    only = set(filter(None, args.only.split(",")))
    t0 = time.time()
    if args.sweep2:
        try:
            sweep2(dev, bw, args.sweep2_budget, args.sweep2_parts.split(","))
        except Exception:  # noqa: BLE001
            emit(f"\n<!-- sweep2 failed:\n{traceback.format_exc()[-1500:]}\n-->")
        emit(f"\n<!-- sweep2 done at {time.time() - t0:.0f} s -->")
        if not only:
            _OUT_FILE[0].close()
            return 0
    for key, fn in (("gating", lambda: bench_gating(dev, args.sweep, sweep_log)),
                    ("qmm", lambda: bench_quant_matmul(dev, bw, args.sweep, sweep_log)),
                    ("pipeline", lambda: bench_quant_pipeline(dev)),
                    ("rows", lambda: bench_row_quant(dev, bw)),
                    ("dispatch", lambda: bench_dispatch(dev))):
        if only and key not in only:
            continue
        try:
            fn()
        except Exception:  # noqa: BLE001
            emit(f"\n<!-- section {key} failed:\n{traceback.format_exc()[-1500:]}\n-->")
        emit(f"\n<!-- {key} done at {time.time() - t0:.0f} s -->")
    _OUT_FILE[0].close()
    _dump_sweep(sweep_log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
