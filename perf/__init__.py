"""ds-ops performance report: ``python -m perf`` (see docs/performance.md).

perf/__main__.py          the command line: plan, run, write; --merge, --part, --markdown, --amla-batch-invariance
perf/runner.py            one op × shape case: inputs, the golden, each backend checked and timed, roofline columns
perf/peaks.py             device peak table with sources, device detection, measured ceilings
perf/timers.py            CUDA graphs / CUDA events, NPU events, CPU wall clock, dispatch overhead
perf/specs.py             ops and shapes from ``ops.SPECS``; CPU scaling
perf/check.py             correctness check of each backend against the reference (ops/tolerances.py)
perf/modeled.py           Ascend C twin rows: the modeled 910B time and its % of the 910B's peaks
perf/layer.py             per-op share of a DeepSeek-V3 layer
perf/peers.py             optional peers (FlashInfer MLA) when importable
perf/header.py            what a report shows, in words (the header above the table)
perf/report.py            CSV / JSON / markdown summary / roofline PNG / terminal table; merging reports
perf/markdown.py          one markdown performance table per device of a committed report
perf/repro_check.py       re-run random rows of a report and compare
perf/batch_invariance.py  ds::amla with the batch-invariant mode off and on (CUDA)
perf/benchmarks.py        the report's cases as pytest-benchmark benchmarks (``pytest perf --benchmark-only``)
"""
