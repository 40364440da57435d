// Kernel entries of quant_matmul (kernel-launch style): the cube pass ds_quant_matmul (x_int8, packed weight ->
// int32 acc workspace) and the vector pass ds_quant_matmul_epilogue (acc, scales, bias -> out). bias is fp32
// (prepared by the binding) or null (the tiling says which).
#include "quant_matmul_kernel.h"

extern "C" __global__ __aicore__ void ds_quant_matmul(GM_ADDR x, GM_ADDR w_nz, GM_ADDR acc, GM_ADDR tiling) {
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIC_ONLY);
  ds::QuantMatmulTiling t;
  ds::CopyTiling(&t, tiling);
  if (AscendC::GetBlockIdx() >= t.usedCubeCores) return;
  ds::QuantMatmulCube k;
  k.Init(x, w_nz, acc, t);
  k.Process();
}

extern "C" __global__ __aicore__ void ds_quant_matmul_epilogue(GM_ADDR acc, GM_ADDR w_scale, GM_ADDR x_scale,
                                                               GM_ADDR bias, GM_ADDR out, GM_ADDR tiling) {
  ds::QuantMatmulTiling t;
  ds::CopyTiling(&t, tiling);
  if (AscendC::GetBlockIdx() >= t.usedVecCores) return;
  if (t.outDtype == ds::kFloat32) {
    ds::QuantMatmulEpilogue<float> k;
    k.Init(acc, w_scale, x_scale, bias, out, t);
    k.Process();
  } else if (t.outDtype == ds::kFloat16) {
    ds::QuantMatmulEpilogue<half> k;
    k.Init(acc, w_scale, x_scale, bias, out, t);
    k.Process();
  } else {
    ds::QuantMatmulEpilogue<bfloat16_t> k;
    k.Init(acc, w_scale, x_scale, bias, out, t);
    k.Process();
  }
}
