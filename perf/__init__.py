"""ds-ops performance report: ``python -m perf`` (see docs/performance.md).

perf/peaks.py   device peak table with sources, device detection, measured ceilings
perf/timers.py  CUDA events / CUDA graphs (triton.testing), NPU events, CPU wall clock, dispatch overhead
perf/specs.py   ops and shapes from ``ops.SPECS``; CPU scaling
perf/check.py   correctness check of each backend against the reference (ops/tolerances.py)
perf/layer.py   per-op share of a DeepSeek-V3 layer (needs ops/deepseek_layer.py)
perf/peers.py   optional peers (FlashInfer MLA) when importable
perf/report.py  CSV / JSON / markdown / roofline PNG / terminal table
"""
