"""Triton kernel of ds::moe_gating_top_k vs reference/moe_gating.py (and independent checks).

Runs under TRITON_INTERPRET=1 on the CPU with small T, through ``ops.backend("triton")``; both config
tables ("ascend": grid capped with a loop inside; "cuda": forced) are exercised. Output buffers are
poisoned (NaN / INT_MIN) so an unwritten element fails. ids must match the reference exactly, weights
to the fp32 / fp16 tolerance, norm_out to fp32. Field cases G1–G6 (docs/field_cases.md) are named in the
test names. bf16 logits are checked on the H200 (the interpreter rounds fp32 → bf16 toward zero).
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings, strategies as st

import ops
from reference import moe_gating as RM
from tests.conftest import requires_triton
from tests.tolerances import assert_close, poisoned_empty

pytestmark = [requires_triton, pytest.mark.interpreter]

MG = pytest.importorskip("ops.triton.moe_gating")

DS = dict(k=8, k_group=4, group_count=8, group_select_mode=1, renorm=0, norm_type=1, routed_scaling_factor=2.5, eps=1e-20)

@pytest.fixture(autouse=True)
def _poison_and_triton(monkeypatch):
    monkeypatch.setattr(torch, "empty", poisoned_empty)
    with ops.backend("triton"):
        yield


_TABLE: dict = {}   # the launch table (and config override) of the running test: set by the ``table`` fixture


@pytest.fixture(params=["ascend", "cuda", "cuda_packed"])
def table(request):
    """The config table the launcher uses. "cuda_packed": the cuda table with ``packed`` forced on (one int64 max
    per selection round instead of an fp32 max then an int min; the same ids and weights bit for bit)."""
    key, _, variant = request.param.partition("_")
    _TABLE.update(backend_key=key, config={"packed": variant == "packed"} if variant else None)
    yield request.param
    _TABLE.clear()


def _gate(x, **kw):
    kw = {**DS, **kw}
    k = kw.pop("k")
    if _TABLE:
        return MG.moe_gating_top_k_config(x, k, **_TABLE, **kw)
    return ops.moe_gating.moe_gating_top_k(x, k, **kw)


def _check(x, **kw):
    """Kernel vs reference: ids exact, weights and norm_out to tolerance; ids distinct, in range; y finite."""
    kw = {**DS, **kw}
    y, idx, n = _gate(x, **kw)
    k = kw.pop("k")
    ry, ridx, rn = RM.moe_gating_top_k(x, k, **kw)
    T, E = x.shape
    assert y.shape == (T, k) and y.dtype == x.dtype and idx.dtype == torch.int32 and n.shape == (T, E)
    assert torch.equal(idx, ridx), f"expert ids differ:\n{idx}\n{ridx}"
    if T:
        assert ((idx >= 0) & (idx < E)).all()
        assert all(len(set(r)) == k for r in idx.tolist()), "ids must be distinct per row"
        assert torch.isfinite(y).all()
        assert_close(y, ry, "fp32" if x.dtype == torch.float32 else "fp16", name="y")
        fin = torch.isfinite(rn)
        assert torch.equal(fin, torch.isfinite(n)), "norm_out NaN positions differ"
        assert_close(n[fin], rn[fin], "fp32", name="norm_out")
    return y, idx, n


@pytest.mark.parametrize("T", [1, 3, 17, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_deepseek_v3_routing(T, dtype, table, gen):
    x = (2 * torch.randn(T, 256, generator=gen)).to(dtype)
    _check(x, bias=0.5 * torch.randn(256, generator=gen))


def test_bias_in_x_dtype_and_no_bias(gen):
    x = torch.randn(5, 256, generator=gen).half()
    _check(x, bias=(0.1 * torch.randn(256, generator=gen)).half())
    _check(x, bias=None)


def test_G1_large_bias_chooses_weights_stay_unbiased(table, gen):
    x = torch.randn(6, 256, generator=gen)
    b = torch.where(torch.rand(256, generator=gen) < 0.5, -0.5, 0.5)
    y, idx, _ = _check(x, bias=b)
    s = torch.sigmoid(x.double()).gather(1, idx.long())
    torch.testing.assert_close(y.double(), s / s.sum(1, keepdim=True) * 2.5, rtol=1e-5, atol=0)


def test_G2_all_negative_biased_scores_never_pick_dropped_groups(table, gen):
    x = torch.randn(8, 256, generator=gen)
    y, idx, _ = _check(x, bias=torch.full((256,), -2.0))
    b = torch.sigmoid(x) - 2.0
    g = b.view(8, 8, 32).topk(2, dim=-1).values.sum(-1)
    kept = g.topk(4, dim=-1).indices
    for row in range(8):
        assert set((idx[row] // 32).tolist()) <= set(kept[row].tolist())


def test_G3_group_top2_sum_differs_from_group_max(table):
    """Group 0 has the single largest score but a weak second; groups 1–4 have two good ones."""
    x = torch.full((1, 256), -6.0)
    x[0, 0] = 6.0                                  # group 0: max 0.9975, top-2 sum ≈ 1.0
    for g in range(1, 5):
        x[0, 32 * g: 32 * g + 2] = 3.0             # groups 1..4: max 0.953, top-2 sum 1.905
    x[0, 32 * 5] = 5.0                             # group 5: max 0.993, top-2 sum ≈ 0.996
    _, idx1, _ = _check(x, bias=torch.zeros(256), group_select_mode=1)
    assert set((idx1[0] // 32).tolist()) <= {1, 2, 3, 4}
    _, idx0, _ = _check(x, bias=torch.zeros(256), group_select_mode=0)
    assert {0, 5} <= set((idx0[0] // 32).tolist())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_G4_nan_inf_rows_give_distinct_ids_and_finite_weights(dtype, table, gen):
    x = torch.randn(6, 256, generator=gen)
    x[0] = float("nan")
    x[1] = float("inf")
    x[2, :128] = float("nan")
    x[3, ::2] = float("nan")
    x[4] = float("-inf")
    x[5, 40:] = float("nan")                       # only 40 finite experts: 1.25 groups
    y, idx, n = _check(x.to(dtype), bias=0.1 * torch.randn(256, generator=gen))
    assert (idx[2] >= 128).all(), "a half-NaN row routes among its finite experts"


@pytest.mark.parametrize("norm_type,renorm", [(1, 0), (0, 1)])
def test_G4_eps_zero_and_a_zero_weight_sum_give_zero_weights(norm_type, renorm, table):
    # an audit finding: eps = 0 is accepted; a row whose chosen unbiased weights sum to 0 (finite logits of -200:
    # sigmoid underflows to 0; NaN; -inf) gave 0/0 = NaN weights in both backends
    x = torch.tensor([[-200.0] * 8, [float("nan")] * 8, [float("-inf")] * 8])
    y, idx, _ = _check(x, k=2, k_group=1, group_count=1, group_select_mode=0, norm_type=norm_type, renorm=renorm,
                       eps=0.0, bias=None)
    if norm_type == 1:
        assert (y == 0).all()


def test_G4_softmax_nan_and_inf_rows(table, gen):
    x = torch.randn(3, 64, generator=gen)
    x[0, 5] = float("nan")
    x[1, 7] = float("inf")
    y, idx, _ = _check(x, k=6, k_group=1, group_count=1, group_select_mode=0, norm_type=0, routed_scaling_factor=1.0,
                       bias=None)
    assert (y[:2] == 0).all()


def test_G5_all_equal_logits_go_to_the_lowest_ids(table):
    y, idx, _ = _check(torch.zeros(3, 256), bias=torch.zeros(256))
    assert idx.tolist() == [list(range(8))] * 3
    torch.testing.assert_close(y, torch.full((3, 8), 2.5 / 8))


def test_ties_between_groups_and_within_a_group_go_low(table):
    x = torch.full((1, 256), -5.0)
    for g in (6, 2, 5, 3, 7):                      # five groups with identical top-2 sums → keep 2, 3, 5, 6
        x[0, 32 * g + 4] = 1.0
        x[0, 32 * g + 9] = 1.0
    _, idx, _ = _check(x, bias=torch.zeros(256))
    assert idx[0].tolist() == [68, 73, 100, 105, 164, 169, 196, 201]


@pytest.mark.parametrize("k", [6, 8])
def test_G6_weights_sum_to_the_scaling_factor_once(k, table, gen):
    x = torch.randn(16, 256, generator=gen)
    y, _, _ = _check(x, k=k, bias=0.3 * torch.randn(256, generator=gen))
    torch.testing.assert_close(y.sum(1), torch.full((16,), 2.5), rtol=2e-6, atol=0)
    y1, _, _ = _check(x, k=k, bias=0.3 * torch.randn(256, generator=gen), routed_scaling_factor=1.0)
    torch.testing.assert_close(y1.sum(1), torch.ones(16), rtol=2e-6, atol=0)


@pytest.mark.parametrize("renorm", [0, 1])
def test_softmax_flat_router(renorm, table, gen):
    _check(torch.randn(9, 64, generator=gen), k=6, k_group=1, group_count=1, group_select_mode=0, norm_type=0,
           renorm=renorm, routed_scaling_factor=1.5, bias=None)


@pytest.mark.parametrize("E,G,KG,k,mode", [(160, 5, 2, 5, 0), (72, 8, 3, 4, 1), (512, 16, 4, 8, 1), (384, 1, 1, 6, 0)])
def test_other_expert_layouts(E, G, KG, k, mode, table, gen):
    _check(torch.randn(5, E, generator=gen), k=k, k_group=KG, group_count=G, group_select_mode=mode,
           bias=0.2 * torch.randn(E, generator=gen))


def test_zero_tokens_and_strided_logits(gen):
    y, idx, n = _gate(torch.empty(0, 256))
    assert y.shape == (0, 8) and idx.shape == (0, 8) and n.shape == (0, 256)
    wide = torch.randn(4, 300, generator=gen)
    _check(wide[:, 10:266], bias=torch.zeros(256))          # row stride 300
    _check(wide[:, 10:266].t().contiguous().t(), bias=torch.zeros(256))  # column-major


@settings(max_examples=20)
@given(T=st.integers(1, 24), G=st.sampled_from([1, 2, 4, 8]), per=st.integers(2, 33), data=st.data(),
       seed=st.integers(0, 2**16))
@example(T=1, G=8, per=32, data=None, seed=0)
def test_hypothesis_routing(T, G, per, data, seed):
    g = torch.Generator().manual_seed(seed)
    E = G * per
    if data is None:
        KG, k, mode, norm = 4, 8, 1, 1
    else:
        KG = data.draw(st.integers(1, G))
        k = data.draw(st.integers(1, min(KG * per, 16)))
        mode = data.draw(st.integers(0, 1))
        norm = data.draw(st.integers(0, 1))
    x = torch.randn(T, E, generator=g) * 3
    x[x.abs() > 2.5] = 0.0                                    # plenty of exact ties
    with ops.backend("triton"):
        _check(x, k=k, k_group=KG, group_count=G, group_select_mode=mode, norm_type=norm,
               bias=(torch.randint(-2, 3, (E,), generator=g) * 0.25))


def test_supports_reason_and_compile_cases():
    x = torch.randn(2, 256)
    assert MG.supports_reason(x, 8, k_group=4, group_count=8) is None
    assert "pads to more than" in MG.supports_reason(torch.randn(2, 2048), 8)
    assert "2-D" in MG.supports_reason(torch.randn(256), 8)
    # k_group > group_count: rounds with no candidate left would emit the out-of-range id E (an audit finding)
    assert "k_group must be in [1, group_count = 2], got 3" in MG.supports_reason(torch.randn(2, 8), 4, k_group=3,
                                                                                  group_count=2)
    assert "k_group" in MG.supports_reason(torch.randn(2, 8), 1, k_group=0, group_count=2)
    cases = MG.ascend_compile_cases()
    assert len({c["name"] for c in cases}) == len(cases) >= 4
    for c in cases:
        params = c["fn"].arg_names
        assert list(c["signature"]) == params
        assert sorted(p for p in params if c["signature"][p] == "constexpr") == sorted(c["constexprs"])


def test_packed_selection_by_logit_width_and_config_errors():
    """Config ``packed``: "16bit" packs the selection key for 2-byte logits only, true / false force it; any other
    value is a ValueError naming the key."""
    plan = dict(k_group=4, group_count=8, group_select_mode=1, norm_type=1, has_bias=True)
    for key in ("cuda", "ascend"):
        for x_bytes, want in ((2, True), (4, False)):
            _, kw = MG.launch_plan(8, 256, 8, **plan, backend_key=key, config={"packed": "16bit"}, x_bytes=x_bytes)
            assert kw.get("PACKED", False) is want
        _, kw = MG.launch_plan(8, 256, 8, **plan, backend_key=key, config={"packed": True}, x_bytes=4)
        assert kw["PACKED"] is True
        _, kw = MG.launch_plan(8, 256, 8, **plan, backend_key=key, config={"packed": False}, x_bytes=2)
        assert "PACKED" not in kw
    with pytest.raises(ValueError, match="packed must be"):
        MG.launch_plan(8, 256, 8, **plan, backend_key="cuda", config={"packed": "yes"}, x_bytes=2)
