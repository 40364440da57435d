"""Device peak table (every number with its source), device detection, and measured ceilings.

Two kinds of ceiling are reported side by side (docs/performance.md: method and ceilings):

* **peak** — the vendor's dense datasheet rate (``PEAKS``); a number we did not find in a vendor document is
  marked ``derived=True`` and its ``source`` says how it was derived. Sparse ("with sparsity") figures are never
  used: NVIDIA's datasheets print them, the dense rate is half (datasheet footnote; FlashMLA issue #75).
* **achievable** — what this machine measured at start-up (:func:`measure_ceilings`): a large matrix product
  through the framework (bf16; int8 via ``torch._int_mm``) and a large device-to-device copy, counting bytes read
  plus bytes written.

Units: TFLOPS / TOPS = 1e12 operations per second (2 per multiply-add); TB/s = 1e12 bytes per second.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import torch


@dataclasses.dataclass(frozen=True)
class Peak:
    """One datasheet number. ``value`` in the unit of the field it sits in (TFLOPS, TOPS or TB/s)."""

    value: float
    source: str
    derived: bool = False


@dataclasses.dataclass(frozen=True)
class DevicePeaks:
    """Dense peak rates of one accelerator.

    key:       short id used in file names (``"h200_sxm"``)
    name:      human name
    bf16:      dense bf16/fp16 matrix TFLOPS
    int8:      dense int8 matrix TOPS
    fp32:      plain (non-matrix) fp32 TFLOPS, None where no source gives it
    hbm_tbs:   device-memory bandwidth, TB/s
    """

    key: str
    name: str
    bf16: Peak
    int8: Peak
    fp32: Peak | None
    hbm_tbs: Peak

    def compute(self, kind: str) -> Peak | None:
        """Peak for a compute kind ``"bf16"``/``"fp16"``/``"int8"``/``"fp32"`` (TFLOPS or TOPS)."""
        kind = "bf16" if kind == "fp16" else kind
        return getattr(self, kind, None)

    def ridge(self, kind: str) -> float | None:
        """Ridge point in FLOP/byte: peak compute over peak bandwidth."""
        p = self.compute(kind)
        return None if p is None else p.value / self.hbm_tbs.value


_H100_DS = ("NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column "
            "(https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)")
_H200_DS = "NVIDIA H200 product page / datasheet, H200 SXM column (https://www.nvidia.com/en-us/data-center/h200/)"
_A100_DS = ("NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column "
            "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
            "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)")
_SPARSE = "; the datasheet prints {sparse} with sparsity, dense is half (datasheet footnote; FlashMLA issue #75)"
_CUBE = ("{cores} cube cores × 16³ fp16 MACs/cycle/core (HotChips 31 DaVinci talk: a cube does 4096 fp16 or 8192 int8 "
         "MACs per cycle) × 2 FLOP/MAC × 1.8 GHz (clock assumed as in the AMLA deployment estimate, unverified)")
_ASCEND_HBM = ("unverified third-party figure, no Huawei datasheet in hand: Ascend 910B 64 GB HBM2e at about 1.6 TB/s "
               "(public figures vary between 0.4 and 2 TB/s); trust the measured copy instead")

PEAKS: dict[str, DevicePeaks] = {
    "h100_sxm": DevicePeaks(
        "h100_sxm", "NVIDIA H100 SXM (80 GB)",
        bf16=Peak(989.4, _H100_DS + _SPARSE.format(sparse="1979 TFLOPS")),
        int8=Peak(1979.0, _H100_DS + _SPARSE.format(sparse="3958 TOPS")),
        fp32=Peak(67.0, _H100_DS + " (FP32, non-tensor)"),
        hbm_tbs=Peak(3.35, _H100_DS + " (80 GB HBM3)"),
    ),
    "h200_sxm": DevicePeaks(
        "h200_sxm", "NVIDIA H200 SXM (141 GB)",
        bf16=Peak(989.4, _H200_DS + _SPARSE.format(sparse="1979 TFLOPS")),
        int8=Peak(1979.0, _H200_DS + _SPARSE.format(sparse="3958 TOPS")),
        fp32=Peak(67.0, _H200_DS + " (FP32, non-tensor)"),
        hbm_tbs=Peak(4.8, _H200_DS + " (141 GB HBM3e, 4.8 TB/s)"),
    ),
    "h800_sxm": DevicePeaks(
        "h800_sxm", "NVIDIA H800 SXM (80 GB)",
        bf16=Peak(989.4, "H800 SXM5 has the H100 SXM tensor rates (NVIDIA H800 product brief; FlashMLA issue #75 and "
                         "the AMLA paper's footnote use 989–990 dense: 660/990 = 66.7%). DeepSeek measured ≈865 "
                         "under clock throttling (FlashMLA docs/20250422-new-kernel-deep-dive.md)"),
        int8=Peak(1979.0, "derived: H800 SXM5 = H100 SXM int8 tensor rate, " + _H100_DS + _SPARSE.format(sparse="3958 TOPS"),
                  derived=True),
        fp32=Peak(67.0, "derived: H800 SXM5 = H100 SXM FP32 rate, " + _H100_DS, derived=True),
        hbm_tbs=Peak(3.35, "NVIDIA H800 SXM5 product brief: 80 GB HBM3, 3.35 TB/s (same memory as H100 SXM; "
                           "FlashMLA deep-dive: H800 865 TFLOPS throttled, 3.35 TB/s)"),
    ),
    "a100_sxm_80gb": DevicePeaks(
        "a100_sxm_80gb", "NVIDIA A100 SXM 80GB",
        bf16=Peak(312.0, _A100_DS + _SPARSE.format(sparse="624 TFLOPS")),
        int8=Peak(624.0, _A100_DS + _SPARSE.format(sparse="1248 TOPS")),
        fp32=Peak(19.5, _A100_DS + " (FP32, non-tensor)"),
        hbm_tbs=Peak(2.039, _A100_DS + " (80 GB HBM2e, 2039 GB/s)"),
    ),
    "ascend_910b3": DevicePeaks(
        "ascend_910b3", "Huawei Ascend 910B3 (Atlas A2)",
        bf16=Peak(294.9, "derived: " + _CUBE.format(cores=20) + "; 20 cube cores is the Ascend910B3 spec "
                         "bishengir-compile 1.2.0 attaches for Ascend910B3 and HAMi's device table", derived=True),
        int8=Peak(589.8, "derived: 2 × the bf16 figure (cube int8 MAC rate is twice fp16, HotChips 31)", derived=True),
        fp32=None,
        hbm_tbs=Peak(1.6, _ASCEND_HBM, derived=True),
    ),
    "ascend_910b2": DevicePeaks(
        "ascend_910b2", "Huawei Ascend 910B2 (Atlas A2)",
        bf16=Peak(353.9, "derived: " + _CUBE.format(cores=24) + "; 24 AI cores per HAMi's Ascend910B2 entry and "
                         "the CANN FIA tiling load-balancing example (24 cube cores)", derived=True),
        int8=Peak(707.8, "derived: 2 × the bf16 figure (cube int8 MAC rate is twice fp16, HotChips 31)", derived=True),
        fp32=None,
        hbm_tbs=Peak(1.6, _ASCEND_HBM, derived=True),
    ),
    "ascend_910c": DevicePeaks(
        "ascend_910c", "Huawei Ascend 910C (Atlas A3, two dies)",
        bf16=Peak(707.8, "derived: the AMLA paper (arXiv 2509.25224) reports 614 TFLOPS = 86.8% of peak on Ascend 910 "
                         "(CloudMatrix384) → 707.8 TFLOPS "
                         "(= 48 cube cores × 8192 FLOP/cycle × 1.8 GHz, decomposition unverified)", derived=True),
        int8=Peak(1415.6, "derived: 2 × the bf16 figure (cube int8 MAC rate is twice fp16, HotChips 31)", derived=True),
        fp32=None,
        hbm_tbs=Peak(3.2, "derived: two 910B-class dies × 1.6 TB/s; " + _ASCEND_HBM, derived=True),
    ),
}


# ----------------------------------------------------------------------------------------------
# device detection
# ----------------------------------------------------------------------------------------------
def npu_available() -> bool:
    """True when torch_npu imports and sees an NPU."""
    try:
        import torch_npu  # noqa: F401
        return bool(torch.npu.is_available())
    except Exception:
        return False


def default_device() -> str:
    """``"cuda"`` if a CUDA GPU is visible, else ``"npu"`` if torch_npu sees one, else ``"cpu"``."""
    if torch.cuda.is_available():
        return "cuda"
    if npu_available():
        return "npu"
    return "cpu"


def device_name(device: str) -> str:
    """The framework's name of the device (``torch.cuda.get_device_name``, ``torch.npu.get_device_name``), or the
    CPU's model name."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "npu":
        try:
            return torch.npu.get_device_name(dev.index or 0)
        except Exception as e:  # pragma: no cover - needs an NPU
            return f"npu ({type(e).__name__})"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return "cpu: " + (platform.processor() or platform.machine())


def lookup_peaks(name: str) -> DevicePeaks | None:
    """The ``PEAKS`` entry for a device name as the framework reports it, or None (unknown part: only the measured
    ceilings apply). PCIe/NVL variants of the SXM parts are deliberately not matched (lower clocks and power)."""
    n = name.upper().replace("-", " ").replace("_", " ")
    if any(v in n for v in ("PCIE", " NVL")):
        return None
    if "H200" in n:
        return PEAKS["h200_sxm"]
    if "H800" in n:
        return PEAKS["h800_sxm"]
    if "H100" in n:
        return PEAKS["h100_sxm"]
    if "A100" in n and "80GB" in n.replace(" ", "") and "SXM" in n:
        return PEAKS["a100_sxm_80gb"]
    compact = n.replace(" ", "")
    if "ASCEND910B3" in compact:
        return PEAKS["ascend_910b3"]
    if "ASCEND910B2" in compact:
        return PEAKS["ascend_910b2"]
    if "ASCEND910 93" in n or "ASCEND91093" in compact or "910C" in compact:
        return PEAKS["ascend_910c"]
    return None


def slug(name: str) -> str:
    """File-name-safe form of a device name."""
    out = "".join(c.lower() if c.isalnum() else "_" for c in name)
    while "__" in out:
        out = out.replace("__", "_")
    return out.strip("_")[:60] or "device"


# ----------------------------------------------------------------------------------------------
# measured ceilings
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Ceiling:
    """A measured device ceiling: value in TFLOPS (bf16), TOPS (int8) or TB/s (copy) by kind; None with ``error``
    when it could not be measured."""
    value: float | None          # TFLOPS / TOPS / TB/s
    method: str                  # what was run
    error: str | None = None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":  # pragma: no cover - needs an NPU
        torch.npu.synchronize()


def _median_seconds(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    from .timers import time_fn
    t = time_fn(fn, device, mode="events", quick=True, reps=reps)
    return t.p50_us * 1e-6


def copy_tbs(device: str | torch.device, nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Device copy bandwidth in TB/s: ``dst.copy_(src)`` of ``nbytes`` (bf16), bytes read + written over the median
    event-timed call (a kernel copy: the same copy captured in a CUDA graph becomes a copy-engine memcpy node,
    2.76 against 4.25 TB/s on the H200). The ``hbm_tbs`` ceiling is measured with it."""
    dev = torch.device(device)
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
    dst = torch.empty_like(src)
    return 2 * nbytes / _median_seconds(lambda: dst.copy_(src), dev, reps) / 1e12


def measure_ceilings(device: str | torch.device, *, quick: bool = False) -> dict[str, Ceiling]:
    """Measure the achievable ceilings on ``device``: ``bf16`` (TFLOPS of an n³ bf16 matmul on random data),
    ``int8`` (TOPS of ``torch._int_mm``, B column-major), ``fp32`` (TFLOPS of an fp32 matmul, TF32 off) and
    ``hbm_tbs`` (device-to-device copy, bytes read + written). GPU/NPU: n = 8192 and a 2 GiB copy (1 GiB with
    ``quick``); CPU: small sizes so it takes well under a second on 2 cores. Failures are recorded, not raised."""
    dev = torch.device(device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    on_cpu = dev.type == "cpu"
    n_mm = 512 if on_cpu else 8192
    copy_bytes = (32 << 20) if on_cpu else ((1 << 30) if quick else (2 << 30))
    reps = 5 if on_cpu else 20
    out: dict[str, Ceiling] = {}

    def rand(shape, dtype):
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(device=dev, dtype=dtype)

    def attempt(key, method, body):
        try:
            out[key] = Ceiling(body(), method)
        except Exception as e:  # noqa: BLE001 - a missing ceiling is reported, not fatal
            out[key] = Ceiling(None, method, f"{type(e).__name__}: {e}"[:300])

    def mm_bf16():
        a, b = rand((n_mm, n_mm), torch.bfloat16), rand((n_mm, n_mm), torch.bfloat16)
        return 2 * n_mm ** 3 / _median_seconds(lambda: a @ b, dev, reps) / 1e12

    def mm_int8():
        a = torch.randint(-127, 128, (n_mm, n_mm), generator=gen, dtype=torch.int8).to(dev)
        b = torch.randint(-127, 128, (n_mm, n_mm), generator=gen, dtype=torch.int8).to(dev).t()
        return 2 * n_mm ** 3 / _median_seconds(lambda: torch._int_mm(a, b), dev, reps) / 1e12

    def mm_fp32():
        n = 1024 if on_cpu else 4096
        a, b = rand((n, n), torch.float32), rand((n, n), torch.float32)
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False     # plain fp32 FMA, not the tensor cores' tf32
        try:
            return 2 * n ** 3 / _median_seconds(lambda: a @ b, dev, reps) / 1e12
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32

    attempt("bf16", f"bf16 {n_mm}x{n_mm}x{n_mm} matmul (torch @, random data), median", mm_bf16)
    attempt("int8", f"int8 {n_mm}x{n_mm}x{n_mm} torch._int_mm (B column-major, random data), median", mm_int8)
    n32 = 1024 if on_cpu else 4096
    attempt("fp32", f"fp32 {n32}x{n32}x{n32} matmul (torch @, TF32 off, random data), median", mm_fp32)
    attempt("hbm_tbs", f"device copy of {copy_bytes >> 20} MiB (bytes read + written), median",
            lambda: copy_tbs(dev, copy_bytes, reps))
    return out


def ceiling_value(ceilings: dict[str, Ceiling], kind: str) -> float | None:
    kind = "bf16" if kind == "fp16" else kind
    c = ceilings.get(kind)
    return None if c is None else c.value


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
