// x86 micro-kernels for the AVX-512 BF16, VNNI, AVX-VNNI and AMX variants. They consume
// the shared packed-B layout (gemm.h) and run inside the shared blocking, so
// only the inner loops below are specific to these ISAs.
#pragma once
#include <cstdint>
#include <cstring>

#include "cpukern/gemm.h"

#include "cpukern/intrin.h"

namespace cpukern {
namespace gemm {

#if defined(__AVX512F__)
// Eight rows of 16 four-byte k groups (row stride lda elements of T) into the
// row panel's order - group by group, the eight rows' values side by side - each
// XORed with kXor: two unpacks and two 128-bit shuffles per vector. Written a
// value at a time, each line of a 64 KiB panel (K = 4096) took eight stores
// that missed L1.
template <uint32_t kXor, class T>
inline void pack_8x16_groups(const T* src, int64_t lda, uint32_t* dst) {
    static_assert(sizeof(T) <= 4 && 4 % sizeof(T) == 0, "four-byte groups");
    __m512i r[8];
    for (int i = 0; i < 8; ++i) {
        r[i] = _mm512_loadu_si512(src + i * lda);
        if constexpr (kXor != 0) r[i] = _mm512_xor_si512(r[i], _mm512_set1_epi32(int32_t(kXor)));
    }
    // per 128-bit lane l: q[j] holds group 4l + j of rows 0-3, q[4 + j] of rows 4-7
    __m512i q[8];
    for (int h = 0; h < 2; ++h) {
        const __m512i lo01 = _mm512_unpacklo_epi32(r[4 * h], r[4 * h + 1]);
        const __m512i hi01 = _mm512_unpackhi_epi32(r[4 * h], r[4 * h + 1]);
        const __m512i lo23 = _mm512_unpacklo_epi32(r[4 * h + 2], r[4 * h + 3]);
        const __m512i hi23 = _mm512_unpackhi_epi32(r[4 * h + 2], r[4 * h + 3]);
        q[4 * h] = _mm512_unpacklo_epi64(lo01, lo23);
        q[4 * h + 1] = _mm512_unpackhi_epi64(lo01, lo23);
        q[4 * h + 2] = _mm512_unpacklo_epi64(hi01, hi23);
        q[4 * h + 3] = _mm512_unpackhi_epi64(hi01, hi23);
    }
    // groups 4l + j and 4l + j + 1 (j = 0, 2): lane l of q[j], q[4 + j], q[j + 1], q[5 + j]
    for (int j = 0; j < 4; j += 2) {
        const __m512i ab_lo = _mm512_shuffle_i32x4(q[j], q[4 + j], 0x44), ab_hi = _mm512_shuffle_i32x4(q[j], q[4 + j], 0xEE);
        const __m512i cd_lo = _mm512_shuffle_i32x4(q[j + 1], q[5 + j], 0x44);
        const __m512i cd_hi = _mm512_shuffle_i32x4(q[j + 1], q[5 + j], 0xEE);
        _mm512_storeu_si512(dst + (0 + j) * 8, _mm512_shuffle_i32x4(ab_lo, cd_lo, 0x88));
        _mm512_storeu_si512(dst + (4 + j) * 8, _mm512_shuffle_i32x4(ab_lo, cd_lo, 0xDD));
        _mm512_storeu_si512(dst + (8 + j) * 8, _mm512_shuffle_i32x4(ab_hi, cd_hi, 0x88));
        _mm512_storeu_si512(dst + (12 + j) * 8, _mm512_shuffle_i32x4(ab_hi, cd_hi, 0xDD));
    }
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BF16__)
// vdpbf16ps: each fp32 lane accumulates a bf16 pair product of A (broadcast)
// and B (one column per lane).
struct Dpbf16 : KernelDefaults {
    using AIn = bf16_t;
    using APack = uint32_t;  // a[k] | a[k+1] << 16
    using Acc = float;
    static constexpr int MR = 8, NR = 32, KG = 2, kAkg = 2, APER = 1;
    // nc 64, not 256: four times the blocks for the threads to share (Zen 4 class,
    // two threads, M = 256: 0.96-0.99 of the time while the host was quiet, 0.92
    // while not; M = 128 0.96; M = 1 / 32 unchanged)
    static constexpr int64_t kMcTarget = 256, kNcTarget = 64, kKcTarget = 256;
    static constexpr bool kOffsetA = false, kPrefetchInMicro = true, kDenseGemv = true, kCachedGemv = true;
    static constexpr const char* kName = "vdpbf16ps";

    static void begin() {}
    static void end() {}
    static void pack_a(const bf16_t* s, uint32_t* d) { d[0] = uint32_t(s[0].bits) | uint32_t(s[1].bits) << 16; }
    static constexpr bool kPackA8x16 = true;
    static void pack_a_8x16(const bf16_t* s, int64_t lda, uint32_t* d) { pack_8x16_groups<0>(s, lda, d); }

    // acc + a x the 64 bytes at p, B as the instruction's memory operand: GCC 12 keeps the load apart.
    // A 32-bit displacement ({disp32}; the same speed on Zen 4): Bochs 3.0, where the amx variant's
    // build of this runs (bare metal), reads a compressed one (disp8 x 64) as disp8 x 4 - a
    // known-answer check of cpubuild's bare-metal driver, and the harness counts such operands
    static __m512 dp(__m512 acc, __m512i a, const uint8_t* p) {
#if !defined(CPUKERN_SIMDE)
        __asm__("%{disp32%} vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "m"(*reinterpret_cast<const __m512i*>(p)));
        return acc;
#else
        return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)_mm512_loadu_si512(p));
#endif
    }

    // A GEMV whose weights fit the LLC (run() picks it: kCachedGemv): two k groups per step on
    // four chains, each B vector the instruction's memory operand, no software prefetch. Zen 4
    // class, two threads, against micro<1, 1>, the weights in L3 (called again and again): 16 / 32
    // / 64 MiB 0.83-0.90 / 0.90-0.95 / 0.90 of the time, 2 MiB 0.89; 32 MiB matrices taken in turn
    // from DRAM 0.97-1.03, 256 MiB 1.00-1.05 (weights over the LLC keep micro<1, 1> and its fetch
    // ahead); a prefetch in this loop, 512 B-8 KiB ahead, lost 2-37 % (docs/gemm-log.md).
    // (K in one block: a one-row product streams its panels unblocked, so C starts at zero)
    static void cached_gemv(const uint32_t* a, const uint8_t* b, int64_t kk, float* c) {
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        const int64_t groups = kk / KG;
        int64_t g = 0;
        for (; g + 2 <= groups; g += 2) {
            const __m512i a0 = _mm512_set1_epi32(int32_t(a[g])), a1 = _mm512_set1_epi32(int32_t(a[g + 1]));
            acc[0] = dp(acc[0], a0, b + g * 128);
            acc[1] = dp(acc[1], a0, b + g * 128 + 64);
            acc[2] = dp(acc[2], a1, b + g * 128 + 128);
            acc[3] = dp(acc[3], a1, b + g * 128 + 192);
        }
        if (g < groups) {
            const __m512i a0 = _mm512_set1_epi32(int32_t(a[g]));
            acc[0] = dp(acc[0], a0, b + g * 128);
            acc[1] = dp(acc[1], a0, b + g * 128 + 64);
        }
        _mm512_storeu_ps(c, _mm512_add_ps(acc[0], acc[2]));
        _mm512_storeu_ps(c + 16, _mm512_add_ps(acc[1], acc[3]));
    }

    template <int R, int AS = MR>  // AS: A values per k group (MR; 1 for a dense GEMV row)
    static void micro(const uint32_t* a, const uint8_t* b, int64_t kk, float* c, int64_t ldc, bool load_c,
                      Prefetch next) {
        __m512 acc[R][2];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            acc[r][0] = load_c ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
            acc[r][1] = load_c ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
        }
        k_loop(kk / KG, next_slice<R>(next), [&acc, a, b](int64_t g) {
            if constexpr (kStreamsB<R>) stream_ahead<128>(b + g * 128);
            const __m512i b0 = _mm512_loadu_si512(b + g * 128), b1 = _mm512_loadu_si512(b + g * 128 + 64);
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) {
                const __m512i ab = _mm512_set1_epi32(int32_t(a[g * AS + r]));
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)ab, (__m512bh)b0);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)ab, (__m512bh)b1);
            }
        });
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            _mm512_storeu_ps(c + r * ldc, acc[r][0]);
            _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
        }
    }
};
#endif

#if (defined(__AVX512F__) && defined(__AVX512VNNI__)) || (defined(__AVXVNNI__) && !defined(__AVX512F__))
// vpdpbusd multiplies unsigned by signed bytes: A is offset by +128 (a ^ 0x80)
// and the epilogue subtracts 128 * sum_k b[k][n] (exact in int32). One
// kernel for AVX-512 VNNI (zmm, 8 rows: 32 registers) and AVX-VNNI (its VEX
// form on ymm, 6 rows: 12 accumulators + 2 B + 1 A of 16 registers).
#if defined(__AVX512F__) && defined(__AVX512VNNI__)
struct VnniVec {
    using V = __m512i;
    static constexpr int kRows = 8, kLanes = 16;
    static constexpr int64_t kMcTarget = 256;
    // the next B slice spread over the k steps: M = 9-32 0.76-0.91 of the time
    static constexpr int64_t kBurstMax = 1024;
    static constexpr const char* kName = "vpdpbusd";
    static V load(const void* p) { return _mm512_loadu_si512(p); }
    static void store(void* p, V v) { _mm512_storeu_si512(p, v); }
    static V zero() { return _mm512_setzero_si512(); }
    static V splat(uint32_t x) { return _mm512_set1_epi32(int32_t(x)); }
    static V dot(V acc, V a, V b) { return _mm512_dpbusd_epi32(acc, a, b); }
    static V add(V x, V y) { return _mm512_add_epi32(x, y); }
};
#else
struct VnniVec {
    using V = __m256i;
    static constexpr int kRows = 6, kLanes = 8;
    static constexpr int64_t kMcTarget = 96;
    // shares of the next B slice up to 4 KiB (M = 9-32) as one burst: spread
    // over the k steps, M = 16 / 32 took 1.04-1.09x the time
    static constexpr int64_t kBurstMax = 4096;
    static constexpr const char* kName = "vpdpbusd ymm";
    static V load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
    static void store(void* p, V v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
    static V zero() { return _mm256_setzero_si256(); }
    static V splat(uint32_t x) { return _mm256_set1_epi32(int32_t(x)); }
    static V dot(V acc, V a, V b) { return _mm256_dpbusd_avx_epi32(acc, a, b); }
    static V add(V x, V y) { return _mm256_add_epi32(x, y); }
};
#endif

struct Vnni : KernelDefaults {
    using AIn = int8_t;
    using APack = uint32_t;  // four (a + 128) bytes, k order
    using Acc = int32_t;
    using V = VnniVec::V;
    static constexpr int MR = VnniVec::kRows, NR = 2 * VnniVec::kLanes, KG = 4, kAkg = 4, APER = 1;
    static constexpr int64_t kMcTarget = VnniVec::kMcTarget, kNcTarget = 256, kKcTarget = 512;
    static constexpr bool kOffsetA = true, kPrefetchInMicro = true, kDenseGemv = true;
    static constexpr const char* kName = VnniVec::kName;
    static constexpr int kGroupBytes = NR * KG;

    static void begin() {}
    static void end() {}
    static void pack_a(const int8_t* s, uint32_t* d) {
        uint8_t u[4];
        for (int i = 0; i < 4; ++i) u[i] = uint8_t(s[i]) ^ 0x80u;
        std::memcpy(d, u, 4);
    }
#if defined(__AVX512F__)
    static constexpr bool kPackA8x16 = MR == 8;
    static void pack_a_8x16(const int8_t* s, int64_t lda, uint32_t* d) { pack_8x16_groups<0x80808080u>(s, lda, d); }
#endif

    // One row (a GEMV) takes its k groups in pairs, on two sets of
    // accumulators summed at the end: with one set every vpdpbusd waits for
    // the last one (a group per vpdpbusd latency), and the loop cannot catch
    // up after a late line. Zen 4 class, two threads, alternating builds:
    // 0.81-0.85 of the time at 128 MiB of weights, 0.93-0.96 at 256 MiB, while
    // the memory was quick; 0.97-1.00 while it was busy, 0.95-1.00 at 16 MiB
    // (in L3). vdpbf16ps the same way: 1.00-1.01, not taken.
    template <int AS>
    static void row_pairs(const uint32_t* a, const uint8_t* b, int64_t groups, V (&acc)[2]) {
        V odd[2] = {VnniVec::zero(), VnniVec::zero()};
        int64_t g = 0;
        for (; g + 2 <= groups; g += 2) {
            const uint8_t* bg = b + g * kGroupBytes;
            stream_ahead<2 * kGroupBytes>(bg);
            const V a0 = VnniVec::splat(a[g * AS]), a1 = VnniVec::splat(a[(g + 1) * AS]);
            for (int v = 0; v < 2; ++v) {
                acc[v] = VnniVec::dot(acc[v], a0, VnniVec::load(bg + v * kGroupBytes / 2));
                odd[v] = VnniVec::dot(odd[v], a1, VnniVec::load(bg + kGroupBytes + v * kGroupBytes / 2));
            }
        }
        if (g < groups) {
            const V a0 = VnniVec::splat(a[g * AS]);
            for (int v = 0; v < 2; ++v)
                acc[v] = VnniVec::dot(acc[v], a0, VnniVec::load(b + g * kGroupBytes + v * kGroupBytes / 2));
        }
        for (int v = 0; v < 2; ++v) acc[v] = VnniVec::add(acc[v], odd[v]);
    }

    template <int R, int AS = MR>
    static void micro(const uint32_t* a, const uint8_t* b, int64_t kk, int32_t* c, int64_t ldc, bool load_c,
                      Prefetch next) {
        V acc[R][2];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            acc[r][0] = load_c ? VnniVec::load(c + r * ldc) : VnniVec::zero();
            acc[r][1] = load_c ? VnniVec::load(c + r * ldc + VnniVec::kLanes) : VnniVec::zero();
        }
        if constexpr (R == 1) {
            row_pairs<AS>(a, b, kk / KG, acc[0]);
        } else {
            k_loop<VnniVec::kBurstMax>(kk / KG, next_slice<R>(next), [&acc, a, b](int64_t g) {
                if constexpr (kStreamsB<R>) stream_ahead<kGroupBytes>(b + g * kGroupBytes);
                const V b0 = VnniVec::load(b + g * kGroupBytes);
                const V b1 = VnniVec::load(b + g * kGroupBytes + kGroupBytes / 2);
#pragma GCC unroll 16
                for (int r = 0; r < R; ++r) {
                    const V ab = VnniVec::splat(a[g * AS + r]);
                    acc[r][0] = VnniVec::dot(acc[r][0], ab, b0);
                    acc[r][1] = VnniVec::dot(acc[r][1], ab, b1);
                }
            });
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            VnniVec::store(c + r * ldc, acc[r][0]);
            VnniVec::store(c + r * ldc + VnniVec::kLanes, acc[r][1]);
        }
    }
};
#endif

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AMX_INT8__)
// AMX: a 32 x 32 block of C in four 16 x 16 tiles (tmm0-3), two A tiles
// (tmm4-5: 16 rows x 64 bytes of k) and two B tiles (tmm6-7: 16 rows of k
// pairs / quads x 16 columns), i.e. four tile products per two A and two B
// loads. A panels are packed row-major per 64-byte k slice so an A tile is
// 1 KiB contiguous; B tiles are read from the 32-column panel with a
// 128-byte row stride. Rows beyond M are zero in the packed A and land in
// the scratch tile's padding. Linux grants the tile state per process
// (arch_prctl XTILEDATA, requested by the probe before `amx` is selected).
struct TileConfig {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

inline void amx_begin() {
    alignas(64) TileConfig cfg;
    std::memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

template <class Self>
struct AmxBase : KernelDefaults {
    static constexpr int MR = 32, NR = 32;
    // 256 rows: B comes from memory once for M <= 256 (M=256: 0.94 of the time with 128)
    static constexpr int64_t kMcTarget = 256, kNcTarget = 256;
    static constexpr bool kOffsetA = false, kPrefetchInMicro = true;
    static void begin() { amx_begin(); }
    static void end() { _tile_release(); }

    template <int R, class APack, class Acc>
    static void tiles(const APack* a, const uint8_t* b, int64_t kk, Acc* c, int64_t ldc, bool load_c, Prefetch next) {
        // up to 16 live rows (M = 16, the last panel of M = 48): the second A tile's rows are all
        // past M, so its two products and C tiles are skipped
        constexpr bool kTwoA = R > 16;
        const int64_t stride = ldc * int64_t(sizeof(Acc));
        if (load_c) {
            _tile_loadd(0, c, stride);
            _tile_loadd(1, c + 16, stride);
            if constexpr (kTwoA) {
                _tile_loadd(2, c + 16 * ldc, stride);
                _tile_loadd(3, c + 16 * ldc + 16, stride);
            }
        } else {
            _tile_zero(0);
            _tile_zero(1);
            if constexpr (kTwoA) {
                _tile_zero(2);
                _tile_zero(3);
            }
        }
        const int64_t steps = kk / Self::kAkg;
        const int64_t fetch_per_step = next.per_step(steps);
        for (int64_t s = 0; s < steps; ++s) {
            const uint8_t* as = reinterpret_cast<const uint8_t*>(a + s * MR * Self::APER);
            const uint8_t* bs = b + s * (Self::kAkg / Self::KG) * 128;
            // the first A tile's products start before the second A tile is in (0.94 of the time)
            _tile_loadd(4, as, 64);
            _tile_loadd(6, bs, 128);
            _tile_loadd(7, bs + 64, 128);
            Self::dot_first_a();
            if constexpr (kTwoA) {
                _tile_loadd(5, as + 16 * 64, 64);
                Self::dot_second_a();
            }
            next.step(s, fetch_per_step);
        }
        _tile_stored(0, c, stride);
        _tile_stored(1, c + 16, stride);
        if constexpr (kTwoA) {
            _tile_stored(2, c + 16 * ldc, stride);
            _tile_stored(3, c + 16 * ldc + 16, stride);
        }
    }
};

struct AmxBf16 : AmxBase<AmxBf16> {
    using AIn = bf16_t;
    using APack = bf16_t;
    using Acc = float;
    static constexpr int KG = 2, kAkg = 32, APER = 32;
    static constexpr int64_t kKcTarget = 256;  // 512: 1.05x the time at M=256, 128: 1.09x
    static constexpr const char* kName = "amx-bf16";
    static void pack_a(const bf16_t* s, bf16_t* d) { std::memcpy(d, s, 64); }
    static void dot_first_a() {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
    }
    static void dot_second_a() {
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    template <int R>
    static void micro(const bf16_t* a, const uint8_t* b, int64_t kk, float* c, int64_t ldc, bool load_c,
                      Prefetch next) {
        tiles<R>(a, b, kk, c, ldc, load_c, next);
    }
};

struct AmxInt8 : AmxBase<AmxInt8> {
    using AIn = int8_t;
    using APack = int8_t;
    using Acc = int32_t;
    static constexpr int KG = 4, kAkg = 64, APER = 64;
    static constexpr int64_t kKcTarget = 512;  // 1024: 1.04x the time at M=256, 256: 1.08x
    static constexpr const char* kName = "amx-int8";
    static void pack_a(const int8_t* s, int8_t* d) { std::memcpy(d, s, 64); }
    static void dot_first_a() {  // signed x signed: no offset, no compensation
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
    }
    static void dot_second_a() {
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    template <int R>
    static void micro(const int8_t* a, const uint8_t* b, int64_t kk, int32_t* c, int64_t ldc, bool load_c,
                      Prefetch next) {
        tiles<R>(a, b, kk, c, ldc, load_c, next);
    }
};
#endif

}  // namespace gemm
}  // namespace cpukern
