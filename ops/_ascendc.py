"""The Ascend C backend (``ascendc/``): the CANN-built library on ``npu`` tensors, the CPU twin build on CPU tensors.

On an NPU the library is built with CANN (ascendc/CMakeLists.txt) and registers ``TORCH_LIBRARY_IMPL(ds, PrivateUse1)``
kernels, loaded from ``$DS_OPS_ASCENDC_LIB``. On CPU tensors the same kernels and host tiling run through the twin
(ascendc/twin/, our clean-room CPU model of the AscendC API), built once with g++ by ``ops._ascendc_build`` and called
through a plain C ABI (ascendc/bindings/twin.cpp). Nothing here is required: without either, ``auto`` runs Triton or
the reference.

Functions (same signatures and semantics as the ops in ops/quant.py and ops/moe_gating.py, whose argument checks run
first): :func:`dynamic_quant`, :func:`rms_norm_dynamic_quant`, :func:`moe_gating_top_k`; :func:`modeled` gives the twin's
modeled 910B time of one call; :func:`quant_tiling` / :func:`gating_tiling` expose the host tiling (tests).
"""
from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import torch

_ROOT = Path(__file__).resolve().parent.parent / "ascendc"
_SOURCES = ("bindings/twin.cpp", "quant/quant_tiling.cpp", "quant/quant_kernels.cpp",
            "moe_gating/moe_gating_tiling.cpp", "moe_gating/moe_gating_kernels.cpp")
CORES_910B = 40
"""Vector cores of an Atlas A2 (910B3); the twin launches this many unless told otherwise."""
UB_910B = 196608
_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_PIPES = ("S", "V", "M", "MTE1", "MTE2", "MTE3", "FIX")
_ERR_LEN = 1024
_Report = None   # ops._ascendc_build.TwinReport (the twin's report as a ctypes struct), set by _twin()


@functools.lru_cache(maxsize=None)
def _twin() -> ctypes.CDLL:
    from . import _ascendc_build
    global _Report
    _Report = _ascendc_build.TwinReport
    lib = _ascendc_build.load("ds_ascendc_kernels", [str(_ROOT / s) for s in _SOURCES])
    p, u32, f32, rep, err = (ctypes.c_void_p, ctypes.c_uint32, ctypes.c_float, ctypes.POINTER(_Report),
                             ctypes.c_char_p)
    lib.ds_twin_dynamic_quant.argtypes = [p, p, p, p, u32, u32, u32, u32, rep, err, u32]
    lib.ds_twin_rms_norm_dynamic_quant.argtypes = [p, p, p, p, f32, p, p, p, u32, u32, u32, u32, rep, err, u32]
    lib.ds_twin_moe_gating_top_k.argtypes = [p, p, p, p, p, u32, u32, u32, u32, u32, u32, u32, u32, f32, f32, u32,
                                             u32, rep, err, u32]
    lib.ds_quant_tiling.argtypes = [u32, u32, u32, u32, u32, u32, f32, u32, u32, u32, ctypes.POINTER(u32), err, u32]
    lib.ds_gating_tiling.argtypes = [u32, u32, u32, u32, u32, u32, u32, u32, u32, u32, f32, f32, u32, u32, u32,
                                     ctypes.POINTER(u32), err, u32]
    for f in (lib.ds_twin_dynamic_quant, lib.ds_twin_rms_norm_dynamic_quant, lib.ds_twin_moe_gating_top_k,
              lib.ds_quant_tiling, lib.ds_gating_tiling):
        f.restype = ctypes.c_int
    lib.ds_quant_tiling_fields.restype = lib.ds_gating_tiling_fields.restype = ctypes.c_char_p
    return lib


@functools.lru_cache(maxsize=None)
def unavailable_reason(device_type: str = "npu") -> str | None:
    """None if the Ascend C kernels can run on ``device_type`` tensors in this process, else why not.
    ``"cpu"`` means the twin build: it is built (once, cached) and loaded here, and a missing g++ or a build error
    is the reason."""
    if device_type == "cpu":
        try:
            _twin()
        except Exception as e:  # noqa: BLE001 - any build/load failure makes the twin unavailable
            return f"the Ascend C CPU twin could not be built or loaded ({type(e).__name__}: {e})"
        return None
    try:
        import torch_npu  # noqa: F401
    except Exception as e:
        return f"torch_npu is not importable ({type(e).__name__}), so no Ascend C kernel can run"
    path = os.environ.get("DS_OPS_ASCENDC_LIB") or str(Path(__file__).with_name("libds_ascendc.so"))
    if not os.path.exists(path):
        return (f"the Ascend C library is not built ({path} is missing: pip install -e '.[npu]' with CANN, or build "
                "ascendc/ with CMake and set DS_OPS_ASCENDC_LIB)")
    try:
        torch.ops.load_library(path)
    except Exception as e:  # pragma: no cover - needs CANN
        return f"loading {path} failed: {e}"
    return None


# ----------------------------------------------------------------------------------------------
# host tiling (for tests and the perf report)
# ----------------------------------------------------------------------------------------------
def _tiling(fn, fields_fn, *args) -> dict:
    names = fields_fn().decode().split(",")
    out = (ctypes.c_uint32 * len(names))()
    err = ctypes.create_string_buffer(_ERR_LEN)
    if fn(*args, out, err, _ERR_LEN) != 0:
        raise ValueError(err.value.decode())
    return dict(zip(names, out))


def quant_tiling(rows: int, cols: int, *, dtype: torch.dtype = torch.bfloat16, rms: bool = False, smooth: bool = True,
                 residual: bool = False, epsilon: float = 1e-6, core_num: int = CORES_910B, ub_bytes: int = UB_910B,
                 max_chunk: int = 0) -> dict:
    """The host tiling ``ascendc/quant/quant_tiling.cpp`` computes for a [rows, cols] input: field name -> uint32
    (``ascendc/common/tiling.h`` QuantTiling). Raises ValueError with the tiling's reason (naming the argument)
    when the shape cannot be tiled."""
    lib = _twin()
    return _tiling(lib.ds_quant_tiling, lib.ds_quant_tiling_fields, rows, cols, _DTYPES[dtype], int(rms), int(smooth),
                   int(residual), epsilon, core_num, ub_bytes, max_chunk)


def gating_tiling(rows: int, experts: int, k: int, *, k_group: int = 1, group_count: int = 1, group_select_mode: int = 0,
                  renorm: int = 0, norm_type: int = 0, dtype: torch.dtype = torch.float32, bias: bool = True,
                  core_num: int = CORES_910B, ub_bytes: int = UB_910B, max_row_batch: int = 0) -> dict:
    """The host tiling of moe_gating_top_k (GatingTiling of ascendc/common/tiling.h) as a dict; ValueError if it
    cannot be tiled."""
    lib = _twin()
    return _tiling(lib.ds_gating_tiling, lib.ds_gating_tiling_fields, rows, experts, k, k_group, group_count,
                   group_select_mode, renorm, norm_type, _DTYPES[dtype], int(bias), 1.0, 1e-20, core_num, ub_bytes,
                   max_row_batch)


def _tiling_reason(x: torch.Tensor, tile, *args, **kwargs) -> str | None:
    """The kernels' ``supports``: None if the host tiling takes the shape, else its reason, so that a shape the
    kernel cannot tile is BackendUnavailable when forced and a fallback under ``auto``, not an argument error. Asked
    on CPU tensors only (the twin build holds the host tiling); on npu tensors the CANN build's own check stands."""
    if x.device.type != "cpu":
        return None
    try:
        tile(*args, **kwargs)
    except ValueError as e:
        return f"the Ascend C host tiling refuses these inputs: {e}"
    return None


def supports_reason_dynamic_quant(x, *, smooth_scales=None) -> str | None:
    """``supports`` of the dynamic_quant kernel: the host tiling's reason for x's shape (nothing for T = 0)."""
    rows = x.numel() // x.shape[-1]
    return None if rows == 0 else _tiling_reason(x, quant_tiling, rows, x.shape[-1], dtype=x.dtype,
                                                 smooth=smooth_scales is not None)


def supports_reason_rms_norm_dynamic_quant(x, gamma, *, epsilon=1e-6, residual=None, smooth_scales=None) -> str | None:
    """``supports`` of the rms_norm_dynamic_quant kernel (as :func:`supports_reason_dynamic_quant`)."""
    rows = x.numel() // x.shape[-1]
    return None if rows == 0 else _tiling_reason(x, quant_tiling, rows, x.shape[-1], dtype=x.dtype, rms=True,
                                                 smooth=smooth_scales is not None, residual=residual is not None,
                                                 epsilon=float(epsilon))


def supports_reason_moe_gating_top_k(x, k, *, bias=None, k_group=1, group_count=1, group_select_mode=0, renorm=0,
                                     norm_type=0, out_flag=False, routed_scaling_factor=1.0, eps=1e-20) -> str | None:
    """``supports`` of the moe_gating_top_k kernel: the host tiling's reason (E above the kernel's limit, ...)."""
    T, E = x.shape
    return None if T == 0 else _tiling_reason(x, gating_tiling, T, E, int(k), k_group=int(k_group),
                                              group_count=int(group_count), group_select_mode=int(group_select_mode),
                                              renorm=int(renorm), norm_type=int(norm_type), dtype=x.dtype,
                                              bias=bias is not None)


# ----------------------------------------------------------------------------------------------
# the kernels on CPU tensors (through the twin) or npu tensors (through the CANN build)
# ----------------------------------------------------------------------------------------------
def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _call(fn, *args):
    rep = _Report()
    err = ctypes.create_string_buffer(_ERR_LEN)
    rc = fn(*args, ctypes.byref(rep), err, _ERR_LEN)
    if rc == 1:
        raise ValueError(err.value.decode())
    if rc != 0:
        raise RuntimeError(f"Ascend C kernel broke a twin rule: {err.value.decode()}")
    return rep


def _poisoned(shape, dtype) -> torch.Tensor:
    """An output the kernel must overwrite everywhere: NaN for floats, the never-produced -128 / -1 for ints."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.full(shape, -128 if dtype == torch.int8 else -1, dtype=dtype)


def _vec(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().float().contiguous()


def _run_dynamic_quant(x, smooth_scales, cores):
    H = x.shape[-1]
    x2 = x.detach().reshape(-1, H).contiguous()
    q, scale = _poisoned(x2.shape, torch.int8), _poisoned(x2.shape[:1], torch.float32)
    s = _vec(smooth_scales)
    rep = None
    if x2.shape[0]:
        rep = _call(_twin().ds_twin_dynamic_quant, x2.data_ptr(), _ptr(s), q.data_ptr(), scale.data_ptr(),
                    x2.shape[0], H, _DTYPES[x.dtype], cores)
    return (q.reshape(x.shape), scale.reshape(x.shape[:-1])), rep


def dynamic_quant(x: torch.Tensor, *, smooth_scales: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``ds::dynamic_quant`` (see reference/quant.py: x [..., K] bf16/fp16/fp32, smooth_scales [K] or None →
    int8 [..., K], fp32 per-token scale [...]) as the Ascend C kernel ascendc/quant/: on CPU tensors through the
    twin with 40 modeled vector cores, on npu tensors through the CANN build. Arguments are checked by the op.
    Raises RuntimeError with the twin's message if the kernel breaks a twin rule, ValueError if the tiling cannot
    fit (naming H)."""
    if x.device.type == "npu":  # pragma: no cover - needs an Ascend NPU
        return torch.ops.ds_ascendc.dynamic_quant(x, smooth_scales)
    return _run_dynamic_quant(x, smooth_scales, CORES_910B)[0]


def _run_rms(x, gamma, epsilon, residual, smooth_scales, cores):
    H = x.shape[-1]
    x2 = x.detach().reshape(-1, H).contiguous()
    r2 = None if residual is None else residual.detach().reshape(-1, H).contiguous()
    q, scale = _poisoned(x2.shape, torch.int8), _poisoned(x2.shape[:1], torch.float32)
    ro = _poisoned(x2.shape, x.dtype)
    g, s = _vec(gamma), _vec(smooth_scales)
    rep = None
    if x2.shape[0]:
        rep = _call(_twin().ds_twin_rms_norm_dynamic_quant, x2.data_ptr(), _ptr(r2), g.data_ptr(), _ptr(s),
                    float(epsilon), q.data_ptr(), scale.data_ptr(), ro.data_ptr(), x2.shape[0], H,
                    _DTYPES[x.dtype], cores)
    return (q.reshape(x.shape), scale.reshape(x.shape[:-1]), ro.reshape(x.shape)), rep


def rms_norm_dynamic_quant(x: torch.Tensor, gamma: torch.Tensor, *, epsilon: float = 1e-6,
                           residual: torch.Tensor | None = None, smooth_scales: torch.Tensor | None = None
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``ds::rms_norm_dynamic_quant`` (reference/quant.py: x / residual [..., H], gamma / smooth_scales [H] →
    int8 [..., H], fp32 scale [...], residual_out [..., H] in x.dtype) as the Ascend C kernel ascendc/quant/ (twin
    on CPU, CANN build on npu). Raises as :func:`dynamic_quant`."""
    if x.device.type == "npu":  # pragma: no cover - needs an Ascend NPU
        return torch.ops.ds_ascendc.rms_norm_dynamic_quant(x, gamma, float(epsilon), residual, smooth_scales)
    return _run_rms(x, gamma, epsilon, residual, smooth_scales, CORES_910B)[0]


def _run_gating(x, k, bias, k_group, group_count, group_select_mode, renorm, norm_type, routed_scaling_factor, eps,
                cores):
    T, E = x.shape
    x2 = x.detach().contiguous()
    y, idx, norm = _poisoned((T, k), x.dtype), _poisoned((T, k), torch.int32), _poisoned((T, E), torch.float32)
    b = _vec(bias)
    rep = None
    if T:
        rep = _call(_twin().ds_twin_moe_gating_top_k, x2.data_ptr(), _ptr(b), y.data_ptr(), idx.data_ptr(),
                    norm.data_ptr(), T, E, k, k_group, group_count, group_select_mode, renorm, norm_type,
                    float(routed_scaling_factor), float(eps), _DTYPES[x.dtype], cores)
    return (y, idx, norm), rep


def moe_gating_top_k(x: torch.Tensor, k: int, *, bias: torch.Tensor | None = None, k_group: int = 1,
                     group_count: int = 1, group_select_mode: int = 0, renorm: int = 0, norm_type: int = 0,
                     out_flag: bool = False, routed_scaling_factor: float = 1.0, eps: float = 1e-20
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``ds::moe_gating_top_k`` (reference/moe_gating.py: x [T, E] logits → y [T, k] x.dtype, expert_idx [T, k]
    int32, norm_out [T, E] fp32, always written) as the Ascend C kernel ascendc/moe_gating/ (twin on CPU, CANN build
    on npu). out_flag is accepted and ignored (norm_out is always filled). Raises as :func:`dynamic_quant`."""
    if x.device.type == "npu":  # pragma: no cover - needs an Ascend NPU
        return torch.ops.ds_ascendc.moe_gating_top_k(x, k, bias, k_group, group_count, group_select_mode, renorm,
                                                     norm_type, float(routed_scaling_factor), float(eps))
    return _run_gating(x, k, bias, k_group, group_count, group_select_mode, renorm, norm_type, routed_scaling_factor,
                       eps, CORES_910B)[0]


# ----------------------------------------------------------------------------------------------
# modeled 910B time (the perf report)
# ----------------------------------------------------------------------------------------------
_RUNNERS = {
    "dynamic_quant": lambda i, c: _run_dynamic_quant(i["x"], i.get("smooth_scales"), c),
    "rms_norm_dynamic_quant": lambda i, c: _run_rms(i["x"], i["gamma"], i.get("epsilon", 1e-6), i.get("residual"),
                                                    i.get("smooth_scales"), c),
    "moe_gating_top_k": lambda i, c: _run_gating(
        i["x"], i["k"], i.get("bias"), i.get("k_group", 1), i.get("group_count", 1), i.get("group_select_mode", 0),
        i.get("renorm", 0), i.get("norm_type", 0), i.get("routed_scaling_factor", 1.0), i.get("eps", 1e-20), c),
}


def modeled(op_name: str, inputs: dict, *, core_num: int = CORES_910B) -> dict:
    """Run ``op_name`` on CPU ``inputs`` (the op's keyword inputs, e.g. from its OpSpec.make_inputs) through the twin
    and return its timing model of one launch on a 910B: ``{"time_us", "pipes": {pipe: busy_us per core, the busiest
    core}, "bound": the busiest pipe, "label": "modeled 910B"}`` (modeled, never measured; ascendc/twin/README.md
    lists the rates and their sources). Raises KeyError for an op without an Ascend C kernel, ValueError for an
    empty input."""
    if op_name not in _RUNNERS:
        raise KeyError(f"no Ascend C kernel for {op_name!r}; have {sorted(_RUNNERS)}")
    _, rep = _RUNNERS[op_name](inputs, core_num)
    if rep is None:
        raise ValueError(f"{op_name}: the input has no tokens, so nothing is launched")
    pipes = {name: rep.pipe_busy_ns[i] / 1e3 for i, name in enumerate(_PIPES) if rep.pipe_busy_ns[i] > 0}
    return {"time_us": rep.modeled_ns / 1e3, "pipes": pipes, "bound": max(pipes, key=pipes.get) if pipes else "none",
            "label": "modeled 910B", "block_dim": rep.block_dim}
