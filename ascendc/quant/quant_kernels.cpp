// Kernel entries of dynamic_quant and rms_norm_dynamic_quant (kernel-launch style). smooth / gamma are fp32
// vectors prepared by the binding; smooth and residual may be null when absent (the tiling says which).
#include "quant_kernel.h"

namespace {

template <bool RMS>
__aicore__ inline void Run(GM_ADDR x, GM_ADDR residual, GM_ADDR gamma, GM_ADDR smooth, GM_ADDR y, GM_ADDR scale,
                           GM_ADDR residualOut, GM_ADDR tiling) {
  ds::QuantTiling t;
  ds::CopyTiling(&t, tiling);
  if (AscendC::GetBlockIdx() >= t.usedCores) return;
  if (t.dtype == ds::kFloat32) {
    ds::QuantKernel<float, RMS> k;
    k.Init(x, residual, gamma, smooth, y, scale, residualOut, t);
    k.Process();
  } else if (t.dtype == ds::kFloat16) {
    ds::QuantKernel<half, RMS> k;
    k.Init(x, residual, gamma, smooth, y, scale, residualOut, t);
    k.Process();
  } else {
    ds::QuantKernel<bfloat16_t, RMS> k;
    k.Init(x, residual, gamma, smooth, y, scale, residualOut, t);
    k.Process();
  }
}

}  // namespace

extern "C" __global__ __aicore__ void ds_dynamic_quant(GM_ADDR x, GM_ADDR smooth, GM_ADDR y, GM_ADDR scale,
                                                       GM_ADDR tiling) {
  Run<false>(x, nullptr, nullptr, smooth, y, scale, nullptr, tiling);
}

extern "C" __global__ __aicore__ void ds_rms_norm_dynamic_quant(GM_ADDR x, GM_ADDR residual, GM_ADDR gamma,
                                                                GM_ADDR smooth, GM_ADDR y, GM_ADDR scale,
                                                                GM_ADDR residual_out, GM_ADDR tiling) {
  Run<true>(x, residual, gamma, smooth, y, scale, residual_out, tiling);
}
