// Micro-kernels written once with GCC/Clang vector extensions; their width
// follows the variant (SSE2 / AVX2 / AVX-512 / NEON / z vector facility):
//  - bf16: packed B lanes hold bf16 pairs; widening is a shift (even k) and a
//    mask (odd k), then two FMAs per row with A pre-converted to float.
//  - int8: packed B lanes hold int8 quads; each 16-bit half is split into
//    its sign-extended even and odd byte, and pmaddwd-style multiply-adds of
//    16-bit pairs accumulate in int32: exact, no saturation (the vpmaddubsw
//    trick saturates at 2 * 255 * 128). From 16 rows on the split is done once
//    per block into an int16 panel (GenericInt8Wide), as bf16 widens into a
//    float panel (GenericBf16Wide). One row on x86 (AVX2, AVX-512 BW) takes
//    vpmaddubsw after all, on A's nibbles, where it cannot saturate (NibbleGemv).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cpukern/gemm.h"
#include "cpukern/simd.h"

#include "cpukern/intrin.h"

namespace cpukern {
namespace gemm {

using simd::kBytes;
using simd::VI;
using simd::VU;

#if defined(__AVX512F__) || defined(__aarch64__) || (defined(__s390x__) && defined(__VEC__))
constexpr int kVecRegs = 32;
#else
constexpr int kVecRegs = 16;
#endif

// How far ahead the one- and two-row kernels below fetch B (stream_ahead; 0:
// not at all, the hardware prefetchers alone). On 256-bit vectors (avx2) 256
// bytes: on the Zen 4 class host, alternating builds in one process, bf16 32
// MiB of weights 0.81-0.88 of the time with 512 (0.69 once), 256 MiB 0.85 /
// 0.98, int8 128 MiB 0.87, 16 MiB 1.00; SSE2 keeps 512 (with 128: 1.04).
// 512-bit vectors none since each thread reads the same columns every call
// (gemm.h, run): bf16 32 MiB 0.91-0.92 of the time, 256 MiB 0.90-0.96, int8
// 16 / 128 MiB 1.00 / 0.95-1.00 (avx512).
constexpr int64_t kGemvAhead = kBytes == 32 ? 256 : kBytes == 64 ? 0 : kStreamAhead;

typedef int16_t VS __attribute__((vector_size(kBytes)));
typedef uint16_t VUS __attribute__((vector_size(kBytes)));

// Sum of the products of the two 16-bit halves of each 32-bit lane.
inline VI madd16(VS a, VS b) {
#if defined(__AVX512BW__) && defined(__AVX512F__)
    return (VI)_mm512_madd_epi16((__m512i)a, (__m512i)b);
#elif defined(__AVX2__) && !defined(__AVX512F__)
    return (VI)_mm256_madd_epi16((__m256i)a, (__m256i)b);
#elif defined(__SSE2__) && !defined(__AVX__)
    return (VI)_mm_madd_epi16((__m128i)a, (__m128i)b);
#else
    VI ai = (VI)a, bi = (VI)b;
    return ((ai << 16) >> 16) * ((bi << 16) >> 16) + (ai >> 16) * (bi >> 16);
#endif
}

template <class V>
inline V load_vec(const void* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <class V>
inline void store_vec(void* p, V v) {  // by value: the accumulators stay in registers
    std::memcpy(p, &v, sizeof v);
}
// A scheduling barrier on one vector register: it is taken as computed so far.
// Only a hint (no effect on results), left out where the vector type is not
// one register (SIMDe's emulated AVX-512) or no constraint names one.
template <class T>
inline void keep_in_register(T& v) {
#if (defined(__x86_64__) || defined(__i386__)) && !defined(CPUKERN_SIMDE)
    __asm__("" : "+v"(v));
#elif defined(__aarch64__)
    __asm__("" : "+w"(v));
#else
    (void)v;
#endif
}
// One 32-bit value broadcast to every lane, as an integer splat: a float
// splat (simd::splat) adds +0.0f, and a lane-by-lane loop gets SLP-vectorised
// into shuffles; this compiles to vpbroadcastd / ld1r / vlrepf from memory.
inline VI bcast(const uint32_t* p) { return VI{} + int32_t(*p); }
inline simd::VF bcast(const float* p) {
    uint32_t u;
    std::memcpy(&u, p, 4);
    return (simd::VF)(VU{} + u);
}

// Few rows (GEMV): widen B in the micro-kernel, each B panel is used once.
struct GenericBf16 : KernelDefaults {
    using AIn = bf16_t;
    using APack = float;
    using Acc = float;
    static constexpr int V = 2;  // vectors per row of the tile
    static constexpr int NR = V * simd::kLanes;
    static constexpr int MR = kVecRegs == 32 ? 8 : 4;  // 4 x 2 accumulators + B + mask fit 16 registers
    static constexpr int KG = 2, kAkg = 2, APER = 2;
    static constexpr int64_t kMcTarget = 96, kNcTarget = 256, kKcTarget = 256;
    static constexpr bool kOffsetA = false, kPrefetchInMicro = true, kDenseGemv = true;
    static constexpr const char* kName = "widen+fma";

    static void begin() {}
    static void end() {}
    static void pack_a(const bf16_t* s, float* d) {
        d[0] = simd::to_float(s[0]);
        d[1] = simd::to_float(s[1]);
    }

    // One or two rows (GEMV) would chain every FMA of a column vector through
    // one accumulator (latency-bound: 4 cycles each on Zen 3/4, a quarter of the
    // FMA rate); S independent sets, one per (group parity, even/odd k), summed
    // at the end, keep 4 / 2 x V chains in flight. More rows have R x V chains.
    static constexpr int sets(int R) { return R == 1 ? 4 : R == 2 ? 2 : 1; }

    template <int R, int AS = MR>
    static void micro(const float* a, const uint8_t* b, int64_t kk, float* c, int64_t ldc, bool load_c,
                      Prefetch next) {
        constexpr int S = sets(R);
        simd::VF acc[S][R][V];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) {
                acc[0][r][v] = load_c ? simd::load(c + r * ldc + v * simd::kLanes) : simd::VF{};
#pragma GCC unroll 4
                for (int s = 1; s < S; ++s) acc[s][r][v] = simd::VF{};
            }
        const int64_t groups = kk / KG;
        // set (2 * g + half) % S takes group g's even (half 0) or odd (half 1) k
        auto step = [&](int64_t g, int s0) {
            const uint8_t* bg = b + g * NR * 4;
            if constexpr (kStreamsB<R> && kGemvAhead > 0) stream_ahead<NR * 4, kGemvAhead>(bg);
            const float* ag = a + g * AS * 2;
            // each B vector loaded once: GCC otherwise loads it again as the mask's memory operand, and a
            // one-row product then waits on the load ports - 3.9 cycles per 64 bytes of B on Zen 4 (avx2,
            // one thread, in L3); loaded once, 0.84 of the time there, 0.92 at 32 MiB, 0.95 at 256 MiB
            // (two threads), avx512 0.81 at 32 MiB; 8 rows unchanged (docs/gemm-log.md)
            VU raw[V];
            simd::VF e[V];
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) {
                raw[v] = load_vec<VU>(bg + v * kBytes);
                keep_in_register(raw[v]);
                e[v] = (simd::VF)(raw[v] << 16);
            }
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) {
                const simd::VF ae = bcast(ag + 2 * r);
#pragma GCC unroll 4
                for (int v = 0; v < V; ++v) acc[s0][r][v] = acc[s0][r][v] + ae * e[v];
            }
            simd::VF o[V];
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) o[v] = (simd::VF)(raw[v] & 0xffff0000u);
            const int s1 = (s0 + 1) % S;
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) {
                const simd::VF ao = bcast(ag + 2 * r + 1);
#pragma GCC unroll 4
                for (int v = 0; v < V; ++v) acc[s1][r][v] = acc[s1][r][v] + ao * o[v];
            }
        };
        if constexpr (!kStreamsB<R>) {
            k_loop(groups, next, [&](int64_t g) { step(g, 0); });
        } else {  // streamed with stream_ahead
            int64_t g = 0;
            if constexpr (S == 4) {
                for (; g + 2 <= groups; g += 2) {
                    step(g, 0);
                    step(g + 1, 2);
                }
            }
            for (; g < groups; ++g) step(g, 0);
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) {
                simd::VF sum = acc[0][r][v];
#pragma GCC unroll 4
                for (int s = 1; s < S; ++s) sum = sum + acc[s][r][v];
                store_vec(c + r * ldc + v * simd::kLanes, sum);
            }
    }
};

// The B panel of the widened-panel kernels: each lane group's kBytes vectors
// split in two (`split(x)` -> {even k, odd k}), stored as rows 2g and 2g + 1.
template <int V, class In, class Out, class Split>
inline void split_panel(const uint8_t* b, int64_t groups, Out* dst, const Split& split) {
    uint8_t* d = reinterpret_cast<uint8_t*>(dst);
    for (int64_t g = 0; g < groups; ++g) {
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
            const auto [even, odd] = split(load_vec<In>(b + (g * V + v) * kBytes));
            store_vec(d + (2 * g * V + v) * kBytes, even);
            store_vec(d + ((2 * g + 1) * V + v) * kBytes, odd);
        }
    }
}

// The micro-kernel of the widened-panel kernels (GenericBf16Wide, GenericInt8Wide):
// per k group two halves (even, odd), each V panel vectors of kBytes against R
// broadcast A values; `mac(acc[r], a_of_row_r, b)` accumulates one row. With
// `kFence` each half's sums are taken as computed: GCC reassociates integer adds
// (it summed both halves' products first and spilled them: 15 of 16 registers
// are taken). With `kFetch` a share of `next` goes every kPrefetchChunk groups
// when it is over a burst's worth (the test is per group: k_loop's lambda form
// changed GCC's code for the int8 and ymm kernels, 1.07-1.47x the time).
// With `kSumsAsFloat` the sums are int32 bit patterns added as floats (see
// GenericInt8WideF): they start at zero and go into C with integer adds.
template <int R, int MR, int V, bool kFence, bool kFetch, class AccV, class BV, class APack, class Acc, class Mac,
          bool kSumsAsFloat = false>
inline void widened_panel_micro(const APack* a, const uint8_t* b, int64_t groups, Acc* c, int64_t ldc, bool load_c,
                                const Prefetch& next, const Mac& mac) {
    const bool spread = kFetch && next.bytes > 1024;
    const int64_t fetch = spread ? next.per_step(ceil_div(groups, kPrefetchChunk)) : 0;
    if (kFetch && !spread) next.step(0, next.bytes);
    AccV acc[R][V];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v)
            acc[r][v] = load_c && !kSumsAsFloat ? load_vec<AccV>(c + r * ldc + v * simd::kLanes) : AccV{};
    for (int64_t g = 0; g < groups; ++g) {
        if constexpr (kFetch)
            if (spread && g % kPrefetchChunk == 0) next.step(g / kPrefetchChunk, fetch);
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
            const APack* ah = a + g * MR * 2 + half;
            const uint8_t* bh = b + (2 * g + half) * V * kBytes;
            BV bv[V];
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) bv[v] = load_vec<BV>(bh + v * kBytes);
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) mac(acc[r], ah + 2 * r, bv);
            if constexpr (kFence) {
#pragma GCC unroll 16
                for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
                    for (int v = 0; v < V; ++v) keep_in_register(acc[r][v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
            Acc* cv = c + r * ldc + v * simd::kLanes;
            if constexpr (kSumsAsFloat)
                store_vec(cv, load_c ? load_vec<VI>(cv) + (VI)acc[r][v] : (VI)acc[r][v]);
            else
                store_vec(cv, acc[r][v]);
        }
}

#if defined(__x86_64__) && defined(__SSE2__) && !defined(__AVX__) && !defined(CPUKERN_SIMDE)
#define CPUKERN_SSE2_TILE 1
// The widened-panel kernels' full 6 x 8 tile on SSE2 (the baseline), written
// out: GCC's code for it keeps accumulators on the stack (no three-operand
// forms, 16 registers) and broadcasts each A value with movd + pshufd. Here
// 12 accumulators, the two B vectors of a half group, A broadcast straight
// from memory by one pshufd (the A panel is 16-byte aligned: 12 values per
// group) and one product register; the second product overwrites A. `MUL` /
// `ADD`: mulps / addps (bf16 widened to float) or pmaddwd / paddd (int16).
#define CPUKERN_SSE2_ROW(MOV, MUL, ADD, AOFF, IMM, ACC0, ACC1)    \
    "pshufd $" #IMM ", " #AOFF "(%[a]), %%xmm14\n\t"               \
    MOV " %%xmm12, %%xmm15\n\t"                                   \
    MUL " %%xmm14, %%xmm15\n\t"                                   \
    ADD " %%xmm15, %[" #ACC0 "]\n\t"                               \
    MUL " %%xmm13, %%xmm14\n\t"                                   \
    ADD " %%xmm14, %[" #ACC1 "]\n\t"
// half h of a group: B's vectors at 32 h, row r's A value at float 2 r + h
#define CPUKERN_SSE2_HALF(MOV, MUL, ADD, BOFF0, BOFF1, O0, L0, O1, L1, O2, L2, O3, L3, O4, L4, O5, L5) \
    MOV " " #BOFF0 "(%[b]), %%xmm12\n\t"                                                           \
    MOV " " #BOFF1 "(%[b]), %%xmm13\n\t"                                                           \
    CPUKERN_SSE2_ROW(MOV, MUL, ADD, O0, L0, c00, c01)                                               \
    CPUKERN_SSE2_ROW(MOV, MUL, ADD, O1, L1, c10, c11)                                               \
    CPUKERN_SSE2_ROW(MOV, MUL, ADD, O2, L2, c20, c21)                                               \
    CPUKERN_SSE2_ROW(MOV, MUL, ADD, O3, L3, c30, c31)                                               \
    CPUKERN_SSE2_ROW(MOV, MUL, ADD, O4, L4, c40, c41)                                               \
    CPUKERN_SSE2_ROW(MOV, MUL, ADD, O5, L5, c50, c51)
// (offset, lane * 0x55) of A's floats 0, 2, .. 10 and 1, 3, .. 11 in a group
#define CPUKERN_SSE2_GROUP(MOV, MUL, ADD)                                                                \
    CPUKERN_SSE2_HALF(MOV, MUL, ADD, 0, 16, 0, 0x00, 0, 0xaa, 16, 0x00, 16, 0xaa, 32, 0x00, 32, 0xaa) \
    CPUKERN_SSE2_HALF(MOV, MUL, ADD, 32, 48, 0, 0x55, 0, 0xff, 16, 0x55, 16, 0xff, 32, 0x55, 32, 0xff)

template <bool kFloat, class V4>
inline void sse2_tile_6x8(const void* a, const void* b, int64_t groups, void* c, int64_t ldc_bytes, bool load_c) {
    V4 acc[6][2];
    char* cb = static_cast<char*>(c);
    for (int r = 0; r < 6; ++r)
        for (int v = 0; v < 2; ++v) acc[r][v] = load_c ? load_vec<V4>(cb + r * ldc_bytes + 16 * v) : V4{};
    if (groups > 0) {
        const char* ap = static_cast<const char*>(a);
        const char* bp = static_cast<const char*>(b);
#define CPUKERN_SSE2_OPERANDS                                                                         \
    : [c00] "+x"(acc[0][0]), [c01] "+x"(acc[0][1]), [c10] "+x"(acc[1][0]), [c11] "+x"(acc[1][1]),    \
      [c20] "+x"(acc[2][0]), [c21] "+x"(acc[2][1]), [c30] "+x"(acc[3][0]), [c31] "+x"(acc[3][1]),    \
      [c40] "+x"(acc[4][0]), [c41] "+x"(acc[4][1]), [c50] "+x"(acc[5][0]), [c51] "+x"(acc[5][1]),    \
      [a] "+r"(ap), [b] "+r"(bp), [g] "+r"(groups)                                                    \
    :                                                                                                 \
    : "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc"
        if constexpr (kFloat)
            __asm__ volatile("1:\n\t" CPUKERN_SSE2_GROUP("movaps", "mulps", "addps")
                             "add $48, %[a]\n\tadd $64, %[b]\n\tdec %[g]\n\tjnz 1b" CPUKERN_SSE2_OPERANDS);
        else
            __asm__ volatile("1:\n\t" CPUKERN_SSE2_GROUP("movdqa", "pmaddwd", "paddd")
                             "add $48, %[a]\n\tadd $64, %[b]\n\tdec %[g]\n\tjnz 1b" CPUKERN_SSE2_OPERANDS);
#undef CPUKERN_SSE2_OPERANDS
    }
    for (int r = 0; r < 6; ++r)
        for (int v = 0; v < 2; ++v) store_vec(cb + r * ldc_bytes + 16 * v, acc[r][v]);
}
#undef CPUKERN_SSE2_GROUP
#undef CPUKERN_SSE2_HALF
#undef CPUKERN_SSE2_ROW
#endif

// Many rows: each B panel slice (kc x NR) is widened once into an L1-resident
// float panel and reused by every row panel of the block; the micro-kernel is
// then a plain float FMA kernel (broadcast A, two B vectors per k).
struct GenericBf16Wide : KernelDefaults {
    using AIn = bf16_t;
    using APack = float;
    using Acc = float;
    static constexpr int V = 2;
    static constexpr int NR = V * simd::kLanes;
    static constexpr int MR = kVecRegs == 32 ? 8 : 6;  // 6 x 2 accumulators + 2 B + 1 A = 15 registers
    static constexpr int KG = 2, kAkg = 2, APER = 2;
    // mc: the panel widened once serves 32 row panels (M=256 on zmm: 0.92-0.95 of the time at mc 96)
    static constexpr int64_t kMcTarget = 256, kNcTarget = 128, kKcTarget = 256;
    static constexpr bool kOffsetA = false, kPrefetchInMicro = true;
    static constexpr const char* kName = "widened panel+fma";
    using BPrep = float;  // [kk][NR]

    static void begin() {}
    static void end() {}
    static void pack_a(const bf16_t* s, float* d) { GenericBf16::pack_a(s, d); }

    static void prep_b(const uint8_t* b, int64_t kk, float* dst) {
        split_panel<V, VU>(b, kk / KG, dst, [](VU x) { return std::pair{x << 16, x & 0xffff0000u}; });
    }

    template <int R>
    static void micro(const float* a, const uint8_t* bp, int64_t kk, float* c, int64_t ldc, bool load_c,
                      Prefetch next) {
        // spread with 32 registers (zmm: M=16 0.87, M=32 0.95-0.98 of the time); the ymm kernel
        // takes its burst first (spread: M=16 0.93-0.97, M=256 1.02-1.03)
        constexpr bool kSpread = kVecRegs == 32;
        if constexpr (!kSpread) next.step(0, next.bytes);
#ifdef CPUKERN_SSE2_TILE
        if constexpr (R == 6 && MR == 6 && V == 2) {
            sse2_tile_6x8<true, simd::VF>(a, bp, kk / KG, c, ldc * int64_t(sizeof(float)), load_c);
            return;
        }
#endif
        widened_panel_micro<R, MR, V, false, kSpread, simd::VF, simd::VF>(
            a, bp, kk / KG, c, ldc, load_c, next, [](simd::VF (&acc)[V], const float* ap, const simd::VF (&bv)[V]) {
                const simd::VF x = bcast(ap);
#pragma GCC unroll 4
                for (int v = 0; v < V; ++v) acc[v] = acc[v] + x * bv[v];
            });
    }
};

struct GenericInt8 : KernelDefaults {
    using AIn = int8_t;
    using APack = uint32_t;  // per row and quad: (a0 | a2 << 16), (a1 | a3 << 16) as int16 halves
    using Acc = int32_t;
    static constexpr int V = 2;
    static constexpr int NR = V * simd::kLanes;
    static constexpr int MR = kVecRegs == 32 ? 8 : 4;
    static constexpr int KG = 4, kAkg = 4, APER = 2;
    static constexpr int64_t kMcTarget = 96, kNcTarget = 256, kKcTarget = 512;
    static constexpr bool kOffsetA = false, kPrefetchInMicro = true, kDenseGemv = true;
    static constexpr const char* kName = "int16 madd";

    static void begin() {}
    static void end() {}
    static uint32_t halves(int8_t lo, int8_t hi) {
        return uint32_t(uint16_t(int16_t(lo))) | uint32_t(uint16_t(int16_t(hi))) << 16;
    }
    static void pack_a(const int8_t* s, uint32_t* d) {
        d[0] = halves(s[0], s[2]);
        d[1] = halves(s[1], s[3]);
    }

    template <int R, int AS = MR>
    static void micro(const uint32_t* a, const uint8_t* b, int64_t kk, int32_t* c, int64_t ldc, bool load_c,
                      Prefetch next) {
        VI acc[R][V];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) acc[r][v] = load_c ? load_vec<VI>(c + r * ldc + v * simd::kLanes) : VI{};
        k_loop(kk / KG, next_slice<R>(next), [&](int64_t g) {
            const uint8_t* bg = b + g * NR * 4;
            if constexpr (kStreamsB<R> && kGemvAhead > 0) stream_ahead<NR * 4, kGemvAhead>(bg);
            const uint32_t* ag = a + g * AS * 2;
            VS e[V], o[V];
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) {
                const VS x = load_vec<VS>(bg + v * kBytes);
                e[v] = (VS)((VUS)x << 8) >> 8;  // even bytes, sign-extended
                o[v] = x >> 8;                   // odd bytes, sign-extended
            }
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) {
                const VS ae = (VS)bcast(ag + 2 * r), ao = (VS)bcast(ag + 2 * r + 1);
#pragma GCC unroll 4
                for (int v = 0; v < V; ++v) acc[r][v] += madd16(e[v], ae) + madd16(o[v], ao);
            }
        });
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) store_vec(c + r * ldc + v * simd::kLanes, acc[r][v]);
    }
};

#if (defined(__AVX2__) && !defined(__AVX512F__)) || (defined(__AVX512F__) && defined(__AVX512BW__))
#define CPUKERN_NIBBLE_GEMV 1
// vpmaddubsw: unsigned bytes of the first operand times signed bytes of the
// second, adjacent products summed into saturating int16 lanes.
inline VS maddubs(VI u8, VI s8) {
#if defined(__AVX512F__)
    return (VS)_mm512_maddubs_epi16((__m512i)u8, (__m512i)s8);
#else
    return (VS)_mm256_maddubs_epi16((__m256i)u8, (__m256i)s8);
#endif
}

// One row (a GEMV) of int8 on x86 without VNNI. A is offset by +128, as for
// vpdpbusd (the epilogue subtracts 128 * colsum), and split into its two
// nibbles, so each B vector takes one vpmaddubsw per nibble: a pair of nibble
// products is at most 2 * 15 * 128 in size - no saturation - and kChunk k groups
// of them add up in int16 before vpmaddwd widens them (times 1 and 16). Four
// instructions per B vector where GenericInt8 takes seven (three to split B
// into 16-bit halves, two vpmaddwd, two adds). Zen 4 class, two threads,
// alternating builds: 16 MiB of weights (in L3) 0.87 of the time with avx2 and
// avx512, 128 MiB (DRAM) 0.96-0.97; a loop of whole chunks with the tail apart
// (GCC then folded each B load into both vpmaddubsw) 1.51x with avx2.
struct NibbleGemv : KernelDefaults {
    using AIn = int8_t;
    using APack = uint32_t;  // per quad: the low nibbles of a + 128 (k order), then the high ones
    using Acc = int32_t;
    static constexpr int V = 2;
    static constexpr int NR = V * simd::kLanes;
    static constexpr int MR = 1;
    static constexpr int KG = 4, kAkg = 4, APER = 2;
    static constexpr int64_t kMcTarget = 1, kNcTarget = 256, kKcTarget = 512;
    static constexpr bool kOffsetA = true, kPrefetchInMicro = true, kDenseGemv = true;
    static constexpr const char* kName = "nibble maddubs";
    static constexpr int64_t kChunk = 8;  // 8 * 2 * 15 * 128 = 30720 fits int16

    static void begin() {}
    static void end() {}
    static void pack_a(const int8_t* s, uint32_t* d) {
        uint32_t lo = 0, hi = 0;
        for (int i = 0; i < 4; ++i) {
            const uint32_t u = uint32_t(uint8_t(s[i]) ^ 0x80u);
            lo |= (u & 15u) << (8 * i);
            hi |= (u >> 4) << (8 * i);
        }
        d[0] = lo;
        d[1] = hi;
    }

    template <int R, int AS = MR>
    static void micro(const uint32_t* a, const uint8_t* b, int64_t kk, int32_t* c, int64_t, bool load_c, Prefetch) {
        static_assert(R == 1 && AS == 1, "one row");
        VI acc[V];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[v] = load_c ? load_vec<VI>(c + v * simd::kLanes) : VI{};
        const VS ones = VS{} + 1, sixteens = VS{} + 16;
        const int64_t groups = kk / KG;
        for (int64_t g0 = 0; g0 < groups; g0 += kChunk) {
            const int64_t g1 = g0 + kChunk < groups ? g0 + kChunk : groups;
            VS lo[V] = {}, hi[V] = {};
            const auto step = [&](int64_t g) {
                const uint8_t* bg = b + g * NR * KG;
                if constexpr (kGemvAhead > 0) stream_ahead<NR * KG, kGemvAhead>(bg);
                const VI al = bcast(a + 2 * g), ah = bcast(a + 2 * g + 1);
#pragma GCC unroll 4
                for (int v = 0; v < V; ++v) {
                    const VI x = load_vec<VI>(bg + v * kBytes);
                    lo[v] += maddubs(al, x);
                    hi[v] += maddubs(ah, x);
                }
            };
            if (kVecRegs == 32 && g1 - g0 == kChunk) {
                // a whole chunk straight through, not a jump into an unrolled loop by its count. AVX-512,
                // Zen 4 class, 16 MiB of weights: 0.87-0.93 of the time (two threads, one alike), 128 MiB
                // 1.00. avx2 keeps the loop: on 16 registers its 32 products spill (1.26-1.46x)
#pragma GCC unroll 8
                for (int64_t g = g0; g < g0 + kChunk; ++g) step(g);
            } else {
#pragma GCC unroll 8
                for (int64_t g = g0; g < g1; ++g) step(g);
            }
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) acc[v] += madd16(lo[v], ones) + madd16(hi[v], sixteens);
        }
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) store_vec(c + v * simd::kLanes, acc[v]);
    }
};
#endif

// Many rows: each B panel slice is split once per block into its sign-extended
// even and odd bytes (int16, L1-resident) and reused by every row panel, so
// the inner loop is one madd and one add per vector: the three shifts per B
// vector of GenericInt8 left the madd ports idle a third of the time.
struct GenericInt8Wide : KernelDefaults {
    using AIn = int8_t;
    using APack = uint32_t;  // as GenericInt8
    using Acc = int32_t;
    static constexpr int V = 2;
    static constexpr int NR = V * simd::kLanes;
    static constexpr int MR = kVecRegs == 32 ? 8 : 6;  // 6 x 2 accumulators + 2 B + 1 A = 15 registers
    static constexpr int KG = 4, kAkg = 4, APER = 2;
    // nc 64, not 128 (Zen 4 class, two threads, M = 256: avx2 0.98-0.99 of the time,
    // 0.84 once while the host was busy; avx512 0.98, baseline 0.99; M = 32 0.98;
    // the float panel kernel above took 1.15x with 64). mc 256 / kc 512, not 96 / 256:
    // the split panel serves every row panel of M = 256 and C is reloaded half as
    // often (M = 256: avx2 0.979 of the time on one thread, 0.981 on two, avx512
    // 0.985, the baseline 0.975 on one; M = 128 0.98, M = 32 1.00; kc 512 alone
    // 0.997, mc 192 1.05: two row blocks)
    static constexpr int64_t kMcTarget = 256, kNcTarget = 64, kKcTarget = 512;
    static constexpr bool kOffsetA = false;
    static constexpr const char* kName = "int16 panel madd";
    using BPrep = int16_t;  // [group][even, odd][NR * 2]

    static void begin() {}
    static void end() {}
    static void pack_a(const int8_t* s, uint32_t* d) { GenericInt8::pack_a(s, d); }

    static void prep_b(const uint8_t* b, int64_t kk, int16_t* dst) {
        split_panel<V, VS>(b, kk / KG, dst, [](VS x) { return std::pair{(VS)((VUS)x << 8) >> 8, x >> 8}; });
    }

    template <int R>
    static void micro(const uint32_t* a, const uint8_t* bp, int64_t kk, int32_t* c, int64_t ldc, bool load_c) {
#ifdef CPUKERN_SSE2_TILE
        if constexpr (R == 6 && MR == 6 && V == 2) {
            sse2_tile_6x8<false, VI>(a, bp, kk / KG, c, ldc * int64_t(sizeof(int32_t)), load_c);
            return;
        }
#endif
        widened_panel_micro<R, MR, V, true, false, VI, VS>(a, bp, kk / KG, c, ldc, load_c, Prefetch{},
                                                    [](VI (&acc)[V], const uint32_t* ap, const VS (&bv)[V]) {
                                                        const VS x = (VS)bcast(ap);
#pragma GCC unroll 4
                                                        for (int v = 0; v < V; ++v) acc[v] += madd16(bv[v], x);
                                                    });
    }
};

#if defined(__x86_64__)
// What the int8 kernels that add their int32 sums as floats share (GenericInt8WideF,
// Sse2Int8SplatF): both operands made unsigned (+128), so every product and sum is
// a non-negative integer below 2^24 whose int32 bit pattern is a float of the same
// value in units of 2^-149 (subnormal below 2^23, then exponent 1, the same unit),
// which the FP adders add exactly (kc * 255 * 255 < 2^24: exact_for); the
// subnormals need MXCSR's DAZ and FTZ clear for the call (begin / end), the
// caller's put back.
struct FloatSums {
    static constexpr unsigned kFlushBits = 0x8040u;  // FTZ, DAZ
    static void begin() {
        mxcsr_saved() = _mm_getcsr();
        if (mxcsr_saved() & kFlushBits) _mm_setcsr(mxcsr_saved() & ~kFlushBits);
    }
    static void end() {
        if (mxcsr_saved() & kFlushBits) _mm_setcsr(mxcsr_saved());
    }
    static unsigned& mxcsr_saved() {
        thread_local unsigned saved;
        return saved;
    }
    // A's bytes lo and hi + 128 as the two int16 halves of a 32-bit lane
    static uint32_t halves(int8_t lo, int8_t hi) {
        return uint32_t(uint8_t(lo) ^ 0x80u) | uint32_t(uint8_t(hi) ^ 0x80u) << 16;
    }
    // B's even and odd bytes + 128, zero-extended to int16
    static std::pair<VS, VS> unsigned_bytes(VUS x) {
        x ^= 0x8080;
        return {(VS)((x << 8) >> 8), (VS)(x >> 8)};
    }
    // k values a block may sum: kc * 255 * 255 < 2^24
    static constexpr bool exact_for(int64_t kc) { return kc * 255 * 255 < (int64_t(1) << 24); }
};
#endif

#if defined(__x86_64__) && ((defined(__AVX2__) && !defined(__AVX512F__)) || defined(__AVX512BW__))
#define CPUKERN_INT8_FLOAT_SUMS 1
// GenericInt8Wide with its sums on the FP adders (FloatSums: the epilogue
// subtracts 128 * (colsum + rowsum)). AMD's cores (Zen 4 class measured) issue
// vpaddd to the two pipes vpmaddwd needs as well as to the other two, so madd +
// add runs at ~0.8 of the madd rate, while vaddps only goes to the adder pipes
// (madd + vaddps: the full rate).
struct GenericInt8WideF : GenericInt8Wide, FloatSums {
    static constexpr int64_t kKcTarget = 256;
    static constexpr bool kOffsetA = true, kOffsetB = true;
    static constexpr const char* kName = "int16 panel madd, float sums";

    using FloatSums::begin;
    using FloatSums::end;
    static void pack_a(const int8_t* s, uint32_t* d) {
        d[0] = halves(s[0], s[2]);
        d[1] = halves(s[1], s[3]);
    }
    static void prep_b(const uint8_t* b, int64_t kk, int16_t* dst) {
        split_panel<V, VUS>(b, kk / KG, dst, [](VUS x) { return unsigned_bytes(x); });
    }
    static_assert(exact_for(kKcTarget), "a block's sums stay exact as floats");

    template <int R>
    static void micro(const uint32_t* a, const uint8_t* bp, int64_t kk, int32_t* c, int64_t ldc, bool load_c) {
        widened_panel_micro<R, MR, V, true, false, simd::VF, VS, uint32_t, int32_t, decltype(mac), true>(
            a, bp, kk / KG, c, ldc, load_c, Prefetch{}, mac);
    }
    static constexpr auto mac = [](simd::VF (&acc)[V], const uint32_t* ap, const VS (&bv)[V]) {
        const VS x = (VS)bcast(ap);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[v] = acc[v] + (simd::VF)madd16(bv[v], x);
    };
};
#endif

#if defined(CPUKERN_SSE2_TILE)
// The baseline's (SSE2) many-rows kernels, turned around: four rows of A to a
// vector (a k-major A panel) against each B value broadcast to all lanes once
// per block (prep_b: a panel of 16-byte splats, reused by every row panel), so
// the tile shuffles nothing - per k one A load, then per column the splat's
// load, its product with A and an add into that column's accumulator (8 of
// them: 4 rows x 1 column each), transposed into C at the end. The A-broadcasting tile above spends a pshufd per A value on the
// shuffle pipes the multiplies and adds share: in an L1 loop 0.72 cycles per
// mulps against 0.57 here (Zen 4 class). kFloat: mulps / addps on bf16
// widened to float; else pmaddwd / paddd on int16 pairs.
// kSumsAsFloat: int32 sums (pmaddwd's) added by addps (FloatSums), into C by integer adds.
template <int R, bool kFloat, class V4, class Acc, bool kSumsAsFloat = false>
inline void splat_panel_tile(const void* a, const V4* b, int64_t slots, Acc* c, int64_t ldc, bool load_c) {
    using AccV = std::conditional_t<kSumsAsFloat, simd::VF, V4>;
    AccV acc[8] = {};
    const char* ap = static_cast<const char*>(a);
#pragma GCC unroll 2
    for (int64_t k = 0; k < slots; ++k) {
        const V4 x = load_vec<V4>(ap + 16 * k);
        const V4* bk = b + 8 * k;
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            if constexpr (kFloat)
                acc[j] = acc[j] + x * bk[j];
            else
                acc[j] = acc[j] + (AccV)madd16((VS)bk[j], (VS)x);
        }
    }
    __m128 t0 = (__m128)acc[0], t1 = (__m128)acc[1], t2 = (__m128)acc[2], t3 = (__m128)acc[3];
    __m128 t4 = (__m128)acc[4], t5 = (__m128)acc[5], t6 = (__m128)acc[6], t7 = (__m128)acc[7];
    _MM_TRANSPOSE4_PS(t0, t1, t2, t3);  // moves only: int32 sums pass bit for bit
    _MM_TRANSPOSE4_PS(t4, t5, t6, t7);
    const __m128 lo4[4] = {t0, t1, t2, t3}, hi4[4] = {t4, t5, t6, t7};
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        Acc* cr = c + r * ldc;
        V4 lo = (V4)lo4[r], hi = (V4)hi4[r];
        if (load_c) {
            lo = lo + load_vec<V4>(cr);
            hi = hi + load_vec<V4>(cr + 4);
        }
        store_vec(cr, lo);
        store_vec(cr + 4, hi);
    }
}

// Each 32-bit lane of v broadcast: four splats, dst[0] to dst[3]
template <class V4>
inline void splat_lanes(V4 v, V4* dst) {
    dst[0] = __builtin_shufflevector(v, v, 0, 0, 0, 0);
    dst[1] = __builtin_shufflevector(v, v, 1, 1, 1, 1);
    dst[2] = __builtin_shufflevector(v, v, 2, 2, 2, 2);
    dst[3] = __builtin_shufflevector(v, v, 3, 3, 3, 3);
}

struct Sse2Bf16Splat : KernelDefaults {
    using AIn = bf16_t;
    using APack = float;  // [k group][k in the pair][row]
    using Acc = float;
    static constexpr int MR = 4, NR = 8, KG = 2, kAkg = 2, APER = 2;
    static constexpr int64_t kMcTarget = 256, kNcTarget = 128, kKcTarget = 256;  // kc: L1 caps the splats' 128 B per k
    static constexpr bool kOffsetA = false, kPrefetchInMicro = true, kAByK = true;
    static constexpr const char* kName = "splat panel+mulps";
    using BPrep = simd::VF;  // [k][column]: b[k][column] in every lane

    static void begin() {}
    static void end() {}
    static void pack_a(const bf16_t* s, float* d) {
        d[0] = simd::to_float(s[0]);
        d[MR] = simd::to_float(s[1]);
    }
    static void prep_b(const uint8_t* b, int64_t kk, simd::VF* dst) {
        for (int64_t g = 0; g < kk / KG; ++g)
            for (int v = 0; v < 2; ++v) {
                const VU x = load_vec<VU>(b + (2 * g + v) * 16);
                splat_lanes((simd::VF)(x << 16), dst + 16 * g + 4 * v);               // even k
                splat_lanes((simd::VF)(x & 0xffff0000u), dst + 16 * g + 8 + 4 * v);  // odd k
            }
    }
    template <int R>
    static void micro(const float* a, const uint8_t* bp, int64_t kk, float* c, int64_t ldc, bool load_c,
                      Prefetch next) {
        next.step(0, next.bytes);
        splat_panel_tile<R, true, simd::VF>(a, reinterpret_cast<const simd::VF*>(bp), kk, c, ldc, load_c);
    }
};

struct Sse2Int8Splat : KernelDefaults {
    using AIn = int8_t;
    using APack = uint32_t;  // [k quad][pair (k0, k2) / (k1, k3)][row], int16 halves as GenericInt8's
    using Acc = int32_t;
    static constexpr int MR = 4, NR = 8, KG = 4, kAkg = 4, APER = 2;
    static constexpr int64_t kMcTarget = 256, kNcTarget = 64, kKcTarget = 512;
    static constexpr bool kOffsetA = false, kAByK = true;
    static constexpr const char* kName = "splat panel+pmaddwd";
    // [k pair][column]: the column's int16 pair in every lane. As 16 bytes per k and column to the
    // blocking (twice the bytes: the scratch has room to spare) kc stays 160 on a 32 KiB L1d, as
    // for the floats; 320 took 1.10x the time on two threads (Zen 4 class, M = 256)
    using BPrep = VI;

    static void begin() {}
    static void end() {}
    static void pack_a(const int8_t* s, uint32_t* d) {
        d[0] = GenericInt8::halves(s[0], s[2]);
        d[MR] = GenericInt8::halves(s[1], s[3]);
    }
    static void prep_b(const uint8_t* b, int64_t kk, VI* dst) {
        for (int64_t g = 0; g < kk / KG; ++g)
            for (int v = 0; v < 2; ++v) {
                const VS x = load_vec<VS>(b + (2 * g + v) * 16);
                splat_lanes((VI)((VS)((VUS)x << 8) >> 8), dst + 16 * g + 4 * v);  // bytes 0, 2 sign-extended
                splat_lanes((VI)(x >> 8), dst + 16 * g + 8 + 4 * v);               // bytes 1, 3
            }
    }
    template <int R>
    static void micro(const uint32_t* a, const uint8_t* bp, int64_t kk, int32_t* c, int64_t ldc, bool load_c) {
        splat_panel_tile<R, false, VI>(a, reinterpret_cast<const VI*>(bp), kk / 2, c, ldc, load_c);
    }
};

// The same with its int32 sums added as floats (FloatSums): addps leaves pmaddwd's
// pipes to it, where paddd shares them (an L1 loop: 0.58-0.61 cycles per pmaddwd
// against 0.65-0.69). Taken by CPU vendor as GenericInt8WideF (gemm.cpp).
struct Sse2Int8SplatF : Sse2Int8Splat, FloatSums {
    static constexpr int64_t kKcTarget = 256;
    static constexpr bool kOffsetA = true, kOffsetB = true;
    static constexpr const char* kName = "splat panel+pmaddwd, float sums";

    using FloatSums::begin;
    using FloatSums::end;
    static void pack_a(const int8_t* s, uint32_t* d) {
        d[0] = halves(s[0], s[2]);
        d[MR] = halves(s[1], s[3]);
    }
    static void prep_b(const uint8_t* b, int64_t kk, VI* dst) {
        for (int64_t g = 0; g < kk / KG; ++g)
            for (int v = 0; v < 2; ++v) {
                const auto [even, odd] = unsigned_bytes(load_vec<VUS>(b + (2 * g + v) * 16));
                splat_lanes((VI)even, dst + 16 * g + 4 * v);
                splat_lanes((VI)odd, dst + 16 * g + 8 + 4 * v);
            }
    }
    static_assert(exact_for(kKcTarget), "a block's sums stay exact as floats");
    template <int R>
    static void micro(const uint32_t* a, const uint8_t* bp, int64_t kk, int32_t* c, int64_t ldc, bool load_c) {
        splat_panel_tile<R, false, VI, int32_t, true>(a, reinterpret_cast<const VI*>(bp), kk / 2, c, ldc, load_c);
    }
};
#endif

}  // namespace gemm
}  // namespace cpukern
