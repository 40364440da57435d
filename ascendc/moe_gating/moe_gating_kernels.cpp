// Kernel entry of moe_gating_top_k (kernel-launch style). bias is fp32 (prepared by the binding) or null.
#include "moe_gating_kernel.h"

extern "C" __global__ __aicore__ void ds_moe_gating_top_k(GM_ADDR x, GM_ADDR bias, GM_ADDR y, GM_ADDR expert_idx,
                                                          GM_ADDR norm_out, GM_ADDR tiling) {
  ds::GatingTiling t;
  ds::CopyTiling(&t, tiling);
  if (AscendC::GetBlockIdx() >= t.usedCores) return;
  if (t.dtype == ds::kFloat32) {
    ds::GatingKernel<float> k;
    k.Init(x, bias, y, expert_idx, norm_out, t);
    k.Process();
  } else if (t.dtype == ds::kFloat16) {
    ds::GatingKernel<half> k;
    k.Init(x, bias, y, expert_idx, norm_out, t);
    k.Process();
  } else {
    ds::GatingKernel<bfloat16_t> k;
    k.Init(x, bias, y, expert_idx, norm_out, t);
    k.Process();
  }
}
