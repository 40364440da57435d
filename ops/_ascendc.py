"""The Ascend C backend (``ascendc/``): the CANN-built library on ``npu`` tensors, the CPU twin build on CPU tensors.

On an NPU the library is built with CANN (ascendc/CMakeLists.txt) and registers ``TORCH_LIBRARY_IMPL(ds, PrivateUse1)``
kernels, loaded from ``$DS_OPS_ASCENDC_LIB``. On CPU tensors the same kernels and host tiling run through the twin
(ascendc/twin/, our clean-room CPU model of the AscendC API), built once with g++ by ``ops._ascendc_build`` and called
through a plain C ABI (ascendc/bindings/twin.cpp). Nothing here is required: without either, ``auto`` runs Triton or
the reference.

Functions (same signatures and semantics as the ops in ops/quant.py and ops/moe_gating.py, whose argument checks run
first): :func:`dynamic_quant`, :func:`rms_norm_dynamic_quant`, :func:`moe_gating_top_k`, :func:`quant_matmul`
(with :func:`pack_quant_weight` and :func:`quant_matmul_packed`); :func:`modeled` gives the twin's modeled 910B time
of one call; :func:`quant_tiling` / :func:`gating_tiling` / :func:`quant_matmul_tiling` expose the host tiling (tests).
"""
from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import torch

_ROOT = Path(__file__).resolve().parent.parent / "ascendc"
_SOURCES = ("bindings/twin.cpp", "quant/quant_tiling.cpp", "quant/quant_kernels.cpp",
            "moe_gating/moe_gating_tiling.cpp", "moe_gating/moe_gating_kernels.cpp",
            "quant_matmul/quant_matmul_tiling.cpp", "quant_matmul/quant_matmul_kernels.cpp")
CORES_910B = 40
"""Vector cores of an Atlas A2 (910B3); the twin launches this many unless told otherwise."""
UB_910B = 196608
CUBE_CORES_910B = 20
"""Cube (AIC) cores of an Atlas A2; quant_matmul's cube pass spreads its output tiles over this many."""
L1_910B, L0A_910B, L0B_910B, L0C_910B = 524288, 65536, 65536, 131072
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
    lib.ds_twin_quant_matmul.argtypes = [p, p, p, p, p, p, u32, u32, u32, u32, u32, u32, rep, err, u32]
    lib.ds_quant_matmul_tiling.argtypes = [u32] * 12 + [ctypes.POINTER(u32), err, u32]
    for f in (lib.ds_twin_dynamic_quant, lib.ds_twin_rms_norm_dynamic_quant, lib.ds_twin_moe_gating_top_k,
              lib.ds_quant_tiling, lib.ds_gating_tiling, lib.ds_twin_quant_matmul, lib.ds_quant_matmul_tiling):
        f.restype = ctypes.c_int
    lib.ds_quant_tiling_fields.restype = lib.ds_gating_tiling_fields.restype = ctypes.c_char_p
    lib.ds_quant_matmul_tiling_fields.restype = ctypes.c_char_p
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


def quant_matmul_tiling(M: int, N: int, K: int, *, out_dtype: torch.dtype = torch.bfloat16, bias: bool = False,
                        cube_cores: int = CUBE_CORES_910B, vec_cores: int = CORES_910B, l1_bytes: int = L1_910B,
                        l0a_bytes: int = L0A_910B, l0b_bytes: int = L0B_910B, l0c_bytes: int = L0C_910B,
                        ub_bytes: int = UB_910B) -> dict:
    """The host tiling of quant_matmul (QuantMatmulTiling of ascendc/common/tiling.h) for x [M, K] @ weight [K, N]
    as a dict; ValueError with the tiling's reason (naming the argument) when it cannot be tiled."""
    lib = _twin()
    return _tiling(lib.ds_quant_matmul_tiling, lib.ds_quant_matmul_tiling_fields, M, N, K, _DTYPES[out_dtype],
                   int(bias), cube_cores, vec_cores, l1_bytes, l0a_bytes, l0b_bytes, l0c_bytes, ub_bytes)


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


def supports_reason_quant_matmul(x_int8, weight_int8, weight_scale, x_scale, *, bias=None,
                                 out_dtype=torch.bfloat16) -> str | None:
    """``supports`` of the quant_matmul kernel: the host tiling's reason (K > 65535, ...; nothing for M = 0)."""
    M, K = x_int8.shape
    return None if M == 0 else _tiling_reason(x_int8, quant_matmul_tiling, M, weight_int8.shape[1], K,
                                              out_dtype=out_dtype, bias=bias is not None)


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


def pack_quant_weight(weight_int8: torch.Tensor) -> torch.Tensor:
    """The int8 weight in the layout the quant_matmul kernel reads: FRACTAL_NZ of the [N, K] (Linear-layout) weight,
    as ``torch_npu.npu_format_cast(weight_int8.t().contiguous(), 29)`` stores it (``reference.quant.fractal_nz`` of
    weight_int8.t()). Not the NZ of the [K, N] tensor itself: its 16 x 32 fractals run along N, and putting them into
    L0B would need an int8 transposing load that the twin does not model.

    weight_int8: Tensor[(K, N)], int8, any strides (logically [K, N], as ``ds::quant_matmul`` takes it).
    Returns Tensor[(K1, N1, 16, 32)], int8, contiguous, K1 = ceil(K / 32), N1 = ceil(N / 16):
    ``packed[kb, nb, r, c] = weight_int8[32·kb + c, 16·nb + r]``, zero where that lies beyond K or N. Each
    [16, 32] fractal is one L0B (ZN) fractal of the cube's B operand, so the kernel copies it without a transpose.
    Call it once, at load time. Raises ValueError unless weight_int8 is a 2-D int8 tensor."""
    if not (isinstance(weight_int8, torch.Tensor) and weight_int8.dtype == torch.int8 and weight_int8.dim() == 2):
        got = (f"{weight_int8.dtype} of shape {list(weight_int8.shape)}" if isinstance(weight_int8, torch.Tensor)
               else type(weight_int8).__name__)
        raise ValueError(f"weight_int8 must be a 2-D int8 tensor [K, N], got {got}")
    from reference.quant import fractal_nz
    return fractal_nz(weight_int8.t())


def _check_packed(w_nz: torch.Tensor, K: int, N: int) -> None:
    want = [-(-K // 32), -(-N // 16), 16, 32]
    if not isinstance(w_nz, torch.Tensor) or w_nz.dtype != torch.int8 or list(w_nz.shape) != want:
        got = f"{w_nz.dtype} of shape {list(w_nz.shape)}" if isinstance(w_nz, torch.Tensor) else type(w_nz).__name__
        hint = (" — an unpacked [K, N] weight: pack it once with ops._ascendc.pack_quant_weight"
                if isinstance(w_nz, torch.Tensor) and w_nz.dim() == 2 else "")
        raise ValueError(f"w_nz must be the packed int8 weight of shape {want} (FRACTAL_NZ, K = {K}, N = {N}), "
                         f"got {got}{hint}")


def _run_quant_matmul(x_int8, w_nz, weight_scale, x_scale, bias, out_dtype, cores, cube_cores=CUBE_CORES_910B):
    M, K = x_int8.shape
    N = weight_scale.shape[0]
    _check_packed(w_nz, K, N)
    out = _poisoned((M, N), out_dtype)
    x2, w2 = x_int8.detach().contiguous(), w_nz.detach().contiguous()
    ws, xs, b = _vec(weight_scale), _vec(x_scale), _vec(bias)
    rep = None
    if M:
        rep = _call(_twin().ds_twin_quant_matmul, x2.data_ptr(), w2.data_ptr(), ws.data_ptr(), xs.data_ptr(),
                    _ptr(b), out.data_ptr(), M, N, K, _DTYPES[out_dtype], cube_cores, cores)
    return out, rep


def quant_matmul_packed(x_int8: torch.Tensor, w_nz: torch.Tensor, weight_scale: torch.Tensor, x_scale: torch.Tensor,
                        *, bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """quant_matmul on an already packed weight (CPU tensors, through the twin): x_int8 [M, K] int8, w_nz
    :func:`pack_quant_weight`'s [ceil(K/32), ceil(N/16), 16, 32] int8, weight_scale [N] fp32 (gives N), x_scale [M]
    fp32, bias [N] float or None → out [M, N] out_dtype, with reference/quant.py's semantics. Raises ValueError when
    w_nz is not the packed shape (an unpacked [K, N] weight is named as such) or the tiling refuses the shape."""
    return _run_quant_matmul(x_int8, w_nz, weight_scale, x_scale, bias, out_dtype, CORES_910B)[0]


def quant_matmul(x_int8: torch.Tensor, weight_int8: torch.Tensor, weight_scale: torch.Tensor, x_scale: torch.Tensor,
                 *, bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``ds::quant_matmul`` (reference/quant.py: x_int8 [M, K], weight_int8 [K, N] int8, weight_scale [N] and
    x_scale [M] fp32, bias [N] or None → [M, N] out_dtype) as the Ascend C kernel ascendc/quant_matmul/. The op's
    schema takes the [K, N] weight every backend shares, so on CPU tensors the twin packs it here on each call (a
    convenience of the twin; on an NPU pack once with :func:`pack_quant_weight` and call the packed entry). Raises
    as :func:`quant_matmul_packed`."""
    if x_int8.device.type == "npu":  # pragma: no cover - needs an Ascend NPU
        return torch.ops.ds_ascendc.quant_matmul(x_int8, pack_quant_weight(weight_int8), weight_scale, x_scale, bias,
                                                 out_dtype)
    return quant_matmul_packed(x_int8, pack_quant_weight(weight_int8), weight_scale, x_scale, bias=bias,
                               out_dtype=out_dtype)


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
    "quant_matmul": lambda i, c: _run_quant_matmul(i["x_int8"], pack_quant_weight(i["weight_int8"]), i["weight_scale"],
                                                   i["x_scale"], i.get("bias"), i.get("out_dtype", torch.bfloat16), c),
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
