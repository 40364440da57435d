"""Triton tiled GEMM of SmoothQuant W8A8, ``ds::quant_matmul``; the module the ``ds::dynamic_quant`` /
``ds::rms_norm_dynamic_quant`` / ``ds::quant_matmul`` registrations (ops/quant.py) name.

One source for CUDA (triton ≥ 3.2, tested with 3.6 on the H200), Ascend (triton-ascend 3.2) and the CPU
interpreter (``TRITON_INTERPRET=1``). Kernel families, one module each:

* row quantisation (:func:`dynamic_quant`, :func:`rms_norm_dynamic_quant`): :mod:`ops.triton.quant_row`,
  re-exported here;
* the tiled GEMM (:func:`quant_matmul`): this module — ``out = (Σ_k x[m,k]·w[k,n]) · weight_scale[n] ·
  x_scale[m] (+ bias[n])``, int8 ``tl.dot`` with an int32 accumulator (``out_dtype=tl.int32`` spelled out for
  triton 3.6), fp32 epilogue fused. Small M splits K into int32 partial sums (plain stores into a workspace
  ``[split, M, N]``) that either a tiny epilogue kernel adds (``reduce: "kernel"``) or the last-arriving split of
  each tile adds itself (``reduce: "atomic"``, CUDA: an int32 counter per tile, one launch). int32 addition is
  exact, so both are deterministic and bit-identical. Bucket key ``k_batch`` (:func:`_qmm_batched_k`): each K
  step as k_batch slices in one batched (3-D) dot into k_batch int32 accumulators, summed at the end;
* the streaming GEMV (``mma: "gemv_stream"``, M ≤ 4): :mod:`ops.triton.quant_gemv`, dispatched from
  :func:`quant_matmul_config`.

Launch configs are data: section ``quant_matmul`` of ``ops/triton/configs/<backend>/quant.json`` ("cuda" /
"ascend"; the interpreter uses "ascend" so CI exercises the persistent-loop path); the plan
(:func:`plan_quant_matmul`) and the table grammar: :mod:`ops.triton._quant_common`, :mod:`ops.triton._common`.
No host synchronisation; M = 0 returns an empty tensor without a launch; offsets into x / out / the weight are int64.

Weights: ``quant_matmul`` takes the weight *logically* as ``[K, N]`` and reads it through its strides.
The fast layout is K-major on CUDA (Hopper's int8 MMA wants both operands K-major): keep ``[N, K]``
contiguous and pass its ``.t()``. ``reference.quant.pack_weight`` produces that layout once, offline.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import backend_key as _backend_key, bf16_cpu_output_reason as _bf16_cpu_output_reason, \
    cdiv as _cdiv, unit_inner as _unit_inner
from ._pdl import pdl_enter, pdl_kwargs
from . import _quant_common, quant_row
from ._quant_common import (GEMV_STREAM, MMA_MODES, bucket, capped_grid, counters, gemv_stream_plan, make_qmm_plan,
                            plan_quant_matmul, qmm_plan, split_k_buffers, store_out, tables)
from .quant_gemv import gemv_stream_dp4a_ok, gemv_stream_int32, gemv_stream_int32_ok, quant_matmul_gemv
from .quant_row import (dynamic_quant, dynamic_quant_config, rms_norm_dynamic_quant, rms_norm_dynamic_quant_config,
                        supports_reason_dynamic_quant, supports_reason_rms_norm_dynamic_quant)

_OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _qmm_kstep(acc, a_ptrs, b_ptrs, k, k_len, rk, mmask, nmask, EVEN_K: tl.constexpr, WRAP: tl.constexpr,
               MASK_M: tl.constexpr, MMA: tl.constexpr):
    """One K step of :func:`_qmm_item`: loads the x tile at ``a_ptrs`` and the weight tile at ``b_ptrs`` (K offset
    ``k`` of ``k_len``; masks as the item's flags say) and returns acc + x·w (MMA 0) or accT + wT·xT (MMA 1)."""
    if EVEN_K:
        if WRAP:
            if MASK_M:
                a = tl.load(a_ptrs, mask=mmask[:, None], other=0)
            else:
                a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        elif MMA == 0:
            a = tl.load(a_ptrs, mask=mmask[:, None], other=0)
            b = tl.load(b_ptrs, mask=nmask[None, :], other=0)
        else:
            a = tl.load(a_ptrs, mask=mmask[:, None], other=0)
            b = tl.load(b_ptrs, mask=nmask[:, None], other=0)
    else:
        kmask = (k + rk) < k_len
        if WRAP:
            if MASK_M:
                a = tl.load(a_ptrs, mask=mmask[:, None] & kmask[None, :], other=0)
            else:
                a = tl.load(a_ptrs, mask=kmask[None, :], other=0)
            if MMA == 0:
                b = tl.load(b_ptrs, mask=kmask[:, None], other=0)
            else:
                b = tl.load(b_ptrs, mask=kmask[None, :], other=0)
        else:
            a = tl.load(a_ptrs, mask=mmask[:, None] & kmask[None, :], other=0)
            if MMA == 0:
                b = tl.load(b_ptrs, mask=kmask[:, None] & nmask[None, :], other=0)
            else:
                b = tl.load(b_ptrs, mask=nmask[:, None] & kmask[None, :], other=0)
    if MMA == 0:
        return tl.dot(a, b, acc, out_dtype=tl.int32)
    else:
        return tl.dot(b, tl.trans(a), acc, out_dtype=tl.int32)


@triton.jit
def _qmm_kstep3(acc, a_ptrs, b_ptrs, k, k_len, kk, mmask, nmask, EVEN_K: tl.constexpr, WRAP: tl.constexpr,
                MASK_M: tl.constexpr):
    """One K step of :func:`_qmm_item` with K_BATCH > 1: x tile [K_BATCH, BM, BK/K_BATCH] and weight tile
    [K_BATCH, BK/K_BATCH, BN] (``kk`` [K_BATCH, BK/K_BATCH]: their K offsets in the step), one batched dot."""
    if EVEN_K:
        if WRAP:
            if MASK_M:
                a = tl.load(a_ptrs, mask=mmask[None, :, None], other=0)
            else:
                a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=mmask[None, :, None], other=0)
            b = tl.load(b_ptrs, mask=nmask[None, None, :], other=0)
    else:
        kmask = (k + kk) < k_len
        if WRAP:
            if MASK_M:
                a = tl.load(a_ptrs, mask=mmask[None, :, None] & kmask[:, None, :], other=0)
            else:
                a = tl.load(a_ptrs, mask=kmask[:, None, :], other=0)
            b = tl.load(b_ptrs, mask=kmask[:, :, None], other=0)
        else:
            a = tl.load(a_ptrs, mask=mmask[None, :, None] & kmask[:, None, :], other=0)
            b = tl.load(b_ptrs, mask=kmask[:, :, None] & nmask[None, None, :], other=0)
    return tl.dot(a, b, acc, out_dtype=tl.int32)


@triton.jit
def _qmm_k(x_ptr, w_ptr, rm, rn, k_start, k_len, mmask, nmask, stride_xm, stride_wk, stride_wn,
           W_LAYOUT: tl.constexpr, WRAP: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr,
           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MASK_M: tl.constexpr, MMA: tl.constexpr):
    """The int32 tile [BLOCK_M, BLOCK_N] of x rows ``rm`` × weight columns ``rn`` over K [k_start, k_start + k_len)
    in BLOCK_K steps (one 2-D dot per step; MMA 1 = swap-AB)."""
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = x_ptr + (rm.to(tl.int64)[:, None] * stride_xm + (k_start + rk)[None, :])
    if MMA == 0:
        if W_LAYOUT == 0:
            b_ptrs = w_ptr + ((k_start + rk)[:, None] + rn.to(tl.int64)[None, :] * stride_wn)
        elif W_LAYOUT == 1:
            b_ptrs = w_ptr + ((k_start + rk).to(tl.int64)[:, None] * stride_wk + rn[None, :])
        else:
            b_ptrs = w_ptr + ((k_start + rk).to(tl.int64)[:, None] * stride_wk + rn.to(tl.int64)[None, :] * stride_wn)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    else:  # the weight tile transposed: [BLOCK_N, BLOCK_K]
        if W_LAYOUT == 0:
            b_ptrs = w_ptr + (rn.to(tl.int64)[:, None] * stride_wn + (k_start + rk)[None, :])
        elif W_LAYOUT == 1:
            b_ptrs = w_ptr + (rn[:, None] + (k_start + rk).to(tl.int64)[None, :] * stride_wk)
        else:
            b_ptrs = w_ptr + (rn.to(tl.int64)[:, None] * stride_wn + (k_start + rk).to(tl.int64)[None, :] * stride_wk)
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.int32)   # accT
    for k in range(0, k_len, BLOCK_K):
        acc = _qmm_kstep(acc, a_ptrs, b_ptrs, k, k_len, rk, mmask, nmask, EVEN_K, WRAP, MASK_M, MMA)
        a_ptrs += BLOCK_K
        if W_LAYOUT == 0:
            b_ptrs += BLOCK_K
        else:
            b_ptrs += BLOCK_K * stride_wk
    if MMA == 1:
        acc = tl.trans(acc)
    return acc


@triton.jit
def _qmm_batched_k(x_ptr, w_ptr, rm, rn, k_start, k_len, mmask, nmask, stride_xm, stride_wk, stride_wn,
                   W_LAYOUT: tl.constexpr, WRAP: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MASK_M: tl.constexpr, K_BATCH: tl.constexpr):
    """:func:`_qmm_k` with each BLOCK_K step cut into K_BATCH slices of BLOCK_K / K_BATCH, multiplied as one batched
    (3-D) dot into K_BATCH int32 accumulators that are summed at the end (exact: the same int32 sum). On CUDA, with
    K_BATCH = num_warps, Triton lays the 3-D mma.sync dot out one warp per slice, so a narrow tile (BM 16, BN 16)
    gets short accumulator chains per warp instead of one long chain repeated by two warps each."""
    BKS: tl.constexpr = BLOCK_K // K_BATCH
    kk = tl.arange(0, K_BATCH)[:, None] * BKS + tl.arange(0, BKS)[None, :]    # [K_BATCH, BKS] offsets in a step
    a_ptrs = x_ptr + (rm.to(tl.int64)[None, :, None] * stride_xm + (k_start + kk)[:, None, :])
    if W_LAYOUT == 0:
        b_ptrs = w_ptr + ((k_start + kk)[:, :, None] + rn.to(tl.int64)[None, None, :] * stride_wn)
    elif W_LAYOUT == 1:
        b_ptrs = w_ptr + ((k_start + kk).to(tl.int64)[:, :, None] * stride_wk + rn[None, None, :])
    else:
        b_ptrs = w_ptr + ((k_start + kk).to(tl.int64)[:, :, None] * stride_wk
                          + rn.to(tl.int64)[None, None, :] * stride_wn)
    acc = tl.zeros((K_BATCH, BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, k_len, BLOCK_K):
        acc = _qmm_kstep3(acc, a_ptrs, b_ptrs, k, k_len, kk, mmask, nmask, EVEN_K, WRAP, MASK_M)
        a_ptrs += BLOCK_K
        if W_LAYOUT == 0:
            b_ptrs += BLOCK_K
        else:
            b_ptrs += BLOCK_K * stride_wk
    return tl.sum(acc, axis=0)


@triton.jit
def _qmm_item(item, x_ptr, w_ptr, ws_ptr, xs_ptr, bias_ptr, out_ptr, part_ptr, cnt_ptr,
              M, N, K, K_PER_SPLIT, SPLIT_K, stride_xm, stride_wk, stride_wn, stride_om, num_pid_m, num_pid_n, n_tiles,
              W_LAYOUT: tl.constexpr, WRAP: tl.constexpr, PARTIALS: tl.constexpr, HAS_BIAS: tl.constexpr,
              EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              GROUP_M: tl.constexpr, REDUCE: tl.constexpr, MASK_M: tl.constexpr, MMA: tl.constexpr,
              K_BATCH: tl.constexpr):
    """One work item of :func:`_qmm_kernel` (inlined): item = split · n_tiles + tile."""
    split = item // n_tiles
    tile = item % n_tiles
    group = GROUP_M * num_pid_n
    first_m = (tile // group) * GROUP_M
    gsize = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % group) % gsize
    pid_n = (tile % group) // gsize
    om = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = om < M
    nmask = on < N
    if WRAP:
        if MASK_M:
            rm = om
        else:
            rm = om % M
        rn = on % N
    else:
        rm = om
        rn = on
    k_start = split * K_PER_SPLIT
    k_len = tl.minimum(K - k_start, K_PER_SPLIT)
    if K_BATCH > 1:
        acc = _qmm_batched_k(x_ptr, w_ptr, rm, rn, k_start, k_len, mmask, nmask, stride_xm, stride_wk, stride_wn,
                             W_LAYOUT, WRAP, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, MASK_M, K_BATCH)
    else:
        acc = _qmm_k(x_ptr, w_ptr, rm, rn, k_start, k_len, mmask, nmask, stride_xm, stride_wk, stride_wn,
                     W_LAYOUT, WRAP, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, MASK_M, MMA)
    omask = mmask[:, None] & nmask[None, :]
    if not PARTIALS:
        store_out(acc, ws_ptr, xs_ptr, bias_ptr, out_ptr, om, on, mmask, nmask, stride_om, HAS_BIAS)
    else:
        p = part_ptr + (split.to(tl.int64) * M + om.to(tl.int64)[:, None]) * N + on[None, :]
        tl.store(p, acc, mask=omask)
        if REDUCE:
            tl.debug_barrier()
            arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
            if arrived == SPLIT_K - 1:
                pq = part_ptr + om.to(tl.int64)[:, None] * N + on[None, :]
                for s2 in range(0, SPLIT_K):
                    if s2 != split:
                        acc += tl.load(pq, mask=omask, other=0, cache_modifier=".cg")
                    pq += M.to(tl.int64) * N
                store_out(acc, ws_ptr, xs_ptr, bias_ptr, out_ptr, om, on, mmask, nmask, stride_om, HAS_BIAS)
                tl.atomic_xchg(cnt_ptr + tile, 0)


@triton.jit(do_not_specialize=["M", "SPLIT_K"])
def _qmm_kernel(x_ptr, w_ptr, ws_ptr, xs_ptr, bias_ptr, out_ptr, part_ptr, cnt_ptr,
                M, N, K, K_PER_SPLIT, SPLIT_K,
                stride_xm, stride_wk, stride_wn, stride_om,
                W_LAYOUT: tl.constexpr, WRAP: tl.constexpr, PARTIALS: tl.constexpr, HAS_BIAS: tl.constexpr,
                EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                GROUP_M: tl.constexpr, REDUCE: tl.constexpr = False, MASK_M: tl.constexpr = False,
                MMA: tl.constexpr = 0, PDL: tl.constexpr = False, K_BATCH: tl.constexpr = 1):
    """One work item = (split, BLOCK_M × BLOCK_N output tile). PARTIALS False (SPLIT_K == 1): fused fp32
    epilogue; True: int32 partial sums stored to part[split, M, N] for _qmm_epilogue_kernel. SPLIT_K is a
    runtime value so the split choice does not multiply compilations.

    x is read with a unit K stride. W_LAYOUT: 0 = K-major weight (stride_wk == 1, CUDA's packed layout),
    1 = row-major (stride_wn == 1, Ascend's ND layout), 2 = any strides. WRAP (CUDA): rows/columns past
    M/N wrap around (``% M``, never stored) instead of masking the loads; Ascend masks (its pointer
    analysis needs affine offsets). MASK_M (with WRAP): rows past M are masked instead (no load issued): at
    M = 1 a wrapped 16-row x tile is 16 requests for the same bytes from every program at once.

    REDUCE (CUDA, with PARTIALS): no epilogue kernel. After storing its partial, a work item bumps the tile's
    int32 counter ``cnt[tile]`` (acq_rel, after a CTA barrier); the item that sees SPLIT_K − 1 adds the other
    splits' partials (read through L2) to its own, applies the fp32 epilogue, stores ``out`` and resets the
    counter to 0, so ``cnt`` must start zeroed and stays zeroed. int32 addition is exact, so the result does
    not depend on the arrival order (deterministic, bit-identical to the two-kernel path).

    MMA (bucket key ``mma``; CUDA decode variants, 0 everywhere else): 0 ("dot") = ``tl.dot(x[BM, BK], w[BK, BN])``.
    1 ("swap", swap-AB) = the weight tile is loaded as wT[BLOCK_N, BLOCK_K] and ``accT[BN, BM] = tl.dot(wT,
    trans(x))``, so the weight's N fills the MMA's M slot (wgmma needs 64 rows) and the tokens its N slot; both
    operands stay K-major (int8 wgmma needs that) and the int32 tile is transposed back before the epilogue.
    Both add exact int32 products: bit-identical results. (The CUDA-core decode GEMV is a kernel of its own:
    ops.triton.quant_gemv._qmm_gemv_kernel.)

    K_BATCH (bucket key ``k_batch``, MMA 0 only; default 1): each BLOCK_K step is K_BATCH slices multiplied as one
    batched dot into K_BATCH accumulators, summed at the end (:func:`_qmm_batched_k`; bit-identical).

    PDL (CUDA sm_90+, bucket key ``pdl``, launched with ``launch_pdl``; :mod:`ops.triton._pdl`): each program first
    lets the next kernel on the stream launch, then waits for the previous one to finish, before it touches any
    memory."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    n_tiles = num_pid_m * num_pid_n
    if PDL:
        pdl_enter()
    for item in range(pid, n_tiles * SPLIT_K, nprog):
        _qmm_item(item, x_ptr, w_ptr, ws_ptr, xs_ptr, bias_ptr, out_ptr, part_ptr, cnt_ptr,
                  M, N, K, K_PER_SPLIT, SPLIT_K, stride_xm, stride_wk, stride_wn, stride_om, num_pid_m, num_pid_n,
                  n_tiles, W_LAYOUT, WRAP, PARTIALS, HAS_BIAS, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, REDUCE,
                  MASK_M, MMA, K_BATCH)


@triton.jit(do_not_specialize=["M", "SPLIT_K"])
def _qmm_epilogue_kernel(part_ptr, ws_ptr, xs_ptr, bias_ptr, out_ptr, M, N, SPLIT_K, stride_om,
                         HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = (Σ_split part[split]) · weight_scale · x_scale (+ bias), splits added in order (deterministic)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    n_tiles = tl.cdiv(M, BLOCK_M) * num_pid_n
    for tile in range(pid, n_tiles, nprog):
        om = (tile // num_pid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        on = (tile % num_pid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        mm = om < M
        mn = on < N
        m2 = mm[:, None] & mn[None, :]
        offs = om.to(tl.int64)[:, None] * N + on[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
        p = part_ptr + offs
        for _s in range(0, SPLIT_K):
            acc += tl.load(p, mask=m2, other=0)
            p += M.to(tl.int64) * N
        store_out(acc, ws_ptr, xs_ptr, bias_ptr, out_ptr, om, on, mm, mn, stride_om, HAS_BIAS)


K_MAX = (2**31 - 1) // (128 * 128)   # the largest K whose int8 dot products cannot overflow int32 (= reference.quant)


def supports_reason_quant_matmul(x_int8, weight_int8, weight_scale, x_scale, *, bias=None, out_dtype=torch.bfloat16) -> str | None:
    """Why the Triton kernel cannot take these inputs (None = it can)."""
    if x_int8.dtype != torch.int8 or weight_int8.dtype != torch.int8:
        return "x_int8 and weight_int8 must be int8"
    if x_int8.dim() != 2 or weight_int8.dim() != 2:
        return "x_int8 must be [M, K] and weight_int8 [K, N]"
    if out_dtype not in _OUT_DTYPES:
        return f"out_dtype must be one of {_OUT_DTYPES}, got {out_dtype}"
    if out_dtype == torch.bfloat16 and x_int8.device.type == "cpu":
        return _bf16_cpu_output_reason("out")
    if x_int8.shape[1] > K_MAX:
        return f"K > {K_MAX} could overflow the int32 accumulator (128² · K ≥ 2³¹)"
    return None


def quant_matmul(x_int8: torch.Tensor, weight_int8: torch.Tensor, weight_scale: torch.Tensor, x_scale: torch.Tensor, *,
                 bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """W8A8 GEMM with the dequant epilogue fused; mirrors ``torch_npu.npu_quant_matmul(..., pertoken_scale=)``.

    x_int8: [M, K] int8 (any strides); weight_int8: logically [K, N] int8, any strides (fast: K-major on
    CUDA, see ``reference.quant.pack_weight``); weight_scale: [N] fp32 per-channel scale; x_scale: [M] fp32
    per-token scale; bias: [N] float or None (added in fp32); out_dtype: bf16 / fp16 / fp32.
    Returns out [M, N] out_dtype = round(((Σ_k x·w as int32) · weight_scale) · x_scale + bias).
    M = 0 (or N = 0) returns an empty tensor without a launch; K = 0 runs the epilogue on a zero accumulator
    (bias, or 0; NaN where a scale is inf or NaN, as the reference gives).
    Launch config: the (M, N, K) bucket of configs/<backend>/quant.json; split-K when the tiles alone would not
    fill the device.
    Raises nothing itself: inputs are not validated here (ops/quant.py checks them and raises TypeError /
    ValueError naming the argument); see :func:`supports_reason_quant_matmul` for what this kernel refuses.
    """
    return quant_matmul_config(x_int8, weight_int8, weight_scale, x_scale, bias=bias, out_dtype=out_dtype)


def quant_matmul_config(x_int8: torch.Tensor, weight_int8: torch.Tensor, weight_scale: torch.Tensor,
                        x_scale: torch.Tensor, *, bias: torch.Tensor | None = None,
                        out_dtype: torch.dtype = torch.bfloat16, config: dict | None = None,
                        backend_key: str | None = None) -> torch.Tensor:
    """:func:`quant_matmul` with an explicit bucket ``config`` (BLOCK_M/N/K, GROUP_M, num_warps, num_stages,
    split_k) and/or config table ``backend_key`` ("cuda" / "ascend") — for perf sweeps and for tests that
    run the CUDA configs under the interpreter.

    Tensors, dtypes and result as :func:`quant_matmul` (x_int8 [M, K] int8, weight_int8 [K, N] int8, weight_scale
    [N] fp32, x_scale [M] fp32, bias [N] or None → out [M, N] out_dtype); inputs are not validated here.
    Raises ValueError if the bucket (``config`` or the table's) names a removed or unknown key, the removed mma
    "gemv", an mma that is not "dot" / "swap" / "gemv_stream" or a bad value (reduce, pdl, split_k, tile sizes,
    k_batch) (:func:`plan_quant_matmul`), or for mma "gemv_stream" with M > 4; KeyError for a backend_key that is not a table or a
    ``config`` missing a tile key. M = 0, N = 0 or K = 0 return before the plan is made, so nothing is raised then.
    """
    M, K = x_int8.shape
    N = weight_int8.shape[1]
    out = torch.empty((M, N), dtype=out_dtype, device=x_int8.device)
    if M == 0 or N == 0:
        return out
    # the epilogue reads weight_scale / bias as ptr + n and x_scale as ptr + m
    weight_scale, x_scale, bias = _unit_inner(weight_scale), _unit_inner(x_scale), _unit_inner(bias)
    if K == 0:   # no launch: the epilogue on a zero accumulator, in the kernel's order (0 · inf scales give NaN)
        o = torch.zeros((M, N), dtype=torch.float32, device=out.device) * weight_scale.float()[None, :]
        o = o * x_scale.float()[:, None]
        out.copy_(o + bias.float()[None, :] if bias is not None else o)
        return out
    dev = x_int8.device
    key = backend_key or _backend_key(dev)
    cfg = tables()[key]["quant_matmul"]
    plan = make_qmm_plan(M, N, K, key, config, dev) if config is not None else qmm_plan(M, N, K, key, dev)
    sk, k_per = plan["SPLIT_K"], plan["K_PER_SPLIT"]
    bm, bn, bk = int(plan["BLOCK_M"]), int(plan["BLOCK_N"]), int(plan["BLOCK_K"])
    mma = plan.get("mma", "dot")
    if mma == GEMV_STREAM:
        part = quant_matmul_gemv(x_int8, weight_int8, weight_scale, x_scale, bias, out, plan)
        if part is not None:
            _launch_qmm_epilogue(cfg, part, weight_scale, x_scale, bias if bias is not None else weight_scale, out,
                                 sk, bias is not None)
        return out
    tiles = _cdiv(M, bm) * _cdiv(N, bn)
    grid = capped_grid(tiles * sk, int(cfg.get("grid_cap", 0)))
    has_bias = bias is not None
    bias_arg = bias if has_bias else weight_scale
    if x_int8.stride(1) != 1 and K > 1:
        x_int8 = x_int8.contiguous()  # activations are small; the weight is never copied
    if weight_int8.stride(0) == 1 or K == 1:
        w_layout = 0
    elif weight_int8.stride(1) == 1 or N == 1:
        w_layout = 1
    else:
        w_layout = 2
    part, reduce, cnt = split_k_buffers(plan, sk, tiles, out, dev)
    launch = dict(num_warps=int(plan["num_warps"]))
    if dev.type == "cuda":
        launch["num_stages"] = int(plan["num_stages"])
    launch.update(pdl_kwargs(dev, bool(plan.get("pdl", False))))
    _qmm_kernel[(grid,)](x_int8, weight_int8, weight_scale, x_scale, bias_arg, out, part, cnt,
                         M, N, K, k_per, sk,
                         x_int8.stride(0), weight_int8.stride(0), weight_int8.stride(1), out.stride(0),
                         W_LAYOUT=w_layout, WRAP=bool(cfg.get("wrap", False)), PARTIALS=sk > 1, HAS_BIAS=has_bias,
                         EVEN_K=(K % bk == 0),
                         BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=int(plan["GROUP_M"]), REDUCE=reduce,
                         MASK_M=bool(plan.get("mask_m", False)), MMA=MMA_MODES[mma],
                         K_BATCH=int(plan.get("k_batch", 1)), **launch)
    if sk > 1 and not reduce:
        _launch_qmm_epilogue(cfg, part, weight_scale, x_scale, bias_arg, out, sk, has_bias)
    return out


def _launch_qmm_epilogue(cfg: dict, part, weight_scale, x_scale, bias_arg, out, sk: int, has_bias: bool) -> None:
    """The second kernel of a split-K launch with reduce "kernel": sums the ``sk`` int32 partials in split order
    and applies the fp32 epilogue (config "epilogue" tile)."""
    M, N = out.shape
    e = cfg["epilogue"]
    ebm, ebn = int(e["BLOCK_M"]), int(e["BLOCK_N"])
    etiles = _cdiv(M, ebm) * _cdiv(N, ebn)
    _qmm_epilogue_kernel[(capped_grid(etiles, int(e.get("grid_cap", 0))),)](
        part, weight_scale, x_scale, bias_arg, out, M, N, sk, out.stride(0),
        HAS_BIAS=has_bias, BLOCK_M=ebm, BLOCK_N=ebn, num_warps=int(e["num_warps"]))


def qmm_cases(b: dict, q: dict, tag: str, table: str) -> list[dict]:
    """Compile cases of one :func:`_qmm_kernel` bucket config ``b`` (named by ``tag``) of config section ``q``: fused
    and / or split-K (as its split_k allows), even / tail K, bf16 / fp16 out, with the layout pack_weight gives
    ``table``."""
    cases = []
    for partials in ((False, True) if b.get("split_k", "auto") == "auto" else (int(b["split_k"]) > 1,)):
        for even in (True, False):
            for out in ("*bf16", "*fp16"):
                sig = {"x_ptr": "*i8", "w_ptr": "*i8", "ws_ptr": "*fp32", "xs_ptr": "*fp32", "bias_ptr": "*fp32",
                       "out_ptr": out, "part_ptr": "*i32" if partials else out,
                       "cnt_ptr": "*i32" if partials else out,
                       "M": "i32", "N": "i32", "K": "i32",
                       "K_PER_SPLIT": "i32", "SPLIT_K": "i32", "stride_xm": "i32",
                       "stride_wk": "i32", "stride_wn": "i32", "stride_om": "i32", "W_LAYOUT": "constexpr",
                       "WRAP": "constexpr", "PARTIALS": "constexpr",
                       "HAS_BIAS": "constexpr", "EVEN_K": "constexpr", "BLOCK_M": "constexpr",
                       "BLOCK_N": "constexpr", "BLOCK_K": "constexpr", "GROUP_M": "constexpr",
                       "REDUCE": "constexpr", "MASK_M": "constexpr", "MMA": "constexpr", "PDL": "constexpr",
                       "K_BATCH": "constexpr"}
                # the layout pack_weight produces for this backend: ND row-major on Ascend, K-major on CUDA
                ce = dict(W_LAYOUT=1 if table == "ascend" else 0, WRAP=bool(q.get("wrap", False)),
                          PARTIALS=partials, HAS_BIAS=True, EVEN_K=even, BLOCK_M=int(b["BLOCK_M"]),
                          BLOCK_N=int(b["BLOCK_N"]), BLOCK_K=int(b["BLOCK_K"]), GROUP_M=int(b["GROUP_M"]),
                          REDUCE=partials and b.get("reduce", "kernel") == "atomic",
                          MASK_M=bool(b.get("mask_m", False)), MMA=MMA_MODES[b.get("mma", "dot")],
                          PDL=bool(b.get("pdl", False)) and table == "cuda",   # never on Ascend
                          K_BATCH=int(b.get("k_batch", 1)))
                split = "splitk" if partials else "fused"
                cases.append(dict(name=f"quant_matmul_{tag}_{split}_{'even' if even else 'tail'}_{out[1:]}",
                                  fn=_qmm_kernel, signature=sig, constexprs=ce, num_warps=int(b["num_warps"]),
                                  num_stages=int(b["num_stages"])))
    return cases


def ascend_compile_cases() -> list[dict]:
    """(kernel × Ascend launch config) cases of this module for the triton-ascend 3.2 + bishengir compile check, plus
    a probe of code the Ascend table does not use: the batched K step (the table's first quant_matmul bucket with
    ``k_batch`` 2 and BLOCK_N 128, bf16 out; at BLOCK_N 256 its masked K tail needs 294 KiB of the 192 KiB UB).
    (The row kernels' cases: ops.triton.quant_row; the streaming GEMV's: ops.triton.quant_gemv.)"""
    q = tables()["ascend"]["quant_matmul"]
    kb_bucket = dict(q["buckets"][0]["config"], k_batch=2, BLOCK_N=128)
    kb = [dict(c, name="probe_k_batch2_" + c["name"]) for c in qmm_cases(kb_bucket, q, "b0", "ascend")
          if c["signature"]["out_ptr"] == "*bf16"]
    return compile_cases("ascend") + kb


def compile_cases(table: str = "ascend") -> list[dict]:
    """(kernel × launch config of ``table``) cases of the tiled GEMM: every quant_matmul bucket that is not the
    streaming GEMV (named ``quant_matmul_b<index>_...``) and the split-K epilogue kernel; dict(name, fn, signature,
    constexprs, num_warps, num_stages)."""
    q = tables()[table]["quant_matmul"]
    cases: list[dict] = []
    for i, b in enumerate(q["buckets"]):
        if b["config"].get("mma") != GEMV_STREAM:
            cases.extend(qmm_cases(b["config"], q, f"b{i}", table))
    e = q["epilogue"]
    for out in ("*bf16", "*fp16"):
        sig = {"part_ptr": "*i32", "ws_ptr": "*fp32", "xs_ptr": "*fp32", "bias_ptr": "*fp32", "out_ptr": out,
               "M": "i32", "N": "i32", "SPLIT_K": "i32", "stride_om": "i32", "HAS_BIAS": "constexpr",
               "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
        cases.append(dict(name=f"quant_matmul_epilogue_{out[1:]}", fn=_qmm_epilogue_kernel, signature=sig,
                          constexprs=dict(HAS_BIAS=True, BLOCK_M=int(e["BLOCK_M"]), BLOCK_N=int(e["BLOCK_N"])),
                          num_warps=int(e["num_warps"])))
    return cases


def clear_caches() -> None:
    """Forget every memoised launch of the quant kernels (row launches and quant_matmul plans): for tests that
    compare warm with cold launches and for experiments that edit a config table in place."""
    _quant_common.clear_caches()
    quant_row.row_launch.cache_clear()


__all__ = ["clear_caches", "tables", "bucket", "counters", "qmm_cases", "quant_matmul_gemv", "gemv_stream_dp4a_ok",
           "MMA_MODES", "K_MAX", "dynamic_quant", "rms_norm_dynamic_quant", "dynamic_quant_config", "rms_norm_dynamic_quant_config",
           "quant_matmul", "quant_matmul_config", "plan_quant_matmul", "supports_reason_dynamic_quant",
           "supports_reason_rms_norm_dynamic_quant", "supports_reason_quant_matmul", "gemv_stream_plan",
           "gemv_stream_int32", "gemv_stream_int32_ok", "ascend_compile_cases", "compile_cases"]
