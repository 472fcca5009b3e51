// Emulation header for tests/test_simde_avx512.py ONLY: the x86 intrinsics of
// the AVX-512 variants from SIMD Everywhere (Debian libsimde-dev 0.7.4), in
// SIMDe's portable implementation, so the kernels' AVX-512 code (index math,
// packing, tails, epilogues) executes on a host without AVX-512. Included by
// csrc/include/cpukern/intrin.h when CPUKERN_SIMDE is defined; never part of
// a production build. The test defines the variant's feature macros
// (__AVX512F__, ...) and SIMDE_NO_NATIVE itself, so no native AVX-512 code
// can be emitted and SIMDe never includes the compiler's <immintrin.h>.
#pragma once

#if !defined(SIMDE_NO_NATIVE) || !defined(SIMDE_ENABLE_NATIVE_ALIASES)
#error "cpukern_simde.h: build with -DSIMDE_NO_NATIVE -DSIMDE_ENABLE_NATIVE_ALIASES"
#endif

#include <cstdint>
#include <cstring>

#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>

// ALIAS FIXES (names only; the functions are SIMDe's): 0.7.4 declares the
// native alias _mm512_madd_epi16 with the masked form's four parameters, and
// aliases every _MM_FROUND_* constant except _MM_FROUND_NO_EXC.
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16((a), (b))
#if !defined(_MM_FROUND_NO_EXC)
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#endif

// ----------------------------------------------------------------------------
// FALLBACKS: intrinsics cpukern uses that SIMDe 0.7.4 lacks. Each is defined
// only while SIMDe does not provide the name (a newer SIMDe takes over). The
// first eight are built from SIMDe's own validated operations by an identity
// the Intel SDM states; _mm512_cvtneps_pbh is OUR transcription of the SDM
// pseudocode of VCVTNEPS2BF16 and therefore does NOT verify that instruction:
// the emulated avx512bf16 bf16 stores test the kernels around it only.
// ----------------------------------------------------------------------------

// vpmovzxwd zmm: zero-extend 16 x u16 -> 16 x i32 (two SIMDe AVX2 halves).
#if !defined(_mm512_cvtepu16_epi32)
static inline simde__m512i cpukern_simde_mm512_cvtepu16_epi32(simde__m256i a) {
    simde__m256i lo = simde_mm256_cvtepu16_epi32(simde_mm256_castsi256_si128(a));
    simde__m256i hi = simde_mm256_cvtepu16_epi32(simde_mm256_extracti128_si256(a, 1));
    return simde_mm512_inserti64x4(simde_mm512_castsi256_si512(lo), hi, 1);
}
#define _mm512_cvtepu16_epi32(a) cpukern_simde_mm512_cvtepu16_epi32(a)
#endif

// vpermilps zmm, imm8 == vshufps zmm with both sources equal (SDM: the same
// 2-bit selectors within each 128-bit lane).
#if !defined(_mm512_permute_ps)
#define _mm512_permute_ps(a, imm8) simde_mm512_shuffle_ps((a), (a), (imm8))
#endif

// The intrinsics guide's REDUCE_ADD: halve the vector, add the halves
// lane-wise, repeat (the pairing a native compiler emits too).
#if !defined(_mm512_reduce_add_ps)
static inline float cpukern_simde_mm512_reduce_add_ps(simde__m512 a) {
    float lanes[16];
    simde_mm512_storeu_ps(lanes, a);
    for (int half = 8; half > 0; half /= 2)
        for (int i = 0; i < half; ++i) lanes[i] += lanes[i + half];
    return lanes[0];
}
#define _mm512_reduce_add_ps(a) cpukern_simde_mm512_reduce_add_ps(a)
#endif

// vcvtph2ps / vcvtps2ph zmm: two SIMDe F16C conversions of 8 lanes each.
#if !defined(_mm512_cvtph_ps)
static inline simde__m512 cpukern_simde_mm512_cvtph_ps(simde__m256i a) {
    simde__m256 lo = simde_mm256_cvtph_ps(simde_mm256_castsi256_si128(a));
    simde__m256 hi = simde_mm256_cvtph_ps(simde_mm256_extracti128_si256(a, 1));
    return simde_mm512_castsi512_ps(simde_mm512_inserti64x4(
        simde_mm512_castsi256_si512(simde_mm256_castps_si256(lo)), simde_mm256_castps_si256(hi), 1));
}
#define _mm512_cvtph_ps(a) cpukern_simde_mm512_cvtph_ps(a)
#endif
#if !defined(_mm512_cvtps_ph)
static inline simde__m256i cpukern_simde_mm512_cvtps_ph(simde__m512 a, int rounding) {
    const simde__m512i bits = simde_mm512_castps_si512(a);
    simde__m128i lo = simde_mm256_cvtps_ph(simde_mm256_castsi256_ps(simde_mm512_castsi512_si256(bits)), rounding);
    simde__m128i hi = simde_mm256_cvtps_ph(simde_mm256_castsi256_ps(simde_mm512_extracti64x4_epi64(bits, 1)), rounding);
    return simde_mm256_set_m128i(hi, lo);
}
#define _mm512_cvtps_ph(a, rounding) cpukern_simde_mm512_cvtps_ph((a), (rounding))
#endif

// vreduceps zmm: the SDM defines it as src - ROUND(src * 2^M) * 2^-M with
// VRNDSCALE's immediate encoding, so it is src minus SIMDe's roundscale -
// except for infinities, which reduce to +0 (the SDM's special cases; Zen 4
// does so), not inf - inf.
#if !defined(_mm512_reduce_ps)
static inline simde__m512 cpukern_simde_reduce_infinities(simde__m512 a, simde__m512 reduced) {
    float in[16], out[16];
    simde_mm512_storeu_ps(in, a);
    simde_mm512_storeu_ps(out, reduced);
    for (int i = 0; i < 16; ++i)
        if (in[i] == in[i] && in[i] - in[i] != in[i] - in[i]) out[i] = 0.0f;  // +-inf: inf - inf is NaN
    return simde_mm512_loadu_ps(out);
}
#define _mm512_reduce_ps(a, imm8) \
    cpukern_simde_reduce_infinities((a), simde_mm512_sub_ps((a), simde_mm512_roundscale_ps((a), (imm8))))
#endif

// vgatherdps zmm without a mask: lane i loads base + idx[i] * scale (SDM), so
// it is two SIMDe ymm gathers of the index halves.
#if !defined(_mm512_i32gather_ps)
#define _mm512_i32gather_ps(idx, base, scale)                                                                     \
    simde_mm512_insertf32x8(                                                                                      \
        simde_mm512_castps256_ps512(                                                                              \
            simde_mm256_i32gather_ps((const simde_float32*)(base), simde_mm512_castsi512_si256(idx), (scale))),   \
        simde_mm256_i32gather_ps((const simde_float32*)(base), simde_mm512_extracti64x4_epi64((idx), 1), (scale)), \
        1)
#endif

// vrcp14ps zmm: the SDM bounds its relative error by 2^-14; the exact
// reciprocal is inside that bound (the kernels' tolerance of the estimate
// is checked natively, not here).
#if !defined(_mm512_rcp14_ps)
#define _mm512_rcp14_ps(a) simde_mm512_div_ps(simde_mm512_set1_ps(1.0f), (a))
#endif

// vcvtneps2bf16 zmm -> ymm, after the SDM's convert_fp32_to_bfloat16: zero
// and denormal inputs give a signed zero, infinities truncate, NaNs truncate
// and get the quiet bit, normal numbers round to nearest even. NOT VERIFIED
// against hardware or SIMDe: an independent transcription.
#if !defined(_mm512_cvtneps_pbh)
static inline simde__m256bh cpukern_simde_mm512_cvtneps_pbh(simde__m512 a) {
    uint32_t in[16];
    uint16_t out[16];
    simde_mm512_storeu_ps(reinterpret_cast<float*>(in), a);
    for (int i = 0; i < 16; ++i) {
        const uint32_t x = in[i], exponent = x & 0x7f800000u, mantissa = x & 0x007fffffu;
        if (exponent == 0)  // zero or denormal
            out[i] = static_cast<uint16_t>((x >> 16) & 0x8000u);
        else if (exponent == 0x7f800000u)  // infinity or NaN
            out[i] = static_cast<uint16_t>((x >> 16) | (mantissa ? 0x40u : 0u));
        else
            out[i] = static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
    simde__m256bh r;
    static_assert(sizeof r == sizeof out, "__m256bh holds 16 bf16 values");
    std::memcpy(&r, out, sizeof r);
    return r;
}
#define _mm512_cvtneps_pbh(a) cpukern_simde_mm512_cvtneps_pbh(a)
#endif

// vcvtne2ps2bf16 zmm: lanes 0-15 from b, 16-31 from a (the SDM's order), each
// half narrowed by _mm512_cvtneps_pbh above - the same caveat applies.
#if !defined(_mm512_cvtne2ps_pbh)
static inline simde__m512bh cpukern_simde_mm512_cvtne2ps_pbh(simde__m512 a, simde__m512 b) {
    const simde__m256bh lo = _mm512_cvtneps_pbh(b), hi = _mm512_cvtneps_pbh(a);
    simde__m512bh r;
    static_assert(sizeof r == 2 * sizeof lo, "__m512bh holds 32 bf16 values");
    std::memcpy(&r, &lo, sizeof lo);
    std::memcpy(reinterpret_cast<char*>(&r) + sizeof lo, &hi, sizeof hi);
    return r;
}
#define _mm512_cvtne2ps_pbh(a, b) cpukern_simde_mm512_cvtne2ps_pbh((a), (b))
#endif
