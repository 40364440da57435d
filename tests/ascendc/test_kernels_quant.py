"""dynamic_quant and rms_norm_dynamic_quant as Ascend C kernels on the CPU twin, against the reference: fresh random
data, outputs poisoned before the kernel runs (ops/_ascendc.py), the tolerance table (int8 exact for dynamic_quant;
int8_near_tie for rms_norm_dynamic_quant), field cases Q1-Q6 (shared cases.md) and the streamed H = 18432 row."""
from __future__ import annotations

import pytest
import torch

import ops
from ops import BackendUnavailable
from ops import _ascendc, _library
from ops.tolerances import TOLERANCES
from reference import quant as R
from tests.tolerances import assert_close

_WHY = _ascendc.unavailable_reason("cpu")   # builds the twin library once (cached)
pytestmark = [pytest.mark.ascendc, pytest.mark.skipif(_WHY is not None, reason=str(_WHY))]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def _dq(x, s=None):
    with ops.backend("ascendc"):
        return ops.quant.dynamic_quant(x, smooth_scales=s)


def _rms(x, g, **kw):
    with ops.backend("ascendc"):
        return ops.quant.rms_norm_dynamic_quant(x, g, **kw)


def _same_scale(out, ref):
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    assert torch.equal(torch.nan_to_num(out), torch.nan_to_num(ref))


def _near_tie(q, ref_q):
    """int8_near_tie: ±1 LSB at no more than max_frac of the elements."""
    tol = TOLERANCES["int8_near_tie"]
    d = (q.long() - ref_q.long()).abs()
    assert int(d.max()) <= tol["lsb"] if d.numel() else True
    assert int((d > 0).sum()) <= max(1, tol["max_frac"] * d.numel())


def test_ascendc_backend_runs_the_twin_and_auto_on_cpu_stays_reference(gen):
    x = torch.randn(3, 64, generator=gen)
    op = _library.OPS["dynamic_quant"]
    with ops.backend("ascendc"):
        assert op.select((x,), {})[0] == "ascendc"
    with ops.backend("auto"):
        assert op.select((x,), {})[0] != "ascendc"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("smooth", [False, True])
@pytest.mark.parametrize("H", [1, 33, 1368, 7168])
def test_dynamic_quant_is_bit_exact(dtype, smooth, H, gen):
    x = (3 * torch.randn(5, H, generator=gen)).to(dtype)
    s = (0.25 + torch.rand(H, generator=gen)) if smooth else None
    q, sc = _dq(x, s)
    rq, rs = R.dynamic_quant(x, smooth_scales=s)
    assert_close(q, rq, "int8", name="x_int8")
    assert torch.equal(sc, rs)


@pytest.mark.parametrize("M", [0, 1, 2, 15, 16, 17, 41])
def test_Q1_token_counts(M, gen):
    x = torch.randn(M, 96, generator=gen).to(torch.bfloat16)
    q, sc = _dq(x)
    rq, rs = R.dynamic_quant(x)
    assert q.shape == (M, 96) and sc.shape == (M,)
    assert torch.equal(q, rq) and torch.equal(sc, rs)


@pytest.mark.parametrize("K", [1368, 2112, 576])
def test_Q2_widths_not_multiple_of_tiles(K, gen):
    x = torch.randn(3, K, generator=gen)
    assert torch.equal(_dq(x)[0], R.dynamic_quant(x)[0])


def test_Q3_Q5_zero_row_and_negative_absmax(gen):
    x = torch.randn(4, 200, generator=gen)
    x[1] = 0
    x[2, 17] = -50.0
    q, sc = _dq(x)
    assert sc[1] == 0 and (q[1] == 0).all()
    assert q[2, 17] == -127 and (q >= -127).all()
    assert torch.equal(q, R.dynamic_quant(x)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_Q4_exact_ties_round_half_to_even(dtype):
    s = 0.5
    x = torch.zeros(1, 64)
    x[0, :4] = torch.tensor([127 * s, 0.5 * s, 1.5 * s, -2.5 * s])
    q, sc = _dq(x.to(dtype))
    assert sc.item() == s and q[0, :4].tolist() == [127, 0, 2, -2]


def test_Q6_zero_tokens():
    q, sc = _dq(torch.empty(0, 7168, dtype=torch.bfloat16))
    assert q.shape == (0, 7168) and sc.shape == (0,)
    q, sc, ro = _rms(torch.empty(2, 0, 64), torch.ones(64))
    assert q.shape == (2, 0, 64) and sc.shape == (2, 0) and ro.shape == (2, 0, 64)


def test_nan_and_inf_rows_zero_that_row_only(gen):
    x = torch.randn(5, 300, generator=gen)
    x[1, 7] = float("nan")
    x[3, 299] = float("inf")
    q, sc = _dq(x)
    rq, rs = R.dynamic_quant(x)
    assert torch.isnan(sc[1]) and sc[3] == float("inf")
    assert torch.equal(q, rq)
    _same_scale(sc, rs)


def test_leading_axes_and_noncontiguous(gen):
    x = torch.randn(2, 3, 160, generator=gen)[..., :150]
    q, sc = _dq(x)
    rq, rs = R.dynamic_quant(x)
    assert torch.equal(q, rq) and torch.equal(sc, rs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("residual,smooth", [(False, False), (True, True), (True, False), (False, True)])
@pytest.mark.parametrize("H", [64, 1000, 7168])
def test_rms_norm_dynamic_quant(dtype, residual, smooth, H, gen):
    x = torch.randn(5, H, generator=gen).to(dtype)
    r = torch.randn(5, H, generator=gen).to(dtype) if residual else None
    g = (0.5 + torch.rand(H, generator=gen)).to(dtype)
    s = (0.5 + torch.rand(H, generator=gen)) if smooth else None
    q, sc, ro = _rms(x, g, epsilon=1e-6, residual=r, smooth_scales=s)
    rq, rs, rro = R.rms_norm_dynamic_quant(x, g, epsilon=1e-6, residual=r, smooth_scales=s)
    _near_tie(q, rq)
    assert_close(sc, rs, "fp32", name="scale")
    assert torch.equal(ro, rro)


@pytest.mark.slow
def test_H18432_streams_through_ub(gen):
    """18432 does not fit as a resident rms row: the kernel streams it in chunks, three passes over GM."""
    H = 18432
    x = torch.randn(3, H, generator=gen).to(torch.bfloat16)
    r = torch.randn(3, H, generator=gen).to(torch.bfloat16)
    g = 0.5 + torch.rand(H, generator=gen)
    s = 0.5 + torch.rand(H, generator=gen)
    assert ops._ascendc.quant_tiling(3, H, rms=True, residual=True)["resident"] == 0
    q, sc, ro = _rms(x, g, residual=r, smooth_scales=s)
    rq, rs, rro = R.rms_norm_dynamic_quant(x, g, epsilon=1e-6, residual=r, smooth_scales=s)
    _near_tie(q, rq)
    assert_close(sc, rs, "fp32", name="scale")
    assert torch.equal(ro, rro)
    q, sc = _dq(x, s)
    assert torch.equal((q, sc)[0], R.dynamic_quant(x, smooth_scales=s)[0])


def test_rms_nan_row_isolated(gen):
    x = torch.randn(3, 128, generator=gen)
    x[1, 5] = float("nan")
    q, sc, ro = _rms(x, torch.ones(128))
    rq, rs, rro = R.rms_norm_dynamic_quant(x, torch.ones(128))
    assert torch.isnan(sc[1]) and (q[1] == 0).all()
    assert torch.equal(q[0], rq[0]) and torch.equal(q[2], rq[2])
    assert torch.equal(torch.isnan(ro), torch.isnan(rro))


def test_untileable_H_is_backend_unavailable_naming_H_before_anything_runs(gen):
    """H the kernel cannot tile is valid input (the reference takes it): forced ascendc raises BackendUnavailable
    naming H, and the kernel's supports() gives the reason so that auto falls back. It used to be a ValueError."""
    x, g, s = torch.randn(2, 30000, generator=gen), torch.ones(30000), torch.ones(30000)
    with pytest.raises(BackendUnavailable, match=r"H \(x.shape\[-1\]\) = 30000"):
        _rms(x, g, smooth_scales=s)
    with pytest.raises(BackendUnavailable, match=r"H \(x.shape\[-1\]\) = 60000"):
        _dq(torch.randn(2, 60000, generator=gen), torch.ones(60000))
    asc = next(k for k in _library.OPS["rms_norm_dynamic_quant"].kernels if k.backend == "ascendc")
    assert "30000" in asc.supports(x, g, smooth_scales=s)
    assert asc.supports(x, g) is None and asc.supports(x[:0], g, smooth_scales=s) is None   # fits / nothing launched


def test_modeled_reports_a_labelled_modeled_time(gen):
    """ops._ascendc.modeled (the perf report's hook): a modeled 910B time, per-pipe busy times, the busiest pipe."""
    inputs = ops.quant.SPEC_DYNAMIC_QUANT.make_inputs({"T": 8, "K": 512}, generator=gen)
    m = ops._ascendc.modeled("dynamic_quant", inputs)
    assert m["label"] == "modeled 910B" and m["time_us"] > 0
    assert m["bound"] == max(m["pipes"], key=m["pipes"].get) and {"V", "MTE2", "MTE3"} <= set(m["pipes"])
    with pytest.raises(KeyError, match="no Ascend C kernel"):
        ops._ascendc.modeled("amla", {})
