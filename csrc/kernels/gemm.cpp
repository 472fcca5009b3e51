// gemm_bf16 and gemm_w8a8: the C ABI. Each variant library picks its
// micro-kernels at compile time from the ISA macros its flags define (and
// avx512bf16 its bf16 one for larger M by CPU vendor, widen_bf16); the
// packed-B layout it reports (cpukern_gemm_layout) is recorded by the Python
// side with the packed weights and checked on every call.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cpukern/export.h"
#include "cpukern/gemm.h"
#include "cpukern/gemm_arm.h"
#include "cpukern/gemm_generic.h"
#include "cpukern/gemm_x86.h"
#include "cpukern/host.h"

namespace cpukern {
namespace gemm {
namespace {

constexpr int kmax(int a, int b) { return a > b ? a : b; }

// The kernels of one GEMM kind: `Small` for every M, `Large` from kLargeM rows
// on (0: never), `Huge` from kHugeM rows on (0: never), `Gemv` for one row
// below those. All read the same packed-B layout.
template <class S, class L, int64_t LargeM, class G = S, class H = L, int64_t HugeM = 0>
struct Kernels {
    using Small = S;
    using Large = L;
    using Gemv = G;
    using Huge = H;
    static constexpr int64_t kLargeM = LargeM, kHugeM = HugeM;
    static bool huge(int64_t M) { return kHugeM > 0 && M >= kHugeM; }
    static bool large(int64_t M) { return kLargeM > 0 && M >= kLargeM && !huge(M); }
    static bool gemv(int64_t M) { return M == 1 && !large(M) && !huge(M); }
    static bool offsets_a(int64_t M) {
        return huge(M) ? H::kOffsetA : large(M) ? L::kOffsetA : gemv(M) ? G::kOffsetA : S::kOffsetA;
    }
    static bool offsets_b(int64_t M) {
        return huge(M) ? H::kOffsetB : large(M) ? L::kOffsetB : gemv(M) ? G::kOffsetB : S::kOffsetB;
    }
    static const char* name(int64_t M) {
        return huge(M) ? H::kName : large(M) ? L::kName : gemv(M) ? G::kName : S::kName;
    }
    static constexpr int kpad() { return kmax(kmax(kmax(S::kAkg, L::kAkg), G::kAkg), H::kAkg); }
    static constexpr bool colsum() { return S::kOffsetA || L::kOffsetA || G::kOffsetA || H::kOffsetA; }
    static_assert(S::NR == L::NR && S::KG == L::KG && G::NR == S::NR && G::KG == S::KG && H::NR == S::NR &&
                      H::KG == S::KG,
                  "one packed layout per kind and variant");
};

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AMX_INT8__) && defined(__AVX512BF16__)
// Rows from which the AMX tiles (16 or 32 rows per step, the rest zero) beat
// the AVX-512 kernels, measured on an Emerald Rapids class host (docs/gemm.md:
// bf16 at 4 rows 0.69-0.88 of vdpbf16ps's time, at 3 a win or a loss by N; int8
// at 9 rows 0.60, at 8 a tie or a win by N); a build may override them to
// measure again (-DCPUKERN_AMX_BF16_ROWS=1 ...).
#ifndef CPUKERN_AMX_BF16_ROWS
#define CPUKERN_AMX_BF16_ROWS 4
#endif
#ifndef CPUKERN_AMX_INT8_ROWS
#define CPUKERN_AMX_INT8_ROWS 9
#endif
using Bf16 = Kernels<Dpbf16, AmxBf16, CPUKERN_AMX_BF16_ROWS>;
using Bf16Widened = Kernels<Dpbf16, GenericBf16Wide, 16>;  // below the AMX rows, see widen_bf16
#define CPUKERN_BF16_BY_HOST 1
using Int8 = Kernels<Vnni, AmxInt8, CPUKERN_AMX_INT8_ROWS>;
#elif defined(__AVX512BF16__) && defined(__AVX512VNNI__)
using Bf16 = Kernels<Dpbf16, Dpbf16, 0>;
// the same packed B through widened panels + FMA from 16 rows on: see widen_bf16
using Bf16Widened = Kernels<Dpbf16, GenericBf16Wide, 16>;
#define CPUKERN_BF16_BY_HOST 1
using Int8 = Kernels<Vnni, Vnni, 0>;
#elif defined(__AVX512VNNI__)
using Bf16 = Kernels<GenericBf16, GenericBf16Wide, 16>;
using Int8 = Kernels<Vnni, Vnni, 0>;
#elif defined(__AVXVNNI__) && !defined(__AVX512F__)
using Bf16 = Kernels<GenericBf16, GenericBf16Wide, 16>;
using Int8 = Kernels<Vnni, Vnni, 0>;
#elif defined(__aarch64__) && defined(__ARM_FEATURE_MATMUL_INT8) && defined(CPUKERN_NEON_BF16)
using Bf16 = Kernels<Bfmmla, Bfmmla, 0>;
using Int8 = Kernels<Smmla, Smmla, 0>;
#elif defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
using Bf16 = Kernels<GenericBf16, GenericBf16Wide, 16>;
using Int8 = Kernels<Sdot, Sdot, 0>;
#elif defined(CPUKERN_NIBBLE_GEMV)
using Bf16 = Kernels<GenericBf16, GenericBf16Wide, 16>;
using Int8 = Kernels<GenericInt8, GenericInt8Wide, 16, NibbleGemv>;
#ifdef CPUKERN_INT8_FLOAT_SUMS
// from 16 rows on, by CPU vendor: see int8_float_sums
using Int8FloatSums = Kernels<GenericInt8, GenericInt8WideF, 16, NibbleGemv>;
#define CPUKERN_INT8_BY_HOST 1
#endif
#elif defined(CPUKERN_SSE2_TILE)
// The splat-panel kernels from 32 (bf16) / 64 (int8) rows: their B panel, prepared once per block,
// pays off over enough row panels. Zen 4 class, two threads, against the widened panels alone:
// bf16 M = 256 0.85 of the time, 48 0.93, 32 1.00-1.02, 16 1.15; int8 M = 256 0.87, 64 0.92-1.00,
// 48 1.03, 32 1.18 (pmaddwd and paddd share pipes: the shuffles saved count for less).
#ifndef CPUKERN_SSE2_SPLAT_ROWS_BF16
#define CPUKERN_SSE2_SPLAT_ROWS_BF16 32
#endif
#ifndef CPUKERN_SSE2_SPLAT_ROWS_INT8
#define CPUKERN_SSE2_SPLAT_ROWS_INT8 64
#endif
using Bf16 = Kernels<GenericBf16, GenericBf16Wide, 16, GenericBf16, Sse2Bf16Splat, CPUKERN_SSE2_SPLAT_ROWS_BF16>;
using Int8 = Kernels<GenericInt8, GenericInt8Wide, 16, GenericInt8, Sse2Int8Splat, CPUKERN_SSE2_SPLAT_ROWS_INT8>;
// from the splat rows on, by CPU vendor: see int8_float_sums (M = 256 on the Zen 4 class: ~0.95 of the
// time of the int sums)
using Int8FloatSums = Kernels<GenericInt8, GenericInt8Wide, 16, GenericInt8, Sse2Int8SplatF, CPUKERN_SSE2_SPLAT_ROWS_INT8>;
#define CPUKERN_INT8_BY_HOST 1
#else
using Bf16 = Kernels<GenericBf16, GenericBf16Wide, 16>;
using Int8 = Kernels<GenericInt8, GenericInt8Wide, 16>;
#endif

#ifdef CPUKERN_BF16_BY_HOST
static_assert(GenericBf16Wide::kAkg == Dpbf16::kAkg, "the widened kernel reads what vdpbf16ps reads");

// Whether the avx512bf16 variant runs gemm_bf16 from 16 rows on (amx: its
// tiles from CPUKERN_AMX_BF16_ROWS, so never) through widened panels +
// FMA instead of vdpbf16ps. On the Intel AVX-512 BF16 core
// measured (Emerald Rapids, 16 vCPU) vdpbf16ps retires at half the rate of
// two FMAs (1.19 vs 2.51 TFLOP/s), and M=256 took 10.6 ms with it against 7.3
// with the widened kernel; AMD Zen 4/5 run it at full rate. The environment
// (the Python side checks the value) overrides the vendor rule: tests run both.
bool widen_bf16() {
    const char* force = std::getenv("CPUKERN_GEMM_BF16");
    if (force && std::strcmp(force, "widened") == 0) return true;
    if (force && std::strcmp(force, "vdpbf16ps") == 0) return false;
    static const bool intel = host_vendor_is("GenuineIntel");
    return intel;
}

// Only rows the widened kernel would take consult the environment: GEMV and
// other small products stay off getenv.
bool widened_bf16_for(int64_t M) { return Bf16Widened::large(M) && !Bf16::large(M) && widen_bf16(); }
#endif

#ifdef CPUKERN_INT8_BY_HOST
static_assert(Int8FloatSums::kpad() == Int8::kpad(), "both read the same packed B (its column sums: layout)");

// Whether gemm_w8a8 from 16 rows on (the baseline: 64) adds its int32 sums as
// floats (GenericInt8WideF, Sse2Int8SplatF): on AMD's cores vaddps leaves vpmaddwd's pipes to it
// (Zen 4 class, M = 256: see docs/gemm.md). Intel's keep vpaddd (not
// measured): up to Ice Lake their FP adds run on the multiply ports, where
// vpaddd has a third. CPUKERN_GEMM_INT8_SUMS=float|int overrides
// the vendor rule (the Python side checks the value): tests run both.
bool int8_float_sums() {
    const char* force = std::getenv("CPUKERN_GEMM_INT8_SUMS");
    if (force && std::strcmp(force, "float") == 0) return true;
    if (force && std::strcmp(force, "int") == 0) return false;
    static const bool amd = host_vendor_is("AuthenticAMD") || host_vendor_is("HygonGenuine");
    return amd;
}
// (the rows whose kernel in that set adds its sums as floats: it offsets B too)
bool float_sums_for(int64_t M) { return Int8FloatSums::offsets_b(M) && int8_float_sums(); }

// Per row of A: the sum of a + 128 over the padded K (zero padding counts 128).
std::vector<int32_t> offset_row_sums(const int8_t* a, int64_t lda, int64_t M, int64_t K, int64_t Kp) {
    std::vector<int32_t> sums(size_t(M > 0 ? M : 0));
    for (int64_t m = 0; m < M; ++m) {
        uint32_t s = 128u * uint32_t(Kp);
        for (int64_t k = 0; k < K; ++k) s += uint32_t(int32_t(a[m * lda + k]));
        sums[size_t(m)] = int32_t(s);
    }
    return sums;
}
#endif

Layout layout(int32_t kind) {
    using B = Bf16;
    using I = Int8;
    if (kind == kKindBf16) return Layout{kKindBf16, B::Small::NR, B::Small::KG, B::kpad(), 2, false};
#ifdef CPUKERN_INT8_BY_HOST
    constexpr bool colsum = I::colsum() || Int8FloatSums::colsum();  // for whichever set the host takes
#else
    constexpr bool colsum = I::colsum();
#endif
    return Layout{kKindInt8, I::Small::NR, I::Small::KG, I::kpad(), 1, colsum};
}

bool valid_kind(int32_t kind) { return kind == kKindBf16 || kind == kKindInt8; }

std::string describe(int32_t kind) {
    const Layout L = layout(kind);
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s:nr%d:kg%d:kpad%d%s:%s", kind == kKindBf16 ? "bf16" : "int8", L.nr, L.kg, L.kpad,
                  L.colsum ? ":colsum" : "",
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
                  "be"
#else
                  "le"
#endif
    );
    return buf;
}

template <class Ks, class Epi>
int32_t dispatch(const typename Ks::Small::AIn* a, int64_t lda, int64_t M, int64_t N, int64_t K, const uint8_t* packed,
                 const Layout& L, const Epi& epi) {
    const bool ok = Ks::huge(M)    ? run<typename Ks::Huge>(a, lda, M, N, K, packed, L, epi)
                    : Ks::large(M) ? run<typename Ks::Large>(a, lda, M, N, K, packed, L, epi)
                    : Ks::gemv(M)  ? run<typename Ks::Gemv>(a, lda, M, N, K, packed, L, epi)
                                   : run<typename Ks::Small>(a, lda, M, N, K, packed, L, epi);
    return ok ? CPUKERN_OK : CPUKERN_ENOMEM;
}

}  // namespace
}  // namespace gemm
}  // namespace cpukern

using namespace cpukern::gemm;

// The packed-B layout of this variant for `kind` (0 bf16, 1 int8), as text;
// packed weights are only valid for a library that reports the same text.
CPUKERN_API const char* cpukern_gemm_layout(int32_t kind) {
    static const std::string names[2] = {describe(kKindBf16), describe(kKindInt8)};
    return valid_kind(kind) ? names[kind].c_str() : "";
}

// Name of the micro-kernel used for M rows (diagnostics and benchmarks).
CPUKERN_API const char* cpukern_gemm_kernel(int32_t kind, int64_t M) {
#ifdef CPUKERN_BF16_BY_HOST
    if (kind == kKindBf16 && widened_bf16_for(M))
        return Bf16Widened::name(M);
#endif
    if (kind == kKindBf16) return Bf16::name(M);
#ifdef CPUKERN_INT8_BY_HOST
    if (kind == kKindInt8 && float_sums_for(M)) return Int8FloatSums::name(M);
#endif
    if (kind == kKindInt8) return Int8::name(M);
    return "";
}

CPUKERN_API int64_t cpukern_gemm_packed_bytes(int32_t kind, int64_t K, int64_t N) {
    if (!valid_kind(kind) || K < 0 || N < 0) return -1;
    return layout(kind).bytes(K, N);
}

// Packs b[k * sk + n * sn] (K x N, any element strides) into `dst`
// (cpukern_gemm_packed_bytes bytes); on Linux, first advises dst's whole 2 MiB
// pages MADV_HUGEPAGE (advise_huge_pages).
CPUKERN_API int32_t cpukern_gemm_pack_b(int32_t kind, const void* b, int64_t K, int64_t N, int64_t sk, int64_t sn,
                                        void* dst) {
    if (!valid_kind(kind) || K < 0 || N < 0) return CPUKERN_EINVAL;
    const Layout L = layout(kind);
    if (kind == kKindBf16)
        pack_b(static_cast<const uint16_t*>(b), K, N, sk, sn, L, static_cast<uint8_t*>(dst));
    else
        pack_b(static_cast<const int8_t*>(b), K, N, sk, sn, L, static_cast<uint8_t*>(dst));
    return CPUKERN_OK;
}

// out[M, N] (row stride ldo, float32 or bfloat16) = a[M, K] (bf16, row stride lda) x packed B.
CPUKERN_API int32_t cpukern_gemm_bf16(const void* a, int64_t lda, const void* packed, int64_t M, int64_t N, int64_t K,
                                      void* out, int64_t ldo, int32_t out_dtype) {
    if (M < 0 || N < 0 || K < 0) return CPUKERN_EINVAL;
    if (out_dtype != CPUKERN_F32 && out_dtype != CPUKERN_BF16) return CPUKERN_EDTYPE;
    const Layout L = layout(kKindBf16);
    const EpiFloat epi{out, ldo, out_dtype == CPUKERN_BF16};
#ifdef CPUKERN_BF16_BY_HOST
    if (widened_bf16_for(M))
        return dispatch<Bf16Widened>(static_cast<const cpukern::bf16_t*>(a), lda, M, N, K,
                                     static_cast<const uint8_t*>(packed), L, epi);
#endif
    return dispatch<Bf16>(static_cast<const cpukern::bf16_t*>(a), lda, M, N, K,
                                          static_cast<const uint8_t*>(packed), L, epi);
}

// out[M, N] = (a[M, K] int8 x packed int8 B) * a_scale[M, None] * b_scale[None, N].
CPUKERN_API int32_t cpukern_gemm_w8a8(const void* a, int64_t lda, const float* a_scale, const void* packed,
                                      const float* b_scale, int64_t M, int64_t N, int64_t K, void* out, int64_t ldo,
                                      int32_t out_dtype) {
    if (M < 0 || N < 0 || K < 0) return CPUKERN_EINVAL;
    if (out_dtype != CPUKERN_F32 && out_dtype != CPUKERN_BF16) return CPUKERN_EDTYPE;
    const Layout L = layout(kKindInt8);
    const uint8_t* pb = static_cast<const uint8_t*>(packed);
    const int32_t* colsum = reinterpret_cast<const int32_t*>(pb + L.colsum_offset(K, N));
#ifdef CPUKERN_INT8_BY_HOST
    if (float_sums_for(M)) {
        const std::vector<int32_t> rowsum =
            offset_row_sums(static_cast<const int8_t*>(a), lda, M, K, L.k_padded(K));
        const EpiScaled epi{out, ldo, out_dtype == CPUKERN_BF16, a_scale, b_scale, colsum, rowsum.data()};
        return dispatch<Int8FloatSums>(static_cast<const int8_t*>(a), lda, M, N, K, pb, L, epi);
    }
#endif
    const EpiScaled epi{out, ldo, out_dtype == CPUKERN_BF16, a_scale, b_scale,
                        Int8::offsets_a(M) ? colsum : nullptr, nullptr};
    return dispatch<Int8>(static_cast<const int8_t*>(a), lda, M, N, K, pb, L, epi);
}

CPUKERN_SLOTS(cpukern_gemm_bf16)
CPUKERN_SLOTS(cpukern_gemm_w8a8)
