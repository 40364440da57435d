// Limits shared by the gating host tiling and kernel (no AscendC, no std::string).
#pragma once

#include <stdint.h>

namespace ds {
constexpr uint32_t kGatingMaxExperts = 1024;   // the kernel's scalar group tables are sized for this
}  // namespace ds
