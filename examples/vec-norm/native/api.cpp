// vec-norm's C ABI (loaded with ctypes by lib/vecnorm/__init__.py). This file
// holds no SIMD code: cpubuild compiles it once, with the baseline flags, and
// links it into every variant library, where it calls that variant's kernels.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels.h"

#define VNORM_API extern "C" __attribute__((visibility("default")))

// Status codes of the functions that can fail.
enum : int { VNORM_OK = 0, VNORM_NULL = 1, VNORM_ZERO_NORM = 2, VNORM_NOT_FINITE = 3 };

VNORM_API int vecnorm_abi_version() { return 1; }

// The Euclidean norm of float32 x[0..n), computed in float32.
VNORM_API float vecnorm_l2_f32(const float *x, std::size_t n) {
    if (x == nullptr && n != 0)
        return NAN;
    return std::sqrt(vecnorm::kernel::sumsq_f32(x, n));
}

// out = x / |x|; out may be x. Fails on a zero or non-finite norm.
VNORM_API int vecnorm_normalize_f32(const float *x, float *out, std::size_t n) {
    if ((x == nullptr || out == nullptr) && n != 0)
        return VNORM_NULL;
    const float norm = std::sqrt(vecnorm::kernel::sumsq_f32(x, n));
    if (norm == 0.0f)
        return VNORM_ZERO_NORM;
    if (!std::isfinite(norm))
        return VNORM_NOT_FINITE;
    vecnorm::kernel::scale_f32(x, 1.0f / norm, out, n);
    return VNORM_OK;
}

// The exact squared norm of int8 x[0..n).
VNORM_API std::int64_t vecnorm_sumsq_i8(const std::int8_t *x, std::size_t n) {
    if (x == nullptr && n != 0)
        return -1;
    return vecnorm::kernel::sumsq_i8(x, n);
}
