"""Host side shared by the SmoothQuant GEMM launchers (ops/triton/quant.py: the tiled GEMM, ops/triton/quant_gemv.py:
the streaming GEMV): the quant_matmul config tables and their check, the launch plan (bucket, split-K), the split-K
workspaces and tile counters, and the two fp32 epilogue store helpers both kernels inline.

Config tables: ``ops/triton/configs/<backend>/quant.json`` section ``quant_matmul`` (grammar:
:mod:`ops.triton._common`; buckets match on ``M``, ``N``, ``K``). Section keys: ``max_split_k`` / ``min_k_per_split``
/ ``split_target`` (split_k "auto": split K until about split_target work items exist, 0 = the device's SM count,
at most max_split_k splits of at least min_k_per_split each), ``grid_cap`` (0 = one program per work item, else a
persistent loop), ``wrap`` (rows / columns past M / N wrap around instead of masking the loads: CUDA; Ascend
masks, its pointer analysis needs affine offsets), ``epilogue`` (the tile of the split-K epilogue kernel). Bucket
keys: :data:`BUCKET_KEYS` (meanings at :func:`ops.triton.quant._qmm_kernel` and
:func:`ops.triton.quant_gemv._qmm_gemv_kernel`).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ._common import backend_key as _backend_key, cdiv as _cdiv, load_configs, select, device_cores


def not_pow2_int(v) -> bool:
    """Whether a config value is not a power-of-two int (bools refused): tile lengths, max_block_k, k_batch."""
    return isinstance(v, bool) or not isinstance(v, int) or v < 1 or bool(v & (v - 1))


def capped_grid(n_items: int, cap: int) -> int:
    """Programs of a launch over ``n_items`` work items: one each, or at most ``cap`` (> 0) with a loop inside."""
    return max(1, min(n_items, cap) if cap > 0 else n_items)


@functools.lru_cache(maxsize=None)
def tables() -> dict:
    """``{backend: table}`` of configs/<backend>/quant.json with every quant_matmul bucket checked once
    (:func:`check_bucket`). Shared: never modify it."""
    cfgs = load_configs("quant")
    for name, table in cfgs.items():
        if "quant_matmul" in table:
            for i, b in enumerate(table["quant_matmul"]["buckets"]):
                check_bucket(b["config"], f"ops/triton/configs/{name}/quant.json quant_matmul bucket {i}: ")
    return cfgs


def split_target(cfg: dict, device: torch.device) -> int:
    """Work items split_k "auto" aims at: the section's split_target, else the CUDA SM count, else 20."""
    return device_cores(device, int(cfg.get("split_target", 0)))


# ----------------------------------------------------------------------------------------------
# fp32 epilogue store helpers (inlined by _qmm_kernel, _qmm_epilogue_kernel and _qmm_gemv_kernel)
# ----------------------------------------------------------------------------------------------
@triton.jit
def store_out(acc, ws_ptr, xs_ptr, bias_ptr, out_ptr, om, on, mmask, nmask, stride_om, HAS_BIAS: tl.constexpr):
    """The fp32 epilogue of an int32 tile: out[om, on] = acc · weight_scale[on] · x_scale[om] (+ bias[on]), cast."""
    ws = tl.load(ws_ptr + on, mask=nmask, other=0.0).to(tl.float32)
    xs = tl.load(xs_ptr + om, mask=mmask, other=0.0).to(tl.float32)
    o = acc.to(tl.float32) * ws[None, :] * xs[:, None]
    if HAS_BIAS:
        o = o + tl.load(bias_ptr + on, mask=nmask, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + om.to(tl.int64)[:, None] * stride_om + on[None, :], o.to(out_ptr.dtype.element_ty),
             mask=mmask[:, None] & nmask[None, :])


@triton.jit
def store_row(acc, ws, xs, bias, out_ptr, m: tl.constexpr, on, nmask, stride_om, HAS_BIAS: tl.constexpr):
    """:func:`store_out`'s arithmetic for one token row m with the per-column vectors already loaded
    (``ws`` / ``bias`` [BLOCK_N] fp32, ``xs`` fp32 scalar): out[m, on] = acc · ws · xs (+ bias), same order."""
    o = acc.to(tl.float32) * ws * xs
    if HAS_BIAS:
        o = o + bias
    tl.store(out_ptr + (on.to(tl.int64) + m * stride_om), o.to(out_ptr.dtype.element_ty), mask=nmask)


MMA_MODES = {"dot": 0, "swap": 1}  # bucket key "mma" -> _qmm_kernel's MMA constexpr
# "gemv_stream" is not an MMA constexpr of _qmm_kernel: it launches _qmm_gemv_kernel (M <= 4)
GEMV_STREAM = "gemv_stream"
GEMV_MAX_M = 4

# every key a quant_matmul bucket (or a config passed to quant_matmul_config / plan_quant_matmul) may name; SPLIT_K
# and K_PER_SPLIT are what a plan adds, so a plan can be passed back as a config
BUCKET_KEYS = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "split_k", "split_target",
               "reduce", "mma", "mask_m", "programs_per_sm", "dp4a", "prefetch", "pdl", "k_batch", "SPLIT_K",
               "K_PER_SPLIT"}
_REQUIRED_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps")


def check_bucket(b: dict, where: str = "") -> None:
    """Raise for a quant_matmul bucket config that names an unknown key or mma, a reduce that is
    not "kernel" / "atomic", a pdl that is not true / false (0 / 1), a split_k that is not "auto" or an int ≥ 1,
    tile sizes that are not powers of two, or a k_batch that is not a power of two ≥ 1, is > 1 with an mma other than
    "dot", or leaves K slices under 32 bytes (ValueError); or that lacks BLOCK_M / BLOCK_N / BLOCK_K / num_warps (and
    GROUP_M / num_stages, except for mma "gemv_stream") (KeyError). ``where`` prefixes the message (the table and
    bucket it came from)."""
    unknown = sorted(set(b) - BUCKET_KEYS)
    if unknown:
        raise ValueError(f"{where}unknown quant_matmul config key(s) {unknown}; the keys are {sorted(BUCKET_KEYS)}")
    mma = b.get("mma", "dot")
    for k in _REQUIRED_KEYS + (() if mma == GEMV_STREAM else ("GROUP_M", "num_stages")):
        if k not in b:
            raise KeyError(f"{where}quant_matmul config needs {k!r} (it has {sorted(b)})")
    if mma not in MMA_MODES and mma != GEMV_STREAM:
        raise ValueError(f"{where}config mma must be one of {sorted(MMA_MODES) + [GEMV_STREAM]}, got {mma!r}")
    if b.get("reduce", "kernel") not in ("kernel", "atomic"):
        raise ValueError(f"{where}config reduce must be 'kernel' or 'atomic', got {b['reduce']!r}")
    if b.get("pdl", False) not in (True, False):   # 0 / 1 compare equal to False / True
        raise ValueError(f"{where}config pdl must be true or false (or 0 / 1), got {b['pdl']!r}")
    sk = b.get("split_k", "auto")
    if sk != "auto" and (isinstance(sk, bool) or not isinstance(sk, int) or sk < 1):
        raise ValueError(f"{where}config split_k must be 'auto' or an int >= 1, got {sk!r}")
    for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        v = b[k]
        if not_pow2_int(v):
            raise ValueError(f"{where}config {k} must be a power of two (a tl.arange length), got {v!r}")
    kb = b.get("k_batch", 1)
    if not_pow2_int(kb):
        raise ValueError(f"{where}config k_batch must be a power of two >= 1, got {kb!r}")
    if kb > 1 and (mma != "dot" or b["BLOCK_K"] // kb < 32):
        raise ValueError(f"{where}config k_batch {kb} needs mma 'dot' and BLOCK_K / k_batch >= 32 (an int8 MMA's K), "
                         f"got mma {mma!r}, BLOCK_K {b['BLOCK_K']}")


COUNTERS: dict = {}
CNT_REGION = 1024   # counters per stream region (≥ the tiles of any split-K launch; more → a fresh buffer)
CNT_REGIONS = 256   # stream regions per device buffer (1 MiB; torch pools 32 streams per priority)
CNT_CAPTURE = 1 << 20   # counters handed out to captured calls, each its own slice (4 MiB)


def counters(device: torch.device, n: int) -> torch.Tensor:
    """Zeroed int32 tile counters (at least ``n``) for the in-kernel split-K reduction (``reduce: "atomic"``).

    The kernel leaves every counter it used at 0 again, so one zeroed buffer per device, created by the first
    eager call, is reused without a memset. Eager calls: each stream gets its own region of it (kernels on one
    stream never overlap). Calls captured into a CUDA graph: each gets its own slice of the buffer's capture area
    for good, so graphs replayed concurrently on different streams (two-batch overlap) never share counters, and
    no memset enters the graph (a per-call ``torch.zeros`` cost 1.1–1.3 µs per decode GEMM on the H200). A fresh
    ``torch.zeros`` for this call only (its memset captured with the graph, if capturing) when there is no buffer
    yet, the capture area is used up, there are more than ``CNT_REGIONS`` streams, or more than ``CNT_REGION``
    tiles."""
    is_cuda = device.type == "cuda"
    capturing = is_cuda and torch.cuda.is_current_stream_capturing()
    if n > CNT_REGION:
        return torch.zeros(n, dtype=torch.int32, device=device)
    dkey = (device.type, device.index)
    entry = COUNTERS.get(dkey)
    if entry is None:
        if capturing:   # no eager buffer yet (a zeros() now would be memset in every replay): this call's own
            return torch.zeros(n, dtype=torch.int32, device=device)
        buf = torch.zeros(CNT_REGION * CNT_REGIONS + CNT_CAPTURE, dtype=torch.int32, device=device)
        entry = COUNTERS[dkey] = (buf, {})
    buf, slots = entry
    if capturing:
        used = slots.get("capture", 0)
        if used + n > CNT_CAPTURE:
            return torch.zeros(n, dtype=torch.int32, device=device)
        slots["capture"] = used + n
        off = CNT_REGION * CNT_REGIONS + used
        return buf[off: off + n]
    skey = torch.cuda.current_stream(device).cuda_stream if is_cuda else 0
    off = slots.get(skey)
    if off is None:
        if sum(1 for k in slots if k != "capture") >= CNT_REGIONS:
            return torch.zeros(n, dtype=torch.int32, device=device)
        off = slots[skey] = sum(1 for k in slots if k != "capture") * CNT_REGION
    return buf[off: off + CNT_REGION]


def split_k_buffers(plan: dict, sk: int, tiles: int, out: torch.Tensor, dev: torch.device):
    """(part, reduce, cnt) of a launch with ``sk`` K splits over ``tiles`` output tiles: the int32 partial sums
    [sk, M, N] (``out`` itself when unsplit: never read), whether the last-arriving split reduces them ("atomic"),
    and its tile counters (``part`` as a dummy otherwise)."""
    M, N = out.shape
    part = torch.empty((sk, M, N), dtype=torch.int32, device=dev) if sk > 1 else out
    reduce = sk > 1 and plan.get("reduce", "kernel") == "atomic"
    cnt = counters(dev, tiles) if reduce else part
    return part, reduce, cnt


def bucket(M: int, N: int, K: int, cfg: dict) -> dict:
    """The config of the first bucket of quant_matmul section ``cfg`` that matches (M, N, K) (grammar:
    :mod:`ops.triton._common`; dimensions ``M``, ``N``, ``K``). Shared: never modify it."""
    return select(cfg["buckets"], M=M, N=N, K=K)


def max_rows(entry: dict) -> int | None:
    """The largest M a bucket ``entry`` ({"match": ..., "config": ...}) of a quant_matmul table admits (None: any)."""
    m = entry.get("match", {})
    his = [box.get("M", [0, None])[1] for box in (m if isinstance(m, list) else [m])]
    return None if None in his else max(his)


def choose_split(M: int, N: int, K: int, b: dict, cfg: dict, device: torch.device | None,
                 target: int | None = None) -> tuple[int, int]:
    """(SPLIT_K, K_PER_SPLIT); K_PER_SPLIT is a multiple of BLOCK_K. ``target``: the split target already
    resolved for the device (else :func:`split_target` of ``device``)."""
    bk = int(b["BLOCK_K"])
    tiles = _cdiv(M, int(b["BLOCK_M"])) * _cdiv(N, int(b["BLOCK_N"]))
    sk = b.get("split_k", "auto")
    if sk == "auto":
        if int(b.get("split_target", 0)) > 0:
            target = int(b["split_target"])  # the bucket's own work-item target (e.g. 2 waves of 132 SMs)
        elif target is None:
            target = split_target(cfg, device)
        sk = max(1, target // max(tiles, 1))
        sk = min(sk, int(cfg["max_split_k"]), max(1, K // int(cfg["min_k_per_split"])))
    sk = max(1, int(sk))
    k_per = _cdiv(_cdiv(K, sk), bk) * bk
    sk = _cdiv(K, k_per) if K > 0 else 1
    return sk, k_per


def plan_quant_matmul(M: int, N: int, K: int, device: torch.device, config: dict | None = None, *,
                      backend_key: str | None = None, split_target: int | None = None) -> dict:
    """The launch plan the launcher would use (bucket + SPLIT_K + K_PER_SPLIT); ``config`` overrides the bucket.

    M, N, K: the GEMM's token rows, output columns and reduction length (ints, shapes only, no data); device:
    selects the config table ("cuda", else "ascend") and, for ``split_k: "auto"``, the split target (the
    table's split_target, else the CUDA SM count, else 20);
    config: a whole bucket dict (BLOCK_M/N/K, GROUP_M, num_warps, num_stages, split_k, mma, ...) or None;
    backend_key: "cuda" / "ascend" to force the table of configs/<backend_key>/quant.json;
    split_target: the work items split_k "auto" aims at, in place of the device's (the table's split_target, else
    the CUDA SM count, else 20): plans for another device's SM count.
    Returns a new dict: the bucket's keys plus SPLIT_K and K_PER_SPLIT (a multiple of BLOCK_K); plans from the
    table (``config`` None) are memoised.
    Raises ValueError if the bucket (``config`` or the table's) names an unknown key (:data:`BUCKET_KEYS`), an mma
    that is not "dot" / "swap" / "gemv_stream", or a bad value (reduce, pdl, split_k, tile sizes, k_batch:
    :func:`check_bucket`); KeyError for a backend_key that is not a table or a ``config`` missing BLOCK_M / BLOCK_N /
    BLOCK_K. "gemv_stream" with M > 4
    is not checked here (a plan is shape-only): :func:`quant_matmul_config` raises it at launch."""
    key = backend_key or _backend_key(device)
    if config is not None:
        return make_qmm_plan(M, N, K, key, config, device, split_target)
    if split_target is not None:
        return dict(_cached_qmm_plan(M, N, K, key, int(split_target)))
    return dict(qmm_plan(M, N, K, key, device))


def qmm_plan(M: int, N: int, K: int, key: str, device: torch.device) -> dict:
    """The table's plan, memoised on (M, N, K, config table, split target); shared: never modify it."""
    return _cached_qmm_plan(M, N, K, key, split_target(tables()[key]["quant_matmul"], device))


@functools.lru_cache(maxsize=4096, typed=True)
def _cached_qmm_plan(M: int, N: int, K: int, key: str, target: int) -> dict:
    return make_qmm_plan(M, N, K, key, None, None, target)


def make_qmm_plan(M: int, N: int, K: int, key: str, config: dict | None, device: torch.device | None,
                  target: int | None = None) -> dict:
    """:func:`plan_quant_matmul`'s body for table ``key`` (uncached): ``config`` (or the table's bucket) checked,
    SPLIT_K and K_PER_SPLIT added; ``target``: the split target already resolved (else from ``device``)."""
    cfg = tables()[key]["quant_matmul"]
    b = dict(config) if config is not None else dict(bucket(M, N, K, cfg))
    check_bucket(b)
    sk, k_per = choose_split(M, N, K, b, cfg, device, target)
    b.update(SPLIT_K=sk, K_PER_SPLIT=k_per)
    return b


def clear_caches() -> None:
    """Forget the memoised quant_matmul plans (tests comparing warm with cold launches, table experiments)."""
    _cached_qmm_plan.cache_clear()


def gemv_stream_plan(M: int, N: int, K: int, device: torch.device) -> dict | None:
    """The "cuda" table's quant_matmul plan for (M, N, K) when it is the unsplit streaming GEMV
    (``mma: "gemv_stream"``, SPLIT_K 1), else None. Shapes only (memoised plan, no sync); None off CUDA."""
    if device.type != "cuda" or M < 1 or M > GEMV_MAX_M or N < 1 or K < 1:
        return None
    p = qmm_plan(M, N, K, "cuda", device)
    return p if p.get("mma") == GEMV_STREAM and int(p["SPLIT_K"]) == 1 else None
