"""Input builders and bit views shared by the ds::mla_prolog test files (tests/test_mla_prolog*.py)."""
from __future__ import annotations

import torch

from ops.mla_prolog import make_inputs


def mla_small(mode: str = "bf16", T: int = 6, N: int = 2, *, dtype: torch.dtype, device="cpu", seed: int = 0,
              **kw) -> dict:
    """Fresh random mla_prolog inputs (ops.mla_prolog.make_inputs) at test size: He 64, Hcq 96, Hckv 512, D 128,
    Dr 64, block_size 16 unless ``kw`` says otherwise (``B`` / ``S`` for a 3-D token_x in place of ``T``)."""
    shape = dict(T=T, N=N, He=64, Hcq=96, Hckv=512, D=128, Dr=64, block_size=16, mode=mode)
    if "B" in kw:
        shape.pop("T")
    shape.update(kw)
    return make_inputs(shape, dtype=dtype, device=device, generator=torch.Generator().manual_seed(seed))


def clone_inputs(inp: dict) -> dict:
    """A copy of an input dict with every tensor cloned (caches included)."""
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bit pattern of a tensor (equality that tells NaN payloads and ±0 apart)."""
    t = t.contiguous()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])
