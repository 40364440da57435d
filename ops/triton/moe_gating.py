"""Triton kernel for ``ds::moe_gating_top_k`` (DeepSeek noaux_tc routing), one launch for E ≤ 1024.

Semantics: reference/moe_gating.py (mirrors ``torch_npu.npu_moe_gating_top_k``). Each program holds
BLOCK_T rows as a ``[BLOCK_T, G_PAD, GS_PAD]`` fp32 tile (G = group_count, GS = E / G, both padded to
powers of two) and does, all in registers:

1. ``s = sigmoid(x)`` or ``softmax(x)`` in fp32 (written to norm_out), ``b = s + bias`` (bias fp32);
   the choice key is b with NaN → −inf.
2. group score per row and group: the group max (mode 0) or the sum of its two largest keys (mode 1;
   the second is the max after removing the *first* occurrence of the largest), NaN → −inf.
3. k_group rounds of "best group among the not-yet-kept" (ties → lower group).
4. k rounds of "best expert among the not-yet-chosen experts of kept groups" (ties → lower expert id).
   Dropped groups are excluded outright (the reference ranks every kept expert above every dropped
   one), so even an all-NaN / all-−inf row yields k distinct in-range ids: the lowest unchosen ids of
   the kept groups. Every round is a max-reduction and a min-reduction over the tile (or, with PACKED, one
   int64 max over the score's order-preserving bits and E − 1 − id) — ties go to the lowest index by
   construction (no reliance on ``tl.argmax`` tie rules).
5. ``w = s[idx]`` (NaN → 0), renormalised ``w / (Σw + eps)`` (sigmoid always, softmax iff renorm=1),
   times routed_scaling_factor once; y rounded to x's dtype.

E, G, k, k_group and the modes are compile-time constants (a model has one routing config).
No host synchronisation; T = 0 returns empty outputs without a launch.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ._common import (backend_key as _backend_key, bf16_cpu_output_reason as _bf16_cpu_output_reason,
                      cdiv as _cdiv, load_configs, next_power_of_2 as _np2, unit_inner as _unit_inner)

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_EXPERTS = 1024


def _all_configs() -> dict:
    return load_configs("moe_gating")


@triton.jit(do_not_specialize=["T", "rsf", "eps"])
def _moe_gating_kernel(x_ptr, bias_ptr, y_ptr, idx_ptr, norm_ptr, T, stride_xt, rsf, eps,
                       E: tl.constexpr, G: tl.constexpr, GS: tl.constexpr, G_PAD: tl.constexpr, GS_PAD: tl.constexpr,
                       K: tl.constexpr, K_PAD: tl.constexpr, KG: tl.constexpr, GROUP_MODE: tl.constexpr,
                       SIGMOID: tl.constexpr, RENORM: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_T: tl.constexpr,
                       PACKED: tl.constexpr = False):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    og = tl.arange(0, G_PAD)
    oj = tl.arange(0, GS_PAD)
    e2 = og[:, None] * GS + oj[None, :]                                  # [G_PAD, GS_PAD] expert id
    valid2 = (og < G)[:, None] & (oj < GS)[None, :]
    e3 = e2[None, :, :]
    valid3 = valid2[None, :, :]
    gvalid = (og < G)[None, :]                                           # [1, G_PAD]
    kcol = tl.arange(0, K_PAD)[None, :]                                  # [1, K_PAD]
    ninf = float("-inf")
    if HAS_BIAS:
        bias = tl.load(bias_ptr + e2, mask=valid2, other=0.0).to(tl.float32)[None, :, :]
    n_blocks = tl.cdiv(T, BLOCK_T)
    for tb in range(pid, n_blocks, nprog):
        rows = tb * BLOCK_T + tl.arange(0, BLOCK_T)
        rmask = rows < T
        rows64 = rows.to(tl.int64)
        m3 = rmask[:, None, None] & valid3
        x = tl.load(x_ptr + rows64[:, None, None] * stride_xt + e3, mask=m3, other=0.0).to(tl.float32)
        if SIGMOID:
            s = 1.0 / (1.0 + tl.exp(-x))
        else:
            xm = tl.where(valid3, x, ninf)
            mx = tl.max(tl.max(xm, axis=2), axis=1)
            p = tl.exp(xm - mx[:, None, None])
            p = tl.where(valid3, p, 0.0)
            den = tl.sum(tl.sum(p, axis=2), axis=1)
            s = p / den[:, None, None]
        tl.store(norm_ptr + rows64[:, None, None] * E + e3, s, mask=m3)
        if HAS_BIAS:
            b = s + bias
        else:
            b = s
        key = tl.where(b == b, b, ninf)
        key = tl.where(valid3, key, ninf)
        # ---- groups -------------------------------------------------------------------------
        if KG < G:
            m1 = tl.max(key, axis=2)                                     # [BT, G_PAD]
            if GROUP_MODE == 1:
                j1 = tl.min(tl.where(key == m1[:, :, None], oj[None, None, :], GS_PAD), axis=2)
                rest = tl.where(oj[None, None, :] == j1[:, :, None], ninf, key)
                gscore = m1 + tl.max(rest, axis=2)
            else:
                gscore = m1
            gscore = tl.where(gscore == gscore, gscore, ninf)
            kept = tl.zeros([BLOCK_T, G_PAD], dtype=tl.int32)
            for _r in tl.static_range(KG):
                free = gvalid & (kept == 0)
                cand = tl.where(free, gscore, ninf)
                best = tl.max(cand, axis=1)
                gi = tl.min(tl.where(free & (cand == best[:, None]), og[None, :], G_PAD), axis=1)
                kept = tl.where(og[None, :] == gi[:, None], 1, kept)
            allowed = valid3 & (kept[:, :, None] != 0)
        else:
            allowed = valid3 & (rows[:, None, None] >= 0)
        # ---- experts ------------------------------------------------------------------------
        sw = tl.where(s == s, s, 0.0)
        ids = tl.zeros([BLOCK_T, K_PAD], dtype=tl.int32)
        wts = tl.zeros([BLOCK_T, K_PAD], dtype=tl.float32)
        if PACKED:
            # one int64 max per round picks the best key and, among equal keys, the lowest id: the key's fp32
            # bits made order-preserving as int32 (negatives: magnitude bits flipped; -0 folded into +0 first)
            # in the high word, E - 1 - id in the low word
            kb = (key + 0.0).to(tl.int32, bitcast=True)
            ordk = tl.where(kb < 0, kb ^ 0x7FFFFFFF, kb)
            packed = (ordk.to(tl.int64) << 32) | (E - 1 - e3).to(tl.int64)
        for r in tl.static_range(K):
            if PACKED:
                cand = tl.where(allowed, packed, -9223372036854775807 - 1)
                best = tl.max(tl.max(cand, axis=2), axis=1)
                ei = (E - 1) - (best & 0xFFFFFFFF).to(tl.int32)
            else:
                cand = tl.where(allowed, key, ninf)
                best = tl.max(tl.max(cand, axis=2), axis=1)
                hit = allowed & (cand == best[:, None, None])
                ei = tl.min(tl.min(tl.where(hit, e3, E), axis=2), axis=1)   # lowest id among the best
            onehot = valid3 & (e3 == ei[:, None, None])  # padded lanes alias the next group's ids
            w = tl.sum(tl.sum(tl.where(onehot, sw, 0.0), axis=2), axis=1)
            allowed = allowed & (e3 != ei[:, None, None])
            ids = tl.where(kcol == r, ei[:, None], ids)
            wts = tl.where(kcol == r, w[:, None], wts)
        if RENORM:
            tot = tl.sum(wts, axis=1) + eps
            tot = tl.where(tot == 0.0, 1.0, tot)                  # eps = 0 and a zero sum: weights 0, not 0/0
            wts = tl.math.div_rn(wts, tl.broadcast_to(tot[:, None], wts.shape))
        wts = wts * rsf
        kmask = rmask[:, None] & (kcol < K)
        tl.store(y_ptr + rows64[:, None] * K + kcol, wts.to(y_ptr.dtype.element_ty), mask=kmask)
        tl.store(idx_ptr + rows64[:, None] * K + kcol, ids, mask=kmask)


def supports_reason_moe_gating_top_k(x, k, *, bias=None, k_group=1, group_count=1, group_select_mode=0, renorm=0,
                                     norm_type=0, out_flag=False, routed_scaling_factor=1.0, eps=1e-20) -> str | None:
    """Why the Triton kernel cannot take these inputs (None = it can)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in _FLOAT_DTYPES:
        return "x must be a 2-D fp16/bf16/fp32 tensor [T, E]"
    T, E = x.shape
    if x.dtype == torch.bfloat16 and x.device.type == "cpu":
        return _bf16_cpu_output_reason("y")
    if group_count < 1 or E % group_count:
        return "group_count must divide E"
    gs = E // group_count
    if _np2(group_count) * _np2(gs) > MAX_EXPERTS:
        return f"E = {E} in {group_count} groups pads to more than {MAX_EXPERTS} experts (one tile per row)"
    if not 1 <= k_group <= group_count:
        return f"k_group must be in [1, group_count = {group_count}], got {k_group}"
    if not 1 <= k <= gs * k_group:
        return "k must be in [1, k_group · E / group_count]"
    return None


supports_reason = supports_reason_moe_gating_top_k


def moe_gating_top_k(x: torch.Tensor, k: int, *, bias: torch.Tensor | None = None, k_group: int = 1,
                     group_count: int = 1, group_select_mode: int = 0, renorm: int = 0, norm_type: int = 0,
                     out_flag: bool = False, routed_scaling_factor: float = 1.0, eps: float = 1e-20
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DeepSeek noaux_tc MoE routing in one launch; mirrors ``torch_npu.npu_moe_gating_top_k``.

    x: [T, E] fp16/bf16/fp32 router logits; k: experts per token; bias: [E] fp32 (or x's dtype) or None;
    k_group / group_count: kept / total contiguous expert groups; group_select_mode: 0 group max, 1 top-2 sum;
    renorm: softmax only (sigmoid always renormalises); norm_type: 0 softmax, 1 sigmoid; out_flag: accepted,
    norm_out is always written; routed_scaling_factor, eps: fp32 scalars.
    Returns (y [T, k] x.dtype routing weights, expert_idx [T, k] int32 by descending biased score,
    norm_out [T, E] fp32 = s). Semantics and non-finite handling: reference/moe_gating.py.
    Inputs are validated by ops/moe_gating.py, not here.
    """
    return moe_gating_top_k_config(x, k, bias=bias, k_group=k_group, group_count=group_count,
                                   group_select_mode=group_select_mode, renorm=renorm, norm_type=norm_type,
                                   out_flag=out_flag, routed_scaling_factor=routed_scaling_factor, eps=eps)


def moe_gating_top_k_config(x: torch.Tensor, k: int, *, bias: torch.Tensor | None = None, k_group: int = 1,
                            group_count: int = 1, group_select_mode: int = 0, renorm: int = 0, norm_type: int = 0,
                            out_flag: bool = False, routed_scaling_factor: float = 1.0, eps: float = 1e-20,
                            config: dict | None = None, backend_key: str | None = None):
    """:func:`moe_gating_top_k` with explicit launch settings (``config`` entries override the table's
    tile_elems / max_block_t / num_warps / grid_cap, or give BLOCK_T directly) — for perf sweeps."""
    T, E = x.shape
    dev = x.device
    y = torch.empty((T, k), dtype=x.dtype, device=dev)
    idx = torch.empty((T, k), dtype=torch.int32, device=dev)
    norm_out = torch.empty((T, E), dtype=torch.float32, device=dev)
    if T == 0:
        return y, idx, norm_out
    if x.stride(1) != 1:
        x = x.contiguous()
    bias = _unit_inner(bias)          # read as bias_ptr + e
    key = backend_key or _backend_key(dev)
    if config:
        grid, kw = _make_launch(T, E, k, k_group, group_count, group_select_mode, renorm, norm_type,
                                bias is not None, key, config, x.element_size())
    else:
        grid, kw = _cached_launch(T, E, k, k_group, group_count, group_select_mode, renorm, norm_type,
                                  bias is not None, key, x.element_size())
    _moe_gating_kernel[grid](
        x, bias if bias is not None else x, y, idx, norm_out, T, x.stride(0),
        float(routed_scaling_factor), float(eps), **kw)
    return y, idx, norm_out


def _make_launch(T: int, E: int, k: int, k_group: int, group_count: int, group_select_mode: int, renorm: int,
                 norm_type: int, has_bias: bool, key: str, config: dict | None, x_bytes: int = 4) -> tuple[tuple, dict]:
    """(grid, constexprs + num_warps) of the launch: from shapes, the integer options, the logits' element size
    ``x_bytes`` and the config only. Config ``packed``: true / false, or "16bit" (only for 2-byte logits)."""
    G = group_count
    GS = E // G
    g_pad, gs_pad = _np2(G), _np2(GS)
    cfg = {**_all_configs()[key], **(config or {})}
    block_t = max(1, min(int(cfg["tile_elems"]) // (g_pad * gs_pad), int(cfg["max_block_t"]),
                         _np2(T)))
    block_t = int(cfg.get("BLOCK_T", block_t))
    block_t = _np2(block_t) if block_t & (block_t - 1) else block_t
    n_blocks = _cdiv(T, block_t)
    cap = int(cfg["grid_cap"])
    grid = min(n_blocks, cap) if cap > 0 else n_blocks
    kw = dict(E=E, G=G, GS=GS, G_PAD=g_pad, GS_PAD=gs_pad, K=k, K_PAD=_np2(k), KG=k_group if G > 1 else 1,
              GROUP_MODE=group_select_mode, SIGMOID=norm_type == 1, RENORM=(norm_type == 1 or renorm == 1),
              HAS_BIAS=has_bias, BLOCK_T=block_t, num_warps=int(cfg["num_warps"]))
    if _packed(cfg, x_bytes):
        kw["PACKED"] = True
    return (grid,), kw


def launch_plan(T: int, E: int, k: int, *, k_group: int = 1, group_count: int = 1, group_select_mode: int = 0,
                renorm: int = 0, norm_type: int = 0, has_bias: bool = False, backend_key: str = "ascend",
                config: dict | None = None, x_bytes: int = 4) -> tuple[tuple, dict]:
    """The launch :func:`moe_gating_top_k_config` makes for T rows of E experts (shapes and options only, no data):
    (grid, constexprs + num_warps) from config table ``backend_key`` ("cuda" / "ascend") with ``config`` entries
    overriding it; ``x_bytes`` = the logits' element size (the ``packed`` key may depend on it). Returns a new
    tuple / dict. Raises ValueError for a ``packed`` that is not true / false / "16bit"."""
    grid, kw = _make_launch(T, E, k, k_group, group_count, group_select_mode, renorm, norm_type, has_bias,
                            backend_key, config, x_bytes)
    return tuple(grid), dict(kw)


def _packed(cfg: dict, x_bytes: int) -> bool:
    """Whether the config's ``packed`` (true / false / "16bit": 2-byte logits only) applies to logits of
    ``x_bytes`` bytes. Raises ValueError for another value."""
    packed = cfg.get("packed", False)
    if packed not in (True, False, "16bit"):
        raise ValueError(f"moe_gating config packed must be true, false or \"16bit\", got {packed!r}")
    return packed is True or (packed == "16bit" and x_bytes == 2)


@functools.lru_cache(maxsize=4096, typed=True)
def _cached_launch(T: int, E: int, k: int, k_group: int, group_count: int, group_select_mode: int, renorm: int,
                   norm_type: int, has_bias: bool, key: str, x_bytes: int = 4) -> tuple[tuple, dict]:
    """:func:`_make_launch` for the config table ``key``, memoised on every argument (shared: the dict is only
    unpacked into the launch)."""
    return _make_launch(T, E, k, k_group, group_count, group_select_mode, renorm, norm_type, has_bias, key, None,
                        x_bytes)


def ascend_compile_cases() -> list[dict]:
    """(kernel × Ascend launch config) cases for the triton-ascend 3.2 + bishengir compile check:
    DeepSeek-V3 (E=256, 8 groups, top-4 groups, k=8), k=6, a flat softmax router (E=64, k=6) and E=512."""
    return compile_cases("ascend")


def compile_cases(table: str = "ascend") -> list[dict]:
    """The routing configs of :func:`ascend_compile_cases` with ``table``'s launch settings."""
    cfg = _all_configs()[table]
    cases = []
    for name, E, G, KG, K, mode, sig, renorm in (("deepseek_v3", 256, 8, 4, 8, 1, True, True),
                                                ("deepseek_v3_k6", 256, 8, 4, 6, 1, True, True),
                                                ("softmax_flat_e64", 64, 1, 1, 6, 0, False, False),
                                                ("sigmoid_e512_g16", 512, 16, 4, 8, 1, True, True)):
        gs = E // G
        g_pad, gs_pad = _np2(G), _np2(gs)
        block_t = max(1, min(int(cfg["tile_elems"]) // (g_pad * gs_pad), int(cfg["max_block_t"])))
        for dt in ("*bf16", "*fp16", "*fp32"):
            cases.append(dict(
                name=f"moe_gating_{name}_bt{block_t}_{dt[1:]}", fn=_moe_gating_kernel,
                signature={"x_ptr": dt, "bias_ptr": "*fp32", "y_ptr": dt, "idx_ptr": "*i32", "norm_ptr": "*fp32",
                           "T": "i32", "stride_xt": "i32", "rsf": "fp32", "eps": "fp32", "E": "constexpr",
                           "G": "constexpr", "GS": "constexpr", "G_PAD": "constexpr", "GS_PAD": "constexpr",
                           "K": "constexpr", "K_PAD": "constexpr", "KG": "constexpr", "GROUP_MODE": "constexpr",
                           "SIGMOID": "constexpr", "RENORM": "constexpr", "HAS_BIAS": "constexpr",
                           "BLOCK_T": "constexpr", "PACKED": "constexpr"},
                constexprs=dict(E=E, G=G, GS=gs, G_PAD=g_pad, GS_PAD=gs_pad, K=K, K_PAD=_np2(K),
                                KG=KG if G > 1 else 1, GROUP_MODE=mode, SIGMOID=sig, RENORM=renorm, HAS_BIAS=True,
                                BLOCK_T=block_t, PACKED=_packed(cfg, 4 if dt == "*fp32" else 2)),
                num_warps=int(cfg["num_warps"])))
    return cases


__all__ = ["moe_gating_top_k", "moe_gating_top_k_config", "supports_reason", "supports_reason_moe_gating_top_k",
           "launch_plan", "ascend_compile_cases", "compile_cases"]
