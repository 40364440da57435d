"""Host-side helpers shared by the Triton launchers: launch-config files, rounding helpers, SM counts."""
from __future__ import annotations

import functools
import json
import os

import torch

CONFIG_DIR = os.path.join(os.path.dirname(__file__), "configs")


@functools.lru_cache(maxsize=None)
def load_configs(op: str) -> dict:
    """The launch configs of ``ops/triton/configs/<op>.json`` (sections keyed by backend: "cuda", "ascend", ...)."""
    with open(os.path.join(CONFIG_DIR, op + ".json")) as f:
        return json.load(f)


def backend_key(device: torch.device) -> str:
    """The config section of a launch: 'cuda' on NVIDIA; 'ascend' on NPUs and on the CPU interpreter (so CI runs
    the Ascend tiles and persistent loops). ops/triton/amla.py has a third, 'interpreter', section of its own."""
    return "cuda" if device.type == "cuda" else "ascend"


def bf16_cpu_output_reason(what: str) -> str:
    """``supports_reason`` text for a bf16 output on CPU tensors: the interpreter truncates fp32 → bf16 where the
    GPU rounds to nearest even, so the Triton backend refuses it there (``auto`` then takes the reference)."""
    return (f"a bf16 {what} under TRITON_INTERPRET (CPU) would be rounded toward zero (the interpreter truncates "
            "fp32 → bf16); bf16 outputs run on CUDA / NPU")


def unit_inner(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t`` itself when its last dim has a unit stride (or ≤ 1 element, or t is None), else a contiguous copy:
    the kernels address per-channel vectors, scales, seq_lens and block-table rows as ``ptr + i``."""
    return t if t is None or t.dim() == 0 or t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous()


def cdiv(x: int, y: int) -> int:
    """``triton.cdiv`` for host ints. In Triton 3.9 ``triton.cdiv`` / ``triton.next_power_of_2`` are
    ``@constexpr_function`` objects whose host call costs ~2 µs (argument unwrapping); these give the same ints."""
    return (x + (y - 1)) // y


def next_power_of_2(n: int) -> int:
    """``triton.next_power_of_2`` for host ints: the smallest power of two ≥ n; 0 for n ≤ 0 (as Triton's bit trick)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


@functools.lru_cache(maxsize=None)
def sm_count(index: int) -> int:
    """Streaming multiprocessors of CUDA device ``index`` (queried once)."""
    return torch.cuda.get_device_properties(index).multi_processor_count


_COUNTERS: dict = {}
_CNT_REGION = 1024   # counters per stream region (≥ the tiles of any split-K launch; more → a fresh buffer)
_CNT_REGIONS = 256   # stream regions per device buffer (1 MiB; torch pools 32 streams per priority)
_CNT_CAPTURE = 1 << 20   # counters handed out to captured calls, each its own slice (4 MiB)


def counters(device: torch.device, n: int) -> torch.Tensor:
    """Zeroed int32 tile counters (at least ``n``) for in-kernel reductions by the last-arriving program
    (quant_matmul's split-K ``reduce: "atomic"``, amla's ``fused_merge``).

    The kernel leaves every counter it used at 0 again, so one zeroed buffer per device, created by the first
    eager call, is reused without a memset. Eager calls: each stream gets its own region of it (kernels on one
    stream never overlap). Calls captured into a CUDA graph: each gets its own slice of the buffer's capture area
    for good, so graphs replayed concurrently on different streams (two-batch overlap) never share counters, and
    no memset enters the graph (a per-call ``torch.zeros`` cost 1.1–1.3 µs per decode GEMM on the H200). A fresh
    ``torch.zeros`` for this call only (its memset captured with the graph, if capturing) when there is no buffer
    yet, the capture area is used up, there are more than ``_CNT_REGIONS`` streams, or more than ``_CNT_REGION``
    tiles."""
    is_cuda = device.type == "cuda"
    capturing = is_cuda and torch.cuda.is_current_stream_capturing()
    if n > _CNT_REGION:
        return torch.zeros(n, dtype=torch.int32, device=device)
    dkey = (device.type, device.index)
    entry = _COUNTERS.get(dkey)
    if entry is None:
        if capturing:   # no eager buffer yet (a zeros() now would be memset in every replay): this call's own
            return torch.zeros(n, dtype=torch.int32, device=device)
        buf = torch.zeros(_CNT_REGION * _CNT_REGIONS + _CNT_CAPTURE, dtype=torch.int32, device=device)
        entry = _COUNTERS[dkey] = (buf, {})
    buf, slots = entry
    if capturing:
        used = slots.get("capture", 0)
        if used + n > _CNT_CAPTURE:
            return torch.zeros(n, dtype=torch.int32, device=device)
        slots["capture"] = used + n
        off = _CNT_REGION * _CNT_REGIONS + used
        return buf[off: off + n]
    skey = torch.cuda.current_stream(device).cuda_stream if is_cuda else 0
    off = slots.get(skey)
    if off is None:
        if sum(1 for k in slots if k != "capture") >= _CNT_REGIONS:
            return torch.zeros(n, dtype=torch.int32, device=device)
        off = slots[skey] = sum(1 for k in slots if k != "capture") * _CNT_REGION
    return buf[off: off + _CNT_REGION]
