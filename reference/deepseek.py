"""Helpers shared by the references: RmsNorm, DeepSeek's RoPE convention, rounding points.

Source: DeepSeek-V3 ``inference/model.py``; Hugging Face ``modeling_deepseek_v3.py``; torch_npu
``npu_mla_prolog_v3`` (RoPE "interleave in, rotate-half out", see docs/ops/mla_prolog.md).
"""
from __future__ import annotations

import math

import torch


def rms_norm(x: torch.Tensor, gamma: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RmsNorm in fp32: ``x / sqrt(mean(x², -1) + eps) · gamma``.

    x: [..., H] any float dtype; gamma: [H] or None (no scale); eps: float. Returns fp32 [..., H].
    Mirrors the Ascend kernels (division, not rsqrt-multiply; gamma cast to fp32). Raises nothing of its own.
    """
    x = x.float()
    y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * gamma.float() if gamma is not None else y


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """[..., Dr] interleaved pairs (x0,x1),(x2,x3),… → [..., Dr] [x0,x2,…,x1,x3,…] (the order the caches hold).

    x: any dtype, any strides, Dr even; returns a new contiguous tensor of x's dtype (values moved, not
    rounded). Mirrors the permutation in HF ``apply_rotary_pos_emb_interleave`` (modeling_deepseek_v3.py:
    ``view(..., d // 2, 2).transpose(4, 3).reshape(..., d)``), i.e. npu_mla_prolog_v3's "interleave in,
    rotate-half out". Raises IndexError for a 0-d x (from the slicing); an odd Dr is not rejected (the
    even-index half is then one longer).
    """
    return torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)


def rope(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """DeepSeek RoPE as MLAProlog computes it, in fp32: interleaved pairs in, rotate-half order out.

    x:   [..., Dr] with pairs interleaved (DeepSeek's checkpoint layout), any float dtype
    sin, cos: broadcastable to x, laid out half-duplicated ``[s0..s(Dr/2-1), s0..s(Dr/2-1)]``
    Returns fp32 [..., Dr] in de-interleaved order: ``y = d·cos + rotate_half(d)·sin`` with
    ``d = deinterleave(x)``. Equals HF's ``apply_rotary_pos_emb_interleave`` / ``apply_rotary_pos_emb``
    after its view/transpose. Raises nothing of its own (sin / cos must broadcast to x).
    """
    d = deinterleave(x.float())
    h = d.shape[-1] // 2
    rot = torch.cat([-d[..., h:], d[..., :h]], dim=-1)
    return d * cos.float() + rot * sin.float()


def rope_sin_cos(positions: torch.Tensor, dim: int = 64, base: float = 10000.0, *, scaling: float = 1.0,
                 inv_freq: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(sin, cos) [T, dim] fp32 in the half-duplicated layout for integer ``positions`` [T].

    ``inv_freq`` [dim/2] overrides the plain ``base^(-2i/dim)`` (e.g. YaRN frequencies from HF);
    ``scaling`` multiplies both (HF's ``attention_scaling``). Mirrors HF's ``DeepseekV3RotaryEmbedding``
    (cos / sin of positions · inv_freq, halves duplicated). Raises nothing of its own."""
    if inv_freq is None:
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    f = positions.float()[:, None] * inv_freq.float()[None, :]
    emb = torch.cat([f, f], dim=-1)
    return emb.sin() * scaling, emb.cos() * scaling


def yarn_mscale(factor: float = 40.0, mscale: float = 1.0) -> float:
    """YaRN attention scale: 0.1·mscale·ln(factor) + 1 (1 when factor ≤ 1); floats in, float out (unitless).

    factor: rope_scaling["factor"] (DeepSeek-V3: 40); mscale: rope_scaling["mscale"] / ["mscale_all_dim"]
    (1.0). Mirrors HF ``yarn_get_mscale`` (modeling_deepseek_v3.py) and DeepSeek-V3 ``inference/model.py``
    (``MLA.__init__``'s softmax_scale correction). Raises nothing of its own.
    """
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def deepseek_softmax_scale(qk_nope: int = 128, qk_rope: int = 64, factor: float = 40.0, mscale_all_dim: float = 1.0) -> float:
    """(D + Dr)^-0.5 · mscale², DeepSeek-V3's attention scale (≈ 0.1352 for the released config)."""
    m = yarn_mscale(factor, mscale_all_dim)
    return (qk_nope + qk_rope) ** -0.5 * m * m


def round_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round fp32 to ``dtype`` (round-to-nearest-even, as Ascend's CAST_RINT) and back to fp32.

    x: [...] any float dtype; dtype: a float dtype (bf16 / fp16 / fp8 ...). Returns fp32 [...] (x's shape;
    x itself when both are fp32). Raises nothing of its own; an integer ``dtype`` is not rejected but
    truncates toward zero (torch's float → int cast), not RINT.
    """
    return x.to(dtype).float()
