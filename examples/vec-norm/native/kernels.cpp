// vec-norm's SIMD kernels. cpubuild compiles this file once per variant of
// isa_matrix.toml with -DVNORM_VARIANT_<NAME>=1; each variant supplies a small
// vector type (F32, I8) and the loops below are written once over it.
#include "kernels.h"

#if defined(VNORM_VARIANT_AVX512) || defined(VNORM_VARIANT_AVX2)
#include <immintrin.h>
#elif defined(VNORM_VARIANT_NEON_DOTPROD) || defined(VNORM_VARIANT_NEON)
#include <arm_neon.h>
#endif

namespace {

using std::size_t;

// ---------------------------------------------------------------- float32 lanes
#if defined(VNORM_VARIANT_AVX512)
struct F32 {
    using V = __m512;
    static constexpr size_t lanes = 16;
    static V zero() { return _mm512_setzero_ps(); }
    static V splat(float v) { return _mm512_set1_ps(v); }
    static V load(const float *p) { return _mm512_loadu_ps(p); }
    static void store(float *p, V v) { _mm512_storeu_ps(p, v); }
    static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    static V fma(V a, V b, V acc) { return _mm512_fmadd_ps(a, b, acc); }
    static V add(V a, V b) { return _mm512_add_ps(a, b); }
    static float sum(V v) {  // (GCC 12's reduce/shuffle intrinsics trip -Wuninitialized in C++)
        alignas(64) float lane[lanes];
        _mm512_store_ps(lane, v);
        float s = 0.0f;
        for (float x : lane)
            s += x;
        return s;
    }
};
#elif defined(VNORM_VARIANT_AVX2)
struct F32 {
    using V = __m256;
    static constexpr size_t lanes = 8;
    static V zero() { return _mm256_setzero_ps(); }
    static V splat(float v) { return _mm256_set1_ps(v); }
    static V load(const float *p) { return _mm256_loadu_ps(p); }
    static void store(float *p, V v) { _mm256_storeu_ps(p, v); }
    static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static V fma(V a, V b, V acc) { return _mm256_fmadd_ps(a, b, acc); }
    static V add(V a, V b) { return _mm256_add_ps(a, b); }
    static float sum(V v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_hadd_ps(s, s);
        return _mm_cvtss_f32(_mm_hadd_ps(s, s));
    }
};
#elif defined(VNORM_VARIANT_NEON_DOTPROD) || defined(VNORM_VARIANT_NEON)
struct F32 {
    using V = float32x4_t;
    static constexpr size_t lanes = 4;
    static V zero() { return vdupq_n_f32(0.0f); }
    static V splat(float v) { return vdupq_n_f32(v); }
    static V load(const float *p) { return vld1q_f32(p); }
    static void store(float *p, V v) { vst1q_f32(p, v); }
    static V mul(V a, V b) { return vmulq_f32(a, b); }
    static V fma(V a, V b, V acc) { return vfmaq_f32(acc, a, b); }
    static V add(V a, V b) { return vaddq_f32(a, b); }
    static float sum(V v) { return vaddvq_f32(v); }
};
#else  // a baseline: one scalar lane (the compiler may still vectorize)
struct F32 {
    using V = float;
    static constexpr size_t lanes = 1;
    static V zero() { return 0.0f; }
    static V splat(float v) { return v; }
    static V load(const float *p) { return *p; }
    static void store(float *p, V v) { *p = v; }
    static V mul(V a, V b) { return a * b; }
    static V fma(V a, V b, V acc) { return acc + a * b; }
    static V add(V a, V b) { return a + b; }
    static float sum(V v) { return v; }
};
#endif

// ---------------------------------------------------------------- int8 squares
// acc += x[i]^2 over one step of int8 values, in 32-bit lanes.
#if defined(VNORM_VARIANT_AVX512)
struct I8 {
    using Acc = __m512i;
    static constexpr size_t step = 32;
    static Acc zero() { return _mm512_setzero_si512(); }
    static Acc add_squares(Acc acc, const std::int8_t *p) {
        __m512i x = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
        return _mm512_add_epi32(acc, _mm512_madd_epi16(x, x));
    }
    static std::int32_t sum(Acc a) {
        alignas(64) std::int32_t lane[16];
        _mm512_store_si512(lane, a);
        std::int32_t s = 0;
        for (std::int32_t x : lane)
            s += x;
        return s;
    }
};
#elif defined(VNORM_VARIANT_AVX2)
struct I8 {
    using Acc = __m256i;
    static constexpr size_t step = 16;
    static Acc zero() { return _mm256_setzero_si256(); }
    static Acc add_squares(Acc acc, const std::int8_t *p) {
        __m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
        return _mm256_add_epi32(acc, _mm256_madd_epi16(x, x));
    }
    static std::int32_t sum(Acc a) {
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        s = _mm_hadd_epi32(s, s);
        return _mm_cvtsi128_si32(_mm_hadd_epi32(s, s));
    }
};
#elif defined(VNORM_VARIANT_NEON_DOTPROD)
struct I8 {
    using Acc = int32x4_t;
    static constexpr size_t step = 16;
    static Acc zero() { return vdupq_n_s32(0); }
    static Acc add_squares(Acc acc, const std::int8_t *p) {
        int8x16_t x = vld1q_s8(p);
        return vdotq_s32(acc, x, x);  // SDOT: four squares per lane
    }
    static std::int32_t sum(Acc a) { return vaddvq_s32(a); }
};
#elif defined(VNORM_VARIANT_NEON)
struct I8 {
    using Acc = int32x4_t;
    static constexpr size_t step = 16;
    static Acc zero() { return vdupq_n_s32(0); }
    static Acc add_squares(Acc acc, const std::int8_t *p) {
        int8x16_t x = vld1q_s8(p);
        acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(x), vget_low_s8(x)));
        return vpadalq_s16(acc, vmull_high_s8(x, x));
    }
    static std::int32_t sum(Acc a) { return vaddvq_s32(a); }
};
#else
struct I8 {
    using Acc = std::int32_t;
    static constexpr size_t step = 1;
    static Acc zero() { return 0; }
    static Acc add_squares(Acc acc, const std::int8_t *p) { return acc + std::int32_t{*p} * *p; }
    static std::int32_t sum(Acc a) { return a; }
};
#endif

// 32-bit lanes sum at most this many squares (each <= 2^14): 2^16 * 2^14 = 2^30.
constexpr size_t kI8Block = size_t{1} << 16;

}  // namespace

namespace vecnorm::kernel {

float sumsq_f32(const float *x, size_t n) {
    // two accumulators: consecutive FMAs do not wait for each other
    F32::V acc0 = F32::zero(), acc1 = F32::zero();
    size_t i = 0;
    for (; i + 2 * F32::lanes <= n; i += 2 * F32::lanes) {
        F32::V a = F32::load(x + i), b = F32::load(x + i + F32::lanes);
        acc0 = F32::fma(a, a, acc0);
        acc1 = F32::fma(b, b, acc1);
    }
    for (; i + F32::lanes <= n; i += F32::lanes) {
        F32::V a = F32::load(x + i);
        acc0 = F32::fma(a, a, acc0);
    }
    float total = F32::sum(F32::add(acc0, acc1));
    for (; i < n; ++i)
        total += x[i] * x[i];
    return total;
}

void scale_f32(const float *x, float factor, float *out, size_t n) {
    const F32::V f = F32::splat(factor);
    size_t i = 0;
    for (; i + F32::lanes <= n; i += F32::lanes)
        F32::store(out + i, F32::mul(F32::load(x + i), f));
    for (; i < n; ++i)
        out[i] = x[i] * factor;
}

std::int64_t sumsq_i8(const std::int8_t *x, size_t n) {
    std::int64_t total = 0;
    for (size_t start = 0; start < n; start += kI8Block) {
        const size_t end = n - start < kI8Block ? n : start + kI8Block;
        I8::Acc acc = I8::zero();
        size_t i = start;
        for (; i + I8::step <= end; i += I8::step)
            acc = I8::add_squares(acc, x + i);
        std::int32_t block = I8::sum(acc);
        for (; i < end; ++i)
            block += std::int32_t{x[i]} * x[i];
        total += block;
    }
    return total;
}

}  // namespace vecnorm::kernel
