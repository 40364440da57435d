"""Loading the compiled Ascend C library (``ascendc/``), when it exists.

The library is built with CANN on an Ascend machine and registers ``TORCH_LIBRARY_IMPL(ds, PrivateUse1)``
kernels. Nothing here is required: without it, NPU calls go to triton-ascend or the reference.
"""
from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None if the Ascend C library is loaded, else why not."""
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
