"""The Ascend C backend (``ascendc/``): the CANN-built library on ``npu`` tensors, the CPU twin build on CPU tensors.

On an NPU the library is built with CANN and registers ``TORCH_LIBRARY_IMPL(ds, PrivateUse1)`` kernels. On CPU
tensors the same kernels and host tiling run through the twin (ascendc/twin/), built once with g++.
Nothing here is required: without either, ``auto`` runs triton-ascend or the reference.
"""
from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=None)
def unavailable_reason(device_type: str = "npu") -> str | None:
    """None if the Ascend C kernels can run on ``device_type`` tensors in this process, else why not."""
    if device_type == "cpu":
        return "the Ascend C CPU twin is not built (ascendc/ has no kernels yet)"
    try:
        import torch_npu  # noqa: F401
    except Exception as e:
        return f"torch_npu is not importable ({type(e).__name__}), so no Ascend C kernel can run"
    path = os.environ.get("DS_OPS_ASCENDC_LIB")
    if not path or not os.path.exists(path):
        return "the Ascend C library is not built (build ascendc/ with CANN and set DS_OPS_ASCENDC_LIB)"
    import torch
    try:
        torch.ops.load_library(path)
    except Exception as e:  # pragma: no cover - needs CANN
        return f"loading {path} failed: {e}"
    return None
