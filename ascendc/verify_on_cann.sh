#!/usr/bin/env bash
# For a user with the CANN toolkit (and for the last step an Atlas A2 NPU): build the Ascend C kernels three ways and
# run the same tests. Not runnable on this project's machines (no CANN); the CPU twin covers what it can.
#   1. CANN CPU-debug build (Huawei's own API checks on the CPU)        CMAKE_ASC_RUN_MODE=cpu
#   2. the CA-model simulator build                                     CMAKE_ASC_RUN_MODE=sim
#   3. the NPU build, then the ds-ops Ascend C test suites on npu tensors
set -euo pipefail
: "${ASCEND_HOME_PATH:?source CANN's set_env.sh first}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
soc="${SOC_VERSION:-ascend910b}"
for mode in cpu sim npu; do
  cmake -S "$here" -B "$root/build/ascendc-$mode" -DSOC_VERSION="$soc" -DCMAKE_ASC_RUN_MODE="$mode"
  cmake --build "$root/build/ascendc-$mode" -j
done
export DS_OPS_ASCENDC_LIB="$root/build/ascendc-npu/libds_ascendc.so"
cd "$root"
python -m pytest -q -m ascendc tests/ascendc tests/test_quant.py tests/test_moe_gating.py
