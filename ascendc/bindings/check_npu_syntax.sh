#!/usr/bin/env bash
# Syntax-check bindings/npu.cpp against the installed torch and the C++ headers of the matching torch-npu wheel
# (downloaded with pip, headers only; nothing from CANN is needed). For CI:
#   ascendc/bindings/check_npu_syntax.sh [python]
# The kernels themselves need CANN's compiler and are not checked here (see ascendc/README.md).
set -euo pipefail
py="${1:-python}"
case "$py" in */*) py="$(cd "$(dirname "$py")" && pwd)/$(basename "$py")" ;; esac   # absolute: the script cds below
here="$(cd "$(dirname "$0")" && pwd)"
ver="$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')"
cache="${DS_TORCH_NPU_HEADERS:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-ops/torch-npu-$ver}"
if [ ! -d "$cache/torch_npu/include" ]; then
  mkdir -p "$cache"
  "$py" -m pip download "torch-npu==$ver" --no-deps --only-binary=:all: -d "$cache" -q
  (cd "$cache" && "$py" -m zipfile -e torch_npu-*.whl . >/dev/null && rm -f torch_npu-*.whl)
fi
tdir="$("$py" -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
pyinc="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
inc="$cache/torch_npu/include"
"${CXX:-g++}" -std=c++17 -fsyntax-only -DDS_NPU_SYNTAX_CHECK -include "$here/npu_syntax_check.h" \
  -I"$tdir/include" -I"$tdir/include/torch/csrc/api/include" -I"$inc" -I"$inc/third_party/acl/inc" -I"$pyinc" \
  "$here/npu.cpp"
echo "bindings/npu.cpp: syntax ok against torch $ver and torch-npu $ver headers"
