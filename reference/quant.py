"""SmoothQuant W8A8 references: per-token dynamic int8 quantisation, fused residual-add + RmsNorm + quant,
the int8 GEMM with per-channel × per-token dequant epilogue, and the offline weight helpers.

Golden semantics for ``ds::dynamic_quant``, ``ds::rms_norm_dynamic_quant`` and ``ds::quant_matmul``
(docs/architecture.md; docs/ops/quant.md). Everything is computed in fp32 with the rounding
points spelled out; the int8×int8 products are accumulated exactly.

Mirrors (torch_npu / CANN; Ascend/op-plugin docs and hicann/ops-nn kernels):

* ``torch_npu.npu_dynamic_quant(x, smooth_scales=s)`` (quant_mode "pertoken", int8 output);
* ``torch_npu.npu_add_rms_norm_dynamic_quant`` / ``aclnnAddRmsNormDynamicQuant`` (first output only);
* ``torch_npu.npu_quant_matmul(x1, x2, scale, pertoken_scale=..., bias=..., output_dtype=...)``.

Rounding rule used throughout (Ascend ``CAST_RINT``): fp32 → int is round-half-to-even, fp32 → bf16/fp16
is round-to-nearest-even.
"""
from __future__ import annotations

import math

import torch

from .deepseek import rms_norm

QMAX = 127.0
"""Symmetric int8 range is [−127, 127]: −128 is never produced (cases.md Q5)."""

_K_MAX_INT32 = (2**31 - 1) // (128 * 128)
"""Largest K for which an int8·int8 dot product cannot overflow an int32 accumulator (131071)."""


# ----------------------------------------------------------------------------------------------
# per-token quantisation (shared by dynamic_quant and rms_norm_dynamic_quant)
# ----------------------------------------------------------------------------------------------
def quantize_rows(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8 quantisation of an fp32 tensor (the last axis is the row).

    y: fp32 [..., K], K ≥ 1. Returns ``(q int8 [..., K], scale fp32 [...])`` with

    * ``scale = max_k |y[..., k]| / 127`` (one fp32 division);
    * ``q = clamp(round_half_even(y / scale), −127, 127)`` (fp32 division, correctly rounded);
    * a row whose scale is 0 (all zeros, or an absmax so small that /127 underflows) → q = 0, scale = 0;
    * a row with NaN → scale NaN and q = 0 for the whole row; a row with ±inf (and no NaN) → scale
      +inf and q = 0 for the whole row (finite/inf = 0, inf/inf = NaN → 0). In short: a non-finite
      scale zeroes the row, and dequantising q·scale then gives NaN, flagging the bad row.

    Outputs are contiguous; leading axes may be empty. Callers pass fp32 (another float dtype is not
    upcast: the math and scale are then in y's dtype). Mirrors the per-token step of
    ``torch_npu.npu_dynamic_quant`` (symmetric int8, per-token scale; see :func:`dynamic_quant` for the
    CANN kernel's differences).
    Raises nothing of its own; K = 0 fails in ``torch.amax`` (IndexError: reduction over an empty dim).
    """
    amax = y.abs().amax(dim=-1, keepdim=True)          # NaN propagates
    # divide by a tensor: CUDA turns `tensor / python_float` into a multiply by the reciprocal (1 ulp off)
    scale = amax / torch.full_like(amax, QMAX)
    t = y / torch.where(scale == 0, torch.ones_like(scale), scale)
    t = torch.where(torch.isnan(t), torch.zeros_like(t), t)
    q = torch.round(t).clamp_(-QMAX, QMAX).to(torch.int8)
    # contiguous outputs whatever y's strides (elementwise ops keep a transposed input's layout): the op's fake
    # impl and the kernels allocate contiguous tensors, and torch.compile relies on the fake's strides
    return q.contiguous(), scale.squeeze(-1).contiguous()


def dynamic_quant(x: torch.Tensor, *, smooth_scales: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token symmetric dynamic int8 quantisation with optional SmoothQuant smoothing.

    Parameters
    ----------
    x: Tensor[(..., K)], bfloat16 / float16 / float32, any strides. K ≥ 1 (leading axes may be empty).
    smooth_scales: Tensor[(K,)], float32 (bfloat16 / float16 accepted, upcast), or None (= ones).
        Multiplied in: ``y = x · smooth_scales`` in fp32.

    Returns
    -------
    x_int8: Tensor[(..., K)], int8 in [−127, 127]: ``round_half_even(y / scale)``.
    scale:  Tensor[(...)], float32, the per-token scale ``rowmax|y| / 127`` (dequant: ``x ≈ x_int8 · scale``).

    Edge cases (cases.md Q3–Q6): an all-zero row gives q = 0 and scale = 0 (finite, never NaN);
    exact ties round half to even (0.5·s → 0, 1.5·s → 2, −2.5·s → −2); the absmax element of a row
    quantises to ±127 (never −128); a NaN in a row makes that row's scale NaN and its q all 0; x of
    shape (0, K) gives empty outputs. See :func:`quantize_rows`.

    Raises (checked by the registered op ``ds::dynamic_quant``, ops/quant.py; this reference trusts its
    inputs): TypeError if x is not bf16/fp16/fp32 or smooth_scales not a float tensor; ValueError if K = 0
    or smooth_scales is not [K] on x's device.

    Mirrors ``torch_npu.npu_dynamic_quant(x, smooth_scales=...)`` (pertoken, int8). Differences: the
    CANN kernel computes ``q = rint(y · (127/max))`` and stores ``scale = 1/(127/max)``, which can differ
    from ours by 1 ulp (scale) and 1 LSB at near-ties (q); and it has no zero-row guard.
    """
    y = x.float()
    if smooth_scales is not None:
        y = y * smooth_scales.float()
    return quantize_rows(y)


def rms_norm_dynamic_quant(x: torch.Tensor, gamma: torch.Tensor, *, epsilon: float = 1e-6,
                           residual: torch.Tensor | None = None, smooth_scales: torch.Tensor | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Optional residual add, RmsNorm, SmoothQuant smoothing and per-token int8 quantisation, one pass.

    Parameters
    ----------
    x: Tensor[(..., H)], bfloat16 / float16 / float32 (hidden states; H = hidden, e.g. 7168 or q_lora_rank 1536).
    gamma: Tensor[(H,)], any float dtype (cast to fp32), the RmsNorm weight.
    epsilon: float, added to mean(x²) (DeepSeek-V3: 1e-6).
    residual: Tensor[(..., H)] with x's shape and dtype, or None.
    smooth_scales: Tensor[(H,)], float32 (bf16/fp16 accepted), or None; multiplied into the normed value.

    Math (fp32 throughout; rounding points explicit)::

        s            = fp32(x) + fp32(residual)            # (s = fp32(x) without residual)
        residual_out = round_to(x.dtype, s)                # RINT; a copy of x when residual is None
        n            = s / sqrt(mean(s², -1) + epsilon) · fp32(gamma)     # reference.deepseek.rms_norm
        y            = n · smooth_scales                   # fp32, NOT rounded to x.dtype first
        x_int8, scale = quantize_rows(y)                   # as dynamic_quant

    The normed value is **not** rounded to x's dtype before quantisation, and the norm reads the
    **unrounded** fp32 sum, as ``aclnnAddRmsNormDynamicQuant`` does (ops-nn kernel
    ``add_rms_norm_dynamic_quant_regbase_single_row.h``: fp32 add, RINT copy to ``xOut``, RmsNorm on the
    fp32 sum, ×smooth, ``Divs`` by max/127, RINT). The unfused composition (add in bf16 → ``rms_norm``
    to bf16 → ``dynamic_quant``) rounds twice more and can differ by 1 LSB at near-ties.

    Returns
    -------
    x_int8: Tensor[(..., H)], int8; scale: Tensor[(...)], float32 per-token scale;
    residual_out: Tensor[(..., H)], x.dtype: the new residual stream (always a new tensor, never an
    alias of x, because a custom op may not return an input).

    Raises (checked by ``ds::rms_norm_dynamic_quant``, ops/quant.py): TypeError for non-float x / gamma /
    smooth_scales, a residual whose dtype differs from x's, or an epsilon that is not a real number;
    ValueError if H = 0, gamma or smooth_scales is not [H], residual's shape differs from x's, a device
    differs, or epsilon is negative or not finite.

    Mirrors ``torch_npu.npu_add_rms_norm_dynamic_quant(x1, x2, gamma, smooth_scale1=...)`` outputs
    (y1, x_out, scale1) — with RmsNorm as division (``rms_norm`` of reference/deepseek.py) where the
    CANN kernel multiplies by ``1/sqrt(·)`` (≤ 1 ulp fp32 apart).
    """
    s = x.float()
    if residual is not None:
        s = s + residual.float()
    residual_out = s.to(x.dtype, copy=True, memory_format=torch.contiguous_format)
    y = rms_norm(s, gamma, epsilon)
    if smooth_scales is not None:
        y = y * smooth_scales.float()
    q, scale = quantize_rows(y)
    return q, scale, residual_out


# ----------------------------------------------------------------------------------------------
# int8 GEMM
# ----------------------------------------------------------------------------------------------
_EXACT_CHUNK = 1024
"""K-chunk for the exact fp32 accumulation: |partial| ≤ 1024·128·128 = 2^24, so every fp32 partial sum
of integer products is an exactly representable integer, whatever the summation order (and also with
TF32 inputs, since int8 values have ≤ 8 significant bits)."""


def int8_matmul_exact(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact ``a @ b`` for int8 a [M, K], b [K, N] (any strides), as int64 [M, N], on any device.

    Products are accumulated in fp32 over K-chunks of 1024 (exact, see ``_EXACT_CHUNK``) and the
    chunk sums added in int64. Equals the int32 accumulator of an int8 GEMM (torch_npu.npu_quant_matmul's,
    cuBLAS's) whenever that does not overflow (K ≤ 131071 guarantees it). Raises nothing of its own (a K
    mismatch fails in torch's matmul)."""
    M, K = a.shape
    N = b.shape[1]
    acc = torch.zeros(M, N, dtype=torch.int64, device=a.device)
    for k0 in range(0, K, _EXACT_CHUNK):
        k1 = min(K, k0 + _EXACT_CHUNK)
        part = a[:, k0:k1].float() @ b[k0:k1, :].float()
        acc += part.to(torch.int64)
    return acc


def quant_matmul(x_int8: torch.Tensor, weight_int8: torch.Tensor, weight_scale: torch.Tensor, x_scale: torch.Tensor, *,
                 bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """W8A8 GEMM with a per-channel (weight) × per-token (activation) dequant epilogue.

    Parameters
    ----------
    x_int8: Tensor[(M, K)], int8 (per-token quantised activations, e.g. from :func:`dynamic_quant`).
    weight_int8: Tensor[(K, N)], int8, **logically** [K, N] with any strides (row-major, or the K-major
        ``[N, K].t()`` view that :func:`pack_weight` produces for CUDA); read through its strides.
    weight_scale: Tensor[(N,)], float32, per-channel scale.
    x_scale: Tensor[(M,)], float32, per-token scale; 1-D (vllm-ascend#3257: torch_npu rejects other ranks).
    bias: Tensor[(N,)], float32 / bfloat16 / float16, or None; added after the scales.
    out_dtype: torch.bfloat16 (default), torch.float16 or torch.float32.

    Math::

        acc[m, n] = Σ_k x_int8[m, k] · weight_int8[k, n]         # exact integer (int32 on device; K ≤ 131071)
        out = out_dtype(((fp32(acc) · weight_scale[n]) · x_scale[m]) + fp32(bias[n]))   # fp32, RINT at the end

    Returns Tensor[(M, N)], out_dtype, contiguous. M = 0 gives an empty [0, N] tensor; K = 0 gives bias
    (or zeros; NaN where a scale is inf or NaN, as for any K: the scales multiply a zero accumulator).

    Mirrors ``torch_npu.npu_quant_matmul(x1, x2, scale, pertoken_scale=x_scale, bias=bias,
    output_dtype=out_dtype)`` on Atlas A2/A3 (float bias added after scaling; int32 bias is not supported here).

    Raises (checked by ``ds::quant_matmul``, ops/quant.py): TypeError if x_int8 / weight_int8 are not int8,
    weight_scale / x_scale not fp32 (fp16 scales are rejected like torch_npu, vllm-ascend#7443), bias not
    float, or out_dtype not bf16/fp16/fp32; ValueError if x_int8 or weight_int8 is not 2-D,
    weight_int8.shape[0] != K (names both), x_scale
    is not 1-D [M] (vllm-ascend#3257), weight_scale / bias not [N], devices differ, or K > 131071 (the int32
    accumulator could overflow).
    """
    acc = int8_matmul_exact(x_int8, weight_int8)
    out = acc.float() * weight_scale.float()[None, :]
    out = out * x_scale.float()[:, None]
    if bias is not None:
        out = out + bias.float()[None, :]
    return out.to(out_dtype)


# ----------------------------------------------------------------------------------------------
# offline helpers (plain functions, not ops)
# ----------------------------------------------------------------------------------------------
def quantize_weight_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8 quantisation of a weight.

    w: Tensor[(K, N)] float (in_features K, out_features N — the layout ``quant_matmul`` reads; pass
    ``W.t()`` for an HF ``nn.Linear`` weight [N, K]). Returns ``(w_int8 [K, N] int8 contiguous,
    weight_scale [N] fp32)`` with ``weight_scale[n] = max_k |w[k, n]| / 127`` and
    ``w_int8 = clamp(round_half_even(w / weight_scale), −127, 127)`` computed in fp32 (zero column →
    scale 0, q 0). Error bound: |w − w_int8·scale| ≤ scale/2 per element (plus fp32 rounding).
    Raises ValueError unless w is 2-D floating point."""
    if not (isinstance(w, torch.Tensor) and w.dim() == 2 and w.is_floating_point()):
        got = f"{w.dtype} of shape {list(w.shape)}" if isinstance(w, torch.Tensor) else type(w).__name__
        raise ValueError(f"w must be a 2-D floating-point tensor [K, N], got {got}")
    q, s = quantize_rows(w.float().t())
    return q.t().contiguous(), s


def smoothquant_scales(act_absmax: torch.Tensor, weight: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """SmoothQuant smoothing factors (Xiao et al. 2023, arXiv 2211.10438, eq. 4).

    act_absmax: Tensor[(K,)], max |X_j| per input channel from calibration activations (≥ 0).
    weight: Tensor[(K, N)], the weight(s) that consume these activations (concatenate along N when
        several GEMMs share one activation, e.g. q_a_proj ‖ kv_a_proj).
    alpha: migration strength in [0, 1].

    Returns s: Tensor[(K,)], float32, ``s_j = max|X_j|^α / max_n|W_jn|^(1−α)``, each max clamped to
    ≥ 1e-5 (as SmoothQuant's reference code), and s_j = 1 for a channel whose activation or weight max
    is exactly 0. Use: X̂ = X / s, Ŵ = diag(s) · W, so ``X̂ @ Ŵ = X @ W``; with this library pass
    ``smooth_scales = 1 / s`` to :func:`dynamic_quant` / :func:`rms_norm_dynamic_quant` (which multiply)
    and quantise ``s[:, None] · W``.
    Raises ValueError on shape mismatch or alpha outside [0, 1]."""
    if act_absmax.dim() != 1 or weight.dim() != 2 or weight.shape[0] != act_absmax.shape[0]:
        raise ValueError(f"act_absmax must be [K] and weight [K, N]; got {tuple(act_absmax.shape)} and {tuple(weight.shape)}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    a = act_absmax.float().abs()
    wmax = weight.float().abs().amax(dim=1)
    s = a.clamp(min=1e-5).pow(alpha) / wmax.clamp(min=1e-5).pow(1.0 - alpha)
    return torch.where((a == 0) | (wmax == 0), torch.ones_like(s), s)


def fp8_block_dequant(w_fp8: torch.Tensor, weight_scale_inv: torch.Tensor, block: int = 128, *,
                      out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Dequantise a DeepSeek-V3 FP8 block-scaled checkpoint weight.

    w_fp8: Tensor[(out, in)], float8_e4m3fn (the HF / DeepSeek ``...weight``).
    weight_scale_inv: Tensor[(ceil(out/block), ceil(in/block))], float32 (the ``...weight_scale_inv``),
        despite its name a *multiplier*: ``w = fp8 · scale_inv[i // block, j // block]``.
    block: the square block size (128 in DeepSeek-V3's ``quantization_config.weight_block_size``).
    out_dtype: bfloat16 (default, as DeepSeek's ``weight_dequant``) or float32 (not checked: the fp32 product
        is cast to whatever dtype is given).

    Returns Tensor[(out, in)], out_dtype: product computed in fp32, rounded once (RINT).
    Raises TypeError for a block that is not an int; ValueError if w_fp8 is not 2-D, for block < 1, or when the
    scale grid does not match ``ceil(out/block) × ceil(in/block)``."""
    if isinstance(block, bool) or not isinstance(block, int):
        raise TypeError(f"block must be an int, got {type(block).__name__} {block!r}")
    if block < 1:
        raise ValueError(f"block must be ≥ 1, got {block}")
    if w_fp8.dim() != 2:
        raise ValueError(f"w_fp8 must be 2-D [out, in], got {tuple(w_fp8.shape)}")
    o, i = w_fp8.shape
    want = (math.ceil(o / block), math.ceil(i / block))
    if tuple(weight_scale_inv.shape) != want:
        raise ValueError(f"weight_scale_inv must have shape {list(want)} for w_fp8 {[o, i]} and block {block}, "
                         f"got {list(weight_scale_inv.shape)}")
    s = weight_scale_inv.float().repeat_interleave(block, 0)[:o].repeat_interleave(block, 1)[:, :i]
    return (w_fp8.float() * s).to(out_dtype)


FRACTAL_NZ = 29
"""ACL_FORMAT_FRACTAL_NZ, the format id ``torch_npu.npu_format_cast`` takes."""


def fractal_nz(w: torch.Tensor) -> torch.Tensor:
    """Physical FRACTAL_NZ tiling of a logical [K, N] matrix: Tensor[(ceil(N/n0), ceil(K/16), 16, n0)],
    zero-padded, with n0 = 32 for 1-byte dtypes and 16 for wider ones (vllm-ascend
    ``attention/utils.py::transdata``). Element (k, n) lands at ``[n // n0, k // 16, k % 16, n % n0]``.
    For kernels that take raw NZ buffers; torch_npu users call :func:`pack_weight` instead. Raises ValueError
    unless w is 2-D."""
    if w.dim() != 2:
        raise ValueError(f"w must be 2-D [K, N], got {tuple(w.shape)}")
    K, N = w.shape
    n0 = 32 if w.element_size() == 1 else 16
    Kp, Np = -(-K // 16) * 16, -(-N // n0) * n0
    p = torch.zeros(Kp, Np, dtype=w.dtype, device=w.device)
    p[:K, :N] = w
    return p.reshape(Kp // 16, 16, Np // n0, n0).permute(2, 0, 1, 3).contiguous()


def fractal_nz_to_nd(nz: torch.Tensor, K: int, N: int) -> torch.Tensor:
    """Inverse of :func:`fractal_nz`: nz [N1, K1, 16, n0] (any dtype) → the logical [K, N] matrix (contiguous,
    nz's dtype), dropping the padding. The layout is CANN's FRACTAL_NZ (torch_npu.npu_format_cast 29). Raises
    nothing of its own."""
    n1, k1, _, n0 = nz.shape
    return nz.permute(1, 2, 0, 3).reshape(k1 * 16, n1 * n0)[:K, :N].contiguous()


def pack_weight(w_int8: torch.Tensor, backend: str = "cuda") -> torch.Tensor:
    """Put an int8 weight [K, N] into the physical layout the backend's ``quant_matmul`` reads fastest,
    once, offline. The result is always *logically* [K, N], so every backend (and the reference)
    computes the same ``quant_matmul``; only the memory order differs.

    * ``"cuda"``: K-major — a [K, N] view (strides (1, K)) of a contiguous [N, K] tensor. Hopper's
      8-bit MMA wants both operands K-major (measured on the H200: 1090 vs 280 TOPS for row-major [K, N]).
    * ``"ascend"``: row-major [K, N] contiguous (ND). FRACTAL_NZ on Ascend is a *storage format*, not a
      stride pattern (element (k, n) sits at ``32k + 32K·(n // 32) + n % 32``, which no 2-D view can
      express): on an ``npu`` tensor this calls ``torch_npu.npu_format_cast(w, 29)`` (the tensor stays
      logically [K, N]); on any other device it returns the ND tensor unchanged in layout, to be cast on
      the NPU. :func:`fractal_nz` gives the physical NZ tiles for kernels that read raw NZ buffers.

    Raises ValueError for a non-2-D / non-int8 weight or an unknown backend."""
    if not (isinstance(w_int8, torch.Tensor) and w_int8.dim() == 2 and w_int8.dtype == torch.int8):
        raise ValueError(f"w_int8 must be a 2-D int8 tensor [K, N], got {getattr(w_int8, 'dtype', type(w_int8))} "
                         f"{tuple(getattr(w_int8, 'shape', ()))}")
    if backend == "cuda":
        return w_int8.t().contiguous().t()
    if backend == "ascend":
        w = w_int8.contiguous()
        if w.device.type == "npu":  # pragma: no cover - needs an Ascend NPU
            import torch_npu  # noqa: F401
            return torch_npu.npu_format_cast(w, FRACTAL_NZ)
        return w
    raise ValueError(f"backend must be 'cuda' or 'ascend' (the Ascend NPU's layout), got {backend!r}")
