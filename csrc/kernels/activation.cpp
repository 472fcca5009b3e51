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

// silu(a) * b. 16-bit outputs use the cheaper degree-5 exp (and, with
// AVX-512, the reciprocal estimate in place of the divider).
template <class T>
inline VF silu_mul(VF a, VF b) {
    constexpr bool k32 = std::is_same_v<T, float>;
    constexpr int kDegree = k32 ? 7 : 5;
#if defined(__AVX512F__)
    // e = exp(-|a|) in [0, 1], subnormals included (vscalefps): 1 + e never
    // overflows, and a < 0 takes sigmoid(a) = e / (1 + e), exact down to
    // silu(-103). A NaN's min is 110: e = 0, the product stays NaN.
    VF e = exp_in_range<kDegree>(-vmin(vabs(a), splat(110.0f)));
    auto negative = _mm512_cmp_ps_mask((__m512)a, _mm512_setzero_ps(), _CMP_LT_OQ);
    if constexpr (k32) {  // the divider: exact, and as cheap as estimate + Newton step on AMD's cores
        VF numerator = (VF)_mm512_mask_mov_ps(_mm512_set1_ps(1.0f), negative, (__m512)e);
        return a * (numerator / (1.0f + e)) * b;
    } else {
        VF r = reciprocal_estimate(1.0f + e);
        return a * (VF)_mm512_mask_mul_ps((__m512)r, negative, (__m512)e, (__m512)r) * b;
    }
#else
    // exp(-a) for -a in [-20, 89.5]: below -20, 1 + e rounds to 1; from
    // 88.72 up e is inf (as exp(-a) overflows float32 in the scalar
    // reference and in torch), so a / inf is -0 (NaN for a = -inf). A NaN's
    // max is -20, the quotient stays NaN. One divide: a single uop to issue.
    VF e = exp_in_range<kDegree>(vmin(vmax(-a, splat(-20.0f)), splat(kExpInf)));
    return a / (1.0f + e) * b;
#endif
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
