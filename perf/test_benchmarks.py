"""pytest-benchmark over the report's cases: ``pytest perf --benchmark-only`` (see perf/benchmarks.py)."""
import pytest

from perf.benchmarks import cases, device, extra_info, record, run

CASES = cases(device())


@pytest.mark.parametrize("entry,case,backend", [pytest.param(e, c, b, id=f"{e.name}-{c.name}-{b}")
                                                for e, c, b in CASES])
def test_op(benchmark, perf_runner, entry, case, backend):
    """One op × shape × backend: checked against the reference, then timed by the report's timer."""
    row = run(perf_runner, entry, case, backend)
    assert row.get("check") in ("PASS", "baseline"), f"{row.get('check')}: {row.get('check_detail')}"
    assert row.get("samples_us"), row.get("note") or "not timed"
    benchmark.group = entry.name
    benchmark.extra_info.update(extra_info(row))
    record(benchmark, row["samples_us"])
