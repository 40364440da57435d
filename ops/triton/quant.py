"""Triton kernels for SmoothQuant W8A8: ``ds::dynamic_quant``, ``ds::rms_norm_dynamic_quant``, ``ds::quant_matmul``.

One source for CUDA (triton ≥ 3.2, tested with 3.6 on the H200), Ascend (triton-ascend 3.2) and the CPU
interpreter (``TRITON_INTERPRET=1``). Launch configs are data: ``ops/triton/configs/quant.json``, keyed
``"cuda"`` / ``"ascend"`` (the interpreter uses ``"ascend"`` so CI exercises the persistent-loop path).

Kernels
-------
* :func:`dynamic_quant` — one pass over each row (the whole row stays in registers when
  ``K ≤ max_block_k``; otherwise two sweeps: absmax, then quantise): ``y = x·smooth`` (fp32),
  ``scale = max|y| / 127``, ``q = rint(y / scale)`` clamped to [−127, 127], round half to even.
* :func:`rms_norm_dynamic_quant` — the same with an optional residual add and an fp32 RmsNorm in front
  (``x / sqrt(mean(x²) + eps) · gamma``, division not rsqrt-multiply, like the reference).
* :func:`quant_matmul` — ``out = (Σ_k x[m,k]·w[k,n]) · weight_scale[n] · x_scale[m] (+ bias[n])``:
  int8 ``tl.dot`` with an int32 accumulator (``out_dtype=tl.int32`` spelled out for triton 3.6),
  fp32 epilogue fused. Small M splits K into int32 partial sums (plain stores into a workspace
  ``[split, M, N]``) that either a tiny epilogue kernel adds (``reduce: "kernel"``) or the last-arriving split
  of each tile adds itself (``reduce: "atomic"``, CUDA: an int32 counter per tile, one launch). int32
  addition is exact, so both are deterministic and bit-identical.
  Decode variant ``mma: "gemv_stream"`` (M ≤ 4, :func:`_qmm_gemv_kernel`): no MMA, a weight-streaming
  grid of SMs × programs_per_sm programs with register-direct vector loads, int32 products accumulated
  elementwise over K (optionally ``dp4a`` on CUDA) and one reduction per output.
  Bucket key ``k_batch`` (:func:`_qmm_batched_k`): each K step as k_batch slices in one batched (3-D) dot into
  k_batch int32 accumulators, summed at the end; the narrow decode tiles use it on CUDA (one warp per slice).

CUDA row-kernel fast path (config ``fast``; Ascend keeps ``div_rn``): one IEEE reciprocal per row and a
Markstein correction per element give the correctly rounded ``y / scale`` (:func:`_quantize_fast`), the
absmax reduction propagates NaN, per-column vectors load in the activation tile's layout. Bit-identical
to the ``div_rn`` path.

Portability notes (DESIGN §Triton portability)
----------------------------------------------
* Round half to even is ``(v + 1.5·2²³) − 1.5·2²³`` on fp32 (exact for |v| < 2²², and |v| ≤ 127 here
  after the clamp): no ``libdevice.rint`` (CUDA-only).
* ``y / scale`` and the RmsNorm division/sqrt use ``tl.math.div_rn`` / ``tl.math.sqrt_rn`` (IEEE,
  correctly rounded): Triton's plain fp32 ``/`` on CUDA is ``div.full.f32`` (≤ 2 ulp), which moves
  values across rounding ties (1.5 → 1.4999999 → 1 instead of 2).
* No host synchronisation; M = 0 returns empty tensors without a launch; offsets into x / out / the
  weight are formed in int64.

Weights: ``quant_matmul`` takes the weight *logically* as ``[K, N]`` and reads it through its strides.
The fast layout is K-major on CUDA (Hopper's int8 MMA wants both operands K-major): keep ``[N, K]``
contiguous and pass its ``.t()``. ``reference.quant.pack_weight`` produces that layout once, offline.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ._common import (backend_key as _backend_key, bf16_cpu_output_reason as _bf16_cpu_output_reason,
                      cdiv as _cdiv, load_configs, next_power_of_2 as _np2, sm_count as _sm_count,
                      unit_inner as _unit_inner)
from ._pdl import pdl_enter, pdl_kwargs

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@functools.lru_cache(maxsize=None)
def _all_configs() -> dict:
    """configs/quant.json, every quant_matmul bucket and row-op config of every table checked once
    (:func:`_check_bucket`, :func:`_check_row_config`)."""
    cfgs = load_configs("quant")
    for table, sec in cfgs.items():
        if not isinstance(sec, dict):
            continue
        if "quant_matmul" in sec:
            for i, b in enumerate(sec["quant_matmul"]["buckets"]):
                _check_bucket(b, f"ops/triton/configs/quant.json [{table!r}] quant_matmul bucket {i}: ")
        for op in ("dynamic_quant", "rms_norm_dynamic_quant"):
            if op in sec:
                for i, b in enumerate(sec[op].get("buckets", [sec[op]])):
                    _check_row_config(b, f"ops/triton/configs/quant.json [{table!r}] {op} config {i}: ")
    return cfgs


def _config(op: str, device: torch.device) -> dict:
    return _all_configs()[_backend_key(device)][op]


def _split_target(cfg: dict, device: torch.device) -> int:
    t = int(cfg.get("split_target", 0))
    if t > 0:
        return t
    if device.type == "cuda":
        return _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return 20


def _grid(n_items: int, cap: int) -> int:
    return max(1, min(n_items, cap) if cap > 0 else n_items)


# ==============================================================================================
# per-token dynamic quantisation (shared device helper)
# ==============================================================================================
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


def _row_bucket(cfg: dict, M: int) -> dict:
    """A row op's config: its M bucket (:func:`_bucket`), or ``cfg`` itself when it has no buckets (flat)."""
    return _bucket(M, cfg) if "buckets" in cfg else cfg


@functools.lru_cache(maxsize=4096, typed=True)
def _cached_row_launch(op: str, M: int, K: int, key: str) -> tuple:
    return _make_row_launch(_row_bucket(_all_configs()[key][op], M), M, K)


def _not_pow2_int(v) -> bool:
    """Whether a config value is not a power-of-two int (bools refused): tile lengths, max_block_k, k_batch."""
    return isinstance(v, bool) or not isinstance(v, int) or v < 1 or bool(v & (v - 1))


_ROW_KEYS = {"max_m", "max_block_k", "tile_elems", "block_m", "num_warps", "grid_cap", "num_stages", "fast",
             "flat_int8_store", "pdl"}


def _check_row_config(cfg: dict, where: str = "") -> None:
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
    if _not_pow2_int(v):
        raise ValueError(f"{where}row config max_block_k must be a power of two (a tl.arange length), got {v!r}")
    if cfg.get("pdl", False) not in (True, False):
        raise ValueError(f"{where}row config pdl must be true or false (or 0 / 1), got {cfg['pdl']!r}")


def _make_row_launch(cfg: dict, M: int, K: int) -> tuple:
    """Launch tuple (BLOCK_M, BLOCK_K, SINGLE, grid, num_warps, FLAT_I8, FAST, num_stages, pdl) from one row config:
    ``max_block_k`` (the row stays in registers when next_pow2(K) ≤ it, else BLOCK_K-wide sweeps), ``tile_elems``
    (BLOCK_M = tile_elems // BLOCK_K rows per work item, at most 64) or ``block_m`` (explicit), ``num_warps``,
    ``grid_cap`` (0 = one program per work item, else a persistent loop), optional ``num_stages``, ``fast`` (CUDA
    quotient path), ``flat_int8_store`` and ``pdl`` (programmatic dependent launch where the device takes it)."""
    _check_row_config(cfg)
    kp = _np2(max(K, 1))
    block_k = min(kp, int(cfg["max_block_k"]))
    single = kp <= int(cfg["max_block_k"])
    bm = int(cfg["block_m"]) if "block_m" in cfg else int(cfg["tile_elems"]) // block_k
    if "block_m" in cfg and (bm < 1 or bm & (bm - 1)):
        raise ValueError(f"config block_m must be a power of two ≥ 1 (a Triton block), got {bm}")
    block_m = max(1, min(bm, _np2(max(M, 1)), 64))
    n_blocks = _cdiv(M, block_m)
    return (block_m, block_k, single, _grid(n_blocks, int(cfg.get("grid_cap", 0))), int(cfg["num_warps"]),
            bool(cfg.get("flat_int8_store", False)), bool(cfg.get("fast", False)), int(cfg.get("num_stages", 0)),
            bool(cfg.get("pdl", False)))


def _row_launch_for(op: str, M: int, K: int, device: torch.device, config: dict | None,
                    backend_key: str | None) -> tuple:
    if config is not None:
        return _make_row_launch(config, M, K)
    return _cached_row_launch(op, M, K, backend_key or _backend_key(device))


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
    """:func:`dynamic_quant` with an explicit row ``config`` (keys of :func:`_make_row_launch`) and/or config
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


# ==============================================================================================
# quant_matmul
# ==============================================================================================
# K, N, K_PER_SPLIT stay specialised: their divisibility by 16 lets the loads vectorise (10x measured)
@triton.jit
def _qmm_store_out(acc, ws_ptr, xs_ptr, bias_ptr, out_ptr, om, on, mmask, nmask, stride_om, HAS_BIAS: tl.constexpr):
    """The fp32 epilogue of an int32 tile: out[om, on] = acc · weight_scale[on] · x_scale[om] (+ bias[on]), cast."""
    ws = tl.load(ws_ptr + on, mask=nmask, other=0.0).to(tl.float32)
    xs = tl.load(xs_ptr + om, mask=mmask, other=0.0).to(tl.float32)
    o = acc.to(tl.float32) * ws[None, :] * xs[:, None]
    if HAS_BIAS:
        o = o + tl.load(bias_ptr + on, mask=nmask, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + om.to(tl.int64)[:, None] * stride_om + on[None, :], o.to(out_ptr.dtype.element_ty),
             mask=mmask[:, None] & nmask[None, :])


@triton.jit
def _qmm_store_row(acc, ws, xs, bias, out_ptr, m: tl.constexpr, on, nmask, stride_om, HAS_BIAS: tl.constexpr):
    """:func:`_qmm_store_out`'s arithmetic for one token row m with the per-column vectors already loaded
    (``ws`` / ``bias`` [BLOCK_N] fp32, ``xs`` fp32 scalar): out[m, on] = acc · ws · xs (+ bias), same order."""
    o = acc.to(tl.float32) * ws * xs
    if HAS_BIAS:
        o = o + bias
    tl.store(out_ptr + (on.to(tl.int64) + m * stride_om), o.to(out_ptr.dtype.element_ty), mask=nmask)


@triton.jit
def _qmm_kstep(acc, a_ptrs, b_ptrs, k, k_len, rk, mmask, nmask, EVEN_K: tl.constexpr, WRAP: tl.constexpr,
               MASK_M: tl.constexpr, MMA: tl.constexpr):
    """One K step of :func:`_qmm_item`: loads the x tile at ``a_ptrs`` and the weight tile at ``b_ptrs`` (K offset
    ``k`` of ``k_len``; masks as the item's flags say) and returns acc + x·w (MMA 0) or accT + wT·xT (MMA 1)."""
    if EVEN_K:
        if WRAP:
            if MASK_M:
                a = tl.load(a_ptrs, mask=mmask[:, None], other=0)
            else:
                a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        elif MMA == 0:
            a = tl.load(a_ptrs, mask=mmask[:, None], other=0)
            b = tl.load(b_ptrs, mask=nmask[None, :], other=0)
        else:
            a = tl.load(a_ptrs, mask=mmask[:, None], other=0)
            b = tl.load(b_ptrs, mask=nmask[:, None], other=0)
    else:
        kmask = (k + rk) < k_len
        if WRAP:
            if MASK_M:
                a = tl.load(a_ptrs, mask=mmask[:, None] & kmask[None, :], other=0)
            else:
                a = tl.load(a_ptrs, mask=kmask[None, :], other=0)
            if MMA == 0:
                b = tl.load(b_ptrs, mask=kmask[:, None], other=0)
            else:
                b = tl.load(b_ptrs, mask=kmask[None, :], other=0)
        else:
            a = tl.load(a_ptrs, mask=mmask[:, None] & kmask[None, :], other=0)
            if MMA == 0:
                b = tl.load(b_ptrs, mask=kmask[:, None] & nmask[None, :], other=0)
            else:
                b = tl.load(b_ptrs, mask=nmask[:, None] & kmask[None, :], other=0)
    if MMA == 0:
        return tl.dot(a, b, acc, out_dtype=tl.int32)
    else:
        return tl.dot(b, tl.trans(a), acc, out_dtype=tl.int32)


@triton.jit
def _qmm_kstep3(acc, a_ptrs, b_ptrs, k, k_len, kk, mmask, nmask, EVEN_K: tl.constexpr, WRAP: tl.constexpr,
                MASK_M: tl.constexpr):
    """One K step of :func:`_qmm_item` with K_BATCH > 1: x tile [K_BATCH, BM, BK/K_BATCH] and weight tile
    [K_BATCH, BK/K_BATCH, BN] (``kk`` [K_BATCH, BK/K_BATCH]: their K offsets in the step), one batched dot."""
    if EVEN_K:
        if WRAP:
            if MASK_M:
                a = tl.load(a_ptrs, mask=mmask[None, :, None], other=0)
            else:
                a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=mmask[None, :, None], other=0)
            b = tl.load(b_ptrs, mask=nmask[None, None, :], other=0)
    else:
        kmask = (k + kk) < k_len
        if WRAP:
            if MASK_M:
                a = tl.load(a_ptrs, mask=mmask[None, :, None] & kmask[:, None, :], other=0)
            else:
                a = tl.load(a_ptrs, mask=kmask[:, None, :], other=0)
            b = tl.load(b_ptrs, mask=kmask[:, :, None], other=0)
        else:
            a = tl.load(a_ptrs, mask=mmask[None, :, None] & kmask[:, None, :], other=0)
            b = tl.load(b_ptrs, mask=kmask[:, :, None] & nmask[None, None, :], other=0)
    return tl.dot(a, b, acc, out_dtype=tl.int32)


@triton.jit
def _qmm_k(x_ptr, w_ptr, rm, rn, k_start, k_len, mmask, nmask, stride_xm, stride_wk, stride_wn,
           W_LAYOUT: tl.constexpr, WRAP: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr,
           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MASK_M: tl.constexpr, MMA: tl.constexpr):
    """The int32 tile [BLOCK_M, BLOCK_N] of x rows ``rm`` × weight columns ``rn`` over K [k_start, k_start + k_len)
    in BLOCK_K steps (one 2-D dot per step; MMA 1 = swap-AB)."""
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = x_ptr + (rm.to(tl.int64)[:, None] * stride_xm + (k_start + rk)[None, :])
    if MMA == 0:
        if W_LAYOUT == 0:
            b_ptrs = w_ptr + ((k_start + rk)[:, None] + rn.to(tl.int64)[None, :] * stride_wn)
        elif W_LAYOUT == 1:
            b_ptrs = w_ptr + ((k_start + rk).to(tl.int64)[:, None] * stride_wk + rn[None, :])
        else:
            b_ptrs = w_ptr + ((k_start + rk).to(tl.int64)[:, None] * stride_wk + rn.to(tl.int64)[None, :] * stride_wn)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    else:  # the weight tile transposed: [BLOCK_N, BLOCK_K]
        if W_LAYOUT == 0:
            b_ptrs = w_ptr + (rn.to(tl.int64)[:, None] * stride_wn + (k_start + rk)[None, :])
        elif W_LAYOUT == 1:
            b_ptrs = w_ptr + (rn[:, None] + (k_start + rk).to(tl.int64)[None, :] * stride_wk)
        else:
            b_ptrs = w_ptr + (rn.to(tl.int64)[:, None] * stride_wn + (k_start + rk).to(tl.int64)[None, :] * stride_wk)
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.int32)   # accT
    for k in range(0, k_len, BLOCK_K):
        acc = _qmm_kstep(acc, a_ptrs, b_ptrs, k, k_len, rk, mmask, nmask, EVEN_K, WRAP, MASK_M, MMA)
        a_ptrs += BLOCK_K
        if W_LAYOUT == 0:
            b_ptrs += BLOCK_K
        else:
            b_ptrs += BLOCK_K * stride_wk
    if MMA == 1:
        acc = tl.trans(acc)
    return acc


@triton.jit
def _qmm_batched_k(x_ptr, w_ptr, rm, rn, k_start, k_len, mmask, nmask, stride_xm, stride_wk, stride_wn,
                   W_LAYOUT: tl.constexpr, WRAP: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MASK_M: tl.constexpr, K_BATCH: tl.constexpr):
    """:func:`_qmm_k` with each BLOCK_K step cut into K_BATCH slices of BLOCK_K / K_BATCH, multiplied as one batched
    (3-D) dot into K_BATCH int32 accumulators that are summed at the end (exact: the same int32 sum). On CUDA, with
    K_BATCH = num_warps, Triton lays the 3-D mma.sync dot out one warp per slice, so a narrow tile (BM 16, BN 16)
    gets short accumulator chains per warp instead of one long chain repeated by two warps each."""
    BKS: tl.constexpr = BLOCK_K // K_BATCH
    kk = tl.arange(0, K_BATCH)[:, None] * BKS + tl.arange(0, BKS)[None, :]    # [K_BATCH, BKS] offsets in a step
    a_ptrs = x_ptr + (rm.to(tl.int64)[None, :, None] * stride_xm + (k_start + kk)[:, None, :])
    if W_LAYOUT == 0:
        b_ptrs = w_ptr + ((k_start + kk)[:, :, None] + rn.to(tl.int64)[None, None, :] * stride_wn)
    elif W_LAYOUT == 1:
        b_ptrs = w_ptr + ((k_start + kk).to(tl.int64)[:, :, None] * stride_wk + rn[None, None, :])
    else:
        b_ptrs = w_ptr + ((k_start + kk).to(tl.int64)[:, :, None] * stride_wk
                          + rn.to(tl.int64)[None, None, :] * stride_wn)
    acc = tl.zeros((K_BATCH, BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, k_len, BLOCK_K):
        acc = _qmm_kstep3(acc, a_ptrs, b_ptrs, k, k_len, kk, mmask, nmask, EVEN_K, WRAP, MASK_M)
        a_ptrs += BLOCK_K
        if W_LAYOUT == 0:
            b_ptrs += BLOCK_K
        else:
            b_ptrs += BLOCK_K * stride_wk
    return tl.sum(acc, axis=0)


@triton.jit
def _qmm_item(item, x_ptr, w_ptr, ws_ptr, xs_ptr, bias_ptr, out_ptr, part_ptr, cnt_ptr,
              M, N, K, K_PER_SPLIT, SPLIT_K, stride_xm, stride_wk, stride_wn, stride_om, num_pid_m, num_pid_n, n_tiles,
              W_LAYOUT: tl.constexpr, WRAP: tl.constexpr, PARTIALS: tl.constexpr, HAS_BIAS: tl.constexpr,
              EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              GROUP_M: tl.constexpr, REDUCE: tl.constexpr, MASK_M: tl.constexpr, MMA: tl.constexpr,
              K_BATCH: tl.constexpr):
    """One work item of :func:`_qmm_kernel` (inlined): item = split · n_tiles + tile."""
    split = item // n_tiles
    tile = item % n_tiles
    group = GROUP_M * num_pid_n
    first_m = (tile // group) * GROUP_M
    gsize = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % group) % gsize
    pid_n = (tile % group) // gsize
    om = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = om < M
    nmask = on < N
    if WRAP:
        if MASK_M:
            rm = om
        else:
            rm = om % M
        rn = on % N
    else:
        rm = om
        rn = on
    k_start = split * K_PER_SPLIT
    k_len = tl.minimum(K - k_start, K_PER_SPLIT)
    if K_BATCH > 1:
        acc = _qmm_batched_k(x_ptr, w_ptr, rm, rn, k_start, k_len, mmask, nmask, stride_xm, stride_wk, stride_wn,
                             W_LAYOUT, WRAP, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, MASK_M, K_BATCH)
    else:
        acc = _qmm_k(x_ptr, w_ptr, rm, rn, k_start, k_len, mmask, nmask, stride_xm, stride_wk, stride_wn,
                     W_LAYOUT, WRAP, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, MASK_M, MMA)
    omask = mmask[:, None] & nmask[None, :]
    if not PARTIALS:
        _qmm_store_out(acc, ws_ptr, xs_ptr, bias_ptr, out_ptr, om, on, mmask, nmask, stride_om, HAS_BIAS)
    else:
        p = part_ptr + (split.to(tl.int64) * M + om.to(tl.int64)[:, None]) * N + on[None, :]
        tl.store(p, acc, mask=omask)
        if REDUCE:
            tl.debug_barrier()
            arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
            if arrived == SPLIT_K - 1:
                pq = part_ptr + om.to(tl.int64)[:, None] * N + on[None, :]
                for s2 in range(0, SPLIT_K):
                    if s2 != split:
                        acc += tl.load(pq, mask=omask, other=0, cache_modifier=".cg")
                    pq += M.to(tl.int64) * N
                _qmm_store_out(acc, ws_ptr, xs_ptr, bias_ptr, out_ptr, om, on, mmask, nmask, stride_om, HAS_BIAS)
                tl.atomic_xchg(cnt_ptr + tile, 0)


@triton.jit(do_not_specialize=["M", "SPLIT_K"])
def _qmm_kernel(x_ptr, w_ptr, ws_ptr, xs_ptr, bias_ptr, out_ptr, part_ptr, cnt_ptr,
                M, N, K, K_PER_SPLIT, SPLIT_K,
                stride_xm, stride_wk, stride_wn, stride_om,
                W_LAYOUT: tl.constexpr, WRAP: tl.constexpr, PARTIALS: tl.constexpr, HAS_BIAS: tl.constexpr,
                EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                GROUP_M: tl.constexpr, REDUCE: tl.constexpr = False, MASK_M: tl.constexpr = False,
                MMA: tl.constexpr = 0, PDL: tl.constexpr = False, K_BATCH: tl.constexpr = 1):
    """One work item = (split, BLOCK_M × BLOCK_N output tile). PARTIALS False (SPLIT_K == 1): fused fp32
    epilogue; True: int32 partial sums stored to part[split, M, N] for _qmm_epilogue_kernel. SPLIT_K is a
    runtime value so the split choice does not multiply compilations.

    x is read with a unit K stride. W_LAYOUT: 0 = K-major weight (stride_wk == 1, CUDA's packed layout),
    1 = row-major (stride_wn == 1, Ascend's ND layout), 2 = any strides. WRAP (CUDA): rows/columns past
    M/N wrap around (``% M``, never stored) instead of masking the loads; Ascend masks (its pointer
    analysis needs affine offsets). MASK_M (with WRAP): rows past M are masked instead (no load issued): at
    M = 1 a wrapped 16-row x tile is 16 requests for the same bytes from every program at once.

    REDUCE (CUDA, with PARTIALS): no epilogue kernel. After storing its partial, a work item bumps the tile's
    int32 counter ``cnt[tile]`` (acq_rel, after a CTA barrier); the item that sees SPLIT_K − 1 adds the other
    splits' partials (read through L2) to its own, applies the fp32 epilogue, stores ``out`` and resets the
    counter to 0, so ``cnt`` must start zeroed and stays zeroed. int32 addition is exact, so the result does
    not depend on the arrival order (deterministic, bit-identical to the two-kernel path).

    MMA (bucket key ``mma``; CUDA decode variants, 0 everywhere else): 0 ("dot") = ``tl.dot(x[BM, BK], w[BK, BN])``.
    1 ("swap", swap-AB) = the weight tile is loaded as wT[BLOCK_N, BLOCK_K] and ``accT[BN, BM] = tl.dot(wT,
    trans(x))``, so the weight's N fills the MMA's M slot (wgmma needs 64 rows) and the tokens its N slot; both
    operands stay K-major (int8 wgmma needs that) and the int32 tile is transposed back before the epilogue.
    Both add exact int32 products: bit-identical results. (The CUDA-core decode GEMV is a kernel of its own,
    :func:`_qmm_gemv_kernel`; round 5's ``mma: "gemv"`` mode, the persistent ``dynamic`` grid and the
    ``reduce_unroll`` reduction lost in every H200 sweep and are gone.)

    K_BATCH (bucket key ``k_batch``, MMA 0 only; default 1): each BLOCK_K step is K_BATCH slices multiplied as one
    batched dot into K_BATCH accumulators, summed at the end (:func:`_qmm_batched_k`; bit-identical).

    PDL (CUDA sm_90+, bucket key ``pdl``, launched with ``launch_pdl``; :mod:`ops.triton._pdl`): each program first
    lets the next kernel on the stream launch, then waits for the previous one to finish, before it touches any
    memory."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    n_tiles = num_pid_m * num_pid_n
    if PDL:
        pdl_enter()
    for item in range(pid, n_tiles * SPLIT_K, nprog):
        _qmm_item(item, x_ptr, w_ptr, ws_ptr, xs_ptr, bias_ptr, out_ptr, part_ptr, cnt_ptr,
                  M, N, K, K_PER_SPLIT, SPLIT_K, stride_xm, stride_wk, stride_wn, stride_om, num_pid_m, num_pid_n,
                  n_tiles, W_LAYOUT, WRAP, PARTIALS, HAS_BIAS, EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, REDUCE,
                  MASK_M, MMA, K_BATCH)


@triton.jit(do_not_specialize=["M", "SPLIT_K"])
def _qmm_epilogue_kernel(part_ptr, ws_ptr, xs_ptr, bias_ptr, out_ptr, M, N, SPLIT_K, stride_om,
                         HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """out = (Σ_split part[split]) · weight_scale · x_scale (+ bias), splits added in order (deterministic)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    n_tiles = tl.cdiv(M, BLOCK_M) * num_pid_n
    for tile in range(pid, n_tiles, nprog):
        om = (tile // num_pid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        on = (tile % num_pid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        mm = om < M
        mn = on < N
        m2 = mm[:, None] & mn[None, :]
        offs = om.to(tl.int64)[:, None] * N + on[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
        p = part_ptr + offs
        for _s in range(0, SPLIT_K):
            acc += tl.load(p, mask=m2, other=0)
            p += M.to(tl.int64) * N
        _qmm_store_out(acc, ws_ptr, xs_ptr, bias_ptr, out_ptr, om, on, mm, mn, stride_om, HAS_BIAS)


@triton.jit
def _gemv_mac(w, xv, acc, DP4A: tl.constexpr):
    """acc + w·x elementwise in int32. DP4A (CUDA only): w, xv are int32 words of 4 packed int8 and one
    ``dp4a.s32.s32`` adds the 4 byte products to each accumulator; else w, xv are int8 (one product each)."""
    if DP4A:
        acc = tl.inline_asm_elementwise("dp4a.s32.s32 $0, $1, $2, $3;", "=r,r,r,r", [w, xv, acc],
                                        dtype=tl.int32, is_pure=True, pack=1)
    else:
        acc = acc + w.to(tl.int32) * xv.to(tl.int32)
    return acc


@triton.jit
def _gemv_load(ptrs, k, rk, k_len, EVEN_K: tl.constexpr):
    if EVEN_K:
        v = tl.load(ptrs)
    else:
        v = tl.load(ptrs, mask=((k + rk) < k_len)[None, :], other=0)
    return v


@triton.jit
def _gemv_partial_row(r, m: tl.constexpr, split, part_ptr, M, N, on, nmask):
    """Store token row m's int32 partial sums r [BLOCK_N] at part[split, m, on]."""
    tl.store(part_ptr + (split.to(tl.int64) * M + m) * N + on, r, mask=nmask)


@triton.jit
def _gemv_reduce_row(r, m: tl.constexpr, split, part_ptr, M, N, SPLIT_K, on, nmask):
    """r + Σ_{s ≠ split} part[s, m, on] (read through L2): the last-arriving split's total for row m."""
    pq = part_ptr + (on.to(tl.int64) + m * N)
    for s2 in range(0, SPLIT_K):
        if s2 != split:
            r += tl.load(pq, mask=nmask, other=0, cache_modifier=".cg")
        pq += M * N   # M ≤ 4 here; M may be the constant 1 on CUDA (specialised), which has no .to()
    return r


@triton.jit(do_not_specialize=["SPLIT_K"])
def _qmm_gemv_kernel(x_ptr, w_ptr, ws_ptr, xs_ptr, bias_ptr, out_ptr, part_ptr, cnt_ptr, w2_ptr, N1,
                     M, N, K_U, K_PER_SPLIT_U, SPLIT_K, stride_xm_u, stride_wk_u, stride_wn_u, stride_om,
                     MROWS: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_KU: tl.constexpr, PARTIALS: tl.constexpr, REDUCE: tl.constexpr, DP4A: tl.constexpr,
                     PREFETCH: tl.constexpr = False, PDL: tl.constexpr = False, TWO_W: tl.constexpr = False):
    """Streaming GEMV for M = MROWS ≤ 4 token rows (bucket key ``mma: "gemv_stream"``), shaped like a pure
    weight-read kernel: a grid of SMs × ``programs_per_sm`` programs, each taking a contiguous run of work
    items (item = tile · SPLIT_K + split; tile = BLOCK_N weight rows n, split = a K range of K_PER_SPLIT_U);
    per K step one [BLOCK_N, BLOCK_KU] weight tile loads straight to registers (wide vector loads, no shared
    memory, no MMA) and the x rows (tiny, L1/L2 resident) load as the same-layout row-broadcast tile; int32
    products accumulate ELEMENTWISE per (token row, lane element) across the whole K loop, and one sum over K
    per output follows the loop. The fp32 epilogue vectors (weight_scale, bias, x_scale) load before the K loop.

    Units ("_U"): int8 elements, or with DP4A (CUDA ``dp4a.s32.s32``) int32 words of 4 packed K-consecutive
    int8 (K, K_PER_SPLIT, the strides and BLOCK_KU then count words; the launcher checks K % 4 == 0, K-major
    weight, 4-byte aligned rows). PARTIALS: int32 row sums stored to part[split, M, N]; REDUCE (CUDA): the
    last-arriving split of a tile (int32 counter cnt[tile], acq_rel after a CTA barrier) adds the others,
    applies the epilogue and resets the counter (no memset per call); else _qmm_epilogue_kernel does.
    PREFETCH (bucket key ``prefetch``): the weight tile of step k + 1 is loaded (into registers) before step k's
    products, so one step of loads stays in flight during the MACs (ptxas does not unroll the int8 loop).
    Exact int32 sums: bit-identical to every other path.

    PDL: as :func:`_qmm_kernel`. TWO_W (:func:`gemv_stream_int32`; CUDA and the interpreter, not Ascend, whose
    triton-adapter cannot follow a pointer chosen at run time): the weight is two matrices side by side,
    [w | w2] with w's N1 columns first (same strides, N1 % BLOCK_N == 0, so a tile reads one of them); else w2_ptr
    and N1 are not read."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_tiles = tl.cdiv(N, BLOCK_N)
    n_items = n_tiles * SPLIT_K
    per = tl.cdiv(n_items, nprog)
    first = pid * per
    last = tl.minimum(first + per, n_items)
    if PDL:
        pdl_enter()
    if DP4A:
        wq = w_ptr.to(tl.pointer_type(tl.int32))
        w2q = w2_ptr.to(tl.pointer_type(tl.int32))
        xq = x_ptr.to(tl.pointer_type(tl.int32))
    else:
        wq = w_ptr
        w2q = w2_ptr
        xq = x_ptr
    for item in range(first, last):
        tile = item // SPLIT_K
        split = item % SPLIT_K
        on = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        nmask = on < N
        rn = tl.minimum(on, N - 1)   # rows past N re-read row N - 1 (never stored): unmasked vector loads
        wb = wq
        if TWO_W:
            if tile * BLOCK_N >= N1:
                wb = w2q
                rn = rn - N1
        k_start = split * K_PER_SPLIT_U
        k_len = tl.minimum(K_U - k_start, K_PER_SPLIT_U)
        if not PARTIALS:   # the epilogue's vectors, in flight during the K loop
            ws = tl.load(ws_ptr + on, mask=nmask, other=0.0).to(tl.float32)
            if HAS_BIAS:
                bias = tl.load(bias_ptr + on, mask=nmask, other=0.0).to(tl.float32)
            else:
                bias = ws
            xs0 = tl.load(xs_ptr).to(tl.float32)
            xs1 = tl.load(xs_ptr + tl.minimum(1, M - 1)).to(tl.float32)
            xs2 = tl.load(xs_ptr + tl.minimum(2, M - 1)).to(tl.float32)
            xs3 = tl.load(xs_ptr + tl.minimum(3, M - 1)).to(tl.float32)
        rk = tl.arange(0, BLOCK_KU)
        wp = wb + (rn.to(tl.int64)[:, None] * stride_wn_u + (k_start + rk).to(tl.int64)[None, :] * stride_wk_u)
        # the x row as a row-broadcast pointer tile: it takes the weight tile's register layout
        xp = xq + ((k_start + rk).to(tl.int64)[None, :] + tl.zeros((BLOCK_N, 1), dtype=tl.int64))
        acc0 = tl.zeros((BLOCK_N, BLOCK_KU), dtype=tl.int32)
        acc1 = tl.zeros((BLOCK_N, BLOCK_KU), dtype=tl.int32)
        acc2 = tl.zeros((BLOCK_N, BLOCK_KU), dtype=tl.int32)
        acc3 = tl.zeros((BLOCK_N, BLOCK_KU), dtype=tl.int32)
        if PREFETCH:   # register double buffer: the next step's weight tile is in flight during this step's MACs
            w_nx = _gemv_load(wp, 0, rk, k_len, EVEN_K)
        else:
            w_nx = tl.zeros((BLOCK_N, BLOCK_KU), dtype=wq.dtype.element_ty)
        for k in range(0, k_len, BLOCK_KU):
            if PREFETCH:
                w = w_nx
                if EVEN_K:   # past the last step: re-read this step's tile (an L1/L2 hit), loads stay unmasked
                    w_nx = tl.load(wp + (tl.minimum(k + BLOCK_KU, k_len - BLOCK_KU) - k) * stride_wk_u)
                else:        # past the last step: every lane masked, no access
                    w_nx = _gemv_load(wp + BLOCK_KU * stride_wk_u, k + BLOCK_KU, rk, k_len, EVEN_K)
            else:
                w = _gemv_load(wp, k, rk, k_len, EVEN_K)
            acc0 = _gemv_mac(w, _gemv_load(xp, k, rk, k_len, EVEN_K), acc0, DP4A)
            if MROWS > 1:
                acc1 = _gemv_mac(w, _gemv_load(xp + stride_xm_u, k, rk, k_len, EVEN_K), acc1, DP4A)
            if MROWS > 2:
                acc2 = _gemv_mac(w, _gemv_load(xp + 2 * stride_xm_u, k, rk, k_len, EVEN_K), acc2, DP4A)
            if MROWS > 3:
                acc3 = _gemv_mac(w, _gemv_load(xp + 3 * stride_xm_u, k, rk, k_len, EVEN_K), acc3, DP4A)
            wp += BLOCK_KU * stride_wk_u
            xp += BLOCK_KU
        # one sum over K per output
        r0 = tl.sum(acc0, axis=1)
        r1 = tl.sum(acc1, axis=1)
        r2 = tl.sum(acc2, axis=1)
        r3 = tl.sum(acc3, axis=1)
        if not PARTIALS:
            _qmm_store_row(r0, ws, xs0, bias, out_ptr, 0, on, nmask, stride_om, HAS_BIAS)
            if MROWS > 1:
                _qmm_store_row(r1, ws, xs1, bias, out_ptr, 1, on, nmask, stride_om, HAS_BIAS)
            if MROWS > 2:
                _qmm_store_row(r2, ws, xs2, bias, out_ptr, 2, on, nmask, stride_om, HAS_BIAS)
            if MROWS > 3:
                _qmm_store_row(r3, ws, xs3, bias, out_ptr, 3, on, nmask, stride_om, HAS_BIAS)
        else:
            _gemv_partial_row(r0, 0, split, part_ptr, M, N, on, nmask)
            if MROWS > 1:
                _gemv_partial_row(r1, 1, split, part_ptr, M, N, on, nmask)
            if MROWS > 2:
                _gemv_partial_row(r2, 2, split, part_ptr, M, N, on, nmask)
            if MROWS > 3:
                _gemv_partial_row(r3, 3, split, part_ptr, M, N, on, nmask)
            if REDUCE:
                tl.debug_barrier()
                arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
                if arrived == SPLIT_K - 1:
                    ws = tl.load(ws_ptr + on, mask=nmask, other=0.0).to(tl.float32)
                    if HAS_BIAS:
                        bias = tl.load(bias_ptr + on, mask=nmask, other=0.0).to(tl.float32)
                    else:
                        bias = ws
                    r0 = _gemv_reduce_row(r0, 0, split, part_ptr, M, N, SPLIT_K, on, nmask)
                    _qmm_store_row(r0, ws, tl.load(xs_ptr).to(tl.float32), bias, out_ptr, 0,
                                   on, nmask, stride_om, HAS_BIAS)
                    if MROWS > 1:
                        r1 = _gemv_reduce_row(r1, 1, split, part_ptr, M, N, SPLIT_K, on, nmask)
                        _qmm_store_row(r1, ws, tl.load(xs_ptr + 1).to(tl.float32), bias, out_ptr,
                                       1, on, nmask, stride_om, HAS_BIAS)
                    if MROWS > 2:
                        r2 = _gemv_reduce_row(r2, 2, split, part_ptr, M, N, SPLIT_K, on, nmask)
                        _qmm_store_row(r2, ws, tl.load(xs_ptr + 2).to(tl.float32), bias, out_ptr,
                                       2, on, nmask, stride_om, HAS_BIAS)
                    if MROWS > 3:
                        r3 = _gemv_reduce_row(r3, 3, split, part_ptr, M, N, SPLIT_K, on, nmask)
                        _qmm_store_row(r3, ws, tl.load(xs_ptr + 3).to(tl.float32), bias, out_ptr,
                                       3, on, nmask, stride_om, HAS_BIAS)
                    tl.atomic_xchg(cnt_ptr + tile, 0)


_MMA_MODES = {"dot": 0, "swap": 1}  # bucket key "mma" -> _qmm_kernel's MMA constexpr
# "gemv_stream" is not an MMA constexpr of _qmm_kernel: it launches _qmm_gemv_kernel (M <= 4)
_GEMV_STREAM = "gemv_stream"
_GEMV_MAX_M = 4
# quant_matmul switches that lost in every H200 sweep (docs/perf/quant_sweep5.md, quant_sweep6.md) and were removed:
# a config naming one is an error, not silently a different kernel
_REMOVED_KEYS = {
    "pdl_prefetch": "asking L2 for the weights before the PDL wait lost to PDL without it in every configuration timed "
                    "(docs/perf/quant_sweep11_pdl_prefetch.md, quant_sweep12_pdl_probe.txt)",
    "dynamic": "the persistent work-fetching grid was 2-3x slower (docs/perf/quant_sweep5.md)",
    "reduce_unroll": "the unrolled split-K reduction never won (docs/perf/quant_sweep5.md, quant_sweep6.md)",
    "stagger": "K walks started at a rotated step per column tile were 3-30 % slower (docs/perf/quant_sweep10.md)",
}
_REMOVED_MMA = {"gemv": "round 5's GEMV mode is superseded by mma 'gemv_stream' (docs/perf/quant_sweep7.md)"}


# every key a quant_matmul bucket (or a config passed to quant_matmul_config / plan_quant_matmul) may name; SPLIT_K
# and K_PER_SPLIT are what a plan adds, so a plan can be passed back as a config
_BUCKET_KEYS = {"max_m", "min_n", "max_n", "min_k", "max_k", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps",
                "num_stages", "split_k", "split_target", "reduce", "mma", "mask_m", "programs_per_sm", "dp4a",
                "prefetch", "pdl", "k_batch", "SPLIT_K", "K_PER_SPLIT"}
_REQUIRED_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps")


def _check_bucket(b: dict, where: str = "") -> None:
    """Raise for a quant_matmul bucket / config that names a removed switch, an unknown key or mma, a reduce that is
    not "kernel" / "atomic", a pdl that is not true / false (0 / 1), a split_k that is not "auto" or an int ≥ 1,
    tile sizes that are not powers of two, or a k_batch that is not a power of two ≥ 1, is > 1 with an mma other than
    "dot", or leaves K slices under 32 bytes (ValueError); or that lacks BLOCK_M / BLOCK_N / BLOCK_K / num_warps (and
    GROUP_M / num_stages, except for mma "gemv_stream") (KeyError). ``where`` prefixes the message (the table and
    bucket it came from)."""
    for k, why in _REMOVED_KEYS.items():
        if k in b:
            raise ValueError(f"{where}config key {k!r} was removed from quant_matmul: {why}")
    unknown = sorted(set(b) - _BUCKET_KEYS)
    if unknown:
        raise ValueError(f"{where}unknown quant_matmul config key(s) {unknown}; the keys are {sorted(_BUCKET_KEYS)}")
    mma = b.get("mma", "dot")
    for k in _REQUIRED_KEYS + (() if mma == _GEMV_STREAM else ("GROUP_M", "num_stages")):
        if k not in b:
            raise KeyError(f"{where}quant_matmul config needs {k!r} (it has {sorted(b)})")
    if mma in _REMOVED_MMA:
        raise ValueError(f"{where}config mma {mma!r} was removed from quant_matmul: {_REMOVED_MMA[mma]}")
    if mma not in _MMA_MODES and mma != _GEMV_STREAM:
        raise ValueError(f"{where}config mma must be one of {sorted(_MMA_MODES) + [_GEMV_STREAM]}, got {mma!r}")
    if b.get("reduce", "kernel") not in ("kernel", "atomic"):
        raise ValueError(f"{where}config reduce must be 'kernel' or 'atomic', got {b['reduce']!r}")
    if b.get("pdl", False) not in (True, False):   # 0 / 1 compare equal to False / True
        raise ValueError(f"{where}config pdl must be true or false (or 0 / 1), got {b['pdl']!r}")
    sk = b.get("split_k", "auto")
    if sk != "auto" and (isinstance(sk, bool) or not isinstance(sk, int) or sk < 1):
        raise ValueError(f"{where}config split_k must be 'auto' or an int >= 1, got {sk!r}")
    for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        v = b[k]
        if _not_pow2_int(v):
            raise ValueError(f"{where}config {k} must be a power of two (a tl.arange length), got {v!r}")
    kb = b.get("k_batch", 1)
    if _not_pow2_int(kb):
        raise ValueError(f"{where}config k_batch must be a power of two >= 1, got {kb!r}")
    if kb > 1 and (mma != "dot" or b["BLOCK_K"] // kb < 32):
        raise ValueError(f"{where}config k_batch {kb} needs mma 'dot' and BLOCK_K / k_batch >= 32 (an int8 MMA's K), "
                         f"got mma {mma!r}, BLOCK_K {b['BLOCK_K']}")

_COUNTERS: dict = {}
_CNT_REGION = 1024   # counters per stream region (≥ the tiles of any split-K launch; more → a fresh buffer)
_CNT_REGIONS = 256   # stream regions per device buffer (1 MiB; torch pools 32 streams per priority)
_CNT_CAPTURE = 1 << 20   # counters handed out to captured calls, each its own slice (4 MiB)


def _counters(device: torch.device, n: int) -> torch.Tensor:
    """Zeroed int32 tile counters (at least ``n``) for the in-kernel split-K reduction (``reduce: "atomic"``).

    The kernel leaves every counter it used at 0 again, so one zeroed buffer per device, created by the first
    eager call, is reused without a memset. Eager calls: each stream gets its own region of it (kernels on one
    stream never overlap). Calls captured into a CUDA graph: each gets its own slice of the buffer's capture area
    for good, so graphs replayed concurrently on different streams (two-batch overlap) never share counters, and
    no memset enters the graph (a per-call ``torch.zeros`` cost 1.1–1.3 µs per decode GEMM on the H200). A fresh
    ``torch.zeros`` for this call only (its memset captured with the graph, if capturing) when there is no buffer
    yet, the capture area is used up, there are more than ``_CNT_REGIONS`` streams, or more than ``_CNT_REGION``
    tiles."""
    is_cuda = device.type == "cuda"
    capturing = is_cuda and torch.cuda.is_current_stream_capturing()
    if n > _CNT_REGION:
        return torch.zeros(n, dtype=torch.int32, device=device)
    dkey = (device.type, device.index)
    entry = _COUNTERS.get(dkey)
    if entry is None:
        if capturing:   # no eager buffer yet (a zeros() now would be memset in every replay): this call's own
            return torch.zeros(n, dtype=torch.int32, device=device)
        buf = torch.zeros(_CNT_REGION * _CNT_REGIONS + _CNT_CAPTURE, dtype=torch.int32, device=device)
        entry = _COUNTERS[dkey] = (buf, {})
    buf, slots = entry
    if capturing:
        used = slots.get("capture", 0)
        if used + n > _CNT_CAPTURE:
            return torch.zeros(n, dtype=torch.int32, device=device)
        slots["capture"] = used + n
        off = _CNT_REGION * _CNT_REGIONS + used
        return buf[off: off + n]
    skey = torch.cuda.current_stream(device).cuda_stream if is_cuda else 0
    off = slots.get(skey)
    if off is None:
        if sum(1 for k in slots if k != "capture") >= _CNT_REGIONS:
            return torch.zeros(n, dtype=torch.int32, device=device)
        off = slots[skey] = sum(1 for k in slots if k != "capture") * _CNT_REGION
    return buf[off: off + _CNT_REGION]


def _bucket(M: int, cfg: dict, N: int = 0, K: int = 0) -> dict:
    """The first bucket with M ≤ max_m (and min_n ≤ N ≤ max_n, min_k ≤ K ≤ max_k when the bucket names them:
    wide-N decode GEMMs such as q_b's N = 24576 stream best with other tiles than N = 2112, and a short K
    (q_b's 1536: 12 BLOCK_K steps) with other tiles than the dense MLP's K = 7168, measured on the H200).
    N / K unknown (0): buckets naming min_n / min_k are skipped, max_n / max_k ones are not."""
    for b in cfg["buckets"]:
        if (M <= int(b["max_m"]) and int(b.get("min_n", 0)) <= N <= int(b.get("max_n", 1 << 62))
                and int(b.get("min_k", 0)) <= K <= int(b.get("max_k", 1 << 62))):
            return b
    return cfg["buckets"][-1]


def _choose_split(M: int, N: int, K: int, b: dict, cfg: dict, device: torch.device | None,
                  target: int | None = None) -> tuple[int, int]:
    """(SPLIT_K, K_PER_SPLIT); K_PER_SPLIT is a multiple of BLOCK_K. ``target``: the split target already
    resolved for the device (else :func:`_split_target` of ``device``)."""
    bk = int(b["BLOCK_K"])
    tiles = _cdiv(M, int(b["BLOCK_M"])) * _cdiv(N, int(b["BLOCK_N"]))
    sk = b.get("split_k", "auto")
    if sk == "auto":
        if int(b.get("split_target", 0)) > 0:
            target = int(b["split_target"])  # the bucket's own work-item target (e.g. 2 waves of 132 SMs)
        elif target is None:
            target = _split_target(cfg, device)
        sk = max(1, target // max(tiles, 1))
        sk = min(sk, int(cfg["max_split_k"]), max(1, K // int(cfg["min_k_per_split"])))
    sk = max(1, int(sk))
    k_per = _cdiv(_cdiv(K, sk), bk) * bk
    sk = _cdiv(K, k_per) if K > 0 else 1
    return sk, k_per


def plan_quant_matmul(M: int, N: int, K: int, device: torch.device, config: dict | None = None, *,
                      backend_key: str | None = None) -> dict:
    """The launch plan the launcher would use (bucket + SPLIT_K + K_PER_SPLIT); ``config`` overrides the bucket.

    M, N, K: the GEMM's token rows, output columns and reduction length (ints, shapes only, no data); device:
    selects the config table ("cuda", else "ascend") and, for ``split_k: "auto"``, the split target (the
    table's split_target, else the CUDA SM count, else 20);
    config: a whole bucket dict (BLOCK_M/N/K, GROUP_M, num_warps, num_stages, split_k, mma, ...) or None;
    backend_key: "cuda" / "ascend" to force a table of configs/quant.json.
    Returns a new dict: the bucket's keys plus SPLIT_K and K_PER_SPLIT (a multiple of BLOCK_K); plans from the
    table (``config`` None) are memoised.
    Raises ValueError if the bucket (``config`` or the table's) names a removed key ("dynamic", "reduce_unroll",
    "stagger") or an unknown one, the removed mma "gemv" or an mma that is not "dot" / "swap" / "gemv_stream", or
    a bad value (reduce, pdl, split_k, tile sizes, k_batch: :func:`_check_bucket`); KeyError for a
    backend_key that is not a table or a ``config`` missing BLOCK_M / BLOCK_N / BLOCK_K. "gemv_stream" with M > 4
    is not checked here (a plan is shape-only): :func:`quant_matmul_config` raises it at launch."""
    key = backend_key or _backend_key(device)
    if config is not None:
        return _make_qmm_plan(M, N, K, key, config, device)
    return dict(_qmm_plan(M, N, K, key, device))


def _qmm_plan(M: int, N: int, K: int, key: str, device: torch.device) -> dict:
    """The table's plan, memoised on (M, N, K, config table, split target); shared: never modify it."""
    return _cached_qmm_plan(M, N, K, key, _split_target(_all_configs()[key]["quant_matmul"], device))


@functools.lru_cache(maxsize=4096, typed=True)
def _cached_qmm_plan(M: int, N: int, K: int, key: str, target: int) -> dict:
    return _make_qmm_plan(M, N, K, key, None, None, target)


def _make_qmm_plan(M: int, N: int, K: int, key: str, config: dict | None, device: torch.device | None,
                   target: int | None = None) -> dict:
    cfg = _all_configs()[key]["quant_matmul"]
    b = dict(config) if config is not None else dict(_bucket(M, cfg, N, K))
    _check_bucket(b)
    sk, k_per = _choose_split(M, N, K, b, cfg, device, target)
    b.update(SPLIT_K=sk, K_PER_SPLIT=k_per)
    return b


_K_MAX = (2**31 - 1) // (128 * 128)   # the largest K whose int8 dot products cannot overflow int32 (= reference.quant)


def supports_reason_quant_matmul(x_int8, weight_int8, weight_scale, x_scale, *, bias=None, out_dtype=torch.bfloat16) -> str | None:
    """Why the Triton kernel cannot take these inputs (None = it can)."""
    if x_int8.dtype != torch.int8 or weight_int8.dtype != torch.int8:
        return "x_int8 and weight_int8 must be int8"
    if x_int8.dim() != 2 or weight_int8.dim() != 2:
        return "x_int8 must be [M, K] and weight_int8 [K, N]"
    if out_dtype not in _OUT_DTYPES:
        return f"out_dtype must be one of {_OUT_DTYPES}, got {out_dtype}"
    if out_dtype == torch.bfloat16 and x_int8.device.type == "cpu":
        return _bf16_cpu_output_reason("out")
    if x_int8.shape[1] > _K_MAX:
        return f"K > {_K_MAX} could overflow the int32 accumulator (128² · K ≥ 2³¹)"
    return None


def quant_matmul(x_int8: torch.Tensor, weight_int8: torch.Tensor, weight_scale: torch.Tensor, x_scale: torch.Tensor, *,
                 bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """W8A8 GEMM with the dequant epilogue fused; mirrors ``torch_npu.npu_quant_matmul(..., pertoken_scale=)``.

    x_int8: [M, K] int8 (any strides); weight_int8: logically [K, N] int8, any strides (fast: K-major on
    CUDA, see ``reference.quant.pack_weight``); weight_scale: [N] fp32 per-channel scale; x_scale: [M] fp32
    per-token scale; bias: [N] float or None (added in fp32); out_dtype: bf16 / fp16 / fp32.
    Returns out [M, N] out_dtype = round(((Σ_k x·w as int32) · weight_scale) · x_scale + bias).
    M = 0 (or N = 0) returns an empty tensor without a launch; K = 0 runs the epilogue on a zero accumulator
    (bias, or 0; NaN where a scale is inf or NaN, as the reference gives).
    Launch config: the M bucket of configs/quant.json; split-K when the tiles alone would not fill the device.
    Raises nothing itself: inputs are not validated here (ops/quant.py checks them and raises TypeError /
    ValueError naming the argument); see :func:`supports_reason_quant_matmul` for what this kernel refuses.
    """
    return quant_matmul_config(x_int8, weight_int8, weight_scale, x_scale, bias=bias, out_dtype=out_dtype)


def quant_matmul_config(x_int8: torch.Tensor, weight_int8: torch.Tensor, weight_scale: torch.Tensor,
                        x_scale: torch.Tensor, *, bias: torch.Tensor | None = None,
                        out_dtype: torch.dtype = torch.bfloat16, config: dict | None = None,
                        backend_key: str | None = None) -> torch.Tensor:
    """:func:`quant_matmul` with an explicit bucket ``config`` (BLOCK_M/N/K, GROUP_M, num_warps, num_stages,
    split_k) and/or config table ``backend_key`` ("cuda" / "ascend") — for perf sweeps and for tests that
    run the CUDA configs under the interpreter.

    Tensors, dtypes and result as :func:`quant_matmul` (x_int8 [M, K] int8, weight_int8 [K, N] int8, weight_scale
    [N] fp32, x_scale [M] fp32, bias [N] or None → out [M, N] out_dtype); inputs are not validated here.
    Raises ValueError if the bucket (``config`` or the table's) names a removed or unknown key, the removed mma
    "gemv", an mma that is not "dot" / "swap" / "gemv_stream" or a bad value (reduce, pdl, split_k, tile sizes,
    k_batch) (:func:`plan_quant_matmul`), or for mma "gemv_stream" with M > 4; KeyError for a backend_key that is not a table or a
    ``config`` missing a tile key. M = 0, N = 0 or K = 0 return before the plan is made, so nothing is raised then.
    """
    M, K = x_int8.shape
    N = weight_int8.shape[1]
    out = torch.empty((M, N), dtype=out_dtype, device=x_int8.device)
    if M == 0 or N == 0:
        return out
    # the epilogue reads weight_scale / bias as ptr + n and x_scale as ptr + m
    weight_scale, x_scale, bias = _unit_inner(weight_scale), _unit_inner(x_scale), _unit_inner(bias)
    if K == 0:   # no launch: the epilogue on a zero accumulator, in the kernel's order (0 · inf scales give NaN)
        o = torch.zeros((M, N), dtype=torch.float32, device=out.device) * weight_scale.float()[None, :]
        o = o * x_scale.float()[:, None]
        out.copy_(o + bias.float()[None, :] if bias is not None else o)
        return out
    dev = x_int8.device
    key = backend_key or _backend_key(dev)
    cfg = _all_configs()[key]["quant_matmul"]
    plan = _make_qmm_plan(M, N, K, key, config, dev) if config is not None else _qmm_plan(M, N, K, key, dev)
    sk, k_per = plan["SPLIT_K"], plan["K_PER_SPLIT"]
    bm, bn, bk = int(plan["BLOCK_M"]), int(plan["BLOCK_N"]), int(plan["BLOCK_K"])
    mma = plan.get("mma", "dot")
    if mma == _GEMV_STREAM:
        return _launch_gemv_stream(x_int8, weight_int8, weight_scale, x_scale, bias, out, plan, cfg, dev)
    tiles = _cdiv(M, bm) * _cdiv(N, bn)
    grid = _grid(tiles * sk, int(cfg.get("grid_cap", 0)))
    has_bias = bias is not None
    bias_arg = bias if has_bias else weight_scale
    if x_int8.stride(1) != 1 and K > 1:
        x_int8 = x_int8.contiguous()  # activations are small; the weight is never copied
    if weight_int8.stride(0) == 1 or K == 1:
        w_layout = 0
    elif weight_int8.stride(1) == 1 or N == 1:
        w_layout = 1
    else:
        w_layout = 2
    part, reduce, cnt = _split_k_buffers(plan, sk, tiles, out, dev)
    launch = dict(num_warps=int(plan["num_warps"]))
    if dev.type == "cuda":
        launch["num_stages"] = int(plan["num_stages"])
    launch.update(pdl_kwargs(dev, bool(plan.get("pdl", False))))
    _qmm_kernel[(grid,)](x_int8, weight_int8, weight_scale, x_scale, bias_arg, out, part, cnt,
                         M, N, K, k_per, sk,
                         x_int8.stride(0), weight_int8.stride(0), weight_int8.stride(1), out.stride(0),
                         W_LAYOUT=w_layout, WRAP=bool(cfg.get("wrap", False)), PARTIALS=sk > 1, HAS_BIAS=has_bias,
                         EVEN_K=(K % bk == 0),
                         BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=int(plan["GROUP_M"]), REDUCE=reduce,
                         MASK_M=bool(plan.get("mask_m", False)), MMA=_MMA_MODES[mma],
                         K_BATCH=int(plan.get("k_batch", 1)), **launch)
    if sk > 1 and not reduce:
        _launch_qmm_epilogue(cfg, part, weight_scale, x_scale, bias_arg, out, sk, has_bias)
    return out


def _split_k_buffers(plan: dict, sk: int, tiles: int, out: torch.Tensor, dev: torch.device):
    """(part, reduce, cnt) of a launch with ``sk`` K splits over ``tiles`` output tiles: the int32 partial sums
    [sk, M, N] (``out`` itself when unsplit: never read), whether the last-arriving split reduces them ("atomic"),
    and its tile counters (``part`` as a dummy otherwise)."""
    M, N = out.shape
    part = torch.empty((sk, M, N), dtype=torch.int32, device=dev) if sk > 1 else out
    reduce = sk > 1 and plan.get("reduce", "kernel") == "atomic"
    cnt = _counters(dev, tiles) if reduce else part
    return part, reduce, cnt


def _launch_qmm_epilogue(cfg: dict, part, weight_scale, x_scale, bias_arg, out, sk: int, has_bias: bool) -> None:
    """The second kernel of a split-K launch with reduce "kernel": sums the ``sk`` int32 partials in split order
    and applies the fp32 epilogue (config "epilogue" tile)."""
    M, N = out.shape
    e = cfg["epilogue"]
    ebm, ebn = int(e["BLOCK_M"]), int(e["BLOCK_N"])
    etiles = _cdiv(M, ebm) * _cdiv(N, ebn)
    _qmm_epilogue_kernel[(_grid(etiles, int(e.get("grid_cap", 0))),)](
        part, weight_scale, x_scale, bias_arg, out, M, N, sk, out.stride(0),
        HAS_BIAS=has_bias, BLOCK_M=ebm, BLOCK_N=ebn, num_warps=int(e["num_warps"]))


def _gemv_stream_dp4a_ok(x_int8: torch.Tensor, weight_int8: torch.Tensor, bk: int) -> bool:
    """Whether the int32-word (dp4a) loads are legal: K % 4 == 0, BLOCK_K % 4 == 0, K-major weight whose rows
    and base are 4-byte aligned, x rows 4-byte aligned (host metadata only, no sync)."""
    M, K = x_int8.shape
    return (K % 4 == 0 and bk % 4 == 0 and weight_int8.stride(0) == 1 and weight_int8.stride(1) % 4 == 0
            and weight_int8.data_ptr() % 4 == 0 and x_int8.data_ptr() % 4 == 0
            and (M == 1 or x_int8.stride(0) % 4 == 0))


def _gemv_grid_launch(plan: dict, n_items: int, dev: torch.device) -> tuple[int, dict]:
    """(grid, launch options) of a streaming-GEMV launch over ``n_items`` work items: SMs × the plan's
    ``programs_per_sm`` (default 4; 20 "SMs" off CUDA) programs at most, each with work; num_warps, and num_stages
    on CUDA."""
    if dev.type == "cuda":
        sms = _sm_count(dev.index if dev.index is not None else torch.cuda.current_device())
    else:
        sms = 20
    grid = _grid(n_items, sms * int(plan.get("programs_per_sm", 4)))
    grid = _cdiv(n_items, _cdiv(n_items, grid))   # every program gets work
    launch = dict(num_warps=int(plan["num_warps"]))
    if dev.type == "cuda":
        launch["num_stages"] = int(plan.get("num_stages", 1))
    return grid, launch


def _launch_gemv_stream(x_int8, weight_int8, weight_scale, x_scale, bias, out, plan: dict, cfg: dict,
                        dev: torch.device) -> torch.Tensor:
    """``mma: "gemv_stream"`` (M ≤ 4): :func:`_qmm_gemv_kernel` on a grid of SMs × ``programs_per_sm``
    (bucket key, default 4) programs, each a contiguous run of (BLOCK_N rows × K split) work items. ``dp4a``
    (bucket key, CUDA only; ignored elsewhere or when the layout does not allow int32-word loads): 4 int8
    products per ``dp4a.s32.s32``; ``prefetch`` (bucket key): register double buffer of the weight tile.
    Raises ValueError for M > 4."""
    M, K = x_int8.shape
    N = weight_int8.shape[1]
    if M > _GEMV_MAX_M:
        raise ValueError(f"config mma {_GEMV_STREAM!r} takes at most {_GEMV_MAX_M} token rows, got M = {M}")
    sk, k_per = int(plan["SPLIT_K"]), int(plan["K_PER_SPLIT"])
    bn, bk = int(plan["BLOCK_N"]), int(plan["BLOCK_K"])
    if x_int8.stride(1) != 1 and K > 1:
        x_int8 = x_int8.contiguous()
    dp4a = bool(plan.get("dp4a", False)) and dev.type == "cuda" and _gemv_stream_dp4a_ok(x_int8, weight_int8, bk)
    u = 4 if dp4a else 1
    tiles = _cdiv(N, bn)
    grid, launch = _gemv_grid_launch(plan, tiles * sk, dev)
    has_bias = bias is not None
    bias_arg = bias if has_bias else weight_scale
    part, reduce, cnt = _split_k_buffers(plan, sk, tiles, out, dev)
    launch.update(pdl_kwargs(dev, bool(plan.get("pdl", False))))
    _qmm_gemv_kernel[(grid,)](x_int8, weight_int8, weight_scale, x_scale, bias_arg, out, part, cnt, weight_int8, 0,
                              M, N, K // u, k_per // u, sk,
                              x_int8.stride(0) // u if (M > 1 or x_int8.stride(0) % u == 0) else 0,
                              weight_int8.stride(0) if not dp4a else 1, weight_int8.stride(1) // u, out.stride(0),
                              MROWS=M, HAS_BIAS=has_bias, EVEN_K=(K % bk == 0), BLOCK_N=bn, BLOCK_KU=bk // u,
                              PARTIALS=sk > 1, REDUCE=reduce, DP4A=dp4a, PREFETCH=bool(plan.get("prefetch", False)),
                              **launch)
    if sk > 1 and not reduce:
        _launch_qmm_epilogue(cfg, part, weight_scale, x_scale, bias_arg, out, sk, has_bias)
    return out


def gemv_stream_plan(M: int, N: int, K: int, device: torch.device) -> dict | None:
    """The "cuda" table's quant_matmul plan for (M, N, K) when it is the unsplit streaming GEMV
    (``mma: "gemv_stream"``, SPLIT_K 1), else None. Shapes only (memoised plan, no sync); None off CUDA."""
    if device.type != "cuda" or M < 1 or M > _GEMV_MAX_M or N < 1 or K < 1:
        return None
    p = _qmm_plan(M, N, K, "cuda", device)
    return p if p.get("mma") == _GEMV_STREAM and int(p["SPLIT_K"]) == 1 else None


def gemv_stream_int32_ok(x_int8: torch.Tensor, weights: tuple, plan: dict) -> bool:
    """Whether :func:`gemv_stream_int32` can take these operands with ``plan`` (host metadata only): one or two
    K-major int8 weights ([K, N_i] views with unit K stride) of equal strides, the first one's width a multiple
    of the plan's BLOCK_N. (Where the int32-word loads are not legal, the launch drops dp4a, as quant_matmul's.)"""
    if len(weights) not in (1, 2) or any(w.dtype != torch.int8 or w.stride(0) != 1 for w in weights):
        return False
    w0 = weights[0]
    return len(weights) == 1 or (weights[1].stride() == w0.stride() and w0.shape[1] % int(plan["BLOCK_N"]) == 0)


def gemv_stream_int32(x_int8: torch.Tensor, weights: tuple, part: torch.Tensor, plan: dict) -> None:
    """part[m, n] = Σ_k x_int8[m, k] · W[k, n] exactly in int32, W = [weights[0] ‖ weights[1]] (the columns of the
    first, then the second), no epilogue: the streaming GEMV (:func:`_qmm_gemv_kernel`) in ONE launch over both
    weights. For ``ds::mla_prolog``'s down GEMM ``x @ [W_DQ ‖ W_DKV_KR]`` at T = 1 (its row kernel reads part as
    the unsplit partial sums).

    x_int8 [M, K] int8 (M ≤ 4); weights: one or two int8 [K, N_i] (K-major, equal strides); part [M, ΣN_i] int32,
    contiguous; plan: :func:`gemv_stream_plan` (M, ΣN_i, K) on CUDA (tests pass such a bucket to run it under the
    interpreter). dp4a (the plan's) only where the int32-word loads are legal for x and both weights (K % 4 == 0,
    4-byte aligned bases and strides), else int8 loads. The caller checks :func:`gemv_stream_int32_ok` first
    (nothing is validated here)."""
    M, K = x_int8.shape
    w0 = weights[0]
    w1 = weights[-1]
    N1 = w0.shape[1]
    N = part.shape[1]
    bn, bk = int(plan["BLOCK_N"]), int(plan["BLOCK_K"])
    if x_int8.stride(1) != 1 and K > 1:
        x_int8 = x_int8.contiguous()
    dev = part.device
    dp4a = bool(plan.get("dp4a", False)) and dev.type == "cuda" and all(
        _gemv_stream_dp4a_ok(x_int8, w, bk) for w in weights)
    u = 4 if dp4a else 1
    grid, launch = _gemv_grid_launch(plan, _cdiv(N, bn), dev)
    f32 = torch.empty(0, dtype=torch.float32, device=dev)   # the epilogue's pointers: never read
    _qmm_gemv_kernel[(grid,)](x_int8, w0, f32, f32, f32, part, part, part, w1, N1,
                              M, N, K // u, K // u, 1,
                              x_int8.stride(0) // u if (M > 1 or x_int8.stride(0) % u == 0) else 0,
                              w0.stride(0) if not dp4a else 1, w0.stride(1) // u, part.stride(0),
                              MROWS=M, HAS_BIAS=False, EVEN_K=(K % bk == 0), BLOCK_N=bn, BLOCK_KU=bk // u,
                              PARTIALS=True, REDUCE=False, DP4A=dp4a, PREFETCH=bool(plan.get("prefetch", False)),
                              TWO_W=len(weights) == 2, **launch)


# ==============================================================================================
# Ascend compile cases (one per kernel × config the launcher can pick)
# ==============================================================================================
def _gemv_stream_cases(b: dict, table: str) -> list[dict]:
    """Compile cases of a ``mma: "gemv_stream"`` bucket: :func:`_qmm_gemv_kernel` for M = 1..min(4, max_m),
    fused and split-K, even / tail K, bf16 / fp16 out (dp4a only on "cuda")."""
    dp4a = bool(b.get("dp4a", False)) and table == "cuda"
    u = 4 if dp4a else 1
    splits = (False, True) if b.get("split_k", "auto") == "auto" else (int(b["split_k"]) > 1,)
    cases = []
    for mrows in range(1, min(_GEMV_MAX_M, int(b["max_m"])) + 1):
        for partials in splits:
            for even in (True, False):
                for out in ("*bf16", "*fp16"):
                    sig = {"x_ptr": "*i8", "w_ptr": "*i8", "ws_ptr": "*fp32", "xs_ptr": "*fp32", "bias_ptr": "*fp32",
                           "out_ptr": out, "part_ptr": "*i32" if partials else out,
                           "cnt_ptr": "*i32" if partials else out, "w2_ptr": "*i8", "N1": "i32", "M": "i32", "N": "i32", "K_U": "i32",
                           "K_PER_SPLIT_U": "i32", "SPLIT_K": "i32", "stride_xm_u": "i32", "stride_wk_u": "i32",
                           "stride_wn_u": "i32", "stride_om": "i32", "MROWS": "constexpr", "HAS_BIAS": "constexpr",
                           "EVEN_K": "constexpr", "BLOCK_N": "constexpr", "BLOCK_KU": "constexpr",
                           "PARTIALS": "constexpr", "REDUCE": "constexpr", "DP4A": "constexpr",
                           "PREFETCH": "constexpr"}
                    ce = dict(MROWS=mrows, HAS_BIAS=True, EVEN_K=even, BLOCK_N=int(b["BLOCK_N"]),
                              BLOCK_KU=int(b["BLOCK_K"]) // u, PARTIALS=partials,
                              REDUCE=partials and b.get("reduce", "kernel") == "atomic", DP4A=dp4a,
                              PREFETCH=bool(b.get("prefetch", False)))
                    sig["PDL"] = "constexpr"
                    ce["PDL"] = bool(b.get("pdl", False)) and table == "cuda"
                    sig["TWO_W"] = "constexpr"   # [w | w2] (gemv_stream_int32, mla_prolog's down GEMM): cases below
                    ce["TWO_W"] = False
                    if mrows == 1:   # a launch with M = 1 specialises M to the constant 1 (M is not do_not_specialize)
                        sig["M"] = "constexpr"
                        ce = dict(ce, M=1)
                    # the bucket's max_m and N range name it (two buckets over one N range differ in max_m), then
                    # the token rows MROWS this case compiles for
                    nb = f"_m{b['max_m']}_n{b.get('min_n', 0)}-{b['max_n'] if 'max_n' in b else 'inf'}_r{mrows}"
                    cases.append(dict(name=f"quant_matmul_gemv_stream{nb}_{'splitk' if partials else 'fused'}_"
                                           f"{'even' if even else 'tail'}_{out[1:]}",
                                      fn=_qmm_gemv_kernel, signature=sig, constexprs=ce,
                                      num_warps=int(b["num_warps"]), num_stages=int(b.get("num_stages", 1))))
    if table == "cuda" and int(b["max_m"]) == 1 and "max_n" in b:
        # gemv_stream_int32 (mla_prolog's A8W8 T = 1 down GEMM): [W_DQ | W_DKV_KR], int32 sums into part, no epilogue
        for even in (True, False):
            c = next(c for c in cases if c["constexprs"]["MROWS"] == 1 and c["constexprs"]["EVEN_K"] is even)
            sig = dict(c["signature"], out_ptr="*i32", part_ptr="*i32", cnt_ptr="*i32")
            ce = dict(c["constexprs"], HAS_BIAS=False, PARTIALS=True, REDUCE=False, TWO_W=True)
            cases.append(dict(c, name=c["name"].rsplit("_fused", 1)[0].rsplit("_splitk", 1)[0] +
                              f"_two_w_int32_{'even' if even else 'tail'}", signature=sig, constexprs=ce))
    return cases


# The streaming GEMV is not in the "ascend" table (a CUDA decode variant); its portable form (no dp4a, the
# two-kernel split-K reduction) is still lowered for Ascend so the kernel stays inside the triton-ascend 3.2 subset.
_ASCEND_GEMV_PROBE = dict(max_m=4, max_n=4096, BLOCK_M=4, BLOCK_N=8, BLOCK_K=256, GROUP_M=1, num_warps=1, num_stages=1,
                          split_k="auto", reduce="kernel", mma=_GEMV_STREAM)


def _qmm_cases(b: dict, q: dict, table: str) -> list[dict]:
    """Compile cases of one :func:`_qmm_kernel` bucket ``b`` of config section ``q``: fused and / or split-K (as its
    split_k allows), even / tail K, bf16 / fp16 out, with the layout pack_weight gives ``table``."""
    cases = []
    for partials in ((False, True) if b.get("split_k", "auto") == "auto" else (int(b["split_k"]) > 1,)):
        for even in (True, False):
            for out in ("*bf16", "*fp16"):
                sig = {"x_ptr": "*i8", "w_ptr": "*i8", "ws_ptr": "*fp32", "xs_ptr": "*fp32", "bias_ptr": "*fp32",
                       "out_ptr": out, "part_ptr": "*i32" if partials else out,
                       "cnt_ptr": "*i32" if partials else out,
                       "M": "i32", "N": "i32", "K": "i32",
                       "K_PER_SPLIT": "i32", "SPLIT_K": "i32", "stride_xm": "i32",
                       "stride_wk": "i32", "stride_wn": "i32", "stride_om": "i32", "W_LAYOUT": "constexpr",
                       "WRAP": "constexpr", "PARTIALS": "constexpr",
                       "HAS_BIAS": "constexpr", "EVEN_K": "constexpr", "BLOCK_M": "constexpr",
                       "BLOCK_N": "constexpr", "BLOCK_K": "constexpr", "GROUP_M": "constexpr",
                       "REDUCE": "constexpr", "MASK_M": "constexpr", "MMA": "constexpr", "PDL": "constexpr",
                       "K_BATCH": "constexpr"}
                # the layout pack_weight produces for this backend: ND row-major on Ascend, K-major on CUDA
                ce = dict(W_LAYOUT=1 if table == "ascend" else 0, WRAP=bool(q.get("wrap", False)),
                          PARTIALS=partials, HAS_BIAS=True, EVEN_K=even, BLOCK_M=int(b["BLOCK_M"]),
                          BLOCK_N=int(b["BLOCK_N"]), BLOCK_K=int(b["BLOCK_K"]), GROUP_M=int(b["GROUP_M"]),
                          REDUCE=partials and b.get("reduce", "kernel") == "atomic",
                          MASK_M=bool(b.get("mask_m", False)), MMA=_MMA_MODES[b.get("mma", "dot")],
                          PDL=bool(b.get("pdl", False)) and table == "cuda",   # never on Ascend
                          K_BATCH=int(b.get("k_batch", 1)))
                tag = "splitk" if partials else "fused"
                nb = f"_n{b.get('min_n', 0)}-{b['max_n'] if 'max_n' in b else 'inf'}" if "min_n" in b or "max_n" in b else ""
                if "min_k" in b or "max_k" in b:
                    nb += f"_k{b.get('min_k', 0)}-{b['max_k'] if 'max_k' in b else 'inf'}"
                cases.append(dict(name=f"quant_matmul_m{b['max_m']}{nb}_{tag}_{'even' if even else 'tail'}_{out[1:]}",
                                  fn=_qmm_kernel, signature=sig, constexprs=ce, num_warps=int(b["num_warps"]),
                                  num_stages=int(b["num_stages"])))
    return cases


def ascend_compile_cases() -> list[dict]:
    """(kernel × Ascend launch config) cases for the triton-ascend 3.2 + bishengir compile check, plus two probes
    of code the Ascend table does not use: the portable streaming GEMV (``_ASCEND_GEMV_PROBE``, M 1 and 4) and the
    batched K step (the table's first quant_matmul bucket with ``k_batch`` 2 and BLOCK_N 128, bf16 out; at BLOCK_N
    256 its masked K tail needs 294 KiB of the 192 KiB UB)."""
    probe = [dict(c, name="probe_" + c["name"]) for c in _gemv_stream_cases(_ASCEND_GEMV_PROBE, "ascend")
             if c["constexprs"]["MROWS"] in (1, 4) and c["signature"]["out_ptr"] == "*bf16"]
    q = _all_configs()["ascend"]["quant_matmul"]
    kb_bucket = dict(q["buckets"][0], k_batch=2, BLOCK_N=128)
    kb = [dict(c, name="probe_k_batch2_" + c["name"]) for c in _qmm_cases(kb_bucket, q, "ascend")
          if c["signature"]["out_ptr"] == "*bf16"]
    return compile_cases("ascend") + probe + kb


def compile_cases(table: str = "ascend") -> list[dict]:
    """(kernel × launch config of ``table``) cases: dict(name, fn, signature, constexprs, num_warps, num_stages)."""
    cfgs = _all_configs()[table]
    cases: list[dict] = []
    for op, fn in (("dynamic_quant", _dynamic_quant_kernel), ("rms_norm_dynamic_quant", _rms_norm_quant_kernel)):
      for bi, c in enumerate(cfgs[op].get("buckets", [cfgs[op]])):
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
    q = cfgs["quant_matmul"]
    for b in q["buckets"]:
        if b.get("mma") == _GEMV_STREAM:
            cases.extend(_gemv_stream_cases(b, table))
            continue
        cases.extend(_qmm_cases(b, q, table))
    e = q["epilogue"]
    for out in ("*bf16", "*fp16"):
        sig = {"part_ptr": "*i32", "ws_ptr": "*fp32", "xs_ptr": "*fp32", "bias_ptr": "*fp32", "out_ptr": out,
               "M": "i32", "N": "i32", "SPLIT_K": "i32", "stride_om": "i32", "HAS_BIAS": "constexpr",
               "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
        cases.append(dict(name=f"quant_matmul_epilogue_{out[1:]}", fn=_qmm_epilogue_kernel, signature=sig,
                          constexprs=dict(HAS_BIAS=True, BLOCK_M=int(e["BLOCK_M"]), BLOCK_N=int(e["BLOCK_N"])),
                          num_warps=int(e["num_warps"])))
    return cases


__all__ = ["dynamic_quant", "rms_norm_dynamic_quant", "dynamic_quant_config", "rms_norm_dynamic_quant_config", "quant_matmul", "quant_matmul_config", "plan_quant_matmul",
           "supports_reason_dynamic_quant", "supports_reason_rms_norm_dynamic_quant", "supports_reason_quant_matmul",
           "ascend_compile_cases", "compile_cases"]
