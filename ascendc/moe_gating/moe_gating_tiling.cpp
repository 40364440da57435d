// Host tiling of moe_gating_top_k; see moe_gating_tiling.h and ascendc/README.md §Tiling.
#include "moe_gating_tiling.h"

#include <cstring>

namespace ds {
namespace {

constexpr uint32_t kRowBatch = 64;

uint32_t Layout(const GatingArgs& a, uint32_t batch, GatingTiling* t) {
  const uint32_t e = DTypeBytes(a.dtype);
  t->rowBatch = batch;
  t->inBytes = AlignUp(a.experts * e, kBlockBytes);
  t->normBytes = AlignUp(a.experts * 4, kBlockBytes);
  t->scoreBytes = t->ePad * 4;
  t->biasBytes = a.hasBias ? AlignUp(a.experts * 4, kBlockBytes) : 0;
  t->reduceBytes = (2 + kGatingVectorGroups) * kBlockBytes + ReduceWorkElems(a.experts, true) * 4;   // results, work
  t->wBytes = AlignUp(batch * a.k * 4, kBlockBytes);
  t->yBytes = AlignUp(batch * a.k * e, kBlockBytes);
  t->idxBytes = AlignUp(batch * a.k * 4, kBlockBytes);
  return t->bufferNum * (t->inBytes + t->normBytes) + t->scoreBytes + t->biasBytes + t->reduceBytes + t->wBytes +
         t->yBytes + t->idxBytes;
}

}  // namespace

std::string GatingTilingCompute(const GatingArgs& a, GatingTiling* t) {
  std::memset(t, 0, sizeof(*t));
  if (a.experts == 0) return "E (x.shape[1]) must be >= 1, got 0";
  if (a.experts > kGatingMaxExperts)
    return "E (x.shape[1]) = " + std::to_string(a.experts) + " exceeds the kernel's " +
           std::to_string(kGatingMaxExperts) + " experts";
  if (a.groupCount == 0 || a.experts % a.groupCount)
    return "group_count = " + std::to_string(a.groupCount) + " must divide E = " + std::to_string(a.experts);
  if (a.kGroup < 1 || a.kGroup > a.groupCount) return "k_group = " + std::to_string(a.kGroup) + " outside [1, group_count]";
  const uint32_t per = a.experts / a.groupCount;
  if (a.k < 1 || a.k > a.kGroup * per) return "k = " + std::to_string(a.k) + " outside [1, k_group * E / group_count]";
  if (a.groupSelectMode == 1 && a.groupCount > 1 && per < 2)
    return "group_select_mode = 1 needs >= 2 experts per group, got " + std::to_string(per);
  if (a.dtype > kBFloat16) return "x dtype code must be 0, 1 or 2, got " + std::to_string(a.dtype);
  if (a.coreNum == 0) return "core_num must be >= 1, got 0";
  t->rows = a.rows;
  t->experts = a.experts;
  t->k = a.k;
  t->kGroup = a.kGroup;
  t->groupCount = a.groupCount;
  t->groupSelectMode = a.groupSelectMode;
  t->renorm = a.renorm;
  t->normType = a.normType;
  t->hasBias = a.hasBias;
  t->dtype = a.dtype;
  std::memcpy(&t->scaleBits, &a.routedScalingFactor, 4);
  std::memcpy(&t->epsBits, &a.eps, 4);
  SplitRows(a.rows, a.coreNum, &t->usedCores, &t->rowsPerCore, &t->bigCores);
  t->bufferNum = 2;
  t->ePad = AlignUp(a.experts, 64);
  const uint32_t most = t->rowsPerCore + (t->bigCores ? 1 : 0);
  uint32_t batch = a.maxRowBatch ? a.maxRowBatch : kRowBatch;
  if (most && batch > most) batch = most;
  const uint32_t copyMax = kDataCopyPadMaxBytes / (4 * a.k);   // one DataCopyPad moves a batch of expert_idx
  if (batch > copyMax) batch = copyMax;
  if (batch == 0) batch = 1;
  while (batch > 1 && Layout(a, batch, t) > a.ubBytes) batch /= 2;
  t->ubUsed = Layout(a, batch, t);
  if (t->ubUsed > a.ubBytes)
    return "E (x.shape[1]) = " + std::to_string(a.experts) + " with k = " + std::to_string(a.k) + " needs " +
           std::to_string(t->ubUsed) + " B of the " + std::to_string(a.ubBytes) + " B unified buffer";
  return "";
}

}  // namespace ds
