// Host tiling of quant_matmul: see quant_matmul_tiling.h and QuantMatmulTiling (common/tiling.h).
#include "quant_matmul_tiling.h"

#include <algorithm>

namespace ds {

namespace {
constexpr uint32_t kMaxBaseM = 128, kMaxBaseN = 128, kMaxBaseK = 256;
constexpr uint32_t kNd2NzMaxSrcD = 65535;   // Nd2NzParams.srcDValue (elements): x rows are K long
constexpr uint32_t kMaxStrideBlocks = 65535; // DataCopyParams.srcStride (32 B blocks) of the packed-weight rows
constexpr uint32_t kMaxChunk = 8192;
constexpr uint32_t kEpilogueBytesPerElem = 4 + 4 + 4 + 4 + 4;  // acc, fp32 work, w_scale, bias, out (<= 4 B)

std::string Num(uint32_t v) { return std::to_string(v); }
}  // namespace

std::string QuantMatmulTilingCompute(const QuantMatmulArgs& a, QuantMatmulTiling* t) {
  *t = QuantMatmulTiling{};
  if (a.outDtype > kBFloat16) return "out_dtype code " + Num(a.outDtype) + " is not fp32 / fp16 / bf16";
  if (a.cubeCores == 0) return "cube core count 0: at least one cube core is needed";
  if (a.vecCores == 0) return "vector core count 0: at least one vector core is needed";
  if (a.n == 0) return "N (weight_int8.shape[1]) = 0: nothing to compute";
  if (a.k > kNd2NzMaxSrcD)
    return "K (x_int8.shape[1]) = " + Num(a.k) + " exceeds " + Num(kNd2NzMaxSrcD) +
           ", the Nd2Nz DataCopy's row length limit (srcDValue); split the GEMM along K";
  t->m = a.m; t->n = a.n; t->k = a.k; t->outDtype = a.outDtype; t->hasBias = a.hasBias;
  t->kBlocks = CeilDiv(a.k, 32);
  t->nBlocks = CeilDiv(a.n, 16);
  if (uint64_t(t->nBlocks) * 16 > kMaxStrideBlocks)
    return "N (weight_int8.shape[1]) = " + Num(a.n) + " exceeds " + Num(kMaxStrideBlocks / 16 * 16) +
           ", the packed weight's row stride limit (DataCopyParams.srcStride)";
  if (a.m == 0) return "";
  uint32_t bm = std::min(kMaxBaseM, AlignUp(a.m, 16)), bn = std::min(kMaxBaseN, AlignUp(a.n, 16));
  uint32_t bk = std::min(kMaxBaseK, AlignUp(std::max(a.k, 1u), 32));
  auto fits = [&] {
    return bm * bk <= a.l0aBytes && bk * bn <= a.l0bBytes && bm * bn * 4 <= a.l0cBytes &&
           bm * bk + bk * bn <= a.l1Bytes;
  };
  while (!fits()) {
    if (bk > 32) bk = AlignUp(bk / 2, 32);
    else if (bn > 16) bn = AlignUp(bn / 2, 16);
    else if (bm > 16) bm = AlignUp(bm / 2, 16);
    else
      return "the cube memories (L1 " + Num(a.l1Bytes) + " B, L0A " + Num(a.l0aBytes) + " B, L0B " +
             Num(a.l0bBytes) + " B, L0C " + Num(a.l0cBytes) + " B) cannot hold one 16 x 16 x 32 int8 tile";
  }
  t->baseM = bm; t->baseN = bn; t->baseK = bk;
  t->mTiles = CeilDiv(a.m, bm);
  t->nTiles = CeilDiv(a.n, bn);
  t->kTiles = CeilDiv(a.k, bk);
  t->tailK = a.k ? a.k - (t->kTiles - 1) * bk : 0;
  t->tiles = t->mTiles * t->nTiles;
  t->usedCubeCores = a.k ? std::min(a.cubeCores, t->tiles) : 0;  // K = 0: the accumulator is 0, no cube pass
  t->tilesPerCore = t->usedCubeCores ? CeilDiv(t->tiles, t->usedCubeCores) : 0;
  t->l1ABytes = bm * bk; t->l1BBytes = bk * bn;
  t->l0ABytes = bm * bk; t->l0BBytes = bk * bn; t->l0CBytes = bm * bn * 4;

  SplitRows(a.m, a.vecCores, &t->usedVecCores, &t->rowsPerCore, &t->bigCores);
  uint32_t maxChunk = std::min(kMaxChunk, a.ubBytes / kEpilogueBytesPerElem / 64 * 64);
  if (maxChunk == 0) return "UB of " + Num(a.ubBytes) + " B cannot hold one 64-column epilogue chunk";
  t->chunk = a.n <= maxChunk ? a.n : maxChunk;
  t->numChunks = CeilDiv(a.n, t->chunk);
  t->tailChunk = a.n - (t->numChunks - 1) * t->chunk;
  t->accBytes = AlignUp(t->chunk * 4, kBlockBytes);
  t->vecBytes = t->accBytes;
  t->outBytes = AlignUp(t->chunk * DTypeBytes(a.outDtype), kBlockBytes);
  t->ubUsed = 2 * t->accBytes + (a.hasBias ? 2 : 1) * t->vecBytes + t->outBytes;
  if (t->ubUsed > a.ubBytes)
    return "N (weight_int8.shape[1]) = " + Num(a.n) + ": the epilogue chunk does not fit the UB";
  return "";
}

}  // namespace ds
