"""Programmatic dependent launch (PDL, CUDA sm_90+): a decode kernel starts streaming its weights while the
kernel before it on the stream is still finishing.

A kernel launched with ``launch_pdl=True`` may start once every program of the previous kernel has called
``griddepcontrol.launch_dependents`` (or exited). Before its ``griddepcontrol.wait`` it may only touch data no
earlier kernel writes or reads: the weights, which it asks L2 for (``prefetch.global.L2``: no data comes back,
nothing waits on it). After the wait, every write of the previous kernel is visible, and only then are the
activations, scales, counters and outputs touched. Inductor and TensorRT-LLM launch the same way.

On Ascend and under the interpreter ``PDL`` is a false constexpr: the branch that names ``tl.extra.cuda`` and the
inline PTX is never generated (triton-ascend 3.2 has neither). Host side: :func:`pdl_launch` says whether a launch
may ask for it (CUDA, compute capability ≥ 9, a Triton with ``gdc_wait``, ``DS_OPS_PDL`` not 0).
"""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

ENV_PDL = "DS_OPS_PDL"


@triton.jit
def pdl_start():
    """Let the next kernel on the stream launch now (it waits for this one itself before touching shared data)."""
    tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def pdl_wait():
    """Wait until the previous kernel on the stream has finished and its writes are visible."""
    tl.extra.cuda.gdc_wait()


@triton.jit
def prefetch_l2(ptrs):
    """Ask L2 for the 128-byte lines holding ``ptrs`` (any shape of pointers, all inside an input tensor)."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def prefetch_rows_l2(base, rows, stride_row, k0, k_len, LINES: tl.constexpr):
    """Prefetch bytes [k0, k0 + k_len) of each row ``rows`` (a vector of in-range row ids) of an int8 / byte
    matrix at ``base`` with row stride ``stride_row``: ``LINES`` (a power of two ≥ k_len / 128) 128-byte lines
    per row, each clamped into the row's range so no address leaves the tensor."""
    off = tl.minimum(tl.arange(0, LINES) * 128, k_len - 1)
    prefetch_l2(base + (rows.to(tl.int64)[:, None] * stride_row + (k0 + off)[None, :]))


@functools.lru_cache(maxsize=None)
def _device_pdl(index: int) -> bool:
    cuda_lang = getattr(tl.extra, "cuda", None)
    return (torch.cuda.get_device_capability(index)[0] >= 9 and cuda_lang is not None
            and hasattr(cuda_lang, "gdc_wait") and hasattr(cuda_lang, "gdc_launch_dependents"))


def pdl_launch(device: torch.device, wanted: bool) -> bool:
    """Whether a launch on ``device`` whose config asks for PDL (``wanted``) gets it: a CUDA device of compute
    capability ≥ 9.0, a Triton that has ``tl.extra.cuda.gdc_wait``, and ``$DS_OPS_PDL`` not "0" / "false" / "no" /
    "off". The kernel's ``PDL`` constexpr and the launch's ``launch_pdl`` are both this value."""
    if not wanted or device.type != "cuda":
        return False
    if os.environ.get(ENV_PDL, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return _device_pdl(device.index if device.index is not None else torch.cuda.current_device())
