"""ds::dynamic_quant, ds::rms_norm_dynamic_quant, ds::quant_matmul and the offline weight helpers.

Every backend that can run here (tests/backends.py: the reference; Triton under the interpreter on CPU or on
CUDA; the Ascend C twin when built) is checked against independent numpy fp64 / int64 computations that round to
fp32 only at the rounding points the spec names (fp64 has ≥ 2·24+2 bits, so rounding an fp64 +,−,×,/ of fp32
values to fp32 gives the correctly rounded fp32 result: the emulation is exact, not approximate); outputs start
poisoned (NaN / INT_MIN). The reference must match bit for bit; a kernel within the tolerance table
(ops/tolerances.py: int8 exact, rms_norm_dynamic_quant ±1 LSB at near-ties). Field cases Q1–Q6 (cases.md) and
R1/R2 (opcheck, torch.compile) are named in the test names.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, strategies as st

import ops
from ops import quant as Q
from reference import quant as R
from tests.backends import backends_for, kernel_backends_for
from tests.spec_checks import check_against_reference, spec_shapes
from tests.tolerances import assert_close, poisoned_empty

F32 = np.float32
DQ, RMS, QMM = (backends_for(n) for n in ("dynamic_quant", "rms_norm_dynamic_quant", "quant_matmul"))


@pytest.fixture(autouse=True)
def _backend(request, monkeypatch):
    """Tests parametrised by ``be`` run on that backend with poisoned outputs; the others on the reference."""
    be = request.getfixturevalue("be") if "be" in request.fixturenames else None
    if be is not None:
        monkeypatch.setattr(torch, "empty", poisoned_empty)
    with be.active() if be is not None else ops.backend("reference"):
        yield


def on(be, *ts):
    """``ts`` on the backend's device (None stays None); one tensor alone is returned as it is."""
    out = [t.to(be.device) if isinstance(t, torch.Tensor) else t for t in ts]
    return out[0] if len(out) == 1 else out


def cpu(*ts):
    out = [t.cpu() for t in ts]
    return out[0] if len(out) == 1 else out


# ----------------------------------------------------------------------------------------------
# independent implementations (numpy)
# ----------------------------------------------------------------------------------------------
def np_quant_rows(y32: np.ndarray):
    """Per-row int8 quant of an fp32 array, in numpy fp64 with fp32 rounding points."""
    y = y32.astype(np.float64)
    amax = np.abs(y).max(axis=-1, keepdims=True) if y.shape[-1] else np.zeros(y.shape[:-1] + (1,))
    scale = (amax / 127.0).astype(F32).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (y / np.where(scale == 0, 1.0, scale)).astype(F32).astype(np.float64)
    t = np.where(np.isnan(t), 0.0, t)
    q = np.clip(np.rint(t), -127, 127).astype(np.int8)
    return q, scale[..., 0].astype(F32), t


def np_dynamic_quant(x: torch.Tensor, s: torch.Tensor | None):
    y = x.double().numpy()
    if s is not None:
        y = (y * s.double().numpy()).astype(F32)  # exact product of two ≤24-bit values, rounded once
    return np_quant_rows(y.astype(F32))


def i64_quant_matmul(x, w, ws, xs, bias=None):
    """int64 accumulate, fp64 epilogue with the spec's fp32 rounding points, returned as fp64."""
    acc = x.long() @ w.long()
    out = acc.double().float().double()                  # int32 → fp32 (RINT)
    out = (out * ws.double()).float().double()
    out = (out * xs.double()[:, None]).float().double()
    if bias is not None:
        out = (out + bias.float().double()).float().double()
    return out, acc


def rand_int8(*shape, gen, lo=-127, hi=127):
    return torch.randint(lo, hi + 1, shape, generator=gen, dtype=torch.int8)


def scales(n, gen):
    return (0.5 + torch.rand(n, generator=gen)) / 127.0


# ----------------------------------------------------------------------------------------------
# dynamic_quant
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("be", DQ)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("smooth", [False, True])
def test_dynamic_quant_matches_numpy_exactly(be, dtype, smooth, gen):
    dtype = be.dtype(dtype)
    x = (3 * torch.randn(37, 1368, generator=gen)).to(dtype)
    s = (0.25 + torch.rand(1368, generator=gen)) if smooth else None
    q, scale = cpu(*ops.quant.dynamic_quant(on(be, x), smooth_scales=on(be, s)))
    q_np, scale_np, _ = np_dynamic_quant(x, s)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32
    assert q.shape == x.shape and scale.shape == x.shape[:-1]
    assert torch.equal(q, torch.from_numpy(q_np))
    assert torch.equal(scale, torch.from_numpy(scale_np))
    # dequantisation error ≤ half a step (plus the fp32 rounding of y / scale)
    y = x.double() * (s.double() if smooth else 1.0)
    err = (q.double() * scale.double()[:, None] - y).abs()
    assert (err <= scale.double()[:, None] * (0.5 + 1e-5)).all()


@pytest.mark.parametrize("be", DQ)
def test_dynamic_quant_leading_axes_and_noncontiguous(be, gen):
    base = on(be, torch.randn(3, 5, 300, generator=gen, dtype=torch.float32).to(be.dtype(torch.bfloat16)))
    x = base[:, :, 10:210]                                  # non-contiguous view, K = 200
    q, scale = torch.ops.ds.dynamic_quant(x)
    qc, sc = torch.ops.ds.dynamic_quant(x.contiguous())
    assert q.shape == (3, 5, 200) and scale.shape == (3, 5)
    assert torch.equal(q, qc) and torch.equal(scale, sc)


@pytest.mark.parametrize("be", DQ)
def test_Q3_all_zero_row_gives_zero_q_and_zero_scale(be, gen):
    x = torch.randn(4, 256, generator=gen).to(be.dtype(torch.bfloat16))
    x[2] = 0
    x, sm = on(be, x, torch.rand(256, generator=gen) + 0.5)
    for q, scale in (ops.quant.dynamic_quant(x), ops.quant.dynamic_quant(x, smooth_scales=sm)):
        assert torch.isfinite(scale).all()
        assert scale[2] == 0 and (q[2] == 0).all()
        assert (scale[[0, 1, 3]] > 0).all()
    # all-zero row through the fused norm: RmsNorm(0) = 0
    q, scale, _ = ops.quant.rms_norm_dynamic_quant(x, on(be, torch.ones(256, dtype=x.dtype)))
    assert scale[2] == 0 and (q[2] == 0).all() and torch.isfinite(scale).all()


@pytest.mark.parametrize("be", DQ)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_Q4_exact_ties_round_half_to_even(be, dtype):
    dtype = be.dtype(dtype)
    s = 2.0 ** -4                                        # scale = amax / 127 = s exactly
    row = torch.zeros(16, dtype=torch.float32)
    row[0] = 127 * s
    vals = [0.5, 1.5, -2.5, 2.5, -0.5, 3.5, -126.5, 126.5]
    row[1:1 + len(vals)] = torch.tensor(vals) * s
    x = row.to(dtype)[None].repeat(2, 1)
    assert torch.equal(x.float()[0], row)                # every value representable in dtype
    x = on(be, x)
    q, scale = cpu(*ops.quant.dynamic_quant(x))
    assert scale[0].item() == s
    assert q[0, 1:1 + len(vals)].tolist() == [0, 2, -2, 2, 0, 4, -126, 126]
    assert q[0, 0] == 127
    # the same ties reached through smooth_scales (x · 2 with the scale doubling)
    q2, scale2 = cpu(*ops.quant.dynamic_quant(x, smooth_scales=on(be, torch.full((16,), 2.0))))
    assert scale2[0].item() == 2 * s and torch.equal(q2, q)


@pytest.mark.parametrize("be", DQ)
def test_Q5_negative_absmax_gives_minus_127_never_minus_128(be, gen):
    x = torch.randn(64, 512, generator=gen)
    x[:, 7] = -10.0 - torch.rand(64, generator=gen)     # the absmax element of each row is negative
    x = on(be, x)
    for dtype in (be.dtype(torch.bfloat16), torch.float32):
        q, _ = ops.quant.dynamic_quant(x.to(dtype))
        assert (q[:, 7] == -127).all()
        assert q.min() >= -127
    q, _, _ = ops.quant.rms_norm_dynamic_quant(x, on(be, torch.ones(512)))
    assert (q[:, 7] == -127).all() and q.min() >= -127


@pytest.mark.parametrize("be", QMM)
def test_Q6_zero_tokens_give_empty_outputs(be):
    K = 1536
    dt = be.dtype(torch.bfloat16)
    x = on(be, torch.zeros(0, K, dtype=dt))
    q, scale = torch.ops.ds.dynamic_quant(x, smooth_scales=on(be, torch.ones(K)))
    assert q.shape == (0, K) and q.dtype == torch.int8 and scale.shape == (0,)
    q, scale, r = torch.ops.ds.rms_norm_dynamic_quant(x, on(be, torch.ones(K)), residual=x.clone())
    assert q.shape == (0, K) and scale.shape == (0,) and r.shape == (0, K) and r.dtype == dt
    out = torch.ops.ds.quant_matmul(*on(be, torch.zeros(0, K, dtype=torch.int8), torch.zeros(K, 576, dtype=torch.int8),
                                        torch.ones(576), torch.zeros(0)), out_dtype=dt)
    assert out.shape == (0, 576) and out.dtype == dt


@pytest.mark.parametrize("be", DQ)
def test_nan_and_inf_rows_zero_that_row_only(be, gen):
    x = torch.randn(5, 128, generator=gen)
    x[1, 3] = float("nan")
    x[3, 5] = float("inf")
    x = on(be, x)
    q, scale = ops.quant.dynamic_quant(x)
    assert torch.isnan(scale[1]) and (q[1] == 0).all()
    assert scale[3] == float("inf") and (q[3] == 0).all()
    clean = [0, 2, 4]
    qc, sc = ops.quant.dynamic_quant(x[clean])
    assert torch.equal(q[clean], qc) and torch.equal(scale[clean], sc)


# ----------------------------------------------------------------------------------------------
# rms_norm_dynamic_quant
# ----------------------------------------------------------------------------------------------
def np_rms_norm_dynamic_quant(x, gamma, eps, residual, smooth):
    s = x.double().numpy()
    if residual is not None:
        s = s + residual.double().numpy()                   # exact in fp64 for these inputs
    s = s.astype(F32).astype(np.float64)                    # the fp32 sum
    n = s / np.sqrt((s * s).mean(-1, keepdims=True) + eps) * gamma.float().double().numpy()
    if smooth is not None:
        n = n * smooth.double().numpy()
    return np_quant_rows(n.astype(F32)), s


@pytest.mark.parametrize("be", RMS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("smooth", [False, True])
def test_rms_norm_dynamic_quant_matches_numpy(be, dtype, residual, smooth, gen):
    T, H = 24, 1536
    dtype = be.dtype(dtype)
    x = torch.randn(T, H, generator=gen).to(dtype)
    r = torch.randn(T, H, generator=gen).to(dtype) if residual else None
    gamma = (0.5 + torch.rand(H, generator=gen)).to(dtype)
    s = (0.5 + torch.rand(H, generator=gen)) if smooth else None
    # an epsilon that matters when smooth is on (1e-6 against mean(x²) ≈ 1 hides where it is added: mutation audit)
    eps = 0.75 if smooth else 1e-6
    q, scale, r_out = cpu(*torch.ops.ds.rms_norm_dynamic_quant(*on(be, x, gamma), epsilon=eps, residual=on(be, r),
                                                               smooth_scales=on(be, s)))
    (q_np, scale_np, t_np), s_np = np_rms_norm_dynamic_quant(x, gamma, eps, r, s)
    # residual_out: the fp32 sum rounded once to x.dtype
    assert r_out.dtype == dtype and r_out.shape == x.shape
    assert torch.equal(r_out, torch.from_numpy(s_np).to(dtype))
    assert r_out.data_ptr() != x.data_ptr()
    # scale: fp32 tolerance (the reference's fp32 mean differs from fp64 in the last bits)
    assert_close(scale, torch.from_numpy(scale_np), "fp32", name="scale")
    # int8: equal except ±1 LSB where fp64 sits within a hair of a rounding tie
    d = (q.long() - torch.from_numpy(q_np).long()).abs()
    assert d.max() <= 1
    near_tie = torch.from_numpy(np.abs(np.abs(t_np - np.floor(t_np)) - 0.5) < 1e-3)
    assert (near_tie | (d == 0)).all()
    assert (d > 0).float().mean() < 1e-3


def test_rms_norm_dynamic_quant_normed_value_not_rounded_to_x_dtype(gen):
    """The normed fp32 value goes straight into the quantiser (as Ascend's fused kernel): it equals
    dynamic_quant of the fp32 RmsNorm, which differs (somewhere) from quantising a bf16-rounded norm."""
    from reference.deepseek import rms_norm
    x = torch.randn(64, 2048, generator=gen).to(torch.bfloat16)
    r = torch.randn(64, 2048, generator=gen).to(torch.bfloat16)
    g = (0.5 + torch.rand(2048, generator=gen)).to(torch.bfloat16)
    q, scale, _ = ops.quant.rms_norm_dynamic_quant(x, g, residual=r)
    n32 = rms_norm(x.float() + r.float(), g, 1e-6)
    q32, s32 = R.quantize_rows(n32)
    assert torch.equal(q, q32) and torch.equal(scale, s32)
    q16, _ = R.quantize_rows(n32.to(torch.bfloat16).float())
    assert not torch.equal(q, q16)


@pytest.mark.parametrize("be", RMS)
def test_rms_norm_dynamic_quant_without_residual_returns_a_copy(be, gen):
    x, g = on(be, torch.randn(3, 64, generator=gen), torch.ones(64))
    _, _, r = ops.quant.rms_norm_dynamic_quant(x, g)
    assert torch.equal(r, x) and r.data_ptr() != x.data_ptr()
    _, _, r = torch.ops.ds.rms_norm_dynamic_quant(x, g)
    assert torch.equal(r, x) and r.data_ptr() != x.data_ptr()


# ----------------------------------------------------------------------------------------------
# quant_matmul
# ----------------------------------------------------------------------------------------------
def check_quant_matmul(x, w, ws, xs, bias=None, out_dtype=torch.bfloat16, op=None, be=None):
    """quant_matmul on backend ``be`` (None: the active one, CPU tensors) against the int64 / fp64 emulation: the
    reference bit for bit (the spec's fp32 epilogue rounded once to out_dtype), a kernel within the tolerance of
    out_dtype."""
    op = op or torch.ops.ds.quant_matmul
    if be is not None:
        out_dtype = be.dtype(out_dtype)
    dev = be.device if be is not None else "cpu"
    out = op(*(t.to(dev) for t in (x, w, ws, xs)), bias=bias.to(dev) if bias is not None else None,
             out_dtype=out_dtype)
    assert out.shape == (x.shape[0], w.shape[1]) and out.dtype == out_dtype and out.is_contiguous()
    out = out.cpu()
    ref64, acc = i64_quant_matmul(x, w, ws, xs, bias)
    if be is None or be.name == "reference":
        assert torch.equal(out, ref64.float().to(out_dtype))
    if out.numel():
        kind = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[out_dtype]
        assert_close(out, ref64, kind if be is not None and be.name != "reference" else
                     "bf16" if out_dtype != torch.float32 else "fp32")
    return out, acc


@pytest.mark.parametrize("be", QMM)
@pytest.mark.parametrize("M", [0, 1, 2, 15, 16, 17])
def test_Q1_token_counts(be, M, gen):
    K, N = 320, 192
    x, w = rand_int8(M, K, gen=gen), rand_int8(K, N, gen=gen)
    check_quant_matmul(x, w, scales(N, gen), scales(M, gen), be=be)
    xq = torch.randn(M, K, generator=gen).to(be.dtype(torch.bfloat16))
    q, s = cpu(*torch.ops.ds.dynamic_quant(on(be, xq)))
    q_np, s_np, _ = np_dynamic_quant(xq, None)
    assert torch.equal(q, torch.from_numpy(q_np)) and torch.equal(s, torch.from_numpy(s_np))


@pytest.mark.parametrize("be", QMM)
@pytest.mark.parametrize("K,N", [(1368, 2112), (1368, 576), (7168, 576)])
def test_Q2_widths_not_multiple_of_tiles(be, K, N, gen):
    M = 5
    x, w = rand_int8(M, K, gen=gen), rand_int8(K, N, gen=gen)
    check_quant_matmul(x, w, scales(N, gen), scales(M, gen), bias=torch.randn(N, generator=gen), be=be)


def test_exact_int32_accumulation_at_the_extremes(gen):
    """All products ±127·127 or 128·128 over K = 4099: partial sums exceed 2^24, the result must still be exact."""
    K = 4099
    x = torch.full((3, K), -128, dtype=torch.int8)
    x[1] = 127
    x[2, ::2] = 127
    w = torch.full((K, 4), -128, dtype=torch.int8)
    w[:, 1] = 127
    w[::3, 2] = -127
    acc = R.int8_matmul_exact(x, w)
    assert torch.equal(acc, x.long() @ w.long())
    assert acc.abs().max() > 2 ** 24
    xr, wr = rand_int8(7, 9000, gen=gen, lo=-128), rand_int8(9000, 33, gen=gen, lo=-128)
    assert torch.equal(R.int8_matmul_exact(xr, wr), xr.long() @ wr.long())


@pytest.mark.parametrize("be", QMM)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("bias_dtype", [None, torch.float32, torch.bfloat16])
def test_quant_matmul_dtypes_and_bias(be, out_dtype, bias_dtype, gen):
    M, K, N = 9, 250, 70
    bias = None if bias_dtype is None else torch.randn(N, generator=gen).to(be.dtype(bias_dtype))
    check_quant_matmul(rand_int8(M, K, gen=gen), rand_int8(K, N, gen=gen), scales(N, gen), scales(M, gen), bias=bias,
                       out_dtype=out_dtype, be=be)


@pytest.mark.parametrize("be", QMM)
def test_quant_matmul_any_weight_strides(be, gen):
    M, K, N = 6, 200, 48
    x, w = on(be, rand_int8(M, K, gen=gen), rand_int8(K, N, gen=gen))
    ws, xs = on(be, scales(N, gen), scales(M, gen))
    od = be.dtype(torch.bfloat16)
    want = torch.ops.ds.quant_matmul(x, w, ws, xs, out_dtype=od)
    wide = on(be, rand_int8(K, 3 * N, gen=gen))
    wide[:, N:2 * N] = w
    step = on(be, rand_int8(2 * K, N, gen=gen))
    step[::2] = w
    views = {
        "k_major (pack_weight cuda)": R.pack_weight(w, "cuda"),
        "transposed [N,K].t()": w.t().contiguous().t(),
        "column slice": wide[:, N:2 * N],
        "row step": step[::2],
        "ascend ND": R.pack_weight(w, "ascend"),
    }
    for name, v in views.items():
        assert torch.equal(v, w), name
        for op in (torch.ops.ds.quant_matmul, ops.quant.quant_matmul):
            assert torch.equal(op(x, v, ws, xs, out_dtype=od), want), name
    # non-contiguous activations too
    xw = on(be, rand_int8(M, 2 * K, gen=gen))
    xw[:, ::2] = x
    assert torch.equal(torch.ops.ds.quant_matmul(xw[:, ::2], w, ws, xs, out_dtype=od), want)


@pytest.mark.parametrize("be", QMM)
def test_w8a8_pipeline_approximates_the_float_gemm(be, gen):
    """dynamic_quant → quant_matmul with a per-channel quantised weight ≈ x @ W (SQNR-style sanity check)."""
    M, K, N = 16, 1024, 256
    x = torch.randn(M, K, generator=gen)
    W = torch.randn(K, N, generator=gen) / K ** 0.5
    wq, ws = R.quantize_weight_per_channel(W)
    xq, xs = ops.quant.dynamic_quant(on(be, x))
    out = ops.quant.quant_matmul(xq, *on(be, wq, ws), xs, out_dtype=torch.float32).cpu()
    ref = x @ W
    sqnr = 10 * math.log10(float((ref ** 2).sum() / ((out - ref) ** 2).sum()))
    assert sqnr > 30, sqnr


# ----------------------------------------------------------------------------------------------
# Hypothesis over shapes (0, 1, tile boundaries ± 1)
# ----------------------------------------------------------------------------------------------
_EDGE = [1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257]


@given(M=st.sampled_from([0, 1, 2, 3, 15, 16, 17, 31, 32, 33, 64, 65]), K=st.sampled_from(_EDGE + [1368]),
       N=st.sampled_from(_EDGE + [576]), bias=st.booleans(), seed=st.integers(0, 2 ** 16))
@example(M=0, K=1, N=1, bias=False, seed=0)
@example(M=17, K=1368, N=576, bias=True, seed=1)
@pytest.mark.parametrize("be", QMM)
def test_quant_matmul_hypothesis(be, M, K, N, bias, seed):
    g = torch.Generator().manual_seed(seed)
    x, w = rand_int8(M, K, gen=g, lo=-128), rand_int8(K, N, gen=g, lo=-128)
    if seed % 2:
        w = R.pack_weight(w, "cuda")
    check_quant_matmul(x, w, scales(N, g), scales(M, g), bias=torch.randn(N, generator=g) if bias else None, be=be)


@given(T=st.sampled_from([0, 1, 2, 7, 16, 17]), K=st.sampled_from(_EDGE + [1368, 2048]), smooth=st.booleans(),
       dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]), seed=st.integers(0, 2 ** 16))
@example(T=1, K=1, smooth=True, dtype=torch.bfloat16, seed=0)
@pytest.mark.parametrize("be", DQ)
def test_dynamic_quant_hypothesis(be, T, K, smooth, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(T, K, generator=g) * 10 ** torch.empty(T, 1).uniform_(-3, 3, generator=g)).to(be.dtype(dtype))
    s = (0.25 + torch.rand(K, generator=g)) if smooth else None
    q, scale = cpu(*torch.ops.ds.dynamic_quant(on(be, x), smooth_scales=on(be, s)))
    q_np, s_np, _ = np_dynamic_quant(x, s)
    assert torch.equal(q, torch.from_numpy(q_np)) and torch.equal(scale, torch.from_numpy(s_np))
    if T and K:
        assert (q.abs().amax(-1) == 127).all()           # the absmax element always maps to ±127


# ----------------------------------------------------------------------------------------------
# validation: clear errors naming the argument
# ----------------------------------------------------------------------------------------------
def test_errors_name_the_argument(gen):
    x, w = rand_int8(4, 64, gen=gen), rand_int8(64, 32, gen=gen)
    ws, xs = scales(32, gen), scales(4, gen)
    qm = ops.quant.quant_matmul
    with pytest.raises(ValueError, match="weight_int8.*K = 64"):
        qm(x, rand_int8(63, 32, gen=gen), ws, xs)
    with pytest.raises(ValueError, match="x_scale.*1-D.*3257"):
        qm(x, w, ws, xs[:, None])
    with pytest.raises(ValueError, match=r"x_scale must have shape \[4\]"):
        qm(x, w, ws, scales(5, gen))
    with pytest.raises(TypeError, match="weight_scale"):
        qm(x, w, ws.half(), xs)
    with pytest.raises(ValueError, match=r"weight_scale must have shape \[32\]"):
        qm(x, w, scales(31, gen), xs)
    with pytest.raises(TypeError, match="x_int8"):
        qm(x.float(), w, ws, xs)
    with pytest.raises(ValueError, match="bias"):
        qm(x, w, ws, xs, bias=torch.zeros(33))
    with pytest.raises(TypeError, match="out_dtype"):
        qm(x, w, ws, xs, out_dtype=torch.int32)
    with pytest.raises(ValueError, match="int32 accumulator"):
        qm(torch.zeros(1, 131072, dtype=torch.int8), torch.zeros(131072, 1, dtype=torch.int8), ws[:1], xs[:1])
    with pytest.raises(ValueError, match=r"smooth_scales must have shape \[64\]"):
        ops.quant.dynamic_quant(torch.randn(2, 64), smooth_scales=torch.ones(63))
    with pytest.raises(TypeError, match="x must have dtype"):
        ops.quant.dynamic_quant(torch.zeros(2, 64, dtype=torch.int8))
    with pytest.raises(ValueError, match="gamma"):
        ops.quant.rms_norm_dynamic_quant(torch.randn(2, 64), torch.ones(65))
    with pytest.raises(TypeError, match="residual"):
        ops.quant.rms_norm_dynamic_quant(torch.randn(2, 64), torch.ones(64), residual=torch.randn(2, 64).half())
    with pytest.raises(ValueError, match="residual"):
        ops.quant.rms_norm_dynamic_quant(torch.randn(2, 64), torch.ones(64), residual=torch.randn(3, 64))
    # the registered op validates too
    with pytest.raises(ValueError, match="weight_int8"):
        torch.ops.ds.quant_matmul(x, rand_int8(63, 32, gen=gen), ws, xs)


# ----------------------------------------------------------------------------------------------
# registration: opcheck (R1), torch.compile (R2), FLOPs, specs, kernel wiring
# ----------------------------------------------------------------------------------------------
def _cases(gen):
    x = torch.randn(5, 96, generator=gen).to(torch.bfloat16)
    xi, w = rand_int8(5, 96, gen=gen), rand_int8(96, 40, gen=gen)
    return [
        (torch.ops.ds.dynamic_quant.default, (x,), {}),
        (torch.ops.ds.dynamic_quant.default, (x,), {"smooth_scales": torch.rand(96, generator=gen) + 0.5}),
        (torch.ops.ds.rms_norm_dynamic_quant.default, (x, torch.rand(96, generator=gen).to(torch.bfloat16)), {}),
        (torch.ops.ds.rms_norm_dynamic_quant.default, (x, torch.rand(96, generator=gen)),
         {"epsilon": 1e-5, "residual": x.clone(), "smooth_scales": torch.rand(96, generator=gen) + 0.5}),
        (torch.ops.ds.quant_matmul.default, (xi, w, scales(40, gen), scales(5, gen)), {}),
        (torch.ops.ds.quant_matmul.default, (xi, R.pack_weight(w, "cuda"), scales(40, gen), scales(5, gen)),
         {"bias": torch.randn(40, generator=gen), "out_dtype": torch.float16}),
    ]


def test_R1_opcheck(gen):
    for op, args, kwargs in _cases(gen):
        torch.library.opcheck(op, args, kwargs)


def test_R2_torch_compile_fullgraph(gen):
    torch._dynamo.reset()
    names = {torch.ops.ds.dynamic_quant.default: ops.quant.dynamic_quant,
             torch.ops.ds.rms_norm_dynamic_quant.default: ops.quant.rms_norm_dynamic_quant,
             torch.ops.ds.quant_matmul.default: ops.quant.quant_matmul}
    for op, args, kwargs in _cases(gen):
        fn = names[op]
        compiled = torch.compile(lambda *a, _fn=fn, **k: _fn(*a, **k), fullgraph=True, backend="aot_eager")
        got, want = compiled(*args, **kwargs), fn(*args, **kwargs)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for g_, w_ in zip(got, want):
            assert torch.equal(g_, w_)


def test_flop_formula_and_spec(gen):
    from torch.utils.flop_counter import FlopCounterMode
    inp = Q.make_inputs_quant_matmul({"M": 3, "K": 64, "N": 40, "bias": True}, generator=gen)
    with FlopCounterMode(display=False) as fc:
        torch.ops.ds.quant_matmul(**inp)
    assert fc.get_total_flops() == 2 * 3 * 64 * 40 == Q.flops_quant_matmul(**inp)
    assert Q.bytes_quant_matmul(**inp) == 3 * 64 + 64 * 40 + 4 * 43 + 4 * 40 + 3 * 40 * 2
    x = torch.randn(4, 128).to(torch.bfloat16)
    assert Q.bytes_dynamic_quant(x=x) == 4 * 128 * 2 + 4 * 128 + 4 * 4
    assert ops.SPECS["quant_matmul"].compute == "int8"
    shapes = ops.SPECS["quant_matmul"].shapes
    for nm, (K, N) in [("qkv_a", (7168, 2112)), ("q_b", (1536, 24576)), ("moe_gate", (7168, 2048)),
                       ("moe_down", (2048, 7168)), ("o_proj", (16384, 7168)), ("dense_gate", (7168, 18432))]:
        for M in (1, 16, 64, 128, 4096):
            assert shapes[f"{nm}_M{M}"] == {"M": M, "K": K, "N": N}
    assert {s["K"] for s in ops.SPECS["dynamic_quant"].shapes.values()} == {7168, 1536, 2048}
    # make_inputs produce inputs the ops accept (small shapes)
    for name, mk, op in (("dynamic_quant", Q.make_inputs_dynamic_quant, ops.quant.dynamic_quant),
                         ("rms_norm_dynamic_quant", Q.make_inputs_rms_norm_dynamic_quant, ops.quant.rms_norm_dynamic_quant)):
        spec = ops.SPECS[name]
        small = {**next(iter(spec.shapes.values())), "T": 3}
        kw = mk(small, dtype=torch.bfloat16, device="cpu", generator=gen)
        op(**kw)
        assert spec.flops(**kw) > 0 and spec.bytes(**kw) > 0
    kw = Q.make_inputs_quant_matmul({"M": 2, "K": 7168, "N": 64}, generator=gen)
    assert kw["x_int8"].dtype == torch.int8 and not (kw["x_int8"] == 0).all()
    ops.quant.quant_matmul(**kw)


def test_triton_kernel_wiring_is_lazy():
    reason = Q._lazy_supports("ops.triton.does_not_exist", "quant_matmul")(torch.zeros(1))
    assert "not importable" in reason
    for name in ("dynamic_quant", "rms_norm_dynamic_quant", "quant_matmul"):
        op = getattr(ops.quant, name)
        assert [(k.backend, k.module, k.attr) for k in op.kernels if k.backend == "triton"] == [
            ("triton", "ops.triton.quant", name)]


# ----------------------------------------------------------------------------------------------
# offline helpers
# ----------------------------------------------------------------------------------------------
def test_quantize_weight_per_channel(gen):
    w = torch.randn(300, 70, generator=gen) * torch.logspace(-3, 1, 70)
    w[:, 5] = 0
    q, s = R.quantize_weight_per_channel(w)
    assert q.shape == (300, 70) and q.dtype == torch.int8 and q.is_contiguous() and s.shape == (70,)
    assert s[5] == 0 and (q[:, 5] == 0).all()
    assert torch.allclose(s.double(), w.double().abs().amax(0) / 127, rtol=1e-6)
    err = (q.double() * s.double() - w.double()).abs()
    assert (err <= s.double() * (0.5 + 1e-5)).all()
    assert (q.abs().amax(0)[s > 0] == 127).all() and q.min() >= -127
    # same rounding as dynamic_quant (per column instead of per row)
    qd, sd = R.dynamic_quant(w.t())
    assert torch.equal(qd.t(), q) and torch.equal(sd, s)
    with pytest.raises(ValueError):
        R.quantize_weight_per_channel(torch.zeros(3, dtype=torch.float32))


def test_smoothquant_scales_formula(gen):
    K, N = 64, 48
    act = torch.rand(K, generator=gen) * 20
    w = torch.randn(K, N, generator=gen)
    act[3] = 0
    w[7] = 0
    for alpha in (0.0, 0.5, 0.8, 1.0):
        s = R.smoothquant_scales(act, w, alpha)
        a64, w64 = act.double(), w.double().abs().amax(1)
        want = a64.clamp(min=1e-5) ** alpha / w64.clamp(min=1e-5) ** (1 - alpha)
        want[3] = want[7] = 1.0
        assert s.dtype == torch.float32 and s.shape == (K,)
        assert torch.allclose(s.double(), want, rtol=1e-5)
    # smoothing is an exact reparametrisation: (X / s) @ (diag(s) W) = X @ W
    X = torch.randn(5, K, generator=gen, dtype=torch.float64)
    s = R.smoothquant_scales(act, w, 0.5).double()
    assert torch.allclose((X / s) @ (s[:, None] * w.double()), X @ w.double())
    with pytest.raises(ValueError):
        R.smoothquant_scales(act, w[:-1], 0.5)
    with pytest.raises(ValueError):
        R.smoothquant_scales(act, w, 1.5)


@pytest.mark.parametrize("out_shape", [(256, 384), (300, 130), (128, 1)])
def test_fp8_block_dequant_vs_loop(out_shape, gen):
    o, i = out_shape
    w = (torch.randn(o, i, generator=gen) * 100).to(torch.float8_e4m3fn)
    sinv = torch.rand(math.ceil(o / 128), math.ceil(i / 128), generator=gen) * 1e-2 + 1e-4
    got = R.fp8_block_dequant(w, sinv)
    want = torch.empty(o, i, dtype=torch.float64)
    for bi in range(sinv.shape[0]):
        for bj in range(sinv.shape[1]):
            blk = (slice(bi * 128, (bi + 1) * 128), slice(bj * 128, (bj + 1) * 128))
            want[blk] = w[blk].double() * float(sinv[bi, bj])
    assert got.dtype == torch.bfloat16 and got.shape == (o, i)
    assert torch.equal(got, want.float().to(torch.bfloat16))
    assert torch.equal(R.fp8_block_dequant(w, sinv, out_dtype=torch.float32), want.float())
    with pytest.raises(ValueError, match="weight_scale_inv"):
        R.fp8_block_dequant(w, sinv[:, :1] if sinv.shape[1] > 1 else sinv[:1, :].repeat(1, 2))


def test_pack_weight_layouts(gen):
    w = rand_int8(96, 80, gen=gen)
    p = Q.pack_weight(w, "cuda")
    assert p.shape == (96, 80) and p.stride() == (1, 96) and torch.equal(p, w)
    assert p.t().is_contiguous()
    a = Q.pack_weight(w, "ascend")
    assert a.shape == (96, 80) and a.is_contiguous() and torch.equal(a, w)
    with pytest.raises(ValueError):
        Q.pack_weight(w, "rocm")
    with pytest.raises(ValueError):
        Q.pack_weight(w.float(), "cuda")


@pytest.mark.parametrize("dtype,n0", [(torch.int8, 32), (torch.bfloat16, 16)])
@pytest.mark.parametrize("K,N", [(64, 96), (50, 70), (16, 32)])
def test_fractal_nz_layout(dtype, n0, K, N, gen):
    w = torch.randint(-100, 100, (K, N), generator=gen).to(dtype)
    nz = Q.fractal_nz(w)
    assert nz.shape == (math.ceil(N / n0), math.ceil(K / 16), 16, n0)
    for k, n in [(0, 0), (K - 1, N - 1), (K // 2, N // 3), (min(K - 1, 17), min(N - 1, 33))]:
        assert nz[n // n0, k // 16, k % 16, n % n0] == w[k, n]
        if dtype == torch.int8 and K % 16 == 0 and N % n0 == 0:  # the flat offset formula of FRACTAL_NZ (vllm-ascend transdata)
            assert nz.flatten()[32 * k + 32 * K * (n // 32) + n % 32] == w[k, n]
    assert torch.equal(Q.fractal_nz_to_nd(nz, K, N), w)


# ----------------------------------------------------------------------------------------------
# the OpSpec's own inputs (perf's named DeepSeek-V3 shapes at decode token counts) on every backend
# ----------------------------------------------------------------------------------------------
_SPEC_CASES = [(name, nm, shape) for name, limit in (("dynamic_quant", {"T": 2}), ("rms_norm_dynamic_quant", {"T": 2}),
                                                      ("quant_matmul", {"M": 1}))
               for nm, shape in spec_shapes(name, limit)
               if name != "quant_matmul" or nm.startswith(("qkv_a", "moe_down"))]


@pytest.mark.parametrize("be", kernel_backends_for("quant_matmul"))
@pytest.mark.parametrize("name,shape_name,shape", _SPEC_CASES, ids=[f"{c[0]}-{c[1]}" for c in _SPEC_CASES])
def test_spec_inputs_match_the_reference(be, name, shape_name, shape, gen):
    """Each op on its OpSpec's make_inputs for the named shapes (tokens capped at 2; the qkv_a and moe_down GEMMs at
    one row):
    every output within the op's tolerance row of the reference."""
    check_against_reference(be, name, shape, torch.bfloat16, gen)


# ----------------------------------------------------------------------------------------------
# kernels (every backend but the reference) on larger rows and the field cases together
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("be", kernel_backends_for("dynamic_quant"))
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("smooth", [False, True])
def test_kernel_dynamic_quant_is_bit_exact(be, dtype, smooth, gen):
    if be.dtype(dtype) != dtype:
        pytest.skip(f"{be} tests bf16 as fp16 (the fp16 case)")
    x = (3 * torch.randn(19, 1368, generator=gen)).to(dtype)
    x[3] = 0                                                  # Q3
    x[5, 11] = -50.0                                          # Q5
    x[7, 2] = float("nan")
    s = (0.25 + torch.rand(1368, generator=gen)) if smooth else None
    q, scale = cpu(*ops.quant.dynamic_quant(on(be, x), smooth_scales=on(be, s)))
    q_np, s_np, _ = np_dynamic_quant(x, s)
    assert torch.equal(q, torch.from_numpy(q_np))
    assert torch.equal(scale.nan_to_num(-1.0), torch.from_numpy(s_np).nan_to_num(-1.0))
    # Q4 ties and Q6 empty input
    row = torch.zeros(1, 16)
    row[0, :4] = torch.tensor([127, 0.5, 1.5, -2.5]) * 2 ** -4
    q, _ = cpu(*ops.quant.dynamic_quant(on(be, row.to(dtype))))
    assert q[0, :4].tolist() == [127, 0, 2, -2]
    q, scale = ops.quant.dynamic_quant(on(be, torch.zeros(0, 64, dtype=dtype)))
    assert q.shape == (0, 64) and scale.shape == (0,)


@pytest.mark.parametrize("be", kernel_backends_for("rms_norm_dynamic_quant"))
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
def test_kernel_rms_norm_dynamic_quant(be, residual, dtype, gen):
    if be.dtype(dtype) != dtype:
        pytest.skip(f"{be} tests bf16 as fp16 (the fp16 case)")
    T, H = 7, 1536
    x = torch.randn(T, H, generator=gen).to(dtype)
    r = torch.randn(T, H, generator=gen).to(dtype) if residual else None
    g = (0.5 + torch.rand(H, generator=gen)).to(dtype)
    s = 0.5 + torch.rand(H, generator=gen)
    q, scale, ro = cpu(*ops.quant.rms_norm_dynamic_quant(*on(be, x, g), residual=on(be, r), smooth_scales=on(be, s)))
    with ops.backend("reference"):
        q0, scale0, ro0 = ops.quant.rms_norm_dynamic_quant(x, g, residual=r, smooth_scales=s)
    assert torch.equal(ro, ro0)
    assert_close(scale, scale0, "fp32", name="scale")
    assert (q.long() - q0.long()).abs().max() <= 1             # ±1 LSB: fp32 reduction order
    assert (q != q0).float().mean() < 1e-3


@pytest.mark.parametrize("be", kernel_backends_for("quant_matmul"))
@pytest.mark.parametrize("M", [0, 1, 2, 15, 16, 17])
def test_kernel_quant_matmul_Q1(be, M, gen):
    K, N = 160, 96
    x, w = rand_int8(M, K, gen=gen), rand_int8(K, N, gen=gen)
    ws, xs = scales(N, gen), scales(M, gen)
    out = ops.quant.quant_matmul(*on(be, x, R.pack_weight(w, "cuda"), ws, xs), out_dtype=torch.float32).cpu()
    ref64, _ = i64_quant_matmul(x, w, ws, xs)
    assert out.shape == (M, N)
    if M:
        assert_close(out, ref64, "fp32")


@pytest.mark.parametrize("be", kernel_backends_for("quant_matmul"))
@pytest.mark.parametrize("K,N", [(1368, 576), (200, 2112)])
def test_kernel_quant_matmul_Q2_and_strides(be, K, N, gen):
    M = 3
    x, w = rand_int8(M, K, gen=gen), rand_int8(K, N, gen=gen)
    ws, xs, b = scales(N, gen), scales(M, gen), torch.randn(N, generator=gen)
    ref64, _ = i64_quant_matmul(x, w, ws, xs, b)
    for wv in (w, R.pack_weight(w, "cuda")):
        for od in sorted({be.dtype(d) for d in (torch.float16, torch.float32, torch.bfloat16)}, key=str):
            out = ops.quant.quant_matmul(*on(be, x, wv, ws, xs), bias=on(be, b), out_dtype=od).cpu()
            assert out.dtype == od
            assert_close(out, ref64, "fp32" if od == torch.float32 else "bf16")


def test_epsilon_of_the_wrong_type_is_a_type_error():
    """A tensor or bool epsilon was reported as a bad value ("must be a finite float >= 0, got tensor(1e-06)"):
    the problem is its type (a new-user finding)."""
    x, gamma = torch.randn(2, 16), torch.rand(16) + 0.5
    for eps in (torch.tensor(1e-6), True, "1e-6"):
        with pytest.raises(TypeError, match="epsilon must be a real number"):
            ops.quant.rms_norm_dynamic_quant(x, gamma, epsilon=eps)


@pytest.mark.parametrize("eps", [float("inf"), -1e-6, float("nan")])
def test_rms_norm_dynamic_quant_rejects_bad_epsilon(eps):
    """Audit finding: epsilon=inf was accepted and silently gave all-zero output."""
    x, gamma = torch.randn(2, 16), torch.rand(16) + 0.5
    with pytest.raises(ValueError, match="epsilon"):
        torch.ops.ds.rms_norm_dynamic_quant(x, gamma, epsilon=eps)


def test_numpy_scalars_are_accepted_as_floats():
    """np.float32 is a real number but not a Python float: epsilon / softmax_scale given as numpy scalars were
    rejected (a review note). Same results as the Python float."""
    import numpy as np
    x, gamma = torch.randn(2, 16), torch.rand(16) + 0.5
    a = ops.quant.rms_norm_dynamic_quant(x, gamma, epsilon=np.float32(1e-6))
    b = ops.quant.rms_norm_dynamic_quant(x, gamma, epsilon=float(np.float32(1e-6)))
    assert all(torch.equal(u, v) for u, v in zip(a, b))
