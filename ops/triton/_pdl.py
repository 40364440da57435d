"""Programmatic dependent launch (PDL, CUDA sm_90+): a kernel's programs become resident while the kernel before it
on the stream is still finishing, so the launch and the ramp-up overlap that kernel's tail.

A kernel launched with ``launch_pdl=True`` may start once every program of the previous kernel has called
``griddepcontrol.launch_dependents`` (or exited). Each program of ours calls it first (:func:`pdl_start`), then
``griddepcontrol.wait`` (:func:`pdl_wait`; both: :func:`pdl_enter`), which returns once the previous kernel has finished and its writes are
visible; only then does it touch memory. So the result never depends on the overlap. (Asking L2 for the weights
before the wait lost on the H200: docs/performance.md.)

On Ascend and under the interpreter ``PDL`` is a false constexpr, so the calls are never generated; a Triton without
``tl.extra.cuda.gdc_wait`` (triton-ascend 3.2 has no ``tl.extra.cuda``) gets no-op helpers, because its JIT still
reads the helpers' sources. Host side, :func:`pdl_launch` says whether a launch may ask for it and
:func:`pdl_kwargs` gives its launch keywords.
"""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from .._library import env_turned_off

ENV_PDL = "DS_OPS_PDL"


_CUDA_LANG = getattr(tl.extra, "cuda", None)
HAS_GDC = _CUDA_LANG is not None and hasattr(_CUDA_LANG, "gdc_wait") and hasattr(_CUDA_LANG, "gdc_launch_dependents")

if HAS_GDC:
    @triton.jit
    def pdl_start():
        """Let the next kernel on the stream launch now (it waits for this one itself before touching memory)."""
        tl.extra.cuda.gdc_launch_dependents()

    @triton.jit
    def pdl_wait():
        """Wait until the previous kernel on the stream has finished and its writes are visible."""
        tl.extra.cuda.gdc_wait()
else:   # triton-ascend 3.2 / Triton < 3.4: never called (PDL is false there), but the kernels' sources name them
    @triton.jit
    def pdl_start():
        """No programmatic dependent launch in this Triton: nothing to do."""
        pass

    @triton.jit
    def pdl_wait():
        """No programmatic dependent launch in this Triton: nothing to do."""
        pass


@triton.jit
def pdl_enter():
    """A PDL kernel's first step: :func:`pdl_start`, then :func:`pdl_wait`, before any memory access."""
    pdl_start()
    pdl_wait()


@functools.lru_cache(maxsize=None)
def _device_pdl(index: int) -> bool:
    return HAS_GDC and torch.cuda.get_device_capability(index)[0] >= 9


def pdl_launch(device: torch.device, wanted: bool) -> bool:
    """Whether a launch on ``device`` whose config asks for PDL (``wanted``) gets it: not under
    ``TRITON_INTERPRET=1``, a CUDA device of compute capability ≥ 9.0, a Triton with ``tl.extra.cuda.gdc_wait``
    (3.4 and later), and ``$DS_OPS_PDL`` not "0" / "false" / "no" / "off". The kernel's ``PDL`` constexpr and the
    launch's ``launch_pdl`` are both this value."""
    if not wanted or device.type != "cuda" or os.environ.get("TRITON_INTERPRET", "0") == "1":
        return False   # (the interpreter has no griddepcontrol, whatever the tensors' device)
    if env_turned_off(ENV_PDL):
        return False
    return _device_pdl(device.index if device.index is not None else torch.cuda.current_device())


def pdl_kwargs(device: torch.device, wanted: bool) -> dict:
    """The launch keywords of a PDL launch (``launch_pdl=True`` and the kernel's ``PDL=True`` constexpr, always
    together) when :func:`pdl_launch` grants it, else none."""
    return dict(launch_pdl=True, PDL=True) if pdl_launch(device, wanted) else {}
