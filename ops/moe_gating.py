"""``ds::moe_gating_top_k``: DeepSeek-V3 noaux_tc MoE routing (mirrors ``torch_npu.npu_moe_gating_top_k``).

Registration (schema from the reference's annotations, fake, checks, FLOPs/bytes, named DeepSeek-V3
shapes, the Triton kernel from ``ops.triton.moe_gating``) for reference/moe_gating.py, which holds the
golden semantics; docs/ops/moe_gating.md explains them.
"""
from __future__ import annotations

import torch

from reference import moe_gating as _ref

from ._library import DsOp, Kernel, OpSpec, check_finite_float, check_tensor
from .quant import _bind, _lazy_supports

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)

__all__ = ["moe_gating_top_k", "SPEC"]


def _check(x, k, *, bias=None, k_group=1, group_count=1, group_select_mode=0, renorm=0, norm_type=0, out_flag=False,
           routed_scaling_factor=1.0, eps=1e-20) -> None:
    """Shape/dtype/attribute checks (no data access): torch_npu's constraints, reported by argument name."""
    check_tensor("x", x, dtypes=_FLOATS, ndim=2)
    T, E = x.shape
    if E < 1:
        raise ValueError(f"x must have at least one expert column, got shape {list(x.shape)}")
    for name, v in (("k", k), ("k_group", k_group), ("group_count", group_count), ("group_select_mode", group_select_mode),
                    ("renorm", renorm), ("norm_type", norm_type)):
        if isinstance(v, bool) or not isinstance(v, (int, torch.SymInt)):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if group_count < 1 or E % group_count:
        raise ValueError(f"group_count must be >= 1 and divide E = {E} (x.shape[1]), got {group_count}")
    if not 1 <= k_group <= group_count:
        raise ValueError(f"k_group must be in [1, group_count = {group_count}], got {k_group}")
    if group_select_mode not in (0, 1):
        raise ValueError(f"group_select_mode must be 0 (group max) or 1 (sum of top-2), got {group_select_mode}")
    per = E // group_count
    if group_select_mode == 1 and group_count > 1 and per < 2:
        raise ValueError(f"group_select_mode=1 needs >= 2 experts per group, got E / group_count = {per}")
    kmax = per * k_group
    if not 1 <= k <= kmax:
        raise ValueError(f"k must be in [1, k_group · E / group_count = {kmax}], got {k}")
    if renorm not in (0, 1):
        raise ValueError(f"renorm must be 0 or 1, got {renorm}")
    if norm_type not in (0, 1):
        raise ValueError(f"norm_type must be 0 (softmax) or 1 (sigmoid), got {norm_type}")
    if not isinstance(out_flag, bool):
        raise TypeError(f"out_flag must be a bool, got {type(out_flag).__name__}")
    check_finite_float("routed_scaling_factor", routed_scaling_factor)
    check_finite_float("eps", eps, nonneg=True)
    if bias is not None:
        check_tensor("bias", bias, dtypes=tuple({torch.float32, x.dtype}), ndim=1)
        if bias.shape[0] != E:
            raise ValueError(f"bias must have shape [E] = [{E}] (x.shape[1]), got {list(bias.shape)}")
        if bias.device != x.device:
            raise ValueError(f"bias must be on {x.device}, got {bias.device}")


def _fake(x, k, *, bias=None, k_group=1, group_count=1, group_select_mode=0, renorm=0, norm_type=0, out_flag=False,
          routed_scaling_factor=1.0, eps=1e-20):
    _check(x, k, bias=bias, k_group=k_group, group_count=group_count, group_select_mode=group_select_mode,
           renorm=renorm, norm_type=norm_type, out_flag=out_flag, routed_scaling_factor=routed_scaling_factor, eps=eps)
    T, E = x.shape
    return (x.new_empty((T, k)), x.new_empty((T, k), dtype=torch.int32), x.new_empty((T, E), dtype=torch.float32))


def flops(*, x, k, bias=None, **_) -> int:
    """Estimate of fp32 vector ops: ~4 per logit for sigmoid/softmax, 1 for the bias add, ~2 for the group
    and expert selection compares; ~3 per chosen expert for the renormalisation and scaling."""
    T, E = x.shape
    return T * E * (6 + (bias is not None)) + 3 * T * k


def bytes_moved(*, x, k, bias=None, **_) -> int:
    """Read the logits (+ fp32 bias); write y (x.dtype), expert_idx (int32) and norm_out (fp32 [T, E],
    always written)."""
    T, E = x.shape
    e = x.element_size()
    return T * E * e + (bias.numel() * bias.element_size() if bias is not None else 0) + T * k * (e + 4) + T * E * 4


def make_inputs(shape: dict, *, dtype=torch.float32, device="cpu", generator=None) -> dict:
    """shape: {"T", "E" (256), "group_count" (8), "k_group" (4), "k" (8), "routed_scaling_factor" (2.5)}.
    DeepSeek-V3 routing: sigmoid, top-2-sum group score, fp32 bias ~ N(0, 0.5²)."""
    T, E = shape["T"], shape.get("E", 256)
    return {"x": (2 * torch.randn(T, E, generator=generator)).to(dtype).to(device), "k": shape.get("k", 8),
            "bias": (0.5 * torch.randn(E, generator=generator)).to(device),
            "k_group": shape.get("k_group", 4), "group_count": shape.get("group_count", 8), "group_select_mode": 1,
            "renorm": 0, "norm_type": 1, "out_flag": False,
            "routed_scaling_factor": shape.get("routed_scaling_factor", 2.5), "eps": 1e-20}


SPEC = OpSpec(name="moe_gating_top_k", flops=flops, bytes=bytes_moved, make_inputs=make_inputs,
              shapes={f"deepseek_v3_T{T}": {"T": T, "E": 256, "group_count": 8, "k_group": 4, "k": 8,
                                            "routed_scaling_factor": 2.5} for T in (1, 16, 64, 256, 4096, 16384)},
              compute="fp32", tolerance="fp32")

# ``out_flag`` is a ``Scalar`` in the schema, not a ``bool``: the dispatcher would turn out_flag=2 into True before the
# check sees it (the eager call raises). A Scalar keeps the caller's Python type, so both paths refuse it.
_SCHEMA = torch.library.infer_schema(_ref.moe_gating_top_k, mutates_args=()).replace(
    "bool out_flag=False", "Scalar out_flag=False")

moe_gating_top_k = DsOp(
    "moe_gating_top_k", _ref.moe_gating_top_k, fake=_fake, check=_check, spec=SPEC, schema=_SCHEMA,
    kernels=[Kernel("triton", "ops.triton.moe_gating", "moe_gating_top_k", ("cuda", "cpu", "npu"),
                    supports=_lazy_supports("ops.triton.moe_gating", "moe_gating_top_k")),
             Kernel("ascendc", "ops._ascendc", "moe_gating_top_k", ("npu", "cpu"),
                    supports=_lazy_supports("ops._ascendc", "moe_gating_top_k"))],
    flop_formula=lambda *a, out_val=None, **kw: flops(**_bind(_ref.moe_gating_top_k, a, kw)))
