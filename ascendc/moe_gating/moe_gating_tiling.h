// Host tiling of moe_gating_top_k (plain C++, no AscendC): tokens over vector cores, one whole row of E logits
// per UB step, logits / norm_out double-buffered, y / expert_idx staged for rowBatch tokens per copy.
#pragma once

#include <string>

#include "../common/tiling.h"
#include "moe_gating_limits.h"

namespace ds {



struct GatingArgs {
  uint32_t rows, experts, k, kGroup, groupCount, groupSelectMode, renorm, normType, dtype;
  bool hasBias;
  float routedScalingFactor, eps;
  uint32_t coreNum, ubBytes;
  uint32_t maxRowBatch;   // 0 = default; tests sweep it
};

// Fills *t; "" on success, else the reason naming the argument (nothing is launched).
std::string GatingTilingCompute(const GatingArgs& a, GatingTiling* t);

}  // namespace ds
