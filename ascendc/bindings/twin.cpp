// C ABI of the Ascend C kernels on CPU buffers through the twin (ascendc/twin/): the same host tiling as
// bindings/npu.cpp, then twin::Launch of the kernel over the tiling's blockDim cores. Called by ops/_ascendc.py
// through ctypes on tensor data pointers (contiguous; smooth / gamma / bias already fp32).
//
// Every ds_twin_* returns 0 on success, 1 when the tiling cannot fit (err names the argument; nothing ran),
// 2 when the kernel broke a twin rule (err is the twin's message; outputs are left untouched).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_operator.h"
#include "../moe_gating/moe_gating_tiling.h"
#include "../quant/quant_tiling.h"
#include "../quant_matmul/quant_matmul_tiling.h"

extern "C" {
void ds_dynamic_quant(GM_ADDR x, GM_ADDR smooth, GM_ADDR y, GM_ADDR scale, GM_ADDR tiling);
void ds_rms_norm_dynamic_quant(GM_ADDR x, GM_ADDR residual, GM_ADDR gamma, GM_ADDR smooth, GM_ADDR y,
                               GM_ADDR scale, GM_ADDR residual_out, GM_ADDR tiling);
void ds_moe_gating_top_k(GM_ADDR x, GM_ADDR bias, GM_ADDR y, GM_ADDR expert_idx, GM_ADDR norm_out, GM_ADDR tiling);
void ds_quant_matmul(GM_ADDR x, GM_ADDR w_nz, GM_ADDR acc, GM_ADDR tiling);
void ds_quant_matmul_epilogue(GM_ADDR acc, GM_ADDR w_scale, GM_ADDR x_scale, GM_ADDR bias, GM_ADDR out,
                              GM_ADDR tiling);
}

namespace {

using twin::TwinReportC;

int Fail(char* err, uint32_t len, const std::string& msg, int code) {
  if (err && len) std::snprintf(err, len, "%s", msg.c_str());
  return code;
}

int Finish(const twin::Launch& l, TwinReportC* rep, char* err, uint32_t len) {
  twin::to_c(l.report(), rep);
  return l.report().ok ? 0 : Fail(err, len, l.report().violation, 2);
}

template <typename Tiling>
GM_ADDR TilingArg(twin::Launch& l, const Tiling& t) { return l.gm_input(&t, sizeof(t), "tiling"); }

}  // namespace

extern "C" {

// Field names of the tiling structs, in memory order (every field is a uint32).
const char* ds_quant_tiling_fields() {
  return "rows,cols,rms,dtype,hasSmooth,hasResidual,epsilonBits,usedCores,rowsPerCore,bigCores,chunk,numChunks,"
         "tailChunk,resident,bufferNum,gmAligned,scaleBatch,inBytes,outBytes,rowBytes,vecBytes,workBytes,halfBytes,"
         "reduceBytes,scaleBytes,ubUsed";
}
const char* ds_gating_tiling_fields() {
  return "rows,experts,k,kGroup,groupCount,groupSelectMode,renorm,normType,hasBias,dtype,scaleBits,epsBits,"
         "usedCores,rowsPerCore,bigCores,bufferNum,rowBatch,ePad,inBytes,normBytes,scoreBytes,biasBytes,reduceBytes,"
         "wBytes,yBytes,idxBytes,ubUsed";
}
const char* ds_quant_matmul_tiling_fields() {
  return "m,n,k,outDtype,hasBias,kBlocks,nBlocks,baseM,baseN,baseK,mTiles,nTiles,kTiles,tailK,tiles,usedCubeCores,"
         "tilesPerCore,l1ABytes,l1BBytes,l0ABytes,l0BBytes,l0CBytes,usedVecCores,rowsPerCore,bigCores,chunk,numChunks,"
         "tailChunk,accBytes,vecBytes,outBytes,ubUsed";
}
static_assert(sizeof(ds::QuantMatmulTiling) == 32 * 4, "ds_quant_matmul_tiling_fields lists every field");
static_assert(sizeof(ds::QuantTiling) == 26 * 4, "ds_quant_tiling_fields lists every QuantTiling field");
static_assert(sizeof(ds::GatingTiling) == 27 * 4, "ds_gating_tiling_fields lists every GatingTiling field");

int ds_quant_tiling(uint32_t rows, uint32_t cols, uint32_t dtype, uint32_t rms, uint32_t smooth, uint32_t residual,
                    float epsilon, uint32_t cores, uint32_t ub, uint32_t maxChunk, uint32_t* out, char* err,
                    uint32_t len) {
  ds::QuantTiling t;
  const std::string e = ds::QuantTilingCompute(
      {rows, cols, dtype, rms != 0, smooth != 0, residual != 0, epsilon, cores, ub, maxChunk}, &t);
  if (!e.empty()) return Fail(err, len, e, 1);
  std::memcpy(out, &t, sizeof(t));
  return 0;
}

int ds_gating_tiling(uint32_t rows, uint32_t experts, uint32_t k, uint32_t kGroup, uint32_t groupCount,
                     uint32_t mode, uint32_t renorm, uint32_t normType, uint32_t dtype, uint32_t bias, float rsf,
                     float eps, uint32_t cores, uint32_t ub, uint32_t maxRowBatch, uint32_t* out, char* err,
                     uint32_t len) {
  ds::GatingTiling t;
  const std::string e = ds::GatingTilingCompute(
      {rows, experts, k, kGroup, groupCount, mode, renorm, normType, dtype, bias != 0, rsf, eps, cores, ub,
       maxRowBatch}, &t);
  if (!e.empty()) return Fail(err, len, e, 1);
  std::memcpy(out, &t, sizeof(t));
  return 0;
}

int ds_twin_dynamic_quant(const void* x, const float* smooth, int8_t* y, float* scale, uint32_t rows, uint32_t cols,
                          uint32_t dtype, uint32_t cores, TwinReportC* rep, char* err, uint32_t len) {
  ds::QuantTiling t;
  const std::string e = ds::QuantTilingCompute(
      {rows, cols, dtype, false, smooth != nullptr, false, 0.0f, cores, ds::kUbBytes910B, 0}, &t);
  if (!e.empty()) return Fail(err, len, e, 1);
  if (t.usedCores == 0) return 0;
  const size_t n = static_cast<size_t>(rows) * cols;
  twin::Launch l(t.usedCores);
  GM_ADDR gx = l.gm_input(x, n * ds::DTypeBytes(dtype), "x");
  GM_ADDR gs = smooth ? l.gm_input(smooth, cols * 4ull, "smooth_scales") : nullptr;
  GM_ADDR gy = l.gm_output(y, n, "x_int8");
  GM_ADDR gsc = l.gm_output(scale, rows * 4ull, "scale");
  GM_ADDR gt = TilingArg(l, t);
  l.run([&] { ds_dynamic_quant(gx, gs, gy, gsc, gt); });
  return Finish(l, rep, err, len);
}

int ds_twin_rms_norm_dynamic_quant(const void* x, const void* residual, const float* gamma, const float* smooth,
                                   float epsilon, int8_t* y, float* scale, void* residualOut, uint32_t rows,
                                   uint32_t cols, uint32_t dtype, uint32_t cores, TwinReportC* rep, char* err,
                                   uint32_t len) {
  ds::QuantTiling t;
  const std::string e = ds::QuantTilingCompute(
      {rows, cols, dtype, true, smooth != nullptr, residual != nullptr, epsilon, cores, ds::kUbBytes910B, 0}, &t);
  if (!e.empty()) return Fail(err, len, e, 1);
  if (t.usedCores == 0) return 0;
  const size_t n = static_cast<size_t>(rows) * cols, xb = n * ds::DTypeBytes(dtype);
  twin::Launch l(t.usedCores);
  GM_ADDR gx = l.gm_input(x, xb, "x");
  GM_ADDR gr = residual ? l.gm_input(residual, xb, "residual") : nullptr;
  GM_ADDR gg = l.gm_input(gamma, cols * 4ull, "gamma");
  GM_ADDR gs = smooth ? l.gm_input(smooth, cols * 4ull, "smooth_scales") : nullptr;
  GM_ADDR gy = l.gm_output(y, n, "x_int8");
  GM_ADDR gsc = l.gm_output(scale, rows * 4ull, "scale");
  GM_ADDR gro = l.gm_output(residualOut, xb, "residual_out");
  GM_ADDR gt = TilingArg(l, t);
  l.run([&] { ds_rms_norm_dynamic_quant(gx, gr, gg, gs, gy, gsc, gro, gt); });
  return Finish(l, rep, err, len);
}

int ds_twin_moe_gating_top_k(const void* x, const float* bias, void* y, int32_t* idx, float* normOut, uint32_t rows,
                             uint32_t experts, uint32_t k, uint32_t kGroup, uint32_t groupCount, uint32_t mode,
                             uint32_t renorm, uint32_t normType, float rsf, float eps, uint32_t dtype, uint32_t cores,
                             TwinReportC* rep, char* err, uint32_t len) {
  ds::GatingTiling t;
  const std::string e = ds::GatingTilingCompute(
      {rows, experts, k, kGroup, groupCount, mode, renorm, normType, dtype, bias != nullptr, rsf, eps, cores,
       ds::kUbBytes910B, 0}, &t);
  if (!e.empty()) return Fail(err, len, e, 1);
  if (t.usedCores == 0) return 0;
  const size_t eb = ds::DTypeBytes(dtype);
  twin::Launch l(t.usedCores);
  GM_ADDR gx = l.gm_input(x, static_cast<size_t>(rows) * experts * eb, "x");
  GM_ADDR gb = bias ? l.gm_input(bias, experts * 4ull, "bias") : nullptr;
  GM_ADDR gy = l.gm_output(y, static_cast<size_t>(rows) * k * eb, "y");
  GM_ADDR gi = l.gm_output(idx, static_cast<size_t>(rows) * k * 4, "expert_idx");
  GM_ADDR gn = l.gm_output(normOut, static_cast<size_t>(rows) * experts * 4, "norm_out");
  GM_ADDR gt = TilingArg(l, t);
  l.run([&] { ds_moe_gating_top_k(gx, gb, gy, gi, gn, gt); });
  return Finish(l, rep, err, len);
}

int ds_quant_matmul_tiling(uint32_t m, uint32_t n, uint32_t k, uint32_t outDtype, uint32_t bias, uint32_t cubeCores,
                           uint32_t vecCores, uint32_t l1, uint32_t l0a, uint32_t l0b, uint32_t l0c, uint32_t ub,
                           uint32_t* out, char* err, uint32_t len) {
  ds::QuantMatmulTiling t;
  const std::string e = ds::QuantMatmulTilingCompute(
      {m, n, k, outDtype, bias != 0, cubeCores, vecCores, l1, l0a, l0b, l0c, ub}, &t);
  if (!e.empty()) return Fail(err, len, e, 1);
  std::memcpy(out, &t, sizeof(t));
  return 0;
}

// x [M, K] int8; wNz the packed weight [ceil(K/32), ceil(N/16), 16, 32] int8; scales fp32; bias fp32 or null;
// out [M, N] of outDtype. Two launches: the cube pass into an int32 workspace, then the vector epilogue; the
// report is their sum (times and busy pipes add: the launches run one after the other).
int ds_twin_quant_matmul(const int8_t* x, const int8_t* wNz, const float* wScale, const float* xScale,
                         const float* bias, void* out, uint32_t m, uint32_t n, uint32_t k, uint32_t outDtype,
                         uint32_t cubeCores, uint32_t vecCores, TwinReportC* rep, char* err, uint32_t len) {
  ds::QuantMatmulTiling t;
  const std::string e = ds::QuantMatmulTilingCompute(
      {m, n, k, outDtype, bias != nullptr, cubeCores, vecCores, ds::kL1Bytes910B, ds::kL0ABytes910B,
       ds::kL0BBytes910B, ds::kL0CBytes910B, ds::kUbBytes910B}, &t);
  if (!e.empty()) return Fail(err, len, e, 1);
  if (m == 0) return 0;
  std::vector<int32_t> acc(size_t(m) * n, 0);  // K = 0 (no cube pass): the accumulator is 0
  twin::TwinReportC cube{};
  if (t.usedCubeCores) {
    twin::Launch l(t.usedCubeCores, twin::CoreKind::AIC);
    GM_ADDR gx = l.gm_input(x, size_t(m) * k, "x_int8");
    GM_ADDR gw = l.gm_input(wNz, size_t(t.kBlocks) * t.nBlocks * 512, "weight_nz");
    GM_ADDR ga = l.gm_output(acc.data(), acc.size() * 4, "acc");
    GM_ADDR gt = TilingArg(l, t);
    l.run([&] { ds_quant_matmul(gx, gw, ga, gt); });
    if (int rc = Finish(l, &cube, err, len)) { *rep = cube; return rc; }
  }
  twin::Launch l(t.usedVecCores);
  GM_ADDR ga = l.gm_input(acc.data(), acc.size() * 4, "acc");
  GM_ADDR gws = l.gm_input(wScale, n * 4ull, "weight_scale");
  GM_ADDR gxs = l.gm_input(xScale, m * 4ull, "x_scale");
  GM_ADDR gb = bias ? l.gm_input(bias, n * 4ull, "bias") : nullptr;
  GM_ADDR go = l.gm_output(out, size_t(m) * n * ds::DTypeBytes(outDtype), "out");
  GM_ADDR gt = TilingArg(l, t);
  l.run([&] { ds_quant_matmul_epilogue(ga, gws, gxs, gb, go, gt); });
  const int rc = Finish(l, rep, err, len);
  rep->modeled_ns += cube.modeled_ns;
  for (int p = 0; p < twin::NPI; ++p) rep->pipe_busy_ns[p] += cube.pipe_busy_ns[p];
  rep->mte2_bytes += cube.mte2_bytes;
  rep->calls += cube.calls;
  return rc;
}

}  // extern "C"
