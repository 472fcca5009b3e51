// silu_and_mul: out[r, i] = silu(x[r, i]) * x[r, d + i], silu(a) = a / (1 + exp(-a)).
// Element-wise, so the work is cut into (row, column block) units: a single
// decode token still spreads over every thread.
#include "cpukern/dtype.h"
#include "cpukern/export.h"
#include "cpukern/host.h"
#include "cpukern/parallel.h"
#include "cpukern/simd.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace cpukern {
namespace {
using namespace simd;

constexpr int64_t kBlock = 2048;  // columns per work unit (a multiple of every kLanes)

// silu(a) * b of N vectors, in a: stage by stage (CPUKERN_EACH), as one
// vector's chain is ~50 cycles deep (exp, divide, rounding) and Zen 4's FP
// scheduler does not reach far enough ahead to overlap the next vector's:
// avx2 bf16 on Zen 4, one thread, rows in cache, two vectors at a time 0.95
// of the time of one, four 0.81 (six 0.88, eight 1.07: spills).
// 16-bit outputs use a cheaper exp (degree 3; with AVX-512 the reciprocal
// estimate in place of the divider too).
template <class T, int N>
inline void silu_mul_n(VF (&a)[N], const VF (&b)[N]) {
    constexpr bool k32 = std::is_same_v<T, float>;
    VF e[N];
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    if constexpr (!k32) {
        // 16-bit outputs: e = exp(-a) by the degree-3 exp, sigmoid = 1 / (1 + e)
        // by vrcp14ps (2^-14), 10 instructions per vector with no clamp and no
        // mask: vreduceps takes +-inf to 0, so a = +inf gives e = 0 (silu = inf),
        // a = -inf e = inf (NaN, as -inf * 0); below a = -88.7 e overflows and
        // silu is -0, as in the float32 scalar reference and torch; a NaN stays
        // NaN. Every bf16 / fp16 input within 1 ulp of the correctly rounded
        // silu (20 / 1958 of the 65536 off by one). The exp(-|a|) form below
        // (sigmoid of a < 0 as e / (1 + e), exact down to silu(-103); 26 /
        // 1640) took 1.19-1.20x this one's time on Zen 4.
        CPUKERN_EACH(j, N) e[j] = a[j];
        exp_in_range_n<3, true>(e);
        CPUKERN_EACH(j, N) a[j] = a[j] * reciprocal_estimate(1.0f + e[j]) * b[j];
        return;
    }
    // float32: e = exp(-|a|) in [0, 1], subnormals included (vscalefps): 1 + e
    // never overflows, and a < 0 takes sigmoid(a) = e / (1 + e), exact down to
    // silu(-103). -min(|a|, 110) in one vrangeps (a NaN stays NaN, and so does
    // the product); degree 7 (0.98 of the time with the vrangeps). The divider:
    // exact, and as cheap as estimate + Newton step on AMD's cores.
    CPUKERN_EACH(j, N) e[j] = (VF)_mm512_range_ps((__m512)a[j], _mm512_set1_ps(110.0f), 0xE);
    exp_in_range_n<7>(e);
    CPUKERN_EACH(j, N) {
        auto negative = _mm512_cmp_ps_mask((__m512)a[j], _mm512_setzero_ps(), _CMP_LT_OQ);
        VF numerator = (VF)_mm512_mask_mov_ps(_mm512_set1_ps(1.0f), negative, (__m512)e[j]);
        a[j] = a[j] * (numerator / (1.0f + e[j])) * b[j];
    }
#else
    // exp(-a) for a in [-89.5, 20]: above 20, 1 + e rounds to 1; from
    // -88.72 down e is inf (as exp(-a) overflows float32 in the scalar
    // reference and in torch), so a / inf is -0 (NaN for a = -inf). A NaN
    // quotient stays NaN whatever the clamp made of it. One divide: a single
    // uop to issue. Degree 3 for 16-bit outputs (degree 5 before it: 1.15x the
    // time with avx2 on Zen 4; every bf16 / fp16 input still within 1 ulp),
    // the negation folded into its constants.
    if constexpr (k32) {
        CPUKERN_EACH(j, N) e[j] = vmin(vmax(-a[j], splat(-20.0f)), splat(kExpInf));
        exp_in_range_n<7>(e);
    } else {
        CPUKERN_EACH(j, N) e[j] = vmin(vmax(a[j], splat(-kExpInf)), splat(20.0f));
        exp_in_range_n<3, true>(e);
    }
    CPUKERN_EACH(j, N) a[j] = a[j] / (1.0f + e[j]) * b[j];
#endif
}
template <class T>
inline VF silu_mul(VF a, VF b) {
    VF r[1] = {a};
    const VF m[1] = {b};
    silu_mul_n<T>(r, m);
    return r[0];
}

// 2 * P vectors of out from a and b, in the unordered pair order
template <int P, class T>
inline void silu_and_mul_pairs(T* out, const T* a, const T* b) {
    VF av[2 * P], bv[2 * P];
    CPUKERN_EACH(j, P) {
        load_pair_unordered(a + 2 * j * kLanes, av[2 * j], av[2 * j + 1]);
        load_pair_unordered(b + 2 * j * kLanes, bv[2 * j], bv[2 * j + 1]);
    }
    silu_mul_n<T>(av, bv);
    CPUKERN_EACH(j, P) store_pair_unordered_nearest(out + 2 * j * kLanes, av[2 * j], av[2 * j + 1]);
}

// How far ahead of its loads silu_and_mul fetches both input rows into L1
// (past the block's end too: that is the next block's). Zen 4 class, 512 x
// 22016 (32 MiB, beyond what each core's share of L3 keeps): bf16 avx512bf16
// 0.88-0.91 of the time on one thread and two, avx2 0.95-0.97 (its exp is
// the longer part), fp32 0.97; 256 / 1024 / 2048 bytes did no better, into
// L2 (prefetcht1) nothing; rows in cache 1.00.
constexpr size_t kSiluAhead = 512;

template <class T>
void silu_and_mul_block(T* out, const T* a, const T* b, int64_t n) {
    constexpr int kPairs = 2;  // four vectors at a time (see silu_mul_n; avx512: 1 pair 1.05x, 3 0.99x, 4 1.02x)
    constexpr int64_t kStep = 2 * kPairs * kLanes;
    int64_t i = 0;
    for (; i + kStep <= n; i += kStep) {
        for (size_t off = kSiluAhead; off < kSiluAhead + kStep * sizeof(T); off += 64) {
            __builtin_prefetch(reinterpret_cast<const char*>(a + i) + off, 0, 3);
            __builtin_prefetch(reinterpret_cast<const char*>(b + i) + off, 0, 3);
        }
        silu_and_mul_pairs<kPairs>(out + i, a + i, b + i);
    }
    for (; i + 2 * kLanes <= n; i += 2 * kLanes) silu_and_mul_pairs<1>(out + i, a + i, b + i);
    for (; i + kLanes <= n; i += kLanes) store_fast(out + i, silu_mul<T>(load(a + i), load(b + i)));
    if (i < n) {
        int m = static_cast<int>(n - i);
        store_partial(out + i, silu_mul<T>(load_partial(a + i, m), load_partial(b + i, m)), m);
    }
}

#if (defined(__AVX2__) || (defined(__SSE2__) && !defined(__AVX__))) && !defined(CPUKERN_SILU_NO_LUT)
#define CPUKERN_SILU_LUT 1
// 16-bit inputs have 65536 values: silu(a) for each, as float (256 KiB, the
// hot part - |a| within a few powers of two of 1 - a few KiB of it), read by
// vpgatherdd (SSE2: scalar loads). Exact to float rounding, and a few loads
// instead of ~20 uops.
template <class T>
struct SiluTable {
    float value[65536];
    SiluTable() {
        for (uint32_t bits = 0; bits < 65536; ++bits) {
            double a = to_float(T{static_cast<uint16_t>(bits)});
            value[bits] = static_cast<float>(a != a ? a : a / (1.0 + std::exp(-a)));
        }
    }
};
template <class T>
const float* silu_table() {
    static const SiluTable<T> table;  // built on first use, thread-safe
    return table.value;
}
#if defined(__AVX512F__)
constexpr bool kHardwareGather = true;
using VIdx = __m512i;
inline VF gather(const float* table, VIdx idx) { return (VF)_mm512_i32gather_ps(idx, table, 4); }
inline VIdx widen_bits(const void* p) { return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)); }
#elif !defined(__AVX2__)
// SSE2 has no gather: four scalar loads (the indices through memory). On Zen
// 4 the baseline's bf16 512 x 22016 took 0.46 of its polynomial's time (no
// FMA, four lanes: ~5 cycles per element).
constexpr bool kHardwareGather = false;
using VIdx = __m128i;
inline VF gather(const float* table, VIdx idx) {
    uint32_t i[4];
    std::memcpy(i, &idx, sizeof i);
    return VF{table[i[0]], table[i[1]], table[i[2]], table[i[3]]};
}
// (no widen_bits: both 16-bit types split their pairs on SSE2)
#else
constexpr bool kHardwareGather = true;
using VIdx = __m256i;
inline VF gather(const float* table, VIdx idx) { return (VF)_mm256_i32gather_ps(table, idx, 4); }
inline VIdx widen_bits(const void* p) { return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)); }
#endif
// silu of 2 * kLanes 16-bit inputs, in load_pair<T>'s lane order
template <class T>
inline void gather_silu_pair(const float* table, const T* a, VF& s0, VF& s1) {
#if defined(CPUKERN_BF16_PAIRS_SPLIT)
#if defined(CPUKERN_F16_SSE2)
    constexpr bool kSplit = true;  // float16 pairs split too
#else
    constexpr bool kSplit = std::is_same_v<T, bf16_t>;
#endif
    if constexpr (kSplit) {  // odd elements, then even ones
        const VIpair v = pair_load(a);
        s0 = gather(table, (VIdx)(v >> 16));
        s1 = gather(table, (VIdx)(v & 0xffffu));
    } else
#endif
    {
        s0 = gather(table, widen_bits(a));
        s1 = gather(table, widen_bits(a + kLanes));
    }
}
// vpgatherdd is the cheap part only where gathers run at load speed: Intel's
// Gather Data Sampling mitigation (microcode for Skylake .. Ice Lake / Tiger
// Lake) makes every gather several times slower, and there the polynomial
// wins; Linux says so in sysfs. AMD's cores gather slowly too: on Zen 4, bf16
// 512 x 22016 took 0.71 of the table's time with avx512bf16's polynomial and
// 0.95 with avx2's (degree 3; with degree 5 the table won, 0.96). The
// baseline's scalar loads are neither: it always takes the table.
// CPUKERN_SILU_LUT=0 / 1 overrides (read per call, so tests run both paths).
bool gather_mitigated() {
    std::FILE* f = std::fopen("/sys/devices/system/cpu/vulnerabilities/gather_data_sampling", "r");
    if (!f) return false;
    char line[32] = {};
    bool mitigated = std::fgets(line, sizeof line, f) && std::strncmp(line, "Mitigation", 10) == 0;
    std::fclose(f);
    return mitigated;
}
bool use_silu_table() {
    if (const char* force = std::getenv("CPUKERN_SILU_LUT"); force && (!std::strcmp(force, "0") || !std::strcmp(force, "1")))
        return force[0] == '1';
    static const bool slow =
        kHardwareGather && (gather_mitigated() || host_vendor_is("AuthenticAMD"));
    return !slow;
}

template <class T>
void silu_and_mul_block_lut(T* out, const T* a, const T* b, int64_t n, const float* table) {
    int64_t i = 0;
    for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
        VF s0, s1, b0, b1;
        gather_silu_pair(table, a + i, s0, s1);
        load_pair(b + i, b0, b1);
        store_pair_fast(out + i, s0 * b0, s1 * b1);
    }
    for (; i < n; ++i) out[i] = from_float<T>(table[a[i].bits] * to_float(b[i]));
}
#endif

template <class T>
void silu_and_mul(T* out, const T* x, int64_t rows, int64_t d, int64_t x_stride, int64_t out_stride) {
    const int64_t blocks = (d + kBlock - 1) / kBlock;
    // ~16K elements per chunk before a second thread joins in
    int64_t grain = (int64_t{1} << 14) / kBlock;
#if CPUKERN_SILU_LUT
    const float* table = nullptr;
    if constexpr (!std::is_same_v<T, float>)
        if (use_silu_table()) table = silu_table<T>();
#endif
    parallel_for_dynamic(rows * blocks, grain, [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
            int64_t r = u / blocks, c = (u % blocks) * kBlock;
            int64_t n = d - c < kBlock ? d - c : kBlock;
            const T* xr = x + r * x_stride;
#if CPUKERN_SILU_LUT
            if constexpr (!std::is_same_v<T, float>) {
                if (table) {
                    silu_and_mul_block_lut(out + r * out_stride + c, xr + c, xr + d + c, n, table);
                    continue;
                }
            }
#endif
            silu_and_mul_block(out + r * out_stride + c, xr + c, xr + d + c, n);
        }
    });
}

}  // namespace
}  // namespace cpukern

CPUKERN_API int32_t cpukern_silu_and_mul(void* out, const void* x, int64_t rows, int64_t d, int64_t x_stride,
                                         int64_t out_stride, int32_t dtype) {
    if (rows < 0 || d < 0) return CPUKERN_EINVAL;
    // CPUKERN_SILU_LUT is "0", "1" or unset (empty) on every variant, whether it reads it or not
    if (const char* force = std::getenv("CPUKERN_SILU_LUT");
        force && *force && std::strcmp(force, "0") != 0 && std::strcmp(force, "1") != 0)
        return CPUKERN_EENV;
    if (rows == 0 || d == 0) return cpukern::by_dtype(dtype, [](auto) {});
    return cpukern::by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        cpukern::silu_and_mul(static_cast<T*>(out), static_cast<const T*>(x), rows, d, x_stride, out_stride);
    });
}

CPUKERN_SLOTS(cpukern_silu_and_mul)
