"""quant_matmul as the Ascend C kernel (ascendc/quant_matmul/) on the CPU twin, for what the shared suite
(tests/test_quant.py) does not reach: the weight-packing helper's layout, the packed entry's message for an unpacked
weight, several tiles per cube core with K and N tails, int32 sums beyond 2^24, K = 0, a shape the host tiling refuses
(BackendUnavailable when forced, the reference under auto) and the modeled time report. The kernel keeps
reference/quant.py's fp32 epilogue order, so its output equals the reference bit for bit."""
from __future__ import annotations

import pytest
import torch

import ops
from ops import BackendUnavailable
from ops import _ascendc as A
from reference import quant as R

_WHY = A.unavailable_reason("cpu")   # builds the twin library once (cached)
pytestmark = [pytest.mark.ascendc, pytest.mark.skipif(_WHY is not None, reason=str(_WHY))]


def _inputs(M, K, N, seed, bias=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8)
    w = torch.randint(-128, 128, (K, N), generator=g, dtype=torch.int8)
    ws = (0.5 + torch.rand(N, generator=g)) / (127.0 * max(K, 1) ** 0.5)
    xs = (0.5 + torch.rand(M, generator=g)) / 127.0
    return x, w, ws, xs, torch.randn(N, generator=g) if bias else None


@pytest.mark.parametrize("K,N", [(1, 1), (33, 17), (320, 192), (70, 45)])
def test_pack_quant_weight_is_fractal_nz_of_the_nk_weight(K, N):
    w = _inputs(1, K, N, K + N)[1]
    p = A.pack_quant_weight(w.t().contiguous().t())          # any strides
    K1, N1 = -(-K // 32), -(-N // 16)
    assert p.shape == (K1, N1, 16, 32) and p.dtype == torch.int8 and p.is_contiguous()
    k, n = torch.meshgrid(torch.arange(K), torch.arange(N), indexing="ij")
    assert torch.equal(p[k // 32, n // 16, n % 16, k % 32], w)
    full = torch.zeros(K1 * 32, N1 * 16, dtype=torch.int8)
    full[:K, :N] = w
    assert torch.equal(p.permute(0, 3, 1, 2).reshape(K1 * 32, N1 * 16), full)   # zero beyond K and N
    assert torch.equal(R.fractal_nz_to_nd(p, N, K).t(), w)                      # round trip


def test_pack_quant_weight_rejects_a_non_int8_weight():
    with pytest.raises(ValueError, match=r"weight_int8 must be a 2-D int8 tensor \[K, N\], got torch.float32"):
        A.pack_quant_weight(torch.zeros(4, 4))


def test_the_packed_entry_names_an_unpacked_weight():
    x, w, ws, xs, _ = _inputs(3, 64, 40, 1)
    with pytest.raises(ValueError, match=r"w_nz must be the packed int8 weight of shape \[2, 3, 16, 32\].*"
                                         r"got torch.int8 of shape \[64, 40\] — an unpacked \[K, N\] weight: pack it "
                                         r"once with ops._ascendc.pack_quant_weight"):
        A.quant_matmul_packed(x, w, ws, xs)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("cube,vec", [(3, 7), (20, 40)])
def test_many_tiles_per_core_with_k_and_n_tails(out_dtype, cube, vec):
    x, w, ws, xs, b = _inputs(130, 600, 300, 2)   # 2 x 3 tiles, 3 K steps (tail 88), N tail 44, M tail 2
    t = A.quant_matmul_tiling(130, 300, 600, cube_cores=cube)
    assert t["kTiles"] > 1 and t["tiles"] > 1 and t["tailK"] < t["baseK"]
    out, rep = A._run_quant_matmul(x, A.pack_quant_weight(w), ws, xs, b, out_dtype, vec, cube)
    assert torch.equal(out, R.quant_matmul(x, w, ws, xs, bias=b, out_dtype=out_dtype))
    assert rep.block_dim == min(vec, 130)   # the report's launch is the epilogue's; times add up both


def test_int32_sums_beyond_two_to_the_24_are_exact():
    K = 4099
    x = torch.full((3, K), -128, dtype=torch.int8)
    w = torch.full((K, 20), -128, dtype=torch.int8)
    ws, xs = torch.full((20,), 1.0), torch.full((3,), 1.0)
    out = A.quant_matmul(x, w, ws, xs, out_dtype=torch.float32)
    assert torch.equal(out, R.quant_matmul(x, w, ws, xs, out_dtype=torch.float32))
    assert float(out[0, 0]) == float(torch.tensor(128 * 128 * K, dtype=torch.int32).float())


def test_k_zero_gives_the_bias():
    x, w, ws, xs, b = _inputs(5, 0, 24, 3)
    assert torch.equal(A.quant_matmul(x, w, ws, xs, bias=b), R.quant_matmul(x, w, ws, xs, bias=b))


def test_a_k_the_tiling_refuses_is_unavailable_when_forced_and_falls_back_under_auto():
    x, w, ws, xs, _ = _inputs(1, 65536 + 32, 16, 4, bias=False)
    with ops.backend("ascendc"), pytest.raises(BackendUnavailable, match="65535"):
        ops.quant.quant_matmul(x, w, ws, xs)
    assert torch.equal(ops.quant.quant_matmul(x, w, ws, xs), R.quant_matmul(x, w, ws, xs))


def test_modeled_time_reports_the_cube_and_the_vector_pass():
    inp = ops.quant.make_inputs_quant_matmul({"M": 16, "K": 1536, "N": 256, "bias": True},
                                             generator=torch.Generator().manual_seed(5))
    m = A.modeled("quant_matmul", inp)
    assert m["time_us"] > 0 and m["label"] == "modeled 910B"
    assert m["pipes"]["M"] > 0 and m["pipes"]["MTE1"] > 0 and m["pipes"]["FIX"] > 0 and m["pipes"]["V"] > 0
