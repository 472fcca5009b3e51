// One portable vector layer for every variant: GCC/Clang vector extensions
// sized by the ISA the translation unit is compiled for (64 bytes with
// AVX-512, 32 with AVX/AVX2, 16 for SSE2, NEON and z/Architecture vectors).
// Kernels are written once against it and compiled once per variant; ISA
// specific instructions are added here (or in a kernel) behind the compiler's
// own feature macros, never behind runtime checks.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif
#if defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace cpukern {

// Storage types: 16-bit patterns in the platform's native byte order.
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };

namespace simd {

#if defined(__AVX512F__)
constexpr int kBytes = 64;
#elif defined(__AVX__)
constexpr int kBytes = 32;
#else
constexpr int kBytes = 16;
#endif
constexpr int kLanes = kBytes / 4;

typedef float VF __attribute__((vector_size(kBytes)));
typedef int32_t VI __attribute__((vector_size(kBytes)));
typedef uint32_t VU __attribute__((vector_size(kBytes)));
typedef uint16_t VH __attribute__((vector_size(kBytes / 2)));

inline VF splat(float x) { return VF{} + x; }
inline VF select(VI mask, VF a, VF b) { return (VF)((mask & (VI)a) | (~mask & (VI)b)); }
inline VF vmax(VF a, VF b) { return select(a > b, a, b); }
inline VF vmin(VF a, VF b) { return select(a < b, a, b); }

inline float reduce_add(VF v) {
    // pairwise halving keeps the rounding close to a tree sum
#if defined(__AVX512F__)
    return _mm512_reduce_add_ps((__m512)v);
#else
    float lanes[kLanes];
    std::memcpy(lanes, &v, sizeof v);
    for (int w = kLanes / 2; w > 0; w /= 2)
        for (int i = 0; i < w; ++i) lanes[i] += lanes[i + w];
    return lanes[0];
#endif
}

// ---------------------------------------------------------------- scalar
inline float to_float(float x) { return x; }
inline float to_float(bf16_t x) {
    uint32_t u = static_cast<uint32_t>(x.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint16_t bf16_bits_rne(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

#if defined(__FLT16_MAX__) && !defined(__s390x__)
#define CPUKERN_HAVE_FLOAT16 1
inline float to_float(f16_t x) {
    _Float16 h;
    std::memcpy(&h, &x.bits, 2);
    return static_cast<float>(h);
}
inline uint16_t f16_bits(float f) {
    _Float16 h = static_cast<_Float16>(f);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}
#else
#define CPUKERN_HAVE_FLOAT16 0
#endif

template <class T> inline T from_float(float f);
template <> inline float from_float<float>(float f) { return f; }
template <> inline bf16_t from_float<bf16_t>(float f) { return bf16_t{bf16_bits_rne(f)}; }
#if CPUKERN_HAVE_FLOAT16
template <> inline f16_t from_float<f16_t>(float f) { return f16_t{f16_bits(f)}; }
#endif

// ---------------------------------------------------------------- vector
inline VF load(const float* p) {
    VF v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void store(float* p, VF v) { std::memcpy(p, &v, sizeof v); }

inline VF load(const bf16_t* p) {
    VH h;
    std::memcpy(&h, p, sizeof h);
    return (VF)(__builtin_convertvector(h, VU) << 16);
}
inline void store(bf16_t* p, VF v) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    __m256bh h = _mm512_cvtneps_pbh((__m512)v);  // vcvtneps2bf16: RNE, quiets NaN
    std::memcpy(p, &h, sizeof h);
#else
    VU u = (VU)v;
    VU rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    VI nan = v != v;
    VU out = (VU)((nan & (VI)((u >> 16) | 0x40u)) | (~nan & (VI)rounded));
    VH h = __builtin_convertvector(out, VH);
    std::memcpy(p, &h, sizeof h);
#endif
}

#if CPUKERN_HAVE_FLOAT16
typedef _Float16 VF16 __attribute__((vector_size(kBytes / 2)));
inline VF load(const f16_t* p) {
    VF16 h;
    std::memcpy(&h, p, sizeof h);
    return __builtin_convertvector(h, VF);
}
inline void store(f16_t* p, VF v) {
    VF16 h = __builtin_convertvector(v, VF16);
    std::memcpy(p, &h, sizeof h);
}
#endif

// Tails: go through a zero-padded lane buffer, so a kernel's tail uses the
// exact vector code of its body.
template <class T>
inline VF load_partial(const T* p, int n) {
    T buf[kLanes];
    std::memset(buf, 0, sizeof buf);
    std::memcpy(buf, p, sizeof(T) * n);
    return load(buf);
}
template <class T>
inline void store_partial(T* p, VF v, int n) {
    T buf[kLanes];
    store(buf, v);
    std::memcpy(p, buf, sizeof(T) * n);
}

// exp(x) for float lanes: Cody-Waite reduction + degree-6 polynomial,
// ~2 ulp on [-87.3, 88]; 0 below, inf above 88.72 (exp(88..88.72) saturates
// to exp(88) so that 2^n stays a normal float).
inline VF exp(VF x) {
    const VF hi = splat(88.0f), lo = splat(-87.3365447504f);
    VI over = x > splat(88.7228391f), under = x < lo;
    x = vmin(vmax(x, lo), hi);
    const VF shifter = splat(12582912.0f);  // 1.5 * 2^23: round to nearest
    VF n = (x * 1.44269504088896341f + shifter) - shifter;
    VF r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    VF p = splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    VI e = (__builtin_convertvector(n, VI) + 127) << 23;
    VF result = p * (VF)e;
    result = select(over, splat(__builtin_inff()), result);
    return select(under, splat(0.0f), result);
}

}  // namespace simd
}  // namespace cpukern
