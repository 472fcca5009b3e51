// rms_norm, written once for every variant (see vec.h). Arithmetic is in float
// whatever the storage type, as torch's reference computes it.
#include "kernels.h"
#include "vec.h"

namespace torch_ops {
namespace {

template <typename T>
float sum_squares(const T* x, std::int64_t n) {
  std::int64_t i = 0;
  float sum = 0.0f;
#if defined(TORCH_OPS_HAVE_BF16_DOT)
  if constexpr (sizeof(T) == 2) sum = sum_squares_bf16(x, n, &i);
#endif
#if TORCH_OPS_HAVE_VEC
  Vec acc = Vec::zero();
  for (; i + Vec::N <= n; i += Vec::N) {
    Vec v = Vec::load(x + i);
    acc = Vec::fma(v, v, acc);
  }
  sum += acc.sum();
#endif
  for (; i < n; ++i) sum += to_float(x[i]) * to_float(x[i]);  // the tail; all of it in a baseline build
  return sum;
}

template <typename T>
void rms_norm_rows(T* out, const T* x, const T* weight, std::int64_t rows, std::int64_t hidden, float eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* in = x + r * hidden;
    T* dst = out + r * hidden;
    const float scale = 1.0f / std::sqrt(sum_squares(in, hidden) / float(hidden) + eps);
    std::int64_t i = 0;
#if TORCH_OPS_HAVE_VEC
    const Vec s = Vec::set1(scale);
    for (; i + Vec::N <= hidden; i += Vec::N) (Vec::load(in + i) * s * Vec::load(weight + i)).store(dst + i);
#endif
    for (; i < hidden; ++i) store_as(dst + i, to_float(in[i]) * scale * to_float(weight[i]));
  }
}

}  // namespace

void rms_norm_f32(float* out, const float* x, const float* weight, std::int64_t rows, std::int64_t hidden, float eps) {
  rms_norm_rows(out, x, weight, rows, hidden, eps);
}

void rms_norm_bf16(bf16* out, const bf16* x, const bf16* weight, std::int64_t rows, std::int64_t hidden, float eps) {
  rms_norm_rows(out, x, weight, rows, hidden, eps);
}

}  // namespace torch_ops
