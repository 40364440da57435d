"""moe_gating_top_k as the Ascend C kernel on the CPU twin against the reference: fresh random logits, outputs
poisoned before the kernel runs (ops/_ascendc.py), the fp32 tolerance row for weights and norm_out, exact expert ids,
field cases G1-G6 (shared cases.md), sigmoid and softmax, E from 64 to 384 and the group counts the op accepts."""
from __future__ import annotations

import pytest
import torch

import ops
from ops import BackendUnavailable, _ascendc, _library as L
from reference import moe_gating as M
from tests.tolerances import assert_close

_WHY = _ascendc.unavailable_reason("cpu")   # builds the twin library once (cached)
pytestmark = [pytest.mark.ascendc, pytest.mark.skipif(_WHY is not None, reason=str(_WHY))]


def _run(x, k, **kw):
    with ops.backend("ascendc"):
        return ops.moe_gating.moe_gating_top_k(x, k, **kw)


def _check(x, k, **kw):
    y, idx, norm = _run(x, k, **kw)
    ry, ridx, rnorm = M.moe_gating_top_k(x, k, **kw)
    assert torch.equal(idx, ridx)
    assert_close(y.float(), ry.float(), "fp32", name="y")
    assert torch.equal(torch.isnan(norm), torch.isnan(rnorm))
    assert_close(torch.nan_to_num(norm), torch.nan_to_num(rnorm), "fp32", name="norm_out")
    return y, idx


@pytest.mark.parametrize("E,G,kg,k", [(64, 1, 1, 6), (64, 8, 4, 8), (160, 10, 3, 8), (256, 8, 4, 8), (256, 1, 1, 8),
                                      (384, 12, 4, 8), (384, 384, 8, 8), (72, 9, 2, 3)])
@pytest.mark.parametrize("norm_type,renorm", [(1, 0), (0, 0), (0, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_reference(E, G, kg, k, norm_type, renorm, dtype, gen):
    x = (2 * torch.randn(9, E, generator=gen)).to(dtype)
    b = 0.1 * torch.randn(E, generator=gen)
    for mode in ((0, 1) if E // G >= 2 else (0,)):
        _check(x, k, bias=b, k_group=kg, group_count=G, group_select_mode=mode, renorm=renorm, norm_type=norm_type,
               routed_scaling_factor=2.5)


def test_no_bias_and_fp16(gen):
    x = torch.randn(41, 256, generator=gen).to(torch.float16)
    _check(x, 8, k_group=4, group_count=8, group_select_mode=1, norm_type=1)


def test_G1_large_bias_chooses_but_does_not_weigh(gen):
    x = torch.randn(6, 256, generator=gen)
    b = 0.5 * torch.sign(torch.randn(256, generator=gen))
    y, idx = _check(x, 8, bias=b, k_group=4, group_count=8, group_select_mode=1, norm_type=1,
                    routed_scaling_factor=2.5)
    s = torch.sigmoid(x).gather(1, idx.long())
    assert_close(y, 2.5 * s / s.sum(-1, keepdim=True), "fp32")


def test_G2_all_negative_biased_scores_never_pick_dropped_groups(gen):
    x = torch.randn(8, 256, generator=gen)
    y, idx = _check(x, 8, bias=torch.full((256,), -2.0), k_group=4, group_count=8, group_select_mode=1, norm_type=1)
    gs = (torch.sigmoid(x) - 2).reshape(8, 8, 32).sort(-1, descending=True).values[..., :2].sum(-1)
    kept = torch.sort(gs, dim=-1, descending=True, stable=True).indices[:, :4]
    for t in range(8):
        assert set((idx[t] // 32).tolist()) <= set(kept[t].tolist())


@pytest.mark.parametrize("mode", [0, 1])
def test_G3_top2_sum_vs_max(mode):
    x = torch.full((1, 16), -5.0)
    x[0, 0] = 3.0             # group 0: max 3, top-2 sum 3 + (-5)
    x[0, 4:6] = 2.0           # group 1: max 2, top-2 sum 4
    _check(x, 2, k_group=1, group_count=4, group_select_mode=mode, norm_type=1)


@pytest.mark.parametrize("norm_type", [0, 1])
def test_G4_nan_inf_rows_give_distinct_ids_and_finite_weights(norm_type, gen):
    x = torch.randn(4, 256, generator=gen)
    x[0] = float("nan")
    x[1] = float("inf")
    x[2, ::2] = float("nan")
    y, idx, _ = _run(x, 8, bias=0.1 * torch.randn(256, generator=gen), k_group=4, group_count=8,
                     group_select_mode=1, norm_type=norm_type, routed_scaling_factor=2.5)
    assert torch.isfinite(y).all()
    for t in range(4):
        assert len(set(idx[t].tolist())) == 8 and ((idx[t] >= 0) & (idx[t] < 256)).all()


def test_G4_matches_reference_exactly_on_bad_rows(gen):
    x = torch.randn(4, 256, generator=gen)
    x[0] = float("nan")
    x[1] = float("inf")
    x[2, ::2] = float("nan")
    # groups scored by ReduceMax (8 x 32), one group (G = 1), groups too narrow for it (64 x 4: the scalar scan)
    for nt, G, kg in ((0, 8, 4), (1, 8, 4), (1, 1, 1), (0, 1, 1), (1, 64, 8)):
        kw = dict(k_group=kg, group_count=G, group_select_mode=1, norm_type=nt)
        y, idx, _ = _run(x, 8, **kw)
        ry, ridx, _ = M.moe_gating_top_k(x, 8, **kw)
        assert torch.equal(idx, ridx)
        assert_close(y, ry, "fp32")


def test_G5_all_equal_logits_go_to_lowest_groups_and_ids():
    y, idx = _check(torch.zeros(3, 256), 8, bias=torch.zeros(256), k_group=4, group_count=8, group_select_mode=1,
                    norm_type=1)
    assert idx.tolist() == [list(range(8))] * 3


@pytest.mark.parametrize("k", [6, 8])
def test_G6_weights_sum_to_routed_scaling_factor_once(k, gen):
    y, _ = _check(torch.randn(16, 256, generator=gen), k, bias=0.1 * torch.randn(256, generator=gen), k_group=4,
                  group_count=8, group_select_mode=1, norm_type=1, routed_scaling_factor=2.5)
    assert torch.allclose(y.sum(-1), torch.full((16,), 2.5), rtol=1e-5)


def test_zero_tokens():
    y, idx, norm = _run(torch.empty(0, 256), 8, k_group=4, group_count=8, norm_type=1)
    assert y.shape == (0, 8) and idx.shape == (0, 8) and norm.shape == (0, 256)



def test_more_experts_than_the_kernel_takes_is_backend_unavailable(gen):
    """E = 2048 is valid input (the reference takes it) beyond the kernel's 1024: forced ascendc raises
    BackendUnavailable naming E, and the kernel's supports() gives the reason so that auto falls back. It used to be a
    ValueError from the tiling, which under auto would have stopped the call instead of falling back."""
    x = torch.randn(2, 2048, generator=gen)
    with pytest.raises(BackendUnavailable, match=r"E \(x.shape\[1\]\) = 2048"):
        _run(x, 8, group_count=8, k_group=4, norm_type=1)
    asc = next(k for k in L.OPS["moe_gating_top_k"].kernels if k.backend == "ascendc")
    assert "2048" in asc.supports(x, 8, group_count=8, k_group=4, norm_type=1)
    assert asc.supports(x[:, :256], 8, group_count=8, k_group=4, norm_type=1) is None
