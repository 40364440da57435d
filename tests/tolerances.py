"""Test assertions over the docs/architecture.md (tolerances) table (ops/tolerances.py): assert_close, poison."""
from __future__ import annotations

import torch

from ops.tolerances import TOLERANCES, cos_diff  # noqa: E402,F401  (the one tolerance table)


def assert_close(out: torch.Tensor, ref: torch.Tensor, kind: str = "bf16", *, name: str = "out") -> None:
    """Assert ``out`` matches ``ref`` under the tolerance ``kind``; NaN never passes."""
    assert out.shape == ref.shape, f"{name}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    out_d, ref_d = out.double().cpu(), ref.double().cpu()
    assert not torch.isnan(out_d).any(), f"{name}: NaN in output ({int(torch.isnan(out_d).sum())} elements)"
    tol = TOLERANCES[kind]
    if kind in ("bf16", "fp16"):
        finite = torch.isfinite(ref_d)
        assert torch.equal(torch.isfinite(out_d), finite), f"{name}: ±inf positions differ from the reference"
        cd = cos_diff(out_d[finite], ref_d[finite])
        scale = ref_d[finite].abs().max().item() if finite.any() else 0.0
        err = (out_d[finite] - ref_d[finite]).abs().max().item() if finite.any() else 0.0
        assert cd <= tol["cos_diff"], f"{name}: cosine difference {cd:.3e} > {tol['cos_diff']:.0e}"
        assert err <= tol["max_rel"] * scale + 1e-30, f"{name}: max|err| {err:.3e} > {tol['max_rel']}·max|ref| = {tol['max_rel'] * scale:.3e}"
    elif kind == "fp32":
        err = (out_d - ref_d).abs().max().item() if out_d.numel() else 0.0
        scale = ref_d.abs().max().item() if ref_d.numel() else 0.0
        assert err <= tol["rel"] * max(scale, 1e-30), f"{name}: max|err| {err:.3e} > {tol['rel']}·max|ref| ({scale:.3e})"
    elif kind == "lse":
        assert torch.equal(torch.isneginf(out_d), torch.isneginf(ref_d)), f"{name}: -inf positions differ"
        f = torch.isfinite(ref_d)
        err = (out_d[f] - ref_d[f]).abs().max().item() if f.any() else 0.0
        assert err <= tol["abs"], f"{name}: max|err| {err:.3e} > {tol['abs']}"
    elif kind == "int8":
        diff = (out.long().cpu() - ref.long().cpu()).abs()
        m = int(diff.max()) if diff.numel() else 0
        assert m <= tol["lsb"], f"{name}: int8 outputs differ by up to {m} LSB at {int((diff > tol['lsb']).sum())} places"
    else:
        raise KeyError(kind)


def poison(*tensors: torch.Tensor) -> None:
    """Fill outputs with NaN (floats) or a sentinel (ints) before a kernel writes them."""
    for t in tensors:
        if t.is_floating_point():
            t.fill_(float("nan"))
        else:
            t.fill_(torch.iinfo(t.dtype).min if t.dtype != torch.bool else False)


_EMPTY = torch.empty  # captured at import, before any test patches torch.empty


def poisoned_empty(*args, **kwargs) -> torch.Tensor:
    """``torch.empty`` whose memory starts poisoned (see :func:`poison`); tests patch it in
    (``monkeypatch.setattr(torch, "empty", poisoned_empty)``) so outputs and workspaces a kernel fails to write show."""
    t = _EMPTY(*args, **kwargs)
    if not t.requires_grad:      # a kernel output never requires grad; torch.compile's own leaves (inductor) do
        poison(t)
    return t
