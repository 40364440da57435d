"""Backend-vs-reference comparison on an op's own OpSpec inputs (``ops.SPECS[name].make_inputs`` / ``.shapes``),
shared by the quant, mla_prolog and moe_gating correctness suites: the backend's outputs against the reference's
under the op's row of the tolerance table (ops/tolerances.py), outputs poisoned by the calling suite."""
from __future__ import annotations

import math

import torch

import ops
from ops.tolerances import TOLERANCES
from tests.tolerances import assert_close


def spec_shapes(name: str, limit: dict) -> list[tuple[str, dict]]:
    """(shape name, shape) of op ``name``'s OpSpec with each dimension in ``limit`` capped at its value (decode
    sizes for the interpreter), duplicates dropped."""
    seen, out = set(), []
    for nm, shape in ops.SPECS[name].shapes.items():
        s = {k: (min(v, limit[k]) if k in limit else v) for k, v in shape.items()}
        key = repr(sorted(s.items()))
        if key not in seen:
            seen.add(key)
            out.append((nm, s))
    return out


def assert_int8_close(out: torch.Tensor, ref: torch.Tensor, kind: str, name: str) -> None:
    """int8 outputs under tolerance row ``kind``: at most ``lsb`` apart, at no more than ``max_frac`` of the elements
    (at least one) when the row allows any difference."""
    tol = TOLERANCES[kind]
    d = (out.long().cpu() - ref.long().cpu()).abs()
    if d.numel():
        assert int(d.max()) <= tol["lsb"], f"{name}: off by {int(d.max())} LSB"
    if "max_frac" in tol:
        allowed = max(1, math.ceil(tol["max_frac"] * d.numel()))
        assert int((d > 0).sum()) <= allowed, f"{name}: {int((d > 0).sum())} elements differ (≤ {allowed} allowed)"


def check_against_reference(be, name: str, shape: dict, dtype: torch.dtype, gen: torch.Generator) -> None:
    """Run op ``name`` on backend ``be`` and on the reference with the same fresh inputs of ``shape`` (the OpSpec's
    make_inputs, dtype ``be.dtype(dtype)``) and compare every output: floats under the op's tolerance row (the
    output's dtype row), int8 as the op's int8 row allows (±1 LSB at ≤ 1 % for the int8 outputs of a float op),
    other ints exactly, and the mutated arguments (caches) the same way."""
    spec = ops.SPECS[name]
    inp = spec.make_inputs(shape, dtype=be.dtype(dtype), device="cpu", generator=gen)
    ref_in = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
    dev_in = {k: (v.to(be.device) if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
    fn = getattr(torch.ops.ds, name)
    with ops.backend("reference"):
        want = fn(**ref_in)
    with be.active():
        got = fn(**dev_in)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    pairs = [(f"output {i}", g, w) for i, (g, w) in enumerate(zip(got, want))]
    pairs += [(k, dev_in[k], ref_in[k]) for k, v in inp.items() if isinstance(v, torch.Tensor) and k.endswith("cache")]
    for what, g, w in pairs:
        assert g.shape == w.shape and g.dtype == w.dtype, what
        g = g.cpu()
        if not w.is_floating_point():
            if w.dtype == torch.int8 and spec.tolerance.startswith("int8"):
                assert_int8_close(g, w, spec.tolerance, what)
            elif w.dtype == torch.int8:
                # quantised caches / query of a float op: fp32 sums in another order cross rounding ties, so ±1 LSB
                # at ≤ 1 % of the elements (as tests/test_mla_prolog_triton.py)
                d = (g.long() - w.long()).abs()
                assert int(d.max()) <= 1 and int((d > 0).sum()) <= math.ceil(0.01 * d.numel()), what
            else:
                assert torch.equal(g, w), what
            continue
        kind = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[w.dtype]
        finite = torch.isfinite(w)
        assert torch.equal(torch.isfinite(g), finite), f"{what}: NaN / inf positions differ"
        if finite.any():
            assert_close(g[finite], w[finite], kind, name=what)
