// Stand-ins for the three Ascend C kernel-language macros, so that g++ can syntax-check bindings/npu.cpp against
// torch and torch_npu's headers without CANN (check_npu_syntax.sh). Never used in a real build.
#pragma once
#include <cstdint>
#define __global__
#define __aicore__
#define GM_ADDR uint8_t*
