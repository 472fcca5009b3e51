// Scalar reference of every op: plain loops, one element at a time, the same
// rounding points as the vector kernels (each stored value rounded once to
// its dtype). Tests run every variant's kernels against the baseline
// library's cpukern_ref_* functions. Never vectorised, never threaded.
#include <cmath>

#include "cpukern/dtype.h"
#include "cpukern/export.h"
#include "cpukern/simd.h"

#if defined(__clang__)
#define CPUKERN_SCALAR_LOOP _Pragma("clang loop vectorize(disable) interleave(disable)")
#else
#pragma GCC optimize("no-tree-vectorize", "no-tree-slp-vectorize")
#define CPUKERN_SCALAR_LOOP
#endif

namespace cpukern {
namespace {
using simd::from_float;
using simd::to_float;

template <class T>
double sum_squares(const T* x, int64_t n) {
    double acc = 0.0;
    CPUKERN_SCALAR_LOOP
    for (int64_t i = 0; i < n; ++i) {
        double v = to_float(x[i]);
        acc += v * v;
    }
    return acc;
}

template <class T>
void norm_row(T* out, const T* x, const T* w, int64_t n, float eps) {
    float inv = static_cast<float>(1.0 / std::sqrt(sum_squares(x, n) / static_cast<double>(n) + eps));
    CPUKERN_SCALAR_LOOP
    for (int64_t i = 0; i < n; ++i) out[i] = from_float<T>(to_float(x[i]) * inv * to_float(w[i]));
}

template <class T>
void rms_norm(T* out, const T* x, const T* w, int64_t rows, int64_t n, int64_t xs, int64_t os, float eps) {
    for (int64_t r = 0; r < rows; ++r) norm_row(out + r * os, x + r * xs, w, n, eps);
}

template <class T>
void fused_add_rms_norm(T* x, T* res, const T* w, int64_t rows, int64_t n, int64_t xs, int64_t rs, float eps) {
    for (int64_t r = 0; r < rows; ++r) {
        T* xr = x + r * xs;
        T* rr = res + r * rs;
        CPUKERN_SCALAR_LOOP
        for (int64_t i = 0; i < n; ++i) rr[i] = from_float<T>(to_float(xr[i]) + to_float(rr[i]));
        norm_row(xr, rr, w, n, eps);
    }
}

template <class T>
void silu_and_mul(T* out, const T* x, int64_t rows, int64_t d, int64_t xs, int64_t os) {
    for (int64_t r = 0; r < rows; ++r) {
        CPUKERN_SCALAR_LOOP
        for (int64_t i = 0; i < d; ++i) {
            float a = to_float(x[r * xs + i]), b = to_float(x[r * xs + d + i]);
            out[r * os + i] = from_float<T>(a / (1.0f + std::exp(-a)) * b);
        }
    }
}

template <class T, class C>
void rotate_heads(T* data, int64_t heads, int64_t head_stride, const C* row, int64_t rot, bool neox) {
    const int64_t half = rot / 2;
    for (int64_t h = 0; h < heads; ++h) {
        T* x = data + h * head_stride;
        CPUKERN_SCALAR_LOOP
        for (int64_t i = 0; i < half; ++i) {
            float c = to_float(row[i]), s = to_float(row[half + i]);
            int64_t i0 = neox ? i : 2 * i, i1 = neox ? half + i : 2 * i + 1;
            float a = to_float(x[i0]), b = to_float(x[i1]);
            x[i0] = from_float<T>(a * c - b * s);
            x[i1] = from_float<T>(b * c + a * s);
        }
    }
}

template <class T, class C>
void rotary(const int64_t* pos, int64_t ps, T* q, T* k, const C* cache, int64_t tokens, int64_t hq, int64_t hk,
            int64_t rot, int64_t qts, int64_t qhs, int64_t kts, int64_t khs, int64_t cs, bool neox) {
    for (int64_t t = 0; t < tokens; ++t) {
        const C* row = cache + pos[t * ps] * cs;
        rotate_heads(q + t * qts, hq, qhs, row, rot, neox);
        if (k) rotate_heads(k + t * kts, hk, khs, row, rot, neox);
    }
}

}  // namespace
}  // namespace cpukern

using cpukern::by_dtype;

CPUKERN_API int32_t cpukern_ref_rms_norm(void* out, const void* x, const void* weight, int64_t rows, int64_t hidden,
                                         int64_t x_stride, int64_t out_stride, float eps, int32_t dtype) {
    if (rows < 0 || hidden <= 0) return CPUKERN_EINVAL;
    return by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        cpukern::rms_norm(static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(weight), rows, hidden,
                          x_stride, out_stride, eps);
    });
}

CPUKERN_API int32_t cpukern_ref_fused_add_rms_norm(void* x, void* residual, const void* weight, int64_t rows,
                                                   int64_t hidden, int64_t x_stride, int64_t res_stride, float eps,
                                                   int32_t dtype) {
    if (rows < 0 || hidden <= 0) return CPUKERN_EINVAL;
    return by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        cpukern::fused_add_rms_norm(static_cast<T*>(x), static_cast<T*>(residual), static_cast<const T*>(weight), rows,
                                    hidden, x_stride, res_stride, eps);
    });
}

CPUKERN_API int32_t cpukern_ref_silu_and_mul(void* out, const void* x, int64_t rows, int64_t d, int64_t x_stride,
                                             int64_t out_stride, int32_t dtype) {
    if (rows < 0 || d < 0) return CPUKERN_EINVAL;
    return by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        cpukern::silu_and_mul(static_cast<T*>(out), static_cast<const T*>(x), rows, d, x_stride, out_stride);
    });
}

CPUKERN_API int32_t cpukern_ref_rotary_embedding(const int64_t* positions, int64_t pos_stride, void* query, void* key,
                                                 const void* cache, int64_t tokens, int64_t num_heads,
                                                 int64_t num_kv_heads, int64_t rot_dim, int64_t q_token_stride,
                                                 int64_t q_head_stride, int64_t k_token_stride, int64_t k_head_stride,
                                                 int64_t max_position, int64_t cache_stride, int32_t is_neox,
                                                 int32_t dtype, int32_t cache_dtype) {
    if (tokens < 0 || num_heads < 0 || rot_dim < 0 || rot_dim % 2 || (key && num_kv_heads < 0)) return CPUKERN_EINVAL;
    if (cache_dtype != dtype && cache_dtype != CPUKERN_F32) return CPUKERN_EDTYPE;
    for (int64_t t = 0; t < tokens; ++t)
        if (positions[t * pos_stride] < 0 || positions[t * pos_stride] >= max_position) return CPUKERN_EINVAL;
    return by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        T* q = static_cast<T*>(query);
        T* k = static_cast<T*>(key);
        if (cache_dtype == CPUKERN_F32)
            cpukern::rotary(positions, pos_stride, q, k, static_cast<const float*>(cache), tokens, num_heads,
                            num_kv_heads, rot_dim, q_token_stride, q_head_stride, k_token_stride, k_head_stride,
                            cache_stride, is_neox != 0);
        else
            cpukern::rotary(positions, pos_stride, q, k, static_cast<const T*>(cache), tokens, num_heads, num_kv_heads,
                            rot_dim, q_token_stride, q_head_stride, k_token_stride, k_head_stride, cache_stride,
                            is_neox != 0);
    });
}

CPUKERN_SLOTS(cpukern_ref_rms_norm)
CPUKERN_SLOTS(cpukern_ref_fused_add_rms_norm)
CPUKERN_SLOTS(cpukern_ref_silu_and_mul)
CPUKERN_SLOTS(cpukern_ref_rotary_embedding)
