"""Every Triton kernel under compute-sanitizer memcheck (``pytest -m gpu``): the driver tests/gpu/sanitize.py runs
each op's launch buckets and the unchecked caller errors in a subprocess under memcheck; skipped where the
``compute-sanitizer`` binary is not found (PATH, then $CUDA_HOME/bin, /usr/local/cuda/bin).

PYTORCH_NO_CUDA_MEMORY_CACHING=1 gives every tensor its own cudaMalloc, so memcheck knows each tensor's bounds (with
the caching allocator an access past a tensor usually lands in another block of the same segment, unseen).
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _sanitizer() -> str | None:
    for d in (None, os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin"), "/usr/local/cuda/bin"):
        found = shutil.which("compute-sanitizer", path=d)
        if found:
            return found
    return None


def _memcheck(*driver_args: str, timeout: int) -> subprocess.CompletedProcess:
    exe = _sanitizer()
    if exe is None:
        pytest.skip("compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", PYTHONUNBUFFERED="1")
    cmd = [exe, "--tool", "memcheck", "--error-exitcode", "9", sys.executable, "-m", "tests.gpu.sanitize", *driver_args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_memcheck_reports_a_read_past_the_end():
    """The negative control: a kernel reading one element past its input must be reported (exit 9), else a clean
    run below proves nothing."""
    r = _memcheck("--self-test", timeout=300)
    assert r.returncode == 9, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Invalid __global__ read" in r.stdout + r.stderr


def test_every_kernel_is_clean_under_memcheck():
    r = _memcheck("--budget-s", "400", timeout=590)
    out = r.stdout + r.stderr
    assert r.returncode != 3, "the case budget ran out before every case ran:\n" + out[-3000:]
    assert r.returncode == 0, out[-6000:]
    assert "ERROR SUMMARY: 0 errors" in out, out[-3000:]
