"""Host tiling of moe_gating_top_k (ascendc/moe_gating/moe_gating_tiling.cpp) over shape sweeps through the C ABI:
buffers fit and are 32 B multiples, tokens are balanced over cores, the y / expert_idx staging holds its batch."""
from __future__ import annotations

import re

import pytest
import torch

from ops import _ascendc as A

_WHY = A.unavailable_reason("cpu")   # builds the twin library once (cached)
pytestmark = [pytest.mark.ascendc, pytest.mark.skipif(_WHY is not None, reason=str(_WHY))]


def _buffers(t: dict) -> list[int]:
    b = t["bufferNum"]
    out = [t["inBytes"]] * b + [t["normBytes"]] * b + [t["scoreBytes"], t["reduceBytes"], t["wBytes"], t["idxBytes"]]
    if t["hasBias"]:
        out.append(t["biasBytes"])
    if t["dtype"] != 0:
        out.append(t["yBytes"])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_sweep_fits_and_balances(dtype):
    e = 4 if dtype == torch.float32 else 2
    for E, G in ((64, 1), (64, 8), (128, 4), (160, 10), (256, 8), (256, 1), (384, 12), (384, 384), (1024, 8),
                 (1024, 1)):
        for k in (1, 6, 8, E // G):
            for rows in (0, 1, 39, 40, 41, 256, 16384):
                t = A.gating_tiling(rows, E, k, k_group=G, group_count=G, dtype=dtype)
                bufs = _buffers(t)
                assert all(x % 32 == 0 and x > 0 for x in bufs), bufs
                assert sum(bufs) <= t["ubUsed"] <= A.UB_910B
                assert t["inBytes"] >= E * e and t["normBytes"] >= E * 4 and t["scoreBytes"] >= E * 4
                assert t["rowBatch"] >= 1 and t["wBytes"] >= t["rowBatch"] * k * 4
                assert t["rowBatch"] * k * 4 <= 65535          # one DataCopyPad per batch of expert_idx
                used = t["usedCores"]
                assert used == min(rows, 40)
                if rows:
                    per = [t["rowsPerCore"] + (i < t["bigCores"]) for i in range(used)]
                    assert sum(per) == rows and max(per) - min(per) <= 1 and min(per) >= 1


@pytest.mark.parametrize("kw,needle", [
    (dict(rows=4, experts=2048, k=8), "E (x.shape[1]) = 2048"),
    (dict(rows=4, experts=256, k=8, group_count=3), "group_count = 3"),
    (dict(rows=4, experts=256, k=80, k_group=2, group_count=8), "k = 80"),
    (dict(rows=4, experts=64, k=1, group_count=64, group_select_mode=1), "group_select_mode = 1"),
])
def test_untileable_shapes_are_errors_naming_the_argument(kw, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        A.gating_tiling(**kw)
