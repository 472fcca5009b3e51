// The GEMM driver of the bare-metal harness (cpubuild.emulate.amx): runs
// known-answer checks of single instructions, then every case of the input
// blob through the project's GEMM C ABI (<prefix>_packed_bytes / _pack_b /
// _bf16 / _w8a8 / _kernel, prefix from [tool.cpubuild.baremetal] abi-prefix,
// compiled from the project's sources with the variant's flags) and writes the
// raw results to COM1 as hex; the host compares them with its reference. No
// kernel code here.
#include <cpuid.h>

#include <cstdint>

#include "rt.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#ifndef CPUBUILD_GEMM_PREFIX
#error "build with -DCPUBUILD_GEMM_PREFIX=<the project's GEMM C ABI prefix>"
#endif
#define CPUBUILD_CAT2(a, b) a##_##b
#define CPUBUILD_CAT(a, b) CPUBUILD_CAT2(a, b)
#define GEMM(name) CPUBUILD_CAT(CPUBUILD_GEMM_PREFIX, name)

extern "C" {
const char* GEMM(kernel)(int32_t kind, int64_t M);
int64_t GEMM(packed_bytes)(int32_t kind, int64_t K, int64_t N);
int32_t GEMM(pack_b)(int32_t kind, const void* b, int64_t K, int64_t N, int64_t sk, int64_t sn, void* dst);
int32_t GEMM(bf16)(const void* a, int64_t lda, const void* packed, int64_t M, int64_t N, int64_t K, void* out,
                          int64_t ldo, int32_t out_dtype);
int32_t GEMM(w8a8)(const void* a, int64_t lda, const float* a_scale, const void* packed, const float* b_scale,
                          int64_t M, int64_t N, int64_t K, void* out, int64_t ldo, int32_t out_dtype);
extern const unsigned char harness_cases[];
}

namespace {

constexpr uint32_t kMagic = 0x31484243;  // "CBH1"
constexpr uint32_t kFlagBf16Out = 1, kFlagTransposedB = 2;

struct CaseHeader {  // 64 bytes, little-endian, offsets from the blob's start
    uint32_t kind, m, n, k, flags, a_off, b_off, a_scale_off, b_scale_off, reserved[7];
};

void words(const void* p, int64_t count, int bytes_each) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (int64_t i = 0; i < count; ++i) {
        uint64_t v = 0;
        for (int j = bytes_each - 1; j >= 0; --j) v = v << 8 | b[i * bytes_each + j];
        rt_hex(v, 2 * bytes_each);
        rt_putc((i + 1) % 32 == 0 || i + 1 == count ? '\n' : ' ');
    }
}

void kat_line(const char* name, const void* p, int64_t count, int bytes_each) {
    rt_puts("@@h kat ");
    rt_puts(name);
    rt_putc('\n');
    words(p, count, bytes_each);
}

// CPUID's cache descriptors (leaf 4: EAX EBX ECX EDX per cache), the sizes the
// project's code reads when it blocks for the caches
void report_caches() {
    if (__get_cpuid_max(0, nullptr) < 4) return;
    rt_puts("@@h cpuid4\n");
    for (unsigned sub = 0; sub < 16; ++sub) {
        uint32_t r[4];
        __cpuid_count(4, sub, r[0], r[1], r[2], r[3]);
        if ((r[0] & 31) == 0) break;
        words(r, 4, 4);
    }
}

#if defined(__AVX512BF16__)
void kat_bf16() {
    alignas(64) float a[16], b[16], c[16];
    for (int i = 0; i < 16; ++i) {
        a[i] = 1000.0f + float(i) * 3.25f;
        b[i] = -float(i) * 0.75f - 0.125f;
        c[i] = float(i);
    }
    alignas(64) uint16_t two[32];
    _mm512_storeu_si512(two, (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(a), _mm512_load_ps(b)));
    kat_line("vcvtne2ps2bf16", two, 32, 2);
    alignas(32) uint16_t one[16];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(one), (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(a)));
    kat_line("vcvtneps2bf16", one, 16, 2);
    // vdpbf16ps: c[i] + a0*b0 + a1*b1 with bf16 pairs (1 + i/8, 2) x (3, -1 - i/4)
    alignas(64) uint32_t pa[16], pb[16];
    for (int i = 0; i < 16; ++i) {
        const float x0 = 1.0f + float(i) / 8, x1 = 2.0f, y0 = 3.0f, y1 = -1.0f - float(i) / 4;
        uint32_t u0, u1, v0, v1;
        __builtin_memcpy(&u0, &x0, 4);
        __builtin_memcpy(&u1, &x1, 4);
        __builtin_memcpy(&v0, &y0, 4);
        __builtin_memcpy(&v1, &y1, 4);
        pa[i] = (u0 >> 16) | (u1 & 0xffff0000u);
        pb[i] = (v0 >> 16) | (v1 & 0xffff0000u);
    }
    alignas(64) float r[16];
    _mm512_store_ps(r, _mm512_dpbf16_ps(_mm512_load_ps(c), (__m512bh)_mm512_load_si512(pa), (__m512bh)_mm512_load_si512(pb)));
    kat_line("vdpbf16ps", r, 16, 4);
    // the same with B as a memory operand one vector past its base: an EVEX
    // displacement is compressed (disp8 x 64); Bochs 3.0 scales it by 4
    alignas(64) uint32_t two_b[32];
    for (int i = 0; i < 16; ++i) two_b[i] = two_b[16 + i] = pb[i];
    __m512 acc = _mm512_load_ps(c);
    __asm__("vdpbf16ps 64(%1), %2, %0" : "+v"(acc) : "r"(two_b), "v"(_mm512_load_si512(pa)), "m"(two_b));
    _mm512_store_ps(r, acc);
    kat_line("vdpbf16ps-disp8", r, 16, 4);
}
#endif

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AMX_BF16__)
struct alignas(64) Cfg {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

void kat_amx() {
    Cfg cfg{};
    cfg.palette = 1;
    for (int t = 0; t < 3; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    // int8: A 16 x 64 bytes, B 16 rows x 16 columns of byte quads; both hold
    // negative bytes (and bytes >= 128 when read as unsigned)
    alignas(64) int8_t a[16 * 64], b[16 * 64];
    for (int i = 0; i < 16 * 64; ++i) {
        a[i] = int8_t((i * 37 + 11) % 251 - 125);
        b[i] = int8_t((i * 53 + 7) % 241 - 120);
    }
    alignas(64) int32_t c[16 * 16];
#define CPUBUILD_KAT_INT8(name, insn)       \
    _tile_zero(0);                         \
    _tile_loadd(1, a, 64);                 \
    _tile_loadd(2, b, 64);                 \
    insn(0, 1, 2);                         \
    _tile_stored(0, c, 64);                \
    kat_line(name, c, 256, 4);
    CPUBUILD_KAT_INT8("tdpbssd", _tile_dpbssd)
    CPUBUILD_KAT_INT8("tdpbsud", _tile_dpbsud)
    CPUBUILD_KAT_INT8("tdpbusd", _tile_dpbusd)
    CPUBUILD_KAT_INT8("tdpbuud", _tile_dpbuud)
#undef CPUBUILD_KAT_INT8
    // bf16: A 16 x 32 bf16, B 16 rows x 16 columns of bf16 pairs, small integers (exact sums)
    alignas(64) uint16_t ha[16 * 32], hb[16 * 32];
    for (int i = 0; i < 16 * 32; ++i) {
        const float x = float((i * 7) % 9 - 4), y = float((i * 5) % 7 - 3);
        uint32_t u, v;
        __builtin_memcpy(&u, &x, 4);
        __builtin_memcpy(&v, &y, 4);
        ha[i] = uint16_t(u >> 16);
        hb[i] = uint16_t(v >> 16);
    }
    alignas(64) float f[16 * 16];
    _tile_zero(0);
    _tile_loadd(1, ha, 64);
    _tile_loadd(2, hb, 64);
    _tile_dpbf16ps(0, 1, 2);
    _tile_stored(0, f, 64);
    kat_line("tdpbf16ps", f, 256, 4);
    _tile_release();
}
#endif

void run_case(int index, const unsigned char* blob, const CaseHeader& h) {
    const int64_t M = h.m, N = h.n, K = h.k;
    const bool transposed = h.flags & kFlagTransposedB, bf16_out = h.flags & kFlagBf16Out;
    const int64_t sk = transposed ? 1 : N, sn = transposed ? K : 1;
    const int64_t bytes = GEMM(packed_bytes)(int32_t(h.kind), K, N);
    unsigned char* packed = static_cast<unsigned char*>(rt_alloc(size_t(bytes), 64));
    int32_t status = GEMM(pack_b)(int32_t(h.kind), blob + h.b_off, K, N, sk, sn, packed);
#if defined(CPUBUILD_HARNESS_CORRUPT_PACKING)
    // test-only: swap the first two lanes (columns 0 and 1 of the first k group)
    for (int i = 0; i < 4 && bytes >= 8; ++i) {
        const unsigned char t = packed[i];
        packed[i] = packed[4 + i];
        packed[4 + i] = t;
    }
#endif
    void* out = rt_alloc(size_t(M * N * 4), 64);
    if (status == 0 && h.kind == 0)
        status = GEMM(bf16)(blob + h.a_off, K, packed, M, N, K, out, N, bf16_out ? 1 : 0);
    else if (status == 0)
        status = GEMM(w8a8)(blob + h.a_off, K, reinterpret_cast<const float*>(blob + h.a_scale_off), packed,
                                   reinterpret_cast<const float*>(blob + h.b_scale_off), M, N, K, out, N,
                                   bf16_out ? 1 : 0);
    rt_puts("@@h case ");
    rt_hex(uint64_t(index), 4);
    rt_puts(" status=");
    rt_hex(uint64_t(uint32_t(status)), 8);
    rt_puts(" kernel=");
    rt_puts(GEMM(kernel)(int32_t(h.kind), M));
    rt_putc('\n');
    if (status == 0) words(out, M * N, bf16_out ? 2 : 4);
}

}  // namespace

extern "C" int harness_main() {
    uint32_t lo, hi;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    rt_puts("@@h xcr0 ");
    rt_hex(uint64_t(hi) << 32 | lo, 16);
    rt_putc('\n');
    report_caches();
#if defined(__AVX512BF16__)
    kat_bf16();
#endif
#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AMX_BF16__)
    kat_amx();
#endif
    const uint32_t* head = reinterpret_cast<const uint32_t*>(harness_cases);
    if (head[0] != kMagic) {
        rt_puts("@@h fault bad-case-blob\n");
        return 1;
    }
    const CaseHeader* cases = reinterpret_cast<const CaseHeader*>(harness_cases + 64);
    for (uint32_t i = 0; i < head[1]; ++i) run_case(int(i), harness_cases, cases[i]);
    return 0;
}
