"""ds::moe_gating_top_k: DeepSeek-V3 noaux_tc routing.

Every backend that can run here (tests/backends.py) is checked against an independent per-row fp64
implementation (plain Python sorting with explicit (−score, index) keys) and the field cases G1–G6 (cases.md),
outputs poisoned; the reference also against the Hugging Face ``DeepseekV3TopkRouter``; R1/R2 (opcheck,
torch.compile) at the end. A backend that refuses an input (bf16 logits under the interpreter) skips it with the
reason.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, strategies as st

import ops
from tests.backends import backends_for, kernel_backends_for
from tests.spec_checks import check_against_reference, spec_shapes
from tests.tolerances import assert_close, poisoned_empty

DS = dict(k=8, k_group=4, group_count=8, group_select_mode=1, renorm=0, norm_type=1, routed_scaling_factor=2.5)
GATE = backends_for("moe_gating_top_k")
_ACTIVE: list = []   # the backend of the running test (None: the reference)


@pytest.fixture(autouse=True)
def _backend(request, monkeypatch):
    """Tests parametrised by ``be`` run on that backend with poisoned outputs; the others on the reference."""
    be = request.getfixturevalue("be") if "be" in request.fixturenames else None
    if be is not None:
        monkeypatch.setattr(torch, "empty", poisoned_empty)
    _ACTIVE.append(be)
    with be.active() if be is not None else ops.backend("reference"):
        yield
    _ACTIVE.pop()


# ----------------------------------------------------------------------------------------------
# independent implementation: per row, fp64, explicit tie-break keys
# ----------------------------------------------------------------------------------------------
def gate64(x, k, *, bias=None, k_group=1, group_count=1, group_select_mode=0, renorm=0, norm_type=0,
           routed_scaling_factor=1.0, eps=1e-20, **_):
    """(weights fp64 [T,k], ids [T,k] long, s fp64 [T,E], b fp64 [T,E]) per the spec, NaN ranked as −inf."""
    T, E = x.shape
    xd = x.double()
    s = torch.sigmoid(xd) if norm_type == 1 else torch.softmax(xd, -1)
    b = s + (bias.double() if bias is not None else 0.0)
    per = E // group_count
    ws, ids = [], []
    for t in range(T):
        key = [(-math.inf if math.isnan(v) else v) for v in b[t].tolist()]
        groups = list(range(group_count))
        if group_count > 1:
            def gscore(g):
                vals = sorted(key[g * per:(g + 1) * per], reverse=True)
                v = vals[0] if group_select_mode == 0 else vals[0] + vals[1]
                return -math.inf if math.isnan(v) else v
            groups = sorted(groups, key=lambda g: (-gscore(g), g))[:k_group]
        cand = [e for g in sorted(groups) for e in range(g * per, (g + 1) * per)]
        chosen = sorted(cand, key=lambda e: (-key[e], e))[:k]
        w = [0.0 if math.isnan(s[t, e].item()) else s[t, e].item() for e in chosen]
        if norm_type == 1 or renorm == 1:
            tot = sum(w) + eps
            w = [v / tot for v in w]
        ws.append([v * routed_scaling_factor for v in w])
        ids.append(chosen)
    return (torch.tensor(ws, dtype=torch.float64).reshape(T, k), torch.tensor(ids, dtype=torch.long).reshape(T, k), s, b)


def assert_same_choice(idx, ids64, b64, tol=1e-6):
    """ids equal, except swaps between candidates whose fp64 choice scores are within ``tol`` (an fp32 near-tie)."""
    idx = idx.long()
    diff = idx != ids64
    if diff.any():
        bi = b64.gather(1, idx)
        bj = b64.gather(1, ids64)
        assert ((bi - bj).abs()[diff] <= tol * bj.abs()[diff].clamp(min=1)).all(), \
            f"expert ids differ beyond near-ties in rows {diff.any(1).nonzero().flatten().tolist()}"
    assert diff.float().sum() <= 0.02 * max(1, diff.numel()), "too many near-tie swaps"


def check_row_invariants(y, idx, E, k, group_count=1, k_group=1, kept_groups=None):
    T = idx.shape[0]
    assert idx.dtype == torch.int32 and idx.shape == (T, k) and y.shape == (T, k)
    assert ((idx >= 0) & (idx < E)).all()
    for t in range(T):
        assert len(set(idx[t].tolist())) == k, f"row {t}: ids not distinct {idx[t].tolist()}"
    assert torch.isfinite(y.float()).all()
    if kept_groups is not None:
        per = E // group_count
        for t in range(T):
            assert {int(e) // per for e in idx[t]} <= set(kept_groups[t])


def run(x, *args, **kw):
    """moe_gating_top_k on the test's backend (inputs moved to its device, outputs back on the CPU); skipped with the
    reason where the backend refuses these inputs."""
    be = _ACTIVE[-1] if _ACTIVE else None
    if be is None:
        return ops.moe_gating.moe_gating_top_k(x, *args, **kw)
    kw = {k: (v.to(be.device) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    try:
        return tuple(o.cpu() for o in ops.moe_gating.moe_gating_top_k(x.to(be.device), *args, **kw))
    except ops.BackendUnavailable as e:
        pytest.skip(str(e))


# ----------------------------------------------------------------------------------------------
# against the independent implementation
# ----------------------------------------------------------------------------------------------
CONFIGS = {
    "deepseek_v3": dict(E=256, k=8, k_group=4, group_count=8, group_select_mode=1),
    "group_max": dict(E=256, k=8, k_group=4, group_count=8, group_select_mode=0),
    "small_groups": dict(E=64, k=6, k_group=2, group_count=4, group_select_mode=1),
    "no_groups": dict(E=160, k=7, k_group=1, group_count=1, group_select_mode=0),
}


# the reference with and without a bias, the kernels with one (their no-bias path: tests/test_moe_gating_triton.py)
_FP64_CASES = [pytest.param(p.values[0], wb, marks=p.marks, id=f"{p.id}-{'bias' if wb else 'nobias'}")
               for p in GATE for wb in ((True, False) if p.values[0].name == "reference" else (True,))]


@pytest.mark.parametrize("be,with_bias", _FP64_CASES)
@pytest.mark.parametrize("cfg", list(CONFIGS))
@pytest.mark.parametrize("norm_type,renorm", [(1, 0), (0, 0), (0, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matches_independent_fp64(be, with_bias, cfg, norm_type, renorm, dtype, gen):
    if be.dtype(dtype) != dtype:
        pytest.skip(f"{be} tests bf16 as fp16 (the fp16 case)")
    c = dict(CONFIGS[cfg])
    E = c.pop("E")
    T = 33
    x = (2 * torch.randn(T, E, generator=gen)).to(dtype)
    bias = 0.3 * torch.randn(E, generator=gen) if with_bias else None
    kw = dict(c, bias=bias, norm_type=norm_type, renorm=renorm, routed_scaling_factor=2.5)
    y, idx, norm_out = run(x, **kw)
    w64, ids64, s64, b64 = gate64(x, **kw)
    assert y.dtype == dtype and norm_out.dtype == torch.float32 and norm_out.shape == (T, E)
    assert_same_choice(idx, ids64, b64)
    check_row_invariants(y, idx, E, c["k"])
    same = (idx.long() == ids64).all(1)
    assert_close(y[same], w64[same].to(dtype), "fp32" if dtype == torch.float32 else "bf16", name="y")
    assert_close(norm_out, s64, "fp32", name="norm_out")
    # ordered by descending choice score
    bsel = b64.gather(1, idx.long())
    assert (bsel[:, :-1] >= bsel[:, 1:] - 1e-6).all()


@pytest.mark.parametrize("be", GATE)
def test_softmax_renorm_semantics(be, gen):
    x = torch.randn(8, 64, generator=gen)
    y0, i0, s = run(x, k=4, norm_type=0, renorm=0, routed_scaling_factor=2.0)
    y1, i1, _ = run(x, k=4, norm_type=0, renorm=1, routed_scaling_factor=2.0)
    assert torch.equal(i0, i1)
    sm = torch.softmax(x, -1)
    assert torch.allclose(y0, 2.0 * sm.gather(1, i0.long()), rtol=1e-6)
    assert torch.allclose(y1.sum(-1), torch.full((8,), 2.0), rtol=1e-6)
    assert torch.allclose(s, sm)
    # sigmoid ignores renorm: always renormalised
    a, _, _ = run(x, k=4, norm_type=1, renorm=0)
    b, _, _ = run(x, k=4, norm_type=1, renorm=1)
    assert torch.equal(a, b)


def test_hf_deepseek_v3_topk_router_equivalence(gen):
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
    cfg = DeepseekV3Config(hidden_size=64, n_routed_experts=256, n_group=8, topk_group=4, num_experts_per_tok=8,
                           routed_scaling_factor=2.5, norm_topk_prob=True)
    router = DeepseekV3TopkRouter(cfg)
    with torch.no_grad():
        router.weight.copy_(torch.randn(256, 64, generator=gen) / 4)
        router.e_score_correction_bias.copy_(0.5 * torch.randn(256, generator=gen))
    h = torch.randn(40, 64, generator=gen).to(torch.bfloat16)
    with torch.no_grad():
        logits, w_hf, i_hf = router(h)
    y, idx, _ = torch.ops.ds.moe_gating_top_k(logits, 8, bias=router.e_score_correction_bias, k_group=4, group_count=8,
                                              group_select_mode=1, renorm=0, norm_type=1, routed_scaling_factor=2.5)
    # HF returns them unordered (topk sorted=False): compare as sets keyed by expert id
    o_hf, o = i_hf.sort(-1), idx.long().sort(-1)
    assert torch.equal(o_hf.values, o.values)
    assert_close(y.gather(1, o.indices), w_hf.gather(1, o_hf.indices), "fp32")


# ----------------------------------------------------------------------------------------------
# field cases G1–G6
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("be", GATE)
def test_G1_large_bias_chooses_but_does_not_weigh(be, gen):
    x = torch.randn(16, 256, generator=gen)
    bias = 0.5 * torch.where(torch.rand(256, generator=gen) < 0.5, -1.0, 1.0)
    y, idx, s = run(x, bias=bias, **DS)
    w64, ids64, _, b64 = gate64(x, bias=bias, **DS)
    assert_same_choice(idx, ids64, b64)
    sel = s.gather(1, idx.long())
    assert torch.allclose(y, sel / sel.sum(-1, keepdim=True) * 2.5, rtol=1e-6)   # unbiased weights
    y0, idx0, _ = run(x, **DS)                                                      # bias really changed the choice
    assert not torch.equal(idx0, idx)
    assert (bias[idx.long()] > 0).float().mean() > 0.8


@pytest.mark.parametrize("be", GATE)
def test_G2_all_negative_biased_scores_never_pick_dropped_groups(be, gen):
    x = torch.randn(32, 256, generator=gen)
    bias = torch.full((256,), -2.0)
    y, idx, _ = run(x, bias=bias, **DS)
    b = torch.sigmoid(x) - 2.0
    gs = b.view(32, 8, 32).topk(2, -1).values.sum(-1)
    kept = [sorted(range(8), key=lambda g: (-gs[t, g].item(), g))[:4] for t in range(32)]
    check_row_invariants(y, idx, 256, 8, 8, 4, kept)
    # a "mask with 0" bug would pick dropped-group experts (0 > every biased score)
    zero_masked = torch.where(torch.tensor([[g in kept[t] for g in range(8)] for t in range(32)]).repeat_interleave(32, 1), b,
                              torch.zeros_like(b))
    assert (zero_masked.topk(8, -1).values == 0).all()


@pytest.mark.parametrize("be", GATE)
@pytest.mark.parametrize("mode,want_ids", [(1, [8, 9]), (0, [0, 1])])
def test_G3_top2_sum_vs_max_group_ordering(be, mode, want_ids):
    x = torch.full((1, 32), -5.0)
    x[0, 0] = 3.0                     # group 0: one strong expert (max 0.953, top-2 sum 0.959)
    x[0, 8] = x[0, 9] = 2.0           # group 1: two good experts (max 0.881, top-2 sum 1.762)
    y, idx, _ = run(x, 2, k_group=1, group_count=4, group_select_mode=mode, norm_type=1)
    assert idx[0].tolist() == want_ids


@pytest.mark.parametrize("be", GATE)
@pytest.mark.parametrize("norm_type", [1, 0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_G4_nan_and_inf_rows(be, norm_type, dtype, gen):
    dtype = be.dtype(dtype)
    x = torch.randn(6, 256, generator=gen)
    x[0] = float("nan")
    x[1] = float("inf")
    x[2, :128] = float("nan")
    x[3] = float("-inf")
    x[4, 5] = float("nan")
    x = x.to(dtype)
    bias = 0.1 * torch.randn(256, generator=gen)
    kw = dict(DS, norm_type=norm_type)
    y, idx, norm_out = run(x, bias=bias, **kw)
    check_row_invariants(y, idx, 256, 8)
    if norm_type == 1:
        assert (idx[2] >= 128).all()                           # the finite half wins
        assert torch.allclose(y[1].float(), torch.full((8,), 2.5 / 8), rtol=1e-2)   # s = 1 everywhere
        assert 5 not in idx[4].tolist()
        # the clean row is unaffected by its neighbours
        y5, i5, _ = run(x[5:6], bias=bias, **kw)
        assert torch.equal(i5, idx[5:6]) and torch.equal(y5, y[5:6])
    assert (y[0] == 0).all()                                   # NaN scores weigh 0, never NaN
    assert torch.isnan(norm_out[0]).all()


@pytest.mark.parametrize("be", GATE)
def test_G5_all_equal_logits_go_to_lowest_groups_and_ids(be):
    y, idx, _ = run(torch.zeros(3, 256), bias=torch.zeros(256), **DS)
    assert idx.tolist() == [list(range(8))] * 3
    assert torch.allclose(y, torch.full((3, 8), 2.5 / 8))
    # groups 0..3 are the kept ones: take every expert of the kept groups
    _, idx, _ = run(torch.zeros(2, 256), 128, bias=torch.zeros(256), k_group=4, group_count=8, group_select_mode=1, norm_type=1)
    assert idx.tolist() == [list(range(128))] * 2
    _, idx, _ = run(torch.zeros(2, 16), 8, bias=torch.zeros(16), k_group=4, group_count=8, group_select_mode=1, norm_type=1)
    assert idx.tolist() == [list(range(8))] * 2
    # ties in bf16 logits too, and equal group scores with distinct experts
    x = torch.full((1, 256), 0.75).to(be.dtype(torch.bfloat16))
    _, idx, _ = run(x, bias=torch.zeros(256), **DS)
    assert idx.tolist() == [list(range(8))]


@pytest.mark.parametrize("be", GATE)
@pytest.mark.parametrize("k", [6, 8])
def test_G6_weights_sum_to_routed_scaling_factor_once(be, k, gen):
    x = 3 * torch.randn(64, 256, generator=gen)
    bias = 0.5 * torch.randn(256, generator=gen)
    y, idx, _ = run(x, bias=bias, **dict(DS, k=k))
    tot = y.double().sum(-1)
    assert (tot - 2.5).abs().max() <= 2.5 * k * 2 ** -23
    yb, _, _ = run(x.to(be.dtype(torch.bfloat16)), bias=bias, **dict(DS, k=k))
    assert (yb.double().sum(-1) - 2.5).abs().max() <= 2.5 * k * 2 ** -8


@pytest.mark.parametrize("be", GATE)
def test_zero_and_one_token(be):
    for T in (0, 1):
        y, idx, n = run(torch.randn(T, 256), 8, bias=torch.zeros(256), k_group=4, group_count=8,
                        group_select_mode=1, norm_type=1, routed_scaling_factor=2.5)
        assert y.shape == (T, 8) and idx.shape == (T, 8) and n.shape == (T, 256)


def test_bias_in_x_dtype_accepted_and_fp32_bias_kept_fp32(gen):
    """The bias is added in fp32; a bf16-rounded bias is a different bias (sglang #37133)."""
    x = torch.randn(64, 256, generator=gen)
    bias = 6.8 + 0.3 * torch.rand(256, generator=gen)
    _, i32, _ = run(x.to(torch.bfloat16), bias=bias, **DS)
    _, i16, _ = run(x.to(torch.bfloat16), bias=bias.to(torch.bfloat16), **DS)
    assert not torch.equal(i32, i16)
    _, iref, _ = run(x.to(torch.bfloat16), bias=bias.to(torch.bfloat16).float(), **DS)
    assert torch.equal(i16, iref)


# ----------------------------------------------------------------------------------------------
# Hypothesis
# ----------------------------------------------------------------------------------------------
@st.composite
def gating_case(draw):
    group_count = draw(st.sampled_from([1, 2, 4, 8]))
    per = draw(st.sampled_from([2, 3, 8, 32]))
    E = group_count * per
    k_group = draw(st.integers(1, group_count))
    k = draw(st.integers(1, min(k_group * per, 16)))
    return dict(T=draw(st.sampled_from([0, 1, 2, 7, 16, 17])), E=E, k=k, k_group=k_group, group_count=group_count,
                group_select_mode=draw(st.sampled_from([0, 1])), norm_type=draw(st.sampled_from([0, 1])),
                renorm=draw(st.sampled_from([0, 1])), bias=draw(st.booleans()),
                dtype=draw(st.sampled_from([torch.float32, torch.bfloat16])), seed=draw(st.integers(0, 2 ** 16)))


@given(gating_case())
@example(dict(T=0, E=2, k=1, k_group=1, group_count=1, group_select_mode=0, norm_type=0, renorm=0, bias=False,
              dtype=torch.float32, seed=0))
@example(dict(T=1, E=2, k=1, k_group=1, group_count=1, group_select_mode=0, norm_type=1, renorm=0, bias=False,
              dtype=torch.float32, seed=0))
@example(dict(T=17, E=256, k=8, k_group=4, group_count=8, group_select_mode=1, norm_type=1, renorm=0, bias=True,
              dtype=torch.bfloat16, seed=3))
def test_hypothesis_vs_independent(case):
    c = dict(case)
    g = torch.Generator().manual_seed(c.pop("seed"))
    T, E, dtype = c.pop("T"), c.pop("E"), c.pop("dtype")
    x = (2 * torch.randn(T, E, generator=g)).to(dtype)
    bias = 0.3 * torch.randn(E, generator=g) if c.pop("bias") else None
    kw = dict(c, bias=bias, routed_scaling_factor=2.5)
    y, idx, _ = torch.ops.ds.moe_gating_top_k(x, **kw)
    w64, ids64, _, b64 = gate64(x, **kw)
    assert_same_choice(idx, ids64, b64)
    check_row_invariants(y, idx, E, c["k"])
    if T:
        same = (idx.long() == ids64).all(1)
        assert_close(y[same], w64[same].to(dtype), "fp32" if dtype == torch.float32 else "bf16")


# ----------------------------------------------------------------------------------------------
# validation and registration
# ----------------------------------------------------------------------------------------------
def test_errors_name_the_argument():
    x = torch.randn(2, 256)
    cases = [
        (dict(k=0), "k must be"), (dict(k=129, k_group=4, group_count=8), "k must be"),
        (dict(k=8, group_count=7), "group_count"), (dict(k=8, group_count=8, k_group=9), "k_group"),
        (dict(k=8, group_select_mode=2), "group_select_mode"), (dict(k=8, norm_type=2), "norm_type"),
        (dict(k=8, renorm=3), "renorm"), (dict(k=8, bias=torch.zeros(255)), "bias"),
        (dict(k=8, bias=torch.zeros(256, dtype=torch.float16)), "bias"), (dict(k=8, eps=-1.0), "eps"),
        (dict(k=8, routed_scaling_factor=float("inf")), "routed_scaling_factor"),
    ]
    for kw, msg in cases:
        with pytest.raises((ValueError, TypeError), match=msg):
            ops.moe_gating.moe_gating_top_k(x, **kw)
    with pytest.raises(ValueError, match="x must have 2 dimensions"):
        ops.moe_gating.moe_gating_top_k(torch.randn(256), 8)
    with pytest.raises(ValueError, match="experts per group"):
        ops.moe_gating.moe_gating_top_k(torch.randn(2, 8), 1, group_count=8, group_select_mode=1)
    with pytest.raises(ValueError, match="k_group"):
        torch.ops.ds.moe_gating_top_k(x, 8, group_count=8, k_group=0)
    # a scalar that is not a number is a TypeError, as for amla's softmax_scale and the epsilons (one check,
    # _library.check_finite_float)
    for kw in (dict(routed_scaling_factor="2.5"), dict(eps=None), dict(routed_scaling_factor=True)):
        with pytest.raises(TypeError, match=f"{next(iter(kw))} must be a real number"):
            ops.moe_gating.moe_gating_top_k(x, 8, **kw)
    with pytest.raises(ValueError, match="eps must be finite"):
        ops.moe_gating.moe_gating_top_k(x, 8, eps=float("inf"))


def _cases(gen):
    x = torch.randn(5, 256, generator=gen)
    return [((x, 8), dict(bias=0.1 * torch.randn(256, generator=gen), k_group=4, group_count=8, group_select_mode=1,
                          norm_type=1, routed_scaling_factor=2.5)),
            ((x.to(torch.bfloat16), 4), dict(out_flag=True)),
            ((x[:, :64], 3), {})]


def test_R1_opcheck(gen):
    for args, kwargs in _cases(gen):
        torch.library.opcheck(torch.ops.ds.moe_gating_top_k.default, args, kwargs)


def test_R2_torch_compile_fullgraph(gen):
    torch._dynamo.reset()
    f = torch.compile(lambda *a, **k: ops.moe_gating.moe_gating_top_k(*a, **k), fullgraph=True, backend="aot_eager")
    for args, kwargs in _cases(gen):
        for got, want in zip(f(*args, **kwargs), ops.moe_gating.moe_gating_top_k(*args, **kwargs)):
            assert torch.equal(got, want)


def test_flops_bytes_and_spec(gen):
    from torch.utils.flop_counter import FlopCounterMode
    spec = ops.SPECS["moe_gating_top_k"]
    assert set(spec.shapes) == {f"deepseek_v3_T{T}" for T in (1, 16, 64, 256, 4096, 16384)}   # decode + prefill 4K/16K
    kw = spec.make_inputs(spec.shapes["deepseek_v3_T16"], dtype=torch.float32, device="cpu", generator=gen)
    y, idx, _ = ops.moe_gating.moe_gating_top_k(**kw)
    assert y.shape == (16, 8) and kw["routed_scaling_factor"] == 2.5
    assert spec.bytes(**kw) == 16 * 256 * 4 + 256 * 4 + 16 * 8 * 8 + 16 * 256 * 4
    with FlopCounterMode(display=False) as fc:
        torch.ops.ds.moe_gating_top_k(**kw)
    assert fc.get_total_flops() == spec.flops(**kw) > 0
    k = ops.moe_gating.moe_gating_top_k.kernels
    assert [(x.backend, x.module, x.attr) for x in k] == [("triton", "ops.triton.moe_gating", "moe_gating_top_k"),
                                                          ("ascendc", "ops._ascendc", "moe_gating_top_k")]


@pytest.mark.parametrize("be", kernel_backends_for("moe_gating_top_k"))
@pytest.mark.parametrize("shape_name,shape", spec_shapes("moe_gating_top_k", {"T": 64}))
def test_spec_inputs_match_the_reference(be, shape_name, shape, gen):
    """The OpSpec's make_inputs for its named shapes (tokens capped at 64), fp32 logits: ids exact, weights and
    norm_out within the fp32 row of the reference."""
    check_against_reference(be, "moe_gating_top_k", shape, torch.float32, gen)


# ----------------------------------------------------------------------------------------------
# kernels (every backend but the reference) on the DeepSeek routing with the field cases together
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("be", kernel_backends_for("moe_gating_top_k"))
def test_kernel_field_cases_G2_G4_G5_G6(be, gen):
    x = torch.randn(8, 256, generator=gen)
    x[0] = float("nan")
    x[1] = float("inf")
    x[2, :128] = float("nan")
    y, idx, _ = run(x, bias=torch.full((256,), -2.0), **DS)           # G2 + G4
    check_row_invariants(y, idx, 256, 8)
    assert (idx[2] >= 128).all() and (y[0] == 0).all()
    y, idx, _ = run(torch.zeros(2, 256), bias=torch.zeros(256), **DS)  # G5
    assert idx.tolist() == [list(range(8))] * 2
    for k in (6, 8):                                                   # G6
        y, _, _ = run(3 * torch.randn(16, 256, generator=gen), bias=0.5 * torch.randn(256, generator=gen), **dict(DS, k=k))
        assert (y.double().sum(-1) - 2.5).abs().max() <= 2.5 * k * 2 ** -23
