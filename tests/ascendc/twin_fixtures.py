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


def assert_breaks(run, report, rule: str, text: str) -> None:
    """A negative control: ``run(fixed, report_ptr)`` with fixed = 0 launches a kernel that breaks ``rule``; the
    twin must report that rule, name the call (``text``) and raise on ``raise_if_violation``."""
    assert run(0, ctypes.byref(report)) == 0
    assert not report.ok
    assert report.rule == rule, report.message
    assert report.message.startswith(f"[{rule}] ")
    assert text in report.message, report.message
    with pytest.raises(RuntimeError, match="Ascend C twin violation"):
        report.raise_if_violation()


def assert_fixed_passes(run, report) -> None:
    """The same control with the rule kept (fixed = 1): a clean launch with a modeled time."""
    assert run(1, ctypes.byref(report)) == 0
    assert report.ok, report.message
    assert report.message == "" and report.modeled_ns > 0
