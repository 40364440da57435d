"""Packaging hook for the Ascend C kernels (the metadata lives in pyproject.toml).

``pip install -e ".[npu]"`` (or any install) also builds ascendc/ with CMake into ``ops/libds_ascendc.so`` when the
CANN toolkit (``ASCEND_HOME_PATH``) and torch_npu are present; otherwise it prints why and skips. The CPU twin build
needs only g++ and is built on first use by ops/_ascendc.py.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _skip_reason() -> str | None:
    if not os.environ.get("ASCEND_HOME_PATH"):
        return "ASCEND_HOME_PATH is not set (source CANN's set_env.sh first)"
    try:
        import torch_npu  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means no NPU build
        return f"torch_npu is not importable ({type(e).__name__})"
    if shutil.which("cmake") is None:
        return "cmake is not on PATH"
    return None


def build_ascendc() -> None:
    why = _skip_reason()
    if why:
        print(f"ds-ops: not building the Ascend C NPU library: {why}. The CPU twin needs only g++.")
        return
    build = ROOT / "build" / "ascendc-npu"
    soc = os.environ.get("SOC_VERSION", "ascend910b")
    subprocess.run(["cmake", "-S", str(ROOT / "ascendc"), "-B", str(build), f"-DSOC_VERSION={soc}"], check=True)
    subprocess.run(["cmake", "--build", str(build), "-j"], check=True)
    shutil.copy2(build / "libds_ascendc.so", ROOT / "ops" / "libds_ascendc.so")


class BuildPy(build_py):
    def run(self):
        build_ascendc()
        super().run()


setup(cmdclass={"build_py": BuildPy})
