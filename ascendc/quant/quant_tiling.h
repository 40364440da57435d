// Host tiling of dynamic_quant and rms_norm_dynamic_quant (plain C++, no AscendC): splits tokens over the vector
// cores and sizes the double-buffered UB chunks. Used by bindings/twin.cpp and bindings/npu.cpp alike.
#pragma once

#include <string>

#include "../common/tiling.h"

namespace ds {

struct QuantArgs {
  uint32_t rows, cols, dtype;
  bool rms, hasSmooth, hasResidual;
  float epsilon;
  uint32_t coreNum;   // vector cores available (Atlas A2: 40)
  uint32_t ubBytes;   // UB bytes per core (Atlas A2: 196608)
  uint32_t maxChunk;  // 0 = as large as fits; else an upper bound (tests sweep it)
};

// Fills *t. Returns "" on success, else the reason naming the argument that cannot be tiled (nothing is launched).
std::string QuantTilingCompute(const QuantArgs& a, QuantTiling* t);

}  // namespace ds
