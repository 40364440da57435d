"""The Ascend C tests run through the CPU twin build; without it (no g++, a build error) they are skipped with
the reason."""
from __future__ import annotations

import pytest

from ops import _ascendc


@pytest.fixture(autouse=True)
def _twin_built():
    why = _ascendc.unavailable_reason("cpu")
    if why:
        pytest.skip(why)
