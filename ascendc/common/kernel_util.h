// Kernel-side helpers shared by the ds-ops Ascend C kernels (AscendC API only; compiles for CANN and the twin).
#pragma once

#include "kernel_operator.h"
#include "tiling.h"

namespace ds {

template <class A, class B> struct Same { static constexpr bool value = false; };
template <class A> struct Same<A, A> { static constexpr bool value = true; };

// The tiling struct is all 32-bit words: copy it from GM word by word (scalar reads).
template <typename Tiling>
__aicore__ inline void CopyTiling(Tiling* dst, GM_ADDR src) {
  auto* s = reinterpret_cast<__gm__ const uint32_t*>(src);
  auto* d = reinterpret_cast<uint32_t*>(dst);
  for (uint32_t i = 0; i < sizeof(Tiling) / 4; ++i) d[i] = s[i];
}

__aicore__ inline float BitsToFloat(uint32_t b) {
  union { uint32_t u; float f; } v;
  v.u = b;
  return v.f;
}

__aicore__ inline bool IsNan(float v) { return v != v; }
__aicore__ inline bool IsFinite(float v) { return v == v && v - v == 0.0f; }

// Vector instructions run in order but a dependent one must wait for its producer (PipeBarrier page).
__aicore__ inline void VBarrier() { AscendC::PipeBarrier<PIPE_V>(); }

// One-shot pipe-to-pipe synchronisation (the producer's writes become visible to the consumer).
// Event id 0 of each HardEvent is used only here, each SetFlag immediately matched by its WaitFlag.
template <AscendC::HardEvent E>
__aicore__ inline void Sync() {
  AscendC::SetFlag<E>(0);
  AscendC::WaitFlag<E>(0);
}

// GM -> UB of n elements: DataCopy when the length is whole 32 B blocks and GM rows are aligned, else DataCopyPad
// (the bytes after n up to the next block are unspecified; no vector op reads them).
template <typename T>
__aicore__ inline void CopyIn(const AscendC::LocalTensor<T>& dst, const AscendC::GlobalTensor<T>& src, uint32_t n,
                              bool gmAligned) {
  if (gmAligned && (n * sizeof(T)) % kBlockBytes == 0) {
    AscendC::DataCopy(dst, src, n);
  } else {
    AscendC::DataCopyExtParams p{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
    AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, static_cast<T>(0)};
    AscendC::DataCopyPad(dst, src, p, pad);
  }
}

// UB -> GM of exactly n elements (DataCopyPad unless whole blocks on an aligned row).
template <typename T>
__aicore__ inline void CopyOut(const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src, uint32_t n,
                               bool gmAligned) {
  if (gmAligned && (n * sizeof(T)) % kBlockBytes == 0) {
    AscendC::DataCopy(dst, src, n);
  } else {
    AscendC::DataCopyExtParams p{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
    AscendC::DataCopyPad(dst, src, p);
  }
}

// fp32 copy of a bf16 / fp16 / fp32 tensor (exact).
template <typename T>
__aicore__ inline void ToFloat(const AscendC::LocalTensor<float>& dst, const AscendC::LocalTensor<T>& src, uint32_t n) {
  if constexpr (Same<T, float>::value) {
    AscendC::Muls(dst, src, 1.0f, n);
  } else {
    AscendC::Cast(dst, src, AscendC::RoundMode::CAST_NONE, n);
  }
}

// x.dtype value of an fp32 tensor, round to nearest even.
template <typename T>
__aicore__ inline void FromFloat(const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<float>& src, uint32_t n) {
  if constexpr (Same<T, float>::value) {
    AscendC::Muls(dst, src, 1.0f, n);
  } else {
    AscendC::Cast(dst, src, AscendC::RoundMode::CAST_RINT, n);
  }
}

// Rows [start, start + count) of this core when rows are split as the host tiling says.
__aicore__ inline void CoreRows(uint32_t rowsPerCore, uint32_t bigCores, uint32_t& start, uint32_t& count) {
  const uint32_t b = AscendC::GetBlockIdx();
  start = b * rowsPerCore + (b < bigCores ? b : bigCores);
  count = rowsPerCore + (b < bigCores ? 1 : 0);
}

}  // namespace ds
