// silu_and_mul (SwiGLU's gate), written once for every variant (see vec.h).
#include "kernels.h"
#include "vec.h"

namespace torch_ops {
namespace {

template <typename T>
void silu_and_mul_rows(T* out, const T* x, std::int64_t rows, std::int64_t d) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* gate = x + r * 2 * d;
    const T* up = gate + d;
    T* dst = out + r * d;
    std::int64_t i = 0;
#if TORCH_OPS_HAVE_VEC
    const Vec one = Vec::set1(1.0f);
    for (; i + Vec::N <= d; i += Vec::N) {
      Vec g = Vec::load(gate + i);
      (g / (one + exp(Vec::zero() - g)) * Vec::load(up + i)).store(dst + i);
    }
#endif
    for (; i < d; ++i) {
      const float g = to_float(gate[i]);
      store_as(dst + i, g / (1.0f + std::exp(-g)) * to_float(up[i]));
    }
  }
}

}  // namespace

void silu_and_mul_f32(float* out, const float* x, std::int64_t rows, std::int64_t d) {
  silu_and_mul_rows(out, x, rows, d);
}

void silu_and_mul_bf16(bf16* out, const bf16* x, std::int64_t rows, std::int64_t d) {
  silu_and_mul_rows(out, x, rows, d);
}

}  // namespace torch_ops
