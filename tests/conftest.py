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
