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
