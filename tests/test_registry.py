"""Every ds op: registered once, documented, has a spec/fake/FLOP formula, passes opcheck (R1) and compiles with
fullgraph (R2); the backend switch behaves as docs/architecture.md says; ``import ops`` needs only torch."""
from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import ops
from ops import _ascendc, _library as L
from ops._library import BackendUnavailable
from tests.backends import op_backend_params

# a tiny shape per op for the generic checks (fresh random data from each SPEC.make_inputs)
TINY = {
    "amla": dict(B=2, S_q=2, N=4, seq_lens=[0, 37], block_size=16),
    "mla_prolog": dict(T=3, N=2, He=64, Hcq=96, Hckv=512, D=128, Dr=64, block_size=16, mode="bf16"),
    "dynamic_quant": dict(T=5, K=64),
    "rms_norm_dynamic_quant": dict(T=5, H=64),
    "quant_matmul": dict(M=5, K=64, N=48),
    "moe_gating_top_k": dict(T=5, E=256, group_count=8, k_group=4, k=8),
}
EXPECTED_OPS = set(TINY)


def _inputs(name, gen, dtype=torch.bfloat16, device="cpu"):
    spec = ops.SPECS[name]
    shape = dict(TINY[name])
    if name == "moe_gating_top_k":  # fill whatever else the spec's named shapes carry (routed_scaling_factor, ...)
        shape = {**next(iter(spec.shapes.values())), **shape}
    return spec.make_inputs(shape, dtype=torch.float32 if name == "moe_gating_top_k" else dtype,
                            device=device, generator=gen)


def _split(op_name, inputs):
    """Positional args (schema order, up to the first keyword-only one) and keyword args."""
    schema = getattr(torch.ops.ds, op_name).default._schema
    args, kwargs = [], {}
    for a in schema.arguments:
        if a.name not in inputs:
            continue
        (kwargs.__setitem__(a.name, inputs[a.name]) if a.kwarg_only else args.append(inputs[a.name]))
    return tuple(args), kwargs


def _clone(x):
    return x.clone() if isinstance(x, torch.Tensor) else x


def test_every_op_registered_once_with_a_spec():
    registered = {n for n in dir(torch.ops.ds) if not n.startswith("_") and isinstance(getattr(torch.ops.ds, n), torch._ops.OpOverloadPacket)}
    assert EXPECTED_OPS <= registered, f"missing ops: {EXPECTED_OPS - registered}"
    assert EXPECTED_OPS <= set(ops.SPECS), f"ops without an OpSpec: {EXPECTED_OPS - set(ops.SPECS)}"
    for name in EXPECTED_OPS:
        spec = ops.SPECS[name]
        assert spec.shapes, f"{name}: OpSpec has no named shapes"
        assert spec.compute in ("bf16", "int8", "fp32")


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_reference_docstring_names_shapes_errors_and_source(name):
    mod = {"amla": "reference.amla", "mla_prolog": "reference.mla_prolog", "moe_gating_top_k": "reference.moe_gating"}.get(name, "reference.quant")
    fn = getattr(sys.modules.get(mod) or __import__(mod, fromlist=["_"]), name)
    doc = inspect.getdoc(fn) or ""
    assert "[" in doc and "]" in doc, f"{name}: docstring gives no tensor shapes"
    assert "Raises" in doc or "raise" in doc.lower(), f"{name}: docstring does not list the errors it raises"
    assert any(w in doc for w in ("torch_npu", "arXiv", "Mirrors", "mirrors", "architecture.md", "npu_")), f"{name}: docstring cites no source"
    # the public eager entry point (a DsOp instance) carries the same text
    eager = getattr(importlib.import_module({"amla": "ops.amla", "mla_prolog": "ops.mla_prolog",
                                             "moe_gating_top_k": "ops.moe_gating"}.get(name, "ops.quant")), name)
    assert doc in (eager.__doc__ or ""), f"{name}: the DsOp's docstring is not the reference's"
    assert "Raises (this op): TypeError / ValueError naming the argument" in eager.__doc__
    # inspect / help / IDEs see the op's arguments and defaults, not (*args, **kwargs)
    assert inspect.signature(eager) == inspect.signature(fn)
    # help(torch.ops.ds.<op>) too: it was empty
    packet = getattr(torch.ops.ds, name)
    assert packet.__doc__ == packet.default.__doc__ == eager.__doc__


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_eager_call_with_a_missing_or_unknown_argument_names_the_op(name):
    """A missing or misspelled argument used to be reported against the private check (``_check() missing 1
    required positional argument``: a new-user finding); it now names ``ds::<op>``."""
    eager = getattr(importlib.import_module({"amla": "ops.amla", "mla_prolog": "ops.mla_prolog",
                                             "moe_gating_top_k": "ops.moe_gating"}.get(name, "ops.quant")), name)
    with pytest.raises(TypeError, match=rf"^ds::{name}\(\) (missing|got an unexpected)"):
        eager()
    with pytest.raises(TypeError, match=rf"^ds::{name}\(\) (missing|got an unexpected)"):
        eager(torch.zeros(1), no_such_argument=1)


@pytest.mark.parametrize("name,be", op_backend_params(sorted(EXPECTED_OPS)))
def test_R1_opcheck(name, be, gen):
    inputs = _inputs(name, gen, be.dtype(torch.bfloat16), be.device)
    args, kwargs = _split(name, inputs)
    with be.active():
        torch.library.opcheck(getattr(torch.ops.ds, name).default, args, kwargs)


@pytest.mark.parametrize("name,be", op_backend_params(sorted(EXPECTED_OPS)))
def test_R2_compile_fullgraph_matches_eager(name, be, gen):
    inputs = _inputs(name, gen, be.dtype(torch.bfloat16), be.device)
    args, kwargs = _split(name, inputs)
    op = getattr(torch.ops.ds, name)
    eager_args, eager_kwargs = tuple(map(_clone, args)), {k: _clone(v) for k, v in kwargs.items()}
    with be.active():
        assert L.OPS[name].select(args, kwargs)[0] == be.name
        want = op(*eager_args, **eager_kwargs)
        torch._dynamo.reset()
        got = torch.compile(lambda *a, **k: op(*a, **k), fullgraph=True, backend="aot_eager")(*args, **kwargs)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)
    for (a, b) in zip(eager_args, args):  # mutated caches end up identical too
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(b, a, equal_nan=True, rtol=0, atol=0)


def _typed_args(kind):
    """(op, argument) for every argument of an op whose signature declares ``kind`` (bool / int)."""
    out = []
    for name in sorted(EXPECTED_OPS):
        for p in L.OPS[name].signature.parameters.values():
            ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
            if ann == kind.__name__ or (ann == "" and type(p.default) is kind):
                out.append(pytest.param(name, p.name, id=f"{name}-{p.name}"))
    return out


def _call_both(name, arg, value, seed):
    """(eager outcome, torch.ops outcome) of the op with ``arg=value`` on the inputs drawn with ``seed``: the
    result or the exception raised."""
    outcomes = []
    for fn in (L.OPS[name], getattr(torch.ops.ds, name)):
        inputs = dict(_inputs(name, torch.Generator().manual_seed(seed)), **{arg: value})
        args, kwargs = _split(name, inputs)
        try:
            with ops.backend("reference"):
                outcomes.append(fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - compared below
            outcomes.append(e)
    return outcomes


@pytest.mark.parametrize("name,arg", _typed_args(bool))
def test_bool_argument_given_an_int_raises_through_torch_ops_too(name, arg):
    """A bool argument given the int 2 raises on the eager path (``causal must be a bool``); the dispatcher used to
    turn 2 into True, so ``torch.ops.ds.<op>`` ran. If the schema coerces, the op must validate: both raise the
    same error."""
    eager, registered = _call_both(name, arg, 2, seed=3)
    assert isinstance(eager, (TypeError, ValueError)) and arg in str(eager), eager
    assert isinstance(registered, Exception), f"torch.ops.ds.{name}({arg}=2) ran; the eager call raises {eager!r}"
    assert type(registered) is type(eager) and arg in str(registered), registered


@pytest.mark.parametrize("name,arg", _typed_args(int))
def test_int_argument_given_a_bool_is_refused_or_taken_as_the_int(name, arg):
    """An int argument given True: the eager path refuses it; through torch.ops True is the int 1 to the
    dispatcher (indistinguishable after parsing), so the op must either raise like the eager path or behave as
    with 1 (never as anything else)."""
    eager, registered = _call_both(name, arg, True, seed=3)
    assert isinstance(eager, (TypeError, ValueError)) and arg in str(eager), eager
    if isinstance(registered, Exception) and type(registered) is type(eager) and arg in str(registered):
        return                                                  # refused like the eager path
    as_one = _call_both(name, arg, 1, seed=3)[1]
    if isinstance(as_one, Exception) or isinstance(registered, Exception):
        assert type(registered) is type(as_one), f"{arg}=True gave {registered!r}, {arg}=1 gives {as_one!r}"
        return
    for a, b in zip(registered, as_one):
        torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_flop_formula_registered_and_equals_spec(name, gen):
    inputs = _inputs(name, gen)
    args, kwargs = _split(name, inputs)
    want = ops.SPECS[name].flops(**{k: _clone(v) for k, v in inputs.items()})
    with ops.backend("reference"), FlopCounterMode(display=False) as fc:
        getattr(torch.ops.ds, name)(*args, **kwargs)
    got = fc.get_total_flops()
    assert got == want, f"{name}: FlopCounterMode counted {got}, OpSpec.flops says {want}"
    assert want > 0


def test_backend_switch_context_env_and_errors(monkeypatch, gen):
    assert ops.current_backend() == os.environ.get("DS_OPS_BACKEND", "auto")
    with ops.backend("reference"):
        assert ops.current_backend() == "reference"
        with ops.backend("triton"):
            assert ops.current_backend() == "triton"
        assert ops.current_backend() == "reference"
    monkeypatch.setenv("DS_OPS_BACKEND", "reference")
    assert ops.current_backend() == "reference"
    monkeypatch.setenv("DS_OPS_BACKEND", "cuda-please")
    with pytest.raises(ValueError, match="DS_OPS_BACKEND|backend must be one of"):
        ops.current_backend()
    with pytest.raises(ValueError, match="backend must be one of"):
        with ops.backend("tritonn"):
            pass


def test_explicit_backend_that_cannot_run_raises_with_reason(gen):
    inputs = _inputs("mla_prolog", gen)   # an op with no Ascend C kernel
    args, kwargs = _split("mla_prolog", inputs)
    with ops.backend("ascendc"), pytest.raises(BackendUnavailable, match="ascendc.*(torch_npu|not built|no ascendc)"):
        torch.ops.ds.mla_prolog(*args, **kwargs)


def test_auto_falls_back_to_reference_when_no_kernel_can_run(gen, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # CPU tensors without the interpreter: no Triton kernel can run
    inputs = _inputs("quant_matmul", gen)
    args, kwargs = _split("quant_matmul", inputs)
    with ops.backend("auto"):
        got = torch.ops.ds.quant_matmul(*args, **kwargs)
    with ops.backend("reference"):
        want = torch.ops.ds.quant_matmul(*args, **kwargs)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with ops.backend("triton"), pytest.raises(BackendUnavailable, match="TRITON_INTERPRET"):
        torch.ops.ds.quant_matmul(*args, **kwargs)


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_auto_on_cpu_is_the_reference(name, gen):
    """``auto`` on CPU tensors runs the reference even with TRITON_INTERPRET=1 set (the CPU test process sets it):
    the interpreter, like the Ascend C twin, runs only when forced. It used to switch to interpreted Triton."""
    args, kwargs = _split(name, _inputs(name, gen, torch.float16))
    with ops.backend("auto"):
        assert L.OPS[name].select(args, kwargs)[0] == "reference"


@pytest.mark.interpreter
@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_forced_triton_on_cpu_runs_the_interpreter(name, gen):
    args, kwargs = _split(name, _inputs(name, gen, torch.float16))
    with ops.backend("triton"):
        assert L.OPS[name].select(args, kwargs)[0] == "triton"


def test_import_ops_without_triton_or_torch_npu():
    """`import ops` and a reference call work when triton and torch_npu cannot be imported."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('triton', 'torch_npu'):\n"
        "            raise ImportError('blocked for the test: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import torch, ops\n"
        "x = torch.randn(3, 64)\n"
        "q, s = torch.ops.ds.dynamic_quant(x)\n"
        "assert q.dtype == torch.int8 and s.shape == (3,)\n"
        "print('ok', ops.current_backend())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DS_OPS_BACKEND"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "ok auto" in r.stdout, r.stderr[-2000:]


def test_environment_switches_are_validated_and_spelled_as_users_do(monkeypatch):
    """DS_OPS_BACKEND with a bad value names the variable (it used to say only "backend must be one of"), and
    DS_OPS_CHECKS accepts false / no / off as well as 0 (anything else used to leave the checks on silently)."""
    from ops._library import checks_enabled, current_backend
    monkeypatch.setenv("DS_OPS_BACKEND", "bogus")
    with pytest.raises(ValueError, match="environment variable DS_OPS_BACKEND must be one of .* got 'bogus'"):
        current_backend()
    monkeypatch.setenv("DS_OPS_BACKEND", "reference")
    assert current_backend() == "reference"
    for off in ("0", "false", "False", "no", "off", " OFF "):
        monkeypatch.setenv("DS_OPS_CHECKS", off)
        assert not checks_enabled(), off
    for on in ("1", "true", "yes"):
        monkeypatch.setenv("DS_OPS_CHECKS", on)
        assert checks_enabled(), on


def test_triton_interpret_set_after_import_falls_back_with_a_reason():
    """TRITON_INTERPRET=1 set after triton was imported (``import torch, ops`` imports it): triton's own helpers
    (tl.cdiv) are compiled-mode, so a kernel died with "Cannot call @triton.jit'd outside of the scope of a kernel"
    even under the "auto" backend (adversarial finding). Now auto runs the reference and an explicit
    "triton" raises BackendUnavailable saying why. Runs in a fresh interpreter (this one imported triton in
    interpreter mode)."""
    code = (
        "import os, torch, ops\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "x = torch.randn(3, 8)\n"
        "q, s = ops.quant.dynamic_quant(x)\n"
        "with ops.backend('reference'):\n"
        "    rq, rs = ops.quant.dynamic_quant(x)\n"
        "assert torch.equal(q, rq) and torch.equal(s, rs)\n"
        "try:\n"
        "    with ops.backend('triton'):\n"
        "        ops.quant.dynamic_quant(x)\n"
        "except ops.BackendUnavailable as e:\n"
        "    assert 'set after triton was imported' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no BackendUnavailable')\n"
        "print('OK')\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]


def _kernels(monkeypatch, op, *kernels):
    monkeypatch.setattr(op, "kernels", list(kernels))


def test_auto_prefers_ascendc_over_triton_then_falls_back(monkeypatch):
    """auto tries ascendc first, then triton; a kernel whose supports() gives a reason is skipped, and with no
    kernel left auto runs the reference (an explicit backend raises BackendUnavailable instead). The kernels here
    claim "meta" tensors: on CPU tensors auto never takes a kernel (test_auto_on_cpu_is_the_reference)."""
    op = ops.moe_gating.moe_gating_top_k
    tri_fn, asc_fn = (lambda *a, **k: "triton"), (lambda *a, **k: "ascendc")
    monkeypatch.setattr(_ascendc, "unavailable_reason", lambda *a: None)
    monkeypatch.setattr(L, "triton_available", lambda: None)
    x = torch.empty(2, 16, device="meta")
    asc = L.Kernel("ascendc", "x", "y", ("meta",), None, asc_fn)
    tri_ok = L.Kernel("triton", "x", "y", ("meta",), None, tri_fn)
    tri_no = L.Kernel("triton", "x", "y", ("meta",), lambda *a, **k: "not these inputs", tri_fn)
    asc_no = L.Kernel("ascendc", "x", "y", ("meta",), lambda *a, **k: "not these inputs", asc_fn)
    with ops.backend("auto"):
        _kernels(monkeypatch, op, tri_ok, asc)                       # listed triton first: order is the backend's
        assert op.select((x, 2), {})[0] == "ascendc"
        _kernels(monkeypatch, op, tri_ok, asc_no)
        assert op.select((x, 2), {})[0] == "triton"
        _kernels(monkeypatch, op, tri_no, asc_no)
        assert op.select((x, 2), {})[0] == "reference"
        # kernels that would take CPU tensors: auto still runs the reference there
        _kernels(monkeypatch, op, L.Kernel("triton", "x", "y", ("cpu",), None, tri_fn),
                 L.Kernel("ascendc", "x", "y", ("cpu",), None, asc_fn))
        monkeypatch.setattr(L, "triton_interpret", lambda: True)
        assert op.select((torch.empty(2, 16), 2), {})[0] == "reference"
        with ops.backend("triton"):
            assert op.select((torch.empty(2, 16), 2), {})[0] == "triton"
        with ops.backend("ascendc"):
            assert op.select((torch.empty(2, 16), 2), {})[0] == "ascendc"
        _kernels(monkeypatch, op, tri_no, asc_no)
    with ops.backend("triton"):
        try:
            op.select((x, 2), {})
        except L.BackendUnavailable as e:
            assert "not these inputs" in str(e)
        else:
            raise AssertionError("an explicit backend that refuses must raise")


def test_numpy_scalars_behave_like_python_scalars_on_both_paths():
    """A numpy integer k (np.int64(8)) runs the eager helper as it runs torch.ops.ds (the dispatcher converts it);
    the eager helper refused it as "not an int"."""
    np = pytest.importorskip("numpy")
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(5))
    kw = dict(k_group=2, group_count=4, group_select_mode=1, norm_type=1, routed_scaling_factor=np.float32(2.5))
    want = torch.ops.ds.moe_gating_top_k(x, 6, **dict(kw, routed_scaling_factor=2.5))
    for got in (ops.moe_gating.moe_gating_top_k(x, np.int64(6), **kw), torch.ops.ds.moe_gating_top_k(x, np.int64(6), **kw)):
        for g, w in zip(got, want):
            assert torch.equal(g, w)
    with pytest.raises(TypeError, match="k"):
        ops.moe_gating.moe_gating_top_k(x, np.float64(6.0), **kw)
