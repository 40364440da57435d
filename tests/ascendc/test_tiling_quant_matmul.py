"""Host tiling of quant_matmul (ascendc/quant_matmul/quant_matmul_tiling.cpp) over shape sweeps, through the C ABI:
every cube buffer fits its memory with the cube's alignments, the output tiles cover [M, N] exactly once and are
balanced over the cube cores, the K steps and the epilogue's column chunks cover K and N with their tails, the UB
holds the epilogue, and what cannot fit is a clear error naming the argument."""
from __future__ import annotations

import itertools
import re

import pytest
import torch

from ops import _ascendc as A

_WHY = A.unavailable_reason("cpu")   # builds the twin library once (cached)
pytestmark = [pytest.mark.ascendc, pytest.mark.skipif(_WHY is not None, reason=str(_WHY))]

_E = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}
MS = [1, 2, 15, 16, 17, 127, 128, 129, 4096, 16384]
KNS = [(1, 1), (31, 17), (320, 192), (1368, 2112), (1368, 576), (7168, 2112), (1536, 24576), (16384, 7168),
       (7168, 2048), (2048, 7168), (18432, 7168), (65535, 16)]


def _check(t: dict, M: int, N: int, K: int, out_dtype, cube: int, vec: int, mem: dict) -> None:
    bm, bn, bk = t["baseM"], t["baseN"], t["baseK"]
    assert bm % 16 == 0 and bn % 16 == 0 and bk % 32 == 0
    assert bm <= 4095 and bn <= 4095 and bk <= 4095                       # Mmad m / n / k ranges
    assert t["l0ABytes"] >= bm * bk and t["l0ABytes"] % 512 == 0 and t["l0ABytes"] <= mem["l0a_bytes"]
    assert t["l0BBytes"] >= bk * bn and t["l0BBytes"] % 512 == 0 and t["l0BBytes"] <= mem["l0b_bytes"]
    assert t["l0CBytes"] >= bm * bn * 4 and t["l0CBytes"] % 64 == 0 and t["l0CBytes"] <= mem["l0c_bytes"]
    assert t["l1ABytes"] % 32 == 0 and t["l1BBytes"] % 32 == 0
    assert t["l1ABytes"] >= bm * bk and t["l1BBytes"] >= bk * bn
    assert t["l1ABytes"] + t["l1BBytes"] <= mem["l1_bytes"]
    assert bm // 16 <= 255 and bn // 16 <= 255 and bk // 32 <= 255          # LoadData repeatTimes per call
    assert t["kBlocks"] == -(-K // 32) and t["nBlocks"] == -(-N // 16)
    # every output element in exactly one tile: tile -> (row block, column block) is a bijection onto blocks that
    # partition [0, M) and [0, N); tiles go round-robin over the cube cores
    rows, cols = torch.zeros(M, dtype=torch.int32), torch.zeros(N, dtype=torch.int32)
    blocks = set()
    per_core = [0] * max(t["usedCubeCores"], 1)
    for tile in range(t["tiles"]):
        mt, nt = divmod(tile, t["nTiles"])
        blocks.add((mt, nt))
        if nt == 0:
            rows[mt * bm:(mt + 1) * bm] += 1
        if mt == 0:
            cols[nt * bn:(nt + 1) * bn] += 1
        per_core[tile % len(per_core)] += 1
    assert len(blocks) == t["tiles"] == t["mTiles"] * t["nTiles"]
    assert bool((rows == 1).all()) and bool((cols == 1).all())
    assert (t["mTiles"] - 1) * bm < M and (t["nTiles"] - 1) * bn < N      # no empty tile
    if K:
        assert 1 <= t["usedCubeCores"] <= min(cube, t["tiles"])
        assert max(per_core) - min(per_core) <= 1 and max(per_core) == t["tilesPerCore"]
        assert (t["kTiles"] - 1) * bk + t["tailK"] == K and 1 <= t["tailK"] <= bk
    else:
        assert t["usedCubeCores"] == 0
    # epilogue: rows balanced over the vector cores, chunks cover N, buffers fit the UB
    used = t["usedVecCores"]
    assert 1 <= used <= min(vec, M)
    assert used * t["rowsPerCore"] + t["bigCores"] == M and t["bigCores"] < used
    c, n, tail = t["chunk"], t["numChunks"], t["tailChunk"]
    assert (n - 1) * c + tail == N and 1 <= tail <= c and (c == N or c % 64 == 0)
    assert t["accBytes"] >= c * 4 and t["vecBytes"] >= c * 4 and t["outBytes"] >= c * _E[out_dtype]
    bufs = [t["accBytes"]] * 2 + [t["vecBytes"]] * (1 + t["hasBias"]) + [t["outBytes"]]
    assert all(b % 32 == 0 for b in bufs) and sum(bufs) == t["ubUsed"] <= mem["ub_bytes"]
    assert c * 4 <= 65535                            # one DataCopyPad blockLen per chunk


DEFAULT = dict(l1_bytes=A.L1_910B, l0a_bytes=A.L0A_910B, l0b_bytes=A.L0B_910B, l0c_bytes=A.L0C_910B, ub_bytes=A.UB_910B)


@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("K,N", KNS)
def test_sweep_at_the_910b_sizes(M, K, N):
    for od, bias in ((torch.bfloat16, False), (torch.float32, True)):
        t = A.quant_matmul_tiling(M, N, K, out_dtype=od, bias=bias)
        _check(t, M, N, K, od, A.CUBE_CORES_910B, A.CORES_910B, DEFAULT)


@pytest.mark.parametrize("cube,vec", [(1, 1), (3, 7), (20, 40), (64, 128)])
@pytest.mark.parametrize("mem", [DEFAULT, dict(DEFAULT, l0a_bytes=4096, l0b_bytes=8192, l0c_bytes=4096, l1_bytes=16384,
                                               ub_bytes=8192)])
def test_sweep_over_core_counts_and_smaller_memories(cube, vec, mem):
    for M, (K, N) in itertools.product([1, 17, 300], [(0, 5), (33, 45), (1368, 576), (4099, 129)]):
        t = A.quant_matmul_tiling(M, N, K, cube_cores=cube, vec_cores=vec, **mem)
        _check(t, M, N, K, torch.bfloat16, cube, vec, mem)


def test_decode_and_prefill_spread_over_every_cube_core():
    assert A.quant_matmul_tiling(16, 2112, 7168)["usedCubeCores"] == A.CUBE_CORES_910B - 3   # 17 tiles of N
    assert A.quant_matmul_tiling(4096, 2048, 7168)["usedCubeCores"] == A.CUBE_CORES_910B


@pytest.mark.parametrize("kw,needle", [
    (dict(M=4, N=16, K=65536), "K (x_int8.shape[1]) = 65536 exceeds 65535"),
    (dict(M=4, N=70000, K=64), "N (weight_int8.shape[1]) = 70000 exceeds"),
    (dict(M=4, N=0, K=64), "N (weight_int8.shape[1]) = 0"),
    (dict(M=4, N=16, K=64, l0a_bytes=256), "cannot hold one 16 x 16 x 32 int8 tile"),
    (dict(M=4, N=16, K=64, ub_bytes=1000), "UB of 1000 B cannot hold"),
    (dict(M=4, N=16, K=64, cube_cores=0), "cube core count 0"),
])
def test_what_cannot_fit_is_a_clear_error(kw, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        A.quant_matmul_tiling(**kw)
