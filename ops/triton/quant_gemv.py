"""Triton streaming GEMV for W8A8 decode (``quant_matmul`` with ``mma: "gemv_stream"``, M ≤ 4) and its
two-weight int32 form for ``ds::mla_prolog``'s T = 1 down GEMM (:func:`gemv_stream_int32`).

No MMA: a weight-streaming grid of SMs × programs_per_sm programs with register-direct vector loads, int32
products accumulated elementwise over K (optionally ``dp4a`` on CUDA) and one reduction per output; the fp32
epilogue as the tiled GEMM's (:mod:`ops.triton._quant_common`). Plans come from
:func:`ops.triton.quant.plan_quant_matmul`; ``ops.triton.quant.quant_matmul`` dispatches here.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import cdiv as _cdiv, device_cores
from ._pdl import pdl_enter, pdl_kwargs
from ._quant_common import (GEMV_MAX_M, GEMV_STREAM, capped_grid, max_rows, split_k_buffers, store_row,
                            tables)


@triton.jit
def _gemv_mac(w, xv, acc, DP4A: tl.constexpr):
    """acc + w·x elementwise in int32. DP4A (CUDA only): w, xv are int32 words of 4 packed int8 and one
    ``dp4a.s32.s32`` adds the 4 byte products to each accumulator; else w, xv are int8 (one product each)."""
    if DP4A:
        acc = tl.inline_asm_elementwise("dp4a.s32.s32 $0, $1, $2, $3;", "=r,r,r,r", [w, xv, acc],
                                        dtype=tl.int32, is_pure=True, pack=1)
    else:
        acc = acc + w.to(tl.int32) * xv.to(tl.int32)
    return acc


@triton.jit
def _gemv_load(ptrs, k, rk, k_len, EVEN_K: tl.constexpr):
    if EVEN_K:
        v = tl.load(ptrs)
    else:
        v = tl.load(ptrs, mask=((k + rk) < k_len)[None, :], other=0)
    return v


@triton.jit
def _gemv_partial_row(r, m: tl.constexpr, split, part_ptr, M, N, on, nmask):
    """Store token row m's int32 partial sums r [BLOCK_N] at part[split, m, on]."""
    tl.store(part_ptr + (split.to(tl.int64) * M + m) * N + on, r, mask=nmask)


@triton.jit
def _gemv_reduce_row(r, m: tl.constexpr, split, part_ptr, M, N, SPLIT_K, on, nmask):
    """r + Σ_{s ≠ split} part[s, m, on] (read through L2): the last-arriving split's total for row m."""
    pq = part_ptr + (on.to(tl.int64) + m * N)
    for s2 in range(0, SPLIT_K):
        if s2 != split:
            r += tl.load(pq, mask=nmask, other=0, cache_modifier=".cg")
        pq += M * N   # M ≤ 4 here; M may be the constant 1 on CUDA (specialised), which has no .to()
    return r


@triton.jit(do_not_specialize=["SPLIT_K"])
def _qmm_gemv_kernel(x_ptr, w_ptr, ws_ptr, xs_ptr, bias_ptr, out_ptr, part_ptr, cnt_ptr, w2_ptr, N1,
                     M, N, K_U, K_PER_SPLIT_U, SPLIT_K, stride_xm_u, stride_wk_u, stride_wn_u, stride_om,
                     MROWS: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_KU: tl.constexpr, PARTIALS: tl.constexpr, REDUCE: tl.constexpr, DP4A: tl.constexpr,
                     PREFETCH: tl.constexpr = False, PDL: tl.constexpr = False, TWO_W: tl.constexpr = False):
    """Streaming GEMV for M = MROWS ≤ 4 token rows (bucket key ``mma: "gemv_stream"``), shaped like a pure
    weight-read kernel: a grid of SMs × ``programs_per_sm`` programs, each taking a contiguous run of work
    items (item = tile · SPLIT_K + split; tile = BLOCK_N weight rows n, split = a K range of K_PER_SPLIT_U);
    per K step one [BLOCK_N, BLOCK_KU] weight tile loads straight to registers (wide vector loads, no shared
    memory, no MMA) and the x rows (tiny, L1/L2 resident) load as the same-layout row-broadcast tile; int32
    products accumulate ELEMENTWISE per (token row, lane element) across the whole K loop, and one sum over K
    per output follows the loop. The fp32 epilogue vectors (weight_scale, bias, x_scale) load before the K loop.

    Units ("_U"): int8 elements, or with DP4A (CUDA ``dp4a.s32.s32``) int32 words of 4 packed K-consecutive
    int8 (K, K_PER_SPLIT, the strides and BLOCK_KU then count words; the launcher checks K % 4 == 0, K-major
    weight, 4-byte aligned rows). PARTIALS: int32 row sums stored to part[split, M, N]; REDUCE (CUDA): the
    last-arriving split of a tile (int32 counter cnt[tile], acq_rel after a CTA barrier) adds the others,
    applies the epilogue and resets the counter (no memset per call); else _qmm_epilogue_kernel does.
    PREFETCH (bucket key ``prefetch``): the weight tile of step k + 1 is loaded (into registers) before step k's
    products, so one step of loads stays in flight during the MACs (ptxas does not unroll the int8 loop).
    Exact int32 sums: bit-identical to every other path.

    PDL: as :func:`_qmm_kernel`. TWO_W (:func:`gemv_stream_int32`; CUDA and the interpreter, not Ascend, whose
    triton-adapter cannot follow a pointer chosen at run time): the weight is two matrices side by side,
    [w | w2] with w's N1 columns first (same strides, N1 % BLOCK_N == 0, so a tile reads one of them); else w2_ptr
    and N1 are not read."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_tiles = tl.cdiv(N, BLOCK_N)
    n_items = n_tiles * SPLIT_K
    per = tl.cdiv(n_items, nprog)
    first = pid * per
    last = tl.minimum(first + per, n_items)
    if PDL:
        pdl_enter()
    if DP4A:
        wq = w_ptr.to(tl.pointer_type(tl.int32))
        w2q = w2_ptr.to(tl.pointer_type(tl.int32))
        xq = x_ptr.to(tl.pointer_type(tl.int32))
    else:
        wq = w_ptr
        w2q = w2_ptr
        xq = x_ptr
    for item in range(first, last):
        tile = item // SPLIT_K
        split = item % SPLIT_K
        on = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = on < N
        rn = tl.minimum(on, N - 1)   # rows past N re-read row N - 1 (never stored): unmasked vector loads
        wb = wq
        if TWO_W:
            if tile * BLOCK_N >= N1:
                wb = w2q
                rn = rn - N1
        k_start = split * K_PER_SPLIT_U
        k_len = tl.minimum(K_U - k_start, K_PER_SPLIT_U)
        if not PARTIALS:   # the epilogue's vectors, in flight during the K loop
            ws = tl.load(ws_ptr + on, mask=nmask, other=0.0).to(tl.float32)
            if HAS_BIAS:
                bias = tl.load(bias_ptr + on, mask=nmask, other=0.0).to(tl.float32)
            else:
                bias = ws
            xs0 = tl.load(xs_ptr).to(tl.float32)
            xs1 = tl.load(xs_ptr + tl.minimum(1, M - 1)).to(tl.float32)
            xs2 = tl.load(xs_ptr + tl.minimum(2, M - 1)).to(tl.float32)
            xs3 = tl.load(xs_ptr + tl.minimum(3, M - 1)).to(tl.float32)
        rk = tl.arange(0, BLOCK_KU)
        wp = wb + (rn.to(tl.int64)[:, None] * stride_wn_u + (k_start + rk).to(tl.int64)[None, :] * stride_wk_u)
        # the x row as a row-broadcast pointer tile: it takes the weight tile's register layout
        xp = xq + ((k_start + rk).to(tl.int64)[None, :] + tl.zeros((BLOCK_N, 1), dtype=tl.int64))
        acc0 = tl.zeros((BLOCK_N, BLOCK_KU), dtype=tl.int32)
        acc1 = tl.zeros((BLOCK_N, BLOCK_KU), dtype=tl.int32)
        acc2 = tl.zeros((BLOCK_N, BLOCK_KU), dtype=tl.int32)
        acc3 = tl.zeros((BLOCK_N, BLOCK_KU), dtype=tl.int32)
        if PREFETCH:   # register double buffer: the next step's weight tile is in flight during this step's MACs
            w_nx = _gemv_load(wp, 0, rk, k_len, EVEN_K)
        else:
            w_nx = tl.zeros((BLOCK_N, BLOCK_KU), dtype=wq.dtype.element_ty)
        for k in range(0, k_len, BLOCK_KU):
            if PREFETCH:
                w = w_nx
                if EVEN_K:   # past the last step: re-read this step's tile (an L1/L2 hit), loads stay unmasked
                    w_nx = tl.load(wp + (tl.minimum(k + BLOCK_KU, k_len - BLOCK_KU) - k) * stride_wk_u)
                else:        # past the last step: every lane masked, no access
                    w_nx = _gemv_load(wp + BLOCK_KU * stride_wk_u, k + BLOCK_KU, rk, k_len, EVEN_K)
            else:
                w = _gemv_load(wp, k, rk, k_len, EVEN_K)
            acc0 = _gemv_mac(w, _gemv_load(xp, k, rk, k_len, EVEN_K), acc0, DP4A)
            if MROWS > 1:
                acc1 = _gemv_mac(w, _gemv_load(xp + stride_xm_u, k, rk, k_len, EVEN_K), acc1, DP4A)
            if MROWS > 2:
                acc2 = _gemv_mac(w, _gemv_load(xp + 2 * stride_xm_u, k, rk, k_len, EVEN_K), acc2, DP4A)
            if MROWS > 3:
                acc3 = _gemv_mac(w, _gemv_load(xp + 3 * stride_xm_u, k, rk, k_len, EVEN_K), acc3, DP4A)
            wp += BLOCK_KU * stride_wk_u
            xp += BLOCK_KU
        # one sum over K per output
        r0 = tl.sum(acc0, axis=1)
        r1 = tl.sum(acc1, axis=1)
        r2 = tl.sum(acc2, axis=1)
        r3 = tl.sum(acc3, axis=1)
        if not PARTIALS:
            store_row(r0, ws, xs0, bias, out_ptr, 0, on, nmask, stride_om, HAS_BIAS)
            if MROWS > 1:
                store_row(r1, ws, xs1, bias, out_ptr, 1, on, nmask, stride_om, HAS_BIAS)
            if MROWS > 2:
                store_row(r2, ws, xs2, bias, out_ptr, 2, on, nmask, stride_om, HAS_BIAS)
            if MROWS > 3:
                store_row(r3, ws, xs3, bias, out_ptr, 3, on, nmask, stride_om, HAS_BIAS)
        else:
            _gemv_partial_row(r0, 0, split, part_ptr, M, N, on, nmask)
            if MROWS > 1:
                _gemv_partial_row(r1, 1, split, part_ptr, M, N, on, nmask)
            if MROWS > 2:
                _gemv_partial_row(r2, 2, split, part_ptr, M, N, on, nmask)
            if MROWS > 3:
                _gemv_partial_row(r3, 3, split, part_ptr, M, N, on, nmask)
            if REDUCE:
                tl.debug_barrier()
                arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
                if arrived == SPLIT_K - 1:
                    ws = tl.load(ws_ptr + on, mask=nmask, other=0.0).to(tl.float32)
                    if HAS_BIAS:
                        bias = tl.load(bias_ptr + on, mask=nmask, other=0.0).to(tl.float32)
                    else:
                        bias = ws
                    r0 = _gemv_reduce_row(r0, 0, split, part_ptr, M, N, SPLIT_K, on, nmask)
                    store_row(r0, ws, tl.load(xs_ptr).to(tl.float32), bias, out_ptr, 0,
                                   on, nmask, stride_om, HAS_BIAS)
                    if MROWS > 1:
                        r1 = _gemv_reduce_row(r1, 1, split, part_ptr, M, N, SPLIT_K, on, nmask)
                        store_row(r1, ws, tl.load(xs_ptr + 1).to(tl.float32), bias, out_ptr,
                                       1, on, nmask, stride_om, HAS_BIAS)
                    if MROWS > 2:
                        r2 = _gemv_reduce_row(r2, 2, split, part_ptr, M, N, SPLIT_K, on, nmask)
                        store_row(r2, ws, tl.load(xs_ptr + 2).to(tl.float32), bias, out_ptr,
                                       2, on, nmask, stride_om, HAS_BIAS)
                    if MROWS > 3:
                        r3 = _gemv_reduce_row(r3, 3, split, part_ptr, M, N, SPLIT_K, on, nmask)
                        store_row(r3, ws, tl.load(xs_ptr + 3).to(tl.float32), bias, out_ptr,
                                       3, on, nmask, stride_om, HAS_BIAS)
                    tl.atomic_xchg(cnt_ptr + tile, 0)


def gemv_stream_dp4a_ok(x_int8: torch.Tensor, weight_int8: torch.Tensor, bk: int) -> bool:
    """Whether the int32-word (dp4a) loads are legal: K % 4 == 0, BLOCK_K % 4 == 0, K-major weight whose rows
    and base are 4-byte aligned, x rows 4-byte aligned (host metadata only, no sync)."""
    M, K = x_int8.shape
    return (K % 4 == 0 and bk % 4 == 0 and weight_int8.stride(0) == 1 and weight_int8.stride(1) % 4 == 0
            and weight_int8.data_ptr() % 4 == 0 and x_int8.data_ptr() % 4 == 0
            and (M == 1 or x_int8.stride(0) % 4 == 0))


def _gemv_grid_launch(plan: dict, n_items: int, dev: torch.device) -> tuple[int, dict]:
    """(grid, launch options) of a streaming-GEMV launch over ``n_items`` work items: SMs × the plan's
    ``programs_per_sm`` (default 4; 20 "SMs" off CUDA) programs at most, each with work; num_warps, and num_stages
    on CUDA."""
    sms = device_cores(dev)
    grid = capped_grid(n_items, sms * int(plan.get("programs_per_sm", 4)))
    grid = _cdiv(n_items, _cdiv(n_items, grid))   # every program gets work
    launch = dict(num_warps=int(plan["num_warps"]))
    if dev.type == "cuda":
        launch["num_stages"] = int(plan.get("num_stages", 1))
    return grid, launch


def quant_matmul_gemv(x_int8: torch.Tensor, weight_int8: torch.Tensor, weight_scale: torch.Tensor,
                      x_scale: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
                      plan: dict) -> torch.Tensor | None:
    """``quant_matmul`` with a ``mma: "gemv_stream"`` plan (M ≤ 4): :func:`_qmm_gemv_kernel` on a grid of SMs ×
    ``programs_per_sm`` (bucket key, default 4) programs, each a contiguous run of (BLOCK_N rows × K split) work
    items. ``dp4a`` (bucket key, CUDA only; ignored elsewhere or when the layout does not allow int32-word loads):
    4 int8 products per ``dp4a.s32.s32``; ``prefetch`` (bucket key): register double buffer of the weight tile.

    x_int8 [M, K] int8, weight_int8 logically [K, N] int8, weight_scale [N] / x_scale [M] fp32 with unit strides,
    bias [N] or None, out [M, N] (written); plan: :func:`ops.triton.quant.plan_quant_matmul`'s.
    Returns None when ``out`` is complete, else the int32 partial sums [SPLIT_K, M, N] that the split-K epilogue
    kernel still has to add (a split plan with reduce "kernel"; ops.triton.quant.quant_matmul_config launches it).
    Raises ValueError for M > 4."""
    M, K = x_int8.shape
    N = weight_int8.shape[1]
    if M > GEMV_MAX_M:
        raise ValueError(f"config mma {GEMV_STREAM!r} takes at most {GEMV_MAX_M} token rows, got M = {M}")
    sk, k_per = int(plan["SPLIT_K"]), int(plan["K_PER_SPLIT"])
    bn, bk = int(plan["BLOCK_N"]), int(plan["BLOCK_K"])
    if x_int8.stride(1) != 1 and K > 1:
        x_int8 = x_int8.contiguous()
    dev = out.device
    dp4a = bool(plan.get("dp4a", False)) and dev.type == "cuda" and gemv_stream_dp4a_ok(x_int8, weight_int8, bk)
    u = 4 if dp4a else 1
    tiles = _cdiv(N, bn)
    grid, launch = _gemv_grid_launch(plan, tiles * sk, dev)
    has_bias = bias is not None
    bias_arg = bias if has_bias else weight_scale
    part, reduce, cnt = split_k_buffers(plan, sk, tiles, out, dev)
    launch.update(pdl_kwargs(dev, bool(plan.get("pdl", False))))
    _qmm_gemv_kernel[(grid,)](x_int8, weight_int8, weight_scale, x_scale, bias_arg, out, part, cnt, weight_int8, 0,
                              M, N, K // u, k_per // u, sk,
                              x_int8.stride(0) // u if (M > 1 or x_int8.stride(0) % u == 0) else 0,
                              weight_int8.stride(0) if not dp4a else 1, weight_int8.stride(1) // u, out.stride(0),
                              MROWS=M, HAS_BIAS=has_bias, EVEN_K=(K % bk == 0), BLOCK_N=bn, BLOCK_KU=bk // u,
                              PARTIALS=sk > 1, REDUCE=reduce, DP4A=dp4a, PREFETCH=bool(plan.get("prefetch", False)),
                              **launch)
    return part if sk > 1 and not reduce else None


def gemv_stream_int32_ok(x_int8: torch.Tensor, weights: tuple, plan: dict) -> bool:
    """Whether :func:`gemv_stream_int32` can take these operands with ``plan`` (host metadata only): one or two
    K-major int8 weights ([K, N_i] views with unit K stride) of equal strides, the first one's width a multiple
    of the plan's BLOCK_N. (Where the int32-word loads are not legal, the launch drops dp4a, as quant_matmul's.)"""
    if len(weights) not in (1, 2) or any(w.dtype != torch.int8 or w.stride(0) != 1 for w in weights):
        return False
    w0 = weights[0]
    return len(weights) == 1 or (weights[1].stride() == w0.stride() and w0.shape[1] % int(plan["BLOCK_N"]) == 0)


def gemv_stream_int32(x_int8: torch.Tensor, weights: tuple, part: torch.Tensor, plan: dict) -> None:
    """part[m, n] = Σ_k x_int8[m, k] · W[k, n] exactly in int32, W = [weights[0] ‖ weights[1]] (the columns of the
    first, then the second), no epilogue: the streaming GEMV (:func:`_qmm_gemv_kernel`) in ONE launch over both
    weights. For ``ds::mla_prolog``'s down GEMM ``x @ [W_DQ ‖ W_DKV_KR]`` at T = 1 (its row kernel reads part as
    the unsplit partial sums).

    x_int8 [M, K] int8 (M ≤ 4); weights: one or two int8 [K, N_i] (K-major, equal strides); part [M, ΣN_i] int32,
    contiguous; plan: :func:`gemv_stream_plan` (M, ΣN_i, K) on CUDA (tests pass such a bucket to run it under the
    interpreter). dp4a (the plan's) only where the int32-word loads are legal for x and both weights (K % 4 == 0,
    4-byte aligned bases and strides), else int8 loads. The caller checks :func:`gemv_stream_int32_ok` first
    (nothing is validated here)."""
    M, K = x_int8.shape
    w0 = weights[0]
    w1 = weights[-1]
    N1 = w0.shape[1]
    N = part.shape[1]
    bn, bk = int(plan["BLOCK_N"]), int(plan["BLOCK_K"])
    if x_int8.stride(1) != 1 and K > 1:
        x_int8 = x_int8.contiguous()
    dev = part.device
    dp4a = bool(plan.get("dp4a", False)) and dev.type == "cuda" and all(
        gemv_stream_dp4a_ok(x_int8, w, bk) for w in weights)
    u = 4 if dp4a else 1
    grid, launch = _gemv_grid_launch(plan, _cdiv(N, bn), dev)
    f32 = torch.empty(0, dtype=torch.float32, device=dev)   # the epilogue's pointers: never read
    _qmm_gemv_kernel[(grid,)](x_int8, w0, f32, f32, f32, part, part, part, w1, N1,
                              M, N, K // u, K // u, 1,
                              x_int8.stride(0) // u if (M > 1 or x_int8.stride(0) % u == 0) else 0,
                              w0.stride(0) if not dp4a else 1, w0.stride(1) // u, part.stride(0),
                              MROWS=M, HAS_BIAS=False, EVEN_K=(K % bk == 0), BLOCK_N=bn, BLOCK_KU=bk // u,
                              PARTIALS=True, REDUCE=False, DP4A=dp4a, PREFETCH=bool(plan.get("prefetch", False)),
                              TWO_W=len(weights) == 2, **launch)


def gemv_stream_cases(b: dict, max_m: int | None, tag: str, table: str) -> list[dict]:
    """Compile cases of a ``mma: "gemv_stream"`` bucket config ``b`` of config table ``table`` whose match admits
    up to ``max_m`` token rows (None: any): :func:`_qmm_gemv_kernel` for M = 1..min(4, max_m), fused and split-K,
    even / tail K, bf16 / fp16 out (dp4a only on "cuda"), named ``quant_matmul_gemv_stream_<tag>_r<M>_...``; for
    an M = 1 bucket of "cuda" also the two-weight int32 form :func:`gemv_stream_int32` launches."""
    dp4a = bool(b.get("dp4a", False)) and table == "cuda"
    u = 4 if dp4a else 1
    splits = (False, True) if b.get("split_k", "auto") == "auto" else (int(b["split_k"]) > 1,)
    cases = []
    for mrows in range(1, min(GEMV_MAX_M, max_m or GEMV_MAX_M) + 1):
        for partials in splits:
            for even in (True, False):
                for out in ("*bf16", "*fp16"):
                    sig = {"x_ptr": "*i8", "w_ptr": "*i8", "ws_ptr": "*fp32", "xs_ptr": "*fp32", "bias_ptr": "*fp32",
                           "out_ptr": out, "part_ptr": "*i32" if partials else out,
                           "cnt_ptr": "*i32" if partials else out, "w2_ptr": "*i8", "N1": "i32", "M": "i32", "N": "i32", "K_U": "i32",
                           "K_PER_SPLIT_U": "i32", "SPLIT_K": "i32", "stride_xm_u": "i32", "stride_wk_u": "i32",
                           "stride_wn_u": "i32", "stride_om": "i32", "MROWS": "constexpr", "HAS_BIAS": "constexpr",
                           "EVEN_K": "constexpr", "BLOCK_N": "constexpr", "BLOCK_KU": "constexpr",
                           "PARTIALS": "constexpr", "REDUCE": "constexpr", "DP4A": "constexpr",
                           "PREFETCH": "constexpr"}
                    ce = dict(MROWS=mrows, HAS_BIAS=True, EVEN_K=even, BLOCK_N=int(b["BLOCK_N"]),
                              BLOCK_KU=int(b["BLOCK_K"]) // u, PARTIALS=partials,
                              REDUCE=partials and b.get("reduce", "kernel") == "atomic", DP4A=dp4a,
                              PREFETCH=bool(b.get("prefetch", False)))
                    sig["PDL"] = "constexpr"
                    ce["PDL"] = bool(b.get("pdl", False)) and table == "cuda"
                    sig["TWO_W"] = "constexpr"   # [w | w2] (gemv_stream_int32, mla_prolog's down GEMM): cases below
                    ce["TWO_W"] = False
                    if mrows == 1:   # a launch with M = 1 specialises M to the constant 1 (M is not do_not_specialize)
                        sig["M"] = "constexpr"
                        ce = dict(ce, M=1)
                    nb = f"_{tag}_r{mrows}"   # the bucket, then the token rows MROWS this case compiles for
                    cases.append(dict(name=f"quant_matmul_gemv_stream{nb}_{'splitk' if partials else 'fused'}_"
                                           f"{'even' if even else 'tail'}_{out[1:]}",
                                      fn=_qmm_gemv_kernel, signature=sig, constexprs=ce,
                                      num_warps=int(b["num_warps"]), num_stages=int(b.get("num_stages", 1))))
    if table == "cuda" and max_m == 1:
        # gemv_stream_int32 (mla_prolog's A8W8 T = 1 down GEMM): [W_DQ | W_DKV_KR], int32 sums into part, no epilogue
        for even in (True, False):
            c = next(c for c in cases if c["constexprs"]["MROWS"] == 1 and c["constexprs"]["EVEN_K"] is even)
            sig = dict(c["signature"], out_ptr="*i32", part_ptr="*i32", cnt_ptr="*i32")
            ce = dict(c["constexprs"], HAS_BIAS=False, PARTIALS=True, REDUCE=False, TWO_W=True)
            cases.append(dict(c, name=c["name"].rsplit("_fused", 1)[0].rsplit("_splitk", 1)[0] +
                              f"_two_w_int32_{'even' if even else 'tail'}", signature=sig, constexprs=ce))
    return cases


# The streaming GEMV is not in the "ascend" table (a CUDA decode variant); its portable form (no dp4a, the
# two-kernel split-K reduction) is still lowered for Ascend so the kernel stays inside the triton-ascend 3.2 subset.
_ASCEND_GEMV_PROBE = dict(max_m=4, max_n=4096, BLOCK_M=4, BLOCK_N=8, BLOCK_K=256, GROUP_M=1, num_warps=1, num_stages=1,
                          split_k="auto", reduce="kernel", mma=GEMV_STREAM)


# The streaming GEMV is not in the "ascend" table (a CUDA decode variant); its portable form (no dp4a, the
# two-kernel split-K reduction) is still lowered for Ascend so the kernel stays inside the triton-ascend 3.2 subset.
_ASCEND_GEMV_PROBE = dict(BLOCK_M=4, BLOCK_N=8, BLOCK_K=256, GROUP_M=1, num_warps=1, num_stages=1, split_k="auto",
                          reduce="kernel", mma=GEMV_STREAM)


def compile_cases(table: str = "ascend") -> list[dict]:
    """(kernel × launch config of ``table``) cases of this module: every ``mma: "gemv_stream"`` bucket of the
    table's quant_matmul section (:func:`gemv_stream_cases`), dict(name, fn, signature, constexprs, num_warps,
    num_stages)."""
    cases: list[dict] = []
    for i, b in enumerate(tables()[table]["quant_matmul"]["buckets"]):
        if b["config"].get("mma") == GEMV_STREAM:
            cases.extend(gemv_stream_cases(b["config"], max_rows(b), f"b{i}", table))
    return cases


def ascend_compile_cases() -> list[dict]:
    """The Ascend table's GEMV cases (none today) plus the portable streaming GEMV (``_ASCEND_GEMV_PROBE``) at
    M 1 and 4, bf16 out, for the triton-ascend 3.2 + bishengir compile check."""
    probe = [dict(c, name="probe_" + c["name"]) for c in gemv_stream_cases(_ASCEND_GEMV_PROBE, 4, "m4", "ascend")
             if c["constexprs"]["MROWS"] in (1, 4) and c["signature"]["out_ptr"] == "*bf16"]
    return compile_cases("ascend") + probe


__all__ = ["quant_matmul_gemv", "gemv_stream_dp4a_ok", "gemv_stream_int32", "gemv_stream_int32_ok", "gemv_stream_cases", "compile_cases",
           "ascend_compile_cases"]
