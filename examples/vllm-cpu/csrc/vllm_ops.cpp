// One translation unit per variant holding vLLM's own kernel sources, taken
// unmodified from its sdist by include path (CMakeLists.txt puts
// <sdist>/csrc/cpu on it): the torch headers are parsed once per variant,
// not once per file. The three files' helpers live in anonymous namespaces
// with distinct names, so they share a unit cleanly.
//
// vLLM's x86 code needs AVX2 (+F16C) and its Arm code ARMv8.2 dotprod + fp16;
// the baseline variant, compiled for less, gets the same functions as stubs
// that raise one clear error, so an op on a CPU below the floor never
// executes an instruction the CPU lacks.
#if (defined(__x86_64__) && defined(__AVX2__) && defined(__F16C__)) || \
    (defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD) && defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC))
  #include "layernorm.cpp"
  #include "activation.cpp"
  #include "pos_encoding.cpp"
#else
  #include <c10/util/Exception.h>
  #include <torch/types.h>  // torch::Tensor, which ops.h assumes

  #include "ops.h"

namespace {
[[noreturn]] void no_kernel(const char* op) {
  TORCH_CHECK(false, "vllm_cpu_ops: ", op, " has no kernel for this CPU: vLLM's CPU kernels need ",
#if defined(__x86_64__)
              "AVX2 and F16C",
#else
              "ARMv8.2-A dot product and fp16 arithmetic",
#endif
              " (python -m vllm_cpu_ops shows what this CPU has)");
}
}  // namespace

void rms_norm(torch::Tensor&, torch::Tensor&, std::optional<torch::Tensor>, double) { no_kernel("rms_norm"); }
void fused_add_rms_norm(torch::Tensor&, torch::Tensor&, std::optional<torch::Tensor>, double) {
  no_kernel("fused_add_rms_norm");
}
void rotary_embedding(torch::Tensor&, torch::Tensor&, std::optional<torch::Tensor>, int64_t, torch::Tensor&, bool,
                      int64_t, bool) {
  no_kernel("rotary_embedding");
}
void silu_and_mul(torch::Tensor&, torch::Tensor&) { no_kernel("silu_and_mul"); }
void gelu_and_mul(torch::Tensor&, torch::Tensor&) { no_kernel("gelu_and_mul"); }
void gelu_tanh_and_mul(torch::Tensor&, torch::Tensor&) { no_kernel("gelu_tanh_and_mul"); }
void gelu_tanh(torch::Tensor&, torch::Tensor&) { no_kernel("gelu_tanh"); }
void gelu_new(torch::Tensor&, torch::Tensor&) { no_kernel("gelu_new"); }
void gelu_fast(torch::Tensor&, torch::Tensor&) { no_kernel("gelu_fast"); }
void gelu_quick(torch::Tensor&, torch::Tensor&) { no_kernel("gelu_quick"); }
#endif
