"""Strided views of small vector inputs (scales, biases, gammas, seq_lens, cache_index) give the same result as
contiguous ones on every backend. Found by the fresh-user audit: the Triton launchers read 1-D inputs as
``ptr + i``, so a strided view silently read the wrong elements (same kind as cases.md P1)."""
from __future__ import annotations

import os

import pytest
import torch

import ops
from conftest import requires_triton
from test_registry import TINY, _split

DTYPE = {"moe_gating_top_k": torch.float32}  # fp16 elsewhere: the interpreter's bf16 tl.dot is wrong

# the Triton runs here use CPU tensors, which need the interpreter; a CUDA machine leaves TRITON_INTERPRET unset
# (conftest) and runs the kernels through tests/gpu instead
_CPU_TRITON = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="CPU tensors need TRITON_INTERPRET=1 (a CUDA machine: tests/gpu)")


def _backends():
    return ["reference", pytest.param("triton", marks=_CPU_TRITON)]


def _strided(v: torch.Tensor) -> torch.Tensor:
    """Same values and shape, stride 2 along the one long dim (a view into a buffer twice as long, the gaps
    poisoned): a [n] vector, or a [n, 1] column such as a per-token scale."""
    buf = torch.full((v.numel() * 2,), float("nan") if v.is_floating_point() else -7, dtype=v.dtype)
    view = buf[::2].view(v.shape) if v.dim() == 1 else buf[::2].unsqueeze(1)
    view.copy_(v)
    return view


def _vector_like(v) -> bool:
    """A 1-D vector, or a [n, 1] column (mla_prolog's dequant_scale_x: its [T, 1] view reshapes to a strided
    [T] that the kernels read at unit stride, found by the session-6 audit)."""
    return isinstance(v, torch.Tensor) and v.numel() > 1 and (v.dim() == 1 or (v.dim() == 2 and v.shape[1] == 1))


def _run(name, inputs, fn=None):
    """Outputs + written caches of ``torch.ops.ds.<name>`` (or ``fn``, e.g. a Triton launcher) on ``inputs``."""
    # clone only the caches the op writes (cloning a strided view would make it contiguous)
    args, kwargs = _split(name, {k: (v.clone() if isinstance(v, torch.Tensor) and v.dim() == 4 else v)
                                 for k, v in inputs.items()})
    out = (fn or getattr(torch.ops.ds, name))(*args, **kwargs)
    caches = [a for a in args if isinstance(a, torch.Tensor) and a.dim() == 4]
    return list(out if isinstance(out, (tuple, list)) else (out,)) + caches


@requires_triton
@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("name", sorted(TINY))
def test_strided_vector_inputs_match_contiguous(name, backend):
    spec = ops.SPECS[name]
    shape = dict(TINY[name])
    if name == "moe_gating_top_k":
        shape = {**next(iter(spec.shapes.values())), **shape}
    if name == "mla_prolog":
        shape["mode"] = "a8w8"  # has the most vector inputs: gammas, per-token and per-channel scales
    inputs = spec.make_inputs(shape, dtype=DTYPE.get(name, torch.float16), device="cpu",
                              generator=torch.Generator().manual_seed(7))
    if name == "moe_gating_top_k" and inputs.get("bias") is None:
        inputs["bias"] = torch.randn(shape["E"], generator=torch.Generator().manual_seed(3)) * 0.1
    vectors = [k for k, v in inputs.items() if _vector_like(v)]
    assert vectors, f"{name}: no vector input to stride"
    strided = {k: (_strided(v) if k in vectors else v) for k, v in inputs.items()}
    with ops.backend(backend):
        want = _run(name, inputs)
        got = _run(name, strided)
    for i, (w, g) in enumerate(zip(want, got)):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0, msg=lambda m: f"{name} output {i} with strided {vectors}: {m}")


@requires_triton
@pytest.mark.parametrize("backend", _backends())
def test_A3_block_table_with_a_column_stride_matches_contiguous(backend):
    """Audit finding: the Triton launcher assumed a unit column stride in block_table and read the wrong pages."""
    spec = ops.SPECS["amla"]
    inp = spec.make_inputs(dict(B=3, S_q=2, N=4, seq_lens=[5, 40, 70], block_size=16), dtype=torch.float16,
                           device="cpu", generator=torch.Generator().manual_seed(1))
    strided = dict(inp, block_table=inp["block_table"].t().contiguous().t())   # same values, column stride B
    assert not strided["block_table"].is_contiguous()
    with ops.backend(backend):
        want = _run("amla", inp)
        got = _run("amla", strided)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)


@requires_triton
@_CPU_TRITON
@pytest.mark.parametrize("S_q", [1, 2])
@pytest.mark.parametrize("N", [32, 64, 128])
def test_A4_tp_head_counts_triton(N, S_q):
    """Audit finding: the Triton A4 test covered N <= 16 only; 32/64/128 pick other tiles of the launch config."""
    from tests.tolerances import assert_close
    spec = ops.SPECS["amla"]
    inp = spec.make_inputs(dict(B=2, S_q=S_q, N=N, seq_lens=[19, 33], block_size=16), dtype=torch.float16,
                           device="cpu", generator=torch.Generator().manual_seed(N + S_q))
    with ops.backend("reference"):
        ref = _run("amla", inp)
    with ops.backend("triton"):
        out = _run("amla", inp)
    assert_close(out[0], ref[0], "fp16", name="out")
    assert_close(out[1], ref[1], "lse", name="lse")


_LAUNCHERS = {"amla": ("ops.triton.amla", "amla"), "mla_prolog": ("ops.triton.mla_prolog", "mla_prolog"),
              "dynamic_quant": ("ops.triton.quant", "dynamic_quant"),
              "rms_norm_dynamic_quant": ("ops.triton.quant", "rms_norm_dynamic_quant"),
              "quant_matmul": ("ops.triton.quant", "quant_matmul"),
              "moe_gating_top_k": ("ops.triton.moe_gating", "moe_gating_top_k")}


@requires_triton
@_CPU_TRITON
@pytest.mark.parametrize("name", sorted(TINY))
def test_public_launchers_read_strided_vectors_like_contiguous(name):
    """Session-7 audit: the exported Triton launchers (not only the registered ops, which copy first) read 1-D
    vectors and block-table rows as ptr + i; a strided view (here poisoned gaps) or a column-major block_table
    silently gave wrong results (amla, quant_matmul scales / bias, moe_gating bias)."""
    import importlib
    mod, fn = _LAUNCHERS[name]
    launcher = getattr(importlib.import_module(mod), fn)
    spec = ops.SPECS[name]
    shape = dict(TINY[name])
    if name == "moe_gating_top_k":
        shape = {**next(iter(spec.shapes.values())), **shape}
    if name == "mla_prolog":
        shape["mode"] = "a8w8"
    inputs = spec.make_inputs(shape, dtype=DTYPE.get(name, torch.float16), device="cpu",
                              generator=torch.Generator().manual_seed(5))
    if name == "moe_gating_top_k" and inputs.get("bias") is None:
        inputs["bias"] = torch.randn(shape["E"], generator=torch.Generator().manual_seed(3)) * 0.1
    strided = {k: (_strided(v) if _vector_like(v) else v) for k, v in inputs.items()}
    if name == "amla":
        strided["block_table"] = inputs["block_table"].t().contiguous().t()
        assert strided["block_table"].stride(1) != 1
    assert any(s is not inputs[k] for k, s in strided.items())

    for i, (w, g) in enumerate(zip(_run(name, inputs, launcher), _run(name, strided, launcher))):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0, msg=lambda m: f"{name} output {i}: {m}")


@pytest.mark.parametrize("name", ["dynamic_quant", "rms_norm_dynamic_quant", "moe_gating_top_k"])
def test_transposed_input_outputs_match_the_fake(name):
    """Session-7 audit: with a transposed (column-major) x the references returned outputs in x's layout while the
    fake impls (and the kernels) give contiguous ones: opcheck's fake-tensor test failed and torch.compile
    (fullgraph) died in inductor's stride assert."""
    g = torch.Generator().manual_seed(2)
    xt = torch.randn(64, 8, generator=g).t()                        # [8, 64], strides (1, 8)
    if name == "dynamic_quant":
        args, kwargs = (xt,), {}
    elif name == "rms_norm_dynamic_quant":
        args, kwargs = (xt, torch.rand(64, generator=g) + 0.5), dict(epsilon=1e-6, residual=torch.randn(64, 8, generator=g).t())
    else:
        args, kwargs = (torch.randn(16, 8, generator=g).t(), 2), dict(norm_type=1)
    op = getattr(torch.ops.ds, name)
    with ops.backend("reference"):
        torch.library.opcheck(op.default, args, kwargs, test_utils=("test_faketensor",))
        want = op(*args, **kwargs)
        got = torch.compile(lambda *a: op(*a, **kwargs), fullgraph=True, backend="aot_eager")(*args)
    for w, o in zip(want, got):
        assert w.is_contiguous()
        torch.testing.assert_close(o, w, equal_nan=True, rtol=0, atol=0)
