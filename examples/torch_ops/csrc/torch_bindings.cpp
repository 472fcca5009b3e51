// The ops, as torch sees them: schemas under the `torch_ops` namespace
// (torch.ops.torch_ops.*) and their CPU implementations, which check their
// arguments and call the kernels of the variant this library was built for.
// Compiled once (COMMON_SOURCES in CMakeLists.txt) and linked into every
// variant library; the dispatcher loads exactly one of them, so these
// registrations run once per process.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdint>

#include "kernels.h"

namespace torch_ops {
namespace {

void check_float_or_bf16(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), "torch_ops: ", name, " must be a CPU tensor, got ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16,
              "torch_ops: ", name, " must be float32 or bfloat16, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "torch_ops: ", name, " must be contiguous");
}

void check_like(const at::Tensor& t, const at::Tensor& input, const char* name) {
  check_float_or_bf16(t, name);
  TORCH_CHECK(t.scalar_type() == input.scalar_type(), "torch_ops: ", name, " is ", t.scalar_type(),
              ", input is ", input.scalar_type());
}

void rms_norm(at::Tensor& out, const at::Tensor& input, const at::Tensor& weight, double epsilon) {
  check_float_or_bf16(input, "input");
  check_like(weight, input, "weight");
  check_like(out, input, "out");
  TORCH_CHECK(input.dim() >= 1, "torch_ops: input must have at least one dimension");
  const std::int64_t hidden = input.size(-1);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == hidden, "torch_ops: weight must have shape [", hidden,
              "], got ", weight.sizes());
  TORCH_CHECK(out.sizes() == input.sizes(), "torch_ops: out has shape ", out.sizes(), ", input ", input.sizes());
  if (input.numel() == 0) return;
  const std::int64_t rows = input.numel() / hidden;
  const float eps = static_cast<float>(epsilon);
  if (input.scalar_type() == at::kFloat) {
    rms_norm_f32(out.data_ptr<float>(), input.const_data_ptr<float>(), weight.const_data_ptr<float>(), rows, hidden, eps);
  } else {
    rms_norm_bf16(static_cast<std::uint16_t*>(out.data_ptr()), static_cast<const std::uint16_t*>(input.const_data_ptr()),
                  static_cast<const std::uint16_t*>(weight.const_data_ptr()), rows, hidden, eps);
  }
}

void silu_and_mul(at::Tensor& out, const at::Tensor& input) {
  check_float_or_bf16(input, "input");
  check_like(out, input, "out");
  TORCH_CHECK(input.dim() >= 1 && input.size(-1) % 2 == 0, "torch_ops: input's last dimension must be even, got ",
              input.sizes());
  const std::int64_t d = input.size(-1) / 2;
  auto want = input.sizes().vec();
  want.back() = d;
  TORCH_CHECK(out.sizes() == at::IntArrayRef(want), "torch_ops: out must have shape ", at::IntArrayRef(want),
              ", got ", out.sizes());
  if (out.numel() == 0) return;
  const std::int64_t rows = out.numel() / d;
  if (input.scalar_type() == at::kFloat) {
    silu_and_mul_f32(out.data_ptr<float>(), input.const_data_ptr<float>(), rows, d);
  } else {
    silu_and_mul_bf16(static_cast<std::uint16_t*>(out.data_ptr()),
                      static_cast<const std::uint16_t*>(input.const_data_ptr()), rows, d);
  }
}

}  // namespace
}  // namespace torch_ops

// vLLM's signatures: the result is written into `out` (Tensor! = mutated),
// so a caller can reuse its buffers; the Python wrappers allocate it when not given.
TORCH_LIBRARY(torch_ops, m) {
  m.def("rms_norm(Tensor! out, Tensor input, Tensor weight, float epsilon) -> ()");
  m.def("silu_and_mul(Tensor! out, Tensor input) -> ()");
}

TORCH_LIBRARY_IMPL(torch_ops, CPU, m) {
  m.impl("rms_norm", &torch_ops::rms_norm);
  m.impl("silu_and_mul", &torch_ops::silu_and_mul);
}
