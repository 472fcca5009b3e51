// The functions vLLM's bindings name whose sources this wheel does not build:
// csrc/cpu/dnnl_kernels.cpp (no offline oneDNN source; README) and, with gcc
// older than 12.3, sgl-kernels/flash_mla.cpp. The bindings take their
// addresses and vllm_bindings.cpp leaves their ops unregistered, so nothing
// calls these; anything that did would get this error, not a crash.
// Signatures as vLLM 0.33.0 declares them (torch_bindings.cpp, ops.h).
#ifdef VLLM_CPU_OPS_FULL
// ATen's Tensor alone (torch::Tensor is at::Tensor): 2 s to compile here, torch/all.h 15 s.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>

namespace {
[[noreturn]] void not_built(const char* op, const char* source) {
  TORCH_CHECK(false, "vllm_cpu_ops: vLLM's ", op, " (", source, ") is not built in this wheel");
}
constexpr const char* kOneDnn = "oneDNN, csrc/cpu/dnnl_kernels.cpp";
}  // namespace

void release_dnnl_matmul_handler(int64_t) { not_built("release_dnnl_matmul_handler", kOneDnn); }
int64_t create_onednn_scaled_mm_handler(const at::Tensor&, const at::Tensor&, at::ScalarType, bool, bool,
                                        int64_t) {
  not_built("create_onednn_scaled_mm_handler", kOneDnn);
}
void onednn_scaled_mm(at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                      const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, const at::Tensor&) {
  not_built("onednn_scaled_mm", kOneDnn);
}
int64_t create_onednn_mm_handler(const at::Tensor&, int64_t) { not_built("create_onednn_mm_handler", kOneDnn); }
void onednn_mm(at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&) {
  not_built("onednn_mm", kOneDnn);
}
bool is_onednn_acl_supported() { not_built("is_onednn_acl_supported", kOneDnn); }
void static_scaled_int8_quant(at::Tensor&, at::Tensor const&, at::Tensor const&,
                              std::optional<at::Tensor> const&) {
  not_built("static_scaled_int8_quant", kOneDnn);
}
void dynamic_scaled_int8_quant(at::Tensor&, at::Tensor const&, at::Tensor&,
                               std::optional<at::Tensor> const&) {
  not_built("dynamic_scaled_int8_quant", kOneDnn);
}

#ifdef VLLM_CPU_OPS_NO_FLASH_MLA
void flash_mla_with_kvcache_cpu(at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&, int64_t, at::Tensor&, at::Tensor&,
                                int64_t, at::Tensor&, double) {
  not_built("flash_mla_with_kvcache_cpu", "csrc/cpu/sgl-kernels/flash_mla.cpp: gcc < 12.3");
}
#endif
#endif
