"""Host tiling of dynamic_quant / rms_norm_dynamic_quant (ascendc/quant/quant_tiling.cpp) over shape sweeps,
through the C ABI: every buffer fits the UB, every GM copy is whole 32 B blocks at 32 B-aligned offsets or goes
through DataCopyPad, tokens are balanced over cores within one token, and the chunks cover each row exactly."""
from __future__ import annotations

import re

import pytest
import torch

from ops import _ascendc as A

_WHY = A.unavailable_reason("cpu")   # builds the twin library once (cached)
pytestmark = [pytest.mark.ascendc, pytest.mark.skipif(_WHY is not None, reason=str(_WHY))]

_E = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}


def _buffers(t: dict) -> list[int]:
    """InitBuffer lengths the kernel (ascendc/quant/quant_kernel.h) requests for this tiling."""
    b = t["bufferNum"]
    queues = 1 + (1 + t["hasResidual"] if t["rms"] else 0)      # x, [residual_out, [residual]]
    out = [t["inBytes"]] * (b * queues) + [t["outBytes"]] * b
    out += [t["vecBytes"]] * (t["hasSmooth"] + t["rms"])
    out += [t["rowBytes"]] if t["resident"] else [t["workBytes"]] * (1 + t["rms"])
    return out + [t["workBytes"]] * 2 + [t["halfBytes"], t["reduceBytes"], t["scaleBytes"]]


def _check(t: dict, rows: int, cols: int, dtype, cores: int, ub: int) -> None:
    e = _E[dtype]
    bufs = _buffers(t)
    assert all(x % 32 == 0 and x > 0 for x in bufs), bufs
    assert sum(bufs) == t["ubUsed"] <= ub
    # chunks cover the row; each buffer holds its chunk
    c, n, tail = t["chunk"], t["numChunks"], t["tailChunk"]
    assert (n - 1) * c + tail == cols and 1 <= tail <= c
    assert c == cols or c % 64 == 0
    assert t["inBytes"] >= c * e and t["outBytes"] >= c and t["workBytes"] >= c * 4 and t["halfBytes"] >= c * 2
    assert c * 4 <= 65535 and t["scaleBatch"] * 4 <= 65535      # each DataCopyPad within its blockLen range
    assert t["resident"] == 0 or t["rowBytes"] >= cols * 4
    # tokens over cores: within one token of each other, all covered
    used = t["usedCores"]
    assert used == min(rows, cores)
    if rows:
        per = [t["rowsPerCore"] + (i < t["bigCores"]) for i in range(used)]
        assert sum(per) == rows and max(per) - min(per) <= 1 and min(per) >= 1
        assert t["scaleBytes"] >= min(max(per), t["scaleBatch"]) * 4
    # every GM copy: DataCopy only for whole blocks at block-aligned GM offsets, else DataCopyPad
    for r in range(min(rows, 3)):
        for k in range(n):
            ln = tail if k == n - 1 else c
            if t["gmAligned"] and (ln * e) % 32 == 0:
                assert ((r * cols + k * c) * e) % 32 == 0 and ((r * cols + k * c) * 1) % 32 == 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("rms,residual,smooth", [(False, False, False), (False, False, True), (True, False, True),
                                                 (True, True, False), (True, True, True)])
def test_sweep_fits_covers_and_balances(dtype, rms, residual, smooth):
    for rows in (0, 1, 2, 39, 40, 41, 4096, 16384):
        for cols in (1, 7, 31, 32, 33, 64, 1000, 1368, 1536, 2048, 2112, 7168, 7169, 18432):
            for cores in (1, 24, 40):
                t = A.quant_tiling(rows, cols, dtype=dtype, rms=rms, residual=residual, smooth=smooth,
                                   core_num=cores)
                _check(t, rows, cols, dtype, cores, A.UB_910B)


def test_small_ub_and_chunk_caps_stream_the_row():
    """A row that does not fit stays correct in shape: the tiling streams it in 64-multiple chunks."""
    for ub in (73728, 98304, 131072):
        for cap in (0, 64, 256, 1000):
            t = A.quant_tiling(17, 7168, rms=True, residual=True, ub_bytes=ub, max_chunk=cap)
            _check(t, 17, 7168, torch.bfloat16, 40, ub)
            assert t["numChunks"] > 1
    t = A.quant_tiling(8, 18432, rms=True, residual=True)
    assert t["resident"] == 0 and t["numChunks"] > 1


def test_deepseek_hidden_row_is_one_resident_chunk():
    """dynamic_quant at H = 7168 bf16 keeps the whole row in UB in one chunk (one copy in, one out per token)."""
    t = A.quant_tiling(4096, 7168)
    assert t["resident"] == 1 and t["numChunks"] == 1


@pytest.mark.parametrize("kw,needle", [
    (dict(rows=4, cols=30000, rms=True), "H (x.shape[-1]) = 30000"),
    (dict(rows=4, cols=60000), "H (x.shape[-1]) = 60000"),
    (dict(rows=4, cols=0), "H (x.shape[-1]) must be >= 1"),
    (dict(rows=4, cols=64, core_num=0), "core_num"),
])
def test_untileable_shapes_are_errors_naming_the_argument(kw, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        A.quant_tiling(**kw)
