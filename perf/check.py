"""Correctness check of a backend's outputs against the reference's, for the report's ``check`` column.

The tolerance rows are ``ops/tolerances.py`` (one table, shared with the tests). Unlike the test helper this returns a verdict and the
measured error instead of raising, so one bad row does not stop the report.

Which row applies to which output:

* output 0: the op's ``SPEC.tolerance`` row (its dtype's row when that is ``fp32`` but the output is bf16/fp16, as
  for ops whose output follows the input dtype; integer outputs are always exact);
* every other output and every mutated argument (caches): integer dtypes exact (``int8`` row), fp32 the ``fp32``
  row, bf16/fp16 their row;
* non-finite values must sit at the same places with the same sign/kind (NaN where the reference has NaN, e.g. an
  untouched NaN-filled cache slot); only finite positions enter the error metrics. A NaN where the reference is
  finite always fails.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from ops.tolerances import TOLERANCES, cos_diff  # noqa: F401  (one table)


@dataclasses.dataclass
class Verdict:
    ok: bool
    detail: str   # worst metric, or the first failure

    @property
    def label(self) -> str:
        return "PASS" if self.ok else "FAIL"


def _kind_for(t: torch.Tensor, main_kind: str | None) -> str:
    """The tolerance row for tensor ``t``: its dtype's row; for output 0 the op's ``SPEC.tolerance`` instead, unless
    that is the fp32 row and the output is a 16-bit float (an op whose output follows its input dtype)."""
    if not t.is_floating_point() and main_kind is not None and main_kind.startswith("int8"):
        return main_kind
    if main_kind is not None and t.is_floating_point() and not (
            main_kind == "fp32" and t.dtype in (torch.bfloat16, torch.float16)):
        return main_kind
    if not t.is_floating_point():
        return "int8"
    if t.dtype == torch.float16:
        return "fp16"
    if t.dtype == torch.bfloat16:
        return "bf16"
    return "fp32"


def compare(out: torch.Tensor, ref: torch.Tensor, kind: str, name: str = "out") -> Verdict:
    """Compare one tensor under tolerance row ``kind``."""
    if tuple(out.shape) != tuple(ref.shape):
        return Verdict(False, f"{name}: shape {tuple(out.shape)} != {tuple(ref.shape)}")
    if out.numel() == 0:
        return Verdict(True, f"{name}: empty")
    if kind.startswith("int8") or not (out.is_floating_point() or ref.is_floating_point()):
        diff = (out.long() - ref.to(out.device).long()).abs()
        m = int(diff.max())
        tol = TOLERANCES[kind if kind.startswith("int8") else "int8"]
        lsb, n_off = tol["lsb"], int((diff > 0).sum())
        ok = m <= lsb and n_off <= tol.get("max_frac", 1.0) * diff.numel()
        return Verdict(ok, f"{name}: max int diff {m} ({n_off} places differ, {int((diff > lsb).sum())} beyond "
                           f"{lsb} LSB)")
    # on the tensors' device; fp32 elementwise, fp64 accumulation (inputs are bf16/fp16/fp32)
    o, r = out.float(), ref.to(out.device).float()
    # non-finite positions must agree (NaN ↔ NaN, +inf ↔ +inf, −inf ↔ −inf)
    for pred, what in ((torch.isnan, "NaN"), (torch.isposinf, "+inf"), (torch.isneginf, "-inf")):
        po, pr = pred(o), pred(r)
        if not torch.equal(po, pr):
            return Verdict(False, f"{name}: {what} at {int((po != pr).sum())} places where the reference differs")
    f = torch.isfinite(r)
    if not f.any():
        return Verdict(True, f"{name}: no finite values")
    o, r = o[f], r[f]
    scale = float(r.abs().max())
    err = float((o - r).abs().max())
    tol = TOLERANCES[kind]
    if kind in ("bf16", "fp16"):
        cd = cos_diff(o, r)
        ok = cd <= tol["cos_diff"] and err <= tol["max_rel"] * scale + 1e-30
        return Verdict(ok, f"{name}: cos_diff {cd:.1e}, max|err|/max|ref| {err / max(scale, 1e-30):.1e}")
    if kind == "fp32":
        ok = err <= tol["rel"] * max(scale, 1e-30)
        return Verdict(ok, f"{name}: max|err|/max|ref| {err / max(scale, 1e-30):.1e}")
    if kind == "lse":
        return Verdict(err <= tol["abs"], f"{name}: max|err| {err:.1e}")
    raise KeyError(kind)


def _flatten(x: Any) -> list[torch.Tensor | None]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        out: list[torch.Tensor | None] = []
        for v in x:
            out.extend(_flatten(v))
        return out
    return [None]


def check_outputs(out: Any, ref: Any, main_kind: str, *, mutated: Sequence[tuple[str, torch.Tensor, torch.Tensor]] = ()
                  ) -> Verdict:
    """Check every output (and every ``(name, got, expected)`` mutated argument). The verdict's detail names the
    first failure, else the main output's metric."""
    outs, refs = _flatten(out), _flatten(ref)
    if len(outs) != len(refs):
        return Verdict(False, f"{len(outs)} outputs, reference has {len(refs)}")
    details = []
    for i, (o, r) in enumerate(zip(outs, refs)):
        if o is None or r is None:
            if (o is None) != (r is None):
                return Verdict(False, f"output {i}: None vs tensor")
            continue
        v = compare(o, r, _kind_for(o, main_kind if i == 0 else None), name=f"out{i}")
        if not v.ok:
            return v
        details.append(v.detail)
    for name, got, exp in mutated:
        v = compare(got, exp, _kind_for(got, None), name=name)
        if not v.ok:
            return v
    return Verdict(True, details[0] if details else "ok")


def changed_region(got: torch.Tensor, expected: torch.Tensor, original: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The elements of a mutated argument that either run changed (NaN-aware), as two 1-D tensors, so a big cache is
    compared only where something was written. A write to a wrong slot shows up as a mismatch there."""
    def changed(a: torch.Tensor) -> torch.Tensor:
        same = a == original
        if a.is_floating_point():
            same |= torch.isnan(a) & torch.isnan(original)
        return ~same
    mask = changed(got) | changed(expected)
    return got[mask], expected[mask]
