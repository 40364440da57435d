"""ops/triton/amla.py under the Triton interpreter (CPU, fp16, tiny shapes): the split-KV AMLA kernel
against reference/amla.py (and an independent fp64 computation), field cases A1–A7 of cases.md, the
AMLA zero/denormal guard, the merge of empty splits, the launch plan and the Ascend compile cases.

bf16 and the real-size matrix run on the GPU: tests/gpu/check_amla.py.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, strategies as st

from tests.conftest import record_launches, requires_triton, run_uninterpreted
from tests.tolerances import assert_close, cos_diff

pytestmark = requires_triton

import ops  # noqa: E402
from ops.amla import amla as ds_amla  # noqa: E402
from reference import amla as ref  # noqa: E402

tri = pytest.importorskip("ops.triton.amla")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

DT = torch.float16            # the interpreter computes bf16 tl.dot wrongly; bf16 runs on the GPU
DC, DR = 512, 64
SCALE = 0.1353                # ≈ DeepSeek-V3's (128+64)^-0.5·mscale²


# ----------------------------------------------------------------------------------------------
# inputs: logical keys → a paged cache (random page order, NaN everywhere unused)
# ----------------------------------------------------------------------------------------------
def logical(B, S_q, N, lens, gen, *, q_scale=1.0):
    Lmax = max(lens + [1])
    c_kv = torch.randn(B, Lmax, DC, generator=gen).to(DT)
    k_rope = torch.randn(B, Lmax, DR, generator=gen).to(DT)
    q_nope = (torch.randn(B, S_q, N, DC, generator=gen) * q_scale).to(DT)
    q_rope = (torch.randn(B, S_q, N, DR, generator=gen) * q_scale).to(DT)
    return q_nope, q_rope, c_kv, k_rope


def paged(c_kv, k_rope, lens, bs, gen, *, permute=True, fill=float("nan"), unused=-1, extra_blocks=2, spare=3):
    """Page the logical keys [B, Lmax, D] into a cache of block size ``bs``. Unused slots of last pages,
    spare pages and unused block_table entries hold ``fill`` / ``unused``."""
    B = len(lens)
    per = [-(-L // bs) for L in lens]
    max_blocks = max(per + [0]) + extra_blocks
    nb = sum(per) + spare
    order = torch.randperm(nb, generator=gen) if permute else torch.arange(nb)
    kv = torch.full((nb, bs, 1, DC), fill, dtype=DT)
    kr = torch.full((nb, bs, 1, DR), fill, dtype=DT)
    bt = torch.full((B, max_blocks), unused, dtype=torch.int32)
    i = 0
    for b, L in enumerate(lens):
        for j in range(per[b]):
            pg = int(order[i])
            i += 1
            bt[b, j] = pg
            n = min(bs, L - j * bs)
            kv[pg, :n, 0] = c_kv[b, j * bs:j * bs + n]
            kr[pg, :n, 0] = k_rope[b, j * bs:j * bs + n]
    return kv, kr, bt, torch.tensor(lens, dtype=torch.int32)


def make(B, S_q, N, lens, gen, bs=16, **kw):
    q_nope, q_rope, c_kv, k_rope = logical(B, S_q, N, list(lens), gen)
    kv, kr, bt, sl = paged(c_kv, k_rope, list(lens), bs, gen, **kw)
    return q_nope, q_rope, kv, kr, bt, sl


@pytest.fixture(autouse=True)
def poisoned(monkeypatch):
    """Every output and split-partial buffer the launcher allocates starts as NaN."""
    def _empty(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    monkeypatch.setattr(tri, "_empty", _empty)


# the three rescale variants: CANN's AMLA (c rounded, compensation, n re-chosen every block: the interpreter
# and Ascend default), the CUDA default (c in fp32, lazy reference), and FlashAttention's multiply
VARIANTS = {"amla": dict(rescale="amla", round_c=True, lazy=-1.0),
            "amla_lazy": dict(rescale="amla", round_c=False, lazy=8.0),
            "amla_lazy_rounded": dict(rescale="amla", round_c=True, lazy=3.0),
            "multiply": dict(rescale="multiply", lazy=-1.0),
            "multiply_lazy": dict(rescale="multiply", lazy=8.0)}


def run(args, causal=True, variant=None, **kw):
    if variant is not None:
        kw = dict(VARIANTS[variant], **kw)
    return tri.amla_variant(*args, SCALE, causal, **kw)


def check(args, causal=True, **kw):
    out, lse = run(args, causal, **kw)
    r_out, r_lse = ref.amla(*args, SCALE, causal)
    assert_close(out, r_out, "fp16")
    assert_close(lse, r_lse, "lse", name="lse")
    return out, lse


def fp64_attention(q_nope, q_rope, c_kv, k_rope, lens, causal):
    """Independent fp64 attention over the logical (unpaged) keys."""
    B, S_q, N, _ = q_nope.shape
    out = torch.zeros(B, S_q, N, DC, dtype=torch.float64)
    lse = torch.full((B, S_q, N), -math.inf, dtype=torch.float64)
    for b, L in enumerate(lens):
        for j in range(S_q):
            n_vis = min(L, L - S_q + j + 1) if causal else L
            if n_vis <= 0:
                continue
            k = torch.cat([c_kv[b, :n_vis], k_rope[b, :n_vis]], -1).double()
            q = torch.cat([q_nope[b, j], q_rope[b, j]], -1).double()
            s = SCALE * q @ k.T
            lse[b, j] = torch.logsumexp(s, -1)
            out[b, j] = torch.softmax(s, -1) @ c_kv[b, :n_vis].double()
    return out, lse


# ----------------------------------------------------------------------------------------------
# basic agreement, both rescales, through the registered op too
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("N,S_q,lens", [(1, 1, [70]), (2, 2, [33, 9]), (8, 1, [50, 0, 17]), (8, 2, [64, 65]),
                                        (3, 4, [40])])
def test_matches_reference(gen, variant, N, S_q, lens):
    check(make(len(lens), S_q, N, lens, gen), variant=variant)


@pytest.mark.parametrize("causal", [True, False])
def test_matches_independent_fp64(gen, causal):
    lens = [45, 3, 1]
    q_nope, q_rope, c_kv, k_rope = logical(3, 2, 4, lens, gen)
    args = (q_nope, q_rope) + paged(c_kv, k_rope, lens, 16, gen)
    out, lse = run(args, causal)
    e_out, e_lse = fp64_attention(q_nope, q_rope, c_kv, k_rope, lens, causal)
    assert_close(out, e_out, "fp16")
    assert_close(lse, e_lse, "lse", name="lse")


@pytest.mark.parametrize("via", ["ds_op", "torch_ops"])
def test_registered_op_runs_the_triton_kernel(gen, via, monkeypatch):
    args = make(2, 2, 8, [40, 7], gen)
    calls = []
    orig = tri.amla_variant
    monkeypatch.setattr(tri, "amla_variant", lambda *a, **k: calls.append(1) or orig(*a, **k))
    with ops.backend("triton"):
        fn = ds_amla if via == "ds_op" else torch.ops.ds.amla
        out, lse = fn(*args, SCALE, True)
    assert calls, "the triton backend did not reach ops.triton.amla"
    r_out, r_lse = ref.amla(*args, SCALE, True)
    assert_close(out, r_out, "fp16")
    assert_close(lse, r_lse, "lse", name="lse")


def test_bf16_on_cpu_is_refused_with_a_reason(gen):
    args = [a.to(torch.bfloat16) if a.is_floating_point() else a for a in make(1, 1, 2, [5], gen)]
    assert "TRITON_INTERPRET" in tri.supports_reason(*args, SCALE, True)
    with ops.backend("triton"), pytest.raises(ops.BackendUnavailable, match="bf16"):
        ds_amla(*args, SCALE, True)


# ----------------------------------------------------------------------------------------------
# field cases A1–A7
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rescale", ["amla", "multiply"])
def test_A1_zero_length_rows(gen, rescale):
    args = make(4, 2, 8, [0, 37, 0, 1], gen)
    out, lse = check(args, rescale=rescale)
    for b in (0, 2):
        assert torch.equal(out[b], torch.zeros_like(out[b])) and torch.isneginf(lse[b]).all()
    # S_q = 2, L = 1, causal: token 0 sees no key
    assert torch.isneginf(lse[3, 0]).all() and torch.equal(out[3, 0], torch.zeros_like(out[3, 0]))
    assert torch.isfinite(lse[3, 1]).all()


@pytest.mark.parametrize("num_splits", [None, 1, 4])
def test_A1_every_row_zero_length(gen, num_splits):
    args = make(3, 1, 8, [0, 0, 0], gen)
    out, lse = run(args, num_splits=num_splits)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()
    # also an empty cache and an empty block table (padded CUDA-graph batch, sglang #5516)
    q_nope, q_rope = args[0], args[1]
    kv = torch.empty(0, 16, 1, DC, dtype=DT)
    kr = torch.empty(0, 16, 1, DR, dtype=DT)
    out, lse = run((q_nope, q_rope, kv, kr, torch.empty(3, 0, dtype=torch.int32), torch.zeros(3, dtype=torch.int32)))
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()


def test_A2_nan_in_unused_slots(gen):
    lens = [37, 5, 16]
    q_nope, q_rope, c_kv, k_rope = logical(3, 2, 8, lens, gen)
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    dirty = (q_nope, q_rope) + paged(c_kv, k_rope, lens, 16, g1, fill=float("nan"))
    clean = (q_nope, q_rope) + paged(c_kv, k_rope, lens, 16, g2, fill=0.0)
    assert torch.isnan(dirty[2]).any()
    for rescale in ("amla", "multiply"):
        a, la = run(dirty, rescale=rescale)
        b, lb = run(clean, rescale=rescale)
        assert torch.equal(a, b) and torch.equal(la, lb), "NaN in unused slots/pages changed the result"
    check(dirty)


@pytest.mark.parametrize("unused", [-1, 2**31 - 1])
def test_A3_page_order_and_unused_entries(gen, unused):
    lens = [50, 20]
    q_nope, q_rope, c_kv, k_rope = logical(2, 2, 8, lens, gen)
    ordered = (q_nope, q_rope) + paged(c_kv, k_rope, lens, 16, gen, permute=False, unused=0)
    shuffled = (q_nope, q_rope) + paged(c_kv, k_rope, lens, 16, gen, permute=True, unused=unused)
    a, la = run(ordered)
    b, lb = run(shuffled)
    assert torch.equal(a, b) and torch.equal(la, lb), "page order / unused block_table entries changed the result"
    check(shuffled)


@pytest.mark.parametrize("N", [1, 2, 8, 16])
@pytest.mark.parametrize("S_q", [1, 2])
def test_A4_head_counts(gen, N, S_q):
    if N == 16 and S_q == 1:
        pytest.skip("N=16 runs with S_q=2 (two row blocks); keeps the file fast")
    check(make(2, S_q, N, [33, 18], gen))


@pytest.mark.parametrize("rescale", ["amla", "multiply"])
@pytest.mark.parametrize("num_splits", [4, 16])
def test_A5_short_sequences_many_splits(gen, rescale, num_splits):
    lens = [1, 2, 5, 20]
    out, lse = check(make(4, 1, 2, lens, gen), num_splits=num_splits, rescale=rescale)
    assert torch.isfinite(lse).all() and not torch.isnan(out).any()


@pytest.mark.parametrize("L", [2, 3, 64, 65])
def test_A6_mtp_causal(gen, L):
    q_nope, q_rope, c_kv, k_rope = logical(1, 2, 8, [L], gen)
    args = (q_nope, q_rope) + paged(c_kv, k_rope, [L], 16, gen)
    out, lse = check(args)
    e_out, e_lse = fp64_attention(q_nope, q_rope, c_kv, k_rope, [L], True)
    assert_close(out, e_out, "fp16")
    assert_close(lse, e_lse, "lse", name="lse")
    # query 0 sees exactly keys [0, L−2]: changing key L−1 must not change it, but must change query 1
    c2 = c_kv.clone()
    c2[0, L - 1] += 1.0
    args2 = (q_nope, q_rope) + paged(c2, k_rope, [L], 16, torch.Generator().manual_seed(3))
    out2, _ = run(args2)
    assert torch.equal(out2[0, 0], out[0, 0])
    assert not torch.equal(out2[0, 1], out[0, 1])


@pytest.mark.parametrize("rescale", ["amla", "multiply"])
def test_A7_block_sizes(gen, rescale):
    lens = [70, 33, 16]
    q_nope, q_rope, c_kv, k_rope = logical(3, 2, 2, lens, gen)
    outs = []
    for bs in (16, 64, 128):
        args = (q_nope, q_rope) + paged(c_kv, k_rope, lens, bs, gen)
        outs.append(check(args, rescale=rescale))
    for o, l in outs[1:]:
        # same keys in the same tiles: the page size must not change a single bit
        assert torch.equal(o, outs[0][0]) and torch.equal(l, outs[0][1])


# ----------------------------------------------------------------------------------------------
# AMLA numerics: zeros, denormals, large shifts
# ----------------------------------------------------------------------------------------------
@triton.jit
def _rescale_probe(x_ptr, n_ptr, dn_ptr, fac_ptr, o_ptr, R: tl.constexpr, C: tl.constexpr, FGUARD: tl.constexpr):
    r = tl.arange(0, R)
    c = tl.arange(0, C)
    x = tl.load(x_ptr + r[:, None] * C + c[None, :])
    o = tri._pow2_rescale(x, tl.load(n_ptr + r), tl.load(dn_ptr + r), tl.load(fac_ptr + r), FGUARD)
    tl.store(o_ptr + r[:, None] * C + c[None, :], o)


@pytest.mark.parametrize("fguard", [False, True], ids=["exponent_field_guard", "fp32_compare_guard"])
def test_pow2_rescale_exact_on_zeros_denormals_and_normals(fguard):
    tiny = torch.finfo(torch.float32).tiny
    vals = torch.tensor([0.0, -0.0, tiny / 8, -tiny / 3, tiny, 3 * tiny, 2.0**-120, 1.0, -1.5, 3.0e5,
                         2.0**100, -2.0**-100, 1e-30, 7.0, -0.25, 2.0**126,
                         # the guard's bounds: E = 254 (≥ 2^127) and ±inf multiply; 2^-125..2^-95 straddle 2^(−125−dn)
                         3.0e38, 2.0**127, -float("inf"), float("inf"), -2.0**-125, 2.0**-124, 2.0**-95, 2.0**-96,
                         -2.0**-110, 2.0**-122, 1.5 * 2.0**-98, -1.0e-33, 2.0**-126, 2.0**-107, 5.0, -3.0e-36],
                        dtype=torch.float32)
    dns = torch.tensor([0.0, -1.0, -5.0, -30.0, -29.0, -2.0, -17.0, -3.0])
    x = vals[None, :].repeat(len(dns), 1).contiguous()
    n_add = (dns * 2**23).to(torch.int32)
    fac = torch.exp2(dns)
    out = torch.empty_like(x)
    _rescale_probe[(1,)](x, n_add, dns, fac, out, R=len(dns), C=len(vals), FGUARD=fguard)
    exact = x * fac[:, None]                     # exact in fp32 (power of two; denormal results rounded)
    assert torch.equal(out, exact), f"integer rescale differs from the exact product:\n{out}\n{exact}"
    # the two guards take the integer path on exactly the same elements (inf/NaN multiply too)
    other = torch.empty_like(x)
    _rescale_probe[(1,)](x, n_add, dns, fac, other, R=len(dns), C=len(vals), FGUARD=not fguard)
    assert torch.equal(out, other)
    assert torch.equal(out[:, :2].abs(), torch.zeros_like(out[:, :2])), "zeros must stay zero"
    assert torch.equal(torch.isfinite(out), torch.isfinite(x))


def test_pow2_rescale_compensation_is_close():
    # with a compensation term the add stands for ·2^dn·ratio up to ±0.5·|ratio−1| (significand-dependent)
    x = (torch.rand(4, 64, generator=torch.Generator().manual_seed(1)) * 4 - 2).float().contiguous()
    ratio = torch.tensor([1.0 + 2**-9, 1.0 - 2**-9, 1.0 + 3e-4, 1.0])
    dn = torch.tensor([-1.0, 0.0, -4.0, -2.0])
    n_add = (dn.to(torch.int32) * 2**23 + torch.floor(1.5 * (ratio - 1) * 2**23 + 0.5).to(torch.int32))
    out = torch.empty_like(x)
    _rescale_probe[(1,)](x, n_add, dn, torch.exp2(dn) * ratio, out, R=4, C=64, FGUARD=False)
    want = x * (torch.exp2(dn) * ratio)[:, None]
    rel = ((out - want) / want).abs()
    assert (rel <= 0.55 * (ratio - 1).abs()[:, None] + 2**-22).all()
    out2 = torch.empty_like(x)
    _rescale_probe[(1,)](x, n_add, dn, torch.exp2(dn) * ratio, out2, R=4, C=64, FGUARD=True)
    assert torch.equal(out, out2)


def test_amla_keeps_exact_zero_columns_that_get_contributions_later(gen):
    """CANN's |O| > 1e10 guard drops a column that is exactly 0 early and non-zero later (0 + N wraps to −inf);
    ours must keep it. The keys' rope part grows along the sequence so the row max (and n) moves often."""
    L = 64
    q_nope, q_rope, c_kv, k_rope = logical(1, 1, 4, [L], gen)
    c_kv[0, :40, :8] = 0.0                                           # columns 0..7 exactly 0 in early tiles
    k_rope[0] = (torch.linspace(0, 6, L)[:, None] * torch.ones(DR)).to(DT)
    q_rope[:] = 1.0
    args = (q_nope, q_rope) + paged(c_kv, k_rope, [L], 16, gen)
    for variant in ("amla", "amla_lazy", "amla_lazy_rounded"):
        out, _ = check(args, variant=variant, num_splits=1)
        assert (out[0, 0, :, :8] != 0).all()
    # the CANN guard, emulated by the reference, loses those columns
    cann, _ = ref.amla_blockwise(*args, SCALE, True, block_kv=16, guard="cann")
    assert (cann[0, 0, :, :8] == 0).all()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_huge_logit_range_shift_clamp_and_underflow(gen, variant):
    """Scores that jump by hundreds (Δn ≪ −30, old O underflows to denormal/0): no NaN/inf, still exact."""
    L = 80
    q_nope, q_rope, c_kv, k_rope = logical(1, 2, 2, [L], gen)
    # logits climb from ≈ −171 to ≈ 0 (≈ 35 per 16-key tile: Δn ≈ −50 is clamped to −30, and the old O is
    # pushed 2^-30 down per tile into denormals and 0 — the multiply fallback); lse stays O(1) so 1e-5 is
    # above fp32 resolution
    k_rope[0] = ((torch.arange(L)[:, None].float() - (L - 1)) * 0.25 * torch.ones(DR)).to(DT)
    q_rope[:] = 1.0
    args = (q_nope, q_rope) + paged(c_kv, k_rope, [L], 16, gen)
    out, lse = check(args, variant=variant, num_splits=1)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()


def test_agrees_with_blockwise_amla_emulation(gen):
    """One split, BLOCK_N = 16: the kernel runs the same block algorithm as reference.amla_blockwise."""
    args = make(2, 2, 8, [70, 33], gen)
    out, lse = run(args, variant="amla", num_splits=1)
    e_out, e_lse = ref.amla_blockwise(*args, SCALE, True, block_kv=16)
    assert cos_diff(out, e_out) < 1e-6
    assert_close(lse, e_lse, "lse", name="lse")


# ----------------------------------------------------------------------------------------------
# splits, determinism, launch plans, Ascend
# ----------------------------------------------------------------------------------------------
def test_split_counts_agree_and_are_deterministic(gen):
    args = make(2, 2, 4, [70, 45], gen)
    base = check(args, num_splits=1)
    for ns in (2, 3, 7):
        o, l = check(args, num_splits=ns)
        assert cos_diff(o, base[0]) < 1e-6
        o2, l2 = run(args, num_splits=ns)
        assert torch.equal(o, o2) and torch.equal(l, l2), "not deterministic"


def test_ascend_plan_under_the_interpreter(gen):
    """The Ascend config (persistent grid of 20 cube cores, loop inside) computes the same thing."""
    args = make(2, 2, 8, [70, 21], gen)
    plan = tri.launch_plan(2, 2, 8, args[4].shape[1] * 16, torch.device("cpu"), {"key": "ascend"})
    assert plan["persistent"] and plan["grid"] <= 20
    check(args, config={"key": "ascend"})
    check(args, config={"key": "ascend"}, rescale="multiply")


def test_ascend_plan_block_sizes_under_the_interpreter(gen):
    """The Ascend plan for block sizes 128 / 32 / 16 (BLOCK_N shrinks to the page: one scalar page id per
    tile) and a page that is no multiple of 16 (per-key gathers): all agree with the reference."""
    lens = [150, 37]
    q_nope, q_rope, c_kv, k_rope = logical(2, 2, 4, lens, gen)
    for bs, bn, flat in ((128, 64, True), (32, 32, True), (16, 16, True), (24, 64, False)):
        args = (q_nope, q_rope) + paged(c_kv, k_rope, lens, bs, gen)
        plan = tri.launch_plan(2, 2, 4, args[4].shape[1] * bs, torch.device("cpu"), {"key": "ascend"}, page=bs)
        assert (plan["BLOCK_N"], plan["flat"], plan["float_guard"]) == (bn, flat, True)
        check(args, config={"key": "ascend"})
        assert tri.LAST_LAUNCH["plan"]["BLOCK_N"] == bn and tri.LAST_LAUNCH["plan"]["flat"] == flat


# the CUDA config's tiles and the GPU sweep's candidates, run by the interpreter at tiny sizes (fp16): the
# wgmma/mma tiles, the column split (dv_split = 2), flat addressing vs per-key gathers, the exponent-field guard
_CUDA_TILES = [dict(t) for t in tri.load_configs()["cuda"]["tiles"]]
_SWEEP = tri.load_configs()["cuda_sweep"]
_CUDA_CANDIDATES = {c["name"]: {k: v for k, v in c.items() if k != "name"}
                    for c in _SWEEP["compute"] + _SWEEP["memory"]}


def _cuda_cfg(tile):
    return dict({k: v for k, v in tile.items() if k not in ("max_rows", "name")}, key="cuda")


@pytest.mark.parametrize("ti", range(len(_CUDA_TILES)))
@pytest.mark.parametrize("bs", [64, 16])
def test_cuda_tiles_under_the_interpreter(gen, ti, bs):
    cfg = _cuda_cfg(_CUDA_TILES[ti])
    lens = [70, 9]
    args = make(2, 2, 4, lens, gen, bs=bs)
    out, lse = check(args, config=cfg, variant="amla_lazy")          # the CUDA default rescale
    plan = tri.LAST_LAUNCH["plan"]
    # a tile must lie in one page for flat addressing; CUDA keeps BLOCK_N and falls back to gathers
    # (a tile may also ask for gathers outright: "flat": false)
    assert plan["BLOCK_N"] == cfg["BLOCK_N"] and plan["flat"] == (cfg.get("flat", True) and bs % cfg["BLOCK_N"] == 0)
    assert plan["key"] == "cuda" and not plan["float_guard"]
    check(args, config=cfg, variant="multiply_lazy")
    check(args, config=cfg, variant="amla", num_splits=3)


@pytest.mark.parametrize("name", list(_CUDA_CANDIDATES))
def test_cuda_sweep_candidates_under_the_interpreter(gen, name):
    cfg = dict(_CUDA_CANDIDATES[name], key="cuda")
    splits = cfg.pop("splits", 2)                # the sweep's forced split count (bench: "splits")
    args = make(2, 1, 8, [45, 70], gen, bs=64)
    check(args, config=cfg, variant="amla_lazy", num_splits=splits)
    assert tri.LAST_LAUNCH["plan"]["num_splits"] == splits


@pytest.mark.parametrize("variant", ["amla", "amla_lazy", "multiply_lazy"])
def test_column_split_and_flat_addressing_change_no_bit(gen, variant):
    """dv_split = 2 (each program recomputes S for half of the 512 output columns; the pairwise sum makes S
    bit-identical) and flat addressing vs per-key page gathers give bit-identical out and lse."""
    args = make(3, 2, 8, [90, 1, 33], gen, bs=32)
    base = dict(key="cuda", BLOCK_M=16, BLOCK_N=32, rescale_skip=True)
    ref_o, ref_l = run(args, variant=variant, config=dict(base, dv_split=1, flat=False), num_splits=2)
    assert not torch.isnan(ref_o).any()
    for dv, flat, fguard in ((2, False, False), (1, True, False), (2, True, True)):
        o, l = run(args, variant=variant, config=dict(base, dv_split=dv, flat=flat, float_guard=fguard),
                   num_splits=2)
        assert tri.LAST_LAUNCH["plan"]["dv_split"] == dv and tri.LAST_LAUNCH["plan"]["flat"] == flat
        assert torch.equal(o, ref_o) and torch.equal(l, ref_l), (dv, flat, fguard)


@pytest.mark.parametrize("num_splits", [None, 3])
@pytest.mark.parametrize("variant", ["amla", "amla_lazy", "multiply_lazy"])
@pytest.mark.parametrize("key", ["interpreter", "cuda"])
def test_nan_and_inf_logits_give_nan_like_the_reference(gen, key, variant, num_splits, monkeypatch):
    """A NaN in one head's q_nope and a +inf in one key's c_kv: the reference's out / lse are NaN for every row that
    sees them. The kernel's max reductions drop NaN, and l = NaN used to read as an empty row (out 0, lse −inf),
    hiding corrupt input (session-6 fresh-user audit). Outputs start as 777, so a NaN must be written."""
    monkeypatch.setattr(tri, "_empty", lambda shape, dtype, device: torch.full(shape, 777.0, dtype=dtype,
                                                                                device=device))
    q_nope, q_rope, kv, kr, bt, sl = make(2, 2, 4, [70, 40], gen, bs=16)
    q_nope[0, 1, 2, 5] = float("nan")                     # request 0, token 1, head 2
    page, slot = int(bt[1, 33 // 16]), 33 % 16            # request 1, key 33 (seen by both tokens)
    kv[page, slot, 0, 7] = float("inf")                   # logit ±inf by the sign of q_nope[..., 7]
    args = (q_nope, q_rope, kv, kr, bt, sl)
    out, lse = run(args, variant=variant, config={"key": key}, num_splits=num_splits)
    r_out, r_lse = ref.amla(*args, SCALE, True)
    nan_rows = torch.isnan(r_lse)
    assert nan_rows[0, 1, 2] and nan_rows[1].any() and not nan_rows.all()
    assert torch.equal(torch.isnan(lse), nan_rows)
    # V is c_kv itself: a row whose logit for the inf key is −inf still gets 0 · inf = NaN in that column
    assert torch.equal(torch.isnan(out), torch.isnan(r_out))
    ok = ~nan_rows
    assert_close(out[ok].nan_to_num(0.0), r_out[ok].nan_to_num(0.0), "fp16")
    assert (lse[ok] - r_lse[ok]).abs().max() <= 1e-5


def test_flat_addressing_only_where_slot_offsets_fit_int32():
    """Flat addressing computes slot · kv_cache.stride(1) in int32; a cache whose slot stride makes that reach 2³¹
    (a permuted layout) must take the per-key gathers, which are int64 (audit, session 6). Meta tensors: no memory."""
    def meta(shape, stride):
        return torch.empty_strided(shape, stride, device="meta")
    kv, kr = meta((4, 128, 1, 512), (65536, 512, 512, 1)), meta((4, 128, 1, 64), (8192, 64, 64, 1))
    assert tri._flat_slots_fit_int32(kv, kr, 128)
    slot_major = meta((4, 128, 1, 512), (512, 2**24, 512, 1))        # slots 2^24 elements apart
    assert not tri._flat_slots_fit_int32(slot_major, kr, 128)         # page · stride = 2^31 (bound kept with margin)
    assert tri._flat_slots_fit_int32(slot_major, kr, 64)              # 64 · 2^24 = 2^30
    assert not tri._flat_slots_fit_int32(kv, meta((4, 128, 1, 64), (64, 2**24, 64, 1)), 128)   # k_rope too


def test_flat_addressing_falls_back_to_gathers_when_slot_offsets_do_not_fit(gen, monkeypatch):
    """The launcher's use of :func:`_flat_slots_fit_int32`: when it says no, a flat tile runs the per-key gathers
    (int64 offsets), bit-identical to the flat run."""
    args = make(2, 2, 4, [70, 9], gen, bs=16)
    cfg = dict(key="cuda", BLOCK_M=16, BLOCK_N=16)
    o1, l1 = run(args, config=cfg, variant="amla_lazy")
    assert tri.LAST_LAUNCH["plan"]["flat"]
    monkeypatch.setattr(tri, "_flat_slots_fit_int32", lambda kv, kr, page: False)
    o2, l2 = run(args, config=cfg, variant="amla_lazy")
    assert not tri.LAST_LAUNCH["plan"]["flat"]
    assert torch.equal(o1, o2) and torch.equal(l1, l2)


@pytest.mark.parametrize("key", ["interpreter", "cuda"])
def test_query_rows_not_evenly_spaced_are_copied(gen, key):
    """Flat addressing needs q's (S_q, N) rows evenly spaced; a [B, N, S_q, D] tensor transposed to
    [B, S_q, N, D] is not, and must still be read right."""
    args = list(make(2, 3, 4, [40, 9], gen, bs=16))
    args[0] = args[0].transpose(1, 2).contiguous().transpose(1, 2)
    args[1] = args[1].transpose(1, 2).contiguous().transpose(1, 2)
    assert tri._row_stride(args[0]) is None
    cfg = {"key": key} if key == "interpreter" else _cuda_cfg(_CUDA_TILES[0])
    cfg["flat"] = True
    if key == "cuda":
        cfg["BLOCK_N"] = 16
    check(tuple(args), config=cfg)
    assert tri.LAST_LAUNCH["plan"]["flat"]


def test_split_count_fits_one_wave():
    """Split count = floor(resident programs / programs): B=64, S_q=1, N=16 on 132 SMs with the rows<=16 tile's
    programs_per_core ppc gets floor(132·ppc/64) splits (one wave; the H200 sweeps measured 2952 GB/s for 4 splits
    vs 2118 GB/s for 5 at ppc 2, and 3629 GB/s for 2 splits of the BN64 s3 tile at ppc 1), never more."""
    dev = torch.device("cpu")
    ppc = tri.load_configs()["cuda"]["tiles"][0]["programs_per_core"]
    p = tri.launch_plan(64, 1, 16, 4096, dev, {"key": "cuda", "cores": 132})
    assert p["BLOCK_M"] == 16 and p["num_splits"] == (132 * ppc) // 64 and p["total"] <= 132 * ppc
    for B in (1, 3, 16, 40, 64, 100):
        p = tri.launch_plan(B, 1, 16, 1 << 16, dev, {"key": "cuda", "cores": 132})
        assert p["total"] <= 132 * ppc or p["num_splits"] == 1
    # the column split counts as programs
    p = tri.launch_plan(8, 2, 16, 4096, dev, {"key": "cuda", "cores": 132, "BLOCK_M": 32, "BLOCK_N": 32,
                                              "dv_split": 2, "programs_per_core": 2})
    assert p["dv_split"] == 2 and p["total"] == 8 * 1 * 2 * p["num_splits"] and p["total"] <= 132 * 2
    # rows 32 (TP8 + MTP): two BM16 row blocks per request, 2 KV splits at B=64 (2 programs per SM)
    p = tri.launch_plan(64, 2, 16, 4096, dev, {"key": "cuda", "cores": 132})
    assert p["BLOCK_M"] == 16 and p["num_m"] == 2 and p["num_splits"] == 2 and p["total"] == 256


def test_launch_plan_is_from_shapes_only():
    dev = torch.device("cpu")
    p = tri.launch_plan(1, 1, 2, 1024, dev)
    assert p["num_splits"] > 1                       # a lone request is split across the (interpreter) cores
    assert tri.launch_plan(64, 2, 128, 4096, dev)["num_splits"] == 1
    assert tri.launch_plan(1, 1, 2, 0, dev)["num_splits"] == 1
    assert tri.launch_plan(1, 1, 2, 1024, dev, num_splits=5)["num_splits"] == 5
    cfg = tri.load_configs()
    assert set(cfg) >= {"cuda", "ascend", "interpreter"}


def test_ascend_compile_cases_are_well_formed():
    cases = tri.ascend_compile_cases()
    assert cases
    for c in cases:
        names = set(c["fn"].arg_names)
        assert set(c["signature"]) == names, c["name"]
        assert set(c["constexprs"]) <= names
        assert all(c["signature"][k] == "constexpr" for k in c["constexprs"])
        if c["name"].startswith("amla_fwd"):
            # flat addressing (no per-element gathers), the fp32-compare guard, the lse stride a constant 1
            assert c["constexprs"]["FLAT"] and c["constexprs"]["FGUARD"] and c["constexprs"]["sl_h"] == 1
            assert c["constexprs"]["PAGE"] % c["constexprs"]["BLOCK_N"] == 0
        if "BLOCK_M" in c["constexprs"]:
            # acc [BLOCK_M, 512] fp32 and the K tile must fit L0C (128 KiB) / UB (192 KiB) with room to spare
            assert c["constexprs"]["BLOCK_M"] * 512 * 4 <= 64 * 1024


def test_noncontiguous_query(gen):
    args = list(make(2, 2, 4, [40, 9], gen))
    wide = torch.randn(2, 2, 4, DC + DR, generator=gen).to(DT)
    args[0], args[1] = wide[..., :DC], wide[..., DC:]
    check(tuple(args))


# ----------------------------------------------------------------------------------------------
# random sweep
# ----------------------------------------------------------------------------------------------
@given(B=st.integers(1, 3), S_q=st.integers(1, 3), N=st.sampled_from([1, 2, 3, 8]),
       lens=st.lists(st.integers(0, 70), min_size=3, max_size=3), bs=st.sampled_from([16, 32]),
       causal=st.booleans(), variant=st.sampled_from(list(VARIANTS)),
       num_splits=st.sampled_from([None, 1, 2, 5]), seed=st.integers(0, 2**16))
@example(B=1, S_q=3, N=1, lens=[2, 0, 0], bs=16, causal=True, variant="amla", num_splits=5, seed=0)
@example(B=2, S_q=1, N=8, lens=[16, 17, 0], bs=16, causal=False, variant="amla_lazy", num_splits=2, seed=1)
def test_random_sweep(B, S_q, N, lens, bs, causal, variant, num_splits, seed):
    g = torch.Generator().manual_seed(seed)
    args = make(B, S_q, N, lens[:B], g, bs=bs)
    check(args, causal, variant=variant, num_splits=num_splits)


# ----------------------------------------------------------------------------------------------
# peeled key loop: full tiles run a mask-free body, the partial last tile / causal diagonal a masked one
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant,bn,flat", [("amla", 16, True), ("amla_lazy", 16, True), ("multiply_lazy", 16, True),
                                             ("amla_lazy", 32, False)])
def test_peeled_tail_is_bit_identical_to_one_masked_loop(gen, variant, bn, flat):
    """peel=True vs peel=False (one masked loop): bit-identical out and lse, both matching the reference, for
    seq_lens a multiple of BLOCK_N, one past it, one short of it, shorter than a tile, 0; causal S_q = 3 (the
    diagonal straddles a tile boundary for some lengths); one and three splits; NaN in every unused slot."""
    lens = [2 * bn, 2 * bn + 1, 3 * bn - 1, 5, 0, bn]
    args = make(len(lens), 3, 2, lens, gen, bs=32)
    for ns in (1, 3):
        base = dict(key="cuda", BLOCK_M=16, BLOCK_N=bn, flat=flat)
        o1, l1 = check(args, config=dict(base, peel=True), variant=variant, num_splits=ns)
        assert tri.LAST_LAUNCH["plan"]["peel"] and tri.LAST_LAUNCH["plan"]["flat"] == flat
        o0, l0 = run(args, config=dict(base, peel=False), variant=variant, num_splits=ns)
        assert not tri.LAST_LAUNCH["plan"]["peel"]
        assert torch.equal(o1, o0) and torch.equal(l1, l0), ns


def test_peeled_loop_two_row_blocks_causal_mtp(gen, causal=True):
    """S_q = 4, N = 8: 32 rows in two BLOCK_M = 16 blocks whose tokens see different key counts (each block has
    its own full-tile bound); L a multiple of BLOCK_N plus 3, and exactly a multiple."""
    lens = [2 * 16 + 3, 48]
    args = make(2, 4, 8, lens, gen, bs=16)
    o, l = check(args, causal, config=dict(key="cuda", BLOCK_M=16, BLOCK_N=16, peel=True), variant="amla_lazy",
                 num_splits=2)
    o0, l0 = run(args, causal, config=dict(key="cuda", BLOCK_M=16, BLOCK_N=16, peel=False), variant="amla_lazy",
                 num_splits=2)
    assert torch.equal(o, o0) and torch.equal(l, l0)


def test_peel_is_on_for_cuda_and_the_interpreter_off_for_ascend():
    dev = torch.device("cpu")
    assert tri.launch_plan(2, 1, 16, 4096, dev, {"key": "cuda", "cores": 132})["peel"]
    assert tri.launch_plan(2, 1, 16, 4096, dev)["peel"]
    assert not tri.launch_plan(2, 1, 16, 4096, dev, {"key": "ascend"})["peel"]
    assert all(not c["constexprs"].get("PEEL", False) for c in tri.ascend_compile_cases())


def test_merge_false_runs_only_the_forward_kernel(gen):
    """merge=False (benchmarks: the forward kernel alone) launches no merge; merge=True does."""
    args = make(2, 1, 4, [40, 9], gen)
    run(args, num_splits=3, merge=False)
    assert "merge" not in tri.LAST_LAUNCH and tri.LAST_LAUNCH["plan"]["num_splits"] == 3
    run(args, num_splits=3)
    assert "merge" in tri.LAST_LAUNCH


@pytest.mark.parametrize("cols", [0, 64, 128, 256])
@pytest.mark.parametrize("key", ["interpreter", "cuda"])
def test_vectorised_merge_matches_the_loop_merge(gen, key, cols):
    """merge.vec_min_splits (CUDA: 4): with that many splits every split of a column block is loaded as one
    [splits, cols] tile and summed along the splits, instead of a loop over the splits with one load each (3 µs of
    dependent L2 round trips at B = 1 with 17 splits, session 7). Same result as the loop up to fp32 rounding,
    zero-length rows and empty splits included; merge.cols splits a row's 512 columns between work items (lse
    written once)."""
    args = make(3, 2, 8, [0, 70, 33], gen)
    for ns in (2, 5, 17):
        loop = run(args, variant="amla_lazy", config={"key": key, "merge": {"vec_min_splits": 0}}, num_splits=ns)
        o, l = check(args, variant="amla_lazy", config={"key": key, "merge": {"vec_min_splits": 1, "vec_max_rows": 512,
                                                                              "cols": cols}}, num_splits=ns)
        assert "merge" in tri.LAST_LAUNCH and tri.LAST_LAUNCH["plan"]["merge_vec"]
        assert_close(o, loop[0], "fp16")
        assert torch.equal(torch.isneginf(l), torch.isneginf(loop[1])) and torch.isneginf(l[0]).all()
        fin = torch.isfinite(loop[1])
        assert (l[fin] - loop[1][fin]).abs().max() <= 1e-6


def test_vectorised_merge_only_from_vec_min_splits_up_to_vec_max_rows():
    """Also: a forced split count of thousands takes the loop (the [pow2(splits), cols] tile would pass Triton's
    tensor size limit: review finding), a single split has no merge, and a partial "merge" override keeps the
    other keys (it used to replace the dict: KeyError 'num_warps')."""
    dev = torch.device("cpu")
    plan = lambda B, ns: tri.launch_plan(B, 1, 16, 4096, dev, {"key": "cuda", "cores": 132}, ns)   # noqa: E731
    assert not plan(64, 2)["merge_vec"] and not plan(64, 3)["merge_vec"]
    assert plan(1, 4)["merge_vec"] and plan(1, 17)["merge_vec"] and plan(1, None)["merge_vec"]
    assert plan(16, 8)["merge_vec"] and not plan(17, 8)["merge_vec"]        # vec_max_rows 256 = 16 requests × 16 rows
    assert plan(1, 64)["merge_vec"] and not plan(1, 65)["merge_vec"] and not plan(1, 5000)["merge_vec"]
    assert not plan(1, 1)["merge_vec"]
    p = tri.launch_plan(64, 1, 16, 4096, dev, {"key": "cuda", "cores": 132, "merge": {"vec_max_rows": 4096}}, 4)
    assert p["merge_vec"] and p["merge_warps"] == 4 and p["merge_cols"] == 256
    assert not tri.launch_plan(1, 1, 16, 4096, dev, {"key": "ascend"}, 17)["merge_vec"]


def test_merge_grid_whole_rows_unless_vectorised(gen, monkeypatch):
    """merge.cols applies to the vectorised merge only: the loop merge keeps one work item per whole row (round 49:
    a loop merge over half rows doubled its programs and cost 5 % at B16 N128 L1024)."""
    from tests.test_host_path import _record      # the launch recorder of the host-path tests
    calls = _record(monkeypatch, tri, ("_amla_fwd_kernel", "_amla_merge_kernel"))
    cfg = {"key": "cuda", "cores": 132}
    for B, ns, vec in ((1, 8, True), (17, 8, False), (2, 2, False)):
        args = make(B, 1, 16, [40] * B, gen)
        calls.clear()
        tri.amla_variant(*args, SCALE, True, num_splits=ns, config=cfg)
        (grid, kw), = [(g, dict(k)) for name, g, _, k in calls if name == "_amla_merge_kernel"]
        assert kw["VEC"] == ("bool", vec) and kw["DV_BLOCK"] == ("int", 256 if vec else 512), (B, ns, kw)
        assert grid == (B * 16 * (2 if vec else 1),), (B, ns, grid)


def test_launch_plan_names_a_bad_config_key():
    """config["key"] must name a launch table; "cuda_sweep" (a list of sweep candidates) or a typo gave KeyError 'tiles'."""
    for bad in ("cuda_sweep", "CUDA"):
        with pytest.raises(ValueError, match=f"config key must be one of .*got '{bad}'"):
            tri.launch_plan(1, 1, 16, 4096, torch.device("cpu"), {"key": bad})


def test_vectorised_merge_tile_bound_uses_the_real_latent_dim(gen, monkeypatch):
    """The plan sizes the vectorised merge's [pow2(splits), cols] tile without knowing Dc (512 when cols = 0); the
    launcher re-checks it with the real column block, so a wide latent dim takes the whole-row loop instead of a
    tile past _VEC_MERGE_TILE (left-alone note of session 7, fixed in session 8)."""
    from tests.test_host_path import _record
    calls = _record(monkeypatch, tri, ("_amla_fwd_kernel", "_amla_merge_kernel"))
    q_nope, q_rope, kv, kr, bt, sl = make(1, 1, 4, [40], gen)
    wide = (torch.cat([q_nope, q_nope], -1), q_rope, torch.cat([kv, kv], -1), kr, bt, sl)   # Dc = 1024
    for cols, ns, vec, dvb in ((0, 32, False, 1024), (0, 16, True, 1024), (256, 64, True, 256), (0, 4, True, 1024)):
        calls.clear()
        tri.amla_variant(*wide, SCALE, True, num_splits=ns, config={"key": "cuda", "merge": {"cols": cols}})
        (grid, kw), = [(g, dict(k)) for name, g, _, k in calls if name == "_amla_merge_kernel"]
        assert kw["VEC"] == ("bool", vec) and kw["DV_BLOCK"] == ("int", dvb), (cols, ns, kw)
        assert grid == (4 * 1024 // dvb,), (cols, ns, grid)


@pytest.mark.parametrize("cols", [32, 128, 256])
def test_merge_column_blocks_with_a_narrow_latent_dim(gen, cols):
    """Dc = 64 (shapes are read from the inputs) with the vectorised merge: cols 32 gives two blocks per row, cols ≥ Dc
    one block per row (never an empty grid). Review finding: the first version of this test ran 3 splits, below
    vec_min_splits, so the column blocks were never used."""
    q_nope, q_rope, kv, kr, bt, sl = make(2, 1, 4, [40, 9], gen)
    args = (q_nope[..., :64].contiguous(), q_rope, kv[..., :64].contiguous(), kr, bt, sl)
    o, l = run(args, variant="amla_lazy", config={"key": "cuda", "merge": {"cols": cols}}, num_splits=4)
    assert tri.LAST_LAUNCH["plan"]["merge_vec"]
    r_o, r_l = ref.amla(*args, SCALE, True)
    assert_close(o, r_o, "fp16")
    assert (l - r_l).abs().max() <= 1e-5


@pytest.mark.parametrize("variant", ["amla_lazy", "multiply_lazy"])
def test_A5_peeled_flat_loop_with_empty_splits_and_exact_tiles(gen, variant):
    """The "cuda" table's peeled FLAT loop (page id loaded one tile ahead) with L = 0, 1, BLOCK_N, BLOCK_N + 1,
    2·BLOCK_N, causal S_q = 2, 6 splits (most splits of the short rows get zero keys), NaN in every unused slot
    and 2³¹ − 1 in the unused block_table entries: matches the reference and the unpeeled loop bit for bit."""
    bn = 16
    args = make(5, 2, 2, [0, 1, bn, bn + 1, 2 * bn], gen, bs=32, unused=2**31 - 1)
    base = dict(key="cuda", BLOCK_M=16, BLOCK_N=bn, flat=True)
    o1, l1 = check(args, config=dict(base, peel=True), variant=variant, num_splits=6)
    assert tri.LAST_LAUNCH["plan"]["peel"] and tri.LAST_LAUNCH["plan"]["flat"]
    assert tri.LAST_LAUNCH["plan"]["num_splits"] == 6
    o0, l0 = run(args, config=dict(base, peel=False), variant=variant, num_splits=6)
    assert torch.equal(o1, o0) and torch.equal(l1, l0)
    assert torch.equal(o1[0], torch.zeros_like(o1[0])) and torch.isneginf(l1[0]).all()
    assert torch.isneginf(l1[1, 0]).all() and torch.isfinite(l1[1:, 1]).all()



# ----------------------------------------------------------------------------------------------
# review 2026-11-30 (session 3): the "cuda" table's tiles for tensor-parallel shards with MTP (rows S_q·N of
# 17..64 and just past: several row blocks per request, blocks straddling query tokens) against A1–A7 at odd
# head counts. Table-driven: each case asserts the plan is the table's tile for its row count.
# ----------------------------------------------------------------------------------------------
_TP_ROWS = [(2, 24), (1, 64), (4, 5), (3, 9), (2, 32), (1, 17), (1, 65)]   # (S_q, N): rows 48 64 20 27 64 17 65


def _cuda_tile(rows):
    return next(t for t in _CUDA_TILES if t["max_rows"] is None or rows <= t["max_rows"])


def _assert_table_tile(S_q, N, bs):
    """The launch is the "cuda" table's tile for rows = S_q·N (BLOCK_N must divide the page for flat addressing,
    else per-key gathers)."""
    p = tri.LAST_LAUNCH["plan"]
    rows, t = S_q * N, _cuda_tile(S_q * N)
    assert p["key"] == "cuda"
    for k in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "q_in_loop", "dv_split"):
        assert p[k] == t.get(k, p[k]), (k, p, t)
    assert p["num_m"] == -(-rows // t["BLOCK_M"])
    assert p["flat"] == (t.get("flat", True) and bs % t["BLOCK_N"] == 0), (bs, p)
    return p


def test_tp_row_counts_pick_the_table_tiles():
    """rows 16 | 17, 32 | 33, 64 | 65 at B = 64 on 132 SMs: the first tile whose max_rows fits; one wave of
    resident programs (programs_per_core) or no split."""
    dev = torch.device("cpu")
    for S_q, N in ((1, 16), (1, 17), (4, 4), (2, 16), (1, 33), (3, 11), (1, 64), (2, 32), (1, 65), (5, 13), (3, 5)):
        p = tri.launch_plan(64, S_q, N, 4096, dev, {"key": "cuda", "cores": 132})
        t = _cuda_tile(S_q * N)
        assert (p["BLOCK_M"], p["num_warps"], p["num_stages"]) == (t["BLOCK_M"], t["num_warps"], t["num_stages"])
        assert p["num_m"] == -(-(S_q * N) // t["BLOCK_M"]) and p["q_in_loop"] == t["q_in_loop"], (S_q, N, p)
        assert p["total"] <= 132 * t["programs_per_core"] or p["num_splits"] == 1, (S_q, N, p)
    assert [t["max_rows"] for t in _CUDA_TILES][-1] is None


@pytest.mark.parametrize("S_q,N", _TP_ROWS)
@pytest.mark.parametrize("bs", [16, 128])
def test_A4_A7_tp_row_counts_odd_heads_and_block_sizes(gen, S_q, N, bs):
    """The table's tile at odd head counts (row blocks straddle query tokens), block sizes 16 (per-key gathers)
    and 128 (flat) against 64 (flat), L = 0, 1, a tile + S_q − 1 (causal diagonal across the tile edge), 130;
    NaN in every unused slot, 2³¹ − 1 in unused block_table entries: matches the reference; block sizes change no bit."""
    lens = [0, 1, 64 + S_q - 1, 130]
    q_nope, q_rope, c_kv, k_rope = logical(len(lens), S_q, N, lens, gen)
    args = (q_nope, q_rope) + paged(c_kv, k_rope, lens, bs, torch.Generator().manual_seed(bs), unused=2**31 - 1)
    out, lse = check(args, config={"key": "cuda"}, variant="amla_lazy")
    _assert_table_tile(S_q, N, bs)
    assert torch.equal(out[0], torch.zeros_like(out[0])) and torch.isneginf(lse[0]).all()
    assert torch.isneginf(lse[1, :S_q - 1]).all() and torch.isfinite(lse[1, S_q - 1]).all()
    assert torch.isfinite(lse[2:]).all()
    if bs != 64:
        g64 = torch.Generator().manual_seed(64)
        o64, l64 = run((q_nope, q_rope) + paged(c_kv, k_rope, lens, 64, g64), config={"key": "cuda"},
                       variant="amla_lazy")
        assert torch.equal(out, o64) and torch.equal(lse, l64), "block size changed the result"


@pytest.mark.parametrize("N", [8, 16, 32, 64, 128])
@pytest.mark.parametrize("S_q", [1, 2])
def test_A4_tp_shard_head_counts_on_the_cuda_table(gen, N, S_q):
    """A4 with the "cuda" table (test_A4_head_counts runs the interpreter table): N = 8..128 at S_q = 1 and 2
    each take the table's tile for their row count and match the reference."""
    args = make(2, S_q, N, [33, 70], gen, bs=64)
    check(args, config={"key": "cuda"}, variant="amla_lazy")
    _assert_table_tile(S_q, N, 64)


@pytest.mark.parametrize("S_q,N", [(2, 24), (4, 5)])
def test_A6_tp_row_counts_mtp_causal(gen, S_q, N):
    """Causal MTP on the table's tile for rows 48 / 20: query j sees exactly keys [0, L − S_q + j] (L = S_q,
    S_q + 1, 64, 65), against an independent fp64 computation; changing key L − 1 changes only the last token."""
    for L in (S_q, S_q + 1, 64, 65):
        q_nope, q_rope, c_kv, k_rope = logical(1, S_q, N, [L], gen)
        args = (q_nope, q_rope) + paged(c_kv, k_rope, [L], 64, gen)
        out, lse = check(args, config={"key": "cuda"}, variant="amla_lazy")
        _assert_table_tile(S_q, N, 64)
        e_out, e_lse = fp64_attention(q_nope, q_rope, c_kv, k_rope, [L], True)
        assert_close(out, e_out, "fp16")
        assert_close(lse, e_lse, "lse", name="lse")
        c2 = c_kv.clone()
        c2[0, L - 1] += 1.0
        out2, _ = run((q_nope, q_rope) + paged(c2, k_rope, [L], 64, torch.Generator().manual_seed(3)),
                      config={"key": "cuda"}, variant="amla_lazy")
        assert torch.equal(out2[0, :S_q - 1], out[0, :S_q - 1]) and not torch.equal(out2[0, S_q - 1], out[0, S_q - 1])


@pytest.mark.parametrize("S_q,N,variant", [(2, 24, "amla_lazy"), (1, 17, "multiply_lazy")])
def test_A1_A2_A3_A5_tp_row_counts_splits_nan_and_page_order(gen, S_q, N, variant):
    """rows 48 / 17 on the table's tile with 3 KV splits: short rows (L 1, 20: most splits empty) and a
    zero-length row stay finite / exact zero; NaN-filled unused slots and pages and a shuffled table with
    2³¹ − 1 in unused entries give bit for bit the result of a clean, ordered cache."""
    lens = [0, 1, 20, 129]
    q_nope, q_rope, c_kv, k_rope = logical(len(lens), S_q, N, lens, gen)
    g1, g2 = torch.Generator().manual_seed(11), torch.Generator().manual_seed(12)
    dirty = (q_nope, q_rope) + paged(c_kv, k_rope, lens, 64, g1, fill=float("nan"), unused=2**31 - 1)
    clean = (q_nope, q_rope) + paged(c_kv, k_rope, lens, 64, g2, permute=False, fill=0.0, unused=0)
    cfg = {"key": "cuda", "cores": 132}
    a, la = check(dirty, config=cfg, variant=variant, num_splits=3)
    p = _assert_table_tile(S_q, N, 64)
    assert p["num_splits"] == 3 and p["total"] == len(lens) * p["num_m"] * 3
    b, lb = run(clean, config=cfg, variant=variant, num_splits=3)
    assert torch.equal(a, b) and torch.equal(la, lb), "NaN / page order / unused entries changed the result"
    assert torch.equal(a[0], torch.zeros_like(a[0])) and torch.isneginf(la[0]).all()
    assert torch.isneginf(la[1, :S_q - 1]).all() and torch.isfinite(la[1, S_q - 1:]).all()
    assert torch.isfinite(la[2:]).all() and not torch.isnan(a).any()


def test_A1_tp_row_counts_every_row_zero_length(gen):
    """A padded CUDA-graph batch (every seq_len 0) on the table's tile for rows 48, with and without splits."""
    args = make(2, 2, 24, [0, 0], gen, bs=64)
    for ns in (None, 3):
        out, lse = run(args, config={"key": "cuda", "cores": 132}, variant="amla_lazy", num_splits=ns)
        _assert_table_tile(2, 24, 64)
        assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()


# ----------------------------------------------------------------------------------------------
# mutation-audit findings (session 9): inputs that make the shift clamp and the page-id redirect matter
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("jump", [100.0, 300.0])
def test_logit_step_beyond_the_fp32_exponent_range(gen, variant, jump):
    """Logits jump by more than 126·ln2 ≈ 87 between two key tiles (Δn < −126): 2^Δn is not a normal fp32, so
    building it as (Δn + 127) << 23 needs the −30 clamp. test_huge_logit_range_shift_clamp_and_underflow climbs
    only ≈ 35 per tile (Δn ≈ −50), which passed with the clamp removed (mutation audit)."""
    L = 128
    q_nope, q_rope, c_kv, k_rope = logical(1, 1, 2, [L], gen)
    q_nope.zero_()
    q_rope[:] = 1.0
    k_rope[0] = 0.0
    k_rope[0, 64:] = jump / (SCALE * DR)                 # logits 0 for keys < 64, ≈ jump from key 64 on
    args = (q_nope, q_rope) + paged(c_kv, k_rope, [L], 16, gen)
    out, lse = check(args, variant=variant, num_splits=1)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()


@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("bad", [-7, "num_blocks+1"])
def test_out_of_range_used_page_id_never_reads_outside_the_cache(gen, flat, bad):
    """A used block_table entry outside [0, num_blocks) (a caller error that only the eager check, off here, would
    catch): the kernel redirects it to page 0, as documented, and never reads outside the cache. The caches are
    views into buffers whose guard pages hold NaN, so a read outside shows as NaN. Removing the per-key (non-flat)
    bounds check passed every test before (mutation audit)."""
    L = 48
    q_nope, q_rope, c_kv, k_rope = logical(1, 1, 2, [L], gen)
    kv, kr, bt, sl = paged(c_kv, k_rope, [L], 16, gen)
    kv[0], kr[0] = torch.nan_to_num(kv[0]), torch.nan_to_num(kr[0])     # the redirect target is finite
    nb = kv.shape[0]
    bt[0, 1] = -7 if bad == -7 else nb + 1
    want_bt = bt.clone()
    want_bt[0, 1] = 0
    want_out, want_lse = ref.amla(q_nope, q_rope, kv, kr, want_bt, sl, SCALE, True)

    def guarded(c):
        lo, hi = 16, 16                                  # NaN pages before and after the cache
        buf = torch.full((lo + nb + hi,) + tuple(c.shape[1:]), float("nan"), dtype=c.dtype)
        buf[lo:lo + nb] = c
        return buf[lo:lo + nb]
    out, lse = tri.amla_variant(q_nope, q_rope, guarded(kv), guarded(kr), bt, sl, SCALE, True,
                                config={"flat": flat}, num_splits=1)
    assert_close(out, want_out, "fp16")
    assert_close(lse, want_lse, "lse", name="lse")


# mutation audit, round 2 (session 9)
def _capture_partials(monkeypatch):
    """Record the fp32 split partials (opart [B, ns, rows, Dc], lsepart [B, ns, rows]) the launcher allocates."""
    bufs = []

    def _empty(shape, dtype, device):
        t = torch.full(shape, float("nan"), dtype=dtype, device=device)
        bufs.append(t)
        return t
    monkeypatch.setattr(tri, "_empty", _empty)
    return bufs


def test_rounded_c_compensation_matches_blockwise_emulation_in_fp32(monkeypatch):
    """CANN's compensation N = Δn·2²³ + rint(1.5·(cof_prev/cof − 1)·2²³) checked on the fp32 split partial (the
    fp16 output hides it: one block's compensation error is ≤ 0.5·|cof_prev/cof − 1| ≈ 1e-4 relative). The logits
    grow along the keys so every 16-key block moves the max, re-chooses n and changes cof. The partial of split 0
    (keys [0, 64), non-causal) must equal reference.amla_blockwise over those 64 keys in fp32 to ~1e-5 (the
    emulation's +1e-6 CANN bias is 8 ULP per block)."""
    gen = torch.Generator().manual_seed(11)
    L, N = 128, 16
    q_nope, q_rope, c_kv, k_rope = logical(1, 1, N, [L], gen, q_scale=0.05)
    # logit ≈ 8.66·ramp + noise (std ≈ 0.15): the max rises ≈ 0.3 per block, so old blocks keep weight ≈ e^-0.3
    k_rope[0] = (torch.linspace(0, 0.28, L)[:, None] * torch.ones(DR)).to(DT)
    q_rope[:] = 1.0
    kv, kr, bt, sl = paged(c_kv, k_rope, [L], 16, gen)
    bufs = _capture_partials(monkeypatch)
    run((q_nope, q_rope, kv, kr, bt, sl), causal=False, variant="amla", num_splits=2,
        config={"BLOCK_N": 16, "dv_split": 1})
    opart = next(b for b in bufs if b.dim() == 4 and b.dtype == torch.float32)
    assert opart.shape[1] == 2
    got = opart[0, 0].reshape(1, N, DC).double()                      # split 0: keys [0, 64)
    want, _ = ref.amla_blockwise(q_nope, q_rope, kv, kr, bt, torch.tensor([64], dtype=torch.int32), SCALE, False,
                                 block_kv=16, out_dtype=torch.float32)
    want = want[0].double()
    rel = ((got - want).abs().max() / want.abs().max()).item()
    assert rel < 2e-5, rel


def test_supports_reason_names_the_dims_the_caller_passed(gen):
    """Fuzzing finding (session 9): kv_lora_rank 576 was reported as "kv_lora_rank / 4 ... got 144"."""
    q_nope, q_rope, kv, kr, bt, sl = make(1, 1, 2, [20], gen)
    for dc, ok in ((576, False), (520, False), (32, False), (64, True), (128, True)):
        why = tri.supports_reason(q_nope[..., :1].expand(1, 1, 2, dc), q_rope, kv[..., :1].expand(*kv.shape[:3], dc),
                                  kr, bt, sl, SCALE, True)
        assert (why is None) == ok, (dc, why)
        if not ok:
            assert f"got {dc}" in why and "kv_lora_rank" in why, why
    assert "got 24" in tri.supports_reason(q_nope, q_rope[..., :24], kv, kr[..., :24], bt, sl, SCALE, True)


# ----------------------------------------------------------------------------------------------
# session 10: programmatic dependent launch (section key pdl, off in the tables; docs/perf/amla.md)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pdl", [False, True])
def test_pdl_launch_and_constexpr_always_together(pdl, monkeypatch):
    """Both launches (forward, split merge) pass launch_pdl=True exactly when they pass PDL=True (an early launch
    whose kernel never waits would read the partials before they are written); no kernel runs here."""
    from ops.amla import make_inputs
    from ops.triton import _pdl
    monkeypatch.setattr(_pdl, "pdl_launch", lambda device, wanted: wanted)   # pdl_kwargs asks it
    log = record_launches(monkeypatch, tri, ("_amla_fwd_kernel", "_amla_merge_kernel"))
    inp = make_inputs(dict(B=1, S_q=1, N=4, L=300, block_size=16), dtype=DT, generator=torch.Generator().manual_seed(5))
    tri.amla_variant(**inp, config={"key": "interpreter", "pdl": pdl}, num_splits=2)
    assert [e[0] for e in log] == ["_amla_fwd_kernel", "_amla_merge_kernel"]
    for name, _, _, kw in log:
        kw = dict(kw)
        assert kw.get("launch_pdl", ("bool", False)) == kw.get("PDL", ("bool", False)) == ("bool", pdl), (name, kw)


def test_pdl_off_in_every_table():
    """Measured on the H200 and left off (B1 N128 +22 %): no table turns it on (docs/perf/amla_sweep19_pdl.md)."""
    assert not any(v.get("pdl", False) for v in tri.load_configs().values() if isinstance(v, dict))


def test_pdl_compiles_for_sm90_with_the_wait_before_any_memory_access():
    """With PDL forced, the forward and merge kernels compile for sm_90 with griddepcontrol.launch_dependents and
    then griddepcontrol.wait before their first global / shared access, cp.async or atomic; without it, neither
    instruction. Compiled in a subprocess without TRITON_INTERPRET."""
    code = (
        "import triton, ops.triton.amla as A\n"
        "from triton.backends.compiler import GPUTarget\n"
        "from tests.pdl_ptx import check_pdl_order\n"
        "cases = A.ascend_compile_cases()\n"
        "fwd = next(c for c in cases if c['name'].startswith('amla_fwd_bf16') and c['name'].endswith('_split_amla'))\n"
        "mrg = next(c for c in cases if c['name'] == 'amla_merge_bf16')\n"
        "for c in (fwd, mrg):\n"
        "    for pdl in (True, False):\n"
        "        src = triton.compiler.ASTSource(c['fn'], c['signature'], dict(c['constexprs'], PDL=pdl))\n"
        "        ptx = triton.compile(src, target=GPUTarget('cuda', 90, 64),\n"
        "                             options=dict(num_warps=4, num_stages=2)).asm['ptx']\n"
        "        check_pdl_order(ptx, pdl, c['name'])\n"
        "print('checked', fwd['name'], mrg['name'])\n")
    r = run_uninterpreted(code, timeout=600)
    assert r.returncode == 0 and "checked amla_fwd" in r.stdout, r.stderr[-2000:]
