// One portable vector layer for every variant: GCC/Clang vector extensions
// sized by the ISA the translation unit is compiled for (64 bytes with
// AVX-512, 32 with AVX/AVX2, 16 for SSE2, NEON and z/Architecture vectors).
// Kernels are written once against it and compiled once per variant; ISA
// specific instructions are added here (or in a kernel) behind the compiler's
// own feature macros, never behind runtime checks.
#pragma once
#include <cstdint>
#include <cstring>

#include "cpukern/intrin.h"  // x86 intrinsics (immintrin.h / emmintrin.h)
#if defined(__ARM_NEON)
#include <arm_neon.h>
#endif
// Armv8.6 BF16 (BFCVTN, BFDOT, BFMMLA); GCC 12 names the macro by its parts.
#if defined(__ARM_NEON) && (defined(__ARM_FEATURE_BF16) || defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC))
#define CPUKERN_NEON_BF16 1
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
inline VF vabs(VF a) { return (VF)((VI)a & 0x7fffffff); }
// vmax / vmin return b when a lane of a is NaN (x86 maxps / minps semantics).
#if defined(__AVX512F__)
inline VF vmax(VF a, VF b) { return (VF)_mm512_max_ps((__m512)a, (__m512)b); }
inline VF vmin(VF a, VF b) { return (VF)_mm512_min_ps((__m512)a, (__m512)b); }
#elif defined(__AVX__)
inline VF vmax(VF a, VF b) { return (VF)_mm256_max_ps((__m256)a, (__m256)b); }
inline VF vmin(VF a, VF b) { return (VF)_mm256_min_ps((__m256)a, (__m256)b); }
#elif defined(__SSE2__)
inline VF vmax(VF a, VF b) { return (VF)_mm_max_ps((__m128)a, (__m128)b); }
inline VF vmin(VF a, VF b) { return (VF)_mm_min_ps((__m128)a, (__m128)b); }
#else
inline VF vmax(VF a, VF b) { return select(a > b, a, b); }
inline VF vmin(VF a, VF b) { return select(a < b, a, b); }
#endif

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

// float16: x86 uses _Float16 (F16C converts when the variant has it).
// aarch64: GCC 12 has no _Float16 in C++ there; __fp16 (the ACLE storage type)
// converts with FCVT, and the vector path uses FCVTL/FCVTN (base ARMv8-A).
// s390x: GCC 12 has no half-precision type at all, so float16 is not built
// (cpukern_has_float16() returns 0 and the Python side says so).
#if defined(__aarch64__) && defined(__ARM_NEON)
#define CPUKERN_HAVE_FLOAT16 1
#define CPUKERN_FLOAT16_ACLE 1
typedef __fp16 native_half;
#elif defined(__FLT16_MAX__) && !defined(__s390x__)
#define CPUKERN_HAVE_FLOAT16 1
typedef _Float16 native_half;
#else
#define CPUKERN_HAVE_FLOAT16 0
#endif
#if CPUKERN_HAVE_FLOAT16
inline float to_float(f16_t x) {
    native_half h;
    std::memcpy(&h, &x.bits, 2);
    return static_cast<float>(h);
}
inline uint16_t f16_bits(float f) {
    native_half h = static_cast<native_half>(f);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}
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
#if defined(__AVX512F__)
    return (VF)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16);
#elif defined(__AVX2__)
    return (VF)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16);
#elif defined(__SSE2__) && !defined(__AVX__)
    // zeros below each value: one unpack (GCC's conversion took five shuffles and a shift)
    return (VF)_mm_unpacklo_epi16(_mm_setzero_si128(), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
#else
    VH h;
    std::memcpy(&h, p, sizeof h);
    return (VF)(__builtin_convertvector(h, VU) << 16);
#endif
}
// float -> bf16 bits (in the low half of each lane), round to nearest even.
inline VU bf16_rne_bits(VF v) {
    VU u = (VU)v;
    VU rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    VI nan = v != v;
    return (VU)((nan & (VI)((u >> 16) | 0x40u)) | (~nan & (VI)rounded));
}
// u + 0x7fff + lsb: the rounded bf16 in the high 16 bits, no NaN fix-up.
inline VU bf16_rne_biased(VF v) {
    VU u = (VU)v;
    return u + 0x7fffu + ((u >> 16) & 1u);
}
// The same as bf16_rne_bits without the NaN fix-up: see store_fast.
inline VU bf16_rne_bits_fast(VF v) { return bf16_rne_biased(v) >> 16; }

#if defined(__SSE2__) && !defined(__AVX__)
// Four lanes, each < 2^16, as four 16-bit values in the low 8 bytes. No
// packusdw before SSE4.1 (GCC's conversion took six shuffles): a signed pack
// of the values moved down by 2^15, moved back.
inline __m128i pack_low_halves(__m128i v) {
    const __m128i low = _mm_sub_epi32(v, _mm_set1_epi32(0x8000));
    return _mm_xor_si128(_mm_packs_epi32(low, low), _mm_set1_epi16(-0x8000));
}
#endif

// Stores lanes that already hold bf16 bit patterns (each < 2^16).
inline void store_bf16_bits(bf16_t* p, VU bits) {
#if defined(__AVX2__) && !defined(__AVX512F__)
    // one unsigned saturating pack of the two halves
    __m256i w = (__m256i)bits;
    __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
#elif defined(__SSE2__) && !defined(__AVX__)
    const __m128i packed = pack_low_halves((__m128i)bits);
    uint64_t h;
    std::memcpy(&h, &packed, sizeof h);
#else
    VH h = __builtin_convertvector(bits, VH);
#endif
    std::memcpy(p, &h, sizeof h);
}

inline void store(bf16_t* p, VF v) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    __m256bh h = _mm512_cvtneps_pbh((__m512)v);  // vcvtneps2bf16: RNE, quiets NaN
    std::memcpy(p, &h, sizeof h);
#elif defined(CPUKERN_NEON_BF16)
    bfloat16x4_t h = vcvt_bf16_f32((float32x4_t)v);  // BFCVTN: RNE, quiets NaN
    std::memcpy(p, &h, sizeof h);
#else
    store_bf16_bits(p, bf16_rne_bits(v));
#endif
}

// store() without the NaN fix-up, for kernels whose values are computed from
// bfloat16 data: the integer rounding bias is exact RNE for every finite value
// and infinity, and keeps a NaN a NaN when its low 16 bits are zero - true of
// every NaN such a kernel can make (NaN payloads propagate from bf16 inputs;
// the default NaN has them zero). Not for float32 data converted to bf16.
inline void store_fast(bf16_t* p, VF v) {
#if (defined(__AVX512BF16__) && defined(__AVX512F__)) || defined(CPUKERN_NEON_BF16)
    store(p, v);
#else
    store_bf16_bits(p, bf16_rne_bits_fast(v));
#endif
}
inline void store_fast(float* p, VF v) { store(p, v); }

#if defined(CPUKERN_FLOAT16_ACLE)
static_assert(kBytes == 16, "NEON float16 path expects 4 float lanes");
inline VF load(const f16_t* p) {
    float16x4_t h;
    std::memcpy(&h, p, sizeof h);
    return (VF)vcvt_f32_f16(h);
}
inline void store(f16_t* p, VF v) {
    float16x4_t h = vcvt_f16_f32((float32x4_t)v);
    std::memcpy(p, &h, sizeof h);
}
#elif CPUKERN_HAVE_FLOAT16 && defined(__SSE2__) && !defined(__AVX__)
// The baseline has no F16C, and GCC converts _Float16 through a libgcc call
// per element (rms_norm float16 512 x 4096 took 22 ms, avx2 0.23): integer
// conversions on four lanes instead, exact for every value (F. Giesen's
// branch-free method; no subnormal float is produced or read, so DAZ / FTZ
// do not change them). A NaN becomes float16's default NaN, sign kept.
#define CPUKERN_F16_SSE2 1
// float16 bits (each lane < 2^16) -> float
inline VF f16_bits_to_float(__m128i h) {
    const __m128i em = _mm_and_si128(h, _mm_set1_epi32(0x7fff));
    const __m128i sign = _mm_slli_epi32(_mm_xor_si128(h, em), 16);
    const __m128i shifted = _mm_slli_epi32(em, 13);
    const __m128i exp = _mm_and_si128(shifted, _mm_set1_epi32(0x7c00 << 13));
    __m128i o = _mm_add_epi32(shifted, _mm_set1_epi32(112 << 23));  // exponent bias 15 -> 127
    const __m128i infnan = _mm_cmpeq_epi32(exp, _mm_set1_epi32(0x7c00 << 13));
    o = _mm_add_epi32(o, _mm_and_si128(infnan, _mm_set1_epi32(112 << 23)));  // exponent 31 -> 255
    // zero and subnormals: m * 2^-24 = (1 + m / 1024) * 2^-14 - 2^-14, exact
    const __m128i small = _mm_cmpeq_epi32(exp, _mm_setzero_si128());
    const __m128i sub = _mm_castps_si128(_mm_sub_ps(_mm_castsi128_ps(_mm_add_epi32(o, _mm_set1_epi32(1 << 23))),
                                                    _mm_castsi128_ps(_mm_set1_epi32(113 << 23))));
    o = _mm_or_si128(_mm_and_si128(small, sub), _mm_andnot_si128(small, o));
    return (VF)_mm_castsi128_ps(_mm_or_si128(o, sign));
}
// float -> float16 bits in the low half of each lane, round to nearest even
inline __m128i f16_bits_from_float(VF v) {
    const __m128i f = _mm_castps_si128((__m128)v);
    const __m128i sign = _mm_and_si128(f, _mm_set1_epi32(static_cast<int>(0x80000000u)));
    const __m128i a = _mm_xor_si128(f, sign);  // |v|, compared as signed integers
    const __m128i nan = _mm_cmpgt_epi32(a, _mm_set1_epi32(0x7f800000));
    const __m128i special = _mm_or_si128(_mm_set1_epi32(0x7c00), _mm_and_si128(nan, _mm_set1_epi32(0x0200)));
    const __m128i finite = _mm_cmpgt_epi32(_mm_set1_epi32(143 << 23), a);  // |v| < 2^16; above: inf / NaN
    // |v| < 2^-14: adding 0.5 rounds it to a multiple of 2^-24 (the FPU's RNE), the bits past 0.5 are the result
    const __m128i small = _mm_cmpgt_epi32(_mm_set1_epi32(113 << 23), a);
    const __m128i half = _mm_set1_epi32(126 << 23);
    const __m128i sub = _mm_sub_epi32(_mm_castps_si128(_mm_add_ps(_mm_castsi128_ps(a), _mm_castsi128_ps(half))), half);
    // normal: rebias the exponent, round the 13 dropped bits to nearest even
    const __m128i odd = _mm_and_si128(_mm_srli_epi32(a, 13), _mm_set1_epi32(1));
    const __m128i normal =
        _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(a, _mm_set1_epi32(0xfff - (112 << 23))), odd), 13);
    __m128i r = _mm_or_si128(_mm_and_si128(small, sub), _mm_andnot_si128(small, normal));
    r = _mm_or_si128(_mm_and_si128(finite, r), _mm_andnot_si128(finite, special));
    return _mm_or_si128(r, _mm_srli_epi32(sign, 16));
}
inline VF load(const f16_t* p) {
    return f16_bits_to_float(_mm_unpacklo_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), _mm_setzero_si128()));
}
inline void store(f16_t* p, VF v) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), pack_low_halves(f16_bits_from_float(v)));
}
#elif CPUKERN_HAVE_FLOAT16 && defined(__F16C__)
// GCC 12 scalarises _Float16 vector conversions: use F16C (vcvtph2ps/vcvtps2ph).
inline VF load(const f16_t* p) {
#if defined(__AVX512F__)
    return (VF)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));
#else
    return (VF)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
#endif
}
inline void store(f16_t* p, VF v) {
#if defined(__AVX512F__)
    _mm256_storeu_si256((__m256i*)p, _mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
    _mm_storeu_si128((__m128i*)p, _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
}
#elif CPUKERN_HAVE_FLOAT16
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

#if CPUKERN_HAVE_FLOAT16
inline void store_fast(f16_t* p, VF v) { store(p, v); }
#endif

// ---------------------------------------------------------------- pairs
// Two vectors (2 * kLanes values) at a time. load_pair / store_pair may
// permute the lanes inside the pair, but they permute alike: lane-wise math
// between pairs, sums over pairs and a float array written with store(p),
// store(p + kLanes) from a load_pair (read back the same way) all stay
// consistent. Don't mix a pair's lanes with load() / store() of the same
// 16-bit data.
template <class T>
inline void load_pair(const T* p, VF& a, VF& b) {
    a = load(p);
    b = load(p + kLanes);
}
template <class T>
inline void store_pair(T* p, VF a, VF b) {
    store(p, a);
    store(p + kLanes, b);
}
template <class T>
inline void store_pair_fast(T* p, VF a, VF b) {
    store_fast(p, a);
    store_fast(p + kLanes, b);
}

// x86 bf16 pairs without AVX-512 BF16 split odd and even elements: read as
// 32-bit lanes, an odd element is already a float in the high half
// (a = v & 0xffff0000) and an even one needs a shift (b = v << 16) - two ALU
// ops for the pair, no shuffle - and a store puts them back with one 16-bit
// blend after the integer rounding. It replaced vpunpck{l,h}wd / vpackusdw:
// three shuffles per pair (one port on Intel), and measured slower on Zen 4
// (docs/gemm-log.md).
#if defined(__AVX512BF16__) && defined(__AVX512F__)
// With AVX-512 BF16 the pair keeps the natural order: vcvtne2ps2bf16 narrows
// it in one instruction (RNE, quiets NaN), where the split would need a
// vpermw after it (measured: within a few % either way, op by op).
template <>
inline void store_pair(bf16_t* p, VF a, VF b) {
    __m512bh h = _mm512_cvtne2ps_pbh((__m512)b, (__m512)a);
    std::memcpy(p, &h, sizeof h);
}
template <>
inline void store_pair_fast(bf16_t* p, VF a, VF b) {
    store_pair(p, a, b);
}
#elif (defined(__AVX512F__) && defined(__AVX512BW__)) || defined(__AVX2__) || (defined(__SSE2__) && !defined(__AVX__))
// (the baseline too: GCC widens and narrows 16-bit vectors with 4-6 shuffles
// per 4 values on SSE2, having no pmovzx and no packusdw; the split needs none)
#define CPUKERN_BF16_PAIRS_SPLIT 1
using VIpair = VU;
inline VIpair pair_load(const void* p) {
    VIpair v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void pair_store(void* p, VIpair v) { std::memcpy(p, &v, sizeof v); }
inline VF pair_odd(VIpair v) { return (VF)(v & 0xffff0000u); }
inline VF pair_even(VIpair v) { return (VF)(v << 16); }
// low 16 bits of `lo` lanes, high 16 bits of `hi` lanes
inline VIpair pair_join(VIpair lo, VIpair hi) {
#if defined(__AVX512F__)
    return (VIpair)_mm512_mask_blend_epi16(0xAAAAAAAAu, (__m512i)lo, (__m512i)hi);
#elif defined(__AVX2__)
    return (VIpair)_mm256_blend_epi16((__m256i)lo, (__m256i)hi, 0xAA);
#else
    return lo | (hi & 0xffff0000u);  // no pblendw before SSE4.1; lo's lanes are < 2^16 (rounded, shifted)
#endif
}
#endif

#if defined(CPUKERN_BF16_PAIRS_SPLIT)
// a: elements 1, 3, 5, ...; b: elements 0, 2, 4, ...
template <>
inline void load_pair(const bf16_t* p, VF& a, VF& b) {
    VIpair v = pair_load(p);
    a = pair_odd(v);
    b = pair_even(v);
}
template <>
inline void store_pair_fast(bf16_t* p, VF a, VF b) {
    pair_store(p, pair_join((VIpair)bf16_rne_bits_fast(b), (VIpair)bf16_rne_biased(a)));
}
template <>
inline void store_pair(bf16_t* p, VF a, VF b) {
    pair_store(p, pair_join((VIpair)bf16_rne_bits(b), (VIpair)(bf16_rne_bits(a) << 16)));
}
#endif

#if defined(CPUKERN_F16_SSE2)
// float16 pairs split as bf16's do on SSE2 (odd elements, then even ones):
// no unpacking and packing shuffles around the conversions
template <>
inline void load_pair(const f16_t* p, VF& a, VF& b) {
    const VIpair v = pair_load(p);
    a = f16_bits_to_float((__m128i)(v >> 16));
    b = f16_bits_to_float((__m128i)(v & 0xffffu));
}
template <>
inline void store_pair(f16_t* p, VF a, VF b) {
    pair_store(p, pair_join((VIpair)f16_bits_from_float(b), (VIpair)f16_bits_from_float(a) << 16));
}
template <>
inline void store_pair_fast(f16_t* p, VF a, VF b) {
    store_pair(p, a, b);
}
#endif

// Pairs for element-wise kernels that read no float table alongside (silu):
// any lane order will do, so the cheapest. That is load_pair's everywhere but
// with AVX-512 BF16, whose natural order saves the kernels with a weight or
// cos / sin table a permute per table vector; without one the split order
// (two ALU ops per pair, no vpmovzxwd) and one vpermw after vcvtne2ps2bf16
// are cheaper: silu_and_mul bf16 on Zen 4 0.88 of the time on one thread
// with its rows in cache, 0.94-0.96 on two, 512 x 22016.
template <class T>
inline void load_pair_unordered(const T* p, VF& a, VF& b) {
    load_pair(p, a, b);
}
template <class T>
inline void store_pair_unordered_fast(T* p, VF a, VF b) {
    store_pair_fast(p, a, b);
}
#if defined(__AVX512BF16__) && defined(__AVX512F__)
// a: elements 1, 3, 5, ...; b: elements 0, 2, 4, ...
template <>
inline void load_pair_unordered(const bf16_t* p, VF& a, VF& b) {
    const __m512i v = _mm512_loadu_si512(p);
    a = (VF)_mm512_and_si512(v, _mm512_set1_epi32(int32_t(0xffff0000u)));
    b = (VF)_mm512_slli_epi32(v, 16);
}
template <>
inline void store_pair_unordered_fast(bf16_t* p, VF a, VF b) {
    // b's words then a's, interleaved back
    const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    _mm512_storeu_si512(p, _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh((__m512)a, (__m512)b)));
}
#endif

// store_pair_fast rounding to nearest with ties either way - to even, or away
// from zero (IEEE roundTiesToAway) where the narrowing is integer arithmetic:
// one add per vector in place of three. The same within half an ulp; only an
// exact tie (1 in 65536 results of full float precision: a product, a
// polynomial) may land one ulp from round-to-even. A NaN stays a NaN under
// store_fast's condition (low 16 bits zero). rms_norm bf16 512 x 4096 on Zen 4
// class: avx2 0.82 of the time, avx512 0.88; silu on avx512 0.81.
template <class T>
inline void store_pair_nearest(T* p, VF a, VF b) {
    store_pair_fast(p, a, b);
}
// the same in store_pair_unordered_fast's lane order
template <class T>
inline void store_pair_unordered_nearest(T* p, VF a, VF b) {
    store_pair_unordered_fast(p, a, b);
}
#if defined(CPUKERN_BF16_PAIRS_SPLIT)  // (the ordered and the unordered pair are one)
template <>
inline void store_pair_nearest(bf16_t* p, VF a, VF b) {
    pair_store(p, pair_join(((VU)b + 0x8000u) >> 16, (VU)a + 0x8000u));
}
template <>
inline void store_pair_unordered_nearest(bf16_t* p, VF a, VF b) {
    store_pair_nearest(p, a, b);
}
#endif

// 2 * kLanes floats at p in the lane order load_pair<T> gives: a float table
// (weights, cos/sin) read alongside a row of T walked with load_pair.
template <class T>
inline void load_pair_order(const float* p, VF& a, VF& b) {
    a = load(p);
    b = load(p + kLanes);
}
#if defined(CPUKERN_BF16_PAIRS_SPLIT) && defined(__AVX512F__)
template <>
inline void load_pair_order<bf16_t>(const float* p, VF& a, VF& b) {
    const __m512 lo = (__m512)load(p), hi = (__m512)load(p + kLanes);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    a = (VF)_mm512_permutex2var_ps(lo, odd, hi);
    b = (VF)_mm512_permutex2var_ps(lo, _mm512_sub_epi32(odd, _mm512_set1_epi32(1)), hi);
}
#elif defined(CPUKERN_BF16_PAIRS_SPLIT) && !defined(__AVX__)
inline void load_pair_order_split(const float* p, VF& a, VF& b) {
    const __m128 lo = (__m128)load(p), hi = (__m128)load(p + kLanes);
    a = (VF)_mm_shuffle_ps(lo, hi, 0xDD);  // one 128-bit lane: no permute after it
    b = (VF)_mm_shuffle_ps(lo, hi, 0x88);
}
template <>
inline void load_pair_order<bf16_t>(const float* p, VF& a, VF& b) {
    load_pair_order_split(p, a, b);
}
#if defined(CPUKERN_F16_SSE2)
template <>
inline void load_pair_order<f16_t>(const float* p, VF& a, VF& b) {
    load_pair_order_split(p, a, b);
}
#endif
#elif defined(CPUKERN_BF16_PAIRS_SPLIT)
template <>
inline void load_pair_order<bf16_t>(const float* p, VF& a, VF& b) {
    const __m256 lo = (__m256)load(p), hi = (__m256)load(p + kLanes);
    // per 128-bit lane, then the 64-bit quarters back in order
    a = (VF)_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
    b = (VF)_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
}
#endif

// Swaps neighbouring lanes (0<->1, 2<->3, ...): interleaved pairs such as
// GPT-J style rotary embedding.
inline VF swap_pairs(VF v) {
#if defined(__AVX512F__)
    return (VF)_mm512_permute_ps((__m512)v, 0xB1);
#elif defined(__AVX__)
    return (VF)_mm256_permute_ps((__m256)v, 0xB1);
#else
    return __builtin_shufflevector(v, v, 1, 0, 3, 2);
#endif
}

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

#if defined(__AVX512BF16__) && defined(__AVX512F__)
// sum(x[i]^2) of a bfloat16 row with vdpbf16ps: 32 products per instruction,
// read straight from memory (no widening). It treats denormal inputs and
// results as zero, which the caller's tiny-sum check makes harmless.
#define CPUKERN_HAVE_BF16_DOT 1
inline float sum_squares_bf16(const bf16_t* x, int64_t n) {
    // four chains: vdpbf16ps' latency (6 cycles on Zen 4) would bound fewer
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps(),
           acc3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m512i a = _mm512_loadu_si512(x + i), b = _mm512_loadu_si512(x + i + 32);
        __m512i c = _mm512_loadu_si512(x + i + 64), d = _mm512_loadu_si512(x + i + 96);
        acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)a, (__m512bh)a);
        acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)b, (__m512bh)b);
        acc2 = _mm512_dpbf16_ps(acc2, (__m512bh)c, (__m512bh)c);
        acc3 = _mm512_dpbf16_ps(acc3, (__m512bh)d, (__m512bh)d);
    }
    for (; i + 64 <= n; i += 64) {
        __m512i a = _mm512_loadu_si512(x + i), b = _mm512_loadu_si512(x + i + 32);
        acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)a, (__m512bh)a);
        acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)b, (__m512bh)b);
    }
    if (i < n) {  // up to 63 left, zero-padded: zeros add nothing
        uint16_t buf[64] = {};
        std::memcpy(buf, x + i, sizeof(bf16_t) * static_cast<size_t>(n - i));
        __m512i a = _mm512_loadu_si512(buf), b = _mm512_loadu_si512(buf + 32);
        acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)a, (__m512bh)a);
        acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)b, (__m512bh)b);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}
#endif

#if defined(CPUKERN_NEON_BF16)
// sum(x[i]^2) of a bfloat16 row with BFDOT: 8 products per instruction and
// the bf16 -> f32 widening for free. BFDOT rounds its pair sums to odd and
// flushes denormal products (Armv8.6 without EBF16): fine for a norm's mean
// square (with the caller's tiny-sum check), which is why only reductions use it.
#define CPUKERN_HAVE_BF16_DOT 1
inline float sum_squares_bf16(const bf16_t* x, int64_t n) {
    float32x4_t acc0 = vdupq_n_f32(0.f), acc1 = vdupq_n_f32(0.f);
    int64_t i = 0;
    bfloat16x8_t a, b;
    for (; i + 16 <= n; i += 16) {
        std::memcpy(&a, x + i, sizeof a);
        std::memcpy(&b, x + i + 8, sizeof b);
        acc0 = vbfdotq_f32(acc0, a, a);
        acc1 = vbfdotq_f32(acc1, b, b);
    }
    if (i + 8 <= n) {
        std::memcpy(&a, x + i, sizeof a);
        acc0 = vbfdotq_f32(acc0, a, a);
        i += 8;
    }
    if (i < n) {  // zero-padded tail: 0 * 0 adds nothing
        uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::memcpy(buf, x + i, sizeof(bf16_t) * static_cast<size_t>(n - i));
        std::memcpy(&a, buf, sizeof a);
        acc1 = vbfdotq_f32(acc1, a, a);
    }
    return vaddvq_f32(vaddq_f32(acc0, acc1));
}
#endif

// exp(x) for float lanes: Cody-Waite reduction (|r| <= ln2/2), a polynomial
// in r, and the scale 2^n. kDegree 7 (minimax): ~2 ulp, for float32 results.
// kDegree 3 (minimax, ln 2 in one part): 7.5e-5 relative and about half the
// work, for results rounded to bf16 / fp16 (half an ulp there is >= 2.4e-4).
// The scale is where ISAs differ. AVX-512's vscalefps takes any n, so x may
// be anything in [-1e6, 1e6]: it overflows to inf and underflows through the
// subnormals to 0 (kExpAnyRange). Elsewhere 2^(n-1) is built from the bits
// of n and the factor 2 folded into the coefficients, so n = 128 (x up to
// 88.72, just below FLT_MAX) stays a normal float: x must lie in [-86.6,
// kExpInf]; from 88.72 up the result is inf (n = 129 gives the bits of inf).
#if defined(__AVX512F__)
constexpr bool kExpAnyRange = true;
#else
constexpr bool kExpAnyRange = false;
#endif
constexpr float kExpInf = 89.5f;

// Every stage of a kernel written for N vectors runs over all N before the
// next one: N independent dependency chains side by side in program order,
// which an out-of-order core with a small FP scheduler overlaps (silu_and_mul
// on Zen 4: a 50-cycle chain per vector; see activation.cpp).
#define CPUKERN_EACH(j, N) _Pragma("GCC unroll 16") for (int j = 0; j < (N); ++j)

// exp of N vectors in place, stage by stage; kNegated: exp(-x), the sign folded into the constants (one operation less
// per vector than negating x, the same bits; degree 3 only).
template <int kDegree = 7, bool kNegated = false, int N>
inline void exp_in_range_n(VF (&x)[N]) {
    static_assert(kDegree == 7 || kDegree == 3, "exp_in_range_n: degree 3 or 7");
    static_assert(!kNegated || kDegree == 3, "exp_in_range_n: kNegated with degree 3");
    constexpr float log2e = kNegated ? -1.44269504088896341f : 1.44269504088896341f;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    if constexpr (kDegree == 3) {
        // Base 2 without the ln 2 split: t = x log2(e) rounded (<= 5.3e-6
        // relative for |x| <= 110), f = t - floor(t) in [0, 1) in one
        // vreduceps, 2^f by a cubic (7.5e-5 relative) and vscalefps applies
        // 2^floor(t). vreduceps takes +-inf to 0: x = -inf gives 0, +inf inf.
        VF t[N], f[N], p[N];
        CPUKERN_EACH(j, N) t[j] = x[j] * log2e;
        CPUKERN_EACH(j, N) f[j] = (VF)_mm512_reduce_ps((__m512)t[j], _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        CPUKERN_EACH(j, N) p[j] = splat(0.07802403f) * f[j] + 0.22606707f;
        CPUKERN_EACH(j, N) p[j] = p[j] * f[j] + 0.69583399f;
        CPUKERN_EACH(j, N) p[j] = p[j] * f[j] + 0.99992513f;
        CPUKERN_EACH(j, N) x[j] = (VF)_mm512_scalef_ps((__m512)p[j], (__m512)t[j]);
        return;
    }
#endif
    constexpr float s = kExpAnyRange ? 1.0f : 2.0f;  // the factor folded into the coefficients
    // 1.5 * 2^23 + 126: rounds to nearest, and leaves n + 126 (the exponent
    // field of 2^(n-1), below) in the low mantissa bits
    const VF shifter = splat(12583038.0f);
    VF shifted[N], n[N], r[N], p[N];
    CPUKERN_EACH(j, N) shifted[j] = x[j] * log2e + shifter;
    CPUKERN_EACH(j, N) n[j] = shifted[j] - shifter;
    if constexpr (kDegree == 7) {  // ln 2 in two parts: r exact to float rounding
        CPUKERN_EACH(j, N) r[j] = x[j] - n[j] * 0.693359375f;
        CPUKERN_EACH(j, N) r[j] = r[j] + n[j] * 2.12194440e-4f;
    } else if constexpr (kNegated) {  // r holds -r: the cubic below takes its odd terms' sign
        CPUKERN_EACH(j, N) r[j] = x[j] + n[j] * 0.693147182f;
    } else {  // one part: |n| <= 160 moves r by < 3e-7, a small part of degree 3's error
        CPUKERN_EACH(j, N) r[j] = x[j] - n[j] * 0.693147182f;
    }
    // p = s * exp(r)
    if constexpr (kDegree == 3 && kNegated) {
        CPUKERN_EACH(j, N) p[j] = splat(-s * 0.16566774f) * r[j] + s * 0.50496238f;
        CPUKERN_EACH(j, N) p[j] = s * 1.00016415f - p[j] * r[j];
        CPUKERN_EACH(j, N) p[j] = s * 0.99992812f - p[j] * r[j];
    } else if constexpr (kDegree == 3) {  // a minimax cubic, all four coefficients fitted
        CPUKERN_EACH(j, N) p[j] = splat(s * 0.16566774f) * r[j] + s * 0.50496238f;
        CPUKERN_EACH(j, N) p[j] = p[j] * r[j] + s * 1.00016415f;
        CPUKERN_EACH(j, N) p[j] = p[j] * r[j] + s * 0.99992812f;
    } else {  // s * (the coefficients of r^7 .. r^2), then 1 + r exactly
        CPUKERN_EACH(j, N) p[j] = splat(s * 1.9875691500e-4f) * r[j] + s * 1.3981999507e-3f;
        CPUKERN_EACH(j, N) p[j] = p[j] * r[j] + s * 8.3334519073e-3f;
        CPUKERN_EACH(j, N) p[j] = p[j] * r[j] + s * 4.1665795894e-2f;
        CPUKERN_EACH(j, N) p[j] = p[j] * r[j] + s * 1.6666665459e-1f;
        CPUKERN_EACH(j, N) p[j] = p[j] * r[j] + s * 5.0000001201e-1f;
        CPUKERN_EACH(j, N) p[j] = p[j] * (r[j] * r[j]) + (r[j] * s + s);
    }
#if defined(__AVX512F__)
    CPUKERN_EACH(j, N) x[j] = (VF)_mm512_scalef_ps((__m512)p[j], (__m512)n[j]);
#else
    // 2^(n-1) from the bits of shifted (0x4b400000 + 126 + n): the shift
    // drops the offset's bits, so no float -> int conversion is needed
    CPUKERN_EACH(j, N) x[j] = p[j] * (VF)((VI)shifted[j] << 23);
#endif
}

#if defined(__AVX512F__)
// 1 / d within 2^-14 relative (vrcp14ps): enough for results rounded to
// bf16 / fp16, where half an ulp is >= 2.4e-4.
inline VF reciprocal_estimate(VF d) { return (VF)_mm512_rcp14_ps((__m512)d); }
#endif

}  // namespace simd
}  // namespace cpukern
