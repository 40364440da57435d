"""Fixtures for the twin's own tests (imported by test_twin_*.py): one shared library of control and positive kernels,
built once."""
import ctypes

import pytest

from ops import _ascendc_build

SOURCES = ["tests/ascendc/controls/controls.cpp", "tests/ascendc/controls/positive.cpp"]


@pytest.fixture(scope="session")
def twin_lib() -> ctypes.CDLL:
    """The control + positive kernels library (cached build; shared by xdist workers through the build lock)."""
    return _ascendc_build.load("twin_tests", SOURCES)


@pytest.fixture
def report() -> _ascendc_build.TwinReport:
    """A fresh launch report to pass by reference."""
    return _ascendc_build.TwinReport()
