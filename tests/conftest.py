"""Test set-up: Triton interpreter on CPU-only machines, Hypothesis profiles, seeds."""
import os

import pytest
import torch

# Triton kernels run on CPU tensors under the interpreter; it must be set before any @triton.jit runs.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=25, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", deadline=None, max_examples=100)
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

# On a CUDA machine the interpreter is off (it is process-wide, and the CUDA tests need the compiler), so the tests
# that run Triton kernels on CPU tensors cannot run there: they are reported as skipped with the way to run them,
# not as ~200 failures. Only that exact reason is turned into a skip; CI (no CUDA) sets the interpreter above.
_INTERPRETER_ONLY = "Triton runs on CPU tensors only under TRITON_INTERPRET=1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    outcome = yield
    exc = outcome.excinfo[1] if outcome.excinfo else None
    if exc is not None and _INTERPRETER_ONLY in str(exc) and os.environ.get("TRITON_INTERPRET") != "1":
        outcome.force_exception(pytest.skip.Exception(
            "a CPU-interpreter test: on a CUDA machine run it with TRITON_INTERPRET=1 (the GPU checks are tests/gpu/)",
            _use_item_location=True))


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
