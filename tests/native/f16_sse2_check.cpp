// The baseline's float16 conversions (simd.h, SSE2 without F16C) against the
// compiler's own _Float16 conversions (libgcc: exact round to nearest even),
// bit for bit: every float16 -> float, and float -> float16 for every sign,
// exponent and kept mantissa with the dropped bits at each rounding case (0,
// 1, tie - 1, tie, tie + 1, all ones), plus a stride through all 2^32 patterns.
// Both again with DAZ and FTZ set. Built with -march=x86-64 by tests/test_f16_sse2.py.
#include "cpukern/simd.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#if !defined(CPUKERN_F16_SSE2)
#error "build for the x86-64 baseline (SSE2, no AVX)"
#endif

namespace {
using namespace cpukern::simd;

uint16_t want_half(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t out;
    std::memcpy(&out, &h, 2);
    return out;
}
bool nan_half(uint32_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

long bad = 0;
void report(const char* what, uint32_t in, uint32_t got, uint32_t want) {
    if (bad++ < 10) std::printf("%s %08x: got %08x, want %08x\n", what, in, got, want);
}

void check_to_float(bool daz) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const VF v = f16_bits_to_float(_mm_set1_epi32(static_cast<int>(h)));
        uint32_t got;
        std::memcpy(&got, &v, 4);
        _Float16 half;
        const uint16_t hb = static_cast<uint16_t>(h);
        std::memcpy(&half, &hb, 2);
        if (daz) _mm_setcsr(_mm_getcsr() & ~0x8040u);  // the reference without DAZ
        const float want_f = static_cast<float>(half);
        if (daz) _mm_setcsr(_mm_getcsr() | 0x8040u);
        uint32_t want;
        std::memcpy(&want, &want_f, 4);
        const bool ok = std::isnan(want_f) ? (got & 0x7fffffffu) > 0x7f800000u && (got >> 31) == (want >> 31)
                                           : got == want;
        if (!ok) report(daz ? "to float (DAZ)" : "to float", h, got, want);
    }
}

long checked = 0;
void check_from_float(uint32_t bits, bool daz) {
    const __m128i r = f16_bits_from_float((VF)_mm_castsi128_ps(_mm_set1_epi32(static_cast<int>(bits))));
    uint32_t got;
    std::memcpy(&got, &r, 4);
    if (daz) _mm_setcsr(_mm_getcsr() & ~0x8040u);
    const uint32_t want = want_half(bits);
    if (daz) _mm_setcsr(_mm_getcsr() | 0x8040u);
    bool ok = got < 65536 && (nan_half(want) ? nan_half(got) && (got >> 15) == (want >> 15) : got == want);
    // under DAZ a float subnormal reads as zero: it rounds to a float16 zero either way
    if (!ok && daz && (bits & 0x7f800000u) == 0) ok = got == (bits >> 16 & 0x8000u);
    if (!ok) report(daz ? "from float (DAZ)" : "from float", bits, got, want);
    ++checked;
}

void check_from_float_cases(bool daz) {
    for (uint32_t sign = 0; sign < 2; ++sign)
        for (uint32_t exp = 0; exp < 256; ++exp) {
            // bits of the float's mantissa that the float16 result drops: 13 for normal
            // results, more for subnormal ones (exponent below 113), all 23 from 103 down
            const int drop = exp >= 113 ? 13 : exp >= 103 ? 13 + static_cast<int>(113 - exp) : 23;
            const uint32_t tie = 1u << (drop - 1), low_mask = (1u << drop) - 1;
            const uint32_t lows[] = {0, 1, tie - 1, tie, tie + 1, low_mask};
            for (uint32_t k = 0; k < 1u << (23 - drop); ++k)
                for (uint32_t low : lows) check_from_float(sign << 31 | exp << 23 | k << drop | low, daz);
        }
    for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) check_from_float(static_cast<uint32_t>(u), daz);
}
}  // namespace

int main() {
    for (bool daz : {false, true}) {
        if (daz) _mm_setcsr(_mm_getcsr() | 0x8040u);
        check_to_float(daz);
        check_from_float_cases(daz);
    }
    std::printf("%ld float -> float16 cases and 2 x 65536 float16 -> float, %ld mismatches\n", checked, bad);
    return bad == 0 ? 0 : 1;
}
