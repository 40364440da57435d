"""Triton kernel for ``ds::amla``: split-KV paged MLA decode with AMLA power-of-two rescaling.

One source for CUDA (NVIDIA), Ascend (triton-ascend 3.2 language subset) and the CPU interpreter
(``TRITON_INTERPRET=1``). Two kernels:

* ``_amla_fwd_kernel`` — a work item is (request b, block of BLOCK_M query rows, KV split). Rows are
  ``r = j·N + h`` (MTP token j, head h) of one request, so every head of a request shares each K tile.
  The program walks its key range BLOCK_N keys at a time through the page table, loads the c_kv tile
  [BLOCK_N, 512] once and uses it for both products (S = q_nope·c_kvᵀ + q_rope·k_ropeᵀ, then O += P·c_kv),
  keeps the online-softmax state (m, l) and O in fp32 and writes either the final output (one split)
  or a partial (O normalised, lse in log2 units; an empty range writes lse = −inf, the "empty" marker).
* ``_amla_merge_kernel`` — combines the splits of one query row: splits with lse = −inf are excluded
  (their O is never read; no −inf − (−inf)); a row with no key at all gets out = 0, lse = −inf. With many
  splits and few rows (config ``merge.vec_min_splits`` / ``vec_max_rows``, CUDA) a work item is a block of
  ``merge.cols`` columns whose splits load as one [splits, cols] tile; otherwise a loop over the splits.

Rescale of the running output when the row maximum grows (constexpr ``RESCALE``):

* ``RESCALE=1`` (AMLA, arXiv 2509.25224 as CANN ships it): every block is referenced to a power of two
  2^n with n = rint(−m/ln 2); the remainder c = e^m·2^n ∈ [2^-½, 2^½] is rounded to the KV dtype (c16)
  and folded into P (P' = p·c16, cof = c32/c16), and O is rescaled by an int32 add of
  N = Δn·2²³ + rint(1.5·(cof_prev/cof − 1)·2²³) to its fp32 bit pattern (Δn clamped at −30; the
  1.5·(…) term compensates the rounding of c). CANN adds a +1e-6 bias before its truncating cast; we
  round to nearest instead, so a block that changes nothing gives N = 0 exactly (no 8-ULP drift per
  block, which at BLOCK_N = 32 and 32K keys would add up to a 1e-3 scale error) and can be skipped.
  Guard: the add is used only where the exponent field E satisfies E ≥ 2 − Δn and E ≤ 253 (the result
  stays a normal fp32); exact zeros, denormals and values that would underflow are multiplied by
  2^Δn·cof_prev/cof instead, so nothing is lost and nothing turns into ±inf/NaN (CANN instead zeroes
  |O| > 1e10 at the end, dropping a zero that later receives contributions). Final: out = O / (l·c16_last).
* ``RESCALE=0`` (plain FlashAttention): O ·= exp(m_old − m_new) in fp32; out = O / l.

With ``rescale_skip`` the whole-tile rescale is skipped when no row of the tile changed (N = 0 /
alpha = 1 for every row) — on a GPU both rescales are register ops of about equal cost.

Addressing and work split (constexprs, from the launch config):

* ``FLAT`` — every address is a scalar base + arange·stride: query/output row r = j·N + h at r·row_stride
  (the launcher copies q when its (S_q, N) rows are not evenly spaced) and one scalar page id per key tile
  (BLOCK_N divides the block size; key tiles start at multiples of BLOCK_N). triton-ascend lowers this to
  block copies; per-key page gathers (``FLAT=False``) become per-element loads there. Ascend / interpreter
  shrink BLOCK_N to the page when needed, CUDA falls back to the gathers (bit-identical results).
* ``PEEL`` — full key tiles (below every valid row's limit and the range end) run a body with no load mask and
  no logit select; the partial last tile and the causal diagonal the masked one (bit-identical results).
  With ``FLAT`` the page id of the next tile is loaded one tile ahead, so the tile loads are not "indirect"
  for Triton's pipeliner and num_stages = s keeps s − 1 KV tiles in flight (loaded in the same iteration,
  every tile got one buffer whose copy was issued only after the previous tile's P·V).
* ``FGUARD`` — the AMLA guard as fp32 compares on a select of O (Ascend: bishengir spreads an integer op on
  the bitcast of a loop-carried MMA accumulator over 32-byte blocks, 8× the unified buffer); bit-identical.

No host synchronisation on the launch path: the split count comes from shapes (B, N, S_q and
max_blocks·block_size as an upper bound on L), each program reads its own L from ``seq_lens`` on the
device and splits it evenly; the op is CUDA-graph and torch.compile(fullgraph=True) safe. In the batch-invariant
mode (``INV_CHUNK`` > 0) a program instead takes chunk ``split`` of the request's own chunking
(:func:`invariant_chunk_len`) and the merge runs ``ORDERED`` (docs/ops/amla.md, "Batch-invariant mode").

Launch tables: ops/triton/configs/<backend>/amla.json, one table per backend ("cuda" NVIDIA, "ascend" 910B, "interpreter" CPU),
each with a "fwd" and a "merge" section in the grammar of ops/triton/_common.py (shared keys, then ``buckets`` tried
in order on ``rows`` = S_q·N, first match wins, the last matches every shape). "fwd" keys: ``cores`` (0 = the
device's SM count), ``vector_cores`` (merge grid cap, persistent tables), ``persistent`` (grid = min(work,
cores·programs_per_core) with a loop over work items), ``fill`` / ``max_splits`` / ``min_keys_per_split`` (split
count, :func:`launch_plan`), ``rescale_skip``, ``amla_round_c`` / ``lazy`` (the rescale variant,
:func:`amla_variant`), ``flat`` / ``flat_shrink`` / ``float_guard`` / ``peel`` (the constexprs above); a bucket's
config: ``BLOCK_M``, ``BLOCK_N``, ``num_warps``, ``num_stages``, ``programs_per_core``, ``q_in_loop`` (re-read the
queries every key tile) and overrides of ``flat`` / ``peel`` / ``rescale_skip``. "merge": ``num_warps``,
``vec_min_splits`` / ``vec_max_rows`` (the vectorised merge from that many splits, up to that many rows in all),
``cols`` (columns per work item of the vectorised merge).
"""
from __future__ import annotations

import contextlib
import functools
import math
from typing import Callable, Iterator

import torch
import triton
import triton.language as tl

from .._library import batch_invariant_enabled
from ._common import device_cores, load_configs as _load_configs, next_power_of_2 as _np2, unit_inner as _unit_inner

__all__ = ["amla", "amla_variant", "supports_reason", "ascend_compile_cases", "compile_cases", "load_configs",
           "section", "bucket_rows", "tile_for", "launch_plan", "launch_plan_for", "output_allocator", "pow2_rescale",
           "invariant_chunking", "invariant_chunk_len", "BATCH_INVARIANT_POLICIES", "BATCH_INVARIANT_POLICY"]

_LN2 = math.log(2.0)
_LOG2E = 1.0 / _LN2


# ==============================================================================================
# kernels
# ==============================================================================================
@triton.jit
def pow2_rescale(acc, n_add, dn, fac, FGUARD: tl.constexpr):
    """AMLA rescale of acc [BM, DC] fp32: add n_add [BM] int32 to the bit pattern where that is exact
    exponent arithmetic (E ≥ 2 − dn and E ≤ 253), else multiply by fac [BM] = 2^dn·cof_prev/cof.

    FGUARD=False tests the exponent field E of the bits; FGUARD=True (Ascend) tests the same condition in
    fp32, 2^(E−127) ≥ 2^(−125−dn) and < 2^127 (the bound built exactly from its bits), and bitcasts a select
    of acc rather than acc itself: bishengir lays an integer op on the bitcast of a loop-carried MMA
    accumulator out one element per 32-byte block (8× the UB), which a fresh value avoids. Both give
    bit-identical results."""
    if FGUARD:
        a = tl.abs(acc)
        lo = ((2 - dn.to(tl.int32)) << 23).to(tl.float32, bitcast=True)     # exactly 2^(−125−dn)
        safe = (a >= lo[:, None]) & (a < 1.7014118346046923e38)             # 2^127
        sel = tl.where(safe, acc, 0.0)
        shifted = (sel.to(tl.int32, bitcast=True) + n_add[:, None]).to(tl.float32, bitcast=True)
    else:
        bits = acc.to(tl.int32, bitcast=True)
        mag = bits & 0x7FFFFFFF                 # E·2²³ + mantissa: E ≥ e ⟺ mag ≥ e·2²³, E ≤ 253 ⟺ mag < 254·2²³
        safe = (mag >= ((2 - dn.to(tl.int32)) << 23)[:, None]) & (mag < 2130706432)
        shifted = (bits + n_add[:, None]).to(tl.float32, bitcast=True)
    return tl.where(safe, shifted, acc * fac[:, None])


@triton.jit
def _kv_block(k0, end, lim, acc0, acc1, acc2, acc3, m_i, l_i, n_i, cof_i, c_last, m_r, pg_nxt,
              qa, qb, qc, qd, qr, qn, qrp, row_ok,
              kv_ptr, kr_ptr, bt_row, skv_p, skv_s, skr_p, skr_s, scale, NUM_PAGES,
              D_V: tl.constexpr, D_R: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
              RESCALE: tl.constexpr, ROUND_C: tl.constexpr, LAZY: tl.constexpr, SKIP: tl.constexpr,
              Q_IN_LOOP: tl.constexpr, FLAT: tl.constexpr, FGUARD: tl.constexpr, MASKED: tl.constexpr):
    """One key tile [k0, k0 + BLOCK_N) of the online softmax: loads c_kv / k_rope once, S = Q·Kᵀ, rescale, O += P·V.
    MASKED=False (a full tile: k0 + BLOCK_N ≤ every valid row's limit and ≤ end): no load mask, no logit select.
    MASKED=True: keys ≥ end read as 0 and every logit at or past its row's limit (causal) is −inf.
    pg_nxt: the page id of this tile (FLAT), loaded one tile ahead so the tile's loads do not wait for it
    (Triton then multi-buffers them with num_stages ≥ 3). Returns the updated state and the next page id."""
    NEG_INF: tl.constexpr = float("-inf")
    LOG2E: tl.constexpr = 1.4426950408889634
    TWO23: tl.constexpr = 8388608.0
    DC: tl.constexpr = D_V // 4
    dc = tl.arange(0, DC)
    dr = tl.arange(0, D_R)
    p_dtype = kv_ptr.dtype.element_ty
    kpos = k0 + tl.arange(0, BLOCK_N)
    kmask = kpos < end                                      # only read when MASKED
    if FLAT:
        # k0 is a multiple of BLOCK_N and BLOCK_N divides PAGE: the whole tile lies in one page, one
        # scalar page id (an out-of-range id, a caller error, is redirected to page 0, so nothing outside the cache
        # is read ...
        pg_ok = (pg_nxt >= 0) & (pg_nxt < NUM_PAGES)
        pg = tl.where(pg_ok, pg_nxt, 0).to(tl.int64)
        scale = tl.where(pg_ok, scale, float("nan"))       # ... and its logits are NaN (unchecked caller errors)
        pg_nxt = tl.load(bt_row + (k0 + BLOCK_N) // PAGE, mask=k0 + BLOCK_N < end, other=0)
        # the tile's first slot goes into the scalar base, so the per-key offsets are loop-invariant
        slot0 = k0 % PAGE
        slot = tl.arange(0, BLOCK_N)
        kb = kv_ptr + (pg * skv_p + slot0 * skv_s) + (slot * skv_s)[:, None]
        krp = kr_ptr + (pg * skr_p + slot0 * skr_s) + (slot * skr_s)[:, None] + dr[None, :]
    else:
        # page id per key (masked: entries past ceil(L/PAGE) are never read; an out-of-range id, a caller
        # error, is redirected to page 0 rather than read out of bounds, and its logits are NaN), 64-bit offsets
        if MASKED:
            page = tl.load(bt_row + kpos // PAGE, mask=kmask, other=0)
        else:
            page = tl.load(bt_row + kpos // PAGE)
        page_ok = (page >= 0) & (page < NUM_PAGES)
        page = tl.where(page_ok, page, 0).to(tl.int64)
        slot = (kpos % PAGE).to(tl.int64)
        kb = kv_ptr + (page * skv_p + slot * skv_s)[:, None]
        krp = kr_ptr + (page * skr_p + slot * skr_s)[:, None] + dr[None, :]
    if MASKED:
        # keys past the range read as 0 (never NaN: unused slots are never loaded), the logits are masked below
        k_a = tl.load(kb + dc[None, :], mask=kmask[:, None], other=0.0)
        k_b = tl.load(kb + DC + dc[None, :], mask=kmask[:, None], other=0.0)
        k_c = tl.load(kb + 2 * DC + dc[None, :], mask=kmask[:, None], other=0.0)
        k_d = tl.load(kb + 3 * DC + dc[None, :], mask=kmask[:, None], other=0.0)
        kr = tl.load(krp, mask=kmask[:, None], other=0.0)
    else:
        # a full tile: every key is below every row's limit, no mask at all
        k_a = tl.load(kb + dc[None, :])
        k_b = tl.load(kb + DC + dc[None, :])
        k_c = tl.load(kb + 2 * DC + dc[None, :])
        k_d = tl.load(kb + 3 * DC + dc[None, :])
        kr = tl.load(krp)
    if Q_IN_LOOP:
        qm = row_ok[:, None] & (k0 >= 0)                   # depends on k0: keeps the load in the loop
        qa = tl.load(qn + dc[None, :], mask=qm, other=0.0)
        qb = tl.load(qn + DC + dc[None, :], mask=qm, other=0.0)
        qc = tl.load(qn + 2 * DC + dc[None, :], mask=qm, other=0.0)
        qd = tl.load(qn + 3 * DC + dc[None, :], mask=qm, other=0.0)
        qr = tl.load(qrp, mask=qm, other=0.0)

    # S = scale·(q_nope·c_kvᵀ + q_rope·k_ropeᵀ): five short tensor-core chains summed in IEEE fp32
    # (the MMA accumulator truncates; one 576-long chain biases the logits by ~1e-5 at DeepSeek scales).
    # Pairwise ((a + b) + (c + d)) + rope. Keep the per-chain `* scale`: Triton
    # folds dot(a, b, 0) + x into dot(a, b, x), so unscaled chains would be accumulated in the MMA again (measured
    # on the H200: lse 1.3e-5 off fp64)
    s = (tl.dot(qa, tl.trans(k_a)) * scale + tl.dot(qb, tl.trans(k_b)) * scale) + \
        (tl.dot(qc, tl.trans(k_c)) * scale + tl.dot(qd, tl.trans(k_d)) * scale)
    s = s + tl.dot(qr, tl.trans(kr)) * scale
    if not FLAT:
        s = tl.where(page_ok[None, :], s, float("nan"))    # keys on no page (unchecked caller errors)
    if MASKED:
        vis = (kpos[None, :] < lim[:, None]) & kmask[None, :]
        s = tl.where(vis, s, NEG_INF)                       # select, never multiply by a mask

    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_use = tl.where(m_new == NEG_INF, 0.0, m_new)          # rows with no key yet: no −inf − (−inf)
    mL = m_use * LOG2E
    fresh = m_i == NEG_INF                                  # the row had no key before this block
    if RESCALE == 1:
        # AMLA: reference 2^n, n = rint(−m/ln2), re-chosen once m/ln2 + n > LAZY (LAZY < 0: every block)
        renew = (mL + n_i > LAZY) | fresh
        n_new = tl.where(renew, tl.floor(0.5 - mL), n_i)
        dn = tl.where(fresh, 0.0, n_new - n_i)
        dn = tl.maximum(dn, -30.0)                          # shift clamp
        dn_i = dn.to(tl.int32)
        pow2 = ((dn_i + 127) << 23).to(tl.float32, bitcast=True)   # exactly 2^dn
        if ROUND_C:
            c32 = tl.exp2(mL + n_new)                       # c = e^m·2^n
            c_r = c32.to(p_dtype).to(tl.float32)            # CANN rounds c to the KV dtype ...
            cof = c32 / c_r                                 # ... and compensates the rounding below
            ratio = cof_i / cof
            comp = 1.5 * (ratio - 1.0)                      # compensation term
            n_add = dn_i * 8388608 + tl.floor(comp * TWO23 + 0.5).to(tl.int32)
            fac = pow2 * ratio                              # the factor the add stands for
        else:
            # c unrounded: cof = c/c = 1 exactly (c = 2^(m/ln2 + n), finite and normal: m/ln2 + n lies in
            # (-0.5, max(0.5, LAZY)]), so the compensation is 0 and the add is the exponent shift alone (two
            # divisions fewer; bit-identical under the interpreter's IEEE division, and on the GPU it drops the
            # ulp-level error of the approximate c/c); c only enters lse, so it is computed once after the last
            # tile (see _amla_tile)
            cof = cof_i
            n_add = dn_i * 8388608
            fac = pow2
        if SKIP:
            if tl.max(tl.abs(n_add), axis=0) != 0:
                acc0 = pow2_rescale(acc0, n_add, dn, fac, FGUARD)
                acc1 = pow2_rescale(acc1, n_add, dn, fac, FGUARD)
                acc2 = pow2_rescale(acc2, n_add, dn, fac, FGUARD)
                acc3 = pow2_rescale(acc3, n_add, dn, fac, FGUARD)
        else:
            acc0 = pow2_rescale(acc0, n_add, dn, fac, FGUARD)
            acc1 = pow2_rescale(acc1, n_add, dn, fac, FGUARD)
            acc2 = pow2_rescale(acc2, n_add, dn, fac, FGUARD)
            acc3 = pow2_rescale(acc3, n_add, dn, fac, FGUARD)
        # l in the exact power-of-two reference, Σ e^s·2^n (rescaled by powers of two only; the
        # compensated cof enters once, at the end)
        if ROUND_C:
            p = tl.exp2(s * LOG2E - mL[:, None])            # e^(s − m); masked keys → 0
            l_i = l_i * pow2 + c32 * tl.sum(p, axis=1)
            p = p * c_r[:, None]                            # P' = e^s·2^n/cof: the remainder folded into P
        else:
            # c_r = c32 = e^m·2^n: P' = e^(s−m)·c = 2^(s·log2e + n), one FFMA + EX2 per logit
            p = tl.exp2(s * LOG2E + n_new[:, None])
            l_i = l_i * pow2 + tl.sum(p, axis=1)
        n_i = n_new
        cof_i = cof
        if ROUND_C:
            c_last = c32
    else:
        # FlashAttention: reference e^m_ref, moved to the running max once it is LAZY bits above (LAZY < 0:
        # every time the max grows), O and l multiplied by e^(m_ref_old − m_ref_new)
        renew = (mL - m_r * LOG2E > LAZY) | fresh
        m_r_new = tl.where(renew, m_use, m_r)
        alpha = tl.exp2(tl.where(fresh, NEG_INF, (m_r - m_r_new) * LOG2E))   # 0 for a fresh row
        p = tl.exp2(s * LOG2E - (m_r_new * LOG2E)[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if SKIP:
            if tl.min(alpha, axis=0) != 1.0:
                acc0 = acc0 * alpha[:, None]
                acc1 = acc1 * alpha[:, None]
                acc2 = acc2 * alpha[:, None]
                acc3 = acc3 * alpha[:, None]
        else:
            acc0 = acc0 * alpha[:, None]
            acc1 = acc1 * alpha[:, None]
            acc2 = acc2 * alpha[:, None]
            acc3 = acc3 * alpha[:, None]
        m_r = m_r_new
    pb = p.to(p_dtype)
    acc0 = tl.dot(pb, k_a, acc0)                            # V is c_kv itself: the same tiles
    acc1 = tl.dot(pb, k_b, acc1)
    acc2 = tl.dot(pb, k_c, acc2)
    acc3 = tl.dot(pb, k_d, acc3)
    m_i = m_new
    return acc0, acc1, acc2, acc3, m_i, l_i, n_i, cof_i, c_last, m_r, pg_nxt


@triton.jit
def _amla_tile(work, q_nope_ptr, q_rope_ptr, kv_ptr, kr_ptr, bt_ptr, sl_ptr, out_ptr, lse_ptr,
               opart_ptr, lsepart_ptr,
               sqn_b, sqn_s, sqn_h, sqr_b, sqr_s, sqr_h,
               skv_p, skv_s, skr_p, skr_s, sbt_b,
               so_b, so_s, so_h, sl_b, sl_s, sl_h,
               scale, N, S_Q, ROWS, MAX_KEYS, NUM_PAGES, NUM_M, NUM_SPLITS,
               D_V: tl.constexpr, D_R: tl.constexpr, PAGE: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
               RESCALE: tl.constexpr, ROUND_C: tl.constexpr, LAZY: tl.constexpr, SKIP: tl.constexpr,
               SPLIT: tl.constexpr, Q_IN_LOOP: tl.constexpr, FLAT: tl.constexpr,
               FGUARD: tl.constexpr, PEEL: tl.constexpr, INV_CHUNK: tl.constexpr, INV_MAX_CHUNKS: tl.constexpr,
               INV_UNIT: tl.constexpr):
    NEG_INF: tl.constexpr = float("-inf")
    LOG2E: tl.constexpr = 1.4426950408889634
    DC: tl.constexpr = D_V // 4            # the 512 latent columns in 4 chunks (see QKᵀ below)
    # work → (m block fastest, then split, then request): the programs that share a K tile run together
    mb = work % NUM_M
    rest = work // NUM_M
    split = rest % NUM_SPLITS
    b = rest // NUM_SPLITS
    b64 = b.to(tl.int64)

    rows = mb * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < ROWS
    tok = rows // N
    dc = tl.arange(0, DC)
    dr = tl.arange(0, D_R)

    # this request's keys (never more than the block table can address)
    L = tl.load(sl_ptr + b)
    bad_len = (L < 0) | (L > MAX_KEYS)        # a caller error: read nothing, every row of the request NaN
    L = tl.where(bad_len, 0, L)
    if CAUSAL:
        lim = L - S_Q + tok + 1               # token j sees keys [0, L − S_q + j]
    else:
        lim = L + tok * 0
    lim = tl.where(row_ok, tl.minimum(lim, L), 0)
    hi = tl.max(lim, axis=0)                  # keys any row of this block needs
    if INV_CHUNK > 0:
        # batch-invariant mode: the chunk length follows from L and constants only (docs/ops/amla.md); splits
        # past the request's last chunk are empty (lse −inf), whatever NUM_SPLITS the batch launched
        split_len = tl.maximum(tl.cdiv(tl.cdiv(L, INV_MAX_CHUNKS), INV_UNIT) * INV_UNIT, INV_CHUNK)
    else:
        split_len = tl.cdiv(tl.cdiv(L, NUM_SPLITS), BLOCK_N) * BLOCK_N
    start = split * split_len
    end = tl.minimum(start + split_len, hi)

    # queries: q_nope as 4 column chunks [BM, 128] and q_rope [BM, 64]; loaded once (Q_IN_LOOP=False: the
    # wgmma tiles read them from shared memory) or re-read every block from L1/L2 (Q_IN_LOOP=True: small
    # BLOCK_M on mma.sync would otherwise pin [BM, 576] in registers in every warp).
    # FLAT: row r of a request at r·sqn_h (the launcher guarantees sqn_s = N·sqn_h), so every address is
    # scalar base + arange·stride — the form triton-ascend lowers to block copies (no per-element gathers)
    if FLAT:
        qn = q_nope_ptr + b64 * sqn_b + (rows * sqn_h)[:, None]
        qrp = q_rope_ptr + b64 * sqr_b + (rows * sqr_h)[:, None] + dr[None, :]
    else:
        head = rows % N
        qn = q_nope_ptr + (b64 * sqn_b + tok.to(tl.int64) * sqn_s + head.to(tl.int64) * sqn_h)[:, None]
        qr_off = b64 * sqr_b + tok.to(tl.int64) * sqr_s + head.to(tl.int64) * sqr_h
        qrp = q_rope_ptr + qr_off[:, None] + dr[None, :]
    if not Q_IN_LOOP:
        qa = tl.load(qn + dc[None, :], mask=row_ok[:, None], other=0.0)
        qb = tl.load(qn + DC + dc[None, :], mask=row_ok[:, None], other=0.0)
        qc = tl.load(qn + 2 * DC + dc[None, :], mask=row_ok[:, None], other=0.0)
        qd = tl.load(qn + 3 * DC + dc[None, :], mask=row_ok[:, None], other=0.0)
        qr = tl.load(qrp, mask=row_ok[:, None], other=0.0)

    m_i = tl.full((BLOCK_M,), NEG_INF, tl.float32)      # running max of the logits (natural units)
    l_i = tl.zeros((BLOCK_M,), tl.float32)              # running Σ e^s, in the reference (2^n or e^-m_r)
    acc0 = tl.zeros((BLOCK_M, DC), tl.float32)
    acc1 = tl.zeros((BLOCK_M, DC), tl.float32)
    acc2 = tl.zeros((BLOCK_M, DC), tl.float32)
    acc3 = tl.zeros((BLOCK_M, DC), tl.float32)
    n_i = tl.zeros((BLOCK_M,), tl.float32)              # AMLA: O is referenced to 2^n_i
    cof_i = tl.full((BLOCK_M,), 1.0, tl.float32)
    c_last = tl.full((BLOCK_M,), 1.0, tl.float32)
    m_r = tl.zeros((BLOCK_M,), tl.float32)              # multiply: O and l are referenced to e^m_r
    bt_row = bt_ptr + b64 * sbt_b
    pg_nxt = tl.load(bt_row + start // PAGE, mask=start < end, other=0)

    # full tiles (every key visible to every valid row of the block) run mask-free; the rest (the last partial
    # tile, the causal diagonal) take the masked body. start is a multiple of BLOCK_N.
    if PEEL:
        lo = tl.min(tl.where(row_ok, lim, MAX_KEYS), axis=0)   # the smallest limit of a valid row
        full_end = start + tl.maximum(tl.minimum(lo, end) - start, 0) // BLOCK_N * BLOCK_N
    else:
        full_end = start
    if Q_IN_LOOP:
        qa = 0.0
        qb = 0.0
        qc = 0.0
        qd = 0.0
        qr = 0.0
    for k0 in range(start, full_end, BLOCK_N):
        acc0, acc1, acc2, acc3, m_i, l_i, n_i, cof_i, c_last, m_r, pg_nxt = _kv_block(
            k0, end, lim, acc0, acc1, acc2, acc3, m_i, l_i, n_i, cof_i, c_last, m_r, pg_nxt,
            qa, qb, qc, qd, qr, qn, qrp, row_ok,
            kv_ptr, kr_ptr, bt_row, skv_p, skv_s, skr_p, skr_s, scale, NUM_PAGES,
            D_V, D_R, PAGE, BLOCK_N, RESCALE, ROUND_C, LAZY, SKIP, Q_IN_LOOP, FLAT, FGUARD, False)
    for k0 in range(full_end, end, BLOCK_N):
        acc0, acc1, acc2, acc3, m_i, l_i, n_i, cof_i, c_last, m_r, pg_nxt = _kv_block(
            k0, end, lim, acc0, acc1, acc2, acc3, m_i, l_i, n_i, cof_i, c_last, m_r, pg_nxt,
            qa, qb, qc, qd, qr, qn, qrp, row_ok,
            kv_ptr, kr_ptr, bt_row, skv_p, skv_s, skr_p, skr_s, scale, NUM_PAGES,
            D_V, D_R, PAGE, BLOCK_N, RESCALE, ROUND_C, LAZY, SKIP, Q_IN_LOOP, FLAT, FGUARD, True)

    # l = NaN (a NaN or +inf logit: NaN in q / c_kv, or inf) is not an empty row: out and lse become NaN, as in
    # the reference (the max reductions drop NaN, so a row of NaN logits would otherwise look key-less)
    has = (l_i > 0.0) | (l_i != l_i)
    lsafe = tl.where(has, l_i, 1.0)
    if RESCALE == 1:
        if not ROUND_C:
            # c = e^m·2^n of the last tile, as _kv_block's rounded path computes it every tile
            c_last = tl.exp2(tl.where(m_i == NEG_INF, 0.0, m_i) * LOG2E + n_i)
        inv = cof_i / lsafe                                     # O carries 2^n/cof, l carries 2^n
        lse = m_i + tl.log(lsafe / c_last)                      # l = c32·Σe^(s−m)
    else:
        inv = 1.0 / lsafe
        lse = m_r + tl.log(lsafe)
    lse = tl.where(has, lse, NEG_INF)
    inv = tl.where(has, inv, 0.0)                               # a row with no key: O is 0, out = 0
    lse = tl.where(bad_len, float("nan"), lse)
    inv = tl.where(bad_len, float("nan"), inv)
    if SPLIT:
        pbase = (b64 * NUM_SPLITS + split) * ROWS
        tl.store(lsepart_ptr + pbase + rows, lse, mask=row_ok)
        po = opart_ptr + pbase * D_V + (rows * D_V)[:, None]
        if FLAT:
            omask = row_ok[:, None]                             # empty rows store 0 (never read by the merge)
        else:
            omask = (row_ok & has)[:, None]
        tl.store(po + dc[None, :], acc0 * inv[:, None], mask=omask)
        tl.store(po + DC + dc[None, :], acc1 * inv[:, None], mask=omask)
        tl.store(po + 2 * DC + dc[None, :], acc2 * inv[:, None], mask=omask)
        tl.store(po + 3 * DC + dc[None, :], acc3 * inv[:, None], mask=omask)
    else:
        odt = out_ptr.dtype.element_ty
        if FLAT:
            ob = out_ptr + b64 * so_b + (rows * so_h)[:, None]
            l_ptr = lse_ptr + b64 * sl_b + rows * sl_h
        else:
            head = rows % N
            ob = out_ptr + (b64 * so_b + tok.to(tl.int64) * so_s + head.to(tl.int64) * so_h)[:, None]
            l_ptr = lse_ptr + (b64 * sl_b + tok.to(tl.int64) * sl_s + head.to(tl.int64) * sl_h)
        tl.store(ob + dc[None, :], (acc0 * inv[:, None]).to(odt), mask=row_ok[:, None])
        tl.store(ob + DC + dc[None, :], (acc1 * inv[:, None]).to(odt), mask=row_ok[:, None])
        tl.store(ob + 2 * DC + dc[None, :], (acc2 * inv[:, None]).to(odt), mask=row_ok[:, None])
        tl.store(ob + 3 * DC + dc[None, :], (acc3 * inv[:, None]).to(odt), mask=row_ok[:, None])
        tl.store(l_ptr, lse, mask=row_ok)


# runtime sizes are not specialised (no recompiles per batch / split count / table width); strides are
_NO_SPEC_FWD = ["sbt_b", "N", "S_Q", "ROWS", "MAX_KEYS", "NUM_PAGES", "NUM_M", "NUM_SPLITS", "TOTAL_WORK"]
_NO_SPEC_MERGE = ["N", "ROWS", "NUM_SPLITS", "TOTAL_WORK"]


@triton.jit(do_not_specialize=_NO_SPEC_FWD)
def _amla_fwd_kernel(q_nope_ptr, q_rope_ptr, kv_ptr, kr_ptr, bt_ptr, sl_ptr, out_ptr, lse_ptr,
                     opart_ptr, lsepart_ptr,
                     sqn_b, sqn_s, sqn_h, sqr_b, sqr_s, sqr_h,
                     skv_p, skv_s, skr_p, skr_s, sbt_b,
                     so_b, so_s, so_h, sl_b, sl_s, sl_h,
                     scale, N, S_Q, ROWS, MAX_KEYS, NUM_PAGES, NUM_M, NUM_SPLITS, TOTAL_WORK,
                     D_V: tl.constexpr, D_R: tl.constexpr, PAGE: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                     RESCALE: tl.constexpr, ROUND_C: tl.constexpr, LAZY: tl.constexpr, SKIP: tl.constexpr,
                     SPLIT: tl.constexpr, Q_IN_LOOP: tl.constexpr, PERSISTENT: tl.constexpr,
                     FLAT: tl.constexpr, FGUARD: tl.constexpr, PEEL: tl.constexpr,
                     INV_CHUNK: tl.constexpr = 0, INV_MAX_CHUNKS: tl.constexpr = 1, INV_UNIT: tl.constexpr = 1):
    """Partial / final MLA decode for work items (see module docstring); scale = softmax_scale (fp32).
    INV_CHUNK > 0 (batch-invariant mode): a request of L keys is cut into chunks of
    max(INV_CHUNK, ceil(ceil(L / INV_MAX_CHUNKS) / INV_UNIT)·INV_UNIT) keys, split s taking chunk s."""
    pid = tl.program_id(0)
    if PERSISTENT:
        for work in range(pid, TOTAL_WORK, tl.num_programs(0)):
            _amla_tile(work, q_nope_ptr, q_rope_ptr, kv_ptr, kr_ptr, bt_ptr, sl_ptr, out_ptr, lse_ptr,
                       opart_ptr, lsepart_ptr, sqn_b, sqn_s, sqn_h, sqr_b, sqr_s, sqr_h,
                       skv_p, skv_s, skr_p, skr_s, sbt_b, so_b, so_s, so_h, sl_b, sl_s, sl_h,
                       scale, N, S_Q, ROWS, MAX_KEYS, NUM_PAGES, NUM_M, NUM_SPLITS,
                       D_V, D_R, PAGE, BLOCK_M, BLOCK_N, CAUSAL, RESCALE, ROUND_C, LAZY, SKIP, SPLIT, Q_IN_LOOP,
                       FLAT, FGUARD, PEEL, INV_CHUNK, INV_MAX_CHUNKS, INV_UNIT)
    else:
        _amla_tile(pid, q_nope_ptr, q_rope_ptr, kv_ptr, kr_ptr, bt_ptr, sl_ptr, out_ptr, lse_ptr,
                   opart_ptr, lsepart_ptr, sqn_b, sqn_s, sqn_h, sqr_b, sqr_s, sqr_h,
                   skv_p, skv_s, skr_p, skr_s, sbt_b, so_b, so_s, so_h, sl_b, sl_s, sl_h,
                   scale, N, S_Q, ROWS, MAX_KEYS, NUM_PAGES, NUM_M, NUM_SPLITS,
                   D_V, D_R, PAGE, BLOCK_M, BLOCK_N, CAUSAL, RESCALE, ROUND_C, LAZY, SKIP, SPLIT, Q_IN_LOOP,
                   FLAT, FGUARD, PEEL, INV_CHUNK, INV_MAX_CHUNKS, INV_UNIT)


@triton.jit
def _amla_merge_row(work, opart_ptr, lsepart_ptr, out_ptr, lse_ptr, so_b, so_s, so_h, sl_b, sl_s, sl_h,
                    N, ROWS, NUM_SPLITS, D_V: tl.constexpr, SPLITS_P2: tl.constexpr, DV_BLOCK: tl.constexpr,
                    VEC: tl.constexpr, ORDERED: tl.constexpr):
    """Work item = (query row, block of DV_BLOCK output columns). VEC (CUDA): every split's O block is loaded at
    once as a [SPLITS_P2, DV_BLOCK] tile and summed along the splits (one L2 round trip per program); else a loop
    over the splits (Ascend: its masks are the `dv < bound` form triton-ascend lowers to block copies).
    ORDERED (batch-invariant mode, loop merge): the weights are also summed in split order, the largest split's
    weight is exactly 1, and a row with one live split gets that split's O and lse unchanged, so nothing depends
    on how many (empty) splits the batch launched."""
    NEG_INF: tl.constexpr = float("-inf")
    LOG2E: tl.constexpr = 1.4426950408889634
    NCB: tl.constexpr = D_V // DV_BLOCK
    cb = work % NCB
    row = work // NCB
    r = row % ROWS
    b = (row // ROWS).to(tl.int64)
    sp = tl.arange(0, SPLITS_P2)
    base = b * NUM_SPLITS * ROWS + r
    lse_s = tl.load(lsepart_ptr + base + sp * ROWS, mask=sp < NUM_SPLITS, other=NEG_INF)
    mx = tl.max(lse_s, axis=0)
    mx = tl.where(mx == NEG_INF, 0.0, mx)
    w = tl.where(lse_s == NEG_INF, 0.0, tl.exp2((lse_s - mx) * LOG2E))
    den = tl.sum(w, axis=0)
    dv = cb * DV_BLOCK + tl.arange(0, DV_BLOCK)
    if VEC:
        # empty splits (lse −inf, and the padding past NUM_SPLITS) are masked: their O is never read
        live = (sp < NUM_SPLITS) & (lse_s != NEG_INF)
        o_s = tl.load(opart_ptr + ((base + sp * ROWS) * D_V)[:, None] + dv[None, :], mask=live[:, None], other=0.0)
        acc = tl.sum(w[:, None] * o_s, axis=0)
    else:
        acc = tl.zeros((DV_BLOCK,), tl.float32)
        den_s = den * 0.0
        for s in range(0, NUM_SPLITS):
            ls = tl.load(lsepart_ptr + base + s * ROWS)
            live = ls != NEG_INF
            if ORDERED:
                ws = tl.where(live, tl.where(ls == mx, 1.0, tl.exp2((ls - mx) * LOG2E)), 0.0)
                den_s += ws
            else:
                ws = tl.where(live, tl.exp2((ls - mx) * LOG2E), 0.0)
            # an empty split's O is never read: the mask is `dv < bound` with a scalar bound (0 for an empty split),
            # the form triton-ascend lowers to a block copy of `bound` elements
            n_live = tl.where(live, (cb + 1) * DV_BLOCK, 0)
            o = tl.load(opart_ptr + (base + s * ROWS) * D_V + dv, mask=dv < n_live, other=0.0)
            acc += ws * o
    if ORDERED:
        den = den_s
    has = (den > 0.0) | (den != den)                # a NaN split's lse makes den NaN: out and lse NaN, never empty
    dsafe = tl.where(has, den, 1.0)
    if ORDERED:
        o = tl.where(has, tl.where(dsafe == 1.0, acc, acc / dsafe), 0.0)
        lse = tl.where(has, tl.where(dsafe == 1.0, mx, mx + tl.log(dsafe)), NEG_INF)
    else:
        o = tl.where(has, acc / dsafe, 0.0)
        lse = tl.where(has, mx + tl.log(dsafe), NEG_INF)
    tok = r // N
    head = r % N
    tl.store(out_ptr + b * so_b + tok * so_s + head * so_h + dv, o.to(out_ptr.dtype.element_ty))
    tl.store(lse_ptr + b * sl_b + tok * sl_s + head * sl_h, lse, mask=cb == 0)


@triton.jit(do_not_specialize=_NO_SPEC_MERGE)
def _amla_merge_kernel(opart_ptr, lsepart_ptr, out_ptr, lse_ptr, so_b, so_s, so_h, sl_b, sl_s, sl_h,
                       N, ROWS, NUM_SPLITS, TOTAL_WORK,
                       D_V: tl.constexpr, SPLITS_P2: tl.constexpr, PERSISTENT: tl.constexpr,
                       DV_BLOCK: tl.constexpr = 512, VEC: tl.constexpr = False, ORDERED: tl.constexpr = False):
    """Merge the KV splits of each query row (one row per work item); empty splits (lse −inf) excluded."""
    pid = tl.program_id(0)
    if PERSISTENT:
        for work in range(pid, TOTAL_WORK, tl.num_programs(0)):
            _amla_merge_row(work, opart_ptr, lsepart_ptr, out_ptr, lse_ptr, so_b, so_s, so_h, sl_b, sl_s, sl_h,
                            N, ROWS, NUM_SPLITS, D_V, SPLITS_P2, DV_BLOCK, VEC, ORDERED)
    else:
        _amla_merge_row(pid, opart_ptr, lsepart_ptr, out_ptr, lse_ptr, so_b, so_s, so_h, sl_b, sl_s, sl_h,
                        N, ROWS, NUM_SPLITS, D_V, SPLITS_P2, DV_BLOCK, VEC, ORDERED)


# ==============================================================================================
# launcher
# ==============================================================================================
def load_configs() -> dict:
    """The launch tables of ops/triton/configs/<backend>/amla.json: {backend: {"fwd": section, "merge": section}} for the
    backends "cuda", "ascend", "interpreter" (the grammar of ops/triton/_common.py: a section's shared keys plus
    ``buckets``, first match wins, on the dimension ``rows`` = S_q·N)."""
    return _load_configs("amla")


def section(key: str) -> dict:
    """The launch settings of table ``key`` as one dict: the forward section's shared keys, its ``buckets`` and the
    ``merge`` section. A new dict (its buckets and merge are the table's own: copy before changing them). Raises
    ValueError for an unknown key."""
    tables = load_configs()
    if key not in tables:
        raise ValueError(f"config key must be one of {sorted(tables)}, got {key!r}")
    return dict(tables[key]["fwd"], merge=tables[key]["merge"])


def bucket_rows(bucket: dict) -> tuple[int, int | None]:
    """The [lo, hi] range of query rows (S_q·N) a bucket matches (hi None: no bound)."""
    lo, hi = bucket.get("match", {}).get("rows", [1, None])
    return lo, hi


def tile_for(buckets: list[dict], rows: int) -> dict:
    """The ``config`` of the first bucket whose ``rows`` range holds ``rows`` (a copy)."""
    for b in buckets:
        lo, hi = bucket_rows(b)
        if lo <= rows and (hi is None or rows <= hi):
            return dict(b["config"])
    raise ValueError(f"no bucket matches rows = {rows}")


def _backend_key(device: torch.device) -> str:
    if device.type == "cuda":
        return "cuda"
    if device.type == "npu":
        return "ascend"
    return "interpreter"


_TILE_KEYS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "programs_per_core", "q_in_loop", "flat",
              "rescale_skip", "peel", "name")

# batch-invariant mode (docs/ops/amla.md, "Batch-invariant mode"): chunk-size policies, fixed constants of the code
# (never the launch tables, so no retune, core count or batch composition changes them)
BATCH_INVARIANT_POLICIES = ("scaled", "fixed", "single")
BATCH_INVARIANT_POLICY = "fixed"      # the policy ops.batch_invariant() / DS_OPS_BATCH_INVARIANT=1 use
INVARIANT_CHUNK_UNIT = 512            # chunk lengths are multiples of this (so of every BLOCK_N that divides it)
INVARIANT_MAX_CHUNKS = 64             # a request is cut into at most this many chunks


def invariant_chunking(policy: str, rows: int) -> tuple[int, int]:
    """(base chunk length in keys, most chunks per request) of a batch-invariant chunk-size ``policy`` for requests
    of ``rows`` = S_q·N query rows: "scaled" — base = clamp(next_pow2(32·rows), 512, 8192) (the merge's fp32
    partials cost ~rows·4 KiB per chunk, so longer chunks for more rows keep them near a tenth of the KV read),
    "fixed" (the mode's policy) — base 512 whatever the rows, "single" — (0, 1): one chunk, no split. Raises
    ValueError for another policy."""
    if policy == "scaled":
        return min(max(_np2(32 * max(rows, 1)), 512), 8192), INVARIANT_MAX_CHUNKS
    if policy == "fixed":
        return INVARIANT_CHUNK_UNIT, INVARIANT_MAX_CHUNKS
    if policy == "single":
        return 0, 1
    raise ValueError(f"batch-invariant policy must be one of {BATCH_INVARIANT_POLICIES}, got {policy!r}")


def invariant_chunk_len(L: int, rows: int, policy: str = BATCH_INVARIANT_POLICY) -> int:
    """Keys per chunk of a request of ``L`` keys in the batch-invariant mode (the contract of docs/ops/amla.md):
    max(base, ceil(ceil(L / max_chunks) / 512)·512) with (base, max_chunks) = :func:`invariant_chunking`; chunk c
    holds keys [c·len, min((c + 1)·len, L)) and the chunks are merged in order c = 0, 1, ... "single": L (one
    chunk; 0 for L = 0)."""
    base, cap = invariant_chunking(policy, rows)
    if base == 0:
        return max(L, 0)
    return max(base, -(-(-(-L // cap)) // INVARIANT_CHUNK_UNIT) * INVARIANT_CHUNK_UNIT)


def launch_plan(B: int, S_q: int, N: int, max_keys: int, device: torch.device, config: dict | None = None,
                num_splits: int | None = None, page: int | None = None, invariant: str | None = None) -> dict:
    """The launch parameters the launcher picks for a problem (shapes only, no tensor data).

    B, S_q, N: batch, query tokens per request, heads; max_keys: max_blocks·block_size (upper bound on L);
    device: where it runs (selects the "cuda" / "ascend" / "interpreter" config);
    config: optional dict overriding entries of the chosen tile (BLOCK_M, BLOCK_N, num_warps, num_stages,
    programs_per_core) or of the backend section (cores, persistent, rescale_skip, max_splits, ...);
    config["key"] picks another section ("cuda" / "ascend" / "interpreter"), e.g. to run the Ascend plan
    under the interpreter;
    num_splits: force the KV split count;
    page: the cache's block_size (None: unknown, taken as a multiple of BLOCK_N). With "flat" addressing a
    key tile must lie in one page: sections with "flat_shrink" (Ascend, interpreter) shrink BLOCK_N to the
    largest power of two ≥ 16 dividing the page, the others (CUDA) fall back to per-key page gathers;
    invariant: a batch-invariant chunk policy (:data:`BATCH_INVARIANT_POLICIES`) or None (the default split,
    chosen from the batch): the split count becomes the most chunks any request of ≤ max_keys keys can have,
    each request's chunks follow :func:`invariant_chunk_len`, and the merge is the ordered loop.
    Returns a new dict(BLOCK_M, BLOCK_N, num_warps, num_stages, num_m, num_splits, grid, persistent, skip,
    round_c, lazy, key, flat, invariant, inv_chunk, inv_max_chunks, merge_*...); plans without ``config`` are
    memoised (see :func:`_plan`).
    Raises ValueError if config["key"] is not a launch table of configs/<backend>/amla.json ("cuda", "ascend",
    "interpreter"), for an unknown ``invariant`` policy, for ``invariant`` with ``num_splits``, or if the mode's
    chunk unit (512) is not a multiple of the tile's BLOCK_N.
    """
    if config:
        return _make_plan(B, S_q, N, max_keys, device, config, num_splits, page, invariant)
    return dict(_plan(B, S_q, N, max_keys, device, num_splits, page, invariant))


def _plan(B: int, S_q: int, N: int, max_keys: int, device: torch.device, num_splits: int | None,
          page: int | None, invariant: str | None = None) -> dict:
    """:func:`launch_plan` without ``config``, memoised on everything it depends on: the shapes, num_splits, page,
    the invariant policy, the config section (``_backend_key(device)``) and the resolved core count (the
    section's, else the CUDA device's SM count). Shared: never modify the result."""
    key = _backend_key(device)
    cores = device_cores(device, load_configs()[key]["fwd"]["cores"], default=1)
    return _cached_plan(B, S_q, N, max_keys, key, cores, num_splits, page, invariant)


@functools.lru_cache(maxsize=4096, typed=True)
def _cached_plan(B: int, S_q: int, N: int, max_keys: int, key: str, cores: int, num_splits: int | None,
                 page: int | None, invariant: str | None = None) -> dict:
    # the device is not read once key and cores are given
    return _make_plan(B, S_q, N, max_keys, None, {"key": key, "cores": cores}, num_splits, page, invariant)


def _make_plan(B: int, S_q: int, N: int, max_keys: int, device: torch.device | None, config: dict | None,
               num_splits: int | None, page: int | None, invariant: str | None = None) -> dict:
    """:func:`launch_plan`'s body (uncached)."""
    config = dict(config or {})
    key = config.pop("key", None) or _backend_key(device)
    sect = section(key)
    rows = S_q * N
    tile = tile_for(sect["buckets"], rows)
    for k in list(config):
        if k in tile or k in _TILE_KEYS:
            tile[k] = config.pop(k)
    if "merge" in config:                   # update the merge settings, keep the ones not named
        sect["merge"] = {**sect["merge"], **config.pop("merge")}
    sect.update(config)
    flat = bool(tile.get("flat", sect.get("flat", False)))
    if flat and page is not None and page % tile["BLOCK_N"]:
        bn = tile["BLOCK_N"]
        while bn >= 16 and page % bn:
            bn //= 2
        if bn >= 16 and sect.get("flat_shrink", False):
            tile["BLOCK_N"] = bn
        else:
            flat = False
    cores = device_cores(device, sect["cores"], default=1)
    num_m = max(1, -(-rows // tile["BLOCK_M"]))
    programs = B * num_m
    target = cores * tile["programs_per_core"]
    inv_chunk, inv_cap = 0, 1
    if invariant is not None:
        inv_chunk, inv_cap = invariant_chunking(invariant, rows)
        if num_splits is not None:
            raise ValueError("num_splits cannot be forced in the batch-invariant mode (the chunks follow each "
                             "request's length)")
        if INVARIANT_CHUNK_UNIT % tile["BLOCK_N"]:
            raise ValueError(f"the batch-invariant mode needs BLOCK_N to divide {INVARIANT_CHUNK_UNIT}, got "
                             f"{tile['BLOCK_N']}")
        num_splits = min(inv_cap, max(1, -(-max_keys // inv_chunk))) if inv_chunk else 1
        if num_splits == 1:
            inv_chunk = 0                   # one chunk: the unsplit kernel computes the same bits
    elif num_splits is None:
        if programs >= sect["fill"] * target or max_keys <= 0:
            num_splits = 1
        else:
            # floor, not ceil: programs·splits must fit one wave of resident CTAs (the H200 sweep: B=64, N=16,
            # L=4096 at 2 CTAs/SM gives 2952 GB/s with 4 splits = 256 CTAs, 2118 GB/s with 5 = 320 CTAs)
            num_splits = min(max(1, target // max(programs, 1)),
                             max(1, -(-max_keys // sect["min_keys_per_split"])),
                             sect["max_splits"])
    num_splits = max(1, int(num_splits))
    total = programs * num_splits
    persistent = bool(sect["persistent"])
    grid = min(total, target) if persistent else total
    merge_total = B * rows          # query rows to merge (the launcher splits them into column blocks)
    merge_grid = min(merge_total, sect.get("vector_cores", cores)) if persistent else merge_total
    return dict(key=key, BLOCK_M=tile["BLOCK_M"], BLOCK_N=tile["BLOCK_N"], num_warps=tile["num_warps"],
                q_in_loop=bool(tile.get("q_in_loop", False)),
                num_stages=tile["num_stages"], num_m=num_m, num_splits=num_splits, total=total,
                grid=max(grid, 1), persistent=persistent, skip=bool(tile.get("rescale_skip", sect["rescale_skip"])),
                round_c=bool(sect["amla_round_c"]), lazy=float(sect["lazy"]),
                merge_grid=max(merge_grid, 1), merge_total=merge_total,
                merge_warps=sect["merge"]["num_warps"], merge_cols=int(sect["merge"].get("cols", 0)),
                merge_vec=invariant is None and _merge_vec(sect["merge"], num_splits, B * rows),
                flat=flat, float_guard=bool(sect.get("float_guard", False)),
                peel=bool(tile.get("peel", sect.get("peel", False))),
                invariant=invariant, inv_chunk=inv_chunk, inv_max_chunks=inv_cap)


_VEC_MERGE_TILE = 16384   # largest [pow2(splits), cols] fp32 tile of the vectorised merge (64 splits × 256 columns)


def _merge_vec(m: dict, num_splits: int, merge_rows: int) -> bool:
    """Whether the split merge loads every split of a column block at once (config "merge": vec_min_splits,
    vec_max_rows, cols): only with splits to merge, at least vec_min_splits of them, at most vec_max_rows query
    rows in all, and a tile within _VEC_MERGE_TILE elements (a forced num_splits of thousands takes the loop). The
    plan does not know Dc: it sizes the tile with ``cols`` (512 when 0) and :func:`launch_plan_for` re-checks the
    real one."""
    vmin = int(m.get("vec_min_splits", 0))
    cols = int(m.get("cols", 0)) or 512
    return (num_splits > 1 and 0 < vmin <= num_splits and merge_rows <= int(m.get("vec_max_rows", 1 << 62))
            and _np2(num_splits) * cols <= _VEC_MERGE_TILE)


def _flat_slots_fit_int32(kv_cache: torch.Tensor, kr_cache: torch.Tensor, page: int) -> bool:
    """Whether flat addressing may compute a slot's offset within its page (slot · stride(1), slot < page) in
    int32, as the kernel does; a cache laid out with a larger slot stride takes the per-key gathers (int64)."""
    return max(abs(kv_cache.stride(1)), abs(kr_cache.stride(1))) * max(page, 1) < 2**31


def _mode_policy(invariant: str | None) -> str | None:
    """The batch-invariant policy of a launch: ``invariant`` None follows ops.batch_invariant() /
    DS_OPS_BATCH_INVARIANT (read now, at launch time), "off" is the default split, else a policy name."""
    if invariant is None:
        return BATCH_INVARIANT_POLICY if batch_invariant_enabled() else None
    if invariant == "off":
        return None
    invariant_chunking(invariant, 1)     # ValueError for an unknown policy
    return invariant


def launch_plan_for(q_nope: torch.Tensor, q_rope: torch.Tensor, kv_cache: torch.Tensor, kr_cache: torch.Tensor,
                    block_table: torch.Tensor, seq_lens: torch.Tensor | None = None, *, config: dict | None = None,
                    num_splits: int | None = None, invariant: str | None = None) -> dict:
    """The plan :func:`amla_variant` launches for these tensors (shapes and strides only, no data read; meta
    tensors work): :func:`launch_plan` for their shapes plus what the tensors decide — ``flat`` off when a slot
    offset would not fit int32 — and the merge launch: ``merge_vec`` (the vectorised merge for the real Dc),
    ``merge_dv_block`` (output columns per merge work item) and ``merge_grid``. invariant: as
    :func:`amla_variant`. Returns a new dict. Raises ValueError as :func:`launch_plan`."""
    B, S_q, N, D_V = q_nope.shape
    page = max(kv_cache.shape[1], 1)
    max_keys = block_table.shape[1] * page
    policy = _mode_policy(invariant)
    dev = q_nope.device
    plan = _make_plan(B, S_q, N, max_keys, dev, config, num_splits, page, policy) if config else \
        dict(_plan(B, S_q, N, max_keys, dev, num_splits, page, policy))
    if plan["flat"] and not _flat_slots_fit_int32(kv_cache, kr_cache, page):
        plan["flat"] = False
    ns = plan["num_splits"]
    # merge_cols (CUDA, the vectorised merge only): each work item takes that many output columns of one row
    cols = plan["merge_cols"] if plan["merge_vec"] else 0
    dvb = cols if 0 < cols < D_V and D_V % cols == 0 else D_V
    vec = plan["merge_vec"] and _np2(ns) * dvb <= _VEC_MERGE_TILE   # the plan assumed Dc = 512 when cols = 0
    if not vec:
        dvb = D_V                                                    # the loop merge keeps whole rows
    mtotal = plan["merge_total"] * (D_V // max(dvb, 1))
    plan.update(merge_vec=vec, merge_dv_block=dvb, merge_total=mtotal,
                merge_grid=plan["merge_grid"] if plan["persistent"] else mtotal)
    return plan


_ALLOCATORS: list = []


@contextlib.contextmanager
def output_allocator(fn: Callable[[tuple, torch.dtype, torch.device], torch.Tensor]) -> Iterator[None]:
    """Inside the block the launcher allocates out [B, S_q, N, Dc], lse [B, S_q, N] and the split partials
    (O [B, splits, S_q·N, Dc] fp32, lse [B, splits, S_q·N] fp32, in that order) with ``fn(shape, dtype, device)``
    instead of ``torch.empty``: tests poison them (NaN, so a value the kernel forgets to write shows) and read the
    partials. Not thread-safe; nests (the innermost wins)."""
    _ALLOCATORS.append(fn)
    try:
        yield
    finally:
        _ALLOCATORS.pop()


def _empty(shape, dtype, device):
    if _ALLOCATORS:
        return _ALLOCATORS[-1](tuple(shape), dtype, device)
    return torch.empty(shape, dtype=dtype, device=device)


def supports_reason(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, softmax_scale, causal=True):
    """Why the Triton kernel cannot take these inputs (None = it can). Shape errors are ops.amla's job;
    this only reports what the kernel itself does not handle."""
    tensors = (q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens)
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return "all tensor arguments must be tensors"
    if q_nope.dtype not in (torch.float16, torch.bfloat16):
        return f"the Triton amla kernel takes fp16/bf16 queries, got {q_nope.dtype}"
    if kv_cache.dtype != q_nope.dtype or kr_cache.dtype != q_nope.dtype or q_rope.dtype != q_nope.dtype:
        return "q_nope, q_rope, kv_cache and kr_cache must share one dtype"
    if q_nope.device.type == "cpu" and q_nope.dtype == torch.bfloat16:
        return "bf16 tl.dot is wrong under TRITON_INTERPRET (CPU); bf16 runs on CUDA / NPU"
    if q_nope.dim() != 4 or q_rope.dim() != 4 or kv_cache.dim() != 4 or kr_cache.dim() != 4:
        return "q_nope/q_rope/kv_cache/kr_cache must be 4-D"
    if q_nope.device.type == "npu" and kv_cache.shape[1] % 16:
        return (f"on Ascend the block size must be a multiple of 16 (one page per key tile), got "
                f"{kv_cache.shape[1]}")
    if kv_cache.shape[2] != 1 or kr_cache.shape[2] != 1:
        return "the kernel supports one latent KV head"
    Dc, Dr = kv_cache.shape[-1], kr_cache.shape[-1]
    if Dc % 4 or Dc < 64 or (Dc // 4) & (Dc // 4 - 1):      # 4 column chunks, each a power of two ≥ 16
        return f"kv_lora_rank (Dc) must be 4·2^n ≥ 64 for the Triton kernel (64, 128, 256, 512, ...), got {Dc}"
    if Dr < 16 or Dr & (Dr - 1):
        return f"the rope dim (Dr) must be a power of two ≥ 16 for the Triton kernel, got {Dr}"
    if q_nope.shape[-1] != kv_cache.shape[-1] or q_rope.shape[-1] != kr_cache.shape[-1]:
        return "query and cache head dims differ"
    if block_table.dtype not in (torch.int32, torch.int64) or seq_lens.dtype not in (torch.int32, torch.int64):
        return "block_table and seq_lens must be int32 (ds::amla takes int32; this launcher also reads int64)"
    return None


def _row_stride(t: torch.Tensor) -> int | None:
    """Stride of the flattened row axis r = j·N + h of t [B, S_q, N, D] (None: rows are not evenly spaced)."""
    _, S_q, N, _ = t.shape
    if S_q == 1 or N == 1:
        return t.stride(2) if N > 1 else t.stride(1)
    return t.stride(2) if t.stride(1) == N * t.stride(2) else None


def _last_contig(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def amla_variant(q_nope: torch.Tensor, q_rope: torch.Tensor, kv_cache: torch.Tensor, kr_cache: torch.Tensor,
                 block_table: torch.Tensor, seq_lens: torch.Tensor, softmax_scale: float, causal: bool = True,
                 *, rescale: str = "amla", num_splits: int | None = None, config: dict | None = None,
                 round_c: bool | None = None, lazy: float | None = None,
                 invariant: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`amla` with the knobs benchmarks and tests need.

    rescale: "amla" (integer add on the fp32 bits, power-of-two reference) or "multiply" (FlashAttention, the
    baseline the AMLA error is measured against).
    num_splits: force the KV split count (None = the launcher's choice from shapes).
    config: overrides for the launch config (see :func:`launch_plan`).
    round_c: AMLA only — round the remainder c to the KV dtype as CANN does (True: the compensation term
    corrects O for it) or keep it fp32 (False: cof ≡ 1, the compensation is 0 and O is rescaled only when
    n changes). None = the config's "amla_round_c".
    lazy: re-choose the reference (AMLA: the power of two 2^n; multiply: the max e^m_ref) only once the
    running max is ``lazy`` bits above it (P ≤ 2^(lazy+½) stays far from overflow), so O is rescaled a few
    times per row instead of at every block; a negative value re-chooses it at every block (CANN's AMLA,
    FlashAttention-2). None = the config's "lazy".
    invariant: None follows the batch-invariant mode (``ops.batch_invariant()`` / ``DS_OPS_BATCH_INVARIANT``,
    read at this call: with it on, :data:`BATCH_INVARIANT_POLICY`); "off" the default split; or a policy of
    :data:`BATCH_INVARIANT_POLICIES` (docs/ops/amla.md, "Batch-invariant mode").
    Shapes/dtypes/returns as :func:`amla`. Raises ValueError for an unknown ``rescale`` or ``invariant``.
    """
    if rescale not in ("amla", "multiply"):
        raise ValueError(f"rescale must be 'amla' or 'multiply', got {rescale!r}")
    B, S_q, N, D_V = q_nope.shape
    D_R = q_rope.shape[-1]
    dev = q_nope.device
    out = _empty((B, S_q, N, D_V), q_nope.dtype, dev)
    lse = _empty((B, S_q, N), torch.float32, dev)
    rows = S_q * N
    if B == 0 or rows == 0 or D_V == 0:
        return out, lse
    page = max(kv_cache.shape[1], 1)
    max_keys = block_table.shape[1] * page
    num_pages = kv_cache.shape[0]     # page ids outside [0, num_pages) are caller errors (NaN rows), never read
    q_nope, q_rope = _last_contig(q_nope), _last_contig(q_rope)
    kv_cache, kr_cache = _last_contig(kv_cache), _last_contig(kr_cache)
    if kv_cache.numel() == 0:   # never read (no page id is valid); a real allocation keeps pointer checks happy
        kv_cache = torch.zeros((1, page, 1, D_V), dtype=q_nope.dtype, device=dev)
        kr_cache = torch.zeros((1, page, 1, D_R), dtype=q_nope.dtype, device=dev)
    if block_table.numel() == 0:
        block_table = torch.zeros((B, 1), dtype=torch.int32, device=dev)
    # a block-table row is read as row_ptr + j and seq_lens as ptr + b (a row slice of a wider table is fine)
    block_table, seq_lens = _unit_inner(block_table), _unit_inner(seq_lens)
    plan = launch_plan_for(q_nope, q_rope, kv_cache, kr_cache, block_table, config=config, num_splits=num_splits,
                           invariant=invariant)
    ns = plan["num_splits"]
    qn_st = [q_nope.stride(0), q_nope.stride(1), q_nope.stride(2)]
    qr_st = [q_rope.stride(0), q_rope.stride(1), q_rope.stride(2)]
    if plan["flat"]:
        # flat rows: row r = j·N + h of a request at r·row_stride (needs stride_s = N·stride_h)
        if _row_stride(q_nope) is None:
            q_nope = q_nope.contiguous()
        if _row_stride(q_rope) is None:
            q_rope = q_rope.contiguous()
        qn_st = [q_nope.stride(0), 0, _row_stride(q_nope)]
        qr_st = [q_rope.stride(0), 0, _row_stride(q_rope)]
    split = ns > 1
    if split:
        opart = _empty((B, ns, rows, D_V), torch.float32, dev)
        lsepart = _empty((B, ns, rows), torch.float32, dev)
    else:
        opart, lsepart = out, lse     # unused
    _amla_fwd_kernel[(plan["grid"],)](
        q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, out, lse, opart, lsepart,
        *qn_st, *qr_st,
        kv_cache.stride(0), kv_cache.stride(1), kr_cache.stride(0), kr_cache.stride(1), block_table.stride(0),
        out.stride(0), out.stride(1), out.stride(2), lse.stride(0), lse.stride(1), lse.stride(2),
        float(softmax_scale), N, S_q, rows, max_keys, num_pages, plan["num_m"], ns, plan["total"],
        D_V=D_V, D_R=D_R, PAGE=page, BLOCK_M=plan["BLOCK_M"], BLOCK_N=plan["BLOCK_N"], CAUSAL=bool(causal),
        RESCALE=1 if rescale == "amla" else 0, ROUND_C=bool(plan["round_c"] if round_c is None else round_c),
        LAZY=float(plan["lazy"] if lazy is None else lazy), SKIP=plan["skip"], SPLIT=split,
        Q_IN_LOOP=plan["q_in_loop"], PERSISTENT=plan["persistent"], FLAT=plan["flat"],
        FGUARD=plan["float_guard"], PEEL=plan["peel"], **_invariant_constexprs(plan),
        num_warps=plan["num_warps"], num_stages=plan["num_stages"])
    if split:
        _amla_merge_kernel[(plan["merge_grid"],)](
            opart, lsepart, out, lse, out.stride(0), out.stride(1), out.stride(2),
            lse.stride(0), lse.stride(1), lse.stride(2), N, rows, ns, plan["merge_total"],
            D_V=D_V, SPLITS_P2=_np2(ns), PERSISTENT=plan["persistent"], DV_BLOCK=plan["merge_dv_block"],
            VEC=plan["merge_vec"], **({"ORDERED": True} if plan["invariant"] else {}),
            num_warps=plan["merge_warps"])
    return out, lse


def _invariant_constexprs(plan: dict) -> dict:
    """The forward kernel's batch-invariant constexprs for a plan ({} in the default split: the kernel's defaults)."""
    if not plan["inv_chunk"]:
        return {}
    return dict(INV_CHUNK=plan["inv_chunk"], INV_MAX_CHUNKS=plan["inv_max_chunks"], INV_UNIT=INVARIANT_CHUNK_UNIT)


def amla(q_nope: torch.Tensor, q_rope: torch.Tensor, kv_cache: torch.Tensor, kr_cache: torch.Tensor,
         block_table: torch.Tensor, seq_lens: torch.Tensor, softmax_scale: float,
         causal: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """MLA decode attention over a paged latent cache with AMLA rescaling (Triton).

    Args (same as reference/amla.py ``amla``):
        q_nope [B, S_q, N, Dc] fp16/bf16; q_rope [B, S_q, N, Dr] same dtype (Dc / 4 and Dr powers of two
        ≥ 16, :func:`supports_reason`; DeepSeek-V3: Dc = kv_lora_rank = 512, Dr = 64);
        kv_cache [num_blocks, block_size, 1, Dc], kr_cache [num_blocks, block_size, 1, Dr] same dtype;
        block_table [B, max_blocks] int32 (only the first ceil(L/block_size) entries of a row are read);
        seq_lens [B] int32 (keys per request incl. the S_q new ones; 0 allowed); softmax_scale: float;
        causal: token j sees keys [0, L − S_q + j]. Unchecked caller errors (a seq_len outside
        [0, max_blocks·block_size], a used page id outside [0, num_blocks)) give NaN rows, as the reference, and
        nothing outside the inputs is read (docs/ops/amla.md).
    Returns: out [B, S_q, N, Dc] in q's dtype, lse [B, S_q, N] fp32 natural log; a row with no key:
        out 0, lse −inf.
    Raises: nothing itself (ops.amla validates); unsupported inputs are reported by :func:`supports_reason`.
    Algorithm: arXiv 2509.25224 (AMLA) with CANN's compensation and shift clamp; split-KV flash-decoding
    merge as SGLang/FlashMLA (docs/ops/amla.md, docs/performance.md).
    """
    return amla_variant(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, softmax_scale, causal,
                        rescale="amla")


# ==============================================================================================
# compile cases (one per jit kernel × launch config the launcher can pick)
# ==============================================================================================
ASCEND_PAGES = (128, 32, 16)   # block sizes the compile check covers (CANN's 128; smaller ones shrink BLOCK_N)


def compile_cases(key: str = "ascend", *, pages: tuple[int, ...] = ASCEND_PAGES,
                  dtypes: tuple[str, ...] = ("fp16", "bf16"), rescales: tuple[int, ...] = (1, 0)) -> list[dict]:
    """Offline compile cases of one launch table (``key``: "ascend", "cuda", "interpreter"), built with
    :func:`launch_plan` itself so they are the launches a device makes: the forward kernel for each tile of the table ×
    block size in ``pages`` (the plan may shrink BLOCK_N to the page or fall back to gathers) × unsplit / split /
    batch-invariant split × ``dtypes`` × AMLA (1) / multiply (0) rescale (multiply in fp16 only, not in the mode),
    and the merge kernel (the table's merge and the batch-invariant ordered loop). Each case: dict(name, fn,
    signature, constexprs) for ``triton.compiler.ASTSource``. Integer arguments that are 1 at every launch (the lse row
    stride, which Triton then specialises to a constant) are declared constexpr 1. Raises ValueError for an unknown
    ``key``."""
    sect = section(key)
    dev = torch.device("meta")
    cases, seen = [], set()
    ints = ["sqn_b", "sqn_s", "sqn_h", "sqr_b", "sqr_s", "sqr_h", "skv_p", "skv_s", "skr_p", "skr_s", "sbt_b",
            "so_b", "so_s", "so_h", "sl_b", "sl_s", "N", "S_Q", "ROWS", "MAX_KEYS", "NUM_PAGES", "NUM_M",
            "NUM_SPLITS", "TOTAL_WORK"]
    for bucket in sect["buckets"]:
        rows = bucket_rows(bucket)[1] or 256
        for page in pages:
            plan = launch_plan(1, 1, rows, 4096, dev, {"key": key, "cores": sect["cores"] or 132}, 1, page=page)
            for dt in dtypes:
                for split, inv in ((False, False), (True, False), (True, True)):
                    for rescale in rescales:
                        if (dt == "bf16" or inv) and rescale == 0:
                            continue
                        chunk, cap = invariant_chunking(BATCH_INVARIANT_POLICY, rows) if inv else (0, 1)
                        const = dict(sl_h=1, D_V=512, D_R=64, PAGE=page, BLOCK_M=plan["BLOCK_M"],
                                     BLOCK_N=plan["BLOCK_N"], CAUSAL=True, RESCALE=rescale,
                                     ROUND_C=plan["round_c"], LAZY=plan["lazy"], SKIP=plan["skip"], SPLIT=split,
                                     Q_IN_LOOP=plan["q_in_loop"], PERSISTENT=plan["persistent"], FLAT=plan["flat"],
                                     FGUARD=plan["float_guard"], PEEL=plan["peel"], INV_CHUNK=chunk,
                                     INV_MAX_CHUNKS=cap, INV_UNIT=INVARIANT_CHUNK_UNIT if inv else 1)
                        stages = "" if key == "ascend" else f"_w{plan['num_warps']}s{plan['num_stages']}"
                        name = (f"amla_fwd_{dt}_bm{plan['BLOCK_M']}_bn{plan['BLOCK_N']}{stages}_page{page}"
                                f"_{'split' if split else 'nosplit'}_{'amla' if rescale else 'mul'}"
                                f"{'_invariant' if inv else ''}")
                        if name in seen:
                            continue
                        seen.add(name)
                        sig = {"q_nope_ptr": f"*{dt}", "q_rope_ptr": f"*{dt}", "kv_ptr": f"*{dt}",
                               "kr_ptr": f"*{dt}", "bt_ptr": "*i32", "sl_ptr": "*i32", "out_ptr": f"*{dt}",
                               "lse_ptr": "*fp32", "opart_ptr": "*fp32", "lsepart_ptr": "*fp32", "scale": "fp32"}
                        sig.update({k: "i32" for k in ints})
                        sig.update({k: "constexpr" for k in const})
                        cases.append(dict(name=name, fn=_amla_fwd_kernel, signature=sig, constexprs=const,
                                          num_warps=plan["num_warps"], num_stages=plan["num_stages"]))
    vec = int(sect["merge"].get("vec_min_splits", 0)) > 0
    cols = int(sect["merge"].get("cols", 0))
    for dt in dtypes:
        for inv in (False, True):
            sig = {"opart_ptr": "*fp32", "lsepart_ptr": "*fp32", "out_ptr": f"*{dt}", "lse_ptr": "*fp32"}
            sig.update({k: "i32" for k in ["so_b", "so_s", "so_h", "sl_b", "sl_s", "N", "ROWS", "NUM_SPLITS",
                                           "TOTAL_WORK"]})
            splits = INVARIANT_MAX_CHUNKS if inv else sect["max_splits"]
            v = vec and not inv
            const = dict(sl_h=1, D_V=512, SPLITS_P2=_np2(splits), PERSISTENT=bool(sect["persistent"]),
                         DV_BLOCK=cols if v and 0 < cols < 512 else 512, VEC=v, ORDERED=inv)
            sig.update({k: "constexpr" for k in const})
            cases.append(dict(name=f"amla_merge_{dt}{'_invariant' if inv else ''}", fn=_amla_merge_kernel,
                              signature=sig, constexprs=const, num_warps=sect["merge"]["num_warps"], num_stages=1))
    return cases


def ascend_compile_cases() -> list[dict]:
    """:func:`compile_cases` of the "ascend" table, for the triton-ascend 3.2 compile check (docs/ascend.md)."""
    return compile_cases("ascend")
