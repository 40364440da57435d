#!/usr/bin/env bash
# The CUDA (H200) report, in two halves that each fit one device command (≤ 9 min), merged afterwards:
#
#     DS_OPS_GIT_SHA=<sha> bash perf/run_gpu.sh part1     # ceilings, amla (58 shapes), moe_gating_top_k (6), layer view,
#                                                        #   re-run check of 6 random rows   → $OUT/perf_part1/
#     DS_OPS_GIT_SHA=<sha> bash perf/run_gpu.sh part2     # ceilings, mla_prolog (30), dynamic_quant (18),
#                                                        #   rms_norm_dynamic_quant (12), quant_matmul (56),
#                                                        #   re-run check of 6 random rows   → $OUT/perf_part2/
#     python -m perf --merge <part1 dir> <part2 dir> --out docs/perf/h200     # anywhere, no GPU needed
#
#     bash perf/run_gpu.sh all                           # everything in one command (→ $OUT/perf/)
#     bash perf/run_gpu.sh quick                         # ≈4 shapes per op: a first sanity pass (→ $OUT/perf_quick/)
#     bash perf/run_gpu.sh ops amla,quant_matmul [args]  # an op subset (→ $OUT/perf_ops/)
#
# Extra arguments go to `python -m perf` (later ones override). Each run stops starting new cases after
# PERF_BUDGET_S seconds (default 360) so it still writes results.csv / results.json / summary.md / roofline_*.png
# and runs its re-run check (REPRO_N rows, default 6) inside the command limit. Progress: one line per case on stderr.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
BASE="${OUT:-perf_out}"
BUDGET="${PERF_BUDGET_S:-360}"
REPRO="${REPRO_N:-6}"
WHAT=all
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then WHAT="$1"; shift; fi   # no mode word: `all` with the given args
"$PY" - <<'PYEOF'
import torch
try:
    import triton; tv = triton.__version__
except Exception as e:  # noqa: BLE001
    tv = f"not importable ({e})"
print("torch", torch.__version__, "| triton", tv, "| cuda", torch.cuda.is_available(),
      "|", torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU", flush=True)
PYEOF
COMMON=(--device cuda --budget-s "$BUDGET" --repro-check "$REPRO")
case "$WHAT" in
  part1) exec "$PY" -m perf "${COMMON[@]}" --ops amla,moe_gating_top_k --out "$BASE/perf_part1" "$@" ;;
  part2) exec "$PY" -m perf "${COMMON[@]}" --ops mla_prolog,dynamic_quant,rms_norm_dynamic_quant,quant_matmul \
              --no-layer --out "$BASE/perf_part2" "$@" ;;
  all)   exec "$PY" -m perf "${COMMON[@]}" --out "$BASE/perf" "$@" ;;
  quick) exec "$PY" -m perf "${COMMON[@]}" --quick --out "$BASE/perf_quick" "$@" ;;
  ops)   OPS="$1"; shift; exec "$PY" -m perf "${COMMON[@]}" --ops "$OPS" --no-layer --out "$BASE/perf_ops" "$@" ;;
  *)     echo "usage: bash perf/run_gpu.sh part1|part2|all|quick|ops OPS [python -m perf args]" >&2; exit 2 ;;
esac
