// silu_and_mul: out[r, i] = silu(x[r, i]) * x[r, d + i], silu(a) = a / (1 + exp(-a)).
// Element-wise, so the work is cut into (row, column block) units: a single
// decode token still spreads over every thread.
#include "cpukern/dtype.h"
#include "cpukern/export.h"
#include "cpukern/parallel.h"
#include "cpukern/simd.h"

#include <type_traits>

namespace cpukern {
namespace {
using namespace simd;

constexpr int64_t kBlock = 2048;  // columns per work unit (a multiple of every kLanes)

// exp(-a) over the polynomial's range. Below -20, 1 + exp(-a) rounds to 1
// anyway; above kExpHi exp(-a) overflows float32 (as it does in the scalar
// reference and in torch): inf, so a / inf is -0 (NaN for a = -inf).
// 16-bit outputs use the cheaper degree-5 exp.
template <class T>
inline VF silu_mul(VF a, VF b) {
    constexpr int kDegree = std::is_same_v<T, float> ? 7 : 5;
    VF e = exp_in_range<kDegree>(vmin(vmax(-a, splat(-20.0f)), splat(kExpHi)));
    e = select(-a > splat(kExpHi), splat(__builtin_inff()), e);
    return a / (1.0f + e) * b;
}

template <class T>
void silu_and_mul_block(T* out, const T* a, const T* b, int64_t n) {
    int64_t i = 0;
    for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
        VF a0, a1, b0, b1;
        load_pair(a + i, a0, a1);
        load_pair(b + i, b0, b1);
        store_pair_fast(out + i, silu_mul<T>(a0, b0), silu_mul<T>(a1, b1));
    }
    for (; i + kLanes <= n; i += kLanes) store_fast(out + i, silu_mul<T>(load(a + i), load(b + i)));
    if (i < n) {
        int m = static_cast<int>(n - i);
        store_partial(out + i, silu_mul<T>(load_partial(a + i, m), load_partial(b + i, m)), m);
    }
}

template <class T>
void silu_and_mul(T* out, const T* x, int64_t rows, int64_t d, int64_t x_stride, int64_t out_stride) {
    const int64_t blocks = (d + kBlock - 1) / kBlock;
    // ~16K elements per chunk before a second thread joins in
    int64_t grain = (int64_t{1} << 14) / kBlock;
    parallel_for_dynamic(rows * blocks, grain, [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
            int64_t r = u / blocks, c = (u % blocks) * kBlock;
            int64_t n = d - c < kBlock ? d - c : kBlock;
            const T* xr = x + r * x_stride;
            silu_and_mul_block(out + r * out_stride + c, xr + c, xr + d + c, n);
        }
    });
}

}  // namespace
}  // namespace cpukern

CPUKERN_API int32_t cpukern_silu_and_mul(void* out, const void* x, int64_t rows, int64_t d, int64_t x_stride,
                                         int64_t out_stride, int32_t dtype) {
    if (rows < 0 || d < 0) return CPUKERN_EINVAL;
    if (rows == 0 || d == 0) return cpukern::by_dtype(dtype, [](auto) {});
    return cpukern::by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        cpukern::silu_and_mul(static_cast<T*>(out), static_cast<const T*>(x), rows, d, x_stride, out_stride);
    });
}
