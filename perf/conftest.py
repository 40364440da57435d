"""pytest set-up of the benchmarks (``pytest perf --benchmark-only``): one report runner per session."""
import pytest


@pytest.fixture(scope="session")
def perf_runner():
    """The report's runner on this machine's device (ceilings measured once)."""
    from perf.benchmarks import device, make_runner
    return make_runner(device())
