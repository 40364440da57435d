"""The tolerance table of docs/architecture.md (tolerances), in one place: tests, the perf report's check column and users
comparing a backend with the reference all read it.

    >>> from ops.tolerances import TOLERANCES, cos_diff
    >>> TOLERANCES["bf16"]
    {'cos_diff': 1e-05, 'max_rel': 0.02}
"""
from __future__ import annotations

import torch

# row -> limits. bf16/fp16: cosine difference and max |err| as a fraction of max|ref|; fp32: max |err| relative to
# max|ref|; lse: absolute; int8: exact (0 LSB); int8_near_tie: ±1 LSB at no more than max_frac of the elements,
# for rms_norm_dynamic_quant, whose fp32 Σx² reduction order is not the reference's (the rms moves by an ulp and
# values within an ulp of a .5 tie round the other way: 2–10 per 10⁷ on the H200; tests/test_quant_triton.py checks
# each such element sits at a near-tie)
TOLERANCES = {
    "bf16": dict(cos_diff=1e-5, max_rel=2e-2),
    "fp16": dict(cos_diff=1e-5, max_rel=2e-2),
    "fp32": dict(rel=1e-5),
    "lse": dict(abs=1e-5),
    "int8": dict(lsb=0),
    "int8_near_tie": dict(lsb=1, max_frac=1e-5),
}


def cos_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 − 2Σxy / Σ(x² + y²) accumulated in fp64 on the tensors' device (DeepGEMM's ``calc_diff``); 0 for
    identical inputs, all-zero ones included. x, y: any shape with the same number of elements, any float dtype."""
    x, y = (t.flatten() if t.dtype == torch.float64 else t.float().flatten() for t in (x, y))
    den = torch.sum(x * x, dtype=torch.float64) + torch.sum(y * y, dtype=torch.float64)
    if float(den) == 0:
        return 0.0
    return float(1 - 2 * torch.sum(x * y, dtype=torch.float64) / den)
