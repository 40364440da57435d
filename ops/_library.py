"""Registration, backend switch and validation helpers shared by every ``ds::`` op.

One helper, :class:`DsOp`, turns a pure-PyTorch reference into a ``torch.library`` custom op:

* the custom-op body (``device_types=None``) is the reference, so every device works;
* per-device kernels attach with ``register_kernel("cuda" | "cpu" | "npu")`` through one dispatcher
  that honours the backend switch (``DS_OPS_BACKEND`` or :func:`backend`);
* a fake (meta) impl for ``torch.compile`` / FakeTensor;
* a FLOP formula registered with ``torch.utils.flop_counter.register_flop_formula``;
* an eager fast path (:meth:`DsOp.__call__`) that skips the dispatcher (~10 µs, pytorch/pytorch#177109)
  when not compiling, while ``torch.ops.ds.<name>`` stays the registered op for engines and graphs.

Backends: ``reference`` (pure PyTorch), ``triton`` (CUDA; NPU via triton-ascend; CPU under
``TRITON_INTERPRET=1``), ``ascendc`` (NPU, needs the built library; CPU through the twin build). ``auto`` picks
the best one that can run and falls back to the reference; on CPU tensors ``auto`` always runs the reference
(``TRITON_INTERPRET=1`` changes nothing there: the interpreter and the twin run only when forced with
:func:`backend`). An explicitly requested backend that cannot run raises :class:`BackendUnavailable` with the
reason.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import math
import numbers
import os
import sys
import threading
from typing import Any, Callable, Iterator, Sequence

import torch

BACKENDS = ("auto", "reference", "triton", "ascendc")
_ENV_BACKEND = "DS_OPS_BACKEND"
_ENV_CHECKS = "DS_OPS_CHECKS"
_local = threading.local()


class BackendUnavailable(RuntimeError):
    """An explicitly requested backend cannot run these inputs on this machine (the message says why)."""


# ----------------------------------------------------------------------------------------------
# backend switch
# ----------------------------------------------------------------------------------------------
def _validate_backend(name: str, what: str = "backend") -> str:
    """``name`` if it is one of BACKENDS, else ValueError naming ``what`` (the argument or the variable)."""
    if name not in BACKENDS:
        raise ValueError(f"{what} must be one of {BACKENDS}, got {name!r}")
    return name


def current_backend() -> str:
    """The backend in force: the innermost :func:`backend` context, else ``$DS_OPS_BACKEND``, else ``auto``.
    Raises ValueError if ``$DS_OPS_BACKEND`` is not one of :data:`BACKENDS`."""
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    return _validate_backend(os.environ.get(_ENV_BACKEND, "auto") or "auto", f"environment variable {_ENV_BACKEND}")


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """Force a backend for the ``ds`` ops called inside the block (thread-local). name: one of :data:`BACKENDS`
    ("auto", "reference", "triton", "ascendc"). Raises ValueError for any other name (on entering the block).
    Inside it, an op whose forced backend cannot take its inputs raises ``ops.BackendUnavailable`` with the reason.

    >>> import ops
    >>> with ops.backend("reference"):
    ...     pass
    """
    _validate_backend(name)
    with _pushed("stack", name):
        yield


_ENV_BATCH_INVARIANT = "DS_OPS_BATCH_INVARIANT"
_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def batch_invariant_enabled() -> bool:
    """Whether the batch-invariant mode is on: the innermost :func:`batch_invariant` context, else
    ``$DS_OPS_BATCH_INVARIANT`` ("1" / "true" / "yes" / "on" turn it on; unset, "", "0" / "false" / "no" / "off" leave
    it off; any case, spaces trimmed). Read by the kernels' launchers at every launch, on the host (docs/ops/amla.md,
    "Batch-invariant mode"). Raises ValueError for another value of the variable."""
    stack = getattr(_local, "invariant", None)
    if stack:
        return stack[-1]
    v = os.environ.get(_ENV_BATCH_INVARIANT, "").strip().lower()
    if v in _ON:
        return True
    if v in _OFF:
        return False
    raise ValueError(f"environment variable {_ENV_BATCH_INVARIANT} must be one of {_ON + _OFF[1:]}, got {v!r}")


@contextlib.contextmanager
def batch_invariant(enabled: bool = True) -> Iterator[None]:
    """Turn the batch-invariant mode on (or, with ``enabled=False``, off) for the ``ds`` ops called inside the block
    (thread-local; nests, the innermost wins; overrides ``$DS_OPS_BATCH_INVARIANT``). In the mode a request's
    ``ds::amla`` out / lse bits depend only on its own inputs: the split of its keys into chunks and their merge order
    follow its length and fixed constants, never the batch (docs/ops/amla.md). No schema change: engines, graphs and
    ``torch.compile`` see the same op; the launch reads the mode when it runs (a CUDA graph keeps the mode of its
    capture). Raises TypeError if ``enabled`` is not a bool.

    >>> import ops
    >>> with ops.batch_invariant():
    ...     pass
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {type(enabled).__name__} {enabled!r}")
    with _pushed("invariant", enabled):
        yield


@contextlib.contextmanager
def _pushed(attr: str, value) -> Iterator[None]:
    """``value`` on top of the thread-local stack ``attr`` for the block (the switches of :func:`backend` and
    :func:`batch_invariant`: nested blocks, the innermost wins)."""
    stack = getattr(_local, attr, None)
    if stack is None:
        stack = []
        setattr(_local, attr, stack)
    stack.append(value)
    try:
        yield
    finally:
        stack.pop()


def env_turned_off(name: str) -> bool:
    """Whether the on-by-default switch ``$name`` is turned off: "0", "false", "no" or "off" (any case, spaces
    trimmed); unset or anything else leaves it on. (``DS_OPS_CHECKS``, ``DS_OPS_PDL``.)"""
    return os.environ.get(name, "1").strip().lower() in ("0", "false", "no", "off")


def checks_enabled() -> bool:
    """Whether data-dependent eager checks (host syncs) run: off under ``DS_OPS_CHECKS=0`` (or false / no /
    off), while compiling, and during CUDA-graph capture."""
    if env_turned_off(_ENV_CHECKS):
        return False
    if torch.compiler.is_compiling():
        return False
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return False
    return True


def triton_interpret() -> bool:
    """Whether Triton kernels can run on CPU tensors: TRITON_INTERPRET=1, and set before triton was imported
    (triton builds its own jit helpers such as ``tl.cdiv`` in interpreter mode only then; see
    :func:`triton_interpret_late`)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1" and not triton_interpret_late()


def triton_interpret_late() -> bool:
    """TRITON_INTERPRET=1 is set, but triton was imported before it (its ``tl.cdiv`` is a compiled-mode
    JITFunction): kernels would fail with "Cannot call @triton.jit'd outside of the scope of a kernel"."""
    if os.environ.get("TRITON_INTERPRET", "0") != "1":
        return False
    tl = sys.modules.get("triton.language")
    f = getattr(tl, "cdiv", None) if tl is not None else None
    return f is not None and type(f).__name__ == "JITFunction"


def triton_available() -> str | None:
    """None if ``import triton`` works, else the reason."""
    try:
        import triton  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the machine
        return f"triton is not importable ({type(e).__name__}: {e})"
    return None


# ----------------------------------------------------------------------------------------------
# argument validation: clear errors naming the argument and the bad value
# ----------------------------------------------------------------------------------------------
def check_tensor(name: str, t: Any, *, dtypes: Sequence[torch.dtype] | None = None, ndim: int | Sequence[int] | None = None,
                 shape: Sequence[int | None] | None = None, device: torch.device | None = None, why: str = "",
                 dtype_why: str = "") -> None:
    """Raise TypeError/ValueError naming ``name`` unless ``t`` is a tensor with the given properties.
    ``shape`` entries that are None are not checked; ``why`` / ``dtype_why`` (e.g. " (B from q_nope)",
    " (q_nope's dtype)") follow the expected shape / dtype in the message."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        want = str(dtypes[0]) if len(dtypes) == 1 else f"one of {[str(d) for d in dtypes]}"
        raise TypeError(f"{name} must have dtype {want}{dtype_why}, got {t.dtype}")
    if ndim is not None:
        nd = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in nd:
            raise ValueError(f"{name} must have {' or '.join(map(str, nd))} dimension{'' if nd == (1,) else 's'}, "
                             f"got shape {tuple(t.shape)}")
    if shape is not None:
        # a plain loop: this runs ~15 times per eager mla_prolog call (a generator in any() costs more)
        bad = t.dim() != len(shape)
        if not bad:
            for s, d in zip(shape, t.shape):
                if s is not None and s != d:
                    bad = True
                    break
        if bad:
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"{name} must have shape {want}{why}, got {list(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")


def check_finite_float(name: str, v: Any, *, nonneg: bool = False) -> None:
    """Raise TypeError unless ``v`` is a real number (bools refused; numpy scalars accepted), ValueError unless it
    is finite (and >= 0 with ``nonneg``: the epsilons). A SymFloat (torch.compile tracing) is not checked: its
    value is not known here. The one scalar check of every op (softmax_scale, epsilons, routed_scaling_factor, eps)."""
    if isinstance(v, torch.SymFloat):
        return
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number (a float), got {type(v).__name__} {v!r}")
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v!r}")
    if nonneg and not v >= 0:
        raise ValueError(f"{name} must be a finite float >= 0, got {v!r}")


# ----------------------------------------------------------------------------------------------
# OpSpec: one per op, read by tests, perf and docs
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class OpSpec:
    """What tests, perf and docs need to know about one op.

    name:        op name without namespace (``"amla"``)
    flops:       f(**inputs) -> int, FLOPs of one call (2 per MAC), same numbers as the registered formula
    bytes:       f(**inputs) -> int, fewest bytes one call must move through device memory
    make_inputs: f(shape: dict, *, dtype, device, generator) -> dict of keyword inputs (fresh random data)
    shapes:      named DeepSeek-V3 shapes, name -> shape dict for make_inputs
    compute:     which unit's peak the FLOPs are measured against: "bf16", "int8" or "fp32"
    tolerance:   name of the row in ops/tolerances.py (the one tolerance table) for the op's main output
    """

    name: str
    flops: Callable[..., int]
    bytes: Callable[..., int]
    make_inputs: Callable[..., dict]
    shapes: dict[str, dict]
    compute: str = "bf16"
    tolerance: str = "bf16"


SPECS: dict[str, OpSpec] = {}
OPS: dict[str, "DsOp"] = {}     # every registered op by name (tests and perf list backends from its kernels)
_LIB = torch.library.Library("ds", "FRAGMENT")


# ----------------------------------------------------------------------------------------------
# the op helper
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Kernel:
    """A backend implementation of one op.

    module/attr:  where the callable lives (imported lazily, so ``import ops`` never needs triton)
    devices:      device types it runs on ("cuda", "cpu" = Triton interpreter, "npu")
    supports:     optional f(*args, **kwargs) -> None | str (reason it cannot take these inputs)
    """

    backend: str
    module: str
    attr: str
    devices: tuple[str, ...]
    supports: Callable[..., str | None] | None = None
    _fn: Callable | None = None

    def load(self) -> Callable:
        if self._fn is None:
            self._fn = getattr(importlib.import_module(self.module), self.attr)
        return self._fn


def _device_type_of(args: Sequence[Any], kwargs: dict) -> str:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    for a in kwargs.values():
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cpu"


def _unavailable_reason(k: Kernel, device_type: str) -> str | None:
    if device_type not in k.devices:
        return f"the {k.backend} kernel does not run on {device_type!r} tensors (runs on {list(k.devices)})"
    if k.backend == "triton":
        r = triton_available()
        if r:
            return r
        if device_type == "cpu" and not triton_interpret():
            if triton_interpret_late():
                return ("TRITON_INTERPRET=1 was set after triton was imported (import torch / ops imports it): "
                        "set it in the environment before starting Python")
            return "Triton runs on CPU tensors only under TRITON_INTERPRET=1"
    if k.backend == "ascendc":
        from . import _ascendc
        r = _ascendc.unavailable_reason(device_type)
        if r:
            return r
    return None


class DsOp:
    """A registered ``ds::<name>`` op plus its eager fast path. Call it like the op."""

    def __init__(self, name: str, reference: Callable, *, fake: Callable, mutates_args: Sequence[str] = (),
                 check: Callable[..., None] | None = None, spec: OpSpec | None = None,
                 kernels: Sequence[Kernel] = (), schema: str | None = None,
                 flop_formula: Callable[..., int] | None = None):
        self.name = name
        self.reference = reference
        self.mutates_args = tuple(mutates_args)
        self.signature = _signature_of(reference)
        self._param_names = tuple(self.signature.parameters)   # for _unit_stride_vectors (per call)
        self.check = check
        self.kernels = list(kernels)
        # help(ops.<module>.<op>) shows the op's semantics: shapes, dtypes, errors and source, from the reference
        where = f"{check.__module__}.{check.__name__}" if check is not None else "the op's module"
        self.__doc__ = (f"``ds::{name}`` (also ``torch.ops.ds.{name}``): the registered op and its eager fast path, "
                        f"dispatched to a kernel or the reference (see ops/_library.py).\n\n"
                        f"Raises (this op): TypeError / ValueError naming the argument and the bad value, from the "
                        f"argument checks ({where}), before anything runs or is written; ops.BackendUnavailable "
                        f"when a backend forced with ops.backend(...) cannot take these inputs; ValueError if DS_OPS_BACKEND is "
                        f"not a backend name. The Raises of the "
                        f"reference below are those of the reference function called directly.\n\n"
                        f"Semantics, from {reference.__module__}.{reference.__name__}:\n\n"
                        f"{inspect.cleandoc(reference.__doc__ or '')}")
        self.__signature__ = self.signature     # inspect.signature / help() / IDEs show the op's arguments
        self.spec = spec
        OPS[name] = self
        if spec is not None:
            SPECS[name] = spec

        sig = _signature_of(reference)
        qualname = f"ds::{name}"
        if schema is None:
            schema = torch.library.infer_schema(reference, mutates_args=tuple(mutates_args))
        # torch.library.custom_op rejects keyword-only tensors (the torch_npu signatures have them), so
        # the op is defined with the lower-level Library API; semantics are the same.
        _LIB.define(name + schema)
        # default body for every device (CompositeExplicitAutograd) = dispatcher, which runs the reference
        # unless a kernel for the tensors' device is selected
        torch.library.impl(qualname, "CompositeExplicitAutograd", lib=_LIB)(self._make_device_impl("default", sig))
        for dev in sorted({d for k in self.kernels for d in k.devices} - {"cpu"}):
            key = "PrivateUse1" if dev == "npu" else dev.upper()
            torch.library.impl(qualname, key, lib=_LIB)(self._make_device_impl(dev, sig))
        torch.library.register_fake(qualname, fake, lib=_LIB)
        self.op = getattr(torch.ops.ds, name)
        # help(torch.ops.ds.<op>) — the surface engines call — shows the same text (it was empty)
        self.op.__doc__ = self.op.default.__doc__ = self.__doc__
        if flop_formula is not None:
            from torch.utils.flop_counter import register_flop_formula
            register_flop_formula(self.op, get_raw=True)(flop_formula)

    # -- dispatch -----------------------------------------------------------------------------
    def _make_device_impl(self, dev: str, sig):
        def impl(*args, **kwargs):
            return self._run(dev, args, kwargs)
        impl.__signature__ = sig
        return impl

    def select(self, args: Sequence[Any], kwargs: dict) -> tuple[str, Callable]:
        """(backend name, callable) that would run these inputs under the current backend switch. ``auto``: the
        reference on CPU tensors, else the first of Ascend C, Triton that can take the inputs, else the reference."""
        want = current_backend()
        if want == "reference":
            return "reference", self.reference
        dev = _device_type_of(args, kwargs)
        if want == "auto" and dev == "cpu":
            # CPU tensors: the reference. The interpreted Triton kernels and the Ascend C CPU twin are test
            # vehicles, run only when forced with ops.backend("triton" | "ascendc").
            return "reference", self.reference
        reasons = []
        order = [want] if want != "auto" else ["ascendc", "triton"]
        for bname in order:
            cands = [k for k in self.kernels if k.backend == bname]
            if not cands:
                reasons.append(f"ds::{self.name} has no {bname} kernel")
                continue
            for k in cands:
                r = _unavailable_reason(k, dev)
                if r is None and k.supports is not None:
                    r = k.supports(*args, **kwargs)
                if r is None:
                    try:
                        return bname, k.load()
                    except ImportError as e:
                        r = f"{k.module} is not importable ({e})"
                reasons.append(r)
        if want == "auto":
            return "reference", self.reference
        raise BackendUnavailable(f"ds::{self.name}: backend {want!r} cannot run here: " + "; ".join(reasons))

    def _run(self, _dev: str, args, kwargs):
        if self.check is not None:
            try:
                self.check(*args, **kwargs)
            except TypeError as e:
                converted = _python_scalars(args, kwargs)
                if converted is not None:    # numpy scalars, which torch.ops.ds converts too: check them as such
                    return self._run(_dev, *converted)
                head = f"{self.check.__name__}() "  # a missing / unexpected argument: name the op, not the check
                if str(e).startswith(head):
                    raise TypeError(f"ds::{self.name}() {str(e)[len(head):]}") from None
                raise
        bname, fn = self.select(args, kwargs)
        if bname != "reference":
            args, kwargs = self._unit_stride_vectors(args, kwargs)
        return fn(*args, **kwargs)

    def _unit_stride_vectors(self, args, kwargs):
        """Kernels address 1-D inputs (scales, biases, gammas, seq_lens, cache_index) as ``ptr + i`` and index
        tables (block_table) row by row with a unit inner stride: hand them a contiguous copy when a caller passes
        a strided view (a few bytes; never a mutated argument, never a float matrix such as a weight).
        Returns ``args`` / ``kwargs`` themselves when nothing needs a copy (the common case)."""
        names = self._param_names
        mut = self.mutates_args
        new_args = None
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and _needs_unit_stride_copy(names[i] if i < len(names) else "", a, mut):
                if new_args is None:
                    new_args = list(args)
                new_args[i] = a.contiguous()
        new_kwargs = None
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor) and _needs_unit_stride_copy(k, v, mut):
                if new_kwargs is None:
                    new_kwargs = dict(kwargs)
                new_kwargs[k] = v.contiguous()
        return (args if new_args is None else tuple(new_args)), (kwargs if new_kwargs is None else new_kwargs)

    # -- eager fast path ----------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if torch.compiler.is_compiling():
            return getattr(torch.ops.ds, self.name)(*args, **kwargs)
        return self._run("eager", args, kwargs)


def _numpy_scalar_types() -> frozenset:
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return frozenset()
    return frozenset(t for t in np.sctypeDict.values() if issubclass(t, (np.integer, np.floating)))


_NUMPY_SCALARS = _numpy_scalar_types()


def _python_scalars(args, kwargs):
    """(args, kwargs) with numpy integer / float scalars as Python int / float, or None when there is none: the eager
    helpers take what ``torch.ops.ds.<op>`` takes (the dispatcher converts them for a schema int or float). Only
    asked after a check refused an argument, so the eager path pays nothing for it."""
    if not any(type(a) in _NUMPY_SCALARS for a in (*args, *kwargs.values())):
        return None

    def conv(a):
        return a.item() if type(a) in _NUMPY_SCALARS else a
    return tuple(conv(a) for a in args), {k: conv(v) for k, v in kwargs.items()}


def _needs_unit_stride_copy(name: str, a: torch.Tensor, mutates_args: tuple[str, ...]) -> bool:
    """Whether :meth:`DsOp._unit_stride_vectors` hands the kernel ``a.contiguous()`` instead of ``a``: a strided
    1-D vector or a non-contiguous integer (non-int8) table with more than one element that is not mutated."""
    if name in mutates_args or a.numel() <= 1:
        return False
    if a.dim() == 1 and a.stride(0) != 1:
        return True
    return not a.is_floating_point() and a.dtype != torch.int8 and not a.is_contiguous()


def _signature_of(fn: Callable):
    import inspect
    return inspect.signature(fn)
