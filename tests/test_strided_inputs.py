"""Strided views of small vector inputs (scales, biases, gammas, seq_lens, cache_index) give the same result as
contiguous ones on every backend. Found by the fresh-user audit: the Triton launchers read 1-D inputs as
``ptr + i``, so a strided view silently read the wrong elements (same kind as cases.md P1)."""
from __future__ import annotations

import importlib

import pytest
import torch

import ops
from tests.backends import backends_for, kernel_backends_for, op_backend_params
from tests.test_registry import TINY, _split
from tests.tolerances import assert_close


def _dtype(name, be):
    """moe_gating_top_k in fp32; the others in bf16 (fp16 under the interpreter: Backend.dtype)."""
    return torch.float32 if name == "moe_gating_top_k" else be.dtype(torch.bfloat16)


def _strided(v: torch.Tensor) -> torch.Tensor:
    """Same values and shape, stride 2 along the one long dim (a view into a buffer twice as long, the gaps
    poisoned): a [n] vector, or a [n, 1] column such as a per-token scale."""
    buf = torch.full((v.numel() * 2,), float("nan") if v.is_floating_point() else -7, dtype=v.dtype, device=v.device)
    view = buf[::2].view(v.shape) if v.dim() == 1 else buf[::2].unsqueeze(1)
    view.copy_(v)
    return view


def _vector_like(v) -> bool:
    """A 1-D vector, or a [n, 1] column (mla_prolog's dequant_scale_x: its [T, 1] view reshapes to a strided
    [T] that the kernels read at unit stride, an audit finding)."""
    return isinstance(v, torch.Tensor) and v.numel() > 1 and (v.dim() == 1 or (v.dim() == 2 and v.shape[1] == 1))


def _shape(name):
    spec = ops.SPECS[name]
    shape = dict(TINY[name])
    if name == "moe_gating_top_k":
        shape = {**next(iter(spec.shapes.values())), **shape}
    if name == "mla_prolog":
        shape["mode"] = "a8w8"  # has the most vector inputs: gammas, per-token and per-channel scales
    return shape


def _inputs(name, be, seed):
    inputs = ops.SPECS[name].make_inputs(_shape(name), dtype=_dtype(name, be), device=be.device,
                                         generator=torch.Generator().manual_seed(seed))
    if name == "moe_gating_top_k" and inputs.get("bias") is None:
        inputs["bias"] = torch.randn(inputs["x"].shape[-1], generator=torch.Generator().manual_seed(3)).to(be.device) * 0.1
    return inputs


def _run(name, inputs, fn=None):
    """Outputs + written caches of ``torch.ops.ds.<name>`` (or ``fn``, e.g. a Triton launcher) on ``inputs``."""
    # clone only the caches the op writes (cloning a strided view would make it contiguous)
    args, kwargs = _split(name, {k: (v.clone() if isinstance(v, torch.Tensor) and v.dim() == 4 else v)
                                 for k, v in inputs.items()})
    out = (fn or getattr(torch.ops.ds, name))(*args, **kwargs)
    caches = [a for a in args if isinstance(a, torch.Tensor) and a.dim() == 4]
    return list(out if isinstance(out, (tuple, list)) else (out,)) + caches


@pytest.mark.parametrize("name,be", op_backend_params(sorted(TINY)))
def test_strided_vector_inputs_match_contiguous(name, be):
    inputs = _inputs(name, be, seed=7)
    vectors = [k for k, v in inputs.items() if _vector_like(v)]
    assert vectors, f"{name}: no vector input to stride"
    strided = {k: (_strided(v) if k in vectors else v) for k, v in inputs.items()}
    with be.active():
        want = _run(name, inputs)
        got = _run(name, strided)
    for i, (w, g) in enumerate(zip(want, got)):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0, msg=lambda m: f"{name} output {i} with strided {vectors}: {m}")


@pytest.mark.parametrize("be", backends_for("amla"))
def test_A3_block_table_with_a_column_stride_matches_contiguous(be):
    """Audit finding: the Triton launcher assumed a unit column stride in block_table and read the wrong pages."""
    spec = ops.SPECS["amla"]
    inp = spec.make_inputs(dict(B=3, S_q=2, N=4, seq_lens=[5, 40, 70], block_size=16),
                           dtype=be.dtype(torch.bfloat16), device=be.device, generator=torch.Generator().manual_seed(1))
    strided = dict(inp, block_table=inp["block_table"].t().contiguous().t())   # same values, column stride B
    assert not strided["block_table"].is_contiguous()
    with be.active():
        want = _run("amla", inp)
        got = _run("amla", strided)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("be", kernel_backends_for("amla"))
@pytest.mark.parametrize("S_q", [1, 2])
@pytest.mark.parametrize("N", [32, 64, 128])
def test_A4_tp_head_counts(N, S_q, be):
    """Audit finding: the Triton A4 test covered N <= 16 only; 32/64/128 pick other tiles of the launch config."""
    spec = ops.SPECS["amla"]
    dt = be.dtype(torch.bfloat16)
    inp = spec.make_inputs(dict(B=2, S_q=S_q, N=N, seq_lens=[19, 33], block_size=16), dtype=dt,
                           device=be.device, generator=torch.Generator().manual_seed(N + S_q))
    with ops.backend("reference"):
        ref = _run("amla", inp)
    with be.active():
        out = _run("amla", inp)
    assert_close(out[0], ref[0], "fp16" if dt == torch.float16 else "bf16", name="out")
    assert_close(out[1], ref[1], "lse", name="lse")


_LAUNCHERS = {"amla": ("ops.triton.amla", "amla"), "mla_prolog": ("ops.triton.mla_prolog", "mla_prolog"),
              "dynamic_quant": ("ops.triton.quant", "dynamic_quant"),
              "rms_norm_dynamic_quant": ("ops.triton.quant", "rms_norm_dynamic_quant"),
              "quant_matmul": ("ops.triton.quant", "quant_matmul"),
              "moe_gating_top_k": ("ops.triton.moe_gating", "moe_gating_top_k")}


@pytest.mark.parametrize("name,be", op_backend_params(sorted(TINY), reference=False, backend="triton"))
def test_public_launchers_read_strided_vectors_like_contiguous(name, be):
    """Audit finding: the exported Triton launchers (not only the registered ops, which copy first) read 1-D
    vectors and block-table rows as ptr + i; a strided view (here poisoned gaps) or a column-major block_table
    silently gave wrong results (amla, quant_matmul scales / bias, moe_gating bias)."""
    mod, fn = _LAUNCHERS[name]
    launcher = getattr(importlib.import_module(mod), fn)
    inputs = _inputs(name, be, seed=5)
    strided = {k: (_strided(v) if _vector_like(v) else v) for k, v in inputs.items()}
    if name == "amla":
        strided["block_table"] = inputs["block_table"].t().contiguous().t()
        assert strided["block_table"].stride(1) != 1
    assert any(s is not inputs[k] for k, s in strided.items())

    for i, (w, g) in enumerate(zip(_run(name, inputs, launcher), _run(name, strided, launcher))):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0, msg=lambda m: f"{name} output {i}: {m}")


@pytest.mark.parametrize("name", ["dynamic_quant", "rms_norm_dynamic_quant", "moe_gating_top_k"])
def test_transposed_input_outputs_match_the_fake(name):
    """Audit finding: with a transposed (column-major) x the references returned outputs in x's layout while the
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
