// The ops of vLLM's layernorm.cpp, activation.cpp and pos_encoding.cpp,
// registered in vLLM's `_C` namespace with the schemas of its
// csrc/cpu/torch_bindings.cpp (vLLM 0.33.0), so vLLM's Python code
// (torch.ops._C.rms_norm ...) finds them unchanged. vLLM's own bindings file
// registers every op of its CPU extension (attention, MoE, oneDNN GEMMs ...),
// which this project does not build, and is a Python extension module; this
// file is plain torch (no Python.h). Compiled once, linked into every variant;
// the dispatcher loads one variant per process, so this runs once.
#include <torch/library.h>
#include <torch/types.h>  // torch::Tensor, which ops.h assumes

#include "ops.h"  // vLLM's declarations (csrc/cpu/ops.h of the sdist)

#if defined(__aarch64__) && !defined(__APPLE__)
// declared by vLLM's torch_bindings.cpp, not ops.h
void activation_lut_bf16(torch::Tensor& out, torch::Tensor& input, const std::string& activation);
#endif

TORCH_LIBRARY(_C, ops) {
  ops.def("silu_and_mul(Tensor! out, Tensor input) -> ()");
  ops.impl("silu_and_mul", torch::kCPU, &silu_and_mul);
  ops.def("gelu_and_mul(Tensor! out, Tensor input) -> ()");
  ops.impl("gelu_and_mul", torch::kCPU, &gelu_and_mul);
  ops.def("gelu_tanh_and_mul(Tensor! out, Tensor input) -> ()");
  ops.impl("gelu_tanh_and_mul", torch::kCPU, &gelu_tanh_and_mul);
  ops.def("gelu_tanh(Tensor! out, Tensor input) -> ()");
  ops.impl("gelu_tanh", torch::kCPU, &gelu_tanh);
  ops.def("gelu_new(Tensor! out, Tensor input) -> ()");
  ops.impl("gelu_new", torch::kCPU, &gelu_new);
  ops.def("gelu_fast(Tensor! out, Tensor input) -> ()");
  ops.impl("gelu_fast", torch::kCPU, &gelu_fast);
  ops.def("gelu_quick(Tensor! out, Tensor input) -> ()");
  ops.impl("gelu_quick", torch::kCPU, &gelu_quick);
#if defined(__aarch64__) && !defined(__APPLE__)
  ops.def("activation_lut_bf16(Tensor! out, Tensor input, str activation) -> ()");
  ops.impl("activation_lut_bf16", torch::kCPU, &activation_lut_bf16);
#endif

  ops.def("rms_norm(Tensor! out, Tensor input, Tensor? weight, float epsilon) -> ()");
  ops.impl("rms_norm", torch::kCPU, &rms_norm);
  ops.def("fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor? weight, float epsilon) -> ()");
  ops.impl("fused_add_rms_norm", torch::kCPU, &fused_add_rms_norm);

  ops.def(
      "rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, int head_size, "
      "Tensor cos_sin_cache, bool is_neox, int rope_dim_offset=0, bool inverse=False) -> ()");
  ops.impl("rotary_embedding", torch::kCPU, &rotary_embedding);
}
