"""Test set-up: the Triton interpreter on CPU-only machines, the markers, Hypothesis profiles, seeds.

Markers (pyproject's ``[tool.pytest.ini_options]``), each skipped with the reason where it cannot run:

* ``interpreter``: runs a Triton kernel on CPU tensors. Needs ``TRITON_INTERPRET=1`` set before Python starts;
  this file sets it on a machine without CUDA. On a CUDA machine the interpreter stays off (it is process-wide and
  the CUDA tests need the compiler), so these tests are skipped there; run them with
  ``TRITON_INTERPRET=1 pytest -m interpreter``. A test also marked ``gpu`` is not skipped by a module-wide
  ``interpreter`` mark on CUDA (it runs CUDA tensors).
* ``gpu``: needs a CUDA device. The GPU suite is ``pytest -m gpu`` on a CUDA machine (tests/gpu/ and the
  ``triton-cuda`` backend parameters of every correctness suite).
* ``ascendc``: runs an Ascend C kernel through the CPU twin; skipped while ``ops._ascendc.unavailable_reason("cpu")``
  gives a reason.
* ``slow``: takes more than a few seconds on 2 cores (deselect with ``-m "not slow"``).

Hypothesis profiles, chosen with ``HYPOTHESIS_PROFILE``:

* ``ci`` (default): derandomised (the same examples every run), 25 examples per test, no deadline; a failure
  prints the blob that reproduces it (``@reproduce_failure``).
* ``deep``: 500 examples per test, NOT derandomised (new examples every run), no deadline, blobs printed; for a
  long hunt on a developer machine: ``HYPOTHESIS_PROFILE=deep pytest -n 2 tests/test_amla.py``.
"""
import os

import pytest
import torch

# Triton kernels run on CPU tensors under the interpreter; it must be set before any @triton.jit runs.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import HealthCheck, settings  # noqa: E402

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=25, print_blob=True,
                          suppress_health_check=_SLOW_OK)
settings.register_profile("deep", derandomize=False, deadline=None, max_examples=500, print_blob=True,
                          suppress_health_check=_SLOW_OK)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# one thread per pytest worker: tiny matmuls on 2 busy cores are far faster single-threaded
torch.set_num_threads(1)


@pytest.fixture
def gen():
    """A fresh seeded generator per test (fresh random data, reproducible)."""
    return torch.Generator().manual_seed(1234)


def has_triton() -> bool:
    try:
        import triton  # noqa: F401
        return True
    except Exception:
        return False


requires_triton = pytest.mark.skipif(not has_triton(), reason="triton is not installed")


def _marker_skips() -> dict:
    """marker name -> the reason its tests cannot run in this process (absent: they can)."""
    from ops import _ascendc, _library
    why = {}
    interp = _library.triton_available()
    if interp is None and not _library.triton_interpret():
        interp = ("a Triton-interpreter test (CPU tensors): the interpreter is off here (a CUDA machine); run it "
                  "with TRITON_INTERPRET=1 pytest -m interpreter")
    if interp:
        why["interpreter"] = interp
    if not torch.cuda.is_available():
        why["gpu"] = "needs a CUDA device (the GPU suite: pytest -m gpu on a CUDA machine)"
    asc = _ascendc.unavailable_reason("cpu")
    if asc:
        why["ascendc"] = asc
    return why


def pytest_collection_modifyitems(config, items):
    why = _marker_skips()
    for item in items:
        for name, reason in why.items():
            if item.get_closest_marker(name) is None:
                continue
            if name == "interpreter" and item.get_closest_marker("gpu") is not None and "gpu" not in why:
                continue
            item.add_marker(pytest.mark.skip(reason=reason))
            break


def run_uninterpreted(code: str, timeout: int):
    """``python -c code`` from the repository root without TRITON_INTERPRET (real Triton compiles for a CUDA target
    on a CPU machine); the CompletedProcess, output captured as text."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _launch_desc(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", v.dtype, tuple(v.shape), tuple(v.stride()))
    return (type(v).__name__, v)


class _LaunchRecorder:
    """Stands in for a @triton.jit kernel: ``kernel[grid](*args, **kw)`` appends a description of the launch."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.log.append((self.name, tuple(grid), tuple(_launch_desc(a) for a in args),
                             tuple((k, _launch_desc(v)) for k, v in kw.items())))
        return launch


def record_launches(monkeypatch, mod, names) -> list:
    """Replace the kernels ``names`` of module ``mod`` by recorders (no kernel runs); returns the log they fill:
    one (kernel name, grid, described args, ((keyword, described value), ...)) per launch, where a tensor is
    described by dtype / shape / strides and any other value as (type name, value)."""
    log: list = []
    for n in names:
        monkeypatch.setattr(mod, n, _LaunchRecorder(n, log))
    return log
