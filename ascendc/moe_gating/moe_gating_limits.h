// Limits shared by the gating host tiling and kernel (no AscendC, no std::string).
#pragma once

#include <stdint.h>

namespace ds {
constexpr uint32_t kGatingMaxExperts = 1024;   // the kernel's scalar group tables are sized for this
constexpr uint32_t kGatingVectorGroups = 32;   // groups scored with ReduceMax (one 32 B result block each)
}  // namespace ds
