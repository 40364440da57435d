// torch bindings of the Ascend C kernels on npu tensors (built with CANN by ascendc/CMakeLists.txt; never compiled
// on a machine without CANN). The same host tiling as bindings/twin.cpp, then a kernel launch on the current NPU
// stream: kernel<<<blockDim, nullptr, stream>>>(...) (the kernel-launch path of the Ascend C programming guide).
// Registers the schema-free ops torch.ops.ds_ascendc.* that ops/_ascendc.py calls after the ds:: op checked its
// arguments; the tiling struct travels to the device in a small int32 tensor.
#include <torch/extension.h>
#include <torch/library.h>

#include "torch_npu/csrc/core/npu/NPUStream.h"

#include "../moe_gating/moe_gating_tiling.h"
#include "../quant/quant_tiling.h"
#include "../quant_matmul/quant_matmul_tiling.h"

extern "C" __global__ __aicore__ void ds_dynamic_quant(GM_ADDR x, GM_ADDR smooth, GM_ADDR y, GM_ADDR scale,
                                                       GM_ADDR tiling);
extern "C" __global__ __aicore__ void ds_rms_norm_dynamic_quant(GM_ADDR x, GM_ADDR residual, GM_ADDR gamma,
                                                                GM_ADDR smooth, GM_ADDR y, GM_ADDR scale,
                                                                GM_ADDR residual_out, GM_ADDR tiling);
extern "C" __global__ __aicore__ void ds_moe_gating_top_k(GM_ADDR x, GM_ADDR bias, GM_ADDR y, GM_ADDR expert_idx,
                                                          GM_ADDR norm_out, GM_ADDR tiling);
extern "C" __global__ __aicore__ void ds_quant_matmul(GM_ADDR x, GM_ADDR w_nz, GM_ADDR acc, GM_ADDR tiling);
extern "C" __global__ __aicore__ void ds_quant_matmul_epilogue(GM_ADDR acc, GM_ADDR w_scale, GM_ADDR x_scale,
                                                               GM_ADDR bias, GM_ADDR out, GM_ADDR tiling);

// kernel<<<blockDim, l2ctrl, stream>>>(args...): the Ascend C kernel-launch syntax. The syntax check of this file
// without CANN (check_npu_syntax.sh, DS_NPU_SYNTAX_CHECK) calls the kernel as a plain function instead.
#ifdef DS_NPU_SYNTAX_CHECK
#define DS_LAUNCH(kernel, blocks, stream, ...) ((void)(blocks), (void)(stream), kernel(__VA_ARGS__))
#else
#define DS_LAUNCH(kernel, blocks, stream, ...) kernel<<<blocks, nullptr, stream>>>(__VA_ARGS__)
#endif

namespace {

uint32_t DType(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ds::kFloat32;
    case at::kHalf: return ds::kFloat16;
    case at::kBFloat16: return ds::kBFloat16;
    default: TORCH_CHECK(false, "x must be float32, float16 or bfloat16, got ", t.scalar_type());
  }
}

template <typename Tiling>
at::Tensor TilingTensor(const Tiling& t, const at::Tensor& like) {
  auto host = at::empty({static_cast<int64_t>(sizeof(Tiling) / 4)}, at::kInt);
  std::memcpy(host.data_ptr(), &t, sizeof(Tiling));
  return host.to(like.device());
}

GM_ADDR Ptr(const at::Tensor& t) { return reinterpret_cast<GM_ADDR>(t.data_ptr()); }
GM_ADDR Ptr(const c10::optional<at::Tensor>& t) { return t ? Ptr(*t) : nullptr; }
c10::optional<at::Tensor> Fp32(const c10::optional<at::Tensor>& t) {
  if (!t) return c10::nullopt;
  return t->to(at::kFloat).contiguous();
}

// Vector cores and UB per core of the device (Atlas A2: 40 and 196608); taken as inputs by the tiling.
uint32_t CoreNum() { return ds::kCores910B; }

std::tuple<at::Tensor, at::Tensor> DynamicQuant(const at::Tensor& x_, const c10::optional<at::Tensor>& smooth_) {
  const int64_t H = x_.size(-1);
  auto x = x_.contiguous().view({-1, H});
  auto smooth = Fp32(smooth_);
  ds::QuantTiling t;
  const std::string e = ds::QuantTilingCompute({static_cast<uint32_t>(x.size(0)), static_cast<uint32_t>(H), DType(x),
                                                false, smooth.has_value(), false, 0.0f, CoreNum(),
                                                ds::kUbBytes910B, 0}, &t);
  TORCH_CHECK(e.empty(), e);
  auto q = at::empty(x.sizes(), x.options().dtype(at::kChar));
  auto scale = at::empty({x.size(0)}, x.options().dtype(at::kFloat));
  if (t.usedCores) {
    auto tt = TilingTensor(t, x);
    DS_LAUNCH(ds_dynamic_quant, t.usedCores, c10_npu::getCurrentNPUStream().stream(), Ptr(x), Ptr(smooth), Ptr(q),
              Ptr(scale), Ptr(tt));
  }
  auto lead = x_.sizes().vec();
  lead.pop_back();
  return {q.view(x_.sizes()), scale.view(lead)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> RmsNormDynamicQuant(const at::Tensor& x_, const at::Tensor& gamma,
                                                                   double epsilon,
                                                                   const c10::optional<at::Tensor>& residual_,
                                                                   const c10::optional<at::Tensor>& smooth_) {
  const int64_t H = x_.size(-1);
  auto x = x_.contiguous().view({-1, H});
  c10::optional<at::Tensor> residual;
  if (residual_) residual = residual_->contiguous().view({-1, H});
  auto g = gamma.to(at::kFloat).contiguous();
  auto smooth = Fp32(smooth_);
  ds::QuantTiling t;
  const std::string e = ds::QuantTilingCompute({static_cast<uint32_t>(x.size(0)), static_cast<uint32_t>(H), DType(x),
                                                true, smooth.has_value(), residual.has_value(),
                                                static_cast<float>(epsilon), CoreNum(), ds::kUbBytes910B, 0}, &t);
  TORCH_CHECK(e.empty(), e);
  auto q = at::empty(x.sizes(), x.options().dtype(at::kChar));
  auto scale = at::empty({x.size(0)}, x.options().dtype(at::kFloat));
  auto ro = at::empty(x.sizes(), x.options());
  if (t.usedCores) {
    auto tt = TilingTensor(t, x);
    DS_LAUNCH(ds_rms_norm_dynamic_quant, t.usedCores, c10_npu::getCurrentNPUStream().stream(), Ptr(x),
              Ptr(residual), Ptr(g), Ptr(smooth), Ptr(q), Ptr(scale), Ptr(ro), Ptr(tt));
  }
  auto lead = x_.sizes().vec();
  lead.pop_back();
  return {q.view(x_.sizes()), scale.view(lead), ro.view(x_.sizes())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> MoeGatingTopK(const at::Tensor& x_, int64_t k,
                                                             const c10::optional<at::Tensor>& bias_, int64_t kGroup,
                                                             int64_t groupCount, int64_t mode, int64_t renorm,
                                                             int64_t normType, double rsf, double eps) {
  auto x = x_.contiguous();
  auto bias = Fp32(bias_);
  const auto T = static_cast<uint32_t>(x.size(0)), E = static_cast<uint32_t>(x.size(1));
  ds::GatingTiling t;
  const std::string e = ds::GatingTilingCompute(
      {T, E, static_cast<uint32_t>(k), static_cast<uint32_t>(kGroup), static_cast<uint32_t>(groupCount),
       static_cast<uint32_t>(mode), static_cast<uint32_t>(renorm), static_cast<uint32_t>(normType), DType(x),
       bias.has_value(), static_cast<float>(rsf), static_cast<float>(eps), CoreNum(), ds::kUbBytes910B, 0}, &t);
  TORCH_CHECK(e.empty(), e);
  auto y = at::empty({x.size(0), k}, x.options());
  auto idx = at::empty({x.size(0), k}, x.options().dtype(at::kInt));
  auto norm = at::empty({x.size(0), x.size(1)}, x.options().dtype(at::kFloat));
  if (t.usedCores) {
    auto tt = TilingTensor(t, x);
    DS_LAUNCH(ds_moe_gating_top_k, t.usedCores, c10_npu::getCurrentNPUStream().stream(), Ptr(x), Ptr(bias), Ptr(y),
              Ptr(idx), Ptr(norm), Ptr(tt));
  }
  return {y, idx, norm};
}

// x [M, K] int8, w_nz the packed weight [ceil(K/32), ceil(N/16), 16, 32] int8 (ops._ascendc.pack_quant_weight),
// scales fp32 [N] / [M], bias [N] or none -> out [M, N] of out_dtype. The cube pass writes an int32 workspace that
// the vector epilogue (launched next on the same stream) reads.
at::Tensor QuantMatmul(const at::Tensor& x_, const at::Tensor& w_nz, const at::Tensor& w_scale,
                       const at::Tensor& x_scale, const c10::optional<at::Tensor>& bias_, at::ScalarType out_dtype) {
  auto x = x_.contiguous();
  auto w = w_nz.contiguous();
  auto ws = w_scale.to(at::kFloat).contiguous();
  auto xs = x_scale.to(at::kFloat).contiguous();
  auto bias = Fp32(bias_);
  const int64_t M = x.size(0), K = x.size(1), N = ws.size(0);
  TORCH_CHECK(w.dim() == 4 && w.size(0) == (K + 31) / 32 && w.size(1) == (N + 15) / 16 && w.size(2) == 16 &&
                  w.size(3) == 32,
              "w_nz must be the packed int8 weight [ceil(K/32), ceil(N/16), 16, 32] (K = ", K, ", N = ", N,
              "), got ", w.sizes(), ": pack it once with ops._ascendc.pack_quant_weight");
  auto out = at::empty({M, N}, x.options().dtype(out_dtype));
  ds::QuantMatmulTiling t;
  const std::string e = ds::QuantMatmulTilingCompute(
      {static_cast<uint32_t>(M), static_cast<uint32_t>(N), static_cast<uint32_t>(K), DType(out), bias.has_value(),
       ds::kCubeCores910B, CoreNum(), ds::kL1Bytes910B, ds::kL0ABytes910B, ds::kL0BBytes910B, ds::kL0CBytes910B,
       ds::kUbBytes910B}, &t);
  TORCH_CHECK(e.empty(), e);
  if (M == 0) return out;
  auto acc = at::zeros({M, N}, x.options().dtype(at::kInt));
  auto tt = TilingTensor(t, x);
  auto stream = c10_npu::getCurrentNPUStream().stream();
  if (t.usedCubeCores) DS_LAUNCH(ds_quant_matmul, t.usedCubeCores, stream, Ptr(x), Ptr(w), Ptr(acc), Ptr(tt));
  DS_LAUNCH(ds_quant_matmul_epilogue, t.usedVecCores, stream, Ptr(acc), Ptr(ws), Ptr(xs), Ptr(bias), Ptr(out),
            Ptr(tt));
  return out;
}

}  // namespace

TORCH_LIBRARY(ds_ascendc, m) {
  m.def("dynamic_quant(Tensor x, Tensor? smooth_scales) -> (Tensor, Tensor)");
  m.def("rms_norm_dynamic_quant(Tensor x, Tensor gamma, float epsilon, Tensor? residual, Tensor? smooth_scales)"
        " -> (Tensor, Tensor, Tensor)");
  m.def("moe_gating_top_k(Tensor x, int k, Tensor? bias, int k_group, int group_count, int group_select_mode,"
        " int renorm, int norm_type, float routed_scaling_factor, float eps) -> (Tensor, Tensor, Tensor)");
  m.def("quant_matmul(Tensor x_int8, Tensor w_nz, Tensor weight_scale, Tensor x_scale, Tensor? bias,"
        " ScalarType out_dtype) -> Tensor");
}

TORCH_LIBRARY_IMPL(ds_ascendc, PrivateUse1, m) {
  m.impl("dynamic_quant", &DynamicQuant);
  m.impl("rms_norm_dynamic_quant", &RmsNormDynamicQuant);
  m.impl("moe_gating_top_k", &MoeGatingTopK);
  m.impl("quant_matmul", &QuantMatmul);
}
