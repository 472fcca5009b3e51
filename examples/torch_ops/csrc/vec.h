// One SIMD vector of float lanes for the variant being compiled: the kernels
// in layernorm.cpp and activation.cpp are written once against `Vec` and
// compiled once per variant of isa_matrix.toml (cpubuild passes the variant's
// flags and -DTORCH_OPS_VARIANT_<NAME>=1). On x86 the code path follows the
// flags (the compiler's __AVX2__, __AVX512BF16__ ...), so every variant of the
// ladder gets the best path its flags allow: avx512 and avx512vnni compile the
// AVX2 code for AVX-512, avx512bf16 and amx the AVX-512 BF16 code. A baseline
// build has no Vec (TORCH_OPS_HAVE_VEC is 0): the scalar loops do all the work.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define TORCH_OPS_X86_AVX512BF16 1  // TORCH_OPS_VARIANT_AVX512BF16, TORCH_OPS_VARIANT_AMX
#elif defined(__AVX2__) && defined(__FMA__)
#define TORCH_OPS_X86_AVX2 1  // TORCH_OPS_VARIANT_AVX2, TORCH_OPS_VARIANT_AVX512, TORCH_OPS_VARIANT_AVX512VNNI
#endif

#if defined(TORCH_OPS_X86_AVX512BF16) || defined(TORCH_OPS_X86_AVX2)
#include <immintrin.h>
#elif defined(TORCH_OPS_VARIANT_NEON_DOTPROD)
#include <arm_neon.h>
#endif

namespace torch_ops {

using bf16 = std::uint16_t;  // bfloat16 bits, as torch stores them

// bfloat16 <-> float, scalar: the upper half of a float, rounded to nearest even
// (torch's rounding; NaN stays NaN).
inline float to_float(bf16 x) {
  std::uint32_t bits = std::uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline float to_float(float x) { return x; }

inline bf16 to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (std::isnan(f)) return bf16(0x7fc0);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return bf16(bits >> 16);
}
inline void store_as(float* p, float f) { *p = f; }
inline void store_as(bf16* p, float f) { *p = to_bf16(f); }

#if defined(TORCH_OPS_X86_AVX512BF16)
#define TORCH_OPS_HAVE_VEC 1
struct Vec {
  static constexpr int N = 16;
  __m512 v;
  static Vec zero() { return {_mm512_setzero_ps()}; }
  static Vec set1(float x) { return {_mm512_set1_ps(x)}; }
  static Vec load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static Vec load(const bf16* p) {
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(wide, 16))};
  }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  void store(bf16* p) const {  // VCVTNEPS2BF16: round to nearest even in one instruction
    __m256bh packed = _mm512_cvtneps_pbh(v);
    std::memcpy(p, &packed, sizeof packed);
  }
  friend Vec operator+(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
  friend Vec operator/(Vec a, Vec b) { return {_mm512_div_ps(a.v, b.v)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }  // a * b + c
  static Vec min(Vec a, Vec b) { return {_mm512_min_ps(a.v, b.v)}; }
  static Vec max(Vec a, Vec b) { return {_mm512_max_ps(a.v, b.v)}; }
  static Vec round(Vec a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
  static Vec pow2(Vec n) {  // 2^n for integral n in [-126, 127]
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(e, 23))};
  }
  float sum() const { return _mm512_reduce_add_ps(v); }
};

// Sum of squares of bfloat16 values with VDPBF16PS (pairs of bf16 products
// accumulated into float lanes); x * x is exact in float for bf16 x.
#define TORCH_OPS_HAVE_BF16_DOT 1
inline float sum_squares_bf16(const bf16* x, std::int64_t n, std::int64_t* done) {
  __m512 acc = _mm512_setzero_ps();
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512bh pair;
    std::memcpy(&pair, x + i, sizeof pair);
    acc = _mm512_dpbf16_ps(acc, pair, pair);
  }
  *done = i;
  return _mm512_reduce_add_ps(acc);
}

#elif defined(TORCH_OPS_X86_AVX2)
#define TORCH_OPS_HAVE_VEC 1
struct Vec {
  static constexpr int N = 8;
  __m256 v;
  static Vec zero() { return {_mm256_setzero_ps()}; }
  static Vec set1(float x) { return {_mm256_set1_ps(x)}; }
  static Vec load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static Vec load(const bf16* p) {
    __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(wide, 16))};
  }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
  void store(bf16* p) const {  // round to nearest even: add 0x7fff + the kept lowest bit, keep the top half
    __m256i bits = _mm256_castps_si256(v);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fc0), nan);
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0xd8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  friend Vec operator+(Vec a, Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {_mm256_sub_ps(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {_mm256_mul_ps(a.v, b.v)}; }
  friend Vec operator/(Vec a, Vec b) { return {_mm256_div_ps(a.v, b.v)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
  static Vec min(Vec a, Vec b) { return {_mm256_min_ps(a.v, b.v)}; }
  static Vec max(Vec a, Vec b) { return {_mm256_max_ps(a.v, b.v)}; }
  static Vec round(Vec a) { return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
  static Vec pow2(Vec n) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n.v), _mm256_set1_epi32(127));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(e, 23))};
  }
  float sum() const {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#elif defined(TORCH_OPS_VARIANT_NEON_DOTPROD)
#define TORCH_OPS_HAVE_VEC 1
struct Vec {
  static constexpr int N = 4;
  float32x4_t v;
  static Vec zero() { return {vdupq_n_f32(0.0f)}; }
  static Vec set1(float x) { return {vdupq_n_f32(x)}; }
  static Vec load(const float* p) { return {vld1q_f32(p)}; }
  static Vec load(const bf16* p) { return {vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16))}; }
  void store(float* p) const { vst1q_f32(p, v); }
  void store(bf16* p) const {
    uint32x4_t bits = vreinterpretq_u32_f32(v);
    uint32x4_t odd = vandq_u32(vshrq_n_u32(bits, 16), vdupq_n_u32(1));
    uint32x4_t rounded = vaddq_u32(bits, vaddq_u32(odd, vdupq_n_u32(0x7fff)));
    uint32x4_t nan = vmvnq_u32(vceqq_f32(v, v));
    rounded = vbslq_u32(nan, vdupq_n_u32(0x7fc00000u), rounded);
    vst1_u16(p, vshrn_n_u32(rounded, 16));
  }
  friend Vec operator+(Vec a, Vec b) { return {vaddq_f32(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {vsubq_f32(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {vmulq_f32(a.v, b.v)}; }
  friend Vec operator/(Vec a, Vec b) { return {vdivq_f32(a.v, b.v)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {vfmaq_f32(c.v, a.v, b.v)}; }
  static Vec min(Vec a, Vec b) { return {vminq_f32(a.v, b.v)}; }
  static Vec max(Vec a, Vec b) { return {vmaxq_f32(a.v, b.v)}; }
  static Vec round(Vec a) { return {vrndnq_f32(a.v)}; }
  static Vec pow2(Vec n) {
    int32x4_t e = vaddq_s32(vcvtnq_s32_f32(n.v), vdupq_n_s32(127));
    return {vreinterpretq_f32_s32(vshlq_n_s32(e, 23))};
  }
  float sum() const { return vaddvq_f32(v); }
};

#else
#define TORCH_OPS_HAVE_VEC 0
#endif

#if TORCH_OPS_HAVE_VEC
// e^x, lane-wise, to about 1 ulp (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2,
// a degree-6 polynomial for e^r, 2^n through the exponent bits).
inline Vec exp(Vec x) {
  x = Vec::min(Vec::max(x, Vec::set1(-87.3f)), Vec::set1(88.3f));
  Vec n = Vec::round(x * Vec::set1(1.44269504088896341f));
  Vec r = Vec::fma(n, Vec::set1(-0.693359375f), x);
  r = Vec::fma(n, Vec::set1(2.12194440e-4f), r);
  Vec p = Vec::set1(1.9875691500e-4f);
  p = Vec::fma(p, r, Vec::set1(1.3981999507e-3f));
  p = Vec::fma(p, r, Vec::set1(8.3334519073e-3f));
  p = Vec::fma(p, r, Vec::set1(4.1665795894e-2f));
  p = Vec::fma(p, r, Vec::set1(1.6666665459e-1f));
  p = Vec::fma(p, r, Vec::set1(5.0000001201e-1f));
  p = Vec::fma(p, r * r, r + Vec::set1(1.0f));
  return p * Vec::pow2(n);
}
#endif

}  // namespace torch_ops
