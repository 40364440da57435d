#!/usr/bin/env bash
# One command for the CUDA (H200) report, run from anywhere in the repository copy on the GPU machine:
#
#     DS_OPS_GIT_SHA=<sha> bash perf/run_gpu.sh              # everything, outputs in $OUT/perf
#     bash perf/run_gpu.sh --quick                          # ≈4 shapes per op: a first sanity pass
#     bash perf/run_gpu.sh --ops amla --out "$OUT/perf_amla" # one op (split long runs across calls)
#
# Extra arguments go to `python -m perf` and override the defaults below. The run stops starting new cases after
# PERF_BUDGET_S seconds (default 420) so that it finishes, writes results.csv / results.json / summary.md /
# roofline_*.png, and prints its table inside the device machine's 10-minute command limit.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUTDIR="${OUT:-perf_out}/perf"
"$PY" - <<'PYEOF'
import torch
try:
    import triton; tv = triton.__version__
except Exception as e:  # noqa: BLE001
    tv = f"not importable ({e})"
print("torch", torch.__version__, "| triton", tv, "| cuda", torch.cuda.is_available(),
      "|", torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU", flush=True)
PYEOF
exec "$PY" -m perf --device cuda --out "$OUTDIR" --budget-s "${PERF_BUDGET_S:-420}" "$@"
