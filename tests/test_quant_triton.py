"""Triton kernels of ds::dynamic_quant, ds::rms_norm_dynamic_quant, ds::quant_matmul vs the reference.

Runs under TRITON_INTERPRET=1 on the CPU (conftest) with small shapes, through ``ops.backend("triton")``
so the registered dispatch path is exercised. Both config tables are run: "ascend" (what the CPU
interpreter picks: grid capped, loop inside, split-K) and "cuda" (forced, to exercise the GPU tiles).
Every output buffer the kernels allocate is poisoned (NaN / INT_MIN) so an unwritten element fails.

Interpreter limits (so these tests use fp16/fp32 where exactness matters): it computes bf16 tl.dot
wrongly and rounds fp32 → bf16 toward zero (the GPU rounds to nearest even), so bf16 outputs are
checked with the bf16 tolerance here and exactly on the H200 (tests/gpu/check_quant_gating.py).
Field cases Q1–Q6 (docs/field_cases.md) are named in the test names.
"""
from __future__ import annotations

import json
import os

import pytest
import torch
from hypothesis import example, given, settings, strategies as st

import ops
from ops.triton._common import forced_table, unreachable
from reference import quant as R
from tests.conftest import record_launches, requires_triton, run_uninterpreted
from tests.tolerances import assert_close, poisoned_empty

pytestmark = [requires_triton, pytest.mark.interpreter]

T = pytest.importorskip("ops.triton.quant")
QR = pytest.importorskip("ops.triton.quant_row")
QC = pytest.importorskip("ops.triton._quant_common")
_CPU = torch.device("cpu")


def _kname(case: dict) -> str:
    """The name of a compile case's kernel (JITFunction / InterpretedFunction keep the Python function in .fn)."""
    return getattr(case["fn"], "fn", case["fn"]).__name__


def _row_launch(op: str, M: int, K: int, key: str) -> tuple:
    """The row launch tuple of table ``key`` for M × K, computed afresh (not the memoised one)."""
    return QR.make_row_launch(QR.row_config(op, M, key), M, K)

# The kernels here run on CPU tensors, which needs the interpreter (conftest sets TRITON_INTERPRET=1 only when
# there is no CUDA device). On a CUDA machine those tests are skipped; the ones marked @_gpu (CUDA graphs, bf16 on
# the device) run only there, the ones marked @_host (plans and configs, no kernel launch) run everywhere.
_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
_GPU_TESTS: set = set()
_HOST_TESTS: set = set()


def _gpu(fn):
    """A test that needs a CUDA device (skipped elsewhere) and runs there without the interpreter."""
    _GPU_TESTS.add(fn.__name__)
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(fn))


def _host(fn):
    """A test that launches no kernel (plans, configs): runs with or without the interpreter."""
    _HOST_TESTS.add(fn.__name__)
    return fn



# ----------------------------------------------------------------------------------------------
# fixtures
# ----------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _poison_and_triton(request, monkeypatch):
    """Kernel outputs start as NaN / INT_MIN; ops run on the triton backend. Without the interpreter (a CUDA
    machine) only @_gpu and @_host tests run: the rest launch kernels on CPU tensors."""
    name = request.node.originalname
    if not _INTERPRETED and name not in _GPU_TESTS and name not in _HOST_TESTS:
        pytest.skip("runs Triton kernels on CPU tensors: needs TRITON_INTERPRET=1 (conftest sets it without CUDA)")
    monkeypatch.setattr(torch, "empty", poisoned_empty)
    with ops.backend("triton"):
        yield


@pytest.fixture(params=["ascend", "cuda"])
def table(request):
    """Which config table the launchers use (the CPU normally picks "ascend")."""
    with forced_table(request.param):
        yield request.param


@pytest.fixture
def cuda_table():
    """The launchers use the "cuda" table (its tiles, run by the interpreter)."""
    with forced_table("cuda"):
        yield "cuda"


def _dq(x, s=None):
    return ops.quant.dynamic_quant(x, smooth_scales=s)


def _assert_int8_exact(q, rq, name="x_int8"):
    assert q.dtype == torch.int8 and q.shape == rq.shape
    assert not (q == -128).any(), f"{name}: −128 (poison or out of range) in output"
    assert_close(q, rq, "int8", name=name)


# ----------------------------------------------------------------------------------------------
# dynamic_quant
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("K", [1, 7, 64, 300, 1368, 5000, 9000])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("smooth", [False, True])
def test_dynamic_quant_exact(K, dtype, smooth, table, gen):
    x = (3 * torch.randn(5, K, generator=gen)).to(dtype)
    s = (0.5 + torch.rand(K, generator=gen)) if smooth else None
    q, sc = _dq(x, s)
    rq, rs = R.dynamic_quant(x, smooth_scales=s)
    _assert_int8_exact(q, rq)
    assert torch.equal(sc, rs), "scale must be bit-identical (one IEEE division)"


def test_dynamic_quant_bf16_and_leading_axes_and_noncontiguous(gen):
    base = torch.randn(3, 4, 200, generator=gen).to(torch.bfloat16)
    x = base[:, :, 10:150]                             # non-contiguous column slice
    s = (0.5 + torch.rand(140, generator=gen)).to(torch.bfloat16)
    q, sc = _dq(x, s)
    rq, rs = R.dynamic_quant(x, smooth_scales=s)
    assert q.shape == (3, 4, 140) and sc.shape == (3, 4)
    _assert_int8_exact(q, rq)
    assert torch.equal(sc, rs)


def test_Q3_all_zero_row_gives_zero_q_and_zero_scale(table, gen):
    x = torch.randn(4, 100, generator=gen).to(torch.float16)
    x[1] = 0
    x[3, :] = 0
    q, sc = _dq(x)
    assert (q[1] == 0).all() and (q[3] == 0).all()
    assert sc[1] == 0 and sc[3] == 0 and torch.isfinite(sc).all()
    _assert_int8_exact(q, R.dynamic_quant(x)[0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_Q4_exact_ties_round_half_to_even(dtype, table):
    s = 2.0 ** -4                                      # scale = (127·s)/127 = s exactly
    vals = [0.5, 1.5, -2.5, 2.5, -0.5, 3.5, -126.5, 126.5, 127.0]
    x = torch.tensor([vals], dtype=torch.float32).mul(s).to(dtype)
    q, sc = _dq(x)
    assert sc.item() == s
    assert q[0].tolist() == [0, 2, -2, 2, 0, 4, -126, 126, 127]


def test_Q4_ties_with_smooth_scales(table):
    s = 2.0 ** -3
    x = torch.tensor([[0.25, 0.75, -1.25, 63.5]]) * s          # × smooth 2 → 0.5, 1.5, −2.5, 127 (·s)
    q, sc = _dq(x, torch.full((4,), 2.0))
    assert sc.item() == s and q[0].tolist() == [0, 2, -2, 127]


def test_Q5_negative_absmax_gives_minus_127(table, gen):
    x = torch.rand(3, 77, generator=gen)
    x[:, 5] = -4.0
    q, sc = _dq(x)
    assert (q[:, 5] == -127).all() and q.min() >= -127
    _assert_int8_exact(q, R.dynamic_quant(x)[0])


def test_Q6_zero_tokens_give_empty_outputs():
    q, sc = _dq(torch.empty(0, 64, dtype=torch.float16))
    assert q.shape == (0, 64) and q.dtype == torch.int8 and sc.shape == (0,)
    q, sc = _dq(torch.randn(2, 0, 64).half())
    assert q.shape == (2, 0, 64) and sc.shape == (2, 0)


def test_nan_and_inf_rows_zero_that_row_only(table, gen):
    x = torch.randn(4, 130, generator=gen)
    x[1, 3] = float("nan")
    x[2, 7] = float("inf")
    q, sc = _dq(x)
    rq, rs = R.dynamic_quant(x)
    assert torch.isnan(sc[1]) and sc[2] == float("inf")
    assert (q[1] == 0).all() and (q[2] == 0).all()
    _assert_int8_exact(q, rq)
    assert torch.equal(sc[[0, 3]], rs[[0, 3]])


# ----------------------------------------------------------------------------------------------
# rms_norm_dynamic_quant
# ----------------------------------------------------------------------------------------------
def _check_rms(x, gamma, eps, residual, smooth):
    """int8 exact except at near-ties (the Σx² reduction order differs from torch's, moving the fp32
    rms by an ulp): every differing element must be ±1 LSB and within 1e-3 of a .5 tie in the
    reference's y/scale. scale: fp32 tolerance; residual_out: exact."""
    # bf16 residual_out on the CPU: the op refuses the interpreter (it truncates fp32 → bf16), the launcher runs it
    fn = T.rms_norm_dynamic_quant if x.dtype == torch.bfloat16 and residual is not None else ops.quant.rms_norm_dynamic_quant
    q, sc, ro = fn(x, gamma, epsilon=eps, residual=residual, smooth_scales=smooth)
    rq, rs, rro = R.rms_norm_dynamic_quant(x, gamma, epsilon=eps, residual=residual, smooth_scales=smooth)
    assert not (q == -128).any()
    assert_close(sc, rs, "fp32", name="scale")
    if x.dtype != torch.bfloat16:               # the interpreter truncates fp32 → bf16
        assert torch.equal(ro, rro), "residual_out must equal round(x + residual)"
    else:
        assert_close(ro, rro, "bf16", name="residual_out")
    diff = (q.long() - rq.long()).abs()
    assert int(diff.max()) <= 1 if diff.numel() else True
    bad = diff > 0
    if bad.any():
        s = x.float() + (residual.float() if residual is not None else 0)
        y = R.rms_norm(s, gamma, eps) * (smooth.float() if smooth is not None else 1)
        t = (y.double() / rs.double()[..., None])[bad]
        assert ((t.abs() - t.abs().floor() - 0.5).abs() < 1e-3).all(), "an int8 difference away from a tie"
        assert bad.float().mean() < 1e-3
    return q, sc, ro


@pytest.mark.parametrize("H", [64, 1536, 5000])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("smooth", [False, True])
def test_rms_norm_dynamic_quant_vs_reference(H, residual, smooth, table, gen):
    x = torch.randn(6, H, generator=gen).to(torch.float16)
    r = torch.randn(6, H, generator=gen).to(torch.float16) if residual else None
    g = (0.5 + torch.rand(H, generator=gen)).to(torch.float16)
    s = (0.5 + torch.rand(H, generator=gen)) if smooth else None
    _check_rms(x, g, 1e-6, r, s)


@pytest.mark.parametrize("eps", [0.25, 3.0])
@pytest.mark.parametrize("H", [64, 5000])              # one row tile, and the multi-sweep path
def test_rms_norm_dynamic_quant_epsilon_matters(eps, H, table, gen):
    """An epsilon comparable to mean(x²) (the usual 1e-6 hides a dropped epsilon, one added outside the sqrt, or the
    wrong one: a mutation audit). q does not depend on the rms; the scale does, and is checked against an
    independent fp64 formula as well as the reference."""
    x = (0.5 * torch.randn(4, H, generator=gen)).half()
    g = (0.5 + torch.rand(H, generator=gen)).half()
    r = (0.5 * torch.randn(4, H, generator=gen)).half()
    _, sc, _ = _check_rms(x, g, eps, r, None)
    s = x.double() + r.double()
    want = (s / torch.sqrt(s.pow(2).mean(-1, keepdim=True) + eps) * g.double()).abs().amax(-1) / 127
    torch.testing.assert_close(sc.double(), want, rtol=1e-5, atol=0)


def test_rms_norm_dynamic_quant_fp32_bf16_and_3d(gen):
    x = torch.randn(2, 3, 96, generator=gen)
    _check_rms(x, torch.rand(96, generator=gen) + 0.5, 1e-5, torch.randn(2, 3, 96, generator=gen), None)
    xb = torch.randn(3, 200, generator=gen).to(torch.bfloat16)
    _check_rms(xb, (torch.rand(200, generator=gen) + 0.5), 1e-6, torch.randn(3, 200, generator=gen).to(torch.bfloat16),
               torch.rand(200, generator=gen) + 0.5)


def test_rms_norm_dynamic_quant_norm_reads_the_unrounded_sum(gen):
    """The norm must use fp32 x + residual, not the fp16-rounded residual_out (reference docstring)."""
    x = torch.randn(8, 128, generator=gen).half()
    r = (torch.randn(8, 128, generator=gen) * 1e-3).half()
    _check_rms(x, torch.ones(128).half(), 1e-6, r, None)


def test_rms_norm_dynamic_quant_edge_rows(table, gen):
    x = torch.randn(5, 64, generator=gen).half()
    r = torch.randn(5, 64, generator=gen).half()
    r[2] = -x[2]                                         # sum exactly zero → q 0, scale 0
    q, sc, ro = ops.quant.rms_norm_dynamic_quant(x, torch.ones(64).half(), epsilon=1e-6, residual=r)
    assert sc[2] == 0 and (q[2] == 0).all()
    q, sc, ro = ops.quant.rms_norm_dynamic_quant(torch.empty(0, 64).half(), torch.ones(64).half(), epsilon=1e-6)
    assert q.shape == (0, 64) and sc.shape == (0,) and ro.shape == (0, 64)


def test_rms_norm_dynamic_quant_without_residual_returns_a_copy(gen):
    x = torch.randn(3, 64, generator=gen).half()
    q, sc, ro = ops.quant.rms_norm_dynamic_quant(x, torch.ones(64).half(), epsilon=1e-6)
    assert torch.equal(ro, x) and ro.data_ptr() != x.data_ptr()


# ----------------------------------------------------------------------------------------------
# quant_matmul
# ----------------------------------------------------------------------------------------------
def _qmm_inputs(M, K, N, gen, layout="kmajor", bias=False, bias_dtype=torch.float32):
    x = torch.randint(-127, 128, (M, K), generator=gen, dtype=torch.int8)
    w = torch.randint(-127, 128, (K, N), generator=gen, dtype=torch.int8)
    if layout == "kmajor":
        w = R.pack_weight(w, "cuda")
    elif layout == "strided":                           # a column slice of a wider row-major weight
        wide = torch.randint(-127, 128, (K, N + 9), generator=gen, dtype=torch.int8)
        wide[:, 3:3 + N] = w
        w = wide[:, 3:3 + N]
    elif layout == "anystride":                         # every other column of a wider weight: strides (2N, 2),
        big = torch.zeros((K, 2 * N), dtype=torch.int8)  # neither unit, so the launcher takes W_LAYOUT 2
        big[:, ::2] = w
        w = big[:, ::2]
    ws = (0.5 + torch.rand(N, generator=gen)) / (127.0 * max(K, 1) ** 0.5)
    xs = (0.5 + torch.rand(M, generator=gen)) / 127.0
    b = torch.randn(N, generator=gen).to(bias_dtype) if bias else None
    return x, w, ws, xs, b


def _check_qmm(M, K, N, gen, out_dtype=torch.float32, **kw):
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, **kw)
    # a bf16 out on the CPU: the op refuses the interpreter (it truncates fp32 → bf16), the launcher runs it
    fn = T.quant_matmul if out_dtype == torch.bfloat16 and x.device.type == "cpu" else ops.quant.quant_matmul
    out = fn(x, w, ws, xs, bias=b, out_dtype=out_dtype)
    ref = R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=out_dtype)
    assert out.shape == (M, N) and out.dtype == out_dtype
    kind = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[out_dtype]
    if out.numel():
        assert_close(out, ref, kind)
    return out, ref


@pytest.mark.parametrize("M", [0, 1, 2, 15, 16, 17, 33])
def test_Q1_token_counts(M, table, gen):
    _check_qmm(M, 256, 96, gen)


@pytest.mark.parametrize("K,N", [(1368, 64), (96, 576), (200, 2112), (4100, 40)])
def test_Q2_widths_not_multiple_of_tiles(K, N, table, gen):
    _check_qmm(3, K, N, gen, out_dtype=torch.float16)


@pytest.mark.parametrize("layout", ["kmajor", "rowmajor", "strided"])
def test_quant_matmul_any_weight_strides(layout, table, gen):
    _check_qmm(5, 320, 72, gen, layout=layout, bias=True)


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias_dtype", [torch.float32, torch.float16])
def test_quant_matmul_dtypes_and_bias(out_dtype, bias_dtype, gen):
    _check_qmm(4, 192, 48, gen, out_dtype=out_dtype, bias=True, bias_dtype=bias_dtype)


@pytest.mark.parametrize("M,K,N", [(1, 4096, 64), (16, 2048, 256), (40, 3000, 100)])
def test_split_k_is_exact_and_deterministic(M, K, N, table, gen):
    """Split-K partial sums are int32 and added in a fixed order: bit-identical across runs and equal
    to the unsplit kernel."""
    plan = T.plan_quant_matmul(M, N, K, torch.device("cpu"), backend_key=table)
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, bias=True)
    o1 = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, backend_key=table)
    o2 = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, backend_key=table)
    one = {k: v for k, v in plan.items() if k not in ("SPLIT_K", "K_PER_SPLIT")} | {"split_k": 1}
    o3 = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, config=one, backend_key=table)
    assert torch.equal(o1, o2) and torch.equal(o1, o3)
    assert_close(o1, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32), "fp32")


@_host
def test_split_k_is_used_for_small_m():
    plan = T.plan_quant_matmul(1, 2112, 7168, torch.device("cpu"), backend_key="ascend")
    assert plan["SPLIT_K"] > 1 and plan["K_PER_SPLIT"] % plan["BLOCK_K"] == 0
    assert T.plan_quant_matmul(4096, 2048, 7168, torch.device("cpu"), backend_key="cuda")["SPLIT_K"] == 1


@pytest.mark.parametrize("bias", [False, True])
def test_zero_k_runs_the_epilogue_like_the_reference(bias, table):
    # an audit finding: with K = 0 the launcher copied bias (or zeros) without the scales, so an inf / NaN scale gave 0
    # where the reference (and the kernel for any K > 0 whose accumulator is 0) gives 0 · inf = NaN
    x, w = torch.empty(3, 0, dtype=torch.int8), torch.empty(0, 4, dtype=torch.int8)
    ws = torch.tensor([1.0, 2.0, float("nan"), 0.5])
    xs = torch.tensor([float("inf"), 1.0, 3.0])
    b = torch.tensor([0.25, -1.0, 2.0, 4.0]) if bias else None
    out = ops.quant.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32)
    ref = R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32)
    assert torch.isnan(out[0]).all() and torch.isnan(out[:, 2]).all()
    torch.testing.assert_close(out, ref, equal_nan=True, rtol=0, atol=0)


def test_exact_int32_accumulation_at_the_extremes(table):
    """All ±127 products: acc = ±127²·K exactly (K = 8192 → 132,128,768 < 2³¹)."""
    K = 8192
    x = torch.full((2, K), 127, dtype=torch.int8)
    x[1] = -127
    w = torch.full((K, 16), -127, dtype=torch.int8)
    out = ops.quant.quant_matmul(x, w, torch.ones(16), torch.ones(2), out_dtype=torch.float32)
    assert out[0].eq(-127 * 127 * K).all() and out[1].eq(127 * 127 * K).all()


@settings(max_examples=20)
@given(M=st.integers(0, 40), K=st.integers(1, 700), N=st.integers(1, 150), bias=st.booleans(),
       layout=st.sampled_from(["kmajor", "rowmajor"]), seed=st.integers(0, 2**16))
@example(M=17, K=1368, N=1, bias=True, layout="kmajor", seed=0)
@example(M=1, K=1, N=1, bias=False, layout="rowmajor", seed=1)
def test_quant_matmul_hypothesis(M, K, N, bias, layout, seed):
    g = torch.Generator().manual_seed(seed)
    with ops.backend("triton"):
        _check_qmm(M, K, N, g, layout=layout, bias=bias)


@settings(max_examples=20)
@given(rows=st.integers(0, 9), K=st.integers(1, 3000), smooth=st.booleans(),
       dtype=st.sampled_from([torch.float16, torch.float32]), seed=st.integers(0, 2**16))
@example(rows=1, K=4097, smooth=True, dtype=torch.float16, seed=0)
def test_dynamic_quant_hypothesis(rows, K, smooth, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = (10 * torch.randn(rows, K, generator=g)).to(dtype)
    s = (0.25 + torch.rand(K, generator=g)) if smooth else None
    with ops.backend("triton"):
        q, sc = _dq(x, s)
    rq, rs = R.dynamic_quant(x, smooth_scales=s)
    _assert_int8_exact(q, rq)
    assert torch.equal(sc, rs)


# ----------------------------------------------------------------------------------------------
# module contract: supports_reason, configs, Ascend compile cases
# ----------------------------------------------------------------------------------------------
@_host
def test_supports_reason(gen):
    x = torch.randn(2, 8)
    assert T.supports_reason_dynamic_quant(x) is None
    assert "fp16/bf16/fp32" in T.supports_reason_dynamic_quant(x.to(torch.int32))
    assert T.supports_reason_rms_norm_dynamic_quant(x, torch.ones(8), epsilon=1e-6) is None
    xi = torch.zeros(2, 8, dtype=torch.int8)
    assert T.supports_reason_quant_matmul(xi, torch.zeros(8, 4, dtype=torch.int8), torch.ones(4), torch.ones(2),
                                          out_dtype=torch.float16) is None
    bf16 = T.supports_reason_quant_matmul(xi, torch.zeros(8, 4, dtype=torch.int8), torch.ones(4), torch.ones(2))
    assert (bf16 is None) == (xi.device.type != "cpu") and (bf16 is None or "TRITON_INTERPRET" in bf16)
    assert "int8" in T.supports_reason_quant_matmul(xi.float(), torch.zeros(8, 4, dtype=torch.int8), torch.ones(4), torch.ones(2))
    # the kernel's K bound is the op's: the largest K whose int8 products cannot overflow the int32 accumulator
    from reference.quant import _K_MAX_INT32
    assert T.K_MAX == _K_MAX_INT32 == 131071
    for K, ok in ((_K_MAX_INT32, True), (_K_MAX_INT32 + 1, False)):
        xk, wk = torch.zeros(1, K, dtype=torch.int8), torch.zeros(K, 1, dtype=torch.int8)
        r = T.supports_reason_quant_matmul(xk, wk, torch.ones(1), torch.ones(1), out_dtype=torch.float32)
        assert (r is None) == ok and (ok or "131071" in r)


@_host
def test_gemv_split_k_reduce_compiles_for_cuda_with_m_specialised_to_1():
    """On CUDA a launch with M = 1 turns M into the constant 1 (the GEMV kernel specialises M), where ``M.to(...)``
    fails to compile. The interpreter never specialises, and the shipped tables do not split the M = 1 GEMV, so only
    an sm_90 compile of the split-K "atomic" cases shows it (a review finding: it broke quant_matmul_config with
    split_k > 1 at M = 1 on the GPU). Compiled in a subprocess without TRITON_INTERPRET."""
    code = (
        "import triton, ops.triton.quant_gemv as G\n"
        "from triton.backends.compiler import GPUTarget\n"
        "b = dict(BLOCK_M=4, BLOCK_N=1, BLOCK_K=1024, GROUP_M=1, num_warps=1, num_stages=1,\n"
        "         split_k='auto', reduce='atomic', mma='gemv_stream', programs_per_sm=16, dp4a=True)\n"
        "cases = [c for c in G.gemv_stream_cases(b, 1, 'm1', 'cuda') if c['constexprs']['REDUCE']]\n"
        "assert cases and all(c['constexprs'].get('M') == 1 for c in cases)\n"
        "for c in cases:\n"
        "    triton.compile(triton.compiler.ASTSource(c['fn'], c['signature'], c['constexprs']),\n"
        "                   target=GPUTarget('cuda', 90, 64), options=dict(num_warps=1, num_stages=1))\n"
        "print('compiled', len(cases))\n")
    r = run_uninterpreted(code, timeout=300)
    assert r.returncode == 0 and "compiled 4" in r.stdout, r.stderr[-2000:]


def test_bf16_outputs_refused_under_the_interpreter_auto_falls_back(gen):
    """The interpreter truncates fp32 → bf16 (the GPU rounds to nearest even): on the CPU a bf16 quant_matmul out,
    rms_norm_dynamic_quant residual_out and moe_gating_top_k y are refused by the Triton backend with the reason,
    and "auto" takes the reference, bit for bit (a fresh-user audit: half the elements were 1 ulp off)."""
    from ops.moe_gating import moe_gating_top_k
    import ops.triton.moe_gating as MGT
    from reference import moe_gating as RG
    x, w, ws, xs, _ = _qmm_inputs(3, 64, 16, gen)
    a, r = torch.randn(2, 64, generator=gen).bfloat16(), torch.randn(2, 64, generator=gen).bfloat16()
    lg = torch.randn(64, 64, generator=gen).bfloat16()
    # the launchers themselves (no refusal) do differ here, so the fallback checks below can fail
    assert not torch.equal(T.quant_matmul(x, w, ws, xs), R.quant_matmul(x, w, ws, xs))
    assert not torch.equal(T.rms_norm_dynamic_quant(a, torch.ones(64), residual=r)[2],
                           R.rms_norm_dynamic_quant(a, torch.ones(64), residual=r)[2])
    assert not torch.equal(MGT.moe_gating_top_k(lg, 8)[0], RG.moe_gating_top_k(lg, 8)[0])
    with ops.backend("triton"):
        with pytest.raises(ops.BackendUnavailable, match="rounded toward zero"):
            ops.quant.quant_matmul(x, w, ws, xs)
        with pytest.raises(ops.BackendUnavailable, match="residual_out"):
            ops.quant.rms_norm_dynamic_quant(a, torch.ones(64), residual=r)
        with pytest.raises(ops.BackendUnavailable, match="bf16 y"):
            moe_gating_top_k(lg, 8)
        ops.quant.quant_matmul(x, w, ws, xs, out_dtype=torch.float16)        # other outputs still run
        ops.quant.rms_norm_dynamic_quant(a, torch.ones(64))                   # bf16 in, int8 / fp32 out
    with ops.backend("auto"):
        assert torch.equal(ops.quant.quant_matmul(x, w, ws, xs), R.quant_matmul(x, w, ws, xs))
        assert torch.equal(ops.quant.rms_norm_dynamic_quant(a, torch.ones(64), residual=r)[2],
                           R.rms_norm_dynamic_quant(a, torch.ones(64), residual=r)[2])
        assert torch.equal(moe_gating_top_k(lg, 8)[0], RG.moe_gating_top_k(lg, 8)[0])


@_host
def test_ascend_tables_fit_the_910b_buffers():
    """Every Ascend quant_matmul bucket leaves L0C room for its int32 accumulator and double-buffers its tiles in L1;
    the row ops keep ≈8 live fp32 tiles in the 192 KiB UB (limits of the hardware, whatever the tuning)."""
    t = T.tables()["ascend"]
    for b in t["quant_matmul"]["buckets"]:
        c = b["config"]
        assert c["BLOCK_M"] * c["BLOCK_N"] * 4 <= 64 << 10, "int32 accumulator must leave L0C room (128 KiB)"
        assert (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * 2 <= 512 << 10, "double-buffered tiles in L1"
    for op in ("dynamic_quant", "rms_norm_dynamic_quant"):
        for M in (1, 16, 64, 4096):
            assert QR.row_config(op, M, "ascend")["tile_elems"] * 4 * 8 <= 192 << 10, "≈8 fp32 tiles in the UB"


@_host
def test_ascend_compile_cases_match_the_kernels():
    cases = T.ascend_compile_cases()
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)) and len(cases) >= 10
    assert {_kname(c) for c in cases} == {"_qmm_kernel", "_qmm_epilogue_kernel"}
    cases = cases + QR.ascend_compile_cases()
    assert {_kname(c) for c in QR.ascend_compile_cases()} == {"_dynamic_quant_kernel", "_rms_norm_quant_kernel"}
    for c in cases:
        params = c["fn"].arg_names
        assert list(c["signature"]) == params, c["name"]
        const = [p for p in params if c["signature"][p] == "constexpr"]
        assert sorted(const) == sorted(c["constexprs"]), c["name"]
        assert all(v in ("*fp16", "*bf16", "*i8", "*i32", "*fp32", "i32", "i64", "fp32", "constexpr")
                   for v in c["signature"].values())


# ----------------------------------------------------------------------------------------------
# CUDA fast paths (run under the interpreter through explicit configs): the reciprocal + Markstein
# quotient, the two-sweep row tiles, the in-kernel (atomic counter) split-K reduction
# ----------------------------------------------------------------------------------------------
_ROW_TILES = [  # (max_block_k, block_m, num_warps): row in registers, several rows, two/three sweeps
    (8192, 1, 8), (4096, 2, 4), (128, 1, 4), (64, 4, 2)]


def _tricky_rows(K, gen):
    """fp32 rows that stress the quotient: exact and near ties (±1..3 ulp of (n + ½)·scale), a tiny row
    whose scale is subnormal, a row near the fp32 maximum, a zero row, a NaN row, an inf row."""
    rows = []
    s = 2.0 ** -5
    n = torch.randint(-127, 127, (K,), generator=gen).float()
    t = ((n + 0.5) * s).float()
    t[0] = 127 * s                                            # absmax → scale = s exactly
    for ulps in (0, 1, -1, 3):
        r = t.clone()
        if ulps:
            r[1:] = torch.nextafter(r[1:], torch.full_like(r[1:], float("inf") if ulps > 0 else float("-inf")))
            for _ in range(abs(ulps) - 1):
                r[1:] = torch.nextafter(r[1:], torch.full_like(r[1:], float("inf") if ulps > 0 else float("-inf")))
        rows.append(r)
    rows.append(torch.randn(K, generator=gen) * 1e-40)          # subnormal inputs: amax/127 is subnormal
    rows.append(torch.randn(K, generator=gen) * 2e-22)          # scale just above the 2⁻⁸⁰ rescaling switch
    rows.append(torch.randn(K, generator=gen) * 2e-23)          # normal scale below it (rescaled by 2¹⁰⁰)
    rows.append(torch.randn(K, generator=gen) * 1e37)           # huge: y·(1/scale) near the range limits
    rows.append(torch.zeros(K))
    nan_row = torch.randn(K, generator=gen)
    nan_row[K // 2] = float("nan")
    inf_row = torch.randn(K, generator=gen)
    inf_row[K - 1] = float("-inf")
    rows += [nan_row, inf_row, torch.randn(K, generator=gen) * 30]
    return torch.stack(rows)


@pytest.mark.parametrize("tiles", _ROW_TILES, ids=lambda t: f"bk{t[0]}_bm{t[1]}_w{t[2]}")
def test_fast_dynamic_quant_is_bit_identical_to_div_rn_and_reference(tiles, gen):
    mbk, bm, w = tiles
    K = 300
    x = _tricky_rows(K, gen)
    smooth = 0.5 + torch.rand(K, generator=gen)
    for s in (None, smooth):
        rq, rs = R.dynamic_quant(x, smooth_scales=s)
        outs = []
        for fast in (False, True):
            cfg = dict(max_block_k=mbk, block_m=bm, num_warps=w, grid_cap=0, fast=fast)
            q, sc = T.dynamic_quant_config(x, smooth_scales=s, config=cfg)
            _assert_int8_exact(q, rq)
            assert torch.equal(torch.nan_to_num(sc, nan=-1.0), torch.nan_to_num(rs, nan=-1.0))
            assert torch.isnan(sc).tolist() == torch.isnan(rs).tolist()
            outs.append((q, sc))
        assert torch.equal(outs[0][0], outs[1][0])


def test_fast_dynamic_quant_tiny_scales_and_ties_fp16(gen):
    """fp16 inputs (the CUDA small-T bucket under the interpreter) with ties and a row of fp16 subnormals."""
    K = 96
    s = 2.0 ** -8
    vals = torch.tensor([0.5, 1.5, -2.5, 2.5, -0.5, 3.5, -126.5, 126.5] * 12) * s
    vals[0] = 127 * s
    x = torch.stack([vals, torch.full((K,), 6e-8) * torch.randn(K, generator=gen).sign(), torch.randn(K, generator=gen)])
    x = x.to(torch.float16)
    for cfg in ({"max_block_k": 8192, "block_m": 1, "num_warps": 8, "fast": True},
                {"max_block_k": 32, "block_m": 2, "num_warps": 4, "fast": True}):
        q, sc = T.dynamic_quant_config(x, config=cfg)
        rq, rs = R.dynamic_quant(x)
        _assert_int8_exact(q, rq)
        assert torch.equal(sc, rs)
    assert q[0, :8].tolist() == [127, 2, -2, 2, 0, 4, -126, 126]


@pytest.mark.parametrize("tiles", _ROW_TILES, ids=lambda t: f"bk{t[0]}_bm{t[1]}_w{t[2]}")
def test_fast_rms_norm_dynamic_quant_is_bit_identical_to_div_rn(tiles, gen):
    """Same tiles → same Σx² order, so FAST changes nothing: all three outputs bit-identical; and the
    usual near-tie tolerance against the reference."""
    mbk, bm, w = tiles
    H = 200
    x = torch.randn(7, H, generator=gen).to(torch.float16)
    r = torch.randn(7, H, generator=gen).to(torch.float16)
    r[3] = -x[3]                                           # zero row
    g = (0.5 + torch.rand(H, generator=gen)).to(torch.float16)
    sm = 0.5 + torch.rand(H, generator=gen)
    outs = [T.rms_norm_dynamic_quant_config(x, g, epsilon=1e-6, residual=r, smooth_scales=sm,
                                            config=dict(max_block_k=mbk, block_m=bm, num_warps=w, fast=fast))
            for fast in (False, True)]
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    rq, rs, rro = R.rms_norm_dynamic_quant(x, g, epsilon=1e-6, residual=r, smooth_scales=sm)
    assert torch.equal(outs[1][2], rro)
    assert (outs[1][0].int() - rq.int()).abs().max() <= 1
    assert outs[1][1][3] == 0 and (outs[1][0][3] == 0).all()


@pytest.mark.parametrize("M,K,N,split", [(1, 2048, 96, 4), (3, 1536, 200, 3), (17, 1024, 40, 2), (40, 3000, 100, 5)])
def test_split_k_atomic_reduction_equals_two_kernel_and_reference(M, K, N, split, gen):
    """In-kernel split-K (last-arriving split sums, int32 counters): bit-identical to the two-kernel path
    and to the reference; the counters are left at zero for the next call."""
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, bias=True)
    ref = R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32)
    outs = {}
    for red in ("kernel", "atomic"):
        cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, GROUP_M=1, num_warps=4, num_stages=3, split_k=split, reduce=red)
        plan = T.plan_quant_matmul(M, N, K, torch.device("cpu"), cfg, backend_key="cuda")
        assert plan["SPLIT_K"] > 1
        outs[red] = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, config=cfg, backend_key="cuda")
    assert torch.equal(outs["kernel"], outs["atomic"])
    assert_close(outs["atomic"], ref, "fp32")
    buf, _ = QC.COUNTERS[("cpu", None)]
    assert int(buf.abs().sum()) == 0, "split-K counters must be reset by the reducing program"


@pytest.mark.parametrize("M,K,N,split,even", [(1, 2048, 96, 1, True), (3, 1536, 200, 3, True), (5, 1000, 40, 2, False),
                                                (17, 1024, 40, 1, True)])
def test_mask_m_rows_past_m_masked_not_wrapped(M, K, N, split, even, gen):
    """mask_m (CUDA, with wrap): rows past M of the x tile are masked instead of wrapped (% M), so a decode
    GEMM at M = 1 does not issue 16 loads of the same row from every program. Bit-identical to the wrapped
    path and to the reference, split-K with the in-kernel reduction included, K a multiple of BLOCK_K or not."""
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, bias=True)
    ref = R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32)
    bk = 64
    cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=bk, GROUP_M=1, num_warps=4, num_stages=3, split_k=split, reduce="atomic")
    assert (K % bk == 0) == even
    wrapped = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, config=cfg, backend_key="cuda")
    masked = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, config=dict(cfg, mask_m=True),
                                   backend_key="cuda")
    assert torch.equal(wrapped, masked)
    assert_close(masked, ref, "fp32")


@_host
def test_split_target_per_bucket_and_counter_regions():
    b = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=5, split_k="auto")
    p1 = T.plan_quant_matmul(1, 2112, 7168, torch.device("cpu"), b, backend_key="cuda")
    p2 = T.plan_quant_matmul(1, 2112, 7168, torch.device("cpu"), dict(b, split_target=264), backend_key="cuda")
    assert p1["SPLIT_K"] == 1 and p2["SPLIT_K"] == 7, "the bucket's split_target (264 // 33 = 8 → 7 BLOCK_K-aligned splits)"
    c1 = QC.counters(torch.device("cpu"), 33)
    c2 = QC.counters(torch.device("cpu"), 200)
    assert c1.data_ptr() == c2.data_ptr() and c1.numel() >= 200, "one region per stream, reused"
    big = QC.counters(torch.device("cpu"), QC.CNT_REGION + 1)
    assert big.numel() == QC.CNT_REGION + 1 and int(big.abs().sum()) == 0


# ----------------------------------------------------------------------------------------------
# the CUDA fast paths against the field cases and adversarial inputs
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("M", [1, 2, 15, 16, 17])
@pytest.mark.parametrize("mask_m", [False, True])
def test_Q1_token_counts_through_the_atomic_split_k_reduction(M, mask_m, gen):
    """Q1 through the in-kernel (last-arriving split) reduction with a split-K decode tile (test_Q1_token_counts'
    K = 256 never splits), x rows wrapped or masked: bit-identical to the reference."""
    K, N = 1536, 72
    b = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=3, split_k=3, reduce="atomic",
             mask_m=mask_m)
    plan = T.plan_quant_matmul(M, N, K, torch.device("cpu"), b, backend_key="cuda")
    assert plan["SPLIT_K"] > 1 and plan["reduce"] == "atomic", plan
    x, w, ws, xs, bias = _qmm_inputs(M, K, N, gen, bias=True)
    out = T.quant_matmul_config(x, w, ws, xs, bias=bias, out_dtype=torch.float32, config=b, backend_key="cuda")
    assert torch.equal(out, R.quant_matmul(x, w, ws, xs, bias=bias, out_dtype=torch.float32))


def test_split_k_counters_survive_changing_shapes_and_overflowing_the_region(gen, monkeypatch):
    """Consecutive atomic split-K calls with different M / N (tile counts below, above and again below a counter
    region, the ones above take a fresh buffer): every result exact, the shared region left at zero each time."""
    monkeypatch.setattr(QC, "CNT_REGION", 4)
    monkeypatch.setattr(QC, "COUNTERS", {})
    cfg = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=64, GROUP_M=1, num_warps=4, num_stages=3, split_k=3, reduce="atomic")
    for M, N in ((3, 40), (20, 90), (1, 16), (33, 50), (5, 64)):   # tiles 3, 12, 1, 12, 4
        x, w, ws, xs, b = _qmm_inputs(M, 700, N, gen, bias=True)
        out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, config=cfg, backend_key="cuda")
        assert torch.equal(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32)), (M, N)
        buf, _ = QC.COUNTERS[("cpu", None)]
        assert int(buf.abs().sum()) == 0, (M, N)


def _scales_with_all_ones_significands(gen, n):
    """fp32 absmax values whose scale = absmax/127 has a significand of all (or nearly all) ones — the hard
    divisors for a reciprocal-based quotient — spread over the exponent range, down to subnormal scales."""
    e = torch.randint(-140, 120, (n,), generator=gen).double()
    m = 2.0 - 2.0 ** -23 * torch.randint(1, 4, (n,), generator=gen).double()
    return (m * torch.pow(2.0, e) * 127.0).float()


def test_fast_quotient_adversarial_rows_and_smooth_scales(gen):
    """The reciprocal + Markstein quotient (config fast) vs reference/quant.py, bit for bit: rows whose scale has
    an all-ones significand (exponents 2^-140 .. 2^120, i.e. subnormal to near the fp32 max), ties of those
    scales, ±FLT_MAX, the smallest subnormal, and smooth_scales holding zeros, negatives, a subnormal and inf."""
    K = 64
    amax = _scales_with_all_ones_significands(gen, 12)
    rows = []
    for a in amax.tolist():
        s = torch.tensor(a, dtype=torch.float32) / torch.tensor(127.0)
        k = torch.randint(-126, 126, (K,), generator=gen).double() + 0.5
        r = (k * float(s)).float()                                    # near/at ties of this row's scale
        r[0] = -a                                                     # the absmax element, negative (Q5)
        rows.append(r)
    big = torch.full((K,), 3.4028234663852886e38)
    big[1::2] *= -1
    rows.append(big)                                                  # scale = FLT_MAX / 127
    rows.append(torch.full((K,), 1.401298464324817e-45))              # scale 0 (absmax / 127 underflows)
    x = torch.stack(rows)
    smooth = 0.5 + torch.rand(K, generator=gen)
    smooth[3], smooth[5], smooth[7], smooth[9] = 0.0, -1.25, 1e-40, -0.0
    smooth_inf = smooth.clone()
    smooth_inf[11] = float("inf")                                     # inf·0 → NaN rows, inf rows elsewhere
    for s in (None, smooth, smooth_inf):
        rq, rs = R.dynamic_quant(x, smooth_scales=s)
        for cfg in (dict(max_block_k=8192, block_m=4, num_warps=4, fast=True),
                    dict(max_block_k=16, block_m=2, num_warps=4, fast=True)):
            q, sc = T.dynamic_quant_config(x, smooth_scales=s, config=cfg)
            assert torch.equal(q, rq), (s is None, cfg, (q != rq).nonzero()[:5].tolist())
            assert torch.equal(sc.nan_to_num(nan=-1.0), rs.nan_to_num(nan=-1.0))


_ATOMIC_SPLIT = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=3, split_k=4,
                     reduce="atomic")


def _cuda_atomic_split_k_case(M: int, seed: int):
    """(dev, x, w, ws, xs, bias, plan) of a K7168 N4096 decode GEMM on CUDA with the atomic split-K config."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(seed)
    K, N = 7168, 4096
    x, w, ws, xs, b = (t.to(dev) if t is not None else None for t in _qmm_inputs(M, K, N, g, bias=True))
    plan = T.plan_quant_matmul(M, N, K, dev, _ATOMIC_SPLIT)
    assert plan["SPLIT_K"] > 1 and plan.get("reduce") == "atomic"
    return dev, x, w, ws, xs, b, plan


@_gpu
def test_split_k_counters_under_cuda_graph_capture_and_a_second_stream():
    """(GPU) The first-ever atomic split-K call inside a graph capture; eager calls on the default stream and
    a side stream interleaved with replays: every result bit-identical to the two-kernel split-K path (int32
    sums are exact), counters back at zero."""
    dev, x, w, ws, xs, b, plan = _cuda_atomic_split_k_case(4, seed=5)
    QC.COUNTERS.pop(("cuda", dev.index), None)
    QC.COUNTERS.pop(("cuda", torch.cuda.current_device()), None)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        T.quant_matmul_config(x, w, ws, xs, bias=b, config=_ATOMIC_SPLIT)                          # warm-up (compiles; creates the buffer)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    QC.COUNTERS.clear()                                               # the capture is the first call again
    with torch.cuda.graph(graph):
        out_g = T.quant_matmul_config(x, w, ws, xs, bias=b, config=_ATOMIC_SPLIT)
    want = T.quant_matmul_config(x, w, ws, xs, bias=b, config=dict(plan, reduce="kernel"))   # two-kernel path
    assert_close(want.float().cpu(), R.quant_matmul(x.cpu(), w.cpu(), ws.cpu(), xs.cpu(), bias=b.cpu()).float(), "bf16")
    for _ in range(3):
        graph.replay()
        eager = T.quant_matmul_config(x, w, ws, xs, bias=b, config=_ATOMIC_SPLIT)
        with torch.cuda.stream(side):
            eager2 = T.quant_matmul_config(x, w, ws, xs, bias=b, config=_ATOMIC_SPLIT)
        torch.cuda.synchronize()
        assert torch.equal(out_g, want) and torch.equal(eager, want) and torch.equal(eager2, want)
    for buf, _ in QC.COUNTERS.values():
        assert int(buf.abs().sum()) == 0


@_gpu
def test_split_k_graphs_replayed_concurrently_on_two_streams():
    """(GPU) Two graphs holding atomic split-K calls, replayed at the same time on two streams (two-batch
    overlap): each captured call owns its counters, so both stay bit-identical to the two-kernel path."""
    dev, x, w, ws, xs, b, plan = _cuda_atomic_split_k_case(8, seed=6)
    want = T.quant_matmul_config(x, w, ws, xs, bias=b, config=dict(plan, reduce="kernel"))
    T.quant_matmul_config(x, w, ws, xs, bias=b, config=_ATOMIC_SPLIT)
    torch.cuda.synchronize()
    graphs, outs = [], []
    for _ in range(2):
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            outs.append([T.quant_matmul_config(x, w, ws, xs, bias=b, config=_ATOMIC_SPLIT) for _ in range(8)])
        graphs.append(gr)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    for _ in range(5):
        s1.wait_stream(torch.cuda.current_stream())
        s2.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s1):
            graphs[0].replay()
        with torch.cuda.stream(s2):
            graphs[1].replay()
        torch.cuda.synchronize()
        for o in outs[0] + outs[1]:
            assert torch.equal(o, want)


# ----------------------------------------------------------------------------------------------
# every table: it parses, every bucket is reachable, every bucket's config runs right (a retune cannot fail these)
# ----------------------------------------------------------------------------------------------
_TABLES = sorted(T.tables())
_QMM_BUCKETS = [(t, i) for t in _TABLES for i in range(len(T.tables()[t]["quant_matmul"]["buckets"]))]
_ROW_BUCKETS = [(t, op, i) for t in _TABLES for op in QR.ROW_OPS
                for i in range(len(T.tables()[t][op].get("buckets", [{}])))]
# a tile with rows past M masked (mask_m) over all of K: the decode tile kind the CUDA table uses at M <= 16
_MASK_CFG = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=512, GROUP_M=1, num_warps=4, num_stages=9, split_k=1,
                 reduce="atomic", mask_m=True)


def _first_shape(buckets: list, i: int, dims=("M", "N", "K")) -> dict:
    """A shape (the smallest, dimension by dimension, among the table's bounds) that bucket ``i`` is picked for."""
    import itertools
    from ops.triton._common import bounds, select
    cuts = [sorted({max(v, 1) for v in bounds(buckets, d)}) or [1] for d in dims]
    for point in itertools.product(*cuts):
        shape = dict(zip(dims, point))
        if select(buckets, **shape) is buckets[i]["config"]:
            return shape
    raise AssertionError(f"bucket {i} is unreachable")


@_host
def test_every_table_parses_and_every_bucket_is_reachable():
    """configs/<backend>/quant.json: each quant_matmul bucket and row config passes its launcher's check, the last
    bucket matches every shape, no bucket is shadowed by the ones before it, and each is picked for some shape."""
    for t in _TABLES:
        q = T.tables()[t]["quant_matmul"]
        assert unreachable(q["buckets"]) == [], t
        for i, b in enumerate(q["buckets"]):
            shape = _first_shape(q["buckets"], i)
            assert T.bucket(shape["M"], shape["N"], shape["K"], q) is b["config"]
            p = T.plan_quant_matmul(shape["M"], shape["N"], shape["K"], _CPU, backend_key=t)
            assert p["K_PER_SPLIT"] % p["BLOCK_K"] == 0 and p["SPLIT_K"] * p["K_PER_SPLIT"] >= shape["K"]
        for op in QR.ROW_OPS:
            sec = T.tables()[t][op]
            if "buckets" in sec:
                assert unreachable(sec["buckets"]) == [], (t, op)
            for M in (1, 2, 17, 4096):
                QR.check_row_config(QR.row_config(op, M, t))


@_host
def test_config_grammar_first_match_wins():
    """ops/triton/_common.py: ranges are inclusive at both ends, null = no upper bound, a bool matches equal, a list
    of boxes matches when any does, the first matching bucket wins; resolve merges the section's keys under the
    bucket's; unreachable finds shadowed buckets; check_buckets refuses a table without a final catch-all."""
    from ops.triton._common import check_buckets, resolve, select
    b = [{"match": {"M": [1, 16], "N": [0, 2560]}, "config": {"t": "narrow"}},
         {"match": [{"M": [1, 16]}, {"int8": True}], "config": {"t": "decode-or-int8"}},
         {"match": {"M": [17, None]}, "config": {"t": "wide"}},
         {"match": {"M": [100, 200]}, "config": {"t": "shadowed"}},
         {"config": {"t": "rest"}}]
    check_buckets(b[:3] + b[4:], "t")
    got = lambda **d: select(b, **{"N": 0, "int8": False, **d})["t"]   # noqa: E731
    assert (got(M=1, N=2560), got(M=16, N=2561), got(M=17), got(M=1 << 40), got(M=0), got(M=0, int8=True)) == (
        "narrow", "decode-or-int8", "wide", "wide", "rest", "decode-or-int8")
    assert unreachable(b) == [3]
    assert resolve({"k": 1, "t": "section", "buckets": b}, M=20, N=0, int8=False) == {"k": 1, "t": "wide"}
    assert resolve({"k": 1}, M=20) == {"k": 1}
    with pytest.raises(KeyError, match="'N'"):
        select(b, M=1)
    with pytest.raises(ValueError, match="last bucket must match every"):
        check_buckets(b[:3], "t")


@pytest.mark.parametrize("table,i", _QMM_BUCKETS, ids=[f"{t}-b{i}" for t, i in _QMM_BUCKETS])
def test_every_quant_matmul_bucket_runs_right(table, i, gen):
    """Each bucket's config on small shapes with K and N tails (the interpreter runs the CUDA tiles too): equal to
    the reference (fp32 out bit for bit), the split-K counters left at zero. A streaming-GEMV bucket runs at its
    1..4 token rows."""
    b = T.tables()[table]["quant_matmul"]["buckets"][i]["config"]
    rows = (1, 3) if b.get("mma") == "gemv_stream" else (1, 17)
    for M, K, N in ((rows[0], 300, 40), (rows[1], 1100, 72)):
        x, w, ws, xs, bias = _qmm_inputs(M, K, N, gen, bias=True)
        out = T.quant_matmul_config(x, w, ws, xs, bias=bias, out_dtype=torch.float32, config=b, backend_key=table)
        _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=bias, out_dtype=torch.float32), torch.float32)
    for buf, _ in QC.COUNTERS.values():
        assert int(buf.abs().sum()) == 0


@pytest.mark.parametrize("table,op,i", _ROW_BUCKETS, ids=[f"{t}-{op}-b{i}" for t, op, i in _ROW_BUCKETS])
def test_every_row_config_runs_right(table, op, i, gen):
    """Each row config (a bucket's, merged with its section's keys) on rows that fit in registers and rows that
    need sweeps: dynamic_quant bit for bit, rms_norm_dynamic_quant within ±1 LSB (fp32 reduction order)."""
    sec = T.tables()[table][op]
    cfg = {**{k: v for k, v in sec.items() if k != "buckets"}, **(sec["buckets"][i]["config"] if "buckets" in sec
                                                                   else {})}
    for M, K in ((3, 300), (5, 2 * int(cfg["max_block_k"]) + 3)):
        x = torch.randn(M, K, generator=gen).to(torch.float16)
        s = 0.5 + torch.rand(K, generator=gen)
        if op == "dynamic_quant":
            q, sc = T.dynamic_quant_config(x, smooth_scales=s, config=cfg)
            rq, rs = R.dynamic_quant(x, smooth_scales=s)
            assert torch.equal(q, rq) and torch.equal(sc, rs), (M, K)
        else:
            g = 0.5 + torch.rand(K, generator=gen)
            q, sc, ro = T.rms_norm_dynamic_quant_config(x, g, residual=x.flip(0), smooth_scales=s, config=cfg)
            rq, rs, rro = R.rms_norm_dynamic_quant(x, g, residual=x.flip(0), smooth_scales=s)
            assert torch.equal(ro, rro) and (q.int() - rq.int()).abs().max() <= 1
            assert_close(sc, rs, "fp32", name="scale")


def _exact_vs_reference(out, ref, out_dtype, ref32=None):
    """fp32 / fp16: bit-identical (same fp32 epilogue, one RNE cast). bf16: the fp32 reference ``ref32`` cast to
    nearest even (the GPU) or truncated (the interpreter's fp32 -> bf16 cast), bit for bit; the bf16 tolerance
    alone is too tight for truncation (cos_diff 0.7–1.4e-5 at K = 1100)."""
    assert out.shape == ref.shape and out.dtype == ref.dtype
    if out_dtype == torch.bfloat16:
        trunc = (ref32.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)
        assert torch.equal(out, ref) or torch.equal(out, trunc)
    else:
        assert torch.equal(out, ref), (out - ref).abs().max()


@pytest.mark.parametrize("M", [0, 1, 2, 3, 15, 16, 17])
@pytest.mark.parametrize("K", [1, 100, 512, 1368])
def test_Q1_Q2_Q6_cuda_table_through_the_registered_op(M, K, gen, cuda_table, monkeypatch):
    """The registered op on the "cuda" table at decode token counts (K < BLOCK_K, = BLOCK_K, a tail, K = 1), M = 0
    an empty result (Q6), N = 40 (not a multiple of the column tiles: wrapped columns, never stored). Bit-identical
    to the reference; the streaming GEMV runs exactly when the plan names it."""
    N = 40
    gemv_calls = []
    launch = T.quant_matmul_gemv
    monkeypatch.setattr(T, "quant_matmul_gemv", lambda *a, **kw: gemv_calls.append(1) or launch(*a, **kw))
    wants_gemv = M > 0 and T.plan_quant_matmul(M, N, K, _CPU).get("mma") == "gemv_stream"
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, bias=True)
    out = ops.quant.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32)
    _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32), torch.float32)
    assert len(gemv_calls) == (1 if wants_gemv else 0)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bias_dtype", [None, torch.float32, torch.float16])
def test_mask_m_tile_out_dtypes_and_bias(out_dtype, bias_dtype, gen):
    """The mask_m tile with every out dtype, no bias / fp32 / fp16 bias, M = 3 (13 masked rows), K = 1100 (two
    full BLOCK_K 512 steps and a tail)."""
    M, K, N = 3, 1100, 48
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, bias=bias_dtype is not None, bias_dtype=bias_dtype or torch.float32)
    out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=out_dtype, config=_MASK_CFG, backend_key="cuda")
    _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=out_dtype), out_dtype,
                        R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32))


@pytest.mark.parametrize("view", ["column_slice", "row_step", "transposed"])
def test_mask_m_tile_non_contiguous_x(view, gen):
    """x as a column slice of a wider tensor (row stride K + 7), every other row of a taller one, and a transposed
    [K, M] tensor (copied by the launcher): masked rows past M use the row stride, never wrap into real rows."""
    M, K, N = 5, 700, 40
    x0, w, ws, xs, b = _qmm_inputs(M, K, N, gen, bias=True)
    if view == "column_slice":
        wide = torch.randint(-127, 128, (M, K + 7), generator=gen, dtype=torch.int8)
        wide[:, 4:4 + K] = x0
        x = wide[:, 4:4 + K]
    elif view == "row_step":
        tall = torch.randint(-127, 128, (2 * M, K), generator=gen, dtype=torch.int8)
        tall[::2] = x0
        x = tall[::2]
    else:
        x = x0.t().contiguous().t()
    assert not x.is_contiguous() and torch.equal(x, x0)
    out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, config=_MASK_CFG, backend_key="cuda")
    _exact_vs_reference(out, R.quant_matmul(x0, w, ws, xs, bias=b, out_dtype=torch.float32), torch.float32)


@pytest.mark.parametrize("M,K,N,split,reduce,group_m,layout", [
    (1, 1100, 40, 3, "kernel", 1, "kmajor"),       # split-K, two-kernel reduction, K tail in the last split
    (15, 1536, 24, 2, "atomic", 1, "rowmajor"),    # row-major weight (W_LAYOUT 1) under WRAP
    (7, 700, 33, 1, "atomic", 1, "anystride"),     # any-stride weight (W_LAYOUT 2)
    (40, 1024, 20, 2, "atomic", 2, "kmajor"),      # three M blocks (last partial) with GROUP_M 2
])
def test_mask_m_split_k_reductions_layouts_and_groups(M, K, N, split, reduce, group_m, layout, gen):
    """mask_m with split-K and either reduction, every weight layout, GROUP_M > 1 with
    several M blocks; bit-identical to the wrapped path and to the reference, the tile counters left at zero."""
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, layout=layout, bias=True)
    cfg = dict(_MASK_CFG, GROUP_M=group_m, split_k=split, reduce=reduce)
    plan = T.plan_quant_matmul(M, N, K, torch.device("cpu"), cfg, backend_key="cuda")
    assert plan["SPLIT_K"] == split
    outs = [T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, config=dict(cfg, mask_m=mm),
                                  backend_key="cuda") for mm in (False, True)]
    assert torch.equal(outs[0], outs[1])
    _exact_vs_reference(outs[1], R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32), torch.float32)
    if split > 1 and reduce == "atomic":
        buf, _ = QC.COUNTERS[("cpu", None)]
        assert int(buf.abs().sum()) == 0


@_host
def test_compile_cases_mirror_their_buckets():
    """compile_cases(table) (the offline sm_90 / Ascend compile checks) builds each tiled-GEMM bucket with its own
    tile, MASK_M, MMA and K_BATCH (PDL only on "cuda"), fused-only when the bucket never splits; names unique."""
    for t in _TABLES:
        q = T.tables()[t]["quant_matmul"]
        cases = [c for c in T.compile_cases(t) if _kname(c) == "_qmm_kernel"]
        for i, bk in enumerate(q["buckets"]):
            b = bk["config"]
            mine = [c for c in cases if c["name"].startswith(f"quant_matmul_b{i}_")]
            if b.get("mma") == "gemv_stream":
                assert not mine
                continue
            assert len(mine) == (8 if b.get("split_k", "auto") == "auto" else 4), (t, i)
            for c in mine:
                ce = c["constexprs"]
                assert (ce["BLOCK_M"], ce["BLOCK_N"], ce["BLOCK_K"]) == (b["BLOCK_M"], b["BLOCK_N"], b["BLOCK_K"])
                assert ce["MASK_M"] == bool(b.get("mask_m", False)) and ce["MMA"] == T.MMA_MODES[b.get("mma", "dot")]
                assert ce["K_BATCH"] == int(b.get("k_batch", 1)) and ce["WRAP"] == bool(q.get("wrap", False))
                assert ce["PDL"] == (bool(b.get("pdl", False)) and t == "cuda")
                if b.get("split_k", "auto") != "auto" and int(b["split_k"]) == 1:
                    assert not ce["PARTIALS"]
        names = [c["name"] for c in T.compile_cases(t)]
        assert len(names) == len(set(names)), t


# ----------------------------------------------------------------------------------------------
# tiled-GEMM variants: bucket key "mma" ("swap": swap-AB tl.dot of the transposed tiles, a constexpr switch of
# _qmm_kernel) and "k_batch" (each BLOCK_K step as k_batch slices in one batched dot)
# ----------------------------------------------------------------------------------------------
def _variant(mma, bm, bn, bk, split=1, reduce="atomic", mask_m=True, k_batch=1):
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=4, num_stages=3, split_k=split,
                reduce=reduce, mask_m=mask_m, mma=mma, k_batch=k_batch)


_VARIANT_CASES = [
    # mma, BM, BN, BK, split, reduce, mask_m, M, K, N, weight layout, config table (cuda: wrap; ascend: masks), k_batch
    ("swap", 16, 32, 128, 1, "atomic", True, 1, 300, 40, "kmajor", "cuda", 1),     # K and N tails, 15 masked rows
    ("swap", 16, 32, 128, 3, "atomic", True, 17, 700, 72, "kmajor", "cuda", 1),    # M = 17: a 1-row M block; short last split
    ("swap", 16, 32, 64, 5, "atomic", True, 9, 1100, 40, "kmajor", "cuda", 1),     # 5 splits
    ("dot", 16, 16, 128, 6, "atomic", True, 3, 1500, 24, "rowmajor", "cuda", 1),   # the default MMA, 6 splits
    ("swap", 16, 64, 64, 2, "kernel", False, 5, 512, 64, "rowmajor", "cuda", 1),   # wrapped rows, two-kernel reduce
    ("swap", 32, 16, 128, 2, "atomic", True, 40, 384, 33, "anystride", "ascend", 1),  # masked loads, any-stride weight
    # k_batch: each BLOCK_K step as k_batch slices in one batched (3-D) dot into k_batch int32 accumulators
    ("dot", 16, 16, 256, 1, "atomic", True, 16, 1024, 48, "kmajor", "cuda", 4),    # even K, the M 3..16 tile's shape
    ("dot", 16, 16, 256, 1, "atomic", True, 3, 1100, 40, "kmajor", "cuda", 4),     # K tail inside a slice, N tail
    ("dot", 16, 32, 128, 3, "atomic", True, 17, 700, 72, "rowmajor", "cuda", 2),   # 3 splits, short last split
    ("dot", 16, 16, 128, 2, "kernel", False, 5, 520, 24, "anystride", "cuda", 4),  # wrapped rows, two-kernel reduce
    ("dot", 16, 16, 256, 1, "atomic", True, 9, 700, 20, "strided", "cuda", 2),     # a column slice of a row-major weight
    ("dot", 32, 16, 64, 2, "atomic", True, 40, 300, 33, "kmajor", "ascend", 2),    # masked loads (no wrap)
]


@pytest.mark.parametrize("case", _VARIANT_CASES,
                         ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}x{c[3]}-k{c[4]}{c[5][0]}-M{c[7]}K{c[8]}N{c[9]}-{c[10]}-{c[11]}"
                                       + (f"-kb{c[12]}" if c[12] > 1 else ""))
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_mma_variants_bit_identical_to_reference(case, out_dtype, gen):
    """Swap-AB tiles, the default MMA and k_batch tiles (poisoned outputs, bias, M / K / N not multiples of the tile,
    a K tail that ends inside a slice, split-K with both reductions, every weight layout, wrapped and masked loads):
    bit-identical to the reference, counters left at zero."""
    mma, bm, bn, bk, split, reduce, mask_m, M, K, N, layout, table, kb = case
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, layout=layout, bias=True)
    cfg = _variant(mma, bm, bn, bk, split, reduce, mask_m, k_batch=kb)
    assert T.plan_quant_matmul(M, N, K, torch.device("cpu"), cfg, backend_key=table)["SPLIT_K"] == split
    out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=out_dtype, config=cfg, backend_key=table)
    _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=out_dtype), out_dtype)
    if split > 1 and reduce == "atomic":
        buf, _ = QC.COUNTERS[("cpu", None)]
        assert int(buf.abs().sum()) == 0


@pytest.mark.parametrize("mma", ["dot", "swap"])
def test_mma_variants_non_contiguous_x_and_no_bias(mma, gen):
    """x a column slice of a wider tensor (row stride K + 5), no bias, fp32 out."""
    M, K, N = 3, 520, 24
    x0, w, ws, xs, _ = _qmm_inputs(M, K, N, gen)
    wide = torch.randint(-127, 128, (M, K + 5), generator=gen, dtype=torch.int8)
    wide[:, 2:2 + K] = x0
    x = wide[:, 2:2 + K]
    cfg = _variant(mma, 16, 16, 128, split=2)
    out = T.quant_matmul_config(x, w, ws, xs, out_dtype=torch.float32, config=cfg, backend_key="cuda")
    _exact_vs_reference(out, R.quant_matmul(x0, w, ws, xs, out_dtype=torch.float32), torch.float32)


@settings(max_examples=10)
@given(M=st.integers(1, 20), K=st.integers(1, 600), N=st.integers(1, 70), mma=st.sampled_from(["dot", "swap"]),
       split=st.integers(1, 3), seed=st.integers(0, 2**31 - 1))
def test_mma_variants_hypothesis(M, K, N, mma, split, seed):
    g = torch.Generator().manual_seed(seed)
    x, w, ws, xs, b = _qmm_inputs(M, K, N, g, bias=True)
    cfg = _variant(mma, 16, 16, 64, split=split)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "empty", poisoned_empty)
        out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, config=cfg, backend_key="cuda")
    _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32), torch.float32)


@_host
def test_mma_variant_config_errors_and_unknown_switches(gen):
    """An unknown mma is a ValueError; so is a config naming a key the launcher does not know (a typo, or a switch
    that no longer exists: mma "gemv", reduce_unroll, dynamic, stagger), whatever its value: through the launcher
    and the plan, before any launch."""
    x, w, ws, xs, _ = _qmm_inputs(2, 64, 16, gen)
    with pytest.raises(ValueError, match="mma must be one of"):
        T.quant_matmul_config(x, w, ws, xs, config=_variant("wgmma", 16, 16, 64), backend_key="cuda")
    with pytest.raises(ValueError, match="mma must be one of.*'wgmma'"):   # the plan refuses it too
        T.plan_quant_matmul(2, 16, 64, torch.device("cpu"), _variant("wgmma", 16, 16, 64), backend_key="cuda")
    assert set(T.MMA_MODES) == {"dot", "swap"}
    unknown = [(dict(_variant("gemv", 1, 16, 64)), "mma must be one of"),
               (dict(_variant("dot", 16, 16, 64, split=2), reduce_unroll=4), r"unknown quant_matmul config key\(s\) \['reduce_unroll'\]"),
               (dict(_variant("dot", 16, 16, 64, split=2), reduce_unroll=1), "'reduce_unroll'"),
               (dict(_variant("swap", 16, 16, 64), dynamic=2), "'dynamic'"),
               (dict(_variant("dot", 16, 16, 64), dynamic=0), "'dynamic'"),
               (dict(_variant("dot", 16, 16, 64), stagger=1), "'stagger'"),
               (dict(_variant("dot", 16, 16, 64), max_m=16), "'max_m'")]   # a match key is not a launch key
    for cfg, msg in unknown:
        for table in ("cuda", "ascend"):
            with pytest.raises(ValueError, match=msg):
                T.quant_matmul_config(x, w, ws, xs, config=cfg, backend_key=table)
            with pytest.raises(ValueError, match=msg):
                T.plan_quant_matmul(2, 16, 64, torch.device("cpu"), cfg, backend_key=table)


@_host
def test_compile_cases_carry_the_mma_switch():
    """qmm_cases builds a bucket's "mma" into the MMA constexpr (offline sm_90 / Ascend compile of a winner), fused
    only for one split; _qmm_kernel has no RED_UNROLL / DYNAMIC constexprs."""
    q = T.tables()["cuda"]["quant_matmul"]
    for mma, want in (("swap", 1), ("dot", 0)):
        cases = T.qmm_cases(_variant(mma, 16, 64, 256), q, "probe", "cuda")
        assert len(cases) == 4 and all(c["constexprs"]["MMA"] == want and not c["constexprs"]["PARTIALS"]
                                       for c in cases)
        assert not {"RED_UNROLL", "DYNAMIC"} & set(cases[0]["fn"].arg_names)
    assert len(T.qmm_cases(_variant("swap", 16, 64, 256, split="auto"), q, "probe", "cuda")) == 8


def _gpu_config_exact_eager_and_graph(M, K, N, cfg, g, dev):
    """``cfg`` at (M, K, N) on the GPU: fp32 out bit-identical to the CPU reference (no bias: no FMA contraction
    question), bf16 out with bias bit-identical to the default path, and a CUDA-graph replay (3×) equal to it."""
    x, w, ws, xs, b = _qmm_inputs(M, K, N, g, bias=True)
    ref32 = R.quant_matmul(x, w, ws, xs, out_dtype=torch.float32)
    x, w, ws, xs, b = (t.to(dev) for t in (x, w, ws, xs, b))
    o32 = T.quant_matmul_config(x, w, ws, xs, out_dtype=torch.float32, config=cfg)
    assert torch.equal(o32.cpu(), ref32), (M, K, N, cfg)
    want = T.quant_matmul(x, w, ws, xs, bias=b)
    eager = T.quant_matmul_config(x, w, ws, xs, bias=b, config=cfg)
    assert torch.equal(eager, want), (M, K, N, cfg)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_g = T.quant_matmul_config(x, w, ws, xs, bias=b, config=cfg)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out_g, want), (M, K, N, cfg)


@_gpu
def test_gpu_mma_variants_bit_identical_and_graph_safe():
    """(GPU) qkv_a's shape (K7168 N2112) at M 1 / 16 / 64 / 128 with swap-AB tiles and split-K, bf16 out:
    bit-identical to the default path and to the CPU reference (fp32 out), a CUDA-graph replay equals the eager
    call, the counters end at zero."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(11)
    K, N = 7168, 2112
    for M, cfg in ((1, _variant("swap", 16, 64, 256, split="auto")),
                   (16, _variant("swap", 16, 64, 256, split=4)), (64, _variant("swap", 64, 64, 128, split="auto")),
                   (128, _variant("swap", 128, 64, 128, split="auto")),
                   (16, _variant("dot", 16, 16, 256, split=7))):
        _gpu_config_exact_eager_and_graph(M, K, N, cfg, g, dev)
    for buf, _ in QC.COUNTERS.values():
        assert int(buf.abs().sum()) == 0


@pytest.mark.parametrize("M,K,N", [
    (65, 256, 8192),     # a 1-row second half of the 128-row tile, 32 column tiles
    (100, 300, 300),     # K (300) and N (300) not multiples of 128 / 256, 28 rows masked
    (128, 384, 520),     # full tile, 3 column tiles (the last one 8 columns wide)
])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_Q1_Q2_swap_tile_with_masked_rows_bit_identical(M, K, N, out_dtype, gen):
    """A 128 × 64 × 128 swap-AB tile with rows past M masked, one split (the tile kind the CUDA table gives wide-N
    GEMMs at M 65..128), on small analogues: poisoned outputs, bias, bit-identical to the reference."""
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, bias=True)
    cfg = dict(_variant("swap", 128, 64, 128, split=1), num_stages=3)
    p = T.plan_quant_matmul(M, N, K, torch.device("cpu"), cfg, backend_key="cuda")
    assert (p.get("mma"), p["SPLIT_K"], p["mask_m"]) == ("swap", 1, True), p
    out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=out_dtype, config=cfg, backend_key="cuda")
    _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=out_dtype), out_dtype)


# ----------------------------------------------------------------------------------------------
# the streaming GEMV (bucket key mma "gemv_stream", M <= 4): _qmm_gemv_kernel on a grid of
# SMs x programs_per_sm programs, each a contiguous run of (BLOCK_N weight rows x K split) items, int32 products
# accumulated elementwise over K, one sum per output; dp4a (CUDA only) is ignored by the interpreter.
# ----------------------------------------------------------------------------------------------
def _gs(bn, bk, split=1, reduce="atomic", ppc=4, w=4, dp4a=True, pf=False):
    return dict(BLOCK_M=4, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=w, num_stages=1, split_k=split,
                reduce=reduce, mma="gemv_stream", programs_per_sm=ppc, dp4a=dp4a, prefetch=pf)


_GS_CASES = [
    # BN, BK, split, reduce, programs per "SM" (interpreter: 20 SMs), M, K, N, weight layout, bias
    (4, 64, 1, "atomic", 4, 1, 300, 40, "kmajor", True),       # K tail (300 = 4x64 + 44), N exact: 10 items
    (8, 128, 3, "atomic", 1, 3, 700, 37, "kmajor", True),      # N tail (rows past N clamped), 15 items on 15 programs
    (2, 256, 2, "kernel", 1, 4, 1000, 9, "rowmajor", False),   # two-kernel reduce, row-major weight, 10 items
    (16, 64, 4, "atomic", 1, 2, 1000, 90, "strided", True),    # 6 tiles x 4 splits = 24 items: 2 per program
    (4, 64, 5, "atomic", 2, 4, 320, 30, "kmajor", True),       # K even (5 x 64), 8 tiles x 5 = 40 items
    (1, 128, 1, "atomic", 1, 1, 128, 45, "kmajor", False),     # one row per item, 45 items on 20 programs
    # prefetch (register double buffer): even K (the last step re-reads its own tile), K tail (masked past the end)
    (4, 64, 2, "atomic", 1, 2, 384, 20, "kmajor", True, True),  # 3 steps per split, 5 tiles x 2 splits
    (8, 128, 3, "kernel", 1, 4, 700, 37, "strided", True, True),
]


@pytest.mark.parametrize("case", _GS_CASES, ids=lambda c: f"bn{c[0]}-bk{c[1]}-k{c[2]}{c[3][0]}-p{c[4]}-M{c[5]}K{c[6]}N{c[7]}-{c[8]}"
                                                        f"{'-bias' if c[9] else ''}{'-pf' if len(c) > 10 else ''}")
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_gemv_stream_bit_identical_to_reference(case, out_dtype, gen):
    """mma "gemv_stream": M 1..4, K and N tails, split-K with both reductions, every weight layout, programs taking
    several items, poisoned outputs and partials: bit-identical to the reference; counters back at 0; repeated
    calls give the same bits (the counters restart at 0)."""
    bn, bk, split, reduce, ppc, M, K, N, layout, bias = case[:10]
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, layout=layout, bias=bias)
    cfg = _gs(bn, bk, split, reduce, ppc, pf=len(case) > 10)
    assert T.plan_quant_matmul(M, N, K, torch.device("cpu"), cfg, backend_key="cuda")["SPLIT_K"] == split
    ref = R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=out_dtype)
    for _ in range(2 if split > 1 and reduce == "atomic" and out_dtype == torch.float16 else 1):
        out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=out_dtype, config=cfg, backend_key="cuda")
        _exact_vs_reference(out, ref, out_dtype)
    if split > 1 and reduce == "atomic":
        buf, _ = QC.COUNTERS[("cpu", None)]
        assert int(buf.abs().sum()) == 0


def test_gemv_stream_non_contiguous_x_and_extremes(gen):
    """x a column slice of a wider tensor (row stride K + 5); then the int32 extremes (all −127 / 127: 127²·K)."""
    M, K, N = 4, 520, 24
    x0, w, ws, xs, _ = _qmm_inputs(M, K, N, gen)
    wide = torch.randint(-127, 128, (M, K + 5), generator=gen, dtype=torch.int8)
    wide[:, 2:2 + K] = x0
    x = wide[:, 2:2 + K]
    out = T.quant_matmul_config(x, w, ws, xs, out_dtype=torch.float32, config=_gs(8, 128, split=2), backend_key="cuda")
    _exact_vs_reference(out, R.quant_matmul(x0, w, ws, xs, out_dtype=torch.float32), torch.float32)
    K = 4096
    x = torch.full((3, K), -127, dtype=torch.int8)
    w = R.pack_weight(torch.full((K, 8), 127, dtype=torch.int8), "cuda")
    ws, xs = torch.ones(8), torch.ones(3)
    out = T.quant_matmul_config(x, w, ws, xs, out_dtype=torch.float32, config=_gs(4, 1024, split=3), backend_key="cuda")
    assert torch.equal(out, torch.full((3, 8), -127.0 * 127.0 * K))


# gemv_stream_int32, the streaming GEMV over two K-major weights side by side (ds::mla_prolog's down GEMM
# x @ [W_DQ | W_DKV_KR] at T = 1), int32 sums, no epilogue
@pytest.mark.parametrize("M,K,N1,N2,bn,bk,ppc,pf", [
    (1, 300, 16, 9, 4, 64, 1, True),     # K tail, N2 tail (rows past N clamped into the second weight)
    (2, 512, 8, 8, 8, 128, 4, False),    # even K, one tile per weight
    (4, 700, 24, 13, 1, 256, 2, True),   # one row per item, items on 40 programs
    (3, 130, 12, 0, 4, 64, 1, False),    # one weight only
])
def test_gemv_stream_int32_two_weights_exact(M, K, N1, N2, bn, bk, ppc, pf, gen):
    """part = x @ [w1 | w2] exactly (int32), every element written (part poisoned), for one or two weights."""
    x = torch.randint(-127, 128, (M, K), generator=gen, dtype=torch.int8)
    ws_ = [R.pack_weight(torch.randint(-127, 128, (K, n), generator=gen, dtype=torch.int8), "cuda")
           for n in ((N1, N2) if N2 else (N1,))]
    plan = dict(BLOCK_N=bn, BLOCK_K=bk, num_warps=1, programs_per_sm=ppc, dp4a=False, prefetch=pf, SPLIT_K=1)
    assert T.gemv_stream_int32_ok(x, tuple(ws_), plan)
    part = torch.empty((M, N1 + N2), dtype=torch.int32)
    T.gemv_stream_int32(x, tuple(ws_), part, plan)
    assert torch.equal(part, R.int8_matmul_exact(x, torch.cat(ws_, 1)))


@_host
def test_gemv_stream_int32_ok_rejects_what_it_cannot_read():
    """gemv_stream_int32_ok: one or two K-major int8 weights of equal strides, the first one's width a multiple of
    BLOCK_N (a misaligned weight is fine: the launch drops dp4a there); gemv_stream_plan is None off CUDA and for
    M > 4."""
    K = 256
    x = torch.zeros((1, K), dtype=torch.int8)
    a, b = (R.pack_weight(torch.zeros((K, n), dtype=torch.int8), "cuda") for n in (16, 8))
    plan = dict(BLOCK_N=4, BLOCK_K=128, dp4a=True)
    assert T.gemv_stream_int32_ok(x, (a, b), plan) and T.gemv_stream_int32_ok(x, (a,), plan)
    assert not T.gemv_stream_int32_ok(x, (a, torch.zeros((K, 8), dtype=torch.int8)), plan)       # row-major
    assert not T.gemv_stream_int32_ok(x, (a, R.pack_weight(torch.zeros((K + 4, 8), dtype=torch.int8),
                                                           "cuda")[:K]), plan)                       # other strides
    assert not T.gemv_stream_int32_ok(x, (a, b), dict(plan, BLOCK_N=32))                             # 16 % 32
    assert not T.gemv_stream_int32_ok(x, (a.float(), b), plan)                                       # not int8
    assert not T.gemv_stream_int32_ok(x, (), plan) and not T.gemv_stream_int32_ok(x, (a, b, b), plan)
    odd = torch.zeros((16 * (K + 1) + 1,), dtype=torch.int8)[1:].view(16, K + 1)[:, :K].t()        # misaligned
    assert odd.stride() == (1, K + 1) and T.gemv_stream_int32_ok(x, (odd,), plan)
    assert T.gemv_stream_plan(1, 2112, 7168, torch.device("cpu")) is None
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        p = T.gemv_stream_plan(1, 2112, 7168, dev)
        assert p is not None and p["mma"] == "gemv_stream" and p["SPLIT_K"] == 1
        assert T.gemv_stream_plan(5, 2112, 7168, dev) is None and T.gemv_stream_plan(16, 2112, 7168, dev) is None


@_gpu
def test_gemv_stream_int32_cuda_deepseek_down_shape():
    """On CUDA with the table's plan (dp4a): x [1, 7168] @ [W_DQ (7168 × 1536) | W_DKV_KR (7168 × 576)], exact; and
    at K 1002 (not a multiple of 4), where the launch drops dp4a and loads int8."""
    g = torch.Generator().manual_seed(14)
    dev = torch.device("cuda")
    for K in (7168, 1002):
        x = torch.randint(-127, 128, (1, K), generator=g, dtype=torch.int8)
        w = [R.pack_weight(torch.randint(-127, 128, (K, n), generator=g, dtype=torch.int8), "cuda") for n in (1536, 576)]
        plan = T.gemv_stream_plan(1, 2112, K, dev)
        xd, wd = x.to(dev), tuple(t.t().contiguous().t().to(dev) for t in w)
        assert plan is not None and plan.get("dp4a") and T.gemv_stream_int32_ok(xd, wd, plan)
        part = torch.full((1, 2112), -1, dtype=torch.int32, device=dev)
        T.gemv_stream_int32(xd, wd, part, plan)
        assert torch.equal(part.cpu(), R.int8_matmul_exact(x, torch.cat(w, 1))), K


@settings(max_examples=6)
@given(M=st.integers(1, 4), K=st.integers(1, 600), N=st.integers(1, 70), bn=st.sampled_from([1, 2, 4, 16]),
       split=st.integers(1, 3), ppc=st.integers(1, 3), pf=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_gemv_stream_hypothesis(M, K, N, bn, split, ppc, pf, seed):
    g = torch.Generator().manual_seed(seed)
    x, w, ws, xs, b = _qmm_inputs(M, K, N, g, bias=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "empty", poisoned_empty)
        out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32,
                                    config=_gs(bn, 64, split=split, ppc=ppc, pf=pf), backend_key="cuda")
    _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32), torch.float32)


def test_gemv_stream_rejects_more_than_four_rows(gen):
    x, w, ws, xs, _ = _qmm_inputs(5, 64, 16, gen)
    with pytest.raises(ValueError, match="at most 4 token rows"):
        T.quant_matmul_config(x, w, ws, xs, config=_gs(4, 64), backend_key="cuda")
    with pytest.raises(ValueError, match="gemv_stream"):   # the error for an unknown mode lists it
        T.quant_matmul_config(x, w, ws, xs, config=dict(_gs(4, 64), mma="gemv_x"), backend_key="cuda")


@_host
def test_gemv_stream_dp4a_layout_checks_and_compile_cases():
    """dp4a needs K % 4 == 0, a K-major weight with 4-byte aligned rows and aligned x rows (else the launcher
    takes int8 loads); a gemv_stream bucket becomes _qmm_gemv_kernel compile cases (dp4a only on "cuda")."""
    K, N = 64, 16
    w = R.pack_weight(torch.zeros((K, N), dtype=torch.int8), "cuda")
    x = torch.zeros((2, K), dtype=torch.int8)
    assert T.gemv_stream_dp4a_ok(x, w, 64)
    assert not T.gemv_stream_dp4a_ok(x, w, 62)
    assert not T.gemv_stream_dp4a_ok(x[:, 1:61], R.pack_weight(torch.zeros((60, N), dtype=torch.int8), "cuda"), 64)
    assert not T.gemv_stream_dp4a_ok(x, torch.zeros((K, N), dtype=torch.int8), 64)          # row-major weight
    assert not T.gemv_stream_dp4a_ok(torch.zeros((2, 62), dtype=torch.int8),
                                      R.pack_weight(torch.zeros((62, N), dtype=torch.int8), "cuda"), 64)
    # every gemv_stream bucket of every table: MROWS 1..its max rows (at most 4), even / tail K x bf16 / fp16, split
    # or not as its split_k allows, with the bucket's tile (BLOCK_K in int32 words under dp4a: "cuda" only)
    G = pytest.importorskip("ops.triton.quant_gemv")
    for t in _TABLES:
        gs = G.compile_cases(t)
        for i, bk in enumerate(T.tables()[t]["quant_matmul"]["buckets"]):
            b = bk["config"]
            mine = [c for c in gs if c["name"].startswith(f"quant_matmul_gemv_stream_b{i}_")]
            if b.get("mma") != "gemv_stream":
                assert not mine
                continue
            rows = min(4, QC.max_rows(bk) or 4)
            two = [c for c in mine if "_two_w_int32" in c["name"]]   # gemv_stream_int32's (mla_prolog, T = 1)
            assert len(two) == (2 if t == "cuda" and rows == 1 else 0)
            for c in two:
                ce = c["constexprs"]
                assert ce["TWO_W"] and ce["PARTIALS"] and not ce["REDUCE"] and not ce["HAS_BIAS"] and ce["MROWS"] == 1
                assert c["signature"]["out_ptr"] == c["signature"]["part_ptr"] == "*i32"
            mine = [c for c in mine if c not in two]
            splits = 2 if b.get("split_k", "auto") == "auto" else 1
            assert len(mine) == rows * 2 * 2 * splits
            dp4a = bool(b.get("dp4a")) and t == "cuda"
            for c in mine:
                ce = c["constexprs"]
                assert (ce["BLOCK_N"], ce["BLOCK_KU"], ce["DP4A"], ce["PREFETCH"], ce["TWO_W"]) == (
                    b["BLOCK_N"], b["BLOCK_K"] // (4 if dp4a else 1), dp4a, bool(b.get("prefetch")), False), c["name"]
                assert c["num_warps"] == b["num_warps"] and 1 <= ce["MROWS"] <= rows
                assert list(c["signature"]) == c["fn"].arg_names, c["name"]
        names = [c["name"] for c in gs]
        assert len(names) == len(set(names))
    # a bucket of four rows, on each table: M 1..4 cases, dp4a only on "cuda"
    for table, dp4a in (("cuda", True), ("ascend", False)):
        gs = G.gemv_stream_cases(_gs(4, 1024, split=1), 4, "probe", table)
        assert len(gs) == 4 * 2 * 2      # M 1..4 x even/tail x bf16/fp16, one split
        assert {c["constexprs"]["MROWS"] for c in gs} == {1, 2, 3, 4}
        assert all(c["constexprs"]["DP4A"] is dp4a and c["constexprs"]["BLOCK_KU"] == (256 if dp4a else 1024) for c in gs)
        assert len({c["name"] for c in gs}) == len(gs)
    probe = G.ascend_compile_cases()   # the portable kernel, Ascend-lowered
    assert probe and all(not c["constexprs"]["DP4A"] and not c["constexprs"]["REDUCE"] for c in probe)


# the streaming GEMV at M = 1 and M = 2 on small analogues of qkv_a / moe_gate, through every entry point: K tails,
# K % 4 != 0 and non-K-major weights (dp4a falls back to int8 loads on the GPU; the interpreter never takes dp4a),
# bias dtypes, out dtypes; outputs poisoned (the autouse fixture)
def _gemv_cfg(M: int) -> dict:
    """The "cuda" table's streaming-GEMV config for M token rows at N 40, K 7168 when it has one, else a GEMV tile."""
    p = T.plan_quant_matmul(M, 40, 7168, _CPU, backend_key="cuda")
    cfg = {k: v for k, v in p.items() if k not in ("SPLIT_K", "K_PER_SPLIT")}
    return cfg if cfg.get("mma") == "gemv_stream" else _gs(1 if M == 1 else 4, 1024, pf=M == 2)


_GEMV_TABLE_CASES = [
    # M, K, N, weight layout, bias dtype, out dtype, entry point
    (1, 1024, 37, "kmajor", torch.float32, torch.float32, "op"),       # K = BLOCK_K: one even step, dp4a-eligible
    (1, 1368, 24, "kmajor", None, torch.float16, "ds"),                # K tail (1024 + 344), no bias
    (1, 100, 40, "rowmajor", torch.float16, torch.float32, "kernel"),  # K < BLOCK_K, row-major weight, fp16 bias
    (1, 1022, 33, "strided", torch.float32, torch.float16, "op"),      # K % 4 != 0, column slice of a wider weight
    (1, 1030, 20, "kmajor", torch.float32, torch.float32, "ds"),       # K % 4 != 0 on a K-major weight
    (1, 2050, 17, "rowmajor", None, torch.bfloat16, "kernel"),         # three steps, K % 4 != 0, bf16 out
    (1, 2048, 16, "kmajor", torch.float16, torch.bfloat16, "kernel"),  # two even steps, bf16 out (the op refuses
    (1, 2048, 16, "kmajor", torch.float16, torch.float16, "ds"),       # a bf16 out on the CPU interpreter)
    (1, 1, 9, "kmajor", torch.float32, torch.float32, "op"),           # K = 1
    # M = 2 (the second bucket: 4-row tiles, register double buffer of the weight tile)
    (2, 2048, 38, "kmajor", torch.float32, torch.float32, "ds"),       # two even steps (prefetch re-reads the last), N tail
    (2, 1368, 24, "kmajor", None, torch.float16, "ds"),                # K tail (1024 + 344), no bias, fp16 out
    (2, 1022, 33, "kmajor", torch.float16, torch.float32, "ds"),       # K % 4 != 0 on a K-major weight: no dp4a
    (2, 100, 40, "rowmajor", torch.float32, torch.float16, "ds"),      # K < BLOCK_K, row-major weight
    (2, 3074, 13, "strided", torch.float32, torch.float32, "op"),      # three steps + tail, K % 4 != 0, strided weight
    (2, 1024, 9, "rowmajor", None, torch.float32, "kernel"),           # K = BLOCK_K on a row-major weight, no bias
    (2, 2048, 16, "kmajor", torch.float16, torch.bfloat16, "kernel"),  # bf16 out
    (2, 2048, 16, "kmajor", torch.float16, torch.float16, "ds"),
    (2, 1, 7, "kmajor", torch.float32, torch.float16, "ds"),           # K = 1
]


@pytest.mark.parametrize("case", _GEMV_TABLE_CASES,
                         ids=lambda c: f"M{c[0]}-K{c[1]}-N{c[2]}-{c[3]}-bias{str(c[4])[6:] if c[4] else 'None'}-{str(c[5])[6:]}-{c[6]}")
def test_Q1_gemv_stream_m1_m2_bit_identical(case, gen, cuda_table, monkeypatch):
    """M = 1 and M = 2: the streaming GEMV's config (the "cuda" table's when it has one) through the launcher, and the
    "cuda" table through ops.quant.quant_matmul / torch.ops.ds.quant_matmul, bit-identical to the reference (bf16:
    RNE or the interpreter's truncation of the fp32 reference); the GEMV launcher runs exactly when the plan names
    it; outputs start poisoned; the dp4a layout check says no exactly for K % 4 != 0 and the non-K-major weights."""
    M, K, N, layout, bias_dtype, out_dtype, entry = case
    calls = []
    launch = T.quant_matmul_gemv
    monkeypatch.setattr(T, "quant_matmul_gemv", lambda *a, **kw: calls.append(a[6]) or launch(*a, **kw))
    assert torch.empty(3).isnan().all(), "outputs must start poisoned"
    cfg = _gemv_cfg(M)
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, layout=layout, bias=bias_dtype is not None,
                                  bias_dtype=bias_dtype or torch.float32)
    assert T.gemv_stream_dp4a_ok(x, w, int(cfg["BLOCK_K"])) == (K % 4 == 0 and layout == "kmajor" and
                                                                 cfg["BLOCK_K"] % 4 == 0)
    if entry == "kernel":
        out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=out_dtype, config=cfg)
        wants = True
    else:
        out = {"op": ops.quant.quant_matmul, "ds": torch.ops.ds.quant_matmul}[entry](x, w, ws, xs, bias=b,
                                                                                   out_dtype=out_dtype)
        wants = T.plan_quant_matmul(M, N, K, _CPU).get("mma") == "gemv_stream"
    assert len(calls) == int(wants) and all(c["mma"] == "gemv_stream" for c in calls), calls
    _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=out_dtype), out_dtype,
                        R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32))


@pytest.mark.parametrize("M", [1, 2])
def test_Q1_gemv_stream_m1_m2_extremes_and_n_edge(M, gen):
    """The M = 1 and M = 2 GEMV configs at the int32 extremes (all −127 x 127: 127²·K, K = 4096) and at N = 2560
    (every one of the M x N outputs written, none left poisoned): exact."""
    cfg = _gemv_cfg(M)
    K = 4096
    x = torch.full((M, K), -127, dtype=torch.int8)
    w = R.pack_weight(torch.full((K, 8), 127, dtype=torch.int8), "cuda")
    out = T.quant_matmul_config(x, w, torch.ones(8), torch.ones(M), out_dtype=torch.float32, config=cfg)
    assert torch.equal(out, torch.full((M, 8), -127.0 * 127.0 * K))
    K, N = 520, 2560
    x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, bias=True)
    out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, config=cfg)
    _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32), torch.float32)


@_gpu
def test_gpu_gemv_stream_m1_m2_decode_shapes():
    """(GPU) qkv_a (K7168 N2112) and moe_gate (K7168 N2048) at M = 1 and M = 2 on the streaming GEMV (the table's
    config when it has one) with dp4a taken (K-major weight); without bias fp32 out bit-identical to the CPU reference
    and bf16 out to its RNE cast (two fp32 multiplies, one cast); a row-major weight (dp4a off) gives the same bits;
    with bias (an FMA may contract the epilogue) within the bf16 tolerance."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(21)
    for M, K, N in ((1, 7168, 2112), (1, 7168, 2048), (2, 7168, 2112), (2, 7168, 2048)):
        p = T.plan_quant_matmul(M, N, K, dev)
        p = p if p.get("mma") == "gemv_stream" else T.plan_quant_matmul(M, N, K, dev, _gemv_cfg(M))
        x, w, ws, xs, b = _qmm_inputs(M, K, N, g, bias=True)
        ref32 = R.quant_matmul(x, w, ws, xs, out_dtype=torch.float32)
        xd, wd, wsd, xsd, bd = (t.to(dev) for t in (x, w, ws, xs, b))
        assert T.gemv_stream_dp4a_ok(xd, wd, int(p["BLOCK_K"]))
        o32 = T.quant_matmul_config(xd, wd, wsd, xsd, out_dtype=torch.float32, config=p)
        assert torch.equal(o32.cpu(), ref32), (M, K, N)
        assert torch.equal(T.quant_matmul_config(xd, wd, wsd, xsd, config=p).cpu(), ref32.to(torch.bfloat16)), (M, K, N)
        wr = wd.contiguous()
        assert not T.gemv_stream_dp4a_ok(xd, wr, int(p["BLOCK_K"]))
        assert torch.equal(T.quant_matmul_config(xd, wr, wsd, xsd, out_dtype=torch.float32, config=p).cpu(), ref32), (M, K, N)
        assert_close(T.quant_matmul_config(xd, wd, wsd, xsd, bias=bd, config=p).cpu(), R.quant_matmul(x, w, ws, xs, bias=b), "bf16")


@_gpu
def test_gpu_gemv_stream_dp4a_bit_identical_and_graph_safe():
    """(GPU) qkv_a's shape (K7168 N2112) at M 1..4 and a K / N tail shape through gemv_stream with and without dp4a,
    fused and split-K (atomic), bf16 out: bit-identical to the default path and to the CPU reference (fp32 out),
    CUDA-graph replay equals the eager call, counters end at zero."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(12)
    for (M, K, N), cfg in (((1, 7168, 2112), _gs(4, 1024)), ((1, 7168, 2112), _gs(2, 1024, w=2, ppc=8)),
                           ((2, 7168, 2112), _gs(4, 1024, split=2, ppc=8)), ((4, 7168, 2112), _gs(8, 1024, split=2)),
                           ((3, 1000, 301), _gs(4, 256, split=3)), ((1, 7168, 2112), _gs(4, 1024, dp4a=False)),
                           ((3, 998, 301), _gs(4, 256, split=2)),    # K % 4 != 0: int8 loads
                           ((1, 7168, 2112), _gs(4, 1024, pf=True)), ((2, 1000, 301), _gs(4, 256, split=3, pf=True)),
                           ((1, 7168, 2112), _gs(4, 1024, dp4a=False, pf=True))):
        _gpu_config_exact_eager_and_graph(M, K, N, cfg, g, dev)
    for buf, _ in QC.COUNTERS.values():
        assert int(buf.abs().sum()) == 0


@pytest.mark.parametrize("M", [3, 4])
@pytest.mark.parametrize("pf", [False, True])
def test_gemv_stream_unsplit_three_and_four_rows(M, pf, gen):
    """The fused epilogue of _qmm_gemv_kernel (SPLIT_K = 1) for token rows 2 and 3: each row's own x_scale
    (xs2 / xs3, loaded before the K loop). _GS_CASES ran M = 3 / 4 only split-K, where the epilogue is another code path."""
    x, w, ws, xs, b = _qmm_inputs(M, 300, 40, gen, bias=True)
    xs = torch.tensor([1.0, 2.0, 3.0, 5.0][:M]) / 127.0                  # distinct per-row scales
    cfg = _gs(4, 64, split=1, ppc=2, pf=pf)
    assert T.plan_quant_matmul(M, 40, 300, torch.device("cpu"), cfg, backend_key="cuda")["SPLIT_K"] == 1
    out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, config=cfg, backend_key="cuda")
    _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32), torch.float32)


def test_row_config_block_m_must_be_a_power_of_two(gen):
    """A fuzzing finding: block_m 3 crashed inside the interpreter (arange of 3); now a ValueError."""
    x = torch.randn(4, 64, generator=gen).half()
    with pytest.raises(ValueError, match="block_m must be a power of two"):
        T.dynamic_quant_config(x, config=dict(max_block_k=64, block_m=3, num_warps=1, grid_cap=0))


# ----------------------------------------------------------------------------------------------
# programmatic dependent launch (bucket key pdl, ops/triton/_pdl.py)
# ----------------------------------------------------------------------------------------------
@_host
def test_pdl_launch_only_on_cuda_when_asked_and_not_turned_off(monkeypatch):
    """pdl_launch: never on CPU / NPU, under TRITON_INTERPRET=1 (whatever the tensors' device) or when the config
    does not ask; on a CUDA device that supports it, unless DS_OPS_PDL is 0 / false / no / off."""
    from ops.triton import _pdl
    monkeypatch.setattr(_pdl, "_device_pdl", lambda index: True)
    cuda0 = torch.device("cuda", 0)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not _pdl.pdl_launch(cuda0, True)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not _pdl.pdl_launch(torch.device("cpu"), True)
    assert not _pdl.pdl_launch(cuda0, False)
    monkeypatch.delenv("DS_OPS_PDL", raising=False)
    assert _pdl.pdl_launch(cuda0, True)
    for off in ("0", "false", "No", " off "):
        monkeypatch.setenv("DS_OPS_PDL", off)
        assert not _pdl.pdl_launch(cuda0, True), off
    monkeypatch.setenv("DS_OPS_PDL", "1")
    assert _pdl.pdl_launch(cuda0, True)
    monkeypatch.setattr(_pdl, "_device_pdl", lambda index: False)   # pre-Hopper, or a Triton without gdc_wait
    assert not _pdl.pdl_launch(cuda0, True)


@_host
def test_pdl_config_must_be_a_bool():
    with pytest.raises(ValueError, match="pdl must be true or false"):
        T.plan_quant_matmul(64, 2112, 7168, torch.device("cpu"), dict(_variant("dot", 64, 32, 256), pdl="yes"))


@_host
def test_pdl_compiles_for_sm90_with_the_wait_before_any_memory_access():
    """Every cuda-table case the launcher runs with PDL (and the streaming GEMV, the row kernels and a GEMM tile with
    PDL forced)
    compiles for sm_90 with griddepcontrol.launch_dependents and then griddepcontrol.wait before the kernel's first
    global / shared load or store, cp.async or atomic (a kernel that read x before the wait would race the kernel
    that writes it). Cases without PDL have neither instruction. Compiled in a subprocess without TRITON_INTERPRET."""
    code = (
        "import triton, ops.triton.quant as T, ops.triton.quant_gemv as G, ops.triton.quant_row as QR\n"
        "from triton.backends.compiler import GPUTarget\n"
        "from tests.pdl_ptx import check_pdl_order\n"
        "cases = T.compile_cases('cuda') + G.compile_cases('cuda') + QR.compile_cases('cuda')\n"
        "gemm = [dict(c, constexprs=dict(c['constexprs'], PDL=True), name=c['name'] + '_forced')\n"
        "        for c in cases if c['name'].startswith('quant_matmul_b') and c['name'].endswith('fused_even_bf16')][:1]\n"
        "gemv = [dict(c, constexprs=dict(c['constexprs'], PDL=True), name=c['name'] + '_forced')\n"
        "        for c in cases if 'gemv_stream' in c['name'] and c['name'].endswith('even_bf16')]\n"
        "rows = [dict(c, constexprs=dict(c['constexprs'], PDL=True), name=c['name'] + '_forced')\n"
        "        for c in cases if c['name'].startswith(('dynamic_quant_single', 'rms_norm_dynamic_quant_chunked'))\n"
        "        and c['name'].endswith('smooth_bf16_b0')]\n"
        "plain = [c for c in cases if not c['constexprs'].get('PDL') and c['name'].endswith('even_bf16')][:3]\n"
        "table = [c for c in cases if c['constexprs'].get('PDL') and 'bf16' in c['name']]\n"
        "gemv, rows = gemv + gemm, rows\n"
        "todo = table + gemv + rows + plain\n"
        "n = {True: 0, False: 0}\n"
        "for c in todo:\n"
        "    ptx = triton.compile(triton.compiler.ASTSource(c['fn'], c['signature'], c['constexprs']),\n"
        "                         target=GPUTarget('cuda', 90, 64),\n"
        "                         options=dict(num_warps=c['num_warps'], num_stages=c.get('num_stages', 1))).asm['ptx']\n"
        "    pdl = bool(c['constexprs'].get('PDL'))\n"
        "    n[pdl] += 1\n"
        "    check_pdl_order(ptx, pdl, c['name'])\n"
        "kinds = {c['fn'].__name__ for c in table + gemv + rows}\n"
        "print('checked', n[True], n[False], len(gemv), len(rows), len(table), len(kinds))\n")
    r = run_uninterpreted(code, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    n_pdl, n_plain, n_gemv, n_rows, n_table, n_kinds = (int(v) for v in r.stdout.split()[-6:])
    # the table's PDL launches, plus every kernel kind with PDL forced (the tiled GEMM, the GEMV, both row kernels)
    assert n_plain == 3 and n_gemv >= 2 and n_rows >= 2 and n_kinds == 4 and n_pdl == n_table + n_gemv + n_rows, r.stdout


@_host
@pytest.mark.parametrize("pdl", [False, True])
def test_pdl_launch_and_constexpr_always_together(pdl, monkeypatch):
    """The launchers pass launch_pdl=True exactly when they pass PDL=True (an early launch whose kernel never
    waits would read the previous kernel's output before it is written): quant_matmul's MMA and GEMV paths and the
    two row kernels, with the device check forced on."""
    from ops.triton import _pdl
    monkeypatch.setattr(_pdl, "pdl_launch", lambda device, wanted: wanted)   # pdl_kwargs asks it
    log = record_launches(monkeypatch, T, ("_qmm_kernel",))
    log2 = record_launches(monkeypatch, pytest.importorskip("ops.triton.quant_gemv"), ("_qmm_gemv_kernel",))
    log3 = record_launches(monkeypatch, QR, ("_dynamic_quant_kernel", "_rms_norm_quant_kernel"))
    g = torch.Generator().manual_seed(3)
    x, w, ws, xs, _ = _qmm_inputs(16, 256, 64, g)
    T.quant_matmul_config(x, w, ws, xs, config=dict(_variant("dot", 16, 32, 128), pdl=pdl))
    x1, w1, ws1, xs1, _ = _qmm_inputs(1, 256, 64, g)
    gemv = dict(BLOCK_M=4, BLOCK_N=4, BLOCK_K=128, num_warps=4, split_k=1, mma="gemv_stream", pdl=pdl)
    T.quant_matmul_config(x1, w1, ws1, xs1, config=gemv)
    h = torch.randn(3, 256, generator=g)
    row = dict(max_block_k=1024, tile_elems=1024, num_warps=4, pdl=pdl)
    T.dynamic_quant_config(h, config=row)
    T.rms_norm_dynamic_quant_config(h, torch.ones(256), config=row)
    assert len(log) == len(log2) == 1 and len(log3) == 2
    for name, _, _, kw in log + log2 + log3:
        kw = dict(kw)
        assert kw.get("launch_pdl", ("bool", False)) == kw.get("PDL", ("bool", False)) == ("bool", pdl), (name, kw)


@_host
def test_pdl_never_reaches_the_ascend_cases():
    """The Ascend compile cases keep PDL false even for a bucket that asks for it: triton-ascend has no
    griddepcontrol."""
    G = pytest.importorskip("ops.triton.quant_gemv")
    assert not any(c["constexprs"].get("PDL") for m in (T, QR, G) for c in m.ascend_compile_cases())
    q = T.tables()["ascend"]["quant_matmul"]
    asked = dict(_variant("dot", 16, 32, 128), pdl=True)
    assert not any(c["constexprs"]["PDL"] for c in T.qmm_cases(asked, q, "probe", "ascend"))
    assert all(c["constexprs"]["PDL"] for c in T.qmm_cases(asked, q, "probe", "cuda"))
    assert not any(c["constexprs"]["PDL"] for c in G.gemv_stream_cases(_gs(4, 64, pf=False) | {"pdl": True}, 2, "p",
                                                                        "ascend"))


@_gpu
def test_gpu_pdl_bit_identical_eager_graph_and_after_a_producer():
    """(GPU) pdl on and off give the same bits, eagerly and replayed in a graph, for the MMA tile (split-K with
    the in-kernel reduction: back-to-back calls on one stream share the tile counters, so a call that touched
    them before the previous one finished would corrupt both) and the streaming GEMV; and a PDL quant_matmul
    launched right after the dynamic_quant that writes its x reads the new x (eager loop and one graph)."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(23)
    K, N = 7168, 2112
    for M, base in ((64, _variant("dot", 64, 32, 256, split="auto")), (16, dict(_MASK_CFG, k_batch=4)),
                    (1, _gemv_cfg(1))):
        for pdl in (False, True):
            _gpu_config_exact_eager_and_graph(M, K, N, dict(base, pdl=pdl), g, dev)
        sets = [tuple(t.to(dev) for t in _qmm_inputs(M, K, N, g)[:4]) for _ in range(6)]
        want = [T.quant_matmul_config(*s, config=dict(base, pdl=False)) for s in sets]
        for _ in range(3):
            got = [T.quant_matmul_config(*s, config=dict(base, pdl=True)) for s in sets]   # queued back to back
            torch.cuda.synchronize()
            assert all(torch.equal(a, b) for a, b in zip(got, want))
    # producer → PDL consumer: x is written by the kernel just before
    M = 64
    base = dict(_variant("dot", 64, 32, 256, split="auto"), pdl=True)
    w = R.pack_weight(torch.randint(-127, 128, (K, N), generator=g, dtype=torch.int8), "cuda").to(dev)
    ws = ((0.5 + torch.rand(N, generator=g)) / (127.0 * K ** 0.5)).to(dev)
    hs = [torch.randn(M, K, generator=g).to(torch.bfloat16).to(dev) for _ in range(4)]

    def chain():
        outs = []
        for h in hs:
            q, s = T.dynamic_quant(h)
            outs.append(T.quant_matmul_config(q, w, ws, s, config=base))
        return outs

    def expected():
        res = []
        for h in hs:
            q, s = R.dynamic_quant(h.cpu())
            res.append(R.quant_matmul(q, w.cpu(), ws.cpu(), s))
        return res

    ref = expected()
    for _ in range(3):
        assert all(torch.equal(o.cpu(), r) for o, r in zip(chain(), ref))
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chain()
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        outs_g = chain()
    for _ in range(3):
        for h in hs:
            h.copy_(torch.randn(M, K, generator=g).to(torch.bfloat16))
        ref = expected()
        for o in outs_g:
            o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(o.cpu(), r) for o, r in zip(outs_g, ref))


@_gpu
def test_gpu_pdl_waits_for_a_producer_that_lets_it_launch_early():
    """(GPU) A producer kernel that lets the next kernel launch at once (griddepcontrol.launch_dependents first),
    then spins ~tens of µs and only then writes x. A PDL quant_matmul (MMA tile and GEMV) launched right after it
    must read the new x. Negative control in the same run: a PDL copy kernel with no wait, launched the same way,
    reads the old x at least once (so the producer really overlaps, and the check above can fail)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _late_writer(src_ptr, dst_ptr, n, SPIN: tl.constexpr, BLOCK: tl.constexpr):
        tl.extra.cuda.gdc_launch_dependents()
        acc = tl.program_id(0).to(tl.float32)
        for _ in range(SPIN):
            acc = acc * 0.999 + 1.0
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(src_ptr + i, mask=i < n)
        tl.store(dst_ptr + i, tl.where(acc < 0, 0, v), mask=i < n)   # acc > 0 always: keeps the spin

    @triton.jit
    def _copy_no_wait(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst_ptr + i, tl.load(src_ptr + i, mask=i < n), mask=i < n)

    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(29)
    K, N = 7168, 2112
    stale = 0
    for M, base in ((64, _variant("dot", 64, 32, 256, split="auto")), (16, dict(_MASK_CFG, k_batch=4)),
                    (1, _gemv_cfg(1))):
        base = dict(base, pdl=True)
        x_old, w, ws, xs, _ = _qmm_inputs(M, K, N, g)
        x_new = torch.randint(-127, 128, (M, K), generator=g, dtype=torch.int8)
        want = R.quant_matmul(x_new, w, ws, xs)
        x_old, x_new, w, ws, xs = (t.to(dev) for t in (x_old, x_new, w, ws, xs))
        n, blk = M * K, 1024
        for _ in range(3):
            x = x_old.clone()
            probe = torch.empty_like(x)
            torch.cuda.synchronize()
            _late_writer[(triton.cdiv(n, blk),)](x_new, x, n, SPIN=20000, BLOCK=blk)
            _copy_no_wait[(triton.cdiv(n, blk),)](x, probe, n, BLOCK=blk, launch_pdl=True)
            torch.cuda.synchronize()
            stale += int(not torch.equal(probe, x_new))
            x = x_old.clone()
            torch.cuda.synchronize()
            _late_writer[(triton.cdiv(n, blk),)](x_new, x, n, SPIN=20000, BLOCK=blk)
            out = T.quant_matmul_config(x, w, ws, xs, config=base)
            torch.cuda.synchronize()
            assert torch.equal(out.cpu(), want), M
    assert stale > 0, "the no-wait control never saw the old x: the producer did not overlap, so this test proves nothing"


@_host
@pytest.mark.parametrize("cfg, err, match", [
    (dict(max_block_k=1024, tile_elems=1024, num_warps=4, pld=1), ValueError, r"unknown row config key\(s\) \['pld'\]"),
    (dict(max_block_k=1000, tile_elems=1024, num_warps=4), ValueError, "max_block_k must be a power of two"),
    (dict(max_block_k=1024, num_warps=4), KeyError, "needs 'tile_elems' or 'block_m'"),
    (dict(max_block_k=1024, tile_elems=1024), KeyError, "needs 'num_warps'"),
    (dict(max_block_k=1024, tile_elems=1024, num_warps=4, pdl="yes"), ValueError, "pdl must be true or false")])
def test_row_configs_are_checked_before_any_launch(cfg, err, match):
    """A row-op config with a misspelt key, a non-power-of-two max_block_k, a bad pdl or a missing key is refused
    with its name (a new-user trial: a misspelt key was silently ignored)."""
    x = torch.randn(2, 64)
    with pytest.raises(err, match=match):
        T.dynamic_quant_config(x, config=cfg)
    with pytest.raises(err, match=match):
        T.rms_norm_dynamic_quant_config(x, torch.ones(64), config=cfg)


@_host
@pytest.mark.parametrize("change, err, match", [
    (dict(pld=True), ValueError, r"unknown quant_matmul config key\(s\) \['pld'\]"),
    (dict(pdl_prefetch=True), ValueError, r"unknown quant_matmul config key\(s\) \['pdl_prefetch'\]"),
    (dict(reduce="atomc"), ValueError, "reduce must be 'kernel' or 'atomic'"),
    (dict(pdl=2), ValueError, "pdl must be true or false"),
    (dict(split_k="Auto"), ValueError, "split_k must be 'auto' or an int >= 1"),
    (dict(split_k=0), ValueError, "split_k must be 'auto' or an int >= 1"),
    (dict(BLOCK_K=100), ValueError, "BLOCK_K must be a power of two"),
    (dict(num_warps=None), KeyError, "needs 'num_warps'"),
    (dict(GROUP_M=None), KeyError, "needs 'GROUP_M'"),
    (dict(k_batch=3), ValueError, "k_batch must be a power of two"),
    (dict(k_batch=True), ValueError, "k_batch must be a power of two"),
    (dict(k_batch=8), ValueError, r"BLOCK_K / k_batch >= 32"),            # 128 / 8 = 16
    (dict(k_batch=2, mma="swap"), ValueError, "k_batch 2 needs mma 'dot'")])
def test_quant_matmul_configs_are_checked_before_any_launch(change, err, match):
    """A quant_matmul config with a misspelt or unknown key, a bad reduce / pdl / split_k, a non-power-of-two tile
    or a missing key is refused by the plan, with its name (a new-user trial)."""
    cfg = {k: v for k, v in dict(_variant("dot", 16, 32, 128), **change).items() if v is not None}
    with pytest.raises(err, match=match):
        T.plan_quant_matmul(16, 64, 256, torch.device("cpu"), cfg)


@_host
@pytest.mark.parametrize("damage, match", [
    (lambda t: t["quant_matmul"]["buckets"][1]["config"].update(pld=True),
     r"configs/cuda/quant.json quant_matmul bucket 1: unknown"),
    (lambda t: t["dynamic_quant"]["buckets"][0]["config"].update(max_block_k=1000),
     r"configs/cuda/quant.json dynamic_quant config 0: "),
    (lambda t: t["quant_matmul"].update(_doc="why"), r"cuda/quant.json.*key '_doc': a config table holds"),
    (lambda t: t["quant_matmul"]["buckets"][-1].update(match={"M": [0, 4]}), "the last bucket must match every"),
    (lambda t: t["quant_matmul"]["buckets"][0].update(match={"M": [4, 1]}), r"match 'M' must be \[lo, hi\]"),
    (lambda t: t["quant_matmul"]["buckets"][0].update(max_m=4), r"a bucket is \{'match'")])
def test_a_bad_table_is_refused_at_load_naming_it(damage, match):
    """The tables are checked once, when loaded, against the grammar and the launchers' keys; the message names the
    file and the bucket (a table with notes, a shadowing catch-all or a launch key at the bucket's top level is
    refused too). The shipped tables are back afterwards."""
    from ops.triton._common import replaced_configs
    cuda = json.loads(json.dumps(T.tables()["cuda"]))
    damage(cuda)
    with pytest.raises(ValueError, match=match):
        with replaced_configs("quant", {**T.tables(), "cuda": cuda}):
            QC.tables()
            QR.row_config("dynamic_quant", 1, "cuda")
    assert T.tables()["cuda"] != cuda and QR.row_config("dynamic_quant", 1, "cuda")


# ----------------------------------------------------------------------------------------------
# bucket key "k_batch" (its reference cases are in _VARIANT_CASES above)
# ----------------------------------------------------------------------------------------------
def test_k_batch_slices_each_reach_the_sum(gen):
    """Negative control for the slicing: a weight that is zero except in one K column of the last slice of the
    last step still reaches the output (a kernel that dropped or repeated a slice would give 0 or twice the value)."""
    M, K, N = 4, 512, 16
    x = torch.randint(1, 128, (M, K), generator=gen, dtype=torch.int8)
    for kcol in (0, 127, 128, 383, 511):
        w = torch.zeros((K, N), dtype=torch.int8)
        w[kcol, 5] = 3
        ws, xs = torch.ones(N), torch.ones(M)
        cfg = _variant("dot", 16, 16, 256, k_batch=4)
        out = T.quant_matmul_config(x, R.pack_weight(w, "cuda"), ws, xs, out_dtype=torch.float32, config=cfg,
                                    backend_key="cuda")
        want = torch.zeros((M, N))
        want[:, 5] = 3 * x[:, kcol].float()
        assert torch.equal(out, want), kcol


@settings(max_examples=8)
@given(M=st.integers(1, 20), K=st.integers(1, 700), N=st.integers(1, 40), kb=st.sampled_from([2, 4]),
       split=st.integers(1, 3), seed=st.integers(0, 2**31 - 1))
def test_k_batch_hypothesis(M, K, N, kb, split, seed):
    g = torch.Generator().manual_seed(seed)
    x, w, ws, xs, b = _qmm_inputs(M, K, N, g, bias=True)
    cfg = _variant("dot", 16, 16, 128, split=split, k_batch=kb)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "empty", poisoned_empty)
        out = T.quant_matmul_config(x, w, ws, xs, bias=b, out_dtype=torch.float32, config=cfg, backend_key="cuda")
    _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32), torch.float32)


@_host
@pytest.mark.parametrize("kb", [1, 4])
def test_k_batch_reaches_the_kernel_launch_and_the_compile_cases(kb, monkeypatch):
    """The launcher passes the plan's k_batch as the K_BATCH constexpr (an unbatched launch is exact too, so only this
    test sees a launcher that drops it), and a bucket's k_batch reaches its compile cases."""
    log = record_launches(monkeypatch, T, ("_qmm_kernel",))
    x, w, ws, xs, _ = _qmm_inputs(16, 512, 64, torch.Generator().manual_seed(5))
    T.quant_matmul_config(x, w, ws, xs, config=_variant("dot", 16, 16, 256, k_batch=kb))
    assert len(log) == 1 and dict(log[0][3])["K_BATCH"] == ("int", kb), log
    for t in _TABLES:
        q = T.tables()[t]["quant_matmul"]
        assert all(c["constexprs"]["K_BATCH"] == kb
                   for c in T.qmm_cases(_variant("dot", 16, 16, 256, k_batch=kb), q, "probe", t))


@pytest.mark.parametrize("M", [1, 2])
def test_wide_n_decode_through_the_registered_op(M, gen, cuda_table, monkeypatch):
    """At M 1 and 2, N 2600 (past the narrow decode widths) at K 2048 and 2044 through the registered op on the
    "cuda" table, with bias and fp32 out: bit-identical to the reference whichever kernel the plan picks; the GEMV
    launcher runs exactly when the plan names it."""
    N = 2600
    calls = []
    launch = T.quant_matmul_gemv
    monkeypatch.setattr(T, "quant_matmul_gemv", lambda *a, **kw: calls.append(a[6]) or launch(*a, **kw))
    for K in (2048, 2044):
        calls.clear()
        x, w, ws, xs, b = _qmm_inputs(M, K, N, gen, bias=True)
        out = ops.quant.quant_matmul(x, R.pack_weight(w, "cuda"), ws, xs, bias=b, out_dtype=torch.float32)
        _exact_vs_reference(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=torch.float32), torch.float32)
        assert len(calls) == int(T.plan_quant_matmul(M, N, K, _CPU).get("mma") == "gemv_stream")
