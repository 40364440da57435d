"""Triton kernels for ``ds::mla_prolog`` (fused MLA pre-attention, mirrors ``torch_npu.npu_mla_prolog_v3``).

One source for CUDA (triton ≥ 3.2; tested with 3.6 on the H200), Ascend (triton-ascend 3.2) and the CPU
interpreter (``TRITON_INTERPRET=1``). Semantics and rounding points: reference/mla_prolog.py and docs/architecture.md
§ds::mla_prolog. Launch configs are data: ``ops/triton/configs/<backend>/mla_prolog.json``,
``cuda`` / ``ascend`` (the CPU
interpreter uses ``ascend`` so CI exercises the persistent-loop path); sections ``down`` / ``row`` / ``query``
whose buckets match on ``T`` (tokens) and ``int8`` (int8 operands of that kernel: token_x for down and row,
W_UQ_QR for query), grammar in :mod:`ops.triton._common`, keys in :data:`_SECTION_KEYS`.

Three launches per call; decode (T ≤ 128) is weight-streaming bound, so each kernel is built to read
its weights once with enough programs to fill the device:

1. :func:`_down_kernel` — ``x @ [W_DQ ‖ W_DKV_KR]`` in ONE launch: column tiles below ``cdiv(Hcq, BLOCK_N)``
   read W_DQ, the rest W_DKV_KR (a tile never straddles both). Split-K over He so that T = 1 still has
   ≥ 2 programs per SM; partial sums go to a workspace ``[SPLIT_K, T, Hcq + Hckv + Dr]`` (fp32, or exact
   int32 for A8W8) with plain stores (no atomics: deterministic). CUDA, full A8W8 at T ≤ ``down.gemv_max_t``
   (1): ``quant_matmul``'s streaming GEMV over both weights instead (:func:`ops.triton.quant.gemv_stream_int32`,
   one launch, unsplit sums) where quant_matmul's table gives that shape an unsplit ``gemv_stream`` bucket and the
   weights are K-major int8 of equal strides (:func:`down_uses_gemv`); else this kernel.
2. :func:`_row_kernel` — one program per token: adds the split-K partials in a fixed order, applies the
   A8W8 dequant (``acc · w_scale[col] · x_scale[t]``), rounds ``cq`` and ``[ckv ‖ kr]`` to the activation
   dtype (the reference's rounding points), then RmsNorm(cq) → ``cqn`` (dt; or × smooth → per-token int8
   dynamic quant when W_UQ_QR is int8), RmsNorm(ckv) and RoPE(kr) (interleaved pairs in, rotate-half out)
   → scatter into kv_cache / kr_cache row ``cache_index[t]`` (bf16/fp16, or C8 int8 = RNE(v · quant_scale)
   saturated to [−128, 127]). Negative ids and ids ≥ num_blocks·block_size are never written (masked
   stores, so the kernel cannot write outside the cache even with eager checks off). ``SPLIT_K`` is a
   constexpr here and every load of a token is issued before its first use (latency, not bytes, is what
   this kernel costs). Config ``row.parts`` 2 splits a token over two programs (cq → cqn on one, ckv / kr →
   caches on the other): at T = 1 the row is otherwise ~2000 dependent instructions of a single program. The row
   config may hold per-T buckets (like down / query).
3. :func:`_query_kernel` — one program per (head, token tile): ``cqn @ W_UQ_QR[:, head]`` over the head's
   D nope columns and its Dr rope columns (contiguous tiles); epilogue: dequant (int8) → round to dt →
   the nope part is multiplied by W_UK[head]
   (absorption, in chunks of BLOCK_C) → ``query`` (dt; or int8 per (token, head) with
   ``dequant_scale_q_nope`` in the full + C8 mode, two passes over W_UK[head]), and the rope part gets
   RoPE → ``query_rope`` (÷ dequant_scale_q_nope · quant_scale_ckv in full + C8). The RoPE de-interleave
   and rotate-half are two tiny ``tl.dot`` with constant ±1 permutation matrices on the dt-rounded qr
   (exact: one non-zero product per output), so the weight tile stays contiguous (no strided gathers
   that would defeat cp.async pipelining) and no tl.split / reshape is needed (triton-ascend subset).
   On CUDA the first ``PRE_UK`` W_UK chunks are loaded before the K loop, and W_UQ_QR is read with an L2
   evict-first hint when one token tile covers T (each head's columns are streamed once).

Config ``fuse_row_max_t`` (CUDA, small T with one token tile): :func:`_row_query_kernel` runs 2 and 3 as ONE
launch — each query program first recomputes the cq → cqn rows (same code, same bits, into the shared cqn
buffer; a CTA barrier; it reads only rows it wrote itself), T extra programs do the ckv / kr → cache part.

All quant modes of the reference (bf16, partial, full A8W8, and each with C8) run in these three kernels.
Measured limits per kernel (H200): docs/performance.md. A config or override naming an unknown key raises
ValueError.

Portability: triton-ascend 3.2 subset; ``tl.dot`` accumulates in fp32 / int32 (``out_dtype=tl.int32`` is
spelled out), fp32 operands use ``input_precision="ieee"`` (no TF32); divisions and sqrt that set
rounding points use ``tl.math.div_rn`` / ``tl.math.sqrt_rn``; round-half-even is ``(v + 1.5·2²³) − 1.5·2²³``
(no libdevice). No host synchronisation: T = 0 returns without a launch, every other decision reads
shapes only. Offsets into caches and weights are int64.

Weights are read through their strides (any layout is accepted). Fast layouts: bf16/fp16 weights as
given (row-major [K, N]); int8 weights K-major on CUDA (Hopper's 8-bit MMA wants both operands K-major):
:func:`pack_weights` produces that once, offline.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from . import quant as _quant
from ._common import (backend_key as _backend_key, bounds, cdiv as _cdiv, load_configs, next_power_of_2 as _np2,
                      resolve, select, device_cores, unit_inner as _unit_inner)

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def _all_configs() -> dict:
    return load_configs("mla_prolog")


def _cores(cfg: dict, device: torch.device) -> int:
    return device_cores(device, int(cfg.get("cores", 0)))


def _grid(n_items: int, cap: int) -> int:
    return max(1, min(n_items, cap) if cap > 0 else n_items)


def _reached(section: dict, int8: bool) -> list[tuple[int, dict]]:
    """(index, config) of the buckets of ``section`` that some T reaches with this int8 flag (every T bound of the
    table tried): the configs a compile check must build."""
    seen = {}
    for T in bounds(section["buckets"], "T") or [1]:
        cfg = select(section["buckets"], T=T, int8=int8)
        i = next(i for i, b in enumerate(section["buckets"]) if b["config"] is cfg)
        seen.setdefault(i, cfg)
    return sorted(seen.items())


# ==============================================================================================
# device helpers
# ==============================================================================================
@triton.jit
def _rint(v):
    """fp32 round half to even for |v| < 2**22 (portable: no libdevice)."""
    return (v + 12582912.0) - 12582912.0


@triton.jit
def _sat_int8(v, LO: tl.constexpr):
    """fp32 → int8: NaN → 0, clamp to [LO, 127], round half to even (reference.round_half_even_int8)."""
    v = tl.where(v == v, v, 0.0)
    v = tl.minimum(tl.maximum(v, LO), 127.0)
    return _rint(v).to(tl.int8)


@triton.jit
def _dot(a, b, acc, INT8: tl.constexpr, IEEE: tl.constexpr):
    if INT8:
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
    elif IEEE:
        acc = tl.dot(a, b, acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _rms_norm(x, mask, gamma, H, eps, ASCEND: tl.constexpr):
    """x / sqrt(mean(x²) + eps) · gamma in fp32 (division, not rsqrt-multiply); x is a [BLOCK] row.
    ASCEND: the row is a [1, BLOCK] tile and the sum a [1] tensor (same IEEE ops): triton-adapter 3.2
    aborts on a scalar ``div_rn`` / ``sqrt_rn`` (TypeRange with null types)."""
    x = tl.where(mask, x, 0.0)
    if ASCEND:
        BLOCK: tl.constexpr = x.shape[0]
        x2 = tl.reshape(x, [1, BLOCK])
        ss = tl.sum(x2 * x2, axis=1)
        ms = tl.math.div_rn(ss, tl.full([1], H, tl.float32))
        r = tl.math.sqrt_rn(ms + eps)
        return tl.reshape(tl.math.div_rn(x2, tl.broadcast_to(r[:, None], [1, BLOCK])), [BLOCK]) * gamma
    else:
        ss = tl.sum(x * x, axis=0)
        ms = tl.math.div_rn(ss, tl.full(ss.shape, H, tl.float32))
        r = tl.math.sqrt_rn(ms + eps)
        return tl.math.div_rn(x, tl.zeros_like(x) + r) * gamma


# ==============================================================================================
# 1. x @ [W_DQ ‖ W_DKV_KR], split-K partial sums
# ==============================================================================================
@triton.jit
def _down_kernel(x_ptr, wdq_ptr, wkv_ptr, ws_ptr, T, He, Hcq, Ckv, K_PER_SPLIT, SPLIT_K,
                 s_xt, s_xk, s_dq_k, s_dq_n, s_kv_k, s_kv_n,
                 INT8: tl.constexpr, IEEE: tl.constexpr, EVEN_K: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ASCEND: tl.constexpr):
    """ws[split, t, c] = Σ_{k in split} x[t, k] · W[k, c] with W = [W_DQ ‖ W_DKV_KR] (c < Hcq: W_DQ).
    Work item = (split, column tile, token tile), token tile fastest (weight tile reuse in L2).
    ASCEND: each weight is read in its own branch (triton-adapter cannot follow a pointer chosen at run
    time) and rows / columns past T / the weight's width are masked, not wrapped (its pointer analysis
    needs affine offsets); the launcher passes unit inner strides (s_xk = s_dq_n = s_kv_n = 1)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    CT = Hcq + Ckv
    nt_dq = tl.cdiv(Hcq, BLOCK_N)
    n_tiles = nt_dq + tl.cdiv(Ckv, BLOCK_N)
    m_tiles = tl.cdiv(T, BLOCK_M)
    for item in range(pid, n_tiles * m_tiles * SPLIT_K, nprog):
        mt = item % m_tiles
        nt = (item // m_tiles) % n_tiles
        split = item // (m_tiles * n_tiles)
        if ASCEND:
            if nt < nt_dq:
                _down_tile_masked(x_ptr, wdq_ptr, ws_ptr, mt, split, nt * BLOCK_N, Hcq, 0, T, He, CT, K_PER_SPLIT,
                                  s_xt, s_xk, s_dq_k, s_dq_n, INT8, IEEE, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K)
            else:
                _down_tile_masked(x_ptr, wkv_ptr, ws_ptr, mt, split, (nt - nt_dq) * BLOCK_N, Ckv, Hcq, T, He, CT,
                                  K_PER_SPLIT, s_xt, s_xk, s_kv_k, s_kv_n, INT8, IEEE, EVEN_K, BLOCK_M, BLOCK_N,
                                  BLOCK_K)
        else:
            if nt < nt_dq:
                w_ptr = wdq_ptr
                s_wk = s_dq_k
                s_wn = s_dq_n
                c0 = nt * BLOCK_N
                n_lim = Hcq
                out0 = 0
            else:
                w_ptr = wkv_ptr
                s_wk = s_kv_k
                s_wn = s_kv_n
                c0 = (nt - nt_dq) * BLOCK_N
                n_lim = Ckv
                out0 = Hcq
            rm = (mt * BLOCK_M + tl.arange(0, BLOCK_M)) % T       # wrap: rows ≥ T are never stored
            rn = (c0 + tl.arange(0, BLOCK_N)) % n_lim
            rk = tl.arange(0, BLOCK_K)
            k_start = split * K_PER_SPLIT
            a_ptrs = x_ptr + (rm.to(tl.int64)[:, None] * s_xt + (k_start + rk).to(tl.int64)[None, :] * s_xk)
            b_ptrs = w_ptr + ((k_start + rk).to(tl.int64)[:, None] * s_wk + rn.to(tl.int64)[None, :] * s_wn)
            if INT8:
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
            else:
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            k_len = tl.minimum(He - k_start, K_PER_SPLIT)
            for k in range(0, k_len, BLOCK_K):
                if EVEN_K:
                    a = tl.load(a_ptrs)
                    b = tl.load(b_ptrs)
                else:
                    km = (k + rk) < k_len
                    a = tl.load(a_ptrs, mask=km[None, :], other=0)
                    b = tl.load(b_ptrs, mask=km[:, None], other=0)
                acc = _dot(a, b, acc, INT8, IEEE)
                a_ptrs += BLOCK_K * s_xk
                b_ptrs += BLOCK_K * s_wk
            om = mt * BLOCK_M + tl.arange(0, BLOCK_M)
            on = c0 + tl.arange(0, BLOCK_N)
            omask = (om < T)[:, None] & (on < n_lim)[None, :]
            p = ws_ptr + (tl.full([], split, tl.int64) * T + om.to(tl.int64)[:, None]) * CT + (out0 + on)[None, :]
            tl.store(p, acc, mask=omask)


@triton.jit
def _down_tile_masked(x_ptr, w_ptr, ws_ptr, mt, split, c0, n_lim, out0, T, He, CT, K_PER_SPLIT,
                      s_xt, s_xk, s_wk, s_wn, INT8: tl.constexpr, IEEE: tl.constexpr, EVEN_K: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One (split, column tile, token tile) item of :func:`_down_kernel` on Ascend: masked, one weight."""
    om = mt * BLOCK_M + tl.arange(0, BLOCK_M)
    on = c0 + tl.arange(0, BLOCK_N)
    m_m = om < T
    n_m = on < n_lim
    rk = tl.arange(0, BLOCK_K)
    k_start = split * K_PER_SPLIT
    a_ptrs = x_ptr + (om.to(tl.int64)[:, None] * s_xt + (k_start + rk)[None, :] * s_xk)
    b_ptrs = w_ptr + ((k_start + rk).to(tl.int64)[:, None] * s_wk + on[None, :] * s_wn)
    if INT8:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_len = tl.minimum(He - k_start, K_PER_SPLIT)
    for k in range(0, k_len, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=m_m[:, None], other=0)
            b = tl.load(b_ptrs, mask=n_m[None, :], other=0)
        else:
            km = (k + rk) < k_len
            a = tl.load(a_ptrs, mask=m_m[:, None] & km[None, :], other=0)
            b = tl.load(b_ptrs, mask=km[:, None] & n_m[None, :], other=0)
        acc = _dot(a, b, acc, INT8, IEEE)
        a_ptrs += BLOCK_K * s_xk
        b_ptrs += BLOCK_K * s_wk
    p = ws_ptr + (tl.full([], split, tl.int64) * T + om.to(tl.int64)[:, None]) * CT + (out0 + on)[None, :]
    tl.store(p, acc, mask=m_m[:, None] & n_m[None, :])


# ==============================================================================================
# 2. per-token row kernel: reduce, dequant, round, RmsNorm(cq) [→ int8], RmsNorm(ckv), RoPE(kr), scatter
# ==============================================================================================
@triton.jit
def _partial_sum(ws_ptr, row_off, cols, mask, SPLIT_K: tl.constexpr, TCT):
    """Σ_split ws[split, t, cols] in split order (fp32 or exact int32). SPLIT_K is a constexpr so the
    loop unrolls and every load is issued before the first add (one L2 round trip, not SPLIT_K)."""
    p = ws_ptr + row_off + cols
    acc = tl.load(p, mask=mask, other=0)
    for s in tl.static_range(1, SPLIT_K):
        acc += tl.load(p + s * TCT.to(tl.int64), mask=mask, other=0)
    return acc


@triton.jit
def _kv_row_loads(ws_ptr, kv_row, cos_ptr, sin_ptr, idx_ptr, tq, kv_c, kv_m, ev_c, j, j_m, Dr2,
                  s_cos_t, s_cos_d, s_sin_t, s_sin_d, s_idx, SPLIT_K: tl.constexpr, TCT):
    """Every load of token ``tq``'s kv part, issued together: the split-K sums of ckv and of kr's even / odd
    columns (workspace row ``kv_row``), cos / sin of both rotate-half halves, and the cache slot."""
    acc_kv = _partial_sum(ws_ptr, kv_row, kv_c, kv_m, SPLIT_K, TCT)
    acc_e = _partial_sum(ws_ptr, kv_row, ev_c, j_m, SPLIT_K, TCT)
    acc_o = _partial_sum(ws_ptr, kv_row, ev_c + 1, j_m, SPLIT_K, TCT)
    c_lo = tl.load(cos_ptr + tq * s_cos_t + j * s_cos_d, mask=j_m, other=0.0).to(tl.float32)
    c_hi = tl.load(cos_ptr + tq * s_cos_t + (j + Dr2) * s_cos_d, mask=j_m, other=0.0).to(tl.float32)
    s_lo = tl.load(sin_ptr + tq * s_sin_t + j * s_sin_d, mask=j_m, other=0.0).to(tl.float32)
    s_hi = tl.load(sin_ptr + tq * s_sin_t + (j + Dr2) * s_sin_d, mask=j_m, other=0.0).to(tl.float32)
    slot = tl.load(idx_ptr + tq * s_idx)
    return acc_kv, acc_e, acc_o, c_lo, c_hi, s_lo, s_hi, slot


@triton.jit
def _dequant_round(acc, wsc, xs, dt, INT8: tl.constexpr):
    """fp32 value of dt(acc) (A8W8: dt(fp32(acc) · w_scale[col] · x_scale))."""
    if INT8:
        v = acc.to(tl.float32) * wsc * xs
    else:
        v = acc
    return v.to(dt).to(tl.float32)


@triton.jit
def _row_cq(acc_q, wsc_q, xs, g_q, sm, cq_c, cq_m, tq, Hcq, eps_cq, cqn_ptr, cqs_ptr, s_cqn, dt,
            INT8: tl.constexpr, QUANT_CQ: tl.constexpr, HAS_SMOOTH: tl.constexpr, BLOCK_Q: tl.constexpr,
            ASCEND: tl.constexpr):
    """cq (split-K sum ``acc_q``) → cqn row of token ``tq`` (dt; or int8 + per-token scale when QUANT_CQ)."""
    cq = _dequant_round(acc_q, wsc_q, xs, dt, INT8)
    y = _rms_norm(cq, cq_m, g_q, Hcq, eps_cq, ASCEND)
    if QUANT_CQ:
        if HAS_SMOOTH:
            y = y * sm
        y = tl.where(cq_m, y, 0.0)
        if ASCEND:  # [1, BLOCK_Q] row, [1] scale: no scalar div_rn (see _rms_norm)
            y2 = tl.reshape(y, [1, BLOCK_Q])
            amax = tl.max(tl.abs(y2), axis=1)
            nan_count = tl.sum((y2 != y2).to(tl.int32), axis=1)
            scale = tl.math.div_rn(amax, tl.full([1], 127.0, tl.float32))
            scale = tl.where(nan_count > 0, float("nan"), scale)
            safe = tl.where(scale > 0, scale, 1.0)
            v = tl.math.div_rn(y2, tl.broadcast_to(safe[:, None], [1, BLOCK_Q]))
            v = tl.reshape(tl.where(scale[:, None] > 0, v, 0.0), [BLOCK_Q])
            tl.store(cqn_ptr + tq * s_cqn + cq_c, _sat_int8(v, -127.0), mask=cq_m)
            tl.store(cqs_ptr + tq + tl.arange(0, 1), scale)
        else:
            amax = tl.max(tl.abs(y), axis=0)
            nan_count = tl.sum((y != y).to(tl.int32), axis=0)
            scale = tl.math.div_rn(amax, tl.full(amax.shape, 127.0, tl.float32))
            scale = tl.where(nan_count > 0, float("nan"), scale)
            safe = tl.where(scale > 0, scale, 1.0)
            v = tl.math.div_rn(y, tl.zeros_like(y) + safe)
            v = tl.where(scale > 0, v, 0.0)
            tl.store(cqn_ptr + tq * s_cqn + cq_c, _sat_int8(v, -127.0), mask=cq_m)
            tl.store(cqs_ptr + tq, scale)
    else:
        tl.store(cqn_ptr + tq * s_cqn + cq_c, y.to(cqn_ptr.dtype.element_ty), mask=cq_m)


@triton.jit
def _row_kv(acc_kv, acc_e, acc_o, wsc_kv, wsc_e, wsc_o, xs, g_kv, c_lo, c_hi, s_lo, s_hi, slot, kv_c, kv_m, j, j_m,
            Hckv, Dr2, eps_ckv, num_slots, block_size, kv_ptr, kr_ptr, qsckv_ptr, qsckr_ptr,
            s_kv_b, s_kv_s, s_kv_c, s_kr_b, s_kr_s, s_kr_c, s_qsckv, s_qsckr, dt,
            INT8: tl.constexpr, KV_INT8: tl.constexpr, KR_INT8: tl.constexpr, BLOCK_KV: tl.constexpr,
            BLOCK_R: tl.constexpr, ASCEND: tl.constexpr):
    """ckv → RmsNorm → kv_cache row, kr (e = kr[0::2], o = kr[1::2]) → RoPE → kr_cache row, at cache slot
    ``slot`` (PA_BSND: slot → (slot // block_size, slot % block_size); slots outside [0, num_slots) are not
    written)."""
    ckv = _dequant_round(acc_kv, wsc_kv, xs, dt, INT8)
    kv = _rms_norm(ckv, kv_m, g_kv, Hckv, eps_ckv, ASCEND)
    e = _dequant_round(acc_e, wsc_e, xs, dt, INT8)
    o = _dequant_round(acc_o, wsc_o, xs, dt, INT8)
    r_lo = e * c_lo + (-o) * s_lo
    r_hi = o * c_hi + e * s_hi
    ok = (slot >= 0) & (slot < num_slots)
    slot = tl.where(ok, slot, 0)
    okv = (tl.zeros([BLOCK_KV], tl.int32) + ok.to(tl.int32)) != 0
    okr = (tl.zeros([BLOCK_R], tl.int32) + ok.to(tl.int32)) != 0
    blk = slot // block_size
    off = slot - blk * block_size
    kv_row = kv_ptr + blk * s_kv_b + off * s_kv_s
    kr_row = kr_ptr + blk * s_kr_b + off * s_kr_s
    if KV_INT8:
        qs = tl.load(qsckv_ptr + kv_c * s_qsckv, mask=kv_m, other=0.0)
        tl.store(kv_row + kv_c * s_kv_c, _sat_int8(kv * qs, -128.0), mask=kv_m & okv)
    else:
        tl.store(kv_row + kv_c * s_kv_c, kv.to(kv_ptr.dtype.element_ty), mask=kv_m & okv)
    if KR_INT8:
        q_lo = tl.load(qsckr_ptr + j * s_qsckr, mask=j_m, other=0.0)
        q_hi = tl.load(qsckr_ptr + (j + Dr2) * s_qsckr, mask=j_m, other=0.0)
        tl.store(kr_row + j * s_kr_c, _sat_int8(r_lo * q_lo, -128.0), mask=j_m & okr)
        tl.store(kr_row + (j + Dr2) * s_kr_c, _sat_int8(r_hi * q_hi, -128.0), mask=j_m & okr)
    else:
        tl.store(kr_row + j * s_kr_c, r_lo.to(kr_ptr.dtype.element_ty), mask=j_m & okr)
        tl.store(kr_row + (j + Dr2) * s_kr_c, r_hi.to(kr_ptr.dtype.element_ty), mask=j_m & okr)


@triton.jit
def _cq_consts(gq_ptr, wsdq_ptr, smooth_ptr, Hcq, INT8: tl.constexpr, HAS_SMOOTH: tl.constexpr,
               BLOCK_Q: tl.constexpr):
    """Per-launch constants of the cq → cqn row part: columns, their mask, gamma_cq (fp32), the W_DQ dequant scales
    (INT8, else 1) and the smooth scales (HAS_SMOOTH, else 1)."""
    cq_c = tl.arange(0, BLOCK_Q)
    cq_m = cq_c < Hcq
    g_q = tl.load(gq_ptr + cq_c, mask=cq_m, other=0.0).to(tl.float32)
    if INT8:
        wsc_q = tl.load(wsdq_ptr + cq_c, mask=cq_m, other=0.0)
    else:
        wsc_q = 1.0
    if HAS_SMOOTH:
        sm = tl.load(smooth_ptr + cq_c, mask=cq_m, other=0.0)
    else:
        sm = 1.0
    return cq_c, cq_m, g_q, wsc_q, sm


@triton.jit
def _kv_consts(gkv_ptr, wskv_ptr, Hckv, Dr2, INT8: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_RH: tl.constexpr):
    """Per-launch constants of the ckv / kr → cache part: ckv columns and mask, the rope pair index j (< Dr / 2)
    with its mask and even workspace columns, gamma_ckv (fp32) and the W_DKV_KR dequant scales of the ckv, even
    and odd rope columns (INT8, else 1)."""
    kv_c = tl.arange(0, BLOCK_KV)
    kv_m = kv_c < Hckv
    j = tl.arange(0, BLOCK_RH)
    j_m = j < Dr2
    ev_c = Hckv + 2 * j
    g_kv = tl.load(gkv_ptr + kv_c, mask=kv_m, other=0.0).to(tl.float32)
    if INT8:
        wsc_kv = tl.load(wskv_ptr + kv_c, mask=kv_m, other=0.0)
        wsc_e = tl.load(wskv_ptr + ev_c, mask=j_m, other=0.0)
        wsc_o = tl.load(wskv_ptr + ev_c + 1, mask=j_m, other=0.0)
    else:
        wsc_kv = 1.0
        wsc_e = 1.0
        wsc_o = 1.0
    return kv_c, kv_m, j, j_m, ev_c, g_kv, wsc_kv, wsc_e, wsc_o


@triton.jit
def _row_kernel(ws_ptr, dt_ptr, xs_ptr, wsdq_ptr, wskv_ptr, gq_ptr, gkv_ptr, smooth_ptr,
                sin_ptr, cos_ptr, idx_ptr, kv_ptr, kr_ptr, qsckv_ptr, qsckr_ptr, cqn_ptr, cqs_ptr,
                T, CT, TCT, Hcq, Hckv, Dr, num_slots, block_size,
                s_sin_t, s_sin_d, s_cos_t, s_cos_d, s_idx,
                s_kv_b, s_kv_s, s_kv_c, s_kr_b, s_kr_s, s_kr_c, s_qsckv, s_qsckr, s_cqn,
                eps_cq, eps_ckv, n_row,
                SPLIT_K: tl.constexpr, INT8: tl.constexpr, QUANT_CQ: tl.constexpr, HAS_SMOOTH: tl.constexpr,
                KV_INT8: tl.constexpr, KR_INT8: tl.constexpr,
                BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_R: tl.constexpr, ASCEND: tl.constexpr,
                PARTS: tl.constexpr = 1):
    """Work items ``pid, pid + n_row, …`` (``n_row`` = the grid): PARTS = 1: one token per item, every global
    load of the item issued first (partials of all splits, scales, sin/cos, the slot id) so an item costs about
    one memory round trip. PARTS = 2: two items per token, (t, 0) = cq → cqn and (t, 1) = ckv / kr → caches,
    so two programs share a token's instructions (the kernel is latency-bound: one program per token at T = 1
    executes the whole row serially). ``CT`` = Hcq + Hckv + Dr (the workspace row length; a kernel argument
    so that Triton's divisibility specialisation vectorises the partial-sum loads). ``dt_ptr``: any tensor of
    the activation dtype (the launcher passes W_UK); only its dtype is used."""
    pid = tl.program_id(0)
    nprog = n_row
    dt = dt_ptr.dtype.element_ty
    Dr2 = Dr // 2
    cq_c, cq_m, g_q, wsc_q, sm = _cq_consts(gq_ptr, wsdq_ptr, smooth_ptr, Hcq, INT8, HAS_SMOOTH, BLOCK_Q)
    kv_c, kv_m, j, j_m, ev_c, g_kv, wsc_kv, wsc_e, wsc_o = _kv_consts(gkv_ptr, wskv_ptr, Hckv, Dr2, INT8, BLOCK_KV,
                                                                      BLOCK_R)
    for item in range(pid, T * PARTS, nprog):
        if PARTS == 1:
            tq = tl.full([], item, tl.int64)
        else:
            tq = tl.full([], item // PARTS, tl.int64)
        row = tq * CT
        if INT8:
            xs = tl.load(xs_ptr + tq)
        else:
            xs = 1.0
        if PARTS == 1:
            # ---- every load first ----
            acc_q = _partial_sum(ws_ptr, row, cq_c, cq_m, SPLIT_K, TCT)
            acc_kv, acc_e, acc_o, c_lo, c_hi, s_lo, s_hi, slot = _kv_row_loads(
                ws_ptr, row + Hcq, cos_ptr, sin_ptr, idx_ptr, tq, kv_c, kv_m, ev_c, j, j_m, Dr2,
                s_cos_t, s_cos_d, s_sin_t, s_sin_d, s_idx, SPLIT_K, TCT)
            _row_cq(acc_q, wsc_q, xs, g_q, sm, cq_c, cq_m, tq, Hcq, eps_cq, cqn_ptr, cqs_ptr, s_cqn, dt,
                    INT8, QUANT_CQ, HAS_SMOOTH, BLOCK_Q, ASCEND)
            _row_kv(acc_kv, acc_e, acc_o, wsc_kv, wsc_e, wsc_o, xs, g_kv, c_lo, c_hi, s_lo, s_hi, slot, kv_c, kv_m,
                    j, j_m, Hckv, Dr2, eps_ckv, num_slots, block_size, kv_ptr, kr_ptr, qsckv_ptr, qsckr_ptr,
                    s_kv_b, s_kv_s, s_kv_c, s_kr_b, s_kr_s, s_kr_c, s_qsckv, s_qsckr, dt,
                    INT8, KV_INT8, KR_INT8, BLOCK_KV, BLOCK_R, ASCEND)
        else:
            if item % PARTS == 0:
                acc_q = _partial_sum(ws_ptr, row, cq_c, cq_m, SPLIT_K, TCT)
                _row_cq(acc_q, wsc_q, xs, g_q, sm, cq_c, cq_m, tq, Hcq, eps_cq, cqn_ptr, cqs_ptr, s_cqn, dt,
                        INT8, QUANT_CQ, HAS_SMOOTH, BLOCK_Q, ASCEND)
            else:
                acc_kv, acc_e, acc_o, c_lo, c_hi, s_lo, s_hi, slot = _kv_row_loads(
                    ws_ptr, row + Hcq, cos_ptr, sin_ptr, idx_ptr, tq, kv_c, kv_m, ev_c, j, j_m, Dr2,
                    s_cos_t, s_cos_d, s_sin_t, s_sin_d, s_idx, SPLIT_K, TCT)
                _row_kv(acc_kv, acc_e, acc_o, wsc_kv, wsc_e, wsc_o, xs, g_kv, c_lo, c_hi, s_lo, s_hi, slot, kv_c,
                        kv_m, j, j_m, Hckv, Dr2, eps_ckv, num_slots, block_size, kv_ptr, kr_ptr, qsckv_ptr,
                        qsckr_ptr, s_kv_b, s_kv_s, s_kv_c, s_kr_b, s_kr_s, s_kr_c, s_qsckv, s_qsckr, dt,
                        INT8, KV_INT8, KR_INT8, BLOCK_KV, BLOCK_R, ASCEND)


# ==============================================================================================
# 3. per-head query GEMM + W_UK absorption + RoPE
# ==============================================================================================
@triton.jit
def _load_uk(wuk_ptr, h_off, dcol, d_m, c0, Hckv, s_ud, s_uc, BLOCK_C: tl.constexpr):
    """W_UK[h][:, c0 : c0 + BLOCK_C] as a [BLOCK_D, BLOCK_C] tile (zeros past D / Hckv)."""
    cc = c0 + tl.arange(0, BLOCK_C)
    c_m = cc < Hckv
    u = tl.load(wuk_ptr + h_off + dcol.to(tl.int64)[:, None] * s_ud + cc.to(tl.int64)[None, :] * s_uc,
                mask=d_m[:, None] & c_m[None, :], other=0.0)
    return u


@triton.jit
def _absorb_chunk(qc, wuk_ptr, h_off, dcol, d_m, c0, Hckv, s_ud, s_uc, IEEE: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_C: tl.constexpr):
    cc = c0 + tl.arange(0, BLOCK_C)
    c_m = cc < Hckv
    u = _load_uk(wuk_ptr, h_off, dcol, d_m, c0, Hckv, s_ud, s_uc, BLOCK_C)
    q = _dot(qc, u, tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32), False, IEEE)
    return q, cc, c_m


@triton.jit
def _absorb_pre(qc, u, q_row, r_m, c0, Hckv, IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """Absorption of one W_UK chunk ``u`` that was loaded before the K loop; stores query[:, c0 : c0 + BLOCK_C]."""
    cc = c0 + tl.arange(0, BLOCK_C)
    c_m = cc < Hckv
    q = _dot(qc, u, tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32), False, IEEE)
    tl.store(q_row + cc[None, :], q.to(q_row.dtype.element_ty), mask=r_m[:, None] & c_m[None, :])


@triton.jit
def _q_k_loop(a_ptrs, bn_ptrs, br_ptrs, acc_n, acc_r, Hcq, rk, r_m, d_m, rc_m, s_ak, s_wk,
              INT8: tl.constexpr, IEEE: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr,
              ASCEND: tl.constexpr, EV_W: tl.constexpr):
    """The query GEMM's K loop: acc_n += cqn @ W_nope, acc_r += cqn @ W_rope over the Hcq rows; EVEN_K: no K mask
    (Hcq is a multiple of BLOCK_K)."""
    for k in range(0, Hcq, BLOCK_K):
        if ASCEND:
            if EVEN_K:
                a = tl.load(a_ptrs, mask=r_m[:, None], other=0)
                bn = tl.load(bn_ptrs, mask=d_m[None, :], other=0)
                br = tl.load(br_ptrs, mask=rc_m[None, :], other=0)
            else:
                km = (k + rk) < Hcq
                a = tl.load(a_ptrs, mask=r_m[:, None] & km[None, :], other=0)
                bn = tl.load(bn_ptrs, mask=km[:, None] & d_m[None, :], other=0)
                br = tl.load(br_ptrs, mask=km[:, None] & rc_m[None, :], other=0)
        elif EVEN_K:
            a = tl.load(a_ptrs)
            bn = tl.load(bn_ptrs, eviction_policy=EV_W)
            br = tl.load(br_ptrs, eviction_policy=EV_W)
        else:
            km = (k + rk) < Hcq
            a = tl.load(a_ptrs, mask=km[None, :], other=0)
            bn = tl.load(bn_ptrs, mask=km[:, None], other=0, eviction_policy=EV_W)
            br = tl.load(br_ptrs, mask=km[:, None], other=0, eviction_policy=EV_W)
        acc_n = _dot(a, bn, acc_n, INT8, IEEE)
        acc_r = _dot(a, br, acc_r, INT8, IEEE)
        a_ptrs += BLOCK_K * s_ak
        bn_ptrs += BLOCK_K * s_wk
        br_ptrs += BLOCK_K * s_wk
    return acc_n, acc_r


@triton.jit
def _q_round(acc, wsc_ptr, cols, c_m, xs, dt, INT8: tl.constexpr, ASCEND: tl.constexpr):
    """The query GEMM's rounding point: dt(acc · w_scale[col] · x_scale[t]) (int8), dt(acc) (float); columns
    past the head's width are zero. ``xs`` = the per-token scales of the tile's rows ([BLOCK_M] fp32, int8)."""
    if INT8:
        if ASCEND:
            v = acc.to(tl.float32) * tl.load(wsc_ptr + cols, mask=c_m, other=0.0)[None, :] * xs[:, None]
        else:
            v = acc.to(tl.float32) * tl.load(wsc_ptr + cols)[None, :] * xs[:, None]
    else:
        v = acc
    return tl.where(c_m[None, :], v, 0.0).to(dt)


@triton.jit
def _rope_pq(rc, rc_m, Dr, dt, ASCEND: tl.constexpr):
    """RoPE as two exact permutation products on the dt-rounded interleaved qr (one non-zero ±1 per column):
      d = qr @ P   = [x0, x2, …, x1, x3, …]              (de-interleave)
      rot = qr @ Q = [−x1, −x3, …, x0, x2, …]            (rotate_half(d))
    (CUDA builds them after the K loop: live across it they cost ~64 registers per thread; ASCEND builds the
    same matrices from 1-D source rows / signs: two 2-D compares, not eight (UB))."""
    Dr2 = Dr // 2
    ii = rc[:, None]
    if ASCEND:
        src_p = tl.where(rc < Dr2, 2 * rc, 2 * (rc - Dr2) + 1)
        src_q = tl.where(rc < Dr2, 2 * rc + 1, 2 * (rc - Dr2))
        sgn_q = tl.where(rc < Dr2, -1.0, 1.0)
        P = tl.where((ii == src_p[None, :]) & rc_m[None, :], 1.0, 0.0).to(dt)
        Q = tl.where((ii == src_q[None, :]) & rc_m[None, :], sgn_q[None, :], 0.0).to(dt)
    else:
        cc_ = rc[None, :]
        lo = cc_ < Dr2
        hi = (cc_ >= Dr2) & (cc_ < Dr)
        P = tl.where((lo & (ii == 2 * cc_)) | (hi & (ii == 2 * (cc_ - Dr2) + 1)), 1.0, 0.0).to(dt)
        Q = tl.where(lo & (ii == 2 * cc_ + 1), -1.0, tl.where(hi & (ii == 2 * (cc_ - Dr2)), 1.0, 0.0)).to(dt)
    return P, Q


@triton.jit
def _rope_out(qr, P, Q, cos_ptr, sin_ptr, rw, r_m, rc, rc_m, rcw, s_cos_t, s_cos_d, s_sin_t, s_sin_d,
              IEEE: tl.constexpr, ASCEND: tl.constexpr):
    """d·cos + rotate_half(d)·sin in fp32 for the tile's rows (interleaved pairs in, rotate-half out)."""
    BLOCK_M: tl.constexpr = qr.shape[0]
    BLOCK_R: tl.constexpr = qr.shape[1]
    zero = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
    d = _dot(qr, P, zero, False, IEEE)
    rot = _dot(qr, Q, zero, False, IEEE)
    if ASCEND:
        m2 = r_m[:, None] & rc_m[None, :]
        cs = tl.load(cos_ptr + rw[:, None] * s_cos_t + rc[None, :] * s_cos_d, mask=m2, other=0.0).to(tl.float32)
        sn = tl.load(sin_ptr + rw[:, None] * s_sin_t + rc[None, :] * s_sin_d, mask=m2, other=0.0).to(tl.float32)
    else:
        cs = tl.load(cos_ptr + rw[:, None] * s_cos_t + rcw[None, :] * s_cos_d).to(tl.float32)
        sn = tl.load(sin_ptr + rw[:, None] * s_sin_t + rcw[None, :] * s_sin_d).to(tl.float32)
    return d * cs + rot * sn


@triton.jit
def _absorb_rest(qc, q_row, r_m, c_lo, wuk_ptr, h_off, dcol, d_m, Hckv, s_ud, s_uc, IEEE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """query[:, c0 : c0 + BLOCK_C] = qc @ W_UK[h][:, chunk] for the chunks from column c_lo on (loaded here)."""
    for c0 in range(c_lo, Hckv, BLOCK_C):
        q, cc, c_m = _absorb_chunk(qc, wuk_ptr, h_off, dcol, d_m, c0, Hckv, s_ud, s_uc, IEEE, BLOCK_M, BLOCK_C)
        tl.store(q_row + cc[None, :], q.to(q_row.dtype.element_ty), mask=r_m[:, None] & c_m[None, :])


@triton.jit
def _query_kernel(a_ptr, as_ptr, w_ptr, wsc_ptr, wuk_ptr, sin_ptr, cos_ptr, qsckv_ptr,
                  q_ptr, qr_ptr, dsq_ptr,
                  T, Hcq, NH, D, Dr, Hckv,
                  s_at, s_ak, s_wk, s_wn, s_uh, s_ud, s_uc, s_sin_t, s_sin_d, s_cos_t, s_cos_d,
                  s_qt, s_qh, s_qrt, s_qrh,
                  INT8: tl.constexpr, Q8: tl.constexpr, IEEE: tl.constexpr, EVEN_K: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
                  BLOCK_C: tl.constexpr, ASCEND: tl.constexpr, PRE_UK: tl.constexpr = 0, EV_W: tl.constexpr = ""):
    """Work item = (head h, token tile), token tile fastest (the head's weights are shared in L2).
    BLOCK_D ≥ D (nope columns), BLOCK_R ≥ Dr (rope columns, read contiguously).
    PRE_UK (0..4, CUDA, not with Q8): the loads of the first PRE_UK W_UK[h] chunks are issued before the
    K loop, so they stream while it runs instead of after it (the absorption tail otherwise waits for
    PRE_UK·BLOCK_C·D·2 bytes with nothing else in flight). Costs D·BLOCK_C·2 bytes of registers per chunk.
    EV_W (CUDA): L2 eviction hint of the W_UQ_QR loads ("" = none; "evict_first" when one token tile covers T:
    each head's columns are streamed once).
    ASCEND: rows / columns past T / D / Dr are masked, not wrapped (triton-adapter's pointer analysis
    needs affine offsets); the launcher passes unit inner strides (s_ak = s_wn = s_uc = s_sin_d =
    s_cos_d = 1)."""
    _query_body(tl.program_id(0), tl.num_programs(0), a_ptr, as_ptr, w_ptr, wsc_ptr, wuk_ptr, sin_ptr, cos_ptr,
                qsckv_ptr, q_ptr, qr_ptr, dsq_ptr, T, Hcq, NH, D, Dr, Hckv, s_at, s_ak, s_wk, s_wn, s_uh, s_ud, s_uc,
                s_sin_t, s_sin_d, s_cos_t, s_cos_d, s_qt, s_qh, s_qrt, s_qrh, INT8, Q8, IEEE, EVEN_K, BLOCK_M, BLOCK_K,
                BLOCK_D, BLOCK_R, BLOCK_C, ASCEND, PRE_UK, EV_W)


@triton.jit
def _query_body(pid, nprog, a_ptr, as_ptr, w_ptr, wsc_ptr, wuk_ptr, sin_ptr, cos_ptr, qsckv_ptr, q_ptr, qr_ptr, dsq_ptr,
                T, Hcq, NH, D, Dr, Hckv, s_at, s_ak, s_wk, s_wn, s_uh, s_ud, s_uc, s_sin_t, s_sin_d, s_cos_t, s_cos_d,
                s_qt, s_qh, s_qrt, s_qrh, INT8: tl.constexpr, Q8: tl.constexpr, IEEE: tl.constexpr,
                EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
                BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, ASCEND: tl.constexpr, PRE_UK: tl.constexpr,
                EV_W: tl.constexpr):
    """:func:`_query_kernel`'s work items ``pid, pid + nprog, …`` (no defaults: triton 3.6 does not wrap a str
    default of a nested @jit call as a constexpr)."""
    dt = qr_ptr.dtype.element_ty
    m_tiles = tl.cdiv(T, BLOCK_M)
    HW = D + Dr
    dcol = tl.arange(0, BLOCK_D)
    d_m = dcol < D
    rc = tl.arange(0, BLOCK_R)
    rc_m = rc < Dr
    rcw = rc % Dr
    rk = tl.arange(0, BLOCK_K)
    if ASCEND:   # RoPE permutations (CUDA builds them after the K loop: :func:`_rope_pq`)
        P, Q = _rope_pq(rc, rc_m, Dr, dt, True)
    for item in range(pid, NH * m_tiles, nprog):
        h = item // m_tiles
        mt = item % m_tiles
        h64 = tl.full([], h, tl.int64)
        rows = mt * BLOCK_M + tl.arange(0, BLOCK_M)
        r_m = rows < T
        if ASCEND:
            rw = rows.to(tl.int64)
            nope_c = (h * HW + dcol).to(tl.int64)
            rope_c = (h * HW + D + rc).to(tl.int64)
        else:
            rw = (rows % T).to(tl.int64)
            nope_c = (h * HW + dcol % D).to(tl.int64)
            rope_c = (h * HW + D + rcw).to(tl.int64)
        a_ptrs = a_ptr + rw[:, None] * s_at + rk[None, :] * s_ak
        bn_ptrs = w_ptr + rk.to(tl.int64)[:, None] * s_wk + nope_c[None, :] * s_wn
        br_ptrs = w_ptr + rk.to(tl.int64)[:, None] * s_wk + rope_c[None, :] * s_wn
        h_off = h64 * s_uh
        if PRE_UK >= 1:
            u0 = _load_uk(wuk_ptr, h_off, dcol, d_m, 0, Hckv, s_ud, s_uc, BLOCK_C)
        if PRE_UK >= 2:
            u1 = _load_uk(wuk_ptr, h_off, dcol, d_m, BLOCK_C, Hckv, s_ud, s_uc, BLOCK_C)
        if PRE_UK >= 3:
            u2 = _load_uk(wuk_ptr, h_off, dcol, d_m, 2 * BLOCK_C, Hckv, s_ud, s_uc, BLOCK_C)
        if PRE_UK >= 4:
            u3 = _load_uk(wuk_ptr, h_off, dcol, d_m, 3 * BLOCK_C, Hckv, s_ud, s_uc, BLOCK_C)
        if INT8:
            acc_n = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.int32)
            acc_r = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.int32)
        else:
            acc_n = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
            acc_r = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
        acc_n, acc_r = _q_k_loop(a_ptrs, bn_ptrs, br_ptrs, acc_n, acc_r, Hcq, rk, r_m, d_m, rc_m, s_ak, s_wk,
                                 INT8, IEEE, EVEN_K, BLOCK_K, ASCEND, EV_W)
        # ---- dequant + rounding point: [qc ‖ qr] = dt(...) ----
        if INT8:
            if ASCEND:
                xs = tl.load(as_ptr + rw, mask=r_m, other=0.0)
            else:
                xs = tl.load(as_ptr + rw)
        else:
            xs = 1.0
        # ---- absorption: query[t, h] = qc @ W_UK[h]; RoPE: interleaved pairs in, rotate-half out ----
        qc = _q_round(acc_n, wsc_ptr, nope_c, d_m, xs, dt, INT8, ASCEND)
        qr = _q_round(acc_r, wsc_ptr, rope_c, rc_m, xs, dt, INT8, ASCEND)
        q_row = q_ptr + rows.to(tl.int64)[:, None] * s_qt + h64 * s_qh
        if Q8:
            amax = tl.zeros((BLOCK_M,), dtype=tl.float32)
            nan_n = tl.zeros((BLOCK_M,), dtype=tl.int32)      # max drops NaN: a NaN row is counted instead
            for c0 in range(0, Hckv, BLOCK_C):
                q, cc, c_m = _absorb_chunk(qc, wuk_ptr, h_off, dcol, d_m, c0, Hckv, s_ud, s_uc, IEEE, BLOCK_M,
                                           BLOCK_C)
                qa = tl.where(c_m[None, :], tl.abs(q), 0.0)
                amax = tl.maximum(amax, tl.max(qa, axis=1))
                nan_n += tl.sum((qa != qa).to(tl.int32), axis=1)
            scale = tl.math.div_rn(amax, tl.full((BLOCK_M,), 127.0, tl.float32))
            scale = tl.where(nan_n > 0, float("nan"), scale)   # NaN row → scale NaN, q 0 (reference.quant)
            safe = tl.where(scale > 0, scale, 1.0)
            for c0 in range(0, Hckv, BLOCK_C):
                q, cc, c_m = _absorb_chunk(qc, wuk_ptr, h_off, dcol, d_m, c0, Hckv, s_ud, s_uc, IEEE, BLOCK_M,
                                           BLOCK_C)
                v = tl.math.div_rn(q, tl.zeros_like(q) + safe[:, None])
                v = tl.where((scale[:, None] > 0) & (v == v), v, 0.0)   # inf / inf = NaN → 0, as the reference
                tl.store(q_row + cc[None, :], _sat_int8(v, -127.0), mask=r_m[:, None] & c_m[None, :])
            tl.store(dsq_ptr + rows.to(tl.int64) * NH + h, scale, mask=r_m)
        else:
            if PRE_UK >= 1:
                _absorb_pre(qc, u0, q_row, r_m, 0, Hckv, IEEE, BLOCK_M, BLOCK_C)
            if PRE_UK >= 2:
                _absorb_pre(qc, u1, q_row, r_m, BLOCK_C, Hckv, IEEE, BLOCK_M, BLOCK_C)
            if PRE_UK >= 3:
                _absorb_pre(qc, u2, q_row, r_m, 2 * BLOCK_C, Hckv, IEEE, BLOCK_M, BLOCK_C)
            if PRE_UK >= 4:
                _absorb_pre(qc, u3, q_row, r_m, 3 * BLOCK_C, Hckv, IEEE, BLOCK_M, BLOCK_C)
            _absorb_rest(qc, q_row, r_m, PRE_UK * BLOCK_C, wuk_ptr, h_off, dcol, d_m, Hckv, s_ud, s_uc, IEEE,
                         BLOCK_M, BLOCK_C)
        if not ASCEND:
            P, Q = _rope_pq(rc, rc_m, Dr, dt, False)
        out = _rope_out(qr, P, Q, cos_ptr, sin_ptr, rw, r_m, rc, rc_m, rcw, s_cos_t, s_cos_d, s_sin_t, s_sin_d,
                        IEEE, ASCEND)
        if Q8:
            qs = tl.load(qsckv_ptr)
            out = tl.math.div_rn(out * qs, tl.zeros_like(out) + safe[:, None])
        qr_row = qr_ptr + rows.to(tl.int64)[:, None] * s_qrt + h64 * s_qrh
        tl.store(qr_row + rc[None, :], out.to(dt), mask=r_m[:, None] & rc_m[None, :])


@triton.jit
def _cq_rows(t_lo, t_hi, ws_ptr, xs_ptr, wsdq_ptr, gq_ptr, smooth_ptr, a_ptr, as_ptr, CT, TCT, Hcq, s_at, eps_cq, dt,
             SPLIT_K: tl.constexpr, ROW_INT8: tl.constexpr, INT8: tl.constexpr, HAS_SMOOTH: tl.constexpr,
             BLOCK_Q: tl.constexpr):
    """cq → cqn rows of tokens [t_lo, t_hi) for the fused launch (:func:`_row_cq` with the row kernel's order)."""
    cq_c, cq_m, g_q, wsc_q, sm = _cq_consts(gq_ptr, wsdq_ptr, smooth_ptr, Hcq, ROW_INT8, HAS_SMOOTH, BLOCK_Q)
    for t in range(t_lo, t_hi):
        tq = tl.full([], t, tl.int64)
        if ROW_INT8:
            xs = tl.load(xs_ptr + tq)
        else:
            xs = 1.0
        acc_q = _partial_sum(ws_ptr, tq * CT, cq_c, cq_m, SPLIT_K, TCT)
        _row_cq(acc_q, wsc_q, xs, g_q, sm, cq_c, cq_m, tq, Hcq, eps_cq, a_ptr, as_ptr, s_at, dt,
                ROW_INT8, INT8, HAS_SMOOTH, BLOCK_Q, False)


@triton.jit
def _row_query_kernel(ws_ptr, xs_ptr, wsdq_ptr, wskv_ptr, gq_ptr, gkv_ptr, smooth_ptr, idx_ptr, kv_ptr, kr_ptr,
                      qsckr_ptr, a_ptr, as_ptr, w_ptr, wsc_ptr, wuk_ptr, sin_ptr, cos_ptr, qsckv_ptr, q_ptr, qr_ptr,
                      dsq_ptr, T, CT, TCT, Hcq, NH, D, Dr, Hckv, num_slots, block_size,
                      s_at, s_ak, s_wk, s_wn, s_uh, s_ud, s_uc, s_sin_t, s_sin_d, s_cos_t, s_cos_d,
                      s_qt, s_qh, s_qrt, s_qrh, s_idx, s_kv_b, s_kv_s, s_kv_c, s_kr_b, s_kr_s, s_kr_c, s_qsckv, s_qsckr,
                      eps_cq, eps_ckv, n_q,
                      SPLIT_K: tl.constexpr, ROW_INT8: tl.constexpr, HAS_SMOOTH: tl.constexpr, KV_INT8: tl.constexpr,
                      KR_INT8: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_RH: tl.constexpr,
                      INT8: tl.constexpr, Q8: tl.constexpr, IEEE: tl.constexpr, EVEN_K: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
                      BLOCK_C: tl.constexpr, PRE_UK: tl.constexpr, EV_W: tl.constexpr):
    """Row kernel + query kernel in ONE launch (CUDA, config ``fuse_row_max_t``; only when one token tile covers
    T, i.e. T ≤ BLOCK_M): saves the row kernel's launch and its latency-bound ~3-5 µs at decode.
    Programs ``pid < n_q`` (= the query kernel's work items, one each): first the cq → cqn rows of ALL T tokens
    (split-K sum, dequant, rounding, RmsNorm, and the per-token int8 quant when W_UQ_QR is int8; the same code
    and order as :func:`_row_kernel`, so every program writes the same bits into the shared ``a_ptr`` / ``as_ptr``
    buffers), a CTA barrier (its own stores are then visible to all its threads; rows it reads were written by
    itself), then :func:`_query_body`. Programs ``pid ≥ n_q``: the ckv / kr → cache part of the row kernel, one
    token per program. Work per query program grows with T (the cq rows are recomputed by every head), hence
    the small-T limit."""
    pid = tl.program_id(0)
    dt = qr_ptr.dtype.element_ty
    if pid < n_q:
        # every program recomputes all T cq rows (same bits), then a CTA barrier: it reads only rows it wrote
        _cq_rows(0, T, ws_ptr, xs_ptr, wsdq_ptr, gq_ptr, smooth_ptr, a_ptr, as_ptr, CT, TCT, Hcq, s_at, eps_cq, dt,
                 SPLIT_K, ROW_INT8, INT8, HAS_SMOOTH, BLOCK_Q)
        tl.debug_barrier()
        _query_body(pid, n_q, a_ptr, as_ptr, w_ptr, wsc_ptr, wuk_ptr, sin_ptr, cos_ptr, qsckv_ptr, q_ptr, qr_ptr,
                    dsq_ptr, T, Hcq, NH, D, Dr, Hckv, s_at, s_ak, s_wk, s_wn, s_uh, s_ud, s_uc, s_sin_t,
                    s_sin_d, s_cos_t, s_cos_d, s_qt, s_qh, s_qrt, s_qrh, INT8, Q8, IEEE, EVEN_K, BLOCK_M, BLOCK_K,
                    BLOCK_D, BLOCK_R, BLOCK_C, False, PRE_UK, EV_W)
    else:
        Dr2 = Dr // 2
        kv_c, kv_m, j, j_m, ev_c, g_kv, wsc_kv, wsc_e, wsc_o = _kv_consts(gkv_ptr, wskv_ptr, Hckv, Dr2, ROW_INT8,
                                                                          BLOCK_KV, BLOCK_RH)
        for t in range(pid - n_q, T, tl.num_programs(0) - n_q):
            tq = tl.full([], t, tl.int64)
            row = tq * CT + Hcq
            if ROW_INT8:
                xs = tl.load(xs_ptr + tq)
            else:
                xs = 1.0
            acc_kv, acc_e, acc_o, c_lo, c_hi, s_lo, s_hi, slot = _kv_row_loads(
                ws_ptr, row, cos_ptr, sin_ptr, idx_ptr, tq, kv_c, kv_m, ev_c, j, j_m, Dr2,
                s_cos_t, s_cos_d, s_sin_t, s_sin_d, s_idx, SPLIT_K, TCT)
            _row_kv(acc_kv, acc_e, acc_o, wsc_kv, wsc_e, wsc_o, xs, g_kv, c_lo, c_hi, s_lo, s_hi, slot, kv_c, kv_m, j,
                    j_m, Hckv, Dr2, eps_ckv, num_slots, block_size, kv_ptr, kr_ptr, qsckv_ptr, qsckr_ptr,
                    s_kv_b, s_kv_s, s_kv_c, s_kr_b, s_kr_s, s_kr_c, s_qsckv, s_qsckr, dt,
                    ROW_INT8, KV_INT8, KR_INT8, BLOCK_KV, BLOCK_RH, False)


# ==============================================================================================
# launcher
# ==============================================================================================
def _p2(n: int, lo: int = 16) -> int:
    return max(lo, _np2(max(int(n), 1)))


def _flat_scale(s: torch.Tensor | None, expand_to: int = 0) -> tuple[torch.Tensor | None, int]:
    """(flat fp32 [C] tensor, stride): stride 0 broadcasts a single per-tensor value; with ``expand_to``
    (Ascend) a single value is expanded to [expand_to] instead, so the stride is always 1."""
    if s is None:
        return None, 0
    f = s.reshape(-1).contiguous()
    if f.numel() == 1 and expand_to > 0:
        f = f.expand(expand_to).contiguous()
    return f, (0 if f.numel() == 1 else 1)


def plan(T: int, He: int, Hcq: int, N: int, D: int, Dr: int, Hckv: int, device: torch.device, *,
         int8_down: bool = False, int8_query: bool = False, backend_key: str | None = None,
         overrides: dict | None = None, cores: int | None = None, act_bytes: int = 2, gemv: bool = False) -> dict:
    """The launch plan for these shapes (shapes only, no data): per-kernel tiles, SPLIT_K, grids.
    T, He, Hcq, N, D, Dr, Hckv: tokens, hidden, q_lora_rank, heads, qk_nope / qk_rope head dims, kv_lora_rank
    (ints); int8_down / int8_query: int8 operands of the down GEMM (token_x) / the query GEMM (weight_uq_qr);
    ``overrides`` = {"down": {...}, "query": {...}, "row": {...}} replaces bucket entries (perf sweeps);
    ``cores`` overrides the core count (default: the config's, or the device's SM count); ``act_bytes`` is
    the element size of the float activation dtype (fp32 operands need more shared memory per stage:
    where the config has ``smem_bytes``, num_stages is lowered until the estimate fits); ``gemv``: the down GEMM
    runs on ``quant_matmul``'s streaming GEMV (:func:`ops.triton.quant.gemv_stream_int32`; the launcher decides it
    from the config's ``down.gemv_max_t`` and the weights' layout: :func:`down_uses_gemv`), so the down plan is
    unsplit (``GEMV`` True; its ``grid`` is then 0: the GEMV takes quant_matmul's plan and grid).
    Returns a new dict {down, row, query: per-kernel dicts; backend_key} (the caller may change it); plans
    without overrides are memoised per (shapes, int8 flags, config table, core count, act_bytes, gemv) —
    everything they depend on.
    Raises ValueError if a "down" / "row" / "query" section of the table (or one of its buckets) or of ``overrides``
    names an unknown key (:data:`_SECTION_KEYS`), or if the
    row config's ``parts`` is not 1 or 2; KeyError for a backend_key that is not a table of
    configs/<backend_key>/mla_prolog.json; ZeroDivisionError if He = 0 (K_PER_SPLIT becomes 0)."""
    key = backend_key or _backend_key(device)
    cores = cores or _cores(_all_configs()[key], device)
    if overrides:
        return _make_plan(T, He, Hcq, N, D, Dr, Hckv, key, cores, bool(int8_down), bool(int8_query), act_bytes,
                          overrides, bool(gemv))
    p = _cached_plan(T, He, Hcq, N, D, Dr, Hckv, key, cores, bool(int8_down), bool(int8_query), act_bytes,
                     bool(gemv))
    return {k: dict(v) if isinstance(v, dict) else v for k, v in p.items()}


@functools.lru_cache(maxsize=4096, typed=True)
def _cached_plan(T: int, He: int, Hcq: int, N: int, D: int, Dr: int, Hckv: int, key: str, cores: int,
                 int8_down: bool, int8_query: bool, act_bytes: int, gemv: bool = False) -> dict:
    """:func:`_make_plan` without overrides, memoised; the result is shared: never modify it."""
    return _make_plan(T, He, Hcq, N, D, Dr, Hckv, key, cores, int8_down, int8_query, act_bytes, None, gemv)


# every key a section (its shared keys, a bucket's config, or an override) may name: a typo or a removed switch is an
# error, not a silent no-op
_SECTION_KEYS = {"down": {"programs_per_core", "gemv_max_t", "max_split_k", "min_k_per_split", "grid_cap", "BLOCK_M",
                          "BLOCK_N", "BLOCK_K", "num_warps", "num_stages", "split_k"},
                 "row": {"grid_cap", "num_warps", "parts"},
                 "query": {"grid_cap", "evict_first_w", "fuse_row_max_t", "BLOCK_M", "BLOCK_K", "BLOCK_C", "PRE_UK",
                           "num_warps", "num_stages"}}


def _check_keys(cfg: dict, ov: dict) -> None:
    """ValueError naming the first unknown key of the table's down / row / query sections (shared keys or a bucket's
    config) or of the overrides (:data:`_SECTION_KEYS`)."""
    for sec, known in _SECTION_KEYS.items():
        c = cfg.get(sec, {})
        dicts = [{k: v for k, v in c.items() if k != "buckets"}, ov.get(sec, {})] + \
            [b["config"] for b in c.get("buckets", [])]
        for d in dicts:
            unknown = sorted(set(d) - known)
            if unknown:
                raise ValueError(f"unknown mla_prolog {sec} config key(s) {unknown}; the keys are {sorted(known)}")


def _make_plan(T: int, He: int, Hcq: int, N: int, D: int, Dr: int, Hckv: int, key: str, cores: int,
               int8_down: bool, int8_query: bool, act_bytes: int, overrides: dict | None, gemv: bool = False) -> dict:
    """:func:`plan` for a resolved config table ``key`` and core count."""
    cfg = _all_configs()[key]
    ov = overrides or {}
    _check_keys(cfg, ov)
    # --- down GEMM ---
    dc = cfg["down"]
    d = dict(select(dc["buckets"], T=T, int8=int8_down))
    d.update(ov.get("down", {}))
    bm, bn, bk = int(d["BLOCK_M"]), int(d["BLOCK_N"]), int(d["BLOCK_K"])
    Ckv = Hckv + Dr
    tiles = (_cdiv(Hcq, bn) + _cdiv(Ckv, bn)) * _cdiv(T, bm)
    sk = d.get("split_k", "auto")
    if sk == "auto":
        target = int(float(dc.get("programs_per_core", 2)) * cores)
        sk = max(1, target // max(tiles, 1))
        sk = min(sk, int(dc["max_split_k"]), max(1, He // int(dc["min_k_per_split"])))
    sk = max(1, int(sk))
    k_per = _cdiv(_cdiv(He, sk), bk) * bk
    sk = _cdiv(He, k_per)
    d.update(SPLIT_K=sk, K_PER_SPLIT=k_per, EVEN_K=(He % k_per == 0 and k_per % bk == 0),
             grid=_grid(tiles * sk, int(dc.get("grid_cap", 0))), GEMV=bool(gemv))
    if gemv:   # quant_matmul's streaming GEMV writes the unsplit int32 sums: the row kernels read one partial
        d.update(SPLIT_K=1, K_PER_SPLIT=He, EVEN_K=True, grid=0)
    smem = int(cfg.get("smem_bytes", 0))
    eb = 1 if int8_down else act_bytes
    d["num_stages"] = _fit_stages(int(d.get("num_stages", 1)), (bm * bk + bk * bn) * eb, 0, smem)
    # --- row kernel ---
    r = resolve(cfg["row"], T=T, int8=int8_down)
    r.update(ov.get("row", {}))
    parts = int(r.get("parts", 1))   # row work items per token: 1 (whole row) or 2 (cq | ckv + kr)
    if parts not in (1, 2):
        raise ValueError(f"row parts must be 1 or 2, got {parts}")
    n_row = _grid(T * parts, int(r.get("grid_cap", 0)))
    r.update(BLOCK_Q=_p2(Hcq), BLOCK_KV=_p2(Hckv), BLOCK_R=_p2(Dr // 2), n_row=n_row, grid=n_row, PARTS=parts)
    # --- query kernel ---
    qc = cfg["query"]
    q = dict(select(qc["buckets"], T=T, int8=int8_query))
    q.update(ov.get("query", {}))
    qbm, qbk = int(q["BLOCK_M"]), int(q["BLOCK_K"])
    bd, br, bc = _p2(D), _p2(Dr), int(q["BLOCK_C"])
    # L2 hint (CUDA): W_UQ_QR evict-first when one token tile reads each head's columns (no reuse)
    ev_w = key == "cuda" and bool(q.get("evict_first_w", qc.get("evict_first_w", 0))) and _cdiv(T, qbm) == 1
    # fuse_row_max_t (CUDA): row + query kernels in one launch when T ≤ it and one token tile covers T (no grid cap)
    fuse = key == "cuda" and 0 < T <= int(q.get("fuse_row_max_t", qc.get("fuse_row_max_t", 0))) and \
        _cdiv(T, qbm) == 1 and int(qc.get("grid_cap", 0)) == 0
    q.update(BLOCK_D=bd, BLOCK_R=br, EVEN_K=(Hcq % qbk == 0), FUSE_ROW=int(fuse),
             grid=_grid(N * _cdiv(T, qbm), int(qc.get("grid_cap", 0))),
             EV_W="evict_first" if ev_w else "", _T=T)
    eb = 1 if int8_query else act_bytes
    epi = (bd * bc + qbm * bd + 2 * br * br + qbm * br) * act_bytes
    per_stage = (qbm * qbk + qbk * (bd + br)) * eb
    # W_UK chunks held across the main loop (PRE_UK, [BLOCK_D, BLOCK_C] each): fewer when they would not leave room
    # for two operand stages (fp32 activations: 270 KB > 227 KB of shared memory on the H200 with 2 chunks)
    pre = int(q.get("PRE_UK", 0))
    while smem > 0 and pre > 0 and per_stage + epi + pre * bd * bc * act_bytes > smem:
        pre -= 1
    if "PRE_UK" in q:
        q["PRE_UK"] = pre
    q["num_stages"] = _fit_stages(int(q.get("num_stages", 1)), per_stage, epi + pre * bd * bc * act_bytes, smem)
    return dict(down=d, row=r, query=q, backend_key=key)


def _fit_stages(stages: int, per_stage: int, epilogue: int, smem: int) -> int:
    """Lower num_stages until (stages − 1)·per_stage + epilogue ≤ smem (conservative estimate of Triton's
    shared-memory use: stages − 1 buffered operand tiles plus the epilogue's dot operands); smem 0 = no limit."""
    while smem > 0 and stages > 1 and (stages - 1) * per_stage + epilogue > smem:
        stages -= 1
    return stages


class _Launch(NamedTuple):
    """Everything of the three launches that depends only on shapes, dtypes and the plan (grids, SPLIT_K,
    constexprs, num_warps / num_stages), in the keyword order the launcher passes them."""
    asc: bool
    n_row: int
    split_k: int
    k_per_split: int
    down_grid: tuple
    down_kw: dict
    row_grid: tuple
    row_kw: dict
    query_grid: tuple
    query_kw: dict
    fuse_grid: tuple = ()    # non-empty: one _row_query_kernel launch replaces the row and query launches
    fuse_kw: dict = {}


def make_launch(p: dict, full: bool, qint8: bool, kv8: bool, kr8: bool, has_smooth: bool, ieee: bool,
                on_cuda: bool) -> _Launch:
    """The three (or, fused, two) launches of plan ``p`` (:func:`plan`) for a mode: full A8W8 (int8 token_x), int8
    W_UQ_QR (qint8), int8 kv / kr caches, smooth_scales_cq given, fp32 operands (ieee), CUDA tensors; grids and
    keyword arguments only (no tensors), as the launcher passes them."""
    asc = p["backend_key"] == "ascend"
    d, r, q = p["down"], p["row"], p["query"]
    down_kw = dict(INT8=full, IEEE=ieee, EVEN_K=d["EVEN_K"],
                   BLOCK_M=int(d["BLOCK_M"]), BLOCK_N=int(d["BLOCK_N"]), BLOCK_K=int(d["BLOCK_K"]),
                   ASCEND=asc, num_warps=int(d["num_warps"]))
    if on_cuda:
        down_kw["num_stages"] = int(d["num_stages"])
    row_kw = dict(SPLIT_K=d["SPLIT_K"], INT8=full, QUANT_CQ=qint8, HAS_SMOOTH=qint8 and has_smooth, KV_INT8=kv8,
                  KR_INT8=kr8, BLOCK_Q=r["BLOCK_Q"], BLOCK_KV=r["BLOCK_KV"], BLOCK_R=r["BLOCK_R"], ASCEND=asc,
                  PARTS=int(r.get("PARTS", 1)), num_warps=int(r["num_warps"]))
    query_kw = dict(INT8=qint8, Q8=full and kv8, IEEE=ieee, EVEN_K=q["EVEN_K"],
                    BLOCK_M=int(q["BLOCK_M"]), BLOCK_K=int(q["BLOCK_K"]), BLOCK_D=q["BLOCK_D"], BLOCK_R=q["BLOCK_R"],
                    BLOCK_C=int(q["BLOCK_C"]), ASCEND=asc, PRE_UK=0 if asc or (full and kv8) else int(q.get("PRE_UK", 0)),
                    EV_W=q.get("EV_W", ""), num_warps=int(q["num_warps"]))
    if on_cuda:
        query_kw["num_stages"] = int(q["num_stages"])
    query_grid = (q["grid"],)
    fuse_grid, fuse_kw = (), {}
    if q.get("FUSE_ROW") and not asc:
        # query constexprs (ASCEND dropped: CUDA only) + the row kernel's; one program per query item, then T
        # programs for the ckv / kr → cache part
        fuse_kw = {k: v for k, v in query_kw.items() if k != "ASCEND"}
        fuse_kw.update(SPLIT_K=d["SPLIT_K"], ROW_INT8=full, HAS_SMOOTH=qint8 and has_smooth, KV_INT8=kv8, KR_INT8=kr8,
                       BLOCK_Q=r["BLOCK_Q"], BLOCK_KV=r["BLOCK_KV"], BLOCK_RH=r["BLOCK_R"])
        fuse_grid = (query_grid[0] + int(q["_T"]),)
    return _Launch(asc, int(r.get("n_row", r["grid"])), d["SPLIT_K"], d["K_PER_SPLIT"], (d["grid"],), down_kw,
                   (r["grid"],), row_kw, query_grid, query_kw, fuse_grid, fuse_kw)


@functools.lru_cache(maxsize=4096, typed=True)
def _cached_launch(T: int, He: int, Hcq: int, N: int, D: int, Dr: int, Hckv: int, key: str, cores: int, full: bool,
                   qint8: bool, kv8: bool, kr8: bool, has_smooth: bool, ieee: bool, act_bytes: int,
                   on_cuda: bool, gemv: bool = False) -> _Launch:
    """The launch constants for a call without overrides, memoised on everything they depend on: shapes, the
    mode flags (int8 x / W_UQ_QR / kv / kr caches, smooth scales), fp32 activations, config table, core count
    and whether the device is CUDA, and whether the down GEMM runs on the streaming GEMV. Shared: its dicts are
    only ever unpacked into launches (``**``)."""
    return make_launch(_cached_plan(T, He, Hcq, N, D, Dr, Hckv, key, cores, full, qint8, act_bytes, gemv),
                        full, qint8, kv8, kr8, has_smooth, ieee, on_cuda)


def supports_reason(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq, rmsnorm_gamma_ckv,
                    rope_sin, rope_cos, kv_cache, kr_cache, *, cache_index, dequant_scale_x=None,
                    dequant_scale_w_dq=None, dequant_scale_w_uq_qr=None, dequant_scale_w_dkv_kr=None,
                    quant_scale_ckv=None, quant_scale_ckr=None, smooth_scales_cq=None, rmsnorm_epsilon_cq=1e-5,
                    rmsnorm_epsilon_ckv=1e-5, cache_mode="PA_BSND") -> str | None:
    """Why the Triton kernels cannot take these inputs (None = they can). Argument validity itself is
    checked by ops/mla_prolog.py; this only lists what the kernels do not implement."""
    if cache_mode != "PA_BSND":
        return f"cache_mode {cache_mode!r}: the Triton kernels write PA_BSND caches only"
    if token_x.shape[-1] == 0:
        return "hidden size He = 0 (an empty down GEMM): the kernels split K, which needs He ≥ 1"
    dt = weight_uk.dtype
    if dt not in _FLOATS:
        return f"activation dtype {dt} (weight_uk) is not fp16/bf16/fp32"
    if dt == torch.bfloat16 and token_x.device.type == "cpu":
        return "bf16 tl.dot is wrong under TRITON_INTERPRET (use fp16/fp32 on the CPU interpreter)"
    if kr_cache.shape[-1] % 2 or kr_cache.shape[-1] < 2:
        return "qk_rope_head_dim Dr must be even and ≥ 2"
    if weight_uk.shape[1] > 256:
        return f"qk_nope_head_dim D = {weight_uk.shape[1]} > 256 (one tile per head)"
    if weight_dq.shape[1] > 16384 or weight_uk.shape[2] > 16384:
        return "Hcq / Hckv > 16384: the row kernel keeps a whole row in registers"
    return None


def pack_weights(weights: dict, backend: str = "cuda") -> dict:
    """Offline: put the int8 weights (weight_dq, weight_uq_qr, weight_dkv_kr) of an mla_prolog input dict
    into the layout the backend reads fastest; float weights and everything else are returned as they are.
    CUDA: K-major (a [K, N] view of a contiguous [N, K] tensor), Hopper's 8-bit MMA layout. Ascend: row-major
    (ND; FRACTAL_NZ is a storage format applied with torch_npu.npu_format_cast on the NPU). The result is
    logically identical, so every backend computes the same numbers.

    weights: the op's keyword inputs; the packed ones keep their logical shapes (weight_dq [He, Hcq],
    weight_uq_qr [Hcq, N·(D + Dr)], weight_dkv_kr [He, Hckv + Dr], int8). backend: "cuda" or "ascend".
    Returns a new dict (the input dict is not modified). Raises ValueError for another backend."""
    if backend not in ("cuda", "ascend"):
        raise ValueError(f"backend must be 'cuda' or 'ascend' (the Ascend NPU's layout), got {backend!r}")
    out = dict(weights)
    for k in ("weight_dq", "weight_uq_qr", "weight_dkv_kr"):
        w = out.get(k)
        if isinstance(w, torch.Tensor) and w.dtype == torch.int8:
            out[k] = w.t().contiguous().t() if backend == "cuda" else w.contiguous()
    return out


def mla_prolog(token_x: torch.Tensor, weight_dq: torch.Tensor, weight_uq_qr: torch.Tensor, weight_uk: torch.Tensor,
               weight_dkv_kr: torch.Tensor, rmsnorm_gamma_cq: torch.Tensor, rmsnorm_gamma_ckv: torch.Tensor,
               rope_sin: torch.Tensor, rope_cos: torch.Tensor, kv_cache: torch.Tensor, kr_cache: torch.Tensor, *,
               cache_index: torch.Tensor,
               dequant_scale_x: torch.Tensor | None = None,
               dequant_scale_w_dq: torch.Tensor | None = None,
               dequant_scale_w_uq_qr: torch.Tensor | None = None,
               dequant_scale_w_dkv_kr: torch.Tensor | None = None,
               quant_scale_ckv: torch.Tensor | None = None,
               quant_scale_ckr: torch.Tensor | None = None,
               smooth_scales_cq: torch.Tensor | None = None,
               rmsnorm_epsilon_cq: float = 1e-5,
               rmsnorm_epsilon_ckv: float = 1e-5,
               cache_mode: str = "PA_BSND") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused MLA pre-attention on Triton; same signature, semantics and rounding points as
    :func:`reference.mla_prolog.mla_prolog` (which documents shapes, dtypes and modes), mirroring
    ``torch_npu.npu_mla_prolog_v3`` with ``cache_mode="PA_BSND"``.

    token_x [T, He] / [B, S, He] (dt or int8); weight_dq [He, Hcq]; weight_uq_qr [Hcq, N·(D+Dr)];
    weight_uk [N, D, Hckv] (dt); weight_dkv_kr [He, Hckv+Dr]; rope_sin / rope_cos [T, Dr] or [B, S, Dr] (half-duplicated);
    kv_cache [num_blocks, block_size, 1, Hckv], kr_cache [num_blocks, block_size, 1, Dr] mutated at slot
    ``cache_index[t]`` (int64; negative or ≥ num_blocks·block_size: not written). Any strides.
    Returns NEW (query [.., N, Hckv], query_rope [.., N, Dr], dequant_scale_q_nope fp32 [T, N, 1] in
    full + C8, else [0]). Arguments are not validated here (ops/mla_prolog.py does it); raises ValueError
    for a cache_mode other than "PA_BSND".
    """
    return mla_prolog_config(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
                             rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache, cache_index=cache_index,
                             dequant_scale_x=dequant_scale_x, dequant_scale_w_dq=dequant_scale_w_dq,
                             dequant_scale_w_uq_qr=dequant_scale_w_uq_qr, dequant_scale_w_dkv_kr=dequant_scale_w_dkv_kr,
                             quant_scale_ckv=quant_scale_ckv, quant_scale_ckr=quant_scale_ckr,
                             smooth_scales_cq=smooth_scales_cq, rmsnorm_epsilon_cq=rmsnorm_epsilon_cq,
                             rmsnorm_epsilon_ckv=rmsnorm_epsilon_ckv, cache_mode=cache_mode)


def _down_gemv(key: str, T: int, He: int, CT: int, x: torch.Tensor, weight_dq: torch.Tensor,
               weight_dkv_kr: torch.Tensor, full: bool, overrides: dict | None) -> dict | None:
    """The streaming-GEMV plan for the down GEMM, or None (then :func:`_down_kernel` runs): the "cuda" table, int8
    token_x (full A8W8), T ≤ its ``down.gemv_max_t`` (default 0: off), ``quant_matmul``'s table giving the unsplit
    ``gemv_stream`` bucket for (T, Hcq + Hckv + Dr, He), and weights it can read (K-major int8 of equal strides,
    :func:`ops.triton.quant.gemv_stream_int32_ok`). ``overrides`` with a "down" entry select the down kernel, so
    that a sweep of its tiles or split_k times it, unless they name ``gemv_max_t`` themselves. Host metadata only
    (no sync)."""
    if key != "cuda" or not full:
        return None
    dc = _all_configs()[key]["down"]
    ovd = (overrides or {}).get("down", {})
    if ovd and "gemv_max_t" not in ovd:
        return None
    gmax = int(ovd.get("gemv_max_t", dc.get("gemv_max_t", 0)))
    if T > gmax:
        return None
    gp = _quant.gemv_stream_plan(T, CT, He, x.device)
    if gp is None or not _quant.gemv_stream_int32_ok(x, (weight_dq, weight_dkv_kr), gp):
        return None
    return gp


def down_uses_gemv(token_x: torch.Tensor, weight_dq: torch.Tensor, weight_dkv_kr: torch.Tensor, Hckv: int, Dr: int, *,
                   backend_key: str | None = None, overrides: dict | None = None) -> bool:
    """Whether :func:`mla_prolog_config` runs the down GEMM on ``quant_matmul``'s streaming GEMV for these operands
    (token_x [.., He], weight_dq [He, Hcq], weight_dkv_kr [He, Hckv + Dr]; host metadata only): what to pass
    :func:`plan` as ``gemv`` to get the plan that launches."""
    T = math.prod(token_x.shape[:-1])
    key = backend_key or _backend_key(token_x.device)
    return T > 0 and _down_gemv(key, T, token_x.shape[-1], weight_dq.shape[1] + Hckv + Dr,
                                token_x.reshape(T, token_x.shape[-1]), weight_dq, weight_dkv_kr,
                                token_x.dtype == torch.int8, overrides) is not None


def mla_prolog_config(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq, rmsnorm_gamma_ckv,
                      rope_sin, rope_cos, kv_cache, kr_cache, *, cache_index, dequant_scale_x=None,
                      dequant_scale_w_dq=None, dequant_scale_w_uq_qr=None, dequant_scale_w_dkv_kr=None,
                      quant_scale_ckv=None, quant_scale_ckr=None, smooth_scales_cq=None, rmsnorm_epsilon_cq=1e-5,
                      rmsnorm_epsilon_ckv=1e-5, cache_mode="PA_BSND", overrides: dict | None = None,
                      backend_key: str | None = None, cores: int | None = None):
    """:func:`mla_prolog` with explicit launch-config ``overrides`` ({"down": {...}, "query": {...}, "row": {...}},
    see :func:`plan`), config table ``backend_key`` and/or core count ``cores`` (default: the table's, else the
    device's SM count, else 20) — for perf sweeps and tests."""
    if cache_mode != "PA_BSND":
        raise ValueError(f"cache_mode {cache_mode!r} is not supported (only 'PA_BSND')")
    dev = token_x.device
    dt = weight_uk.dtype
    lead = tuple(token_x.shape[:-1])
    He = token_x.shape[-1]
    T = math.prod(lead)
    N, D, Hckv = weight_uk.shape
    Dr = kr_cache.shape[-1]
    Hcq = weight_dq.shape[1]
    full = token_x.dtype == torch.int8
    qint8 = weight_uq_qr.dtype == torch.int8
    kv8 = kv_cache.dtype == torch.int8
    kr8 = kr_cache.dtype == torch.int8
    q8 = full and kv8
    query = torch.empty((*lead, N, Hckv), dtype=torch.int8 if q8 else dt, device=dev)
    query_rope = torch.empty((*lead, N, Dr), dtype=dt, device=dev)
    dsq = torch.empty((T, N, 1) if q8 else (0,), dtype=torch.float32, device=dev)
    if T == 0:
        return query, query_rope, dsq

    key = backend_key or _backend_key(dev)
    cores = cores or _cores(_all_configs()[key], dev)
    has_smooth = smooth_scales_cq is not None
    ieee = dt == torch.float32
    on_cuda = dev.type == "cuda"
    x = token_x.reshape(T, He)
    Ckv = Hckv + Dr
    CT = Hcq + Ckv
    gemv = _down_gemv(key, T, He, CT, x, weight_dq, weight_dkv_kr, full, overrides)
    if overrides:
        lp = make_launch(_make_plan(T, He, Hcq, N, D, Dr, Hckv, key, cores, full, qint8, dt.itemsize, overrides,
                                     gemv is not None), full, qint8, kv8, kr8, has_smooth, ieee, on_cuda)
    else:
        lp = _cached_launch(T, He, Hcq, N, D, Dr, Hckv, key, cores, full, qint8, kv8, kr8, has_smooth, ieee,
                            dt.itemsize, on_cuda, gemv is not None)
    asc = lp.asc
    sin = rope_sin.reshape(T, Dr)
    cos = rope_cos.reshape(T, Dr)
    idx = cache_index.reshape(T)
    # the kernels read the per-token scale at xs + t: a [T, 1] / [B, S] scale may reshape to a strided view
    # (a column slice, or one scale expanded to every token), so it is made unit-stride here
    xs = dequant_scale_x.reshape(T).contiguous() if full else None
    kv_w, kr_w = kv_cache, kr_cache
    if asc:
        # the Ascend kernels address the innermost dim with a unit stride (a runtime stride there lowers
        # to element-wise gathers); Triton turns these 1s into constants at launch, as the compile cases say
        x, sin, cos, idx = _unit_inner(x), _unit_inner(sin), _unit_inner(cos), _unit_inner(idx)
        weight_dq, weight_dkv_kr = _unit_inner(weight_dq), _unit_inner(weight_dkv_kr)
        weight_uq_qr, weight_uk = _unit_inner(weight_uq_qr), _unit_inner(weight_uk)
        kv_w, kr_w = _unit_inner(kv_cache), _unit_inner(kr_cache)   # written back below when copied

    # ---- 1. down GEMM ----
    ws = torch.empty((lp.split_k, T, CT), dtype=torch.int32 if full else torch.float32, device=dev)
    if gemv is not None:   # A8W8, T ≤ down.gemv_max_t: quant_matmul's streaming GEMV, unsplit int32 sums
        _quant.gemv_stream_int32(x, (weight_dq, weight_dkv_kr), ws[0], gemv)
    else:
        _down_kernel[lp.down_grid](x, weight_dq, weight_dkv_kr, ws, T, He, Hcq, Ckv, lp.k_per_split, lp.split_k,
                                   x.stride(0), x.stride(1), weight_dq.stride(0), weight_dq.stride(1),
                                   weight_dkv_kr.stride(0), weight_dkv_kr.stride(1), **lp.down_kw)

    # ---- 2. row kernel ----
    if qint8:
        cqn = torch.empty((T, Hcq), dtype=torch.int8, device=dev)
        cqs = torch.empty((T,), dtype=torch.float32, device=dev)
    else:
        cqn = torch.empty((T, Hcq), dtype=dt, device=dev)
        cqs = ws  # unused
    wsdq, _ = _flat_scale(dequant_scale_w_dq)
    wskv, _ = _flat_scale(dequant_scale_w_dkv_kr)
    qsckv, s_qsckv = _flat_scale(quant_scale_ckv, Hckv if asc else 0)
    qsckr, s_qsckr = _flat_scale(quant_scale_ckr, Dr if asc else 0)
    smooth, _ = _flat_scale(smooth_scales_cq)
    # the gammas are read as ptr + col (the registered op copies strided vectors; the launcher is public too)
    rmsnorm_gamma_cq, rmsnorm_gamma_ckv = _unit_inner(rmsnorm_gamma_cq), _unit_inner(rmsnorm_gamma_ckv)
    f32_dummy = rmsnorm_gamma_cq  # stands in for absent pointers (never read)
    nb, bs = kv_cache.shape[0], kv_cache.shape[1]
    wsuq, _ = _flat_scale(dequant_scale_w_uq_qr)
    q2 = query.reshape(T, N, Hckv)
    qr2 = query_rope.reshape(T, N, Dr)
    if lp.fuse_grid:   # ---- 2 + 3 in one launch (CUDA, small T) ----
        _row_query_kernel[lp.fuse_grid](
            ws, xs if full else f32_dummy, wsdq if full else f32_dummy, wskv if full else f32_dummy,
            rmsnorm_gamma_cq, rmsnorm_gamma_ckv, smooth if smooth is not None else rmsnorm_gamma_cq, idx, kv_w, kr_w,
            qsckr if kr8 else rmsnorm_gamma_cq,
            cqn, cqs, weight_uq_qr, wsuq if qint8 else rmsnorm_gamma_cq, weight_uk, sin, cos,
            qsckv if kv8 else rmsnorm_gamma_cq, q2, qr2, dsq if q8 else cqs,
            T, CT, T * CT, Hcq, N, D, Dr, Hckv, nb * bs, bs,
            cqn.stride(0), cqn.stride(1), weight_uq_qr.stride(0), weight_uq_qr.stride(1),
            weight_uk.stride(0), weight_uk.stride(1), weight_uk.stride(2),
            sin.stride(0), sin.stride(1), cos.stride(0), cos.stride(1),
            q2.stride(0), q2.stride(1), qr2.stride(0), qr2.stride(1), idx.stride(0),
            kv_w.stride(0), kv_w.stride(1), kv_w.stride(3), kr_w.stride(0), kr_w.stride(1), kr_w.stride(3),
            s_qsckv, s_qsckr, float(rmsnorm_epsilon_cq), float(rmsnorm_epsilon_ckv), lp.query_grid[0],
            **lp.fuse_kw)
        return query, query_rope, dsq
    _row_kernel[lp.row_grid](
        ws, weight_uk, xs if full else f32_dummy, wsdq if full else f32_dummy, wskv if full else f32_dummy,
        rmsnorm_gamma_cq, rmsnorm_gamma_ckv, smooth if smooth is not None else rmsnorm_gamma_cq,
        sin, cos, idx, kv_w, kr_w, qsckv if kv8 else rmsnorm_gamma_cq, qsckr if kr8 else rmsnorm_gamma_cq,
        cqn, cqs, T, CT, T * CT, Hcq, Hckv, Dr, nb * bs, bs,
        sin.stride(0), sin.stride(1), cos.stride(0), cos.stride(1), idx.stride(0),
        kv_w.stride(0), kv_w.stride(1), kv_w.stride(3), kr_w.stride(0), kr_w.stride(1),
        kr_w.stride(3), s_qsckv, s_qsckr, cqn.stride(0), float(rmsnorm_epsilon_cq), float(rmsnorm_epsilon_ckv),
        lp.n_row, **lp.row_kw)
    if kv_w is not kv_cache:
        kv_cache.copy_(kv_w)
    if kr_w is not kr_cache:
        kr_cache.copy_(kr_w)

    # ---- 3. query GEMM + absorption + RoPE ----
    _query_kernel[lp.query_grid](
        cqn, cqs, weight_uq_qr, wsuq if qint8 else rmsnorm_gamma_cq, weight_uk, sin, cos,
        quant_scale_ckv if q8 else rmsnorm_gamma_cq, q2, qr2, dsq if q8 else cqs,
        T, Hcq, N, D, Dr, Hckv,
        cqn.stride(0), cqn.stride(1), weight_uq_qr.stride(0), weight_uq_qr.stride(1),
        weight_uk.stride(0), weight_uk.stride(1), weight_uk.stride(2),
        sin.stride(0), sin.stride(1), cos.stride(0), cos.stride(1),
        q2.stride(0), q2.stride(1), qr2.stride(0), qr2.stride(1),
        **lp.query_kw)
    return query, query_rope, dsq


# ==============================================================================================
# compile cases (one per kernel × launch config the launcher can pick)
# ==============================================================================================
_MODES = {  # name: (x/W_DQ int8, W_UQ_QR int8, kv int8, kr int8, query int8, smooth)
    "bf16": (False, False, False, False, False, False),
    "partial": (False, True, False, False, False, True),
    "partial_c8": (False, True, True, True, False, True),
    "a8w8": (True, True, False, False, False, False),
    "a8w8_c8": (True, True, True, False, True, False),
    "bf16_c8": (False, False, True, True, False, False),
}


def compile_cases(backend_key: str = "ascend", *, dt: str = "*bf16", He: int = 7168, Hcq: int = 1536,
                  D: int = 128, Dr: int = 64, Hckv: int = 512) -> list[dict]:
    """(kernel × launch config × mode) cases of one config table, for offline compile checks
    (``ascend_compile_cases`` for triton-ascend; the "cuda" table can be lowered for sm_90 the same way)."""
    cfg = _all_configs()[backend_key]
    # split counts as on the device: the config's core count, else an H200's 132 SMs (the CUDA table says 0 = ask)
    n_cores = int(cfg.get("cores", 0)) or 132
    cases: list[dict] = []
    i32, f32 = "i32", "*fp32"
    asc = backend_key == "ascend"
    # Triton makes an integer argument equal to 1 a constant at launch: on Ascend the launcher passes unit
    # inner strides (and the split count is 1 at these dims), so the cases declare them as such
    unit = ("constexpr" if asc else i32)

    def ones(sig: dict, ce: dict, names) -> None:
        for a in names:
            sig[a] = unit
            if asc:
                ce[a] = 1
    for int8 in (False, True):
        for bi, b in _reached(cfg["down"], int8):
            for even in (True, False):
                w = "*i8" if int8 else dt
                sig = {"x_ptr": w, "wdq_ptr": w, "wkv_ptr": w, "ws_ptr": "*i32" if int8 else f32, "T": i32, "He": i32,
                       "Hcq": i32, "Ckv": i32, "K_PER_SPLIT": i32, "SPLIT_K": i32, "s_xt": i32, "s_xk": i32,
                       "s_dq_k": i32, "s_dq_n": i32, "s_kv_k": i32, "s_kv_n": i32, "INT8": "constexpr",
                       "IEEE": "constexpr", "EVEN_K": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
                       "BLOCK_K": "constexpr"}
                sig["ASCEND"] = "constexpr"
                ce = dict(INT8=int8, IEEE=dt == "*fp32", EVEN_K=even, BLOCK_M=int(b["BLOCK_M"]),
                          BLOCK_N=int(b["BLOCK_N"]), BLOCK_K=int(b["BLOCK_K"]), ASCEND=asc)
                ones(sig, ce, ("s_xk", "s_dq_n", "s_kv_n"))
                splits = {plan(T, He, Hcq, 128, D, Dr, Hckv, torch.device("cpu"), backend_key=backend_key,
                               int8_down=int8, cores=n_cores)["down"]["SPLIT_K"]
                          for T in (1, 16, 32, 64, 128, 4096) if select(cfg["down"]["buckets"], T=T, int8=int8) is b}
                if splits == {1}:
                    ones(sig, ce, ("SPLIT_K",))
                cases.append(dict(name=f"mla_prolog_down_b{bi}_{'i8' if int8 else dt[1:]}_{'even' if even else 'tail'}",
                                  fn=_down_kernel, signature=sig, constexprs=ce))
    for mode, (x8, uq8, kv8, kr8, q8, smooth) in _MODES.items():
        sig = {"ws_ptr": "*i32" if x8 else f32, "dt_ptr": dt, "xs_ptr": f32, "wsdq_ptr": f32, "wskv_ptr": f32,
               "gq_ptr": dt, "gkv_ptr": dt, "smooth_ptr": f32, "sin_ptr": dt, "cos_ptr": dt, "idx_ptr": "*i64",
               "kv_ptr": "*i8" if kv8 else dt, "kr_ptr": "*i8" if kr8 else dt, "qsckv_ptr": f32, "qsckr_ptr": f32,
               "cqn_ptr": "*i8" if uq8 else dt, "cqs_ptr": f32}
        for a in ("T", "CT", "TCT", "Hcq", "Hckv", "Dr", "num_slots", "block_size", "s_sin_t", "s_sin_d",
                  "s_cos_t", "s_cos_d", "s_idx", "s_kv_b", "s_kv_s", "s_kv_c", "s_kr_b", "s_kr_s", "s_kr_c",
                  "s_qsckv", "s_qsckr", "s_cqn"):
            sig[a] = i32
        sig.update(eps_cq="fp32", eps_ckv="fp32", n_row=i32)
        for c in ("SPLIT_K", "INT8", "QUANT_CQ", "HAS_SMOOTH", "KV_INT8", "KR_INT8", "BLOCK_Q", "BLOCK_KV", "BLOCK_R",
                  "ASCEND", "PARTS"):
            sig[c] = "constexpr"
        # (SPLIT_K, PARTS) the launcher can pick for this mode (row buckets per T)
        variants = []
        for T in (1, 16, 32, 64, 128, 4096):
            pr = plan(T, He, Hcq, 128, D, Dr, Hckv, torch.device("cpu"), backend_key=backend_key, int8_down=x8,
                      cores=n_cores)
            v = (pr["down"]["SPLIT_K"], int(pr["row"]["PARTS"]))
            if v not in variants:
                variants.append(v)
        multi = len({v[1:] for v in variants}) > 1
        for sk, parts in variants:
            ce = dict(SPLIT_K=sk, INT8=x8, QUANT_CQ=uq8, HAS_SMOOTH=smooth, KV_INT8=kv8, KR_INT8=kr8,
                      BLOCK_Q=_p2(Hcq), BLOCK_KV=_p2(Hckv), BLOCK_R=_p2(Dr // 2), ASCEND=asc,
                      PARTS=parts)
            ones(sig, ce, ("s_sin_d", "s_cos_d", "s_idx", "s_kv_c", "s_kr_c", "s_qsckv", "s_qsckr"))
            tag = f"_parts{parts}" if multi else ""
            cases.append(dict(name=f"mla_prolog_row_{mode}_split{sk}{tag}_{dt[1:]}", fn=_row_kernel, signature=dict(sig),
                              constexprs=ce))
    for mode in ("bf16", "partial", "a8w8_c8"):
        _, uq8, _, _, q8, _ = _MODES[mode]
        for bi, b in _reached(cfg["query"], uq8):
            for even in (True, False):
                sig = {"a_ptr": "*i8" if uq8 else dt, "as_ptr": f32, "w_ptr": "*i8" if uq8 else dt,
                       "wsc_ptr": f32, "wuk_ptr": dt, "sin_ptr": dt, "cos_ptr": dt, "qsckv_ptr": f32,
                       "q_ptr": "*i8" if q8 else dt, "qr_ptr": dt, "dsq_ptr": f32}
                for a in ("T", "Hcq", "NH", "D", "Dr", "Hckv", "s_at", "s_ak", "s_wk", "s_wn", "s_uh", "s_ud",
                          "s_uc", "s_sin_t", "s_sin_d", "s_cos_t", "s_cos_d", "s_qt", "s_qh", "s_qrt", "s_qrh"):
                    sig[a] = i32
                for c in ("INT8", "Q8", "IEEE", "EVEN_K", "BLOCK_M", "BLOCK_K", "BLOCK_D", "BLOCK_R", "BLOCK_C",
                          "ASCEND", "PRE_UK", "EV_W"):
                    sig[c] = "constexpr"
                ce = dict(INT8=uq8, Q8=q8, IEEE=dt == "*fp32", EVEN_K=even, BLOCK_M=int(b["BLOCK_M"]),
                          BLOCK_K=int(b["BLOCK_K"]), BLOCK_D=_p2(D), BLOCK_R=_p2(Dr), BLOCK_C=int(b["BLOCK_C"]),
                          ASCEND=asc, PRE_UK=0 if asc or q8 else int(b.get("PRE_UK", 0)), EV_W="")
                ones(sig, ce, ("s_ak", "s_wn", "s_uc", "s_sin_d", "s_cos_d"))
                cases.append(dict(name=f"mla_prolog_query_b{bi}_{mode}_{dt[1:]}_{'even' if even else 'tail'}",
                                  fn=_query_kernel, signature=sig, constexprs=ce))
    return cases


# kernels the launcher never runs on an NPU (tools/ascend_check.py): {name: reason}
ASCEND_NOT_COMPILED = {
    "_row_query_kernel": "CUDA only: the fused row + query launch (config fuse_row_max_t) is planned only for the "
                         "'cuda' table; it relies on a CTA barrier after global stores that its own threads re-read",
    "_cq_rows": "CUDA only: the cq-row recompute of _row_query_kernel (the Ascend row kernel inlines the same "
                "_partial_sum / _row_cq calls)",
}


def ascend_compile_cases() -> list[dict]:
    """(kernel × Ascend launch config × mode) cases for the triton-ascend 3.2 + bishengir compile check
    (DeepSeek-V3 dims: He 7168, Hcq 1536, D 128, Dr 64, Hckv 512; bf16 activations)."""
    return compile_cases("ascend")


__all__ = ["mla_prolog", "mla_prolog_config", "supports_reason", "ascend_compile_cases", "compile_cases", "plan",
           "make_launch", "down_uses_gemv", "pack_weights"]
