"""``ds::dynamic_quant``, ``ds::rms_norm_dynamic_quant``, ``ds::quant_matmul``: SmoothQuant W8A8.

Registration (schema from the reference's annotations, fake, checks, FLOPs/bytes, named DeepSeek-V3
shapes, Triton kernels from ``ops.triton.quant``) for the references in reference/quant.py, which hold
the golden semantics; docs/ops/quant.md explains them. The offline weight helpers are re-exported here:
``quantize_weight_per_channel``, ``smoothquant_scales``, ``fp8_block_dequant``, ``pack_weight``,
``fractal_nz``, ``fractal_nz_to_nd``.

Mirrors ``torch_npu.npu_dynamic_quant``, ``npu_add_rms_norm_dynamic_quant``, ``npu_quant_matmul``
(with ``pertoken_scale``).
"""
from __future__ import annotations

import importlib
import inspect
from typing import Callable

import torch

from reference import quant as _ref
from reference.quant import (  # noqa: F401  (offline helpers, re-exported)
    fp8_block_dequant, fractal_nz, fractal_nz_to_nd, pack_weight, quantize_weight_per_channel, smoothquant_scales,
)

from ._library import DsOp, Kernel, OpSpec, check_finite_float, check_tensor

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)
_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
K_MAX = _ref._K_MAX_INT32

__all__ = ["dynamic_quant", "rms_norm_dynamic_quant", "quant_matmul", "quantize_weight_per_channel",
           "smoothquant_scales", "fp8_block_dequant", "pack_weight", "fractal_nz", "fractal_nz_to_nd",
           "SPEC_DYNAMIC_QUANT", "SPEC_RMS_NORM_DYNAMIC_QUANT", "SPEC_QUANT_MATMUL"]


# ----------------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------------
def _bind(fn: Callable, args, kwargs) -> dict:
    """Arguments of a call as a name -> value dict (defaults applied)."""
    b = inspect.signature(fn).bind(*args, **kwargs)
    b.apply_defaults()
    return dict(b.arguments)


def _lazy_supports(module: str, fn: str) -> Callable[..., str | None]:
    """``supports`` for a kernel living in ``module``: the import error if it cannot be imported, else
    whatever ``module.supports_reason_<fn>(*args, **kwargs)`` says (None = can run)."""
    def supports(*args, **kwargs) -> str | None:
        try:
            mod = importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 - any import failure makes the backend unavailable
            return f"{module} is not importable ({type(e).__name__}: {e})"
        r = getattr(mod, f"supports_reason_{fn}", None)
        return None if r is None else r(*args, **kwargs)
    supports.__name__ = f"supports_{fn}"
    return supports


def _check_vec(name: str, t, n: int, what: str, dtypes, device) -> None:
    check_tensor(name, t, dtypes=dtypes, ndim=1)
    if t.shape[0] != n:
        raise ValueError(f"{name} must have shape [{n}] ({what}), got {list(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on {device} like the other inputs, got {t.device}")


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


# ----------------------------------------------------------------------------------------------
# ds::dynamic_quant
# ----------------------------------------------------------------------------------------------
def _check_dynamic_quant(x, *, smooth_scales=None) -> None:
    check_tensor("x", x, dtypes=_FLOATS)
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must have shape [..., K] with K >= 1, got {list(x.shape)}")
    if smooth_scales is not None:
        _check_vec("smooth_scales", smooth_scales, x.shape[-1], "K = x.shape[-1]", _FLOATS, x.device)


def _fake_dynamic_quant(x, *, smooth_scales=None):
    _check_dynamic_quant(x, smooth_scales=smooth_scales)
    return x.new_empty(x.shape, dtype=torch.int8), x.new_empty(x.shape[:-1], dtype=torch.float32)


def flops_dynamic_quant(*, x, smooth_scales=None, **_) -> int:
    """Elementwise fp32 ops: |·|, max, divide, round (+ the smooth multiply) per element."""
    return x.numel() * (4 + (smooth_scales is not None))


def bytes_dynamic_quant(*, x, smooth_scales=None, **_) -> int:
    """Read x (+ smooth_scales fp32), write x_int8 (1 B/elem) and the fp32 per-token scale."""
    rows = _numel(x.shape[:-1])
    return (x.numel() * x.element_size() + (smooth_scales.numel() * smooth_scales.element_size() if smooth_scales is not None else 0)
            + x.numel() + rows * 4)


def make_inputs_dynamic_quant(shape: dict, *, dtype=torch.bfloat16, device="cpu", generator=None) -> dict:
    """shape: {"T": tokens, "K": hidden, "smooth": bool (default True)}."""
    T, K = shape["T"], shape["K"]
    x = torch.randn(T, K, generator=generator).to(dtype)
    out = {"x": x.to(device)}
    if shape.get("smooth", True):
        out["smooth_scales"] = (0.5 + torch.rand(K, generator=generator)).to(device)
    return out


_TOKENS = (1, 16, 32, 64, 128, 4096, 16384)   # decode … prefill 4K / 16K tokens
SPEC_DYNAMIC_QUANT = OpSpec(
    name="dynamic_quant", flops=flops_dynamic_quant, bytes=bytes_dynamic_quant, make_inputs=make_inputs_dynamic_quant,
    shapes={f"{nm}_T{T}": {"T": T, "K": K} for nm, K in (("hidden", 7168), ("q_lora", 1536), ("moe_inter", 2048))
            for T in _TOKENS},
    compute="fp32", tolerance="int8")

dynamic_quant = DsOp(
    "dynamic_quant", _ref.dynamic_quant, fake=_fake_dynamic_quant, check=_check_dynamic_quant, spec=SPEC_DYNAMIC_QUANT,
    kernels=[Kernel("triton", "ops.triton.quant", "dynamic_quant", ("cuda", "cpu", "npu"),
                    supports=_lazy_supports("ops.triton.quant", "dynamic_quant")),
             Kernel("ascendc", "ops._ascendc", "dynamic_quant", ("npu", "cpu"),
                    supports=_lazy_supports("ops._ascendc", "dynamic_quant"))],
    flop_formula=lambda *a, out_val=None, **kw: flops_dynamic_quant(**_bind(_ref.dynamic_quant, a, kw)))


# ----------------------------------------------------------------------------------------------
# ds::rms_norm_dynamic_quant
# ----------------------------------------------------------------------------------------------
def _check_rms_norm_dynamic_quant(x, gamma, *, epsilon=1e-6, residual=None, smooth_scales=None) -> None:
    check_tensor("x", x, dtypes=_FLOATS)
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must have shape [..., H] with H >= 1, got {list(x.shape)}")
    H = x.shape[-1]
    _check_vec("gamma", gamma, H, "H = x.shape[-1]", _FLOATS, x.device)
    check_finite_float("epsilon", epsilon, nonneg=True)
    if residual is not None:
        check_tensor("residual", residual, dtypes=(x.dtype,))
        if residual.shape != x.shape:
            raise ValueError(f"residual must have x's shape {list(x.shape)}, got {list(residual.shape)}")
        if residual.device != x.device:
            raise ValueError(f"residual must be on {x.device}, got {residual.device}")
    if smooth_scales is not None:
        _check_vec("smooth_scales", smooth_scales, H, "H = x.shape[-1]", _FLOATS, x.device)


def _fake_rms_norm_dynamic_quant(x, gamma, *, epsilon=1e-6, residual=None, smooth_scales=None):
    _check_rms_norm_dynamic_quant(x, gamma, epsilon=epsilon, residual=residual, smooth_scales=smooth_scales)
    return (x.new_empty(x.shape, dtype=torch.int8), x.new_empty(x.shape[:-1], dtype=torch.float32),
            x.new_empty(x.shape))


def flops_rms_norm_dynamic_quant(*, x, gamma=None, residual=None, smooth_scales=None, **_) -> int:
    """Elementwise fp32 ops per element: square+sum, scale, ×gamma, |·|+max, divide, round (6),
    + residual add, + smooth multiply."""
    return x.numel() * (6 + (residual is not None) + (smooth_scales is not None))


def bytes_rms_norm_dynamic_quant(*, x, gamma, residual=None, smooth_scales=None, **_) -> int:
    """Read x (+ residual), gamma (+ smooth_scales); write x_int8, the fp32 scale and residual_out."""
    rows = _numel(x.shape[:-1])
    e = x.element_size()
    r = x.numel() * e * (1 + (residual is not None)) + gamma.numel() * gamma.element_size()
    if smooth_scales is not None:
        r += smooth_scales.numel() * smooth_scales.element_size()
    return r + x.numel() + rows * 4 + x.numel() * e


def make_inputs_rms_norm_dynamic_quant(shape: dict, *, dtype=torch.bfloat16, device="cpu", generator=None) -> dict:
    """shape: {"T": tokens, "H": hidden, "residual": bool (True), "smooth": bool (True)}."""
    T, H = shape["T"], shape["H"]
    out = {"x": torch.randn(T, H, generator=generator).to(dtype).to(device),
           "gamma": (0.5 + torch.rand(H, generator=generator)).to(dtype).to(device), "epsilon": 1e-6}
    if shape.get("residual", True):
        out["residual"] = torch.randn(T, H, generator=generator).to(dtype).to(device)
    if shape.get("smooth", True):
        out["smooth_scales"] = (0.5 + torch.rand(H, generator=generator)).to(device)
    return out


SPEC_RMS_NORM_DYNAMIC_QUANT = OpSpec(
    name="rms_norm_dynamic_quant", flops=flops_rms_norm_dynamic_quant, bytes=bytes_rms_norm_dynamic_quant,
    make_inputs=make_inputs_rms_norm_dynamic_quant,
    shapes={**{f"hidden_T{T}": {"T": T, "H": 7168} for T in _TOKENS},
            **{f"q_lora_T{T}": {"T": T, "H": 1536, "residual": False} for T in _TOKENS}},
    compute="fp32", tolerance="int8_near_tie")

rms_norm_dynamic_quant = DsOp(
    "rms_norm_dynamic_quant", _ref.rms_norm_dynamic_quant, fake=_fake_rms_norm_dynamic_quant,
    check=_check_rms_norm_dynamic_quant, spec=SPEC_RMS_NORM_DYNAMIC_QUANT,
    kernels=[Kernel("triton", "ops.triton.quant", "rms_norm_dynamic_quant", ("cuda", "cpu", "npu"),
                    supports=_lazy_supports("ops.triton.quant", "rms_norm_dynamic_quant")),
             Kernel("ascendc", "ops._ascendc", "rms_norm_dynamic_quant", ("npu", "cpu"),
                    supports=_lazy_supports("ops._ascendc", "rms_norm_dynamic_quant"))],
    flop_formula=lambda *a, out_val=None, **kw: flops_rms_norm_dynamic_quant(**_bind(_ref.rms_norm_dynamic_quant, a, kw)))


# ----------------------------------------------------------------------------------------------
# ds::quant_matmul
# ----------------------------------------------------------------------------------------------
def _check_quant_matmul(x_int8, weight_int8, weight_scale, x_scale, *, bias=None, out_dtype=torch.bfloat16) -> None:
    check_tensor("x_int8", x_int8, dtypes=(torch.int8,), ndim=2)
    check_tensor("weight_int8", weight_int8, dtypes=(torch.int8,), ndim=2)
    M, K = x_int8.shape
    if weight_int8.shape[0] != K:
        raise ValueError(f"weight_int8 must be logically [K, N] with K = {K} (x_int8.shape[1]); got shape "
                         f"{list(weight_int8.shape)} — for a [N, K] weight pass weight.t()")
    if weight_int8.device != x_int8.device:
        raise ValueError(f"weight_int8 must be on {x_int8.device}, got {weight_int8.device}")
    if K > K_MAX:
        raise ValueError(f"K = {K} exceeds {K_MAX}, the largest K whose int8 dot products cannot overflow the "
                         f"int32 accumulator; split the GEMM along K")
    N = weight_int8.shape[1]
    _check_vec("weight_scale", weight_scale, N, "N = weight_int8.shape[1], per-channel", (torch.float32,), x_int8.device)
    check_tensor("x_scale", x_scale, dtypes=(torch.float32,))
    if x_scale.dim() != 1:
        raise ValueError(f"x_scale must be 1-D [M] = [{M}] (per-token; flatten leading axes, cf. "
                         f"vllm-ascend#3257), got shape {list(x_scale.shape)}")
    _check_vec("x_scale", x_scale, M, "M = x_int8.shape[0], per-token", (torch.float32,), x_int8.device)
    if bias is not None:
        _check_vec("bias", bias, N, "N = weight_int8.shape[1]", _FLOATS, x_int8.device)
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {[str(d) for d in _OUT_DTYPES]}, got {out_dtype}")


def _fake_quant_matmul(x_int8, weight_int8, weight_scale, x_scale, *, bias=None, out_dtype=torch.bfloat16):
    _check_quant_matmul(x_int8, weight_int8, weight_scale, x_scale, bias=bias, out_dtype=out_dtype)
    return x_int8.new_empty((x_int8.shape[0], weight_int8.shape[1]), dtype=out_dtype)


def flops_quant_matmul(*, x_int8, weight_int8, **_) -> int:
    """2·M·N·K int8 operations (one multiply + one add per MAC); the epilogue is not counted."""
    M, K = x_int8.shape
    return 2 * M * K * weight_int8.shape[1]


def bytes_quant_matmul(*, x_int8, weight_int8, weight_scale, x_scale, bias=None, out_dtype=torch.bfloat16, **_) -> int:
    """Read x_int8 (M·K), weight_int8 (K·N), both scales (fp32) and bias once; write the [M, N] output."""
    M, K = x_int8.shape
    N = weight_int8.shape[1]
    out_e = torch.empty((), dtype=out_dtype).element_size()
    return (M * K + K * N + 4 * (N + M) + (bias.numel() * bias.element_size() if bias is not None else 0)
            + M * N * out_e)


def make_inputs_quant_matmul(shape: dict, *, dtype=torch.bfloat16, device="cpu", generator=None) -> dict:
    """shape: {"M", "K", "N", "bias": bool (False)}; dtype is out_dtype. The weight is packed for the
    device (K-major on CUDA, row-major elsewhere) and scaled so outputs are O(1)."""
    M, K, N = shape["M"], shape["K"], shape["N"]
    dev = torch.device(device)
    x = torch.randint(-127, 128, (M, K), generator=generator, dtype=torch.int8)
    w = torch.randint(-127, 128, (K, N), generator=generator, dtype=torch.int8)
    w = pack_weight(w.to(dev), "cuda" if dev.type == "cuda" else "ascend")
    out = {"x_int8": x.to(dev), "weight_int8": w,
           "weight_scale": ((0.5 + torch.rand(N, generator=generator)) / (127.0 * K ** 0.5)).to(dev),
           "x_scale": ((0.5 + torch.rand(M, generator=generator)) / 127.0).to(dev),
           "out_dtype": dtype}
    if shape.get("bias", False):
        out["bias"] = torch.randn(N, generator=generator).to(dev)
    return out


# (K, N) of DeepSeek-V3's W8A8 GEMMs (per layer, TP = 1)
QUANT_MATMUL_KN = {
    "qkv_a": (7168, 2112),        # q_a_proj ‖ kv_a_proj_with_mqa: 1536 + 512 + 64
    "q_b": (1536, 24576),         # q_b_proj: 128 heads · (128 + 64)
    "o_proj": (16384, 7168),      # 128 heads · v_head 128 → hidden
    "moe_gate": (7168, 2048),     # one routed/shared expert's gate_proj (or up_proj)
    "moe_gate_up": (7168, 4096),  # gate ‖ up fused
    "moe_down": (2048, 7168),
    "dense_gate": (7168, 18432),  # dense layers 0-2 gate_proj (or up_proj)
    "dense_down": (18432, 7168),
}
SPEC_QUANT_MATMUL = OpSpec(
    name="quant_matmul", flops=flops_quant_matmul, bytes=bytes_quant_matmul, make_inputs=make_inputs_quant_matmul,
    shapes={f"{nm}_M{M}": {"M": M, "K": K, "N": N} for nm, (K, N) in QUANT_MATMUL_KN.items()
            for M in (1, 2, 16, 32, 64, 128, 4096, 16384)},   # M = 2: batch-1 decode with one MTP token
    compute="int8", tolerance="bf16")

quant_matmul = DsOp(
    "quant_matmul", _ref.quant_matmul, fake=_fake_quant_matmul, check=_check_quant_matmul, spec=SPEC_QUANT_MATMUL,
    kernels=[Kernel("triton", "ops.triton.quant", "quant_matmul", ("cuda", "cpu", "npu"),
                    supports=_lazy_supports("ops.triton.quant", "quant_matmul")),
             Kernel("ascendc", "ops._ascendc", "quant_matmul", ("npu", "cpu"),
                    supports=_lazy_supports("ops._ascendc", "quant_matmul"))],
    flop_formula=lambda *a, out_val=None, **kw: flops_quant_matmul(**_bind(_ref.quant_matmul, a, kw)))
