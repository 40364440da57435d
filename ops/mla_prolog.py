"""``ds::mla_prolog``: fused MLA pre-attention (mirrors ``torch_npu.npu_mla_prolog_v3``).

Registration: schema (from the reference's annotations, caches declared mutated), argument checks,
fake impl, FLOP/byte model, OpSpec with DeepSeek-V3 shapes, and the Triton kernel hook
(``ops/triton/mla_prolog.py``, imported lazily). Semantics: reference/mla_prolog.py and
docs/ops/mla_prolog.md.
"""
from __future__ import annotations

import inspect
import math

import torch

from reference import mla_prolog as _ref
from reference.deepseek import rope_sin_cos

from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor

from ._library import DsOp, Kernel, OpSpec, check_finite_float, check_tensor, checks_enabled

FLOATS = (torch.bfloat16, torch.float16, torch.float32)
F32 = (torch.float32,)
_SIG = inspect.signature(_ref.mla_prolog)


# ----------------------------------------------------------------------------------------------
# checks
# ----------------------------------------------------------------------------------------------
def _check_scale(name: str, t, channels: int | tuple[int, ...], *, required: bool, why: str) -> None:
    """A per-channel (or per-tensor) fp32 scale: shape [C] or [1, C]; ``channels`` lists allowed C."""
    if t is None:
        if required:
            raise ValueError(f"{name} is required {why}")
        return
    check_tensor(name, t, dtypes=F32, ndim=(1, 2))
    allowed = tuple(channels) if isinstance(channels, tuple) else (channels,)
    if t.dim() == 2 and t.shape[0] != 1 or t.shape[-1] not in allowed:
        want = " or ".join(f"[{c}] / [1, {c}]" for c in allowed)
        raise ValueError(f"{name} must have shape {want}, got {list(t.shape)}")


def _must_be_none(names_values: dict, why: str) -> None:
    for n, v in names_values.items():
        if v is not None:
            raise ValueError(f"{n} must be None {why}")


def _check_static(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq, rmsnorm_gamma_ckv,
                  rope_sin, rope_cos, kv_cache, kr_cache, *, cache_index, dequant_scale_x=None,
                  dequant_scale_w_dq=None, dequant_scale_w_uq_qr=None, dequant_scale_w_dkv_kr=None,
                  quant_scale_ckv=None, quant_scale_ckr=None, smooth_scales_cq=None, rmsnorm_epsilon_cq=1e-5,
                  rmsnorm_epsilon_ckv=1e-5, cache_mode="PA_BSND"):
    """Shape/dtype/mode checks (no data access: safe on fake tensors)."""
    if cache_mode != "PA_BSND":
        raise ValueError(f"cache_mode {cache_mode!r} is not supported yet: only 'PA_BSND' "
                         "(kv_cache [num_blocks, block_size, 1, Hckv], slot-indexed rows)")
    check_tensor("weight_uk", weight_uk, dtypes=FLOATS, ndim=3)
    dt = weight_uk.dtype
    N, D, Hckv = weight_uk.shape
    check_tensor("token_x", token_x, dtypes=(dt, torch.int8), ndim=(2, 3))
    lead = list(token_x.shape[:-1])
    He = token_x.shape[-1]
    T = math.prod(lead)
    check_tensor("kr_cache", kr_cache, dtypes=(dt, torch.int8), ndim=4)
    Dr = kr_cache.shape[-1]
    if Dr % 2:
        raise ValueError(f"kr_cache last dim (qk_rope_head_dim Dr) must be even, got {Dr}")
    check_tensor("weight_dq", weight_dq, dtypes=(dt, torch.int8), ndim=2, shape=(He, None),
                 why=" (He = token_x.shape[-1])")
    Hcq = weight_dq.shape[1]
    try:
        check_tensor("weight_uq_qr", weight_uq_qr, dtypes=(dt, torch.int8), shape=(Hcq, N * (D + Dr)))
    except ValueError as e:   # both sizes come from other arguments: say which, so either may be the wrong one
        raise ValueError(f"{e} (Hcq = {Hcq} is weight_dq's width; N·(D + Dr) = {N}·({D} + {Dr}) come from weight_uk "
                         f"[N, D, Hckv] and kr_cache's last dim)") from None
    check_tensor("weight_dkv_kr", weight_dkv_kr, dtypes=(dt, torch.int8), shape=(He, Hckv + Dr),
                 why=" (He = token_x.shape[-1], Hckv from weight_uk, Dr from kr_cache)")
    check_tensor("rmsnorm_gamma_cq", rmsnorm_gamma_cq, dtypes=FLOATS, shape=(Hcq,))
    check_tensor("rmsnorm_gamma_ckv", rmsnorm_gamma_ckv, dtypes=FLOATS, shape=(Hckv,))
    check_tensor("rope_sin", rope_sin, dtypes=FLOATS, shape=lead + [Dr])
    check_tensor("rope_cos", rope_cos, dtypes=FLOATS, shape=lead + [Dr])
    check_tensor("kv_cache", kv_cache, dtypes=(dt, torch.int8), ndim=4)
    nb, bs = kv_cache.shape[0], kv_cache.shape[1]
    check_tensor("kv_cache", kv_cache, shape=(nb, bs, 1, Hckv))
    check_tensor("kr_cache", kr_cache, shape=(nb, bs, 1, Dr))
    check_tensor("cache_index", cache_index, dtypes=(torch.int64,), shape=lead)
    check_finite_float("rmsnorm_epsilon_cq", rmsnorm_epsilon_cq, nonneg=True)
    check_finite_float("rmsnorm_epsilon_ckv", rmsnorm_epsilon_ckv, nonneg=True)
    dev = token_x.device
    for name, t in (("weight_dq", weight_dq), ("weight_uq_qr", weight_uq_qr), ("weight_uk", weight_uk),
                    ("weight_dkv_kr", weight_dkv_kr), ("rmsnorm_gamma_cq", rmsnorm_gamma_cq),
                    ("rmsnorm_gamma_ckv", rmsnorm_gamma_ckv), ("rope_sin", rope_sin), ("rope_cos", rope_cos),
                    ("kv_cache", kv_cache), ("kr_cache", kr_cache), ("cache_index", cache_index),
                    ("dequant_scale_x", dequant_scale_x), ("dequant_scale_w_dq", dequant_scale_w_dq),
                    ("dequant_scale_w_uq_qr", dequant_scale_w_uq_qr), ("dequant_scale_w_dkv_kr", dequant_scale_w_dkv_kr),
                    ("quant_scale_ckv", quant_scale_ckv), ("quant_scale_ckr", quant_scale_ckr),
                    ("smooth_scales_cq", smooth_scales_cq)):
        if isinstance(t, torch.Tensor) and t.device != dev:
            raise ValueError(f"{name} must be on {dev} (token_x's device), got {t.device}")

    wmode, c8, q8 = _ref.infer_mode(token_x, weight_uq_qr, kv_cache)
    # --- weights / activation quantisation ---
    if wmode == "full":
        why = "when token_x is int8 (full quant, A8W8)"
        for name, w in (("weight_dq", weight_dq), ("weight_uq_qr", weight_uq_qr), ("weight_dkv_kr", weight_dkv_kr)):
            if w.dtype != torch.int8:
                raise TypeError(f"{name} must be int8 {why}, got {w.dtype}")
        if dequant_scale_x is None:
            raise ValueError(f"dequant_scale_x (per-token scale, [T] or [T, 1] fp32) is required {why}")
        check_tensor("dequant_scale_x", dequant_scale_x, dtypes=F32)
        ok = [[T], [T, 1]] + ([lead, lead + [1]] if len(lead) == 2 else [])
        if list(dequant_scale_x.shape) not in ok:
            raise ValueError(f"dequant_scale_x must have shape [T] or [T, 1] with T = {T}, got {list(dequant_scale_x.shape)}")
        _check_scale("dequant_scale_w_dq", dequant_scale_w_dq, Hcq, required=True, why=why)
        _check_scale("dequant_scale_w_dkv_kr", dequant_scale_w_dkv_kr, Hckv + Dr, required=True, why=why)
    else:
        for name, w in (("weight_dq", weight_dq), ("weight_dkv_kr", weight_dkv_kr)):
            if w.dtype != dt:
                raise TypeError(f"{name} must be {dt} (weight_uk's dtype) when token_x is {token_x.dtype}; "
                                f"int8 weight_dq / weight_dkv_kr need an int8 token_x (full quant), got {w.dtype}")
        _must_be_none({"dequant_scale_x": dequant_scale_x, "dequant_scale_w_dq": dequant_scale_w_dq,
                       "dequant_scale_w_dkv_kr": dequant_scale_w_dkv_kr}, f"when token_x is {token_x.dtype} (not full quant)")
    if weight_uq_qr.dtype == torch.int8:
        why = "when weight_uq_qr is int8"
        _check_scale("dequant_scale_w_uq_qr", dequant_scale_w_uq_qr, N * (D + Dr), required=True, why=why)
        _check_scale("smooth_scales_cq", smooth_scales_cq, Hcq, required=False, why=why)
    else:
        _must_be_none({"dequant_scale_w_uq_qr": dequant_scale_w_uq_qr, "smooth_scales_cq": smooth_scales_cq},
                      f"when weight_uq_qr is {weight_uq_qr.dtype}")
    # --- cache quantisation ---
    if not c8:
        if kr_cache.dtype != dt:
            raise TypeError(f"kr_cache must be {dt} when kv_cache is {kv_cache.dtype}, got {kr_cache.dtype}")
        _must_be_none({"quant_scale_ckv": quant_scale_ckv, "quant_scale_ckr": quant_scale_ckr},
                      f"when kv_cache is {kv_cache.dtype} (no cache quantisation)")
    elif q8:
        why = "with an int8 kv_cache and int8 token_x (full quant + C8: per-tensor kv scale, int8 query)"
        if kr_cache.dtype != dt:
            raise TypeError(f"kr_cache must be {dt} {why}, got {kr_cache.dtype}")
        _check_scale("quant_scale_ckv", quant_scale_ckv, 1, required=True, why=why)
        _must_be_none({"quant_scale_ckr": quant_scale_ckr}, why)
    else:
        why = "with an int8 kv_cache (C8, per-channel)"
        if kr_cache.dtype != torch.int8:
            raise TypeError(f"kr_cache must be int8 {why} unless token_x is int8, got {kr_cache.dtype}")
        _check_scale("quant_scale_ckv", quant_scale_ckv, (Hckv, 1), required=True, why=why)
        _check_scale("quant_scale_ckr", quant_scale_ckr, (Dr, 1), required=True, why=why)


_STATIC_OK: dict = {}      # _static_key of argument sets that passed _check_static (eager calls)
_STATIC_OK_MAX = 256


def _static_key(tensors: tuple, scalars: tuple):
    """What :func:`_check_static` reads of the arguments: (dtype, shape, device) of each tensor, None for None,
    and the scalars with their types. None (never memoised) when a tensor argument is neither a tensor nor None,
    is a FakeTensor (torch.compile tracing, possibly symbolic shapes), or a scalar is not a bool / int / float /
    str (an unhashable list or array must reach the check's clear error)."""
    key = []
    for t in tensors:
        if t is None:
            key.append(None)
        elif isinstance(t, torch.Tensor) and not isinstance(t, _FakeTensor):
            key.append((t.dtype, t.shape, t.device))
        else:
            return None
    for v in scalars:
        if not isinstance(v, (bool, int, float, str)):
            return None                     # e.g. a list or an array: checked (and rejected) every time
        key.append((type(v), v))
    return tuple(key)


def _check_cache_index(cache_index: torch.Tensor, num_slots: int) -> None:
    """Host-side data check: every non-negative id < num_slots, no duplicated non-negative id."""
    idx = cache_index.reshape(-1)
    if idx.numel() == 0:
        return
    bad = torch.nonzero(idx >= num_slots).reshape(-1)
    if bad.numel():
        p = int(bad[0])
        pos = tuple(int(i) for i in torch.unravel_index(torch.tensor(p), tuple(cache_index.shape)))
        raise ValueError(f"cache_index{list(pos)} = {int(idx[p])} is out of range: slots are "
                         f"[0, num_blocks·block_size = {num_slots}) (negative = do not write); "
                         f"{bad.numel()} bad id(s), nothing was written")
    valid = idx[idx >= 0]
    if valid.numel() > 1:
        s, _ = torch.sort(valid)
        dup = torch.nonzero(s[1:] == s[:-1]).reshape(-1)
        if dup.numel():
            v = int(s[int(dup[0])])
            where = torch.nonzero(idx == v).reshape(-1).tolist()
            raise ValueError(f"cache_index holds slot {v} more than once (flat positions {where}); "
                             "each written slot must be distinct, nothing was written")


def _check(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq, rmsnorm_gamma_ckv,
           rope_sin, rope_cos, kv_cache, kr_cache, *, cache_index, dequant_scale_x=None, dequant_scale_w_dq=None,
           dequant_scale_w_uq_qr=None, dequant_scale_w_dkv_kr=None, quant_scale_ckv=None, quant_scale_ckr=None,
           smooth_scales_cq=None, rmsnorm_epsilon_cq=1e-5, rmsnorm_epsilon_ckv=1e-5, cache_mode="PA_BSND") -> None:
    """Validate ``ds::mla_prolog`` arguments (see :func:`reference.mla_prolog.mla_prolog`).

    Raises TypeError (wrong dtype / mode combination) or ValueError (shape, missing or extra scale,
    cache_mode other than "PA_BSND", and — in eager with checks enabled — cache_index ids ≥
    num_blocks·block_size or duplicated non-negative ids), always before anything is written.
    (An explicit signature: binding through inspect.Signature cost ~10 µs per eager call; the static checks of
    an argument set that passed before are skipped, see :func:`_static_key`.)
    """
    key = _static_key((token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq,
                       rmsnorm_gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache, cache_index, dequant_scale_x,
                       dequant_scale_w_dq, dequant_scale_w_uq_qr, dequant_scale_w_dkv_kr, quant_scale_ckv,
                       quant_scale_ckr, smooth_scales_cq), (rmsnorm_epsilon_cq, rmsnorm_epsilon_ckv, cache_mode))
    if key is None or key not in _STATIC_OK:
        _check_static(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq, rmsnorm_gamma_ckv,
                      rope_sin, rope_cos, kv_cache, kr_cache, cache_index=cache_index, dequant_scale_x=dequant_scale_x,
                      dequant_scale_w_dq=dequant_scale_w_dq, dequant_scale_w_uq_qr=dequant_scale_w_uq_qr,
                      dequant_scale_w_dkv_kr=dequant_scale_w_dkv_kr, quant_scale_ckv=quant_scale_ckv,
                      quant_scale_ckr=quant_scale_ckr, smooth_scales_cq=smooth_scales_cq,
                      rmsnorm_epsilon_cq=rmsnorm_epsilon_cq, rmsnorm_epsilon_ckv=rmsnorm_epsilon_ckv,
                      cache_mode=cache_mode)
        if key is not None:
            if len(_STATIC_OK) >= _STATIC_OK_MAX:
                _STATIC_OK.clear()
            _STATIC_OK[key] = True
    if checks_enabled():
        _check_cache_index(cache_index, kv_cache.shape[0] * kv_cache.shape[1])


# ----------------------------------------------------------------------------------------------
# fake
# ----------------------------------------------------------------------------------------------
def _fake(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq, rmsnorm_gamma_ckv,
          rope_sin, rope_cos, kv_cache, kr_cache, *, cache_index, dequant_scale_x=None, dequant_scale_w_dq=None,
          dequant_scale_w_uq_qr=None, dequant_scale_w_dkv_kr=None, quant_scale_ckv=None, quant_scale_ckr=None,
          smooth_scales_cq=None, rmsnorm_epsilon_cq=1e-5, rmsnorm_epsilon_ckv=1e-5, cache_mode="PA_BSND"):
    _check_static(token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr, rmsnorm_gamma_cq, rmsnorm_gamma_ckv,
                  rope_sin, rope_cos, kv_cache, kr_cache, cache_index=cache_index, dequant_scale_x=dequant_scale_x,
                  dequant_scale_w_dq=dequant_scale_w_dq, dequant_scale_w_uq_qr=dequant_scale_w_uq_qr,
                  dequant_scale_w_dkv_kr=dequant_scale_w_dkv_kr, quant_scale_ckv=quant_scale_ckv,
                  quant_scale_ckr=quant_scale_ckr, smooth_scales_cq=smooth_scales_cq,
                  rmsnorm_epsilon_cq=rmsnorm_epsilon_cq, rmsnorm_epsilon_ckv=rmsnorm_epsilon_ckv, cache_mode=cache_mode)
    _, _, q8 = _ref.infer_mode(token_x, weight_uq_qr, kv_cache)
    lead = tuple(token_x.shape[:-1])
    N, _, Hckv = weight_uk.shape
    Dr = kr_cache.shape[-1]
    dt = weight_uk.dtype
    dev = token_x.device
    query = token_x.new_empty(*lead, N, Hckv, dtype=torch.int8 if q8 else dt)
    query_rope = token_x.new_empty(*lead, N, Dr, dtype=dt)
    if q8:
        T = math.prod(lead)
        dsq = torch.empty(T, N, 1, dtype=torch.float32, device=dev)
    else:
        dsq = torch.empty(0, dtype=torch.float32, device=dev)
    return query, query_rope, dsq


# ----------------------------------------------------------------------------------------------
# FLOPs and bytes
# ----------------------------------------------------------------------------------------------
def _dims(token_x, weight_dq, weight_uk, kr_cache) -> tuple[int, ...]:
    T = math.prod(token_x.shape[:-1])
    He, Hcq = weight_dq.shape
    N, D, Hckv = weight_uk.shape
    Dr = kr_cache.shape[-1]
    return T, He, Hcq, N, D, Hckv, Dr


def flops(**inputs) -> int:
    """GEMM FLOPs of one call (2 per MAC): 2·T·(He·Hcq + Hcq·N·(D+Dr) + N·D·Hckv + He·(Hckv+Dr)).
    RmsNorm, RoPE and quantisation are not counted. Reads shapes only."""
    T, He, Hcq, N, D, Hckv, Dr = _dims(inputs["token_x"], inputs["weight_dq"], inputs["weight_uk"], inputs["kr_cache"])
    return 2 * T * (He * Hcq + Hcq * N * (D + Dr) + N * D * Hckv + He * (Hckv + Dr))


def _nbytes(t) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def bytes_moved(**inputs) -> int:
    """Fewest bytes one call moves through device memory: every weight, gamma and scale read once,
    token_x, sin/cos and cache_index read once, query / query_rope / dequant_scale_q_nope written once,
    and one kv_cache + kr_cache row written per token (every token counted: negative ids are data)."""
    a = _SIG.bind_partial(**inputs)
    a.apply_defaults()
    a = a.arguments
    T, He, Hcq, N, D, Hckv, Dr = _dims(a["token_x"], a["weight_dq"], a["weight_uk"], a["kr_cache"])
    reads = sum(_nbytes(a[k]) for k in (
        "token_x", "weight_dq", "weight_uq_qr", "weight_uk", "weight_dkv_kr", "rmsnorm_gamma_cq", "rmsnorm_gamma_ckv",
        "rope_sin", "rope_cos", "cache_index", "dequant_scale_x", "dequant_scale_w_dq", "dequant_scale_w_uq_qr",
        "dequant_scale_w_dkv_kr", "quant_scale_ckv", "quant_scale_ckr", "smooth_scales_cq"))
    _, _, q8 = _ref.infer_mode(a["token_x"], a["weight_uq_qr"], a["kv_cache"])
    act = a["weight_uk"].element_size()
    writes = T * N * Hckv * (1 if q8 else act) + T * N * Dr * act + (T * N * 4 if q8 else 0)
    writes += T * (Hckv * a["kv_cache"].element_size() + Dr * a["kr_cache"].element_size())
    return reads + writes


def _flop_formula(*args, out_val=None, **kwargs) -> int:
    b = _SIG.bind(*args, **kwargs)
    return flops(**b.arguments)


# ----------------------------------------------------------------------------------------------
# inputs
# ----------------------------------------------------------------------------------------------
MODES = ("bf16", "partial", "partial_c8", "a8w8", "a8w8_c8", "bf16_c8")


def _quant_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 [K, C] → (int8 [K, C], fp32 per-channel scale [1, C]) symmetric, round half even."""
    s = w.abs().amax(0, keepdim=True).clamp_min(1e-12) / 127.0
    return torch.round(w / s).clamp(-127, 127).to(torch.int8), s


def make_inputs(shape: dict, *, dtype: torch.dtype = torch.bfloat16, device="cpu",
                generator: torch.Generator | None = None) -> dict:
    """Fresh random keyword inputs for ``ds::mla_prolog``.

    shape keys: ``T`` (or ``B`` and ``S`` for 3-D token_x), ``N``, ``He``, ``Hcq``, and optional ``Hckv``
    (512), ``D`` (128), ``Dr`` (64), ``block_size`` (128), ``num_blocks`` (enough for 2·T slots, ≥ 1),
    ``mode`` (one of MODES, default "bf16"), ``cache_fill`` ("nan" default for float caches, or "random"),
    ``skip_frac`` (fraction of cache_index set to −1, default 1/8), ``eps`` (1e-5).
    dtype is the activation dtype (bf16, fp16 or fp32). Weights are N(0, 1/fan_in) so activations are
    O(1); int8 weights are that draw quantised per channel (on CUDA stored K-major, as
    ``ops.triton.mla_prolog.pack_weights(..., "cuda")`` does); int8
    token_x is a N(0,1) draw quantised per token. RoPE sin/cos come from reference.deepseek.rope_sin_cos at random positions < 4096. cache_index
    holds distinct random slots, some −1; float caches start as NaN (or random), int8 caches random.
    Raises ValueError if ``mode`` is not one of MODES, or if the T tokens need more slots than
    num_blocks·block_size (an explicit ``num_blocks`` too small); KeyError if T (or B / S), N, He or Hcq
    is missing.
    """
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    mode = shape.get("mode", "bf16")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    lead = (shape["B"], shape["S"]) if "B" in shape else (shape["T"],)
    T = math.prod(lead)
    N, He, Hcq = shape["N"], shape["He"], shape["Hcq"]
    Hckv, D, Dr = shape.get("Hckv", 512), shape.get("D", 128), shape.get("Dr", 64)
    if Dr % 2:
        raise ValueError(f"make_inputs: Dr (the rope dim) must be even (RoPE rotates pairs), got {Dr}")
    bs = shape.get("block_size", 128)
    nb = shape.get("num_blocks", max(1, -(-2 * T // bs)))
    eps = shape.get("eps", 1e-5)
    full = mode.startswith("a8w8")
    wq = mode.startswith(("partial", "a8w8"))
    c8 = mode.endswith("c8")

    def randn(*s, std=1.0):
        return torch.randn(*s, generator=g) * std

    x = randn(T, He)
    w_dq = randn(He, Hcq, std=He ** -0.5)
    w_uq_qr = randn(Hcq, N * (D + Dr), std=Hcq ** -0.5)
    w_uk = randn(N, D, Hckv, std=D ** -0.5)
    w_dkv_kr = randn(He, Hckv + Dr, std=He ** -0.5)
    gamma_cq = 1 + 0.1 * randn(Hcq)
    gamma_ckv = 1 + 0.1 * randn(Hckv)
    pos = torch.randint(0, 4096, (T,), generator=g)
    sin, cos = rope_sin_cos(pos, Dr)
    out: dict = {}
    if full:
        sx = x.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127.0
        out["token_x"] = torch.round(x / sx).clamp(-127, 127).to(torch.int8).reshape(*lead, He)
        out["dequant_scale_x"] = sx.reshape(T, 1)
        out["weight_dq"], out["dequant_scale_w_dq"] = _quant_per_channel(w_dq)
        out["weight_dkv_kr"], out["dequant_scale_w_dkv_kr"] = _quant_per_channel(w_dkv_kr)
    else:
        out["token_x"] = x.to(dtype).reshape(*lead, He)
        out["weight_dq"] = w_dq.to(dtype)
        out["weight_dkv_kr"] = w_dkv_kr.to(dtype)
    if wq:
        out["weight_uq_qr"], out["dequant_scale_w_uq_qr"] = _quant_per_channel(w_uq_qr)
        out["smooth_scales_cq"] = (0.5 + torch.rand(1, Hcq, generator=g)).float()
    else:
        out["weight_uq_qr"] = w_uq_qr.to(dtype)
    out["weight_uk"] = w_uk.to(dtype)
    out["rmsnorm_gamma_cq"] = gamma_cq.to(dtype)
    out["rmsnorm_gamma_ckv"] = gamma_ckv.to(dtype)
    out["rope_sin"] = sin.to(dtype).reshape(*lead, Dr)
    out["rope_cos"] = cos.to(dtype).reshape(*lead, Dr)

    fill = shape.get("cache_fill", "nan")

    def cache(width, int8):
        if int8:
            return torch.randint(-128, 128, (nb, bs, 1, width), generator=g, dtype=torch.int8)
        if fill == "nan":
            return torch.full((nb, bs, 1, width), float("nan"), dtype=dtype)
        return randn(nb, bs, 1, width).to(dtype)

    out["kv_cache"] = cache(Hckv, c8)
    out["kr_cache"] = cache(Dr, c8 and not full)
    if c8:
        # static calibration: |kv| ≲ 4·max|gamma|, |k_rope| ≲ 4 → map that to about ±127
        if full:
            out["quant_scale_ckv"] = torch.tensor([127.0 / 6.0])
        else:
            out["quant_scale_ckv"] = (127.0 / 6.0) * (0.8 + 0.4 * torch.rand(1, Hckv, generator=g))
            out["quant_scale_ckr"] = (127.0 / 6.0) * (0.8 + 0.4 * torch.rand(1, Dr, generator=g))

    slots = nb * bs
    if T > slots:
        raise ValueError(f"make_inputs: T = {T} tokens need at least T slots, got num_blocks·block_size = {slots}")
    ids = torch.randperm(slots, generator=g)[:T]
    skip = torch.rand(T, generator=g) < shape.get("skip_frac", 0.125)
    ids = torch.where(skip, torch.full_like(ids, -1), ids)
    out["cache_index"] = ids.to(torch.int64).reshape(lead)
    out["rmsnorm_epsilon_cq"] = eps
    out["rmsnorm_epsilon_ckv"] = eps
    out = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in out.items()}
    if torch.device(device).type == "cuda":
        # int8 weights in the layout the CUDA kernels read fastest, as a deployment packs them once offline
        # (ops.triton.mla_prolog.pack_weights; quant_matmul's make_inputs does the same): K-major, a [K, N] view
        # of a contiguous [N, K] tensor. Row-major int8 weights made the H200 report's A8W8 rows ~2x slower
        for k in ("weight_dq", "weight_uq_qr", "weight_dkv_kr"):
            if out[k].dtype == torch.int8:
                out[k] = out[k].t().contiguous().t()
    return out


# ----------------------------------------------------------------------------------------------
# spec and registration
# ----------------------------------------------------------------------------------------------
def _shapes() -> dict[str, dict]:
    s: dict[str, dict] = {}
    for mode in ("bf16", "a8w8"):
        for T in (1, 32, 128):
            for N in (128, 64, 32, 16, 8):
                s[f"t{T}_n{N}_{mode}"] = dict(T=T, N=N, He=7168, Hcq=1536, Hckv=512, D=128, Dr=64,
                                               block_size=128, mode=mode)
    for mode in MODES:
        s[f"cpu_small_{mode}"] = dict(T=6, N=2, He=64, Hcq=96, Hckv=512, D=128, Dr=64, block_size=16, mode=mode)
    return s


SPEC = OpSpec(name="mla_prolog", flops=flops, bytes=bytes_moved, make_inputs=make_inputs, shapes=_shapes(),
              compute="bf16", tolerance="bf16")


def _triton_supports(*args, **kwargs) -> str | None:
    try:
        from .triton import mla_prolog as _tri
    except ImportError as e:
        return f"ops.triton.mla_prolog is not importable ({e})"
    fn = getattr(_tri, "supports_reason", None)
    return None if fn is None else fn(*args, **kwargs)


mla_prolog = DsOp(
    "mla_prolog", _ref.mla_prolog, fake=_fake, check=_check, spec=SPEC, mutates_args=("kv_cache", "kr_cache"),
    kernels=[Kernel("triton", "ops.triton.mla_prolog", "mla_prolog", ("cuda", "cpu", "npu"), supports=_triton_supports)],
    flop_formula=_flop_formula,
)
