"""Reference for ``ds::mla_prolog``: fused MLA pre-attention, mirroring ``torch_npu.npu_mla_prolog_v3``.

Pure PyTorch, fp32 math, rounding to the activation dtype only at the documented points
(docs/architecture.md, docs/ops/mla_prolog.md). Sources: torch_npu ``npu_mla_prolog_v3`` /
aclnn ``aclnnMlaPrologV3WeightNz`` (argument order, shapes, quantisation scenarios, cache_index
semantics), CANN ``attention/mla_prolog`` kernels (order of operations and rounding), DeepSeek-V3
``inference/model.py`` and Hugging Face ``modeling_deepseek_v3.py`` (the math).

Modes (inferred from dtypes, see :func:`infer_mode`):

    token_x  weight_uq_qr  kv_cache  kr_cache  scenario
    float    float         float     float     bf16: no quantisation
    float    int8          float     float     partial: W_UQ_QR int8 per-channel, c_q dynamically quantised
    float    int8          int8      int8      partial + C8: per-channel (or per-tensor) cache quant
    int8     int8          float     float     full (A8W8): x per-token, all three weights per-channel
    int8     int8          int8      float     full + C8: per-tensor kv cache, query int8 per (token, head)
    float    float         int8      int8      bf16 + C8 (an extension; CANN has no such scenario)

"float" is the activation dtype ``dt = weight_uk.dtype`` (bf16 in CANN; fp16/fp32 also accepted here).
"""
from __future__ import annotations

import math

import torch

from . import quant as _quant
from .deepseek import rms_norm, rope



# ----------------------------------------------------------------------------------------------
# mode inference (dtypes only: no data access, usable from fakes)
# ----------------------------------------------------------------------------------------------
def infer_mode(token_x: torch.Tensor, weight_uq_qr: torch.Tensor, kv_cache: torch.Tensor) -> tuple[str, bool, bool]:
    """(weight mode, kv-cache int8?, query int8?) from dtypes alone.

    weight mode: ``"full"`` when token_x is int8 (A8W8: every weight int8), ``"partial"`` when only
    weight_uq_qr is int8, else ``"bf16"`` (no weight quantisation, whatever the float dtype).
    kv-cache int8 ("C8") when kv_cache is int8. The query is int8 (per token and head, with
    ``dequant_scale_q_nope``) exactly in the full + C8 scenario, as in CANN.
    """
    if token_x.dtype == torch.int8:
        wmode = "full"
    elif weight_uq_qr.dtype == torch.int8:
        wmode = "partial"
    else:
        wmode = "bf16"
    c8 = kv_cache.dtype == torch.int8
    return wmode, c8, (wmode == "full" and c8)


# ----------------------------------------------------------------------------------------------
# quantisation helpers (fp32 in, exact integer semantics)
# ----------------------------------------------------------------------------------------------
def int8_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact int8×int8→int32 GEMM, returned as fp32 (the int32 → fp32 cast rounds to nearest even).

    a: [M, K] int8; b: [K, N] int8. Returns fp32 [M, N] = fp32(Σ_k a·b) with the sum exact
    (:func:`reference.quant.int8_matmul_exact`, then int32 → fp32 as the NPU's dequant reads it). Mirrors the
    int32 accumulator of torch_npu's int8 matmuls; raises nothing of its own.
    """
    return _quant.int8_matmul_exact(a, b).to(torch.int32).float()


def round_half_even_int8(y: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """fp32 → int8: round half to even (Ascend CAST_RINT), saturate to [lo, hi]; NaN → 0. y: any shape, fp32;
    returns int8 of y's shape. Raises nothing."""
    q = torch.round(y).clamp(lo, hi)
    return torch.where(torch.isnan(q), torch.zeros_like(q), q).to(torch.int8)


def dynamic_quant_int8(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row dynamic int8 quantisation: exactly ``ds::dynamic_quant``'s rule
    (reference.quant.quantize_rows, one source of truth).

    y: [..., K] fp32, K ≥ 1. Returns (q [..., K] int8, scale [...] fp32) with ``scale = rowmax|y| / 127``
    and ``q = round_half_even(y / scale)`` clamped to [−127, 127]. An all-zero row gets scale 0 and q 0;
    a row containing NaN gets a NaN scale and q 0. Any real dtype is upcast to fp32 first.
    Raises nothing of its own; K = 0 fails in ``torch.amax`` (IndexError: reduction over an empty dim).
    """
    return _quant.quantize_rows(y.float())


def _per_channel(s: torch.Tensor) -> torch.Tensor:
    """(C,) or (1, C) or (1,) fp32 scale → flat fp32 [C] (or [1], broadcasting)."""
    return s.reshape(-1).float()


def _dequant_gemm(x_i8: torch.Tensor, w_i8: torch.Tensor, w_scale: torch.Tensor, x_scale: torch.Tensor) -> torch.Tensor:
    """int8 GEMM with fp32 epilogue ``acc · w_scale[col] · x_scale[row]`` (same order as ds::quant_matmul)."""
    return int8_matmul(x_i8, w_i8) * _per_channel(w_scale)[None, :] * x_scale.reshape(-1, 1).float()


# ----------------------------------------------------------------------------------------------
# the op
# ----------------------------------------------------------------------------------------------
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
    """Fused MLA pre-attention (reference). Mirrors ``torch_npu.npu_mla_prolog_v3`` (PA_BSND cache).

    Shapes (T = B·S tokens; He hidden, Hcq q_lora_rank, N heads, D qk_nope, Dr qk_rope,
    Hckv kv_lora_rank; dt = weight_uk.dtype, the activation dtype — bf16 in CANN):

    * token_x [T, He] or [B, S, He]: dt, or int8 (full quant, with dequant_scale_x per-token scale
      [T] / [T, 1] fp32; [B, S] / [B, S, 1] also for a 3-D token_x).
    * weight_dq [He, Hcq]; weight_uq_qr [Hcq, N·(D+Dr)] with per-head columns [q_nope D ‖ q_rope Dr];
      weight_dkv_kr [He, Hckv+Dr] with columns [c_kv ‖ k_rope]: dt, or int8 with a per-channel scale
      dequant_scale_w_* of shape [C] or [1, C] fp32. weight_uk [N, D, Hckv] dt (never quantised).
    * rmsnorm_gamma_cq [Hcq], rmsnorm_gamma_ckv [Hckv]: float.
    * rope_sin, rope_cos [T, Dr] / [B, S, Dr] bf16 / fp16 / fp32: half-duplicated layout ``[s0..s31, s0..s31]``
      (sin first).
    * kv_cache [num_blocks, block_size, 1, Hckv], kr_cache [num_blocks, block_size, 1, Dr]: dt, or int8
      (C8) with quant_scale_ckv / quant_scale_ckr (multiplied in; per-channel [C]/[1, C] or per-tensor [1]).
      Mutated in place: row ``cache_index[t]`` of the flattened [num_blocks·block_size] slot axis.
    * cache_index [T] / [B, S] int64: slot ids; a negative id means "do not write". Ids ≥
      num_blocks·block_size are also not written here (the op's eager check raises on them first);
      duplicated ids are a caller error (which token wins is undefined).
    * smooth_scales_cq [Hcq] / [1, Hcq] fp32: SmoothQuant factor multiplied into RmsNorm(c_q) before its
      per-token dynamic quantisation (only with an int8 weight_uq_qr).
    * rmsnorm_epsilon_cq, rmsnorm_epsilon_ckv: finite floats ≥ 0 added to mean(x²) of the two RmsNorms (default
      1e-5 as torch_npu; DeepSeek-V3's checkpoints use 1e-6, which ``ops.deepseek_layer`` passes).
    * cache_mode: "PA_BSND" only (torch_npu's paged [num_blocks, block_size, 1, C] caches).
    * Full + C8 (int8 token_x and int8 kv_cache): quant_scale_ckv per-tensor [1] / [1, 1]; kr_cache stays dt
      and quant_scale_ckr is None.

    Returns NEW tensors ``(query, query_rope, dequant_scale_q_nope)``:

    * query [T, N, Hckv] (or [B, S, N, Hckv]): dt; int8 in the full + C8 scenario.
    * query_rope [T, N, Dr] (or [B, S, N, Dr]): dt, de-interleaved RoPE order (see below).
    * dequant_scale_q_nope: fp32 [T, N, 1] (T = B·S also for 3-D input) in the full + C8 scenario,
      else an empty fp32 tensor of shape [0].

    Steps (fp32 math; ``r()`` rounds to dt, round-to-nearest-even):
      cq = r(x @ W_DQ); cqn = r(RmsNorm(cq)) — or, with an int8 W_UQ_QR, (q8, s) = dynamic_quant(RmsNorm(cq)·smooth);
      [qc ‖ qr] = r(cqn @ W_UQ_QR) — or r(int32(q8 @ W8) · w_scale · s);
      query = r(qc_h @ W_UK[h]); query_rope = r(RoPE(qr));
      [ckv ‖ kr] = r(x @ W_DKV_KR); kv = RmsNorm(ckv); k_rope = RoPE(kr);
      cache row ← r(kv), r(k_rope) — or C8: int8(RNE(kv · quant_scale_ckv)) saturated to [−128, 127].
    Full quant: every ``x @ W`` is ``int32(x8 @ W8) · w_scale[col] · x_scale[row]`` in fp32.
    Full + C8: ``dequant_scale_q_nope = rowmax|q_N|/127`` per (token, head), query = RNE(q_N / scale)
    in [−127, 127], query_rope = r(RoPE(qr) · quant_scale_ckv / dequant_scale_q_nope) (÷1 where the scale
    is 0). RoPE: interleaved pairs in, rotate-half order out (reference.deepseek.rope), so query_rope and
    the k_rope cache rows are in de-interleaved order.

    Raises ValueError for a cache_mode other than "PA_BSND" (this reference checks nothing else). The
    registered op ``ds::mla_prolog`` (ops/mla_prolog.py) checks every argument first, naming it: TypeError for a
    dtype that does not fit the mode (int8 weights / caches / token_x as above, the rest weight_uk's dtype) or a
    non-number epsilon; ValueError for a shape mismatch, an odd Dr, a tensor not on token_x's device, a scale
    missing for the mode or given where the mode takes none, a negative or non-finite epsilon, a cache_mode
    other than "PA_BSND", and (eager, with checks on) a cache_index id ≥ num_blocks·block_size or an id given
    twice — all before any cache row is written.
    """
    if cache_mode != "PA_BSND":
        raise ValueError(f"cache_mode {cache_mode!r} is not supported (only 'PA_BSND')")
    wmode, c8, q8 = infer_mode(token_x, weight_uq_qr, kv_cache)
    dt = weight_uk.dtype
    lead = tuple(token_x.shape[:-1])
    He = token_x.shape[-1]
    T = math.prod(lead)
    N, D, Hckv = weight_uk.shape
    Dr = kr_cache.shape[-1]
    dev = token_x.device

    x = token_x.reshape(T, He)
    sin = rope_sin.reshape(T, Dr).float()
    cos = rope_cos.reshape(T, Dr).float()

    # ---- query path ---------------------------------------------------------------------------
    if wmode == "full":
        sx = dequant_scale_x.reshape(T).float()
        cq = _dequant_gemm(x, weight_dq, dequant_scale_w_dq, sx)
    else:
        cq = x.float() @ weight_dq.float()
    cq = cq.to(dt)
    y = rms_norm(cq, rmsnorm_gamma_cq, rmsnorm_epsilon_cq)                      # fp32 [T, Hcq]
    if weight_uq_qr.dtype == torch.int8:
        if smooth_scales_cq is not None:
            y = y * _per_channel(smooth_scales_cq)[None, :]
        yq, ys = dynamic_quant_int8(y)
        qcqr = _dequant_gemm(yq, weight_uq_qr, dequant_scale_w_uq_qr, ys)
    else:
        qcqr = y.to(dt).float() @ weight_uq_qr.float()
    qcqr = qcqr.to(dt).float().reshape(T, N, D + Dr)
    qc, qr = qcqr[..., :D], qcqr[..., D:]
    q_nope = torch.bmm(qc.transpose(0, 1), weight_uk.float()).transpose(0, 1)   # fp32 [T, N, Hckv]
    q_rope = rope(qr, sin[:, None, :], cos[:, None, :])                         # fp32 [T, N, Dr]

    # ---- key path -----------------------------------------------------------------------------
    if wmode == "full":
        ckvkr = _dequant_gemm(x, weight_dkv_kr, dequant_scale_w_dkv_kr, sx)
    else:
        ckvkr = x.float() @ weight_dkv_kr.float()
    ckvkr = ckvkr.to(dt)
    kv = rms_norm(ckvkr[:, :Hckv], rmsnorm_gamma_ckv, rmsnorm_epsilon_ckv)      # fp32 [T, Hckv]
    k_rope = rope(ckvkr[:, Hckv:], sin, cos)                                    # fp32 [T, Dr]

    # ---- outputs ------------------------------------------------------------------------------
    if q8:
        scale = q_nope.abs().amax(-1, keepdim=True) / 127.0 if T else q_nope.new_zeros(0, N, 1)
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        query = round_half_even_int8(q_nope / safe, -127, 127)
        query = torch.where(scale > 0, query, torch.zeros_like(query))
        qs = quant_scale_ckv.reshape(-1)[:1].float()
        query_rope = (q_rope * qs / safe).to(dt)
        dequant_scale_q_nope = scale.contiguous()
    else:
        query = q_nope.to(dt)
        query_rope = q_rope.to(dt)
        dequant_scale_q_nope = torch.empty(0, dtype=torch.float32, device=dev)

    if c8:
        kv_rows = round_half_even_int8(kv * _per_channel(quant_scale_ckv)[None, :], -128, 127)
    else:
        kv_rows = kv.to(kv_cache.dtype)
    if kr_cache.dtype == torch.int8:
        kr_rows = round_half_even_int8(k_rope * _per_channel(quant_scale_ckr)[None, :], -128, 127)
    else:
        kr_rows = k_rope.to(kr_cache.dtype)

    # ---- cache scatter (PA_BSND): slot p → block p // block_size, offset p % block_size ----------
    nb, bs = kv_cache.shape[0], kv_cache.shape[1]
    idx = cache_index.reshape(T).to(torch.int64)
    keep = torch.nonzero((idx >= 0) & (idx < nb * bs)).reshape(-1)
    if keep.numel():
        ids = idx[keep]
        blk, off = ids // bs, ids % bs
        zero = torch.zeros_like(ids)
        kv_cache.index_put_((blk, off, zero), kv_rows[keep])
        kr_cache.index_put_((blk, off, zero), kr_rows[keep])

    return (query.reshape(*lead, N, Hckv).contiguous(), query_rope.reshape(*lead, N, Dr).contiguous(),
            dequant_scale_q_nope)
