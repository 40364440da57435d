"""The backends a correctness test runs on, as pytest parameters.

Every op's correctness suite is parametrised over :func:`backends_for`, so a new backend (the Ascend C kernels
through the CPU twin, say) is tested by the existing suites with no new test code:

    @pytest.mark.parametrize("be", backends_for("amla"))
    def test_something(be, gen):
        inputs = make_inputs(..., dtype=be.dtype(torch.bfloat16), device=be.device)
        with be.active():
            out = ops.amla.amla(**inputs)

A backend that cannot run in this process is a *skipped* parameter with the reason, never a silent absence: the
parameters carry the markers and tests/conftest.py skips a marker's tests with the reason where they cannot run.
``triton`` runs for real on CUDA (marked ``gpu``) and under ``TRITON_INTERPRET=1`` on CPU tensors (marked
``interpreter``); ``ascendc`` runs on CPU tensors through the twin build (marked ``ascendc``).
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterator

import pytest
import torch

import ops
from ops import _library


@dataclasses.dataclass(frozen=True)
class Backend:
    """One way of running the ops: ``name`` is the ``ops.backend`` switch value, ``device`` the tensors' device."""

    name: str                 # "reference" | "triton" | "ascendc"
    device: str               # "cpu" | "cuda"
    interpreted: bool = False  # Triton under TRITON_INTERPRET=1

    @property
    def id(self) -> str:
        if self.name == "triton":
            return "triton-interp" if self.interpreted else f"triton-{self.device}"
        if self.name == "ascendc":
            return "ascendc-twin" if self.device == "cpu" else "ascendc-npu"
        return self.name if self.device == "cpu" else f"{self.name}-{self.device}"

    def __str__(self) -> str:
        return self.id

    def dtype(self, want: torch.dtype) -> torch.dtype:
        """The dtype to test ``want`` with: the Triton interpreter computes bf16 ``tl.dot`` wrongly, so it
        tests fp16 in place of bf16 (bf16 runs on the GPU)."""
        if self.interpreted and want == torch.bfloat16:
            return torch.float16
        return want

    def active(self) -> contextlib.AbstractContextManager:
        """The ``ops.backend`` context that forces this backend."""
        return ops.backend(self.name)


def _op_has_backend(op_name: str, backend: str) -> bool:
    return any(k.backend == backend for k in _library.OPS[op_name].kernels)


def _triton_param():
    if torch.cuda.is_available():
        return pytest.param(Backend("triton", "cuda"), id="triton-cuda", marks=pytest.mark.gpu)
    b = Backend("triton", "cpu", interpreted=True)
    return pytest.param(b, id=b.id, marks=pytest.mark.interpreter)


def _ascendc_param():
    b = Backend("ascendc", "cpu")
    return pytest.param(b, id=b.id, marks=pytest.mark.ascendc)


def backends_for(op_name: str, *, reference: bool = True) -> list:
    """pytest params (values: :class:`Backend`) for every backend that has a kernel for ``ds::op_name``:
    the reference (unless ``reference=False``), Triton, Ascend C, each with its marker (``gpu`` / ``interpreter`` /
    ``ascendc``: skipped with the reason where this process cannot run it)."""
    out = [pytest.param(Backend("reference", "cpu"), id="reference")] if reference else []
    if _op_has_backend(op_name, "triton"):
        out.append(_triton_param())
    if _op_has_backend(op_name, "ascendc"):
        out.append(_ascendc_param())
    return out


def kernel_backends_for(op_name: str) -> list:
    """:func:`backends_for` without the reference (tests that compare a kernel with the reference)."""
    return backends_for(op_name, reference=False)


def op_backend_params(names, *, reference: bool = True, backend: str | None = None) -> list:
    """pytest params ``(op name, Backend)`` for every op of ``names`` × :func:`backends_for` it (ids
    ``<op>-<backend id>``, the backends' marks kept); ``backend`` keeps only that backend (e.g. "triton")."""
    return [pytest.param(name, *p.values, id=f"{name}-{p.id}", marks=p.marks)
            for name in names for p in backends_for(name, reference=reference)
            if backend is None or p.values[0].name == backend]


@contextlib.contextmanager
def on(backend: Backend) -> Iterator[Backend]:
    with backend.active():
        yield backend
