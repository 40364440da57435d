// Host tiling of quant_matmul (plain C++, no AscendC): output tiles over the cube cores, the dequant epilogue's rows
// over the vector cores. Used by bindings/twin.cpp and bindings/npu.cpp alike.
#pragma once

#include <string>

#include "../common/tiling.h"

namespace ds {

constexpr uint32_t kCubeCores910B = 20;     // cube (AIC) cores on Atlas A2
constexpr uint32_t kL1Bytes910B = 524288;   // L1 per cube core
constexpr uint32_t kL0ABytes910B = 65536, kL0BBytes910B = 65536, kL0CBytes910B = 131072;

struct QuantMatmulArgs {
  uint32_t m, n, k, outDtype;
  bool hasBias;
  uint32_t cubeCores, vecCores;           // Atlas A2: 20, 40
  uint32_t l1Bytes, l0aBytes, l0bBytes, l0cBytes, ubBytes;
};

// Fills *t. Returns "" on success, else the reason naming the argument that cannot be tiled (nothing is launched).
std::string QuantMatmulTilingCompute(const QuantMatmulArgs& a, QuantMatmulTiling* t);

}  // namespace ds
