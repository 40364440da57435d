"""``ds::amla`` — MLA decode attention over a paged latent cache (AMLA rescaling on the kernels).

Registration only: the semantics live in :func:`reference.amla.amla`; docs/ops/amla.md describes the op.

    out, lse = torch.ops.ds.amla(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, softmax_scale, causal)

Shapes: q_nope [B,S_q,N,Dc], q_rope [B,S_q,N,Dr], kv_cache [num_blocks,block_size,1,Dc],
kr_cache [num_blocks,block_size,1,Dr], block_table [B,max_blocks] int32, seq_lens [B] int32 →
out [B,S_q,N,Dc] (q's dtype), lse [B,S_q,N] fp32 (natural log). DeepSeek-V3: Dc = 512, Dr = 64.
"""
from __future__ import annotations

import inspect
from typing import Sequence

import torch

from reference import amla as _ref
from reference.deepseek import deepseek_softmax_scale

from ._library import DsOp, Kernel, OpSpec, check_finite_float, check_tensor, checks_enabled

_DTYPES = (torch.bfloat16, torch.float16)
MAX_S_Q = 16          # CANN FIA allows up to 16 query tokens per request (MTP / speculative decode)
_SIG = inspect.signature(_ref.amla)


# ----------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------
def _check_static(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, softmax_scale, causal=True):
    """The shape / dtype / device / scalar part of :func:`_check` (no data read). The fake impl runs it too, so a
    mixed-device call through the dispatcher's Meta or Fake key raises instead of returning empty tensors."""
    check_tensor("q_nope", q_nope, dtypes=_DTYPES, ndim=4)
    B, S_q, N, Dc = q_nope.shape
    dev = q_nope.device
    check_tensor("q_rope", q_rope, dtypes=(q_nope.dtype,), ndim=4, device=dev, dtype_why=" (q_nope's dtype)")
    Dr = q_rope.shape[-1]
    check_tensor("q_rope", q_rope, shape=(B, S_q, N, None), why=" (B, S_q, N from q_nope)")
    check_tensor("kv_cache", kv_cache, dtypes=(q_nope.dtype,), ndim=4, device=dev, dtype_why=" (q_nope's dtype)")
    num_blocks, block_size = kv_cache.shape[0], kv_cache.shape[1]
    check_tensor("kv_cache", kv_cache, shape=(None, None, 1, Dc), why=" (Dc from q_nope)")
    check_tensor("kr_cache", kr_cache, dtypes=(q_nope.dtype,), shape=(num_blocks, block_size, 1, Dr), device=dev,
                 dtype_why=" (q_nope's dtype)", why=" (blocks from kv_cache, Dr from q_rope)")
    check_tensor("block_table", block_table, dtypes=(torch.int32,), ndim=2, device=dev)
    check_tensor("block_table", block_table, shape=(B, None), why=" (B from q_nope)")
    check_tensor("seq_lens", seq_lens, dtypes=(torch.int32,), shape=(B,), device=dev, why=" (B from q_nope)")
    check_finite_float("softmax_scale", softmax_scale)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
    if not 1 <= S_q <= MAX_S_Q:
        raise ValueError(f"q_nope: S_q (dim 1) must be in [1, {MAX_S_Q}], got {S_q} (shape {list(q_nope.shape)})")
    if N < 1 or Dc < 1:
        raise ValueError(f"q_nope: N and Dc must be ≥ 1, got shape {list(q_nope.shape)}")
    if block_size < 1:
        raise ValueError(f"kv_cache: block_size (dim 1) must be ≥ 1, got shape {list(kv_cache.shape)}")


def _check(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, softmax_scale, causal=True):
    """Validate ``ds::amla`` arguments; raise TypeError / ValueError naming the argument and the bad value.

    Shape/dtype checks (:func:`_check_static`) always run. Data-dependent checks (they read seq_lens and
    block_table, a host sync) run only when :func:`ops._library.checks_enabled` (eager, not compiling, not
    capturing): 0 ≤ seq_lens[b] ≤ max_blocks·block_size, and every *used* block_table entry
    (the first ceil(seq_lens[b]/block_size) of row b) is in [0, num_blocks).
    seq_lens[b] < S_q is allowed, causal or not: with causal, query token j sees keys [0, L − S_q + j],
    so the first S_q − L tokens see none (out 0, lse −inf).
    """
    _check_static(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, softmax_scale, causal)
    B, num_blocks, block_size = q_nope.shape[0], kv_cache.shape[0], kv_cache.shape[1]
    dev = q_nope.device
    if not checks_enabled() or B == 0:
        return
    lens = seq_lens.to(torch.int64)
    bad = (lens < 0).nonzero()
    if bad.numel():
        b = int(bad[0, 0])
        raise ValueError(f"seq_lens[{b}] = {int(lens[b])} is negative")
    capacity = block_table.shape[1] * block_size
    bad = (lens > capacity).nonzero()
    if bad.numel():
        b = int(bad[0, 0])
        raise ValueError(f"seq_lens[{b}] = {int(lens[b])} exceeds the cache capacity max_blocks·block_size = "
                         f"{block_table.shape[1]}·{block_size} = {capacity}")
    used = torch.arange(block_table.shape[1], device=dev)[None, :] < ((lens + block_size - 1) // block_size)[:, None]
    ids = block_table.to(torch.int64)
    bad = (used & ((ids < 0) | (ids >= num_blocks))).nonzero()
    if bad.numel():
        b, i = int(bad[0, 0]), int(bad[0, 1])
        raise ValueError(f"block_table[{b}, {i}] = {int(ids[b, i])} is not a page id in [0, num_blocks={num_blocks}) "
                         f"but is used (seq_lens[{b}] = {int(lens[b])}, block_size {block_size})")


def _fake(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, softmax_scale, causal=True):
    _check_static(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, softmax_scale, causal)
    B, S_q, N, Dc = q_nope.shape
    return q_nope.new_empty(B, S_q, N, Dc), q_nope.new_empty(B, S_q, N, dtype=torch.float32)


# ----------------------------------------------------------------------------------------------
# FLOPs and bytes (one place: perf, tests and the registered flop formula read these)
# ----------------------------------------------------------------------------------------------
def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import is_fake
    return t.device.type == "meta" or is_fake(t)


def _total_keys(block_table: torch.Tensor, seq_lens: torch.Tensor, block_size: int) -> int:
    """Σ_b seq_lens[b]; under fake/meta tensors an upper bound from shapes (B · max_blocks · block_size)."""
    if _is_fake(seq_lens):
        return block_table.shape[0] * block_table.shape[1] * block_size
    return int(seq_lens.to(torch.int64).clamp(min=0).sum())


def flops(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, softmax_scale=None, causal=True, **_) -> int:
    """FLOPs of one call, FlashMLA convention: 2·Σ_b S_q·N·L_b·((Dc+Dr) + Dc)
    (QKᵀ over the 576-d key, P·V over the 512-d value, 2 FLOPs per MAC; DeepSeek: 576 + 512 = 1088).

    Every query token is counted against all L_b keys, also with causal (the causal-exact count is
    smaller by S_q·(S_q−1)/2 keys per (request, head), 0.01 % at S_q = 2, L = 4096): the same number
    FlashMLA, FlashInfer and the AMLA paper report, so TFLOPS compare. Under fake tensors (no data)
    L_b is bounded by max_blocks·block_size.
    """
    _, S_q, N, Dc = q_nope.shape
    Dr = q_rope.shape[-1]
    return 2 * S_q * N * _total_keys(block_table, seq_lens, kv_cache.shape[1]) * (Dc + Dr + Dc)


def bytes_moved(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, softmax_scale=None, causal=True, **_) -> int:
    """Fewest bytes one call moves: the latent KV rows read once (Σ_b L_b·(Dc+Dr)·itemsize) + q_nope,
    q_rope read + out written + lse (fp32) written. block_table / seq_lens reads are not counted."""
    B, S_q, N, Dc = q_nope.shape
    Dr = q_rope.shape[-1]
    isz = kv_cache.element_size()
    kv = _total_keys(block_table, seq_lens, kv_cache.shape[1]) * (Dc + Dr) * isz
    q = B * S_q * N * (Dc + Dr) * q_nope.element_size()
    out = B * S_q * N * Dc * q_nope.element_size()
    lse = B * S_q * N * 4
    return kv + q + out + lse


def _flop_formula(*args, out_val=None, **kwargs) -> int:
    bound = _SIG.bind(*args, **kwargs)
    return flops(**bound.arguments)


# ----------------------------------------------------------------------------------------------
# inputs and named shapes
# ----------------------------------------------------------------------------------------------
def paged_cache(c_kv: Sequence[torch.Tensor], k_rope: Sequence[torch.Tensor], block_size: int, *,
                generator: torch.Generator | None = None, permute: bool = True, unused: int = -1,
                fill: float = float("nan"), extra_blocks: int = 1, spare_pages: int = 2) -> dict:
    """Page per-request keys into a ``ds::amla`` cache: the one builder of paged inputs (make_inputs, tests, perf).

    c_kv[b] [L_b, Dc], k_rope[b] [L_b, Dr] (one dtype, one device): request b's keys in order. block_size: slots
    per page. The pages are laid out in a random permutation drawn from ``generator`` (a generator on the tensors'
    device; ``permute=False``: in order); every slot past L_b in a request's last page and every page nobody owns
    (``spare_pages`` of them) holds ``fill``; each block_table row has ``extra_blocks`` trailing entries never
    used, and every unused entry holds ``unused``.
    Returns dict(kv_cache [num_blocks, block_size, 1, Dc], kr_cache [num_blocks, block_size, 1, Dr] (c_kv's dtype),
    block_table [B, max_blocks] int32, seq_lens [B] int32). Raises ValueError if c_kv and k_rope differ in length
    or a request's two tensors differ in key count, or block_size < 1."""
    if len(c_kv) != len(k_rope) or any(a.shape[0] != r.shape[0] for a, r in zip(c_kv, k_rope)):
        raise ValueError("c_kv and k_rope must hold the same requests with the same key counts")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    first = c_kv[0] if len(c_kv) else torch.empty(0, 512)
    dtype, device = first.dtype, first.device
    Dc = first.shape[-1]
    Dr = k_rope[0].shape[-1] if len(k_rope) else 64
    lens = [int(t.shape[0]) for t in c_kv]
    pages_per = [-(-L // block_size) for L in lens]
    max_blocks = max(pages_per, default=0) + extra_blocks
    num_blocks = sum(pages_per) + spare_pages
    perm = (torch.randperm(num_blocks, generator=generator, device=device) if permute
            else torch.arange(num_blocks, device=device))
    block_table = torch.full((len(lens), max_blocks), unused, dtype=torch.int32, device=device)
    kv_cache = torch.full((num_blocks, block_size, 1, Dc), fill, dtype=dtype, device=device)
    kr_cache = torch.full((num_blocks, block_size, 1, Dr), fill, dtype=dtype, device=device)
    page_ids, slot_ids, start = [], [], 0
    for b, (L, n) in enumerate(zip(lens, pages_per)):
        pages = perm[start:start + n]
        start += n
        block_table[b, :n] = pages.to(torch.int32)
        pos = torch.arange(L, device=device)
        page_ids.append(pages[pos // block_size])
        slot_ids.append(pos % block_size)
    if page_ids:
        pg, sl = torch.cat(page_ids), torch.cat(slot_ids)
        kv_cache[pg, sl, 0] = torch.cat(list(c_kv)).to(dtype)
        kr_cache[pg, sl, 0] = torch.cat(list(k_rope)).to(dtype)
    return dict(kv_cache=kv_cache, kr_cache=kr_cache, block_table=block_table,
                seq_lens=torch.tensor(lens, dtype=torch.int32, device=device))


def make_inputs(shape: dict, *, dtype=torch.bfloat16, device="cpu", generator: torch.Generator | None = None) -> dict:
    """Fresh random ``ds::amla`` inputs for a shape dict.

    shape keys: B, S_q, N, L (keys per request; or ``seq_lens``: a list of B lengths, 0 allowed),
    block_size (default 128), causal (True), Dc (512), Dr (64), extra_blocks (1: trailing block_table
    entries per row that are never used), spare_pages (2: pages nobody owns), permute (True), unused (−1),
    fill (NaN): see :func:`paged_cache`. ``cpu``: a hint for the perf runner that the shape is small enough for
    the CPU/interpreter; ignored here.
    The cache is paged in a random page permutation; every unused slot of a last page and every
    unowned page is NaN; unused block_table entries are −1. q and the cache hold N(0,1) values
    (``dtype``); softmax_scale is DeepSeek-V3's (≈ 0.1352). Data is drawn on ``device`` with a device
    generator seeded from ``generator`` (so large GPU shapes do not go through the host).
    Returns the ``ds::amla`` keyword inputs: q_nope [B, S_q, N, Dc], q_rope [B, S_q, N, Dr] (dtype);
    kv_cache [num_blocks, block_size, 1, Dc], kr_cache [num_blocks, block_size, 1, Dr] (dtype); block_table
    [B, max_blocks] int32; seq_lens [B] int32 (keys per request); softmax_scale float; causal bool.
    Raises ValueError if ``seq_lens`` does not have B entries; KeyError if B, S_q, N (or L, without
    ``seq_lens``) is missing.
    """
    B, S_q, N = int(shape["B"]), int(shape["S_q"]), int(shape["N"])
    Dc, Dr = int(shape.get("Dc", 512)), int(shape.get("Dr", 64))
    bs = int(shape.get("block_size", 128))
    lens = [int(x) for x in shape["seq_lens"]] if "seq_lens" in shape else [int(shape["L"])] * B
    if len(lens) != B:
        raise ValueError(f"shape['seq_lens'] has {len(lens)} entries for B = {B}")
    device = torch.device(device)
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    g = torch.Generator(device=device).manual_seed(seed)
    c_kv = torch.randn(sum(lens), Dc, generator=g, device=device).to(dtype).split(lens)
    k_rope = torch.randn(sum(lens), Dr, generator=g, device=device).to(dtype).split(lens)
    cache = paged_cache(c_kv, k_rope, bs, generator=g, permute=bool(shape.get("permute", True)),
                        unused=int(shape.get("unused", -1)), fill=float(shape.get("fill", float("nan"))),
                        extra_blocks=int(shape.get("extra_blocks", 1)), spare_pages=int(shape.get("spare_pages", 2)))
    q_nope = torch.randn(B, S_q, N, Dc, generator=g, device=device).to(dtype)
    q_rope = torch.randn(B, S_q, N, Dr, generator=g, device=device).to(dtype)
    return dict(q_nope=q_nope, q_rope=q_rope, **cache, softmax_scale=deepseek_softmax_scale(),
                causal=bool(shape.get("causal", True)))


def _shapes() -> dict[str, dict]:
    shapes = {}
    # DeepSeek-V3 decode: batch, MTP (S_q = 2), per-TP-shard heads (128 = attention DP, 16 = TP8), context
    for B in (1, 16, 64, 128):
        for S_q in (1, 2):
            for N in (16, 128):
                for L in (1024, 4096, 16384):
                    shapes[f"b{B}_sq{S_q}_n{N}_l{L}"] = dict(B=B, S_q=S_q, N=N, L=L, block_size=128)
    # the largest decode batch, and the remaining TP shards (TP2/4/16: 64/32/8 heads), at 4K context
    for S_q in (1, 2):
        for N in (16, 128):
            shapes[f"b256_sq{S_q}_n{N}_l4096"] = dict(B=256, S_q=S_q, N=N, L=4096, block_size=128)
        for N in (8, 32, 64):
            shapes[f"b64_sq{S_q}_n{N}_l4096"] = dict(B=64, S_q=S_q, N=N, L=4096, block_size=128)
    # small enough for the CPU reference / the Triton interpreter
    shapes["cpu_b2_sq2_n8_l300"] = dict(B=2, S_q=2, N=8, L=300, block_size=64, cpu=True)
    shapes["cpu_b4_sq1_n16_varlen"] = dict(B=4, S_q=1, N=16, seq_lens=[0, 1, 130, 513], block_size=64, cpu=True)
    return shapes


SPEC = OpSpec(name="amla", flops=flops, bytes=bytes_moved, make_inputs=make_inputs, shapes=_shapes(),
              compute="bf16", tolerance="bf16")


# ----------------------------------------------------------------------------------------------
# kernels and the op
# ----------------------------------------------------------------------------------------------
def _triton_supports(*args, **kwargs) -> str | None:
    """Why the Triton kernel cannot take these inputs (None = it can); asks ops.triton.amla.supports_reason."""
    try:
        from .triton import amla as _tri
    except Exception as e:  # noqa: BLE001 - any import failure makes the backend unavailable, with the reason
        return f"ops.triton.amla is not importable ({type(e).__name__}: {e})"
    fn = getattr(_tri, "supports_reason", None)
    return None if fn is None else fn(*args, **kwargs)


# ``causal`` is a ``Scalar`` in the schema, not a ``bool``: the dispatcher converts any number (2, 2.0, a 0-d
# tensor, None) to a schema bool before the op sees it, so ``torch.ops.ds.amla(..., causal=2)`` would run while the
# eager call raises. A Scalar keeps the caller's Python type, and the check rejects everything but a bool on both paths.
_SCHEMA = torch.library.infer_schema(_ref.amla, mutates_args=()).replace("bool causal=True", "Scalar causal=True")

amla = DsOp("amla", _ref.amla, fake=_fake, check=_check, spec=SPEC, mutates_args=(), schema=_SCHEMA,
            kernels=[Kernel("triton", "ops.triton.amla", "amla", ("cuda", "cpu", "npu"), supports=_triton_supports)],
            flop_formula=_flop_formula)

__all__ = ["amla", "flops", "bytes_moved", "make_inputs", "paged_cache", "SPEC", "MAX_S_Q"]
