// Host tiling of dynamic_quant / rms_norm_dynamic_quant; see quant_tiling.h and ascendc/README.md §Tiling.
#include "quant_tiling.h"

#include <cstring>

namespace ds {
namespace {

constexpr uint32_t kMaxChunk = 8192;       // elements; longer chunks gain nothing once MTE and V overlap
constexpr uint32_t kMinResidentChunk = 512;
constexpr uint32_t kScaleBatch = 512;      // per-token scales staged before one copy out
constexpr uint32_t kResultBytes = 64;      // two reduction results, 32 B apart

uint32_t ReduceWorkBytes(uint32_t chunk) {
  return ReduceWorkElems(chunk, false) * 4;
}

// Fill the byte sizes for this chunk and residency; returns the UB total.
uint32_t Layout(const QuantArgs& a, uint32_t chunk, bool resident, QuantTiling* t) {
  const uint32_t e = DTypeBytes(a.dtype);
  t->inBytes = AlignUp(chunk * e, kBlockBytes);
  t->outBytes = AlignUp(chunk, kBlockBytes);
  t->rowBytes = resident ? AlignUp(a.cols * 4, kBlockBytes) : 0;
  t->vecBytes = AlignUp(a.cols * 4, kBlockBytes);
  t->workBytes = AlignUp(chunk * 4, kBlockBytes);
  t->halfBytes = AlignUp(chunk * 2, kBlockBytes);
  t->reduceBytes = ReduceWorkBytes(chunk) + kResultBytes;
  t->scaleBytes = AlignUp(t->scaleBatch * 4, kBlockBytes);
  const uint32_t inQueues = a.rms ? (2 + (a.hasResidual ? 1 : 0)) : 1;   // x [, residual], residual_out
  const uint32_t vecs = (a.hasSmooth ? 1 : 0) + (a.rms ? 1 : 0);         // smooth, gamma
  return t->bufferNum * (inQueues * t->inBytes + t->outBytes) + t->rowBytes + vecs * t->vecBytes +
         (2 + (resident ? 0 : 1) + (a.rms && !resident ? 1 : 0)) * t->workBytes + t->halfBytes + t->reduceBytes + t->scaleBytes;
}

// Largest chunk (whole row, or a multiple of 64 elements) that fits; 0 if none of at least minChunk does.
uint32_t FitChunk(const QuantArgs& a, bool resident, uint32_t minChunk, QuantTiling* t) {
  uint32_t cap = kMaxChunk;
  if (a.maxChunk) cap = a.maxChunk < cap ? a.maxChunk : cap;
  cap = cap / 64 * 64;
  if (cap == 0) cap = 64;
  if (a.cols <= cap && Layout(a, a.cols, resident, t) <= a.ubBytes) return a.cols;
  for (uint32_t c = (a.cols < cap ? a.cols : cap) / 64 * 64; c >= 64 && c >= minChunk; c -= 64) {
    if (Layout(a, c, resident, t) <= a.ubBytes) return c;
  }
  return 0;
}

}  // namespace

std::string QuantTilingCompute(const QuantArgs& a, QuantTiling* t) {
  std::memset(t, 0, sizeof(*t));
  if (a.cols == 0) return "H (x.shape[-1]) must be >= 1, got 0";
  if (a.dtype > kBFloat16) return "x dtype code must be 0 (fp32), 1 (fp16) or 2 (bf16), got " + std::to_string(a.dtype);
  if (a.coreNum == 0) return "core_num must be >= 1, got 0";
  if (a.hasResidual && !a.rms) return "residual is an rms_norm_dynamic_quant argument";
  t->rows = a.rows;
  t->cols = a.cols;
  t->rms = a.rms;
  t->dtype = a.dtype;
  t->hasSmooth = a.hasSmooth;
  t->hasResidual = a.hasResidual;
  std::memcpy(&t->epsilonBits, &a.epsilon, 4);
  SplitRows(a.rows, a.coreNum, &t->usedCores, &t->rowsPerCore, &t->bigCores);
  t->bufferNum = 2;
  t->gmAligned = a.cols % kBlockBytes == 0;   // every x, residual and int8 row then starts on a 32 B boundary
  const uint32_t most = t->rowsPerCore + (t->bigCores ? 1 : 0);
  t->scaleBatch = most == 0 ? 1 : (most < kScaleBatch ? most : kScaleBatch);

  const uint32_t minResident = a.cols < kMinResidentChunk ? a.cols : kMinResidentChunk;
  uint32_t chunk = FitChunk(a, true, minResident, t);
  t->resident = chunk != 0;
  if (!chunk) chunk = FitChunk(a, false, 64, t);
  if (!chunk) {
    return "H (x.shape[-1]) = " + std::to_string(a.cols) + " does not fit the " + std::to_string(a.ubBytes) +
           " B unified buffer: the fp32 smooth" + (a.rms ? std::string("/gamma vectors") : std::string(" vector")) +
           " alone take " + std::to_string(((a.hasSmooth ? 1 : 0) + (a.rms ? 1 : 0)) * AlignUp(a.cols * 4, 32)) + " B";
  }
  t->chunk = chunk;
  t->numChunks = CeilDiv(a.cols, chunk);
  t->tailChunk = a.cols - (t->numChunks - 1) * chunk;
  t->ubUsed = Layout(a, chunk, t->resident, t);
  return "";
}

}  // namespace ds
