"""ops/triton/amla.py under the Triton interpreter (CPU, fp16, tiny shapes): the kernel's own knobs — the three
rescale variants (CANN's AMLA, the CUDA default's lazy fp32 reference, FlashAttention's multiply), forced split
counts, every launch table's tiles (the "cuda" and "ascend" ones run here too), flat addressing vs per-key gathers,
the peeled key loop, the vectorised merge — against reference/amla.py and an independent fp64 computation; the AMLA
zero/denormal guard and large shifts. The behaviour every backend owes (A1–A7, ...) is tests/test_amla.py, which runs
this kernel too (and on CUDA for real, bf16 included); launch plans and tables are tests/test_amla_plan.py.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, strategies as st

from ops.amla import paged_cache
from tests.conftest import requires_triton
from tests.tolerances import assert_close, cos_diff

pytestmark = [requires_triton, pytest.mark.interpreter]

import ops  # noqa: E402
from ops.amla import amla as ds_amla  # noqa: E402
from reference import amla as ref  # noqa: E402

tri = pytest.importorskip("ops.triton.amla")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

DT = torch.float16            # the interpreter computes bf16 tl.dot wrongly; bf16 runs on the GPU
DC, DR = 512, 64
SCALE = 0.1353                # ≈ DeepSeek-V3's (128+64)^-0.5·mscale²
ARGS = ("q_nope", "q_rope", "kv_cache", "kr_cache", "block_table")


# ----------------------------------------------------------------------------------------------
# inputs: logical keys [B, Lmax, D] → a paged cache by ops.amla.paged_cache (random page order, NaN unused)
# ----------------------------------------------------------------------------------------------
def logical(B, S_q, N, lens, gen, *, q_scale=1.0):
    Lmax = max(lens + [1])
    c_kv = torch.randn(B, Lmax, DC, generator=gen).to(DT)
    k_rope = torch.randn(B, Lmax, DR, generator=gen).to(DT)
    q_nope = (torch.randn(B, S_q, N, DC, generator=gen) * q_scale).to(DT)
    q_rope = (torch.randn(B, S_q, N, DR, generator=gen) * q_scale).to(DT)
    return q_nope, q_rope, c_kv, k_rope


def paged(c_kv, k_rope, lens, bs, gen, *, extra_blocks=2, spare=3, **kw):
    """(kv_cache, kr_cache, block_table, seq_lens) holding request b's first lens[b] logical keys (paged_cache's
    options in kw: permute, fill, unused)."""
    c = paged_cache([c_kv[b, :L] for b, L in enumerate(lens)], [k_rope[b, :L] for b, L in enumerate(lens)], bs,
                    generator=gen, extra_blocks=extra_blocks, spare_pages=spare, **kw)
    return c["kv_cache"], c["kr_cache"], c["block_table"], c["seq_lens"]


def make(B, S_q, N, lens, gen, bs=16, **kw):
    q_nope, q_rope, c_kv, k_rope = logical(B, S_q, N, list(lens), gen)
    kv, kr, bt, sl = paged(c_kv, k_rope, list(lens), bs, gen, **kw)
    return q_nope, q_rope, kv, kr, bt, sl


def filled(value):
    """Every output and split-partial buffer the launcher allocates starts as ``value``."""
    return tri.output_allocator(lambda shape, dtype, device: torch.full(shape, value, dtype=dtype, device=device))


@pytest.fixture(autouse=True)
def poisoned():
    """Every output and split-partial buffer starts as NaN: a value the kernel forgets to write shows."""
    with filled(float("nan")):
        yield


def plan_of(args, config=None, num_splits=None, invariant=None):
    """The plan amla_variant launches for these inputs (tri.launch_plan_for)."""
    return tri.launch_plan_for(*args[:5], config=config, num_splits=num_splits, invariant=invariant)


# the rescale variants: CANN's AMLA (c rounded, compensation, n re-chosen every block: the interpreter
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
# basic agreement, every rescale, through the registered op too
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("N,S_q,lens", [(1, 1, [70]), (2, 2, [33, 9]), (8, 1, [50, 0, 17]), (8, 2, [64, 65]),
                                        (3, 4, [40])])
def test_matches_reference(gen, variant, N, S_q, lens):
    check(make(len(lens), S_q, N, lens, gen), variant=variant)


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
# field cases A1–A7 with the other rescales and forced splits (the default is tests/test_amla.py)
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
    ordered = (q_nope, q_rope) + paged(c_kv, k_rope, lens, 16, gen, permute=False, unused=0, fill=0.0)
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
    o = tri.pow2_rescale(x, tl.load(n_ptr + r), tl.load(dn_ptr + r), tl.load(fac_ptr + r), FGUARD)
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


def test_rounded_c_compensation_matches_blockwise_emulation_in_fp32():
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
    bufs = []

    def alloc(shape, dtype, device):
        bufs.append(torch.full(shape, float("nan"), dtype=dtype, device=device))
        return bufs[-1]
    with tri.output_allocator(alloc):
        run((q_nope, q_rope, kv, kr, bt, sl), causal=False, variant="amla", num_splits=2,
            config={"BLOCK_N": 16})
    opart = next(b for b in bufs if b.dim() == 4 and b.dtype == torch.float32)
    assert opart.shape[1] == 2
    got = opart[0, 0].reshape(1, N, DC).double()                      # split 0: keys [0, 64)
    want, _ = ref.amla_blockwise(q_nope, q_rope, kv, kr, bt, torch.tensor([64], dtype=torch.int32), SCALE, False,
                                 block_kv=16, out_dtype=torch.float32)
    want = want[0].double()
    rel = ((got - want).abs().max() / want.abs().max()).item()
    assert rel < 2e-5, rel


# ----------------------------------------------------------------------------------------------
# splits, launch tables, addressing, the merge
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
    """The Ascend config (persistent grid of its cube cores, loop inside) computes the same thing."""
    args = make(2, 2, 8, [70, 21], gen)
    sect = tri.section("ascend")
    plan = plan_of(args, config={"key": "ascend"})
    assert plan["persistent"] == sect["persistent"] and plan["grid"] <= sect["cores"] * max(
        b["config"]["programs_per_core"] for b in sect["buckets"])
    check(args, config={"key": "ascend"})
    check(args, config={"key": "ascend"}, rescale="multiply")


def test_ascend_plan_block_sizes_under_the_interpreter(gen):
    """The Ascend plan for block sizes 128 / 32 / 16 (BLOCK_N shrinks to the largest power of two ≥ 16 dividing the
    page: one scalar page id per tile) and a page that is no multiple of 16 (per-key gathers): all agree with the
    reference."""
    lens = [150, 37]
    q_nope, q_rope, c_kv, k_rope = logical(2, 2, 4, lens, gen)
    table_bn = tri.tile_for(tri.section("ascend")["buckets"], 8)["BLOCK_N"]
    for bs in (128, 32, 16, 24):
        args = (q_nope, q_rope) + paged(c_kv, k_rope, lens, bs, gen)
        bn = table_bn
        while bn >= 16 and bs % bn:
            bn //= 2
        flat = bn >= 16
        plan = plan_of(args, config={"key": "ascend"})
        assert (plan["BLOCK_N"], plan["flat"]) == ((bn, True) if flat else (table_bn, False)), (bs, plan)
        check(args, config={"key": "ascend"})


# every tile of the "cuda" table, run by the interpreter at tiny sizes (fp16): the wgmma/mma tiles, flat
# addressing vs per-key gathers, the exponent-field guard
_CUDA_TILES = [dict(b["config"], max_rows=tri.bucket_rows(b)[1]) for b in tri.section("cuda")["buckets"]]


def _cuda_cfg(tile):
    return dict({k: v for k, v in tile.items() if k not in ("max_rows", "name")}, key="cuda")


@pytest.mark.parametrize("ti", range(len(_CUDA_TILES)))
@pytest.mark.parametrize("bs", [64, 16])
def test_cuda_tiles_under_the_interpreter(gen, ti, bs):
    cfg = _cuda_cfg(_CUDA_TILES[ti])
    lens = [70, 9]
    args = make(2, 2, 4, lens, gen, bs=bs)
    out, lse = check(args, config=cfg, variant="amla_lazy")          # the CUDA default rescale
    plan = plan_of(args, config=cfg)
    # a tile must lie in one page for flat addressing; CUDA keeps BLOCK_N and falls back to gathers
    # (a tile may also ask for gathers outright: "flat": false)
    assert plan["BLOCK_N"] == cfg["BLOCK_N"] and plan["flat"] == (cfg.get("flat", True) and bs % cfg["BLOCK_N"] == 0)
    assert plan["key"] == "cuda" and plan["float_guard"] == tri.section("cuda")["float_guard"]
    check(args, config=cfg, variant="multiply_lazy")
    check(args, config=cfg, variant="amla", num_splits=3)


@pytest.mark.parametrize("variant", ["amla", "amla_lazy", "multiply_lazy"])
def test_flat_addressing_and_the_guard_form_change_no_bit(gen, variant):
    """Flat addressing vs per-key page gathers, and the AMLA guard as exponent-field test vs fp32 compares, give
    bit-identical out and lse."""
    args = make(3, 2, 8, [90, 1, 33], gen, bs=32)
    base = dict(key="cuda", BLOCK_M=16, BLOCK_N=32, rescale_skip=True)
    ref_o, ref_l = run(args, variant=variant, config=dict(base, flat=False), num_splits=2)
    assert not torch.isnan(ref_o).any()
    for flat, fguard in ((False, True), (True, False), (True, True)):
        cfg = dict(base, flat=flat, float_guard=fguard)
        o, l = run(args, variant=variant, config=cfg, num_splits=2)
        assert plan_of(args, config=cfg)["flat"] == flat
        assert torch.equal(o, ref_o) and torch.equal(l, ref_l), (flat, fguard)


@pytest.mark.parametrize("num_splits", [None, 3])
@pytest.mark.parametrize("variant", ["amla", "amla_lazy", "multiply_lazy"])
@pytest.mark.parametrize("key", ["interpreter", "cuda"])
def test_nan_and_inf_logits_give_nan_like_the_reference(gen, key, variant, num_splits):
    """A NaN in one head's q_nope and a +inf in one key's c_kv: the reference's out / lse are NaN for every row that
    sees them. The kernel's max reductions drop NaN, and l = NaN used to read as an empty row (out 0, lse −inf),
    hiding corrupt input. Outputs start as 777, so a NaN must be written."""
    q_nope, q_rope, kv, kr, bt, sl = make(2, 2, 4, [70, 40], gen, bs=16)
    q_nope[0, 1, 2, 5] = float("nan")                     # request 0, token 1, head 2
    page, slot = int(bt[1, 33 // 16]), 33 % 16            # request 1, key 33 (seen by both tokens)
    kv[page, slot, 0, 7] = float("inf")                   # logit ±inf by the sign of q_nope[..., 7]
    args = (q_nope, q_rope, kv, kr, bt, sl)
    with filled(777.0):
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


def test_flat_addressing_falls_back_to_gathers_when_slot_offsets_do_not_fit():
    """Flat addressing computes slot · kv_cache.stride(1) in int32; a cache whose slot stride makes that reach 2³¹
    (a permuted layout) takes the per-key gathers, which are int64. Meta tensors: no memory (flat vs gathers is
    bit-identical: test_flat_addressing_and_the_guard_form_change_no_bit)."""
    def meta(shape, stride):
        return torch.empty_strided(shape, stride, device="meta", dtype=DT)
    q = (meta((1, 1, 16, 512), (8192, 8192, 512, 1)), meta((1, 1, 16, 64), (1024, 1024, 64, 1)))
    bt = torch.empty(1, 4, dtype=torch.int32, device="meta")
    cfg = {"key": "cuda", "flat": True, "BLOCK_N": 64}

    def flat(kv, kr):
        return tri.launch_plan_for(*q, kv, kr, bt, config=cfg)["flat"]
    kv, kr = meta((4, 128, 1, 512), (65536, 512, 512, 1)), meta((4, 128, 1, 64), (8192, 64, 64, 1))
    assert flat(kv, kr)
    slot_major = meta((4, 128, 1, 512), (512, 2**24, 512, 1))        # slots 2^24 elements apart
    assert not flat(slot_major, kr)                                    # page · stride = 2^31 (bound kept with margin)
    assert flat(meta((4, 64, 1, 512), (512, 2**24, 512, 1)), meta((4, 64, 1, 64), (4096, 64, 64, 1)))   # 2^30
    assert not flat(kv, meta((4, 128, 1, 64), (64, 2**24, 64, 1)))   # k_rope too


@pytest.mark.parametrize("key", ["interpreter", "cuda"])
def test_query_rows_not_evenly_spaced_are_copied(gen, key):
    """Flat addressing needs q's (S_q, N) rows evenly spaced; a [B, N, S_q, D] tensor transposed to
    [B, S_q, N, D] is not, and must still be read right."""
    args = list(make(2, 3, 4, [40, 9], gen, bs=16))
    args[0] = args[0].transpose(1, 2).contiguous().transpose(1, 2)
    args[1] = args[1].transpose(1, 2).contiguous().transpose(1, 2)
    assert args[0].stride(1) != args[0].shape[2] * args[0].stride(2)
    cfg = {"key": key} if key == "interpreter" else _cuda_cfg(_CUDA_TILES[0])
    cfg["flat"] = True
    if key == "cuda":
        cfg["BLOCK_N"] = 16
    check(tuple(args), config=cfg)
    assert plan_of(args, config=cfg)["flat"]


@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("bad", [-7, "num_blocks+1"])
def test_out_of_range_used_page_id_gives_nan_and_never_reads_outside_the_cache(gen, flat, bad):
    """A used block_table entry outside [0, num_blocks) (a caller error that only the eager check would catch): with
    flat addressing and with per-key gathers, the rows that see a key on it are NaN, the others keep their bits, and
    nothing outside the cache is read (its neighbours are NaN pages). Removing the per-key (non-flat) bounds check
    passed every test before."""
    L = 48
    q_nope, q_rope, c_kv, k_rope = logical(1, 2, 2, [L], gen)
    kv, kr, bt, sl = paged(c_kv, k_rope, [L], 16, gen)
    nb = kv.shape[0]

    def guarded(c):
        lo, hi = 16, 16                                  # NaN pages before and after the cache
        buf = torch.full((lo + nb + hi,) + tuple(c.shape[1:]), float("nan"), dtype=c.dtype)
        buf[lo:lo + nb] = c
        return buf[lo:lo + nb]
    kv, kr = guarded(kv), guarded(kr)
    good = tri.amla_variant(q_nope, q_rope, kv, kr, bt, sl, SCALE, True, config={"flat": flat}, num_splits=1)
    bad_bt = bt.clone()
    bad_bt[0, 2] = -7 if bad == -7 else nb + 1          # keys 32..47: token 0 sees up to key 46, token 1 all
    out, lse = tri.amla_variant(q_nope, q_rope, kv, kr, bad_bt, sl, SCALE, True, config={"flat": flat}, num_splits=1)
    assert plan_of((q_nope, q_rope, kv, kr, bt), config={"flat": flat})["flat"] == flat
    assert torch.isnan(out).all() and torch.isnan(lse).all()
    bad_bt[0, 2] = bt[0, 2]
    bad_bt[0, 1] = -7 if bad == -7 else nb + 1
    sl2 = torch.tensor([16], dtype=torch.int32)          # request of 16 keys: the bad page is past it, never read
    o2, l2 = tri.amla_variant(q_nope, q_rope, kv, kr, bad_bt, sl2, SCALE, True, config={"flat": flat}, num_splits=1)
    w2 = tri.amla_variant(q_nope, q_rope, kv, kr, bt, sl2, SCALE, True, config={"flat": flat}, num_splits=1)
    assert torch.equal(o2, w2[0]) and torch.equal(l2, w2[1]) and not torch.isnan(o2).any()
    assert not torch.isnan(good[0]).any()


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
        p = plan_of(args, config=dict(base, peel=True))
        assert p["peel"] and p["flat"] == flat
        o0, l0 = run(args, config=dict(base, peel=False), variant=variant, num_splits=ns)
        assert not plan_of(args, config=dict(base, peel=False))["peel"]
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


@pytest.mark.parametrize("variant", ["amla_lazy", "multiply_lazy"])
def test_A5_peeled_flat_loop_with_empty_splits_and_exact_tiles(gen, variant):
    """The peeled FLAT loop (page id loaded one tile ahead) with L = 0, 1, BLOCK_N, BLOCK_N + 1, 2·BLOCK_N, causal
    S_q = 2, 6 splits (most splits of the short rows get zero keys), NaN in every unused slot and 2³¹ − 1 in the
    unused block_table entries: matches the reference and the unpeeled loop bit for bit."""
    bn = 16
    args = make(5, 2, 2, [0, 1, bn, bn + 1, 2 * bn], gen, bs=32, unused=2**31 - 1)
    base = dict(key="cuda", BLOCK_M=16, BLOCK_N=bn, flat=True)
    o1, l1 = check(args, config=dict(base, peel=True), variant=variant, num_splits=6)
    p = plan_of(args, config=dict(base, peel=True), num_splits=6)
    assert p["peel"] and p["flat"] and p["num_splits"] == 6
    o0, l0 = run(args, config=dict(base, peel=False), variant=variant, num_splits=6)
    assert torch.equal(o1, o0) and torch.equal(l1, l0)
    assert torch.equal(o1[0], torch.zeros_like(o1[0])) and torch.isneginf(l1[0]).all()
    assert torch.isneginf(l1[1, 0]).all() and torch.isfinite(l1[1:, 1]).all()


# ----------------------------------------------------------------------------------------------
# the split merge: the vectorised tile vs the loop
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key,cols", [("interpreter", 0), ("cuda", 64), ("cuda", 256)])
def test_vectorised_merge_matches_the_loop_merge(gen, key, cols):
    """merge.vec_min_splits: with that many splits every split of a column block is loaded as one [splits, cols]
    tile and summed along the splits, instead of a loop over the splits with one load each. Same result as the loop
    up to fp32 rounding, zero-length rows and empty splits included; merge.cols splits a row's 512 columns between
    work items (lse written once)."""
    args = make(3, 2, 8, [0, 70, 33], gen)
    for ns in (2, 17):
        loop_cfg = {"key": key, "merge": {"vec_min_splits": 0}}
        loop = run(args, variant="amla_lazy", config=loop_cfg, num_splits=ns)
        assert not plan_of(args, config=loop_cfg, num_splits=ns)["merge_vec"]
        vec_cfg = {"key": key, "merge": {"vec_min_splits": 1, "vec_max_rows": 512, "cols": cols}}
        o, l = check(args, variant="amla_lazy", config=vec_cfg, num_splits=ns)
        assert plan_of(args, config=vec_cfg, num_splits=ns)["merge_vec"]
        assert_close(o, loop[0], "fp16")
        assert torch.equal(torch.isneginf(l), torch.isneginf(loop[1])) and torch.isneginf(l[0]).all()
        fin = torch.isfinite(loop[1])
        assert (l[fin] - loop[1][fin]).abs().max() <= 1e-6


@pytest.mark.parametrize("cols", [32, 128, 256])
def test_merge_column_blocks_with_a_narrow_latent_dim(gen, cols):
    """Dc = 64 (shapes are read from the inputs) with the vectorised merge: cols 32 gives two blocks per row, cols ≥ Dc
    one block per row (never an empty grid). The first version of this test ran 3 splits, below vec_min_splits, so
    the column blocks were never used."""
    q_nope, q_rope, kv, kr, bt, sl = make(2, 1, 4, [40, 9], gen)
    args = (q_nope[..., :64].contiguous(), q_rope, kv[..., :64].contiguous(), kr, bt, sl)
    cfg = {"key": "cuda", "merge": {"cols": cols, "vec_min_splits": 4, "vec_max_rows": 256}}
    o, l = run(args, variant="amla_lazy", config=cfg, num_splits=4)
    p = plan_of(args, config=cfg, num_splits=4)
    assert p["merge_vec"] and p["merge_dv_block"] == (cols if cols < 64 else 64)
    r_o, r_l = ref.amla(*args, SCALE, True)
    assert_close(o, r_o, "fp16")
    assert (l - r_l).abs().max() <= 1e-5


# ----------------------------------------------------------------------------------------------
# the "cuda" table's tiles for tensor-parallel shards with MTP (rows S_q·N of 17..64 and just past: several row
# blocks per request, blocks straddling query tokens) against A1–A7 at odd head counts. Table-driven: each case
# asserts the plan is the table's tile for its row count.
# ----------------------------------------------------------------------------------------------
_TP_ROWS = [(2, 24), (1, 64), (4, 5), (3, 9), (2, 32), (1, 17), (1, 65)]   # (S_q, N): rows 48 64 20 27 64 17 65


def _cuda_tile(rows):
    return next(t for t in _CUDA_TILES if t["max_rows"] is None or rows <= t["max_rows"])


def _assert_table_tile(args, S_q, N, bs, **kw):
    """The launch is the "cuda" table's tile for rows = S_q·N (BLOCK_N must divide the page for flat addressing,
    else per-key gathers)."""
    p = plan_of(args, config=kw.pop("config", {"key": "cuda"}), **kw)
    rows, t = S_q * N, _cuda_tile(S_q * N)
    assert p["key"] == "cuda"
    for k in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "q_in_loop"):
        assert p[k] == t.get(k, p[k]), (k, p, t)
    assert p["num_m"] == -(-rows // t["BLOCK_M"])
    assert p["flat"] == (t.get("flat", True) and bs % t["BLOCK_N"] == 0), (bs, p)
    return p


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
    _assert_table_tile(args, S_q, N, bs)
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
    _assert_table_tile(args, S_q, N, 64)


@pytest.mark.parametrize("S_q,N", [(2, 24), (4, 5)])
def test_A6_tp_row_counts_mtp_causal(gen, S_q, N):
    """Causal MTP on the table's tile for rows 48 / 20: query j sees exactly keys [0, L − S_q + j] (L = S_q,
    S_q + 1, 64, 65), against an independent fp64 computation; changing key L − 1 changes only the last token."""
    for L in (S_q, S_q + 1, 64, 65):
        q_nope, q_rope, c_kv, k_rope = logical(1, S_q, N, [L], gen)
        args = (q_nope, q_rope) + paged(c_kv, k_rope, [L], 64, gen)
        out, lse = check(args, config={"key": "cuda"}, variant="amla_lazy")
        _assert_table_tile(args, S_q, N, 64)
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
    p = _assert_table_tile(dirty, S_q, N, 64, config=cfg, num_splits=3)
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
        _assert_table_tile(args, 2, 24, 64, config={"key": "cuda", "cores": 132}, num_splits=ns)
        assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()


def test_supports_reason_names_the_dims_the_caller_passed(gen):
    """A fuzzing finding: kv_lora_rank 576 was reported as "kv_lora_rank / 4 ... got 144"."""
    q_nope, q_rope, kv, kr, bt, sl = make(1, 1, 2, [20], gen)
    for dc, ok in ((576, False), (520, False), (32, False), (64, True), (128, True)):
        why = tri.supports_reason(q_nope[..., :1].expand(1, 1, 2, dc), q_rope, kv[..., :1].expand(*kv.shape[:3], dc),
                                  kr, bt, sl, SCALE, True)
        assert (why is None) == ok, (dc, why)
        if not ok:
            assert f"got {dc}" in why and "kv_lora_rank" in why, why
    assert "got 24" in tri.supports_reason(q_nope, q_rope[..., :24], kv, kr[..., :24], bt, sl, SCALE, True)
