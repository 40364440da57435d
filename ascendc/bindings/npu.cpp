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

extern "C" __global__ __aicore__ void ds_dynamic_quant(GM_ADDR x, GM_ADDR smooth, GM_ADDR y, GM_ADDR scale,
                                                       GM_ADDR tiling);
extern "C" __global__ __aicore__ void ds_rms_norm_dynamic_quant(GM_ADDR x, GM_ADDR residual, GM_ADDR gamma,
                                                                GM_ADDR smooth, GM_ADDR y, GM_ADDR scale,
                                                                GM_ADDR residual_out, GM_ADDR tiling);
extern "C" __global__ __aicore__ void ds_moe_gating_top_k(GM_ADDR x, GM_ADDR bias, GM_ADDR y, GM_ADDR expert_idx,
                                                          GM_ADDR norm_out, GM_ADDR tiling);

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

}  // namespace

TORCH_LIBRARY(ds_ascendc, m) {
  m.def("dynamic_quant(Tensor x, Tensor? smooth_scales) -> (Tensor, Tensor)");
  m.def("rms_norm_dynamic_quant(Tensor x, Tensor gamma, float epsilon, Tensor? residual, Tensor? smooth_scales)"
        " -> (Tensor, Tensor, Tensor)");
  m.def("moe_gating_top_k(Tensor x, int k, Tensor? bias, int k_group, int group_count, int group_select_mode,"
        " int renorm, int norm_type, float routed_scaling_factor, float eps) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(ds_ascendc, PrivateUse1, m) {
  m.impl("dynamic_quant", &DynamicQuant);
  m.impl("rms_norm_dynamic_quant", &RmsNormDynamicQuant);
  m.impl("moe_gating_top_k", &MoeGatingTopK);
}
