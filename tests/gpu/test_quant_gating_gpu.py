"""The Triton quant and gating kernels on CUDA (``pytest -m gpu``) against the references, bf16 (and fp16, fp32).

dynamic_quant / rms_norm_dynamic_quant / quant_matmul / moe_gating_top_k; field cases Q1–Q6 and G1–G6
(shared cases); M ∈ {0, 1, 2, 15, 16, 17, 64, 256, 4096}; the DeepSeek-V3 GEMM shapes and their TP splits; weights
K-major and row-major; every decode M (≤ 128) through the plan the "cuda" table gives it, and each kernel family
(streaming GEMV, mask_m tile, swap-AB, split-K with both reductions) forced through a config, so a retune of the
table cannot leave a family untested; CUDA-graph capture + replay; torch.compile(fullgraph=True) through torch.ops.

Verdicts: int8 outputs exact against the reference (dynamic_quant scales bit-identical; rms_norm_dynamic_quant ±1
LSB only at near-ties, |y/scale| within 1e-3 of .5, from the Σx² reduction order); quant_matmul without bias
bit-identical to the exact reference (the epilogue is two fp32 multiplies and a cast), with bias the bf16
tolerance; gating ids exact except swaps of experts whose biased scores tie to ~1 ulp.
"""
from __future__ import annotations

import pytest
import torch

import ops
from ops.triton import moe_gating as TG
from ops.triton import quant as TQ
from reference import moe_gating as RG
from reference import quant as RQ
from tests.strategies import int8_activations, int8_matmul_operands, int8_weight
from tests.tolerances import assert_close, poisoned_empty

pytestmark = pytest.mark.gpu

MS = (0, 1, 2, 15, 16, 17, 64, 256, 4096)
DQ_KS = (576, 1368, 1536, 2048, 7168, 16384, 18432)
RMS_HS = (512, 1536, 7168, 16384)
# DeepSeek-V3 (K, N) per layer and TP splits
QMM_SHAPES = [
    ("qkv_a", 7168, 2112), ("kv_a", 7168, 576), ("q_b", 1536, 24576), ("q_b_tp8", 1536, 3072),
    ("o_proj", 16384, 7168), ("o_proj_tp8", 2048, 7168), ("o_proj_tp16", 1024, 7168),
    ("moe_gate", 7168, 2048), ("moe_gate_up", 7168, 4096), ("moe_down", 2048, 7168),
    ("dense_gate", 7168, 18432), ("dense_down", 18432, 7168), ("dense_gate_tp16", 7168, 1152),
    ("dense_down_tp16", 1152, 7168), ("Q2_k1368", 1368, 2112),
]
DECODE_SHAPES = [("qkv_a", 7168, 2112), ("moe_gate", 7168, 2048), ("q_b", 1536, 24576), ("kv_b", 512, 32768),
                 ("dense_gate", 7168, 18432), ("dense_gate_up", 7168, 36864), ("moe_gate_up", 7168, 4096),
                 ("o_proj", 16384, 7168)]
DECODE_MS = (1, 2, 15, 16, 17, 32, 33, 64, 65, 100, 127, 128)
GEMV_SHAPES = [("qkv_a", 7168, 2112), ("moe_gate", 7168, 2048), ("moe_down", 2048, 7168), ("moe_gate_up", 7168, 4096),
               ("K_tail", 2052, 48), ("K_not_div4", 1030, 40)]
DS = dict(k_group=4, group_count=8, group_select_mode=1, renorm=0, norm_type=1, routed_scaling_factor=2.5, eps=1e-20)


@pytest.fixture(autouse=True)
def _setup(monkeypatch):
    """Outputs start poisoned (NaN / INT_MIN); fp32 matmuls in the references stay exact (no TF32)."""
    monkeypatch.setattr(torch, "empty", poisoned_empty)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)


@pytest.fixture
def gen():
    return torch.Generator(device="cuda").manual_seed(0)


DEV = "cuda"


def _bf16_close(out, ref):
    if out.numel() == 0:
        assert out.shape == ref.shape
        return
    assert_close(out, ref, "bf16")


# ---------------------------------------------------------------------------------------------- dynamic_quant
@pytest.mark.parametrize("dtype,K", [(torch.bfloat16, K) for K in DQ_KS]
                         + [(dt, K) for dt in (torch.float16, torch.float32) for K in DQ_KS[1::3]])
def test_dynamic_quant_exact(dtype, K, gen):
    for M in MS:
        for smooth in (False, True):
            x = (3 * torch.randn(M, K, generator=gen, device=DEV)).to(dtype)
            s = (0.5 + torch.rand(K, generator=gen, device=DEV)) if smooth else None
            q, sc = TQ.dynamic_quant(x, smooth_scales=s)
            # the reference on the CPU: on CUDA torch's `amax / 127` multiplies by the reciprocal, 1 ulp off the
            # IEEE quotient the spec names
            rq, rs = RQ.dynamic_quant(x.cpu(), smooth_scales=s.cpu() if s is not None else None)
            assert torch.equal(q.cpu(), rq) and torch.equal(sc.cpu(), rs), (M, smooth)


def test_dynamic_quant_field_cases_Q3_to_Q6(gen):
    s = 2.0 ** -4
    x = torch.tensor([[0.5, 1.5, -2.5, 2.5, -0.5, 3.5, -126.5, 127.0]], device=DEV).mul(s).to(torch.bfloat16)
    q, sc = TQ.dynamic_quant(x)
    assert q[0].tolist() == [0, 2, -2, 2, 0, 4, -126, 127] and sc.item() == s, "Q4 ties half-even"
    x = torch.randn(4, 7168, generator=gen, device=DEV).to(torch.bfloat16)
    x[1] = 0
    x[2, 9] = -50.0
    x[3, 4] = float("nan")
    q, sc = TQ.dynamic_quant(x)
    assert sc[1].item() == 0 and (q[1] == 0).all(), "Q3 zero row"
    assert q[2, 9].item() == -127 and q.min().item() >= -127, "Q5 negative absmax → −127"
    assert torch.isnan(sc[3]) and (q[3] == 0).all(), "NaN row → scale NaN, q 0"
    q, sc = TQ.dynamic_quant(torch.zeros(0, 7168, device=DEV, dtype=torch.bfloat16))
    assert q.shape == (0, 7168) and sc.shape == (0,), "Q6 zero tokens"


# ---------------------------------------------------------------------------------------------- rms_norm_dynamic_quant
@pytest.mark.parametrize("dtype,H", [(torch.bfloat16, H) for H in RMS_HS] + [(torch.float16, RMS_HS[-1])])
def test_rms_norm_dynamic_quant_exact_but_near_ties(dtype, H, gen):
    for M in MS:
        for res, smooth in ((True, True), (False, False), (True, False)):
            x = torch.randn(M, H, generator=gen, device=DEV).to(dtype)
            r = torch.randn(M, H, generator=gen, device=DEV).to(dtype) if res else None
            g = (0.5 + torch.rand(H, generator=gen, device=DEV)).to(dtype)
            s = (0.5 + torch.rand(H, generator=gen, device=DEV)) if smooth else None
            q, sc, ro = TQ.rms_norm_dynamic_quant(x, g, epsilon=1e-6, residual=r, smooth_scales=s)
            rq, rs, rro = (t.to(DEV) for t in RQ.rms_norm_dynamic_quant(   # CPU: the IEEE scale (see above)
                x.cpu(), g.cpu(), epsilon=1e-6, residual=r.cpu() if r is not None else None,
                smooth_scales=s.cpu() if s is not None else None))
            assert torch.equal(ro, rro), f"M={M}: residual_out differs"
            if M:
                assert not ((sc - rs).abs() > 2e-6 * rs.abs()).any(), f"M={M}: scale"
            d = (q.int() - rq.int()).abs()
            assert not d.numel() or d.max() <= 1, f"M={M}: {d.max().item()} LSB"
            bad = d > 0
            if bad.any():   # ±1 LSB only where y/scale is within 1e-3 of a tie
                sm = x.float() + (r.float() if r is not None else 0)
                y = RQ.rms_norm(sm, g, 1e-6) * (s.float() if s is not None else 1)
                t = (y.double() / rs.double()[:, None])[bad].abs()
                assert not ((t - t.floor() - 0.5).abs() > 1e-3).any(), f"M={M}: a 1-LSB difference away from a tie"


# ---------------------------------------------------------------------------------------------- quant_matmul
@pytest.mark.parametrize("name,K,N", QMM_SHAPES, ids=[s[0] for s in QMM_SHAPES])
def test_quant_matmul_deepseek_shapes(name, K, N, gen):
    w, ws = int8_weight(K, N, gen, DEV)
    wk = RQ.pack_weight(w, "cuda")
    bias = torch.randn(N, generator=gen, device=DEV)
    for M in MS:
        x, xs = int8_activations(M, K, gen, DEV)
        ref = RQ.quant_matmul(x, w, ws, xs, bias=bias, out_dtype=torch.bfloat16)
        for ww in [wk] + ([w] if M in (1, 17, 256) else []):             # K-major; row-major at three M
            _bf16_close(TQ.quant_matmul(x, ww, ws, xs, bias=bias, out_dtype=torch.bfloat16), ref)


@pytest.mark.parametrize("od", [torch.float16, torch.float32])
def test_quant_matmul_out_dtypes_no_bias(od, gen):
    x, w, ws, xs = int8_matmul_operands(33, 7168, 2112, gen, DEV)
    w = RQ.pack_weight(w)
    out = TQ.quant_matmul(x, w, ws, xs, out_dtype=od)
    assert out.dtype == od
    assert_close(out, RQ.quant_matmul(x, w, ws, xs, out_dtype=od), "bf16")


def test_quant_matmul_int32_extremes_K18432():
    K = 18432                                   # 127²·K = 297,271,296: exact in int32
    x = torch.full((2, K), 127, dtype=torch.int8, device=DEV)
    x[1] = -127
    w = RQ.pack_weight(torch.full((K, 64), -127, dtype=torch.int8, device=DEV))
    out = TQ.quant_matmul(x, w, torch.ones(64, device=DEV), torch.ones(2, device=DEV), out_dtype=torch.float32)
    assert out[0].eq(-127 * 127 * K).all() and out[1].eq(127 * 127 * K).all()


# ---------------------------------------------------------------------------------------------- CUDA fast paths
def test_dynamic_quant_fast_quotient_every_row_tile(gen):
    """The reciprocal + Markstein quotient: ties ±1 ulp, subnormal / tiny / huge scales, both row buckets (7 and
    307 rows), the single-sweep and chunked row tiles: bit-identical to the reference."""
    K = 7168
    s = 2.0 ** -5
    n = torch.randint(-127, 127, (K,), generator=gen, device=DEV).float()
    t = (n + 0.5) * s
    t[0] = 127 * s
    rows = [t, torch.nextafter(t, torch.full_like(t, float("inf"))), torch.nextafter(t, torch.full_like(t, -float("inf"))),
            torch.randn(K, generator=gen, device=DEV) * 1e-40, torch.randn(K, generator=gen, device=DEV) * 2e-23,
            torch.randn(K, generator=gen, device=DEV) * 1e37, torch.zeros(K, device=DEV)]
    x = torch.cat([torch.stack(rows), 3 * torch.randn(300, K, generator=gen, device=DEV)])
    for cfg in (None, {"max_block_k": 8192, "block_m": 1, "num_warps": 8, "fast": True},
                {"max_block_k": 1024, "block_m": 2, "num_warps": 4, "fast": True}):
        for xx in (x[:7], x):
            q, sc = TQ.dynamic_quant_config(xx, config=cfg)
            rq, rs = RQ.dynamic_quant(xx.cpu())
            assert torch.equal(q.cpu(), rq) and torch.equal(sc.cpu(), rs), (cfg, xx.shape[0])


@pytest.mark.parametrize("tiles", [{"max_block_k": 8192, "block_m": 1, "num_warps": 8},
                                   {"max_block_k": 1024, "block_m": 1, "num_warps": 4}])
def test_rms_norm_dynamic_quant_fast_path_equals_div_rn(tiles, gen):
    K = 7168
    g = (0.5 + torch.rand(K, generator=gen, device=DEV)).to(torch.bfloat16)
    xb = torch.randn(300, K, generator=gen, device=DEV).to(torch.bfloat16)
    rb = torch.randn(300, K, generator=gen, device=DEV).to(torch.bfloat16)
    a = TQ.rms_norm_dynamic_quant_config(xb, g, epsilon=1e-6, residual=rb, config=dict(tiles, fast=False))
    b = TQ.rms_norm_dynamic_quant_config(xb, g, epsilon=1e-6, residual=rb, config=dict(tiles, fast=True))
    assert all(torch.equal(u, v) for u, v in zip(a, b))


@pytest.mark.parametrize("M,K,N", [(1, 7168, 2112), (16, 7168, 2112), (64, 7168, 2112), (128, 7168, 2112),
                                   (3, 1536, 1000)])
def test_split_k_atomic_and_two_kernel_reductions_bit_exact(M, K, N, gen):
    """In-kernel split-K (atomic tile counters) and the two-kernel reduction, 3 / 4 / 7 splits, each run three
    times: bit-identical to the reference (a tile counter left non-zero by a run would break the next one)."""
    x, w, ws, xs = int8_matmul_operands(M, K, N, gen, DEV)
    w = RQ.pack_weight(w)
    bias = torch.randn(N, generator=gen, device=DEV)
    ref = RQ.quant_matmul(x, w, ws, xs)
    bm = 16 if M <= 16 else (64 if M <= 64 else 128)
    for red in ("kernel", "atomic"):
        for sk in (3, 4, 7):
            cfg = dict(BLOCK_M=bm, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=4, split_k=sk, reduce=red)
            for _ in range(3):
                assert torch.equal(TQ.quant_matmul_config(x, w, ws, xs, config=cfg), ref), (red, sk)
    assert_close(TQ.quant_matmul(x, w, ws, xs, bias=bias), RQ.quant_matmul(x, w, ws, xs, bias=bias), "bf16")


# ---------------------------------------------------------------------------------------------- decode GEMMs
@pytest.mark.parametrize("name,K,N", DECODE_SHAPES, ids=[s[0] for s in DECODE_SHAPES])
def test_decode_plans_of_the_cuda_table_are_exact(name, K, N, gen):
    """Every decode M (≤ 128, at and inside bucket edges; 65 / 100 a partial 128-row tile) through whatever plan
    the "cuda" table gives it: bf16 and fp32 out without bias bit-identical to the exact reference, with bias the
    bf16 tolerance."""
    w, ws = int8_weight(K, N, gen, DEV)
    wk = RQ.pack_weight(w, "cuda")
    bias = torch.randn(N, generator=gen, device=DEV)
    for M in DECODE_MS:
        x, xs = int8_activations(M, K, gen, DEV)
        TQ.plan_quant_matmul(M, N, K, torch.device(DEV), backend_key="cuda")      # the table parses for every M
        for od in ((torch.bfloat16, torch.float32) if M in (1, 100) else (torch.bfloat16,)):
            out = TQ.quant_matmul_config(x, wk, ws, xs, out_dtype=od, backend_key="cuda")
            assert torch.equal(out, RQ.quant_matmul(x, w, ws, xs, out_dtype=od)), (M, od)
        if M in (1, 100):
            assert_close(TQ.quant_matmul_config(x, wk, ws, xs, bias=bias, out_dtype=torch.bfloat16, backend_key="cuda"),
                         RQ.quant_matmul(x, w, ws, xs, bias=bias, out_dtype=torch.bfloat16), "bf16")


_SW = dict(GROUP_M=1, mma="swap", mask_m=True)
FAMILIES = [   # (M, K, N, config): each kernel family of quant_matmul, forced
    (16, 7168, 2112, dict(_SW, BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=6, split_k=4, reduce="atomic")),
    (9, 7168, 2112, dict(_SW, BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=6, split_k=14, reduce="atomic")),
    (40, 1536, 3072, dict(_SW, BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=4, split_k=3, reduce="kernel")),
    (128, 7168, 2112, dict(_SW, BLOCK_M=128, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=4, split_k="auto",
                           reduce="atomic")),
    (100, 1536, 24576, dict(_SW, BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, num_warps=4, num_stages=3, split_k=1)),
    (100, 7168, 2112, dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=256, GROUP_M=2, num_warps=4, num_stages=4, split_k=2,
                           reduce="atomic")),     # GROUP_M 2 with a partial second M tile and split-K
    (16, 7168, 2112, dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=512, GROUP_M=1, num_warps=4, num_stages=9, split_k=1,
                          reduce="atomic", mask_m=True, k_batch=4)),   # the mask_m tile with the batched K step
    (3, 2048, 2600, dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=512, GROUP_M=1, num_warps=4, num_stages=6, split_k=1,
                         reduce="atomic", mask_m=True)),
]


@pytest.mark.parametrize("M,K,N,cfg", FAMILIES)
def test_kernel_families_forced_bit_exact(M, K, N, cfg, gen):
    x, w, ws, xs = int8_matmul_operands(M, K, N, gen, DEV)
    wk = RQ.pack_weight(w, "cuda")
    ref = RQ.quant_matmul(x, w, ws, xs, out_dtype=torch.bfloat16)
    for _ in range(3):
        out = TQ.quant_matmul_config(x, wk, ws, xs, config=cfg, out_dtype=torch.bfloat16, backend_key="cuda")
        assert torch.equal(out, ref)


def _gemv_config(M):
    """The streaming GEMV (one program streams BLOCK_N columns of the weight; M = 2 with the register prefetch)."""
    return dict(BLOCK_M=4, BLOCK_N=1 if M == 1 else 4, BLOCK_K=1024, GROUP_M=1, num_warps=1 if M == 1 else 4,
                num_stages=1, split_k=1, reduce="atomic", mma="gemv_stream", programs_per_sm=16 if M == 1 else 4,
                dp4a=True, **({"prefetch": True} if M == 2 else {}))


@pytest.mark.parametrize("M", [1, 2])
@pytest.mark.parametrize("name,K,N", GEMV_SHAPES, ids=[s[0] for s in GEMV_SHAPES])
def test_streaming_gemv_exact_both_weight_layouts(name, K, N, M, gen):
    """The streaming GEMV forced (dp4a on a K-major weight with K % 4 == 0, int8 loads otherwise): fp32 and bf16
    out without bias bit-identical to the reference over 3 runs, K-major and row-major weights; with bias the bf16
    tolerance."""
    cfg = _gemv_config(M)
    assert TQ.plan_quant_matmul(M, N, K, torch.device(DEV), cfg, backend_key="cuda").get("mma") == "gemv_stream"
    x, w, ws, xs = int8_matmul_operands(M, K, N, gen, DEV)
    bias = torch.randn(N, generator=gen, device=DEV)
    for ww in (RQ.pack_weight(w, "cuda"), w):
        for od in (torch.bfloat16, torch.float32):
            ref = RQ.quant_matmul(x, w, ws, xs, out_dtype=od)
            for _ in range(3):
                assert torch.equal(TQ.quant_matmul_config(x, ww, ws, xs, config=cfg, out_dtype=od), ref), od
        assert_close(TQ.quant_matmul_config(x, ww, ws, xs, bias=bias, config=cfg, out_dtype=torch.bfloat16),
                     RQ.quant_matmul(x, w, ws, xs, bias=bias, out_dtype=torch.bfloat16), "bf16")


# ---------------------------------------------------------------------------------------------- gating
def _ids_match_up_to_ties(idx, ridx, x, bias, kw) -> bool:
    """Rows whose ids differ are allowed only if the swapped experts' biased scores tie to ~1 ulp."""
    s = torch.sigmoid(x.double()) if kw.get("norm_type", 0) == 1 else torch.softmax(x.double(), -1)
    b = s + (bias.double() if bias is not None else 0)
    for r in (idx != ridx).any(1).nonzero().flatten().tolist():
        if not torch.allclose(b[r, idx[r].long()], b[r, ridx[r].long()], rtol=1e-6, atol=1e-7):
            return False
    return True


def gating(x, k=8, **kw):
    """Triton vs the reference: ids (up to ties) distinct and in range, y finite and within tolerance (fp32 1e-5,
    else 1e-2 relative) where the ids agree, norm_out finite where the reference is and within 1e-5."""
    kw = {**DS, **kw}
    y, idx, n = TG.moe_gating_top_k(x, k, **kw)
    ry, ridx, rn = RG.moe_gating_top_k(x, k, **kw)
    assert _ids_match_up_to_ties(idx, ridx, x, kw.get("bias"), kw), "ids differ (not ties)"
    if x.shape[0]:
        assert ((idx >= 0) & (idx < x.shape[1])).all() and all(len(set(r)) == k for r in idx.tolist())
        assert torch.isfinite(y).all()
        same = ~(idx != ridx).any(1)
        if same.any():
            tol = 1e-5 if x.dtype == torch.float32 else 1e-2
            e = ((y[same].double() - ry[same].double()).abs().max()
                 / ry[same].double().abs().max().clamp_min(1e-30)).item()
            assert e <= tol, f"y rel err {e:.1e}"
        fin = torch.isfinite(rn)
        assert torch.equal(fin, torch.isfinite(n)) and not ((n[fin] - rn[fin]).abs() > 1e-5 * rn[fin].abs().max()).any()
    return y, idx


@pytest.mark.parametrize("dtype,T", [(torch.bfloat16, T) for T in MS]
                         + [(dt, T) for dt in (torch.float16, torch.float32) for T in MS[-3:]])
def test_gating_deepseek(dtype, T, gen):
    gating((2 * torch.randn(T, 256, generator=gen, device=DEV)).to(dtype),
           bias=0.5 * torch.randn(256, generator=gen, device=DEV))


def test_gating_field_cases_G1_to_G6(gen):
    x = torch.randn(64, 256, generator=gen, device=DEV).to(torch.bfloat16)
    b = torch.where(torch.rand(256, generator=gen, device=DEV) < 0.5, -0.5, 0.5)
    y, idx = gating(x, bias=b)
    s = torch.sigmoid(x.double()).gather(1, idx.long())
    assert torch.allclose(y.double(), s / s.sum(1, keepdim=True) * 2.5, rtol=1e-2), "G1 weights unbiased"
    y, idx = gating(x, bias=torch.full((256,), -2.0, device=DEV))
    assert all(len(set((r // 32).tolist())) <= 4 for r in idx.cpu()), "G2 ≤ 4 groups used"
    x3 = torch.full((1, 256), -6.0, device=DEV)
    x3[0, 0] = 6.0
    for g in range(1, 5):
        x3[0, 32 * g: 32 * g + 2] = 3.0
    y, idx = gating(x3.to(torch.bfloat16), bias=torch.zeros(256, device=DEV))
    assert set((idx[0] // 32).tolist()) <= {1, 2, 3, 4}, "G3 groups by top-2 sum"
    x4 = torch.randn(5, 256, generator=gen, device=DEV)
    x4[0] = float("nan")
    x4[1] = float("inf")
    x4[2, :128] = float("nan")
    x4[3] = float("-inf")
    x4[4, 40:] = float("nan")
    gating(x4.to(torch.bfloat16), bias=0.1 * torch.randn(256, generator=gen, device=DEV))        # G4 NaN / inf rows
    y, idx = gating(torch.zeros(4, 256, device=DEV, dtype=torch.bfloat16), bias=torch.zeros(256, device=DEV))
    assert idx.tolist() == [list(range(8))] * 4, "G5 all equal → ids 0..7"
    for k in (6, 8):
        y, idx = gating(torch.randn(256, 256, generator=gen, device=DEV), k=k,
                        bias=0.3 * torch.randn(256, generator=gen, device=DEV))
        assert torch.allclose(y.sum(1), torch.full_like(y.sum(1), 2.5), rtol=2e-6), f"G6 Σw = 2.5 (k={k})"


def test_gating_softmax_flat_and_512_experts(gen):
    gating(torch.randn(64, 64, generator=gen, device=DEV), k=6, k_group=1, group_count=1, group_select_mode=0,
           norm_type=0, routed_scaling_factor=1.0, bias=None)
    gating(torch.randn(64, 512, generator=gen, device=DEV).to(torch.bfloat16), k_group=4, group_count=16,
           bias=0.2 * torch.randn(512, generator=gen, device=DEV))


# ---------------------------------------------------------------------------------------------- graphs / compile
def test_cuda_graph_and_torch_compile_equal_eager(monkeypatch):
    monkeypatch.undo()                      # real torch.empty: graph capture allocates from the graph pool
    x = torch.randn(16, 7168, device=DEV).to(torch.bfloat16)
    r = torch.randn(16, 7168, device=DEV).to(torch.bfloat16)
    g = torch.rand(7168, device=DEV).to(torch.bfloat16) + 0.5
    w = RQ.pack_weight(torch.randint(-127, 128, (7168, 2112), device=DEV, dtype=torch.int8))
    ws = torch.rand(2112, device=DEV) * 1e-4
    logits = torch.randn(16, 256, device=DEV)
    bias = torch.randn(256, device=DEV) * 0.1

    def step():
        q, sc, _ = TQ.rms_norm_dynamic_quant(x, g, epsilon=1e-6, residual=r)
        o = TQ.quant_matmul(q, w, ws, sc)
        y, idx, _ = TG.moe_gating_top_k(logits, 8, bias=bias, **DS)
        return o, y, idx

    eager = step()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(outs, eager)), "CUDA graph replay differs from eager"

    def f(x, r, g, w, ws, logits, bias):
        q, sc, _ = torch.ops.ds.rms_norm_dynamic_quant(x, g, epsilon=1e-6, residual=r)
        o = torch.ops.ds.quant_matmul(q, w, ws, sc)
        y, idx, _ = torch.ops.ds.moe_gating_top_k(logits, 8, bias=bias, **DS)
        return o, y, idx
    with ops.backend("triton"):
        outc = torch.compile(f, fullgraph=True)(x, r, g, w, ws, logits, bias)
    assert all(torch.equal(a, b) for a, b in zip(outc, eager)), "torch.compile(fullgraph) differs from eager"
