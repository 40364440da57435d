"""``ds::amla`` reference: MLA decode attention over a paged latent cache.

Functions:

* :func:`amla` — the golden semantics: exact softmax in fp32, one request at a time.
* :func:`pow2_rescale` — AMLA's integer rescale of the fp32 output with our zero / denormal guard (or CANN's).
* :func:`amla_blockwise` — a block-by-block emulation of the AMLA algorithm as Huawei ships it
  (arXiv 2509.25224; CANN ``hicann/ops-transformer`` ``AmlaVecCompute`` / ``ProcessAmlaNupdate`` /
  ``DealBmm2ResBaseBlock``), so the algorithm's own error can be measured against :func:`amla`; plus
  the plain FlashAttention rescale (``rescale="multiply"``) for comparison.

Weight-absorbed DeepSeek-V3 MLA: every key is one 576-d latent row ``[c_kv (kv_lora_rank=512) ‖ k_rope (64)]``
shared by all heads, and V is ``c_kv`` itself (the first 512 columns of the same row).
Source: DeepSeek-V3 ``inference/model.py`` (absorbed attention), FlashMLA ``flash_mla_with_kvcache``
(argument meaning, causal convention, natural-log lse), docs/ops/amla.md.
"""
import math

import torch

from .deepseek import round_to

_LN2 = math.log(2.0)


# ----------------------------------------------------------------------------------------------
# paged-cache helpers (shared by both functions; 64-bit index math, index never multiply-by-mask)
# ----------------------------------------------------------------------------------------------
def _gather_request(kv_cache: torch.Tensor, kr_cache: torch.Tensor, block_table: torch.Tensor, b: int,
                    length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(c_kv [L, Dc], k_rope [L, Dr], bad [L] bool) of request ``b``, read through its first ceil(L/block_size)
    block_table entries only (later entries may hold −1 or garbage and are never read); slots past L in
    the last page are dropped by slicing, so NaN there never reaches the math. ``bad`` marks the keys whose
    page id is outside [0, num_blocks) (a caller error the eager checks reject): they are read from no page
    (zeros here) and the callers turn their logits into NaN (docs/ops/amla.md, "Unchecked caller errors")."""
    num_blocks, block_size = kv_cache.shape[0], kv_cache.shape[1]
    n_pages = -(-length // block_size)
    pages = block_table[b, :n_pages].to(torch.int64)
    bad_page = (pages < 0) | (pages >= num_blocks)
    if num_blocks == 0:
        c_kv = kv_cache.new_zeros(n_pages * block_size, kv_cache.shape[-1])[:length]
        k_rope = kr_cache.new_zeros(n_pages * block_size, kr_cache.shape[-1])[:length]
    else:
        safe = torch.where(bad_page, torch.zeros_like(pages), pages)
        c_kv = kv_cache.index_select(0, safe).reshape(n_pages * block_size, kv_cache.shape[-1])[:length]
        k_rope = kr_cache.index_select(0, safe).reshape(n_pages * block_size, kr_cache.shape[-1])[:length]
        c_kv = c_kv.masked_fill(bad_page.repeat_interleave(block_size)[:length, None], 0.0)
        k_rope = k_rope.masked_fill(bad_page.repeat_interleave(block_size)[:length, None], 0.0)
    return c_kv, k_rope, bad_page.repeat_interleave(block_size)[:length]


def _length_ok(length: int, block_table: torch.Tensor, block_size: int) -> bool:
    """Whether a seq_len is in [0, max_blocks·block_size]; one outside (a caller error the eager checks reject)
    makes every row of its request NaN (docs/ops/amla.md, "Unchecked caller errors")."""
    return 0 <= length <= block_table.shape[1] * block_size


def _visible(length: int, s_q: int, causal: bool, device: torch.device) -> torch.Tensor:
    """[S_q, L] bool: query token j sees key i iff (not causal) or i ≤ L − S_q + j."""
    keys = torch.arange(length, device=device, dtype=torch.int64)
    if not causal:
        return torch.ones(s_q, length, dtype=torch.bool, device=device)
    last = length - s_q + torch.arange(s_q, device=device, dtype=torch.int64)
    return keys[None, :] <= last[:, None]


def _lengths(seq_lens: torch.Tensor) -> list[int]:
    return [int(x) for x in seq_lens.tolist()]


# ----------------------------------------------------------------------------------------------
# exact reference
# ----------------------------------------------------------------------------------------------
def amla(q_nope: torch.Tensor, q_rope: torch.Tensor, kv_cache: torch.Tensor, kr_cache: torch.Tensor,
         block_table: torch.Tensor, seq_lens: torch.Tensor, softmax_scale: float,
         causal: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """MLA decode attention over a paged latent cache, exact softmax in fp32.

    Args:
        q_nope:      [B, S_q, N, Dc] bf16/fp16 — absorbed no-RoPE query (Dc = kv_lora_rank = 512).
        q_rope:      [B, S_q, N, Dr] same dtype — RoPE'd query part (Dr = 64, de-interleaved order as
                     the cache holds k_rope).
        kv_cache:    [num_blocks, block_size, 1, Dc] same dtype — c_kv pages (keys' first Dc dims and V).
        kr_cache:    [num_blocks, block_size, 1, Dr] same dtype — k_rope pages.
        block_table: [B, max_blocks] int32 — page ids; only the first ceil(seq_lens[b]/block_size) entries
                     of row b are read, the rest may hold anything (−1, huge ids).
        seq_lens:    [B] int32 — keys per request, counting the S_q new tokens; 0 allowed.
        softmax_scale: float — multiplies the logits (DeepSeek: (128+64)^-0.5 · mscale²).
        causal:      query token j (0-based, of S_q) sees keys [0, L − S_q + j]; False: every query
                     sees all L keys. With L < S_q the first S_q − L query tokens see no key.

    Returns:
        out [B, S_q, N, Dc] in q_nope's dtype: softmax(scale·(q_nope·c_kvᵀ + q_rope·k_ropeᵀ)) · c_kv,
        computed in fp32 and rounded once (round-to-nearest-even).
        lse [B, S_q, N] fp32: natural-log log-sum-exp of the scaled logits over the visible keys.
        A query row that sees no key (L = 0, or causal with L − S_q + j < 0): out = 0, lse = −inf.

    Unchecked caller errors (``DS_OPS_CHECKS=0``, compiling, capturing: the values the eager checks below reject):
    a seq_lens[b] outside [0, max_blocks·block_size] makes every row of request b NaN (out and lse); a used
    block_table entry outside [0, num_blocks) makes NaN every (token, head) row that sees a key on that page; no
    page outside the cache is ever read, and every other row is unaffected (docs/ops/amla.md).

    Raises (checked by the registered op ``ds::amla``, ops/amla.py, before anything runs; this reference trusts
    its inputs and raises nothing of its own):
    TypeError for a dtype outside the above (q_nope bf16/fp16, q_rope and both caches q_nope's dtype,
    block_table / seq_lens int32), a softmax_scale that is not a real number, or a causal that is not a bool;
    ValueError for a wrong number of dimensions or a shape that disagrees with q_nope (B, S_q, N, Dc) / q_rope
    (Dr) / kv_cache (num_blocks, block_size), a tensor not on q_nope's device, S_q outside [1, 16]
    (``ops.amla.MAX_S_Q``), N / Dc / block_size < 1, a non-finite softmax_scale, and (eager, with checks on:
    not compiling or capturing, ``DS_OPS_CHECKS`` not off) seq_lens[b] outside [0, max_blocks·block_size] or a
    used block_table entry outside [0, num_blocks). Unused cache slots / pages may hold NaN: they are never read.
    Mirrors FlashMLA ``flash_mla_with_kvcache`` semantics (lse layout [B, S_q, N], −inf for empty rows).
    """
    B, S_q, N, Dc = q_nope.shape
    dev = q_nope.device
    out = torch.zeros(B, S_q, N, Dc, dtype=torch.float32, device=dev)
    lse = torch.full((B, S_q, N), float("-inf"), dtype=torch.float32, device=dev)
    for b, length in enumerate(_lengths(seq_lens)):
        if not _length_ok(length, block_table, kv_cache.shape[1]):
            out[b], lse[b] = float("nan"), float("nan")
            continue
        if length == 0:
            continue
        c_kv, k_rope, bad = _gather_request(kv_cache, kr_cache, block_table, b, length)
        q = torch.cat([q_nope[b], q_rope[b]], dim=-1).float()                    # [S_q, N, D]
        k = torch.cat([c_kv, k_rope], dim=-1).float()                            # [L, D]
        s = softmax_scale * torch.einsum("snd,ld->snl", q, k)                    # [S_q, N, L]
        s = s.masked_fill(bad, float("nan"))                                     # keys on no page: NaN
        vis = _visible(length, S_q, causal, dev)[:, None, :]
        s = s.masked_fill(~vis, float("-inf"))
        m = s.amax(dim=-1, keepdim=True)
        has_key = vis.any(dim=-1, keepdim=True).expand_as(m)
        m_safe = torch.where(has_key, m, torch.zeros_like(m))
        p = torch.exp(s - m_safe)                                                # masked → exactly 0
        l = p.sum(dim=-1, keepdim=True)
        l_safe = torch.where(has_key, l, torch.ones_like(l))
        o = torch.matmul(p, c_kv.float()) / l_safe
        out[b] = torch.where(has_key, o, torch.zeros_like(o))
        lse[b] = torch.where(has_key, m + torch.log(l_safe), torch.full_like(m, float("-inf"))).squeeze(-1)
    return out.to(q_nope.dtype), lse


# ----------------------------------------------------------------------------------------------
# AMLA emulation
# ----------------------------------------------------------------------------------------------
_F32 = dict(dtype=torch.float32)


def pow2_rescale(o: torch.Tensor, n_add: torch.Tensor, dn: torch.Tensor, ratio: torch.Tensor,
                 guard: str) -> torch.Tensor:
    """AMLA's rescale of the fp32 running output o [R, Dc]: add ``n_add`` (int64 [R], = rint((dn + ε)·2²³)) to each
    row's int32 bit pattern; dn [R] fp32 is the exponent shift, ratio [R] fp32 the compensation cof_prev/cof. Returns
    the rescaled o [R, Dc] fp32 (a new tensor). guard: "exponent" or "cann" (any other value acts as "exponent").
    Source: arXiv 2509.25224 (as_fp32(as_int32(F) + n·2²³) = F·2^n).

    guard="exponent" (ours): the integer add is applied only where it is exact exponent arithmetic —
    the exponent field E satisfies E ≥ 2 + |dn| (the result stays a normal number even after the
    ±1 carry of the compensation term) and E ≤ 253 (no overflow, no inf/NaN). Everywhere else (exact
    zeros, denormals, tiny values, inf/NaN) the value is multiplied in fp32 by 2^dn · ratio, the
    factor the add stands for. Zero stays exactly zero and keeps receiving later contributions.
    guard="cann": the shipped kernel's unguarded add (0 + N wraps to −inf/NaN bit patterns; those are
    cleared to 0 by the final "|O| ≤ 1e10 else 0" select in :func:`amla_blockwise`).
    """
    bits = o.view(torch.int32).to(torch.int64)
    added = bits + n_add[:, None]
    if guard == "cann":
        # the int32 atomic add wraps; emulate two's-complement wrap-around explicitly
        wrapped = ((added + 2**31) % 2**32) - 2**31
        return wrapped.to(torch.int32).view(torch.float32)
    expo = (bits >> 23) & 0xFF
    safe = (expo >= 2 - dn.to(torch.int64)[:, None]) & (expo <= 253)
    int_path = torch.where(safe, added, torch.zeros_like(added)).to(torch.int32).view(torch.float32)
    mul_path = o * (torch.exp2(dn) * ratio)[:, None]
    return torch.where(safe, int_path, mul_path)


def amla_blockwise(q_nope: torch.Tensor, q_rope: torch.Tensor, kv_cache: torch.Tensor, kr_cache: torch.Tensor,
                   block_table: torch.Tensor, seq_lens: torch.Tensor, softmax_scale: float, causal: bool = True,
                   *, block_kv: int = 512, rescale: str = "amla", guard: str = "exponent",
                   out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-by-block emulation of the AMLA decode algorithm (or of the plain FlashAttention rescale).

    Same arguments, shapes, dtypes and return values as :func:`amla`, plus:
        block_kv: keys per block (CANN: 512).
        rescale:  "amla" — the shipped algorithm; "multiply" — FlashAttention's fp32 multiply of O by
                  exp(m_old − m_new). Both round P to the KV dtype for the P·V product, as the kernels do.
        guard:    "exponent" (default, ours) or "cann" (the shipped kernel's guard), see below.
        out_dtype: dtype of ``out`` (default q_nope's); torch.float32 returns the unrounded result, which
                  is how tests measure the algorithm's own error.

    AMLA per query row r and KV block i (fp32 unless stated; CANN ``AmlaVecCompute``):
        s = scale·(q·Kᵢᵀ) (masked keys −inf); m = max(m_prev, max s); p = exp(s − m);
        l = l_prev·exp(m_prev − m) + Σp (standard online-softmax statistics)
        t = m·(1/ln2); n = rint(−t); c32 = exp((t + n)·ln2) = e^m·2^n ∈ [2^-½, 2^½];
        c16 = c32 rounded to the KV dtype; cof = c32 / c16
        P' = round_kv(p·c16)   — = exp(s)·2^n / cof: each block referenced to the power of two 2^n
        if the row already has O: Δn = max(n − n_prev, −30); ε = 1.5·(cof_prev/cof − 1) + 1e−6;
            O.bits += rint((Δn + ε)·2^23)          — O ·= 2^Δn · (cof_prev/cof), an int32 add, no multiply
        O += P'·Vᵢ (fp32 accumulate)
        after the last block: out = O / (l · c16_last); lse = m + ln l.
    CANN rounds n and the int delta with CAST_ROUND (half away from zero); we use rint (half to even):
    ties are measure-zero and any integer n is mathematically valid. The +1e−6 adds 8 ULPs (a factor
    ≈ 1 + 8·2⁻²³/M, M ∈ [1,2) the significand) per rescale, as shipped.

    The zero/denormal guard. The int add is exact exponent arithmetic only for normal fp32 values whose
    exponent field E exceeds |Δn| (+1 for the carry of ε): 0 + N (N < 0) is the bit pattern of −inf or
    a negative NaN, a denormal wraps to a huge value. CANN (guard="cann") replaces |O| > 1e10 by 0 before
    the final divide, which silently drops an element that was exactly 0 (e.g. a c_kv column that is 0
    in early blocks) and received contributions later. Ours (guard="exponent") applies the add only where
    E ≥ 2 + |Δn| and E ≤ 253 and multiplies the other elements by 2^Δn·cof_prev/cof in fp32, so zeros
    stay exactly 0, denormals are scaled correctly, and every later contribution is kept. No |O| clamp.

    Raises ValueError for an unknown ``rescale``/``guard`` or block_kv < 1.
    Source: arXiv 2509.25224 (abstract: FP32/INT32 identity F·2^n = as_fp32(as_int32(F) + n·2^23));
    CANN ops-transformer ``fia_block_vec_nonquant_mla.h`` (AmlaVecCompute, ProcessAmlaNupdate,
    DealBmm2ResBaseBlock), the kernel Huawei ships for this algorithm.
    """
    if rescale not in ("amla", "multiply"):
        raise ValueError(f"rescale must be 'amla' or 'multiply', got {rescale!r}")
    if guard not in ("exponent", "cann"):
        raise ValueError(f"guard must be 'exponent' or 'cann', got {guard!r}")
    if block_kv < 1:
        raise ValueError(f"block_kv must be ≥ 1, got {block_kv}")
    B, S_q, N, Dc = q_nope.shape
    dev = q_nope.device
    kv_dtype = kv_cache.dtype
    R = S_q * N
    recip_ln2 = torch.tensor(1.0 / _LN2, **_F32, device=dev)
    ln2 = torch.tensor(_LN2, **_F32, device=dev)
    two23 = torch.tensor(2.0**23, **_F32, device=dev)
    eps_bias = torch.tensor(1e-6, **_F32, device=dev)
    out = torch.zeros(B, S_q, N, Dc, **_F32, device=dev)
    lse = torch.full((B, S_q, N), float("-inf"), **_F32, device=dev)
    for b, length in enumerate(_lengths(seq_lens)):
        if not _length_ok(length, block_table, kv_cache.shape[1]):
            out[b], lse[b] = float("nan"), float("nan")
            continue
        if length == 0:
            continue
        c_kv, k_rope, bad = _gather_request(kv_cache, kr_cache, block_table, b, length)
        q = torch.cat([q_nope[b], q_rope[b]], dim=-1).float().reshape(R, -1)    # row r = j·N + h
        k = torch.cat([c_kv, k_rope], dim=-1).float()
        v = c_kv.float()
        vis = _visible(length, S_q, causal, dev).repeat_interleave(N, dim=0)     # [R, L]
        m = torch.full((R,), float("-inf"), **_F32, device=dev)
        l = torch.zeros(R, **_F32, device=dev)
        o = torch.zeros(R, Dc, **_F32, device=dev)
        started = torch.zeros(R, dtype=torch.bool, device=dev)
        n_prev = torch.zeros(R, **_F32, device=dev)
        cof_prev = torch.ones(R, **_F32, device=dev)
        c16_last = torch.ones(R, **_F32, device=dev)
        for lo in range(0, length, block_kv):
            hi = min(lo + block_kv, length)
            s = softmax_scale * (q @ k[lo:hi].T)
            s = s.masked_fill(~vis[:, lo:hi], float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            live = torch.isfinite(m_new)                        # the row has seen at least one key
            m_use = torch.where(live, m_new, torch.zeros_like(m_new))
            alpha = torch.exp(m - m_use)                        # 0 for rows not started (m = −inf)
            p = torch.exp(s - m_use[:, None])
            l = l * alpha + p.sum(dim=-1)
            if rescale == "multiply":
                pv = round_to(p, kv_dtype) @ v[lo:hi]
                o = o * alpha[:, None] + pv
            else:
                t = m_use * recip_ln2
                n = torch.round(-t)
                c32 = torch.exp((t + n) * ln2)
                c16 = round_to(c32, kv_dtype)
                cof = c32 / c16
                pv = round_to(p * c16[:, None], kv_dtype) @ v[lo:hi]
                if bool(started.any()):
                    dn = torch.clamp(n - n_prev, min=-30.0)
                    ratio = cof_prev / cof
                    eps = (ratio - 1.0) * 1.5 + eps_bias
                    n_add = torch.round((dn + eps) * two23).to(torch.int64)
                    o = torch.where(started[:, None], pow2_rescale(o, n_add, dn, ratio, guard), o)
                o = o + pv
                n_prev = torch.where(live, n, n_prev)
                cof_prev = torch.where(live, cof, cof_prev)
                c16_last = torch.where(live, c16, c16_last)
            m = m_new
            started = started | live
        if rescale == "amla":
            if guard == "cann":
                # CompareScalar(|O|, 1e10, LE) + Select: anything not ≤ 1e10 (also NaN) becomes 0
                o = torch.where(o.abs() <= 1e10, o, torch.zeros_like(o))
            den = l * c16_last
        else:
            den = l
        den = torch.where(started, den, torch.ones_like(den))
        res = torch.where(started[:, None], o / den[:, None], torch.zeros_like(o))
        l_safe = torch.where(started, l, torch.ones_like(l))
        lse_b = torch.where(started, m + torch.log(l_safe), torch.full_like(m, float("-inf")))
        saw_bad = (vis & bad[None, :]).any(dim=-1)         # a visible key on no page: the row is NaN
        out[b] = res.masked_fill(saw_bad[:, None], float("nan")).reshape(S_q, N, Dc)
        lse[b] = lse_b.masked_fill(saw_bad, float("nan")).reshape(S_q, N)
    return out.to(q_nope.dtype if out_dtype is None else out_dtype), lse
