// aarch64 micro-kernels: sdot (Armv8.2 dot product) for int8, and the Armv8.6
// matrix-multiply-accumulate instructions bfmmla (bf16) and smmla (int8 /
// i8mm), which multiply a 2 x 4 (bf16) or 2 x 8 (int8) block of A by the
// transpose of one of B into a 2 x 2 block of C. They consume the shared
// packed-B layout (gemm.h) with groups of 4 / 8 k values per column.
#pragma once
#include <cstdint>
#include <cstring>

#include "cpukern/gemm.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace cpukern {
namespace gemm {

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
// sdot: each int32 lane accumulates an int8 quad product of B (one column per
// lane) and A (the row's quad, broadcast). Signed x signed: exact.
struct Sdot : KernelDefaults {
    using AIn = int8_t;
    using APack = int8_t;  // the row's quad, k order
    using Acc = int32_t;
    static constexpr int MR = 8, NR = 8, KG = 4, kAkg = 4, APER = 4;
    static constexpr int64_t kMcTarget = 96, kNcTarget = 256, kKcTarget = 512;
    static constexpr bool kOffsetA = false;
    static constexpr const char* kName = "sdot";

    static void begin() {}
    static void end() {}
    static void pack_a(const int8_t* s, int8_t* d) { std::memcpy(d, s, 4); }

    template <int R>
    static void micro(const int8_t* a, const uint8_t* b, int64_t kk, int32_t* c, int64_t ldc, bool load_c) {
        int32x4_t acc[R][2];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            acc[r][0] = load_c ? vld1q_s32(c + r * ldc) : vdupq_n_s32(0);
            acc[r][1] = load_c ? vld1q_s32(c + r * ldc + 4) : vdupq_n_s32(0);
        }
        const int64_t groups = kk / KG;
        for (int64_t g = 0; g < groups; ++g) {
            const int8x16_t b0 = vld1q_s8(reinterpret_cast<const int8_t*>(b + g * 32));
            const int8x16_t b1 = vld1q_s8(reinterpret_cast<const int8_t*>(b + g * 32 + 16));
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                int32_t quad;
                std::memcpy(&quad, a + (g * MR + r) * 4, 4);
                const int8x16_t ar = vreinterpretq_s8_s32(vdupq_n_s32(quad));
                acc[r][0] = vdotq_s32(acc[r][0], b0, ar);
                acc[r][1] = vdotq_s32(acc[r][1], b1, ar);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            vst1q_s32(c + r * ldc, acc[r][0]);
            vst1q_s32(c + r * ldc + 4, acc[r][1]);
        }
    }
};
#endif

#if defined(__aarch64__) && defined(__ARM_FEATURE_MATMUL_INT8) && defined(CPUKERN_NEON_BF16)
// An 8 x 8 tile of C as 4 x 4 blocks of 2 x 2 in float32x4 / int32x4
// registers ([r0c0, r0c1, r1c0, r1c1]); A is packed as row pairs and B as
// column pairs with KB consecutive k values each. Odd row counts compute a
// padding row that lands in the scratch tile.
template <class Self, class APack, class Acc, class AccV>
struct MmlaBase : KernelDefaults {
    static constexpr int MR = 8, NR = 8;
    static constexpr int64_t kMcTarget = 96, kNcTarget = 256;
    static constexpr bool kOffsetA = false;
    static void begin() {}
    static void end() {}

    template <int R>
    static void run(const APack* a, const uint8_t* b, int64_t kk, Acc* c, int64_t ldc, bool load_c) {
        constexpr int RP = (R + 1) / 2, KB = Self::KG;
        AccV acc[RP][4];
#pragma GCC unroll 4
        for (int i = 0; i < RP; ++i)
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j)
                acc[i][j] = load_c ? Self::join(c + 2 * i * ldc + 2 * j, c + (2 * i + 1) * ldc + 2 * j) : Self::zero();
        const int64_t groups = kk / KB;
        for (int64_t g = 0; g < groups; ++g) {
            const APack* ag = a + g * MR * KB;
            typename Self::Op av[RP], bv[4];
#pragma GCC unroll 4
            for (int i = 0; i < RP; ++i) av[i] = Self::load_op(ag + 2 * i * KB);
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) bv[j] = Self::load_op(b + (g * 4 + j) * 16);  // 64 bytes per group
#pragma GCC unroll 4
            for (int i = 0; i < RP; ++i)
#pragma GCC unroll 4
                for (int j = 0; j < 4; ++j) acc[i][j] = Self::mmla(acc[i][j], av[i], bv[j]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < RP; ++i)
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) Self::split(acc[i][j], c + 2 * i * ldc + 2 * j, c + (2 * i + 1) * ldc + 2 * j);
    }
};

struct Bfmmla : MmlaBase<Bfmmla, bf16_t, float, float32x4_t> {
    using AIn = bf16_t;
    using APack = bf16_t;
    using Acc = float;
    using Op = bfloat16x8_t;
    static constexpr int KG = 4, kAkg = 4, APER = 4;
    static constexpr int64_t kKcTarget = 256;
    static constexpr const char* kName = "bfmmla";
    static void pack_a(const bf16_t* s, bf16_t* d) { std::memcpy(d, s, 8); }
    static Op load_op(const void* p) { return vreinterpretq_bf16_u16(vld1q_u16(static_cast<const uint16_t*>(p))); }
    static float32x4_t zero() { return vdupq_n_f32(0.f); }
    static float32x4_t join(const float* r0, const float* r1) { return vcombine_f32(vld1_f32(r0), vld1_f32(r1)); }
    static void split(float32x4_t v, float* r0, float* r1) {
        vst1_f32(r0, vget_low_f32(v));
        vst1_f32(r1, vget_high_f32(v));
    }
    static float32x4_t mmla(float32x4_t acc, Op a, Op b) { return vbfmmlaq_f32(acc, a, b); }
    template <int R>
    static void micro(const bf16_t* a, const uint8_t* b, int64_t kk, float* c, int64_t ldc, bool load_c) {
        run<R>(a, b, kk, c, ldc, load_c);
    }
};

struct Smmla : MmlaBase<Smmla, int8_t, int32_t, int32x4_t> {
    using AIn = int8_t;
    using APack = int8_t;
    using Acc = int32_t;
    using Op = int8x16_t;
    static constexpr int KG = 8, kAkg = 8, APER = 8;
    static constexpr int64_t kKcTarget = 512;
    static constexpr const char* kName = "smmla";
    static void pack_a(const int8_t* s, int8_t* d) { std::memcpy(d, s, 8); }
    static Op load_op(const void* p) { return vld1q_s8(static_cast<const int8_t*>(p)); }
    static int32x4_t zero() { return vdupq_n_s32(0); }
    static int32x4_t join(const int32_t* r0, const int32_t* r1) { return vcombine_s32(vld1_s32(r0), vld1_s32(r1)); }
    static void split(int32x4_t v, int32_t* r0, int32_t* r1) {
        vst1_s32(r0, vget_low_s32(v));
        vst1_s32(r1, vget_high_s32(v));
    }
    static int32x4_t mmla(int32x4_t acc, Op a, Op b) { return vmmlaq_s32(acc, a, b); }
    template <int R>
    static void micro(const int8_t* a, const uint8_t* b, int64_t kk, int32_t* c, int64_t ldc, bool load_c) {
        run<R>(a, b, kk, c, ldc, load_c);
    }
};
#endif

}  // namespace gemm
}  // namespace cpukern
