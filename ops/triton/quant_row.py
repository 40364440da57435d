"""Triton row kernels of SmoothQuant W8A8: ``ds::dynamic_quant`` and ``ds::rms_norm_dynamic_quant``.

* :func:`dynamic_quant` — one pass over each row (the whole row stays in registers when
  ``K ≤ max_block_k``; otherwise two sweeps: absmax, then quantise): ``y = x·smooth`` (fp32),
  ``scale = max|y| / 127``, ``q = rint(y / scale)`` clamped to [−127, 127], round half to even.
* :func:`rms_norm_dynamic_quant` — the same with an optional residual add and an fp32 RmsNorm in front
  (``x / sqrt(mean(x²) + eps) · gamma``, division not rsqrt-multiply, like the reference).

CUDA fast path (config ``fast``; Ascend keeps ``div_rn``): one IEEE reciprocal per row and a Markstein correction
per element give the correctly rounded ``y / scale`` (:func:`_quantize_fast`), the absmax reduction propagates
NaN, per-column vectors load in the activation tile's layout. Bit-identical to the ``div_rn`` path.

Portability (docs/architecture.md, Triton portability): round half to even is ``(v + 1.5·2²³) − 1.5·2²³`` on fp32 (exact for
|v| < 2²², and |v| ≤ 127 here after the clamp), no ``libdevice.rint``; ``y / scale`` and the RmsNorm
division / sqrt use ``tl.math.div_rn`` / ``tl.math.sqrt_rn`` (Triton's plain fp32 ``/`` on CUDA is
``div.full.f32``, ≤ 2 ulp, which moves values across rounding ties). No host sync; M = 0 returns without a launch.

Config tables: sections ``dynamic_quant`` / ``rms_norm_dynamic_quant`` of ``ops/triton/configs/<backend>/quant.json``
(grammar: :mod:`ops.triton._common`; buckets match on ``M``, the token rows); keys: :func:`make_row_launch`.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ._common import (backend_key as _backend_key, bf16_cpu_output_reason as _bf16_cpu_output_reason,
                      cdiv as _cdiv, load_configs, next_power_of_2 as _np2, resolve, unit_inner as _unit_inner)
from ._pdl import pdl_enter, pdl_kwargs
from ._quant_common import capped_grid, not_pow2_int

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
ROW_OPS = ("dynamic_quant", "rms_norm_dynamic_quant")


@triton.jit
def _rint(v):
    """Round fp32 half to even for |v| < 2**22 (portable: no libdevice): adding and subtracting 1.5·2²³ does it."""
    return (v + 12582912.0) - 12582912.0


@triton.jit
def _store_q(q_ptr, rows64, stride_qm, cols, m2, v, FLAT: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_K: tl.constexpr):
    """Store the integer-valued fp32 tile v as int8. FLAT (Ascend): flatten to 1-D before the fp32 → int8
    conversion — bishengir 1.2 plans ~1.6 MiB of UB for a 2-D fp32 → int8 cast of a [1, 4096] tile."""
    if FLAT:
        offs = tl.reshape(rows64[:, None] * stride_qm + cols[None, :], [BLOCK_M * BLOCK_K])
        tl.store(q_ptr + offs, tl.reshape(v, [BLOCK_M * BLOCK_K]).to(tl.int8),
                 mask=tl.reshape(m2, [BLOCK_M * BLOCK_K]))
    else:
        tl.store(q_ptr + rows64[:, None] * stride_qm + cols[None, :], v.to(tl.int8), mask=m2)


@triton.jit
def _quantize_tile(y, scale):
    """fp32 q = clamp(rint(y / scale), −127, 127) (integer-valued); 0 where scale == 0 (all-zero row) or the
    quotient is NaN."""
    safe = tl.where(scale > 0, scale, 1.0)
    y, safe = tl.broadcast(y, safe)  # div_rn does not broadcast on every triton version
    v = tl.math.div_rn(y, safe)
    v = tl.where(scale > 0, v, 0.0)
    v = tl.where(v == v, v, 0.0)  # NaN -> 0 (the row's scale already says NaN)
    v = tl.minimum(tl.maximum(v, -127.0), 127.0)
    return _rint(v)


@triton.jit
def _max_nan(a, b):
    """max that propagates NaN (one max.NaN.f32 on CUDA): the row absmax then also flags a NaN row."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _quantize_fast(y, scale, NORMAL: tl.constexpr):
    """CUDA (FAST): as :func:`_quantize_tile` but the IEEE quotient ``y / scale`` comes from one correctly rounded
    reciprocal per row and a Markstein correction per element (4 FMAs), not a full ``div.rn`` per element.

    Exactness: with ``r = RN(1/b)`` and ``q1`` within 1 ulp of ``a/b``, ``RN(q1 + r·(a − b·q1))`` is ``a/b``
    correctly rounded when the remainder is exact (Markstein). Rows whose scale is below 2⁻⁸⁰ (subnormal ones
    included) are first multiplied, dividend and divisor alike, by 2¹⁰⁰ (exact, the quotient is unchanged)
    so the remainders never underflow for the elements that can round to a non-zero integer.
    NORMAL (every row's scale in [2⁻⁸⁰, inf)): no rescaling, no clamp (a normal scale = RN(absmax/127) keeps
    |y/scale| ≤ 127·(1 + 2⁻²⁴), which rounds to ≤ 127), no zero-row select: 7 flops per element.
    Returns the fp32 value ``RN(q) + 1.5·2²³`` whose bit pattern ends in the int8 two's complement of q
    (see :func:`_store_q_bits`); 0 (i.e. q = 0) where scale is 0, inf or NaN."""
    if NORMAL:
        r = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)
        q = y * r
        q = tl.fma(tl.fma(-scale, q, y), r, q)
        q = tl.fma(tl.fma(-scale, q, y), r, q)
    else:
        ok = (scale > 0) & (scale < float("inf"))
        f = tl.where(scale < 8.271806125530277e-25, 1.2676506002282294e30, 1.0)  # 2**-80, 2**100
        b = tl.where(ok, scale * f, 1.0)
        r = tl.math.div_rn(tl.full(b.shape, 1.0, tl.float32), b)
        a = y * f
        q = a * r
        q = tl.fma(tl.fma(-b, q, a), r, q)
        q = tl.fma(tl.fma(-b, q, a), r, q)
        q = tl.minimum(tl.maximum(q, -127.0), 127.0)
        q = tl.where(ok, q, 0.0)
    return q + 12582912.0


@triton.jit
def _store_q_bits(q_ptr, rows64, stride_qm, cols, m2, t):
    """Store t = RN(q) + 1.5·2²³ (fp32, |q| ≤ 127) as int8: its low byte is q's two's complement."""
    tl.store(q_ptr + rows64[:, None] * stride_qm + cols[None, :], t.to(tl.int32, bitcast=True).to(tl.int8), mask=m2)


@triton.jit
def _absmax(y, FAST: tl.constexpr):
    """(row absmax [BLOCK_M], NaN count [BLOCK_M]); FAST: one NaN-propagating max reduction, count 0."""
    if FAST:
        amax = tl.reduce(tl.abs(y), 1, _max_nan)
        nan_count = tl.zeros(amax.shape, dtype=tl.int32)
    else:
        amax = tl.max(tl.abs(y), axis=1)
        nan_count = tl.sum((y != y).to(tl.int32), axis=1)
    return amax, nan_count


@triton.jit
def _quant_store(q_ptr, rows64, stride_qm, cols, m2, y, scale, FAST: tl.constexpr, FLAT: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    if FAST:
        # the common case, every row of the tile with a normal finite scale, takes the short path
        normal = (scale >= 8.271806125530277e-25) & (scale < float("inf"))
        n_odd = tl.sum(tl.where(normal, 0, 1), axis=0)
        if n_odd == 0:
            t = _quantize_fast(y, scale[:, None], True)
        else:
            t = _quantize_fast(y, scale[:, None], False)
        _store_q_bits(q_ptr, rows64, stride_qm, cols, m2, t)
    else:
        _store_q(q_ptr, rows64, stride_qm, cols, m2, _quantize_tile(y, scale[:, None]), FLAT, BLOCK_M, BLOCK_K)


@triton.jit
def _load_cols(ptr, rows, cols, cmask, m2, FAST: tl.constexpr):
    """fp32 [1 or BLOCK_M, BLOCK_K] tile of a per-column vector (smooth scales, gamma). FAST (CUDA): loaded
    through a row-broadcast 2-D pointer tile so it gets the activation tile's layout (a 1-D fp32 load gets
    4-wide vectors against bf16's 8 and costs a shared-memory layout conversion, 16 barriers per tile)."""
    if FAST:
        v = tl.load(ptr + 0 * rows[:, None] + cols[None, :], mask=m2, other=0.0).to(tl.float32)
    else:
        v = tl.load(ptr + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    return v


@triton.jit
def _absmax_acc(amax, nan_count, y, FAST: tl.constexpr):
    """Fold one K chunk's (absmax, NaN count) of y into the running per-row ones (see :func:`_absmax`)."""
    a_k, n_k = _absmax(y, FAST)
    if FAST:
        amax = _max_nan(amax, a_k)
    else:
        amax = tl.maximum(amax, a_k)
        nan_count += n_k
    return amax, nan_count


@triton.jit
def _dq_tile(x_row, smooth_ptr, rows, cols, cmask, m2, HAS_SMOOTH: tl.constexpr, FAST: tl.constexpr):
    """fp32 y = x (· smooth) of one [BLOCK_M, BLOCK_K] tile (0 outside m2): what dynamic_quant quantises."""
    y = tl.load(x_row + cols[None, :], mask=m2, other=0.0).to(tl.float32)
    if HAS_SMOOTH:
        y = y * _load_cols(smooth_ptr, rows, cols, cmask, m2, FAST)
    return y


@triton.jit
def _row_scale(amax, nan_count):
    """fp32 per-token scale = absmax / 127 (IEEE division); NaN when the row holds a NaN."""
    s = tl.math.div_rn(amax, tl.full(amax.shape, 127.0, tl.float32))
    return tl.where(nan_count > 0, float("nan"), s)


@triton.jit(do_not_specialize=["M"])
def _dynamic_quant_kernel(x_ptr, smooth_ptr, q_ptr, scale_ptr, M, K,
                          stride_xm, stride_qm,
                          HAS_SMOOTH: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                          SINGLE: tl.constexpr, FLAT_I8: tl.constexpr, FAST: tl.constexpr = False,
                          PDL: tl.constexpr = False):
    """Rows [BLOCK_M] per work item; SINGLE: the row tile [BLOCK_M, BLOCK_K ≥ K] stays in registers, else two
    sweeps over K in BLOCK_K chunks (absmax, then quantise; the second one reads the rows from L1/L2).
    FAST (CUDA): NaN-propagating absmax and the reciprocal + Markstein quotient (:func:`_quantize_fast`),
    bit-identical to the ``div_rn`` path. PDL: as :func:`_qmm_kernel` (row config key ``pdl``)."""
    if PDL:
        pdl_enter()
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_blocks = tl.cdiv(M, BLOCK_M)
    for mb in range(pid, n_blocks, nprog):
        rows = mb * BLOCK_M + tl.arange(0, BLOCK_M)
        rmask = rows < M
        rows64 = rows.to(tl.int64)
        x_row = x_ptr + rows64[:, None] * stride_xm
        if SINGLE:
            cols = tl.arange(0, BLOCK_K)
            cmask = cols < K
            m2 = rmask[:, None] & cmask[None, :]
            y = _dq_tile(x_row, smooth_ptr, rows, cols, cmask, m2, HAS_SMOOTH, FAST)
            amax, nan_count = _absmax(y, FAST)
            scale = _row_scale(amax, nan_count)
            _quant_store(q_ptr, rows64, stride_qm, cols, m2, y, scale, FAST, FLAT_I8, BLOCK_M, BLOCK_K)
        else:
            amax = tl.zeros([BLOCK_M], dtype=tl.float32)
            nan_count = tl.zeros([BLOCK_M], dtype=tl.int32)
            for k0 in range(0, K, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                cmask = cols < K
                m2 = rmask[:, None] & cmask[None, :]
                y = _dq_tile(x_row, smooth_ptr, rows, cols, cmask, m2, HAS_SMOOTH, FAST)
                amax, nan_count = _absmax_acc(amax, nan_count, y, FAST)
            scale = _row_scale(amax, nan_count)
            for k0 in range(0, K, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                cmask = cols < K
                m2 = rmask[:, None] & cmask[None, :]
                y = _dq_tile(x_row, smooth_ptr, rows, cols, cmask, m2, HAS_SMOOTH, FAST)
                _quant_store(q_ptr, rows64, stride_qm, cols, m2, y, scale, FAST, FLAT_I8, BLOCK_M, BLOCK_K)
        tl.store(scale_ptr + rows64, scale, mask=rmask)


@triton.jit
def _rms_quant_row_tile(x_row, r_row, cols, m2, HAS_RES: tl.constexpr):
    """fp32 s = x (+ residual): the norm reads this unrounded sum (reference/quant.py)."""
    h = tl.load(x_row + cols[None, :], mask=m2, other=0.0).to(tl.float32)
    if HAS_RES:
        h = h + tl.load(r_row + cols[None, :], mask=m2, other=0.0).to(tl.float32)
    return h


@triton.jit
def _rms_y(h, rms, gamma_ptr, smooth_ptr, rows, cols, cmask, m2, HAS_SMOOTH: tl.constexpr, FAST: tl.constexpr):
    """fp32 y = s / rms · gamma (· smooth) of one tile (IEEE division, as reference/quant.py)."""
    g = _load_cols(gamma_ptr, rows, cols, cmask, m2, FAST)
    y = tl.math.div_rn(h, tl.broadcast_to(rms[:, None], h.shape)) * g
    if HAS_SMOOTH:
        y = y * _load_cols(smooth_ptr, rows, cols, cmask, m2, FAST)
    return y


@triton.jit(do_not_specialize=["M", "eps"])
def _rms_norm_quant_kernel(x_ptr, res_ptr, gamma_ptr, smooth_ptr, q_ptr, scale_ptr, res_out_ptr, M, K,
                           stride_xm, stride_rm, stride_qm, stride_om, eps,
                           HAS_RES: tl.constexpr, HAS_SMOOTH: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, SINGLE: tl.constexpr,
                           FLAT_I8: tl.constexpr, FAST: tl.constexpr = False, PDL: tl.constexpr = False):
    """As :func:`_dynamic_quant_kernel` (SINGLE: rows in registers; else three sweeps: Σs², absmax,
    quantise); FAST (CUDA) changes only the quantisation step (bit-identical). PDL: as :func:`_qmm_kernel`."""
    if PDL:
        pdl_enter()
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_blocks = tl.cdiv(M, BLOCK_M)
    for mb in range(pid, n_blocks, nprog):
        rows = mb * BLOCK_M + tl.arange(0, BLOCK_M)
        rmask = rows < M
        rows64 = rows.to(tl.int64)
        x_row = x_ptr + rows64[:, None] * stride_xm
        r_row = res_ptr + rows64[:, None] * stride_rm
        o_row = res_out_ptr + rows64[:, None] * stride_om
        if SINGLE:
            cols = tl.arange(0, BLOCK_K)
            cmask = cols < K
            m2 = rmask[:, None] & cmask[None, :]
            h = _rms_quant_row_tile(x_row, r_row, cols, m2, HAS_RES)
            tl.store(o_row + cols[None, :], h.to(res_out_ptr.dtype.element_ty), mask=m2)
            ms = tl.math.div_rn(tl.sum(h * h, axis=1), tl.full([BLOCK_M], K, tl.float32))
            rms = tl.math.sqrt_rn(ms + eps)
            y = _rms_y(h, rms, gamma_ptr, smooth_ptr, rows, cols, cmask, m2, HAS_SMOOTH, FAST)
            y = tl.where(m2, y, 0.0)
            amax, nan_count = _absmax(y, FAST)
            scale = _row_scale(amax, nan_count)
            _quant_store(q_ptr, rows64, stride_qm, cols, m2, y, scale, FAST, FLAT_I8, BLOCK_M, BLOCK_K)
        else:
            ss = tl.zeros([BLOCK_M], dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                m2 = rmask[:, None] & (cols < K)[None, :]
                h = _rms_quant_row_tile(x_row, r_row, cols, m2, HAS_RES)
                tl.store(o_row + cols[None, :], h.to(res_out_ptr.dtype.element_ty), mask=m2)
                ss += tl.sum(h * h, axis=1)
            rms = tl.math.sqrt_rn(tl.math.div_rn(ss, tl.full([BLOCK_M], K, tl.float32)) + eps)
            amax = tl.zeros([BLOCK_M], dtype=tl.float32)
            nan_count = tl.zeros([BLOCK_M], dtype=tl.int32)
            for k0 in range(0, K, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                cmask = cols < K
                m2 = rmask[:, None] & cmask[None, :]
                h = _rms_quant_row_tile(x_row, r_row, cols, m2, HAS_RES)
                y = _rms_y(h, rms, gamma_ptr, smooth_ptr, rows, cols, cmask, m2, HAS_SMOOTH, FAST)
                y = tl.where(m2, y, 0.0)
                amax, nan_count = _absmax_acc(amax, nan_count, y, FAST)
            scale = _row_scale(amax, nan_count)
            for k0 in range(0, K, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                cmask = cols < K
                m2 = rmask[:, None] & cmask[None, :]
                h = _rms_quant_row_tile(x_row, r_row, cols, m2, HAS_RES)
                y = _rms_y(h, rms, gamma_ptr, smooth_ptr, rows, cols, cmask, m2, HAS_SMOOTH, FAST)
                _quant_store(q_ptr, rows64, stride_qm, cols, m2, y, scale, FAST, FLAT_I8, BLOCK_M, BLOCK_K)
        tl.store(scale_ptr + rows64, scale, mask=rmask)


@functools.lru_cache(maxsize=None)
def _tables() -> dict:
    """``{backend: table}`` of configs/<backend>/quant.json with every row-op config checked once."""
    cfgs = load_configs("quant")
    for name, table in cfgs.items():
        for op in ROW_OPS:
            if op in table:
                shared = {k: v for k, v in table[op].items() if k != "buckets"}
                for i, b in enumerate(table[op].get("buckets", [{"config": {}}])):
                    check_row_config({**shared, **b["config"]},
                                     f"ops/triton/configs/{name}/quant.json {op} config {i}: ")
    return cfgs


def row_config(op: str, M: int, key: str) -> dict:
    """Row op ``op``'s config for M rows from table ``key`` ("cuda" / "ascend"): the section's keys, updated by
    its first bucket matching ``M`` (grammar: :mod:`ops.triton._common`). Returns a new dict."""
    return resolve(_tables()[key][op], M=M)


@functools.lru_cache(maxsize=4096, typed=True)
def row_launch(op: str, M: int, K: int, key: str) -> tuple:
    """The (memoised) launch tuple of :func:`make_row_launch` for ``op`` on M × K from table ``key``."""
    return make_row_launch(row_config(op, M, key), M, K)


_ROW_KEYS = {"max_block_k", "tile_elems", "block_m", "num_warps", "grid_cap", "num_stages", "fast",
             "flat_int8_store", "pdl"}


def check_row_config(cfg: dict, where: str = "") -> None:
    """Raise ValueError for a row-op config (dynamic_quant / rms_norm_dynamic_quant) that names an unknown key, has
    a max_block_k that is not a power of two or a pdl that is not true / false (0 / 1); KeyError when it lacks
    max_block_k, num_warps, or both tile_elems and block_m. ``where`` prefixes the message."""
    unknown = sorted(set(cfg) - _ROW_KEYS)
    if unknown:
        raise ValueError(f"{where}unknown row config key(s) {unknown}; the keys are {sorted(_ROW_KEYS)}")
    for k in ("max_block_k", "num_warps"):
        if k not in cfg:
            raise KeyError(f"{where}row config needs {k!r} (it has {sorted(cfg)})")
    if "tile_elems" not in cfg and "block_m" not in cfg:
        raise KeyError(f"{where}row config needs 'tile_elems' or 'block_m' (it has {sorted(cfg)})")
    v = cfg["max_block_k"]
    if not_pow2_int(v):
        raise ValueError(f"{where}row config max_block_k must be a power of two (a tl.arange length), got {v!r}")
    if cfg.get("pdl", False) not in (True, False):
        raise ValueError(f"{where}row config pdl must be true or false (or 0 / 1), got {cfg['pdl']!r}")


def make_row_launch(cfg: dict, M: int, K: int) -> tuple:
    """Launch tuple (BLOCK_M, BLOCK_K, SINGLE, grid, num_warps, FLAT_I8, FAST, num_stages, pdl) from one row config:
    ``max_block_k`` (the row stays in registers when next_pow2(K) ≤ it, else BLOCK_K-wide sweeps), ``tile_elems``
    (BLOCK_M = tile_elems // BLOCK_K rows per work item, at most 64) or ``block_m`` (explicit), ``num_warps``,
    ``grid_cap`` (0 = one program per work item, else a persistent loop), optional ``num_stages``, ``fast`` (CUDA
    quotient path), ``flat_int8_store`` and ``pdl`` (programmatic dependent launch where the device takes it)."""
    check_row_config(cfg)
    kp = _np2(max(K, 1))
    block_k = min(kp, int(cfg["max_block_k"]))
    single = kp <= int(cfg["max_block_k"])
    bm = int(cfg["block_m"]) if "block_m" in cfg else int(cfg["tile_elems"]) // block_k
    if "block_m" in cfg and (bm < 1 or bm & (bm - 1)):
        raise ValueError(f"config block_m must be a power of two ≥ 1 (a Triton block), got {bm}")
    block_m = max(1, min(bm, _np2(max(M, 1)), 64))
    n_blocks = _cdiv(M, block_m)
    return (block_m, block_k, single, capped_grid(n_blocks, int(cfg.get("grid_cap", 0))), int(cfg["num_warps"]),
            bool(cfg.get("flat_int8_store", False)), bool(cfg.get("fast", False)), int(cfg.get("num_stages", 0)),
            bool(cfg.get("pdl", False)))


def _row_launch_for(op: str, M: int, K: int, device: torch.device, config: dict | None,
                    backend_key: str | None) -> tuple:
    if config is not None:
        return make_row_launch(config, M, K)
    return row_launch(op, M, K, backend_key or _backend_key(device))


def _flatten_rows(x: torch.Tensor) -> torch.Tensor:
    """[..., K] → [rows, K] with a unit last stride (the kernels address columns as ``row + k``: a
    runtime inner stride makes triton-ascend fall back to gathers)."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(1) == 1 or x2.shape[1] == 1 else x2.contiguous()


# ----------------------------------------------------------------------------------------------
# public launchers
# ----------------------------------------------------------------------------------------------
def supports_reason_dynamic_quant(x, *, smooth_scales=None) -> str | None:
    """Why the Triton kernel cannot take these inputs (None = it can)."""
    if not isinstance(x, torch.Tensor) or x.dtype not in _FLOAT_DTYPES:
        return "x must be a fp16/bf16/fp32 tensor"
    if x.dim() < 1:
        return "x must have at least 1 dim"
    if smooth_scales is not None and (smooth_scales.dtype not in _FLOAT_DTYPES or smooth_scales.device != x.device):
        return "smooth_scales must be a float tensor on x's device"
    return None


def dynamic_quant(x: torch.Tensor, *, smooth_scales: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-token int8 quantisation (SmoothQuant), mirrors ``torch_npu.npu_dynamic_quant``.

    x: [..., K] fp16/bf16/fp32; smooth_scales: [K] float or None (multiplied in fp32).
    Returns (x_int8 [..., K] int8, scale [...] fp32, the per-token scale): ``y = x·smooth``,
    ``scale = max|y| / 127``, ``q = clamp(round_half_even(y / scale), −127, 127)``. An all-zero row gives
    q = 0, scale = 0; a row holding NaN gives scale = NaN (its q is 0).
    Raises nothing itself: inputs are not validated here (ops/quant.py checks them and raises TypeError /
    ValueError naming the argument); see :func:`supports_reason_dynamic_quant` for what this kernel refuses.
    """
    return dynamic_quant_config(x, smooth_scales=smooth_scales)


def dynamic_quant_config(x: torch.Tensor, *, smooth_scales: torch.Tensor | None = None, config: dict | None = None,
                         backend_key: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`dynamic_quant` with an explicit row ``config`` (keys of :func:`make_row_launch`) and/or config
    table ``backend_key`` ("cuda" / "ascend") — for perf sweeps and for tests that run the CUDA configs under
    the interpreter."""
    K = x.shape[-1]
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    x2 = _flatten_rows(x)
    M = x2.shape[0]
    if M == 0 or K == 0:
        return q, scale.zero_()
    block_m, block_k, single, grid, warps, flat, fast, stages, pdl = _row_launch_for(
        "dynamic_quant", M, K, x.device, config, backend_key)
    s = _unit_inner(smooth_scales) if smooth_scales is not None else x2     # per-column vectors: ptr + col
    launch = dict(num_warps=warps)
    if stages and x.device.type == "cuda":
        launch["num_stages"] = stages
    launch.update(pdl_kwargs(x.device, pdl))
    _dynamic_quant_kernel[(grid,)](x2, s, q, scale, M, K, x2.stride(0), K,
                                   HAS_SMOOTH=smooth_scales is not None, BLOCK_M=block_m, BLOCK_K=block_k,
                                   SINGLE=single, FLAT_I8=flat, FAST=fast, **launch)
    return q, scale


def supports_reason_rms_norm_dynamic_quant(x, gamma, *, epsilon=1e-6, residual=None, smooth_scales=None) -> str | None:
    """Why the Triton kernel cannot take these inputs (None = it can)."""
    r = supports_reason_dynamic_quant(x, smooth_scales=smooth_scales)
    if r:
        return r
    if not isinstance(gamma, torch.Tensor) or gamma.dtype not in _FLOAT_DTYPES:
        return "gamma must be a float tensor"
    if residual is not None and (residual.dtype not in _FLOAT_DTYPES or residual.shape != x.shape):
        return "residual must be a float tensor shaped like x"
    if residual is not None and x.dtype == torch.bfloat16 and x.device.type == "cpu":
        return _bf16_cpu_output_reason("residual_out")
    return None


def rms_norm_dynamic_quant(x: torch.Tensor, gamma: torch.Tensor, *, epsilon: float = 1e-6,
                           residual: torch.Tensor | None = None,
                           smooth_scales: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(residual add →) fp32 RmsNorm → smooth → per-token int8 quant, one pass over each row.

    x, residual: [..., K] fp16/bf16/fp32; gamma: [K]; smooth_scales: [K] or None; epsilon: float.
    Returns (x_int8 [..., K] int8, scale [...] fp32 per-token scale, residual_out [..., K] x.dtype = x + residual).
    Mirrors ``torch_npu.npu_add_rms_norm_dynamic_quant``; semantics in reference/quant.py.
    Raises nothing itself: inputs are not validated here (ops/quant.py checks them and raises TypeError /
    ValueError naming the argument); see :func:`supports_reason_rms_norm_dynamic_quant` for what this kernel refuses.
    """
    return rms_norm_dynamic_quant_config(x, gamma, epsilon=epsilon, residual=residual, smooth_scales=smooth_scales)


def rms_norm_dynamic_quant_config(x: torch.Tensor, gamma: torch.Tensor, *, epsilon: float = 1e-6,
                                  residual: torch.Tensor | None = None, smooth_scales: torch.Tensor | None = None,
                                  config: dict | None = None, backend_key: str | None = None
                                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`rms_norm_dynamic_quant` with an explicit row ``config`` and/or config table ``backend_key``."""
    K = x.shape[-1]
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    res_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    x2 = _flatten_rows(x)
    M = x2.shape[0]
    if M == 0:
        return q, scale, res_out
    r2 = _flatten_rows(residual) if residual is not None else x2
    block_m, block_k, single, grid, warps, flat, fast, stages, pdl = _row_launch_for(
        "rms_norm_dynamic_quant", M, K, x.device, config, backend_key)
    gamma = _unit_inner(gamma)                                              # per-column vectors: ptr + col
    s = _unit_inner(smooth_scales) if smooth_scales is not None else gamma
    launch = dict(num_warps=warps)
    if stages and x.device.type == "cuda":
        launch["num_stages"] = stages
    launch.update(pdl_kwargs(x.device, pdl))
    _rms_norm_quant_kernel[(grid,)](x2, r2, gamma, s, q, scale, res_out, M, K,
                                    x2.stride(0), r2.stride(0), K, K, float(epsilon),
                                    HAS_RES=residual is not None, HAS_SMOOTH=smooth_scales is not None,
                                    BLOCK_M=block_m, BLOCK_K=block_k, SINGLE=single, FLAT_I8=flat, FAST=fast,
                                    **launch)
    return q, scale, res_out


def compile_cases(table: str = "ascend") -> list[dict]:
    """(kernel × row config of ``table``) cases: each config of dynamic_quant / rms_norm_dynamic_quant with the row
    in registers and swept (BLOCK_K max_block_k and 512), smooth or not, bf16 / fp16 x; dict(name, fn, signature,
    constexprs, num_warps)."""
    cfgs = _tables()[table]
    cases: list[dict] = []
    for op, fn in (("dynamic_quant", _dynamic_quant_kernel), ("rms_norm_dynamic_quant", _rms_norm_quant_kernel)):
      for bi, b in enumerate(cfgs[op].get("buckets", [{"config": {}}])):
        c = {**{k: v for k, v in cfgs[op].items() if k != "buckets"}, **b["config"]}
        mb = int(c["max_block_k"])
        bm = int(c["block_m"]) if "block_m" in c else int(c["tile_elems"]) // mb
        bm512 = int(c["block_m"]) if "block_m" in c else int(c["tile_elems"]) // 512
        for single, block_k, block_m in ((True, mb, max(1, bm)), (False, mb, max(1, bm)), (True, 512, bm512)):
            for smooth in (False, True):
                for dt in ("*bf16", "*fp16"):
                    if op == "dynamic_quant":
                        sig = {"x_ptr": dt, "smooth_ptr": "*fp32", "q_ptr": "*i8", "scale_ptr": "*fp32", "M": "i32",
                               "K": "i32", "stride_xm": "i32", "stride_qm": "i32",
                               "HAS_SMOOTH": "constexpr", "BLOCK_M": "constexpr", "BLOCK_K": "constexpr",
                               "SINGLE": "constexpr", "FLAT_I8": "constexpr", "FAST": "constexpr"}
                        ce = dict(HAS_SMOOTH=smooth, BLOCK_M=block_m, BLOCK_K=block_k, SINGLE=single,
                                  FLAT_I8=bool(c.get("flat_int8_store", False)), FAST=bool(c.get("fast", False)))
                    else:
                        sig = {"x_ptr": dt, "res_ptr": dt, "gamma_ptr": dt, "smooth_ptr": "*fp32", "q_ptr": "*i8",
                               "scale_ptr": "*fp32", "res_out_ptr": dt, "M": "i32", "K": "i32", "stride_xm": "i32",
                               "stride_rm": "i32", "stride_qm": "i32",
                               "stride_om": "i32", "eps": "fp32", "HAS_RES": "constexpr", "HAS_SMOOTH": "constexpr",
                               "BLOCK_M": "constexpr", "BLOCK_K": "constexpr",
                               "SINGLE": "constexpr", "FLAT_I8": "constexpr", "FAST": "constexpr"}
                        ce = dict(HAS_RES=True, HAS_SMOOTH=smooth, BLOCK_M=block_m,
                                  BLOCK_K=block_k, SINGLE=single, FLAT_I8=bool(c.get("flat_int8_store", False)),
                                  FAST=bool(c.get("fast", False)))
                    sig["PDL"] = "constexpr"
                    ce["PDL"] = bool(c.get("pdl", False)) and table == "cuda"
                    name = f"{op}_{'single' if single else 'chunked'}_bm{block_m}_bk{block_k}_{'smooth' if smooth else 'plain'}_{dt[1:]}"
                    if "buckets" in cfgs[op]:
                        name += f"_b{bi}"
                    cases.append(dict(name=name, fn=fn, signature=sig, constexprs=ce, num_warps=int(c["num_warps"])))
    return cases


def ascend_compile_cases() -> list[dict]:
    """The Ascend table's row-kernel cases (:func:`compile_cases`) for the triton-ascend 3.2 + bishengir check."""
    return compile_cases("ascend")


__all__ = ["dynamic_quant", "dynamic_quant_config", "rms_norm_dynamic_quant", "rms_norm_dynamic_quant_config",
           "supports_reason_dynamic_quant", "supports_reason_rms_norm_dynamic_quant", "row_config", "row_launch",
           "make_row_launch", "check_row_config", "compile_cases", "ascend_compile_cases"]
