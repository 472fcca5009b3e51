/* cpubuild's roofline probe (`cpubuild bench` compiles it once per variant,
 * with that variant's flags from the project's matrix, and runs it only where
 * the project's own dispatcher says the host runs the variant).
 *
 *   peak --list                       kernels compiled into this binary, one per line
 *   peak --vector-bytes               the vector width of the bandwidth loop (16, 32, 64)
 *   peak KERNEL THREADS MS            {"kernel", "threads", "ops_per_s"}: KERNEL's
 *                                     instruction issued back to back on independent
 *                                     accumulator chains by THREADS threads, best of
 *                                     3 rounds of MS milliseconds
 *   peak bandwidth THREADS MS SIZE..  {"bytes", "read_Bps", "copy_Bps", "update_Bps"}
 *                                     per working set SIZE (bytes, split over the
 *                                     threads): a vector sum over one buffer, memcpy
 *                                     between two, an increment of one in place (copy
 *                                     and update bytes count read + written)
 *
 * Built at -O1 (see roofline.py). Which kernel bounds which variant and dtype
 * is data (cpubuild's hardware facts, [[peak.<arch>]]); a kernel here only
 * knows how many operations (a multiply-add counts 2) each step does. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef double (*kernel_fn)(int64_t iterations, volatile double* sink);
struct kernel {
    const char* name;
    kernel_fn fn;
};

static double low_bits(const void* p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return (double)v;
}

/* A kernel: fourteen independent accumulator chains (latency x ports of the
 * widest units known, with room: SSE2's mulps + addps chain takes 6 cycles
 * on Zen 4 with two multiplies and two adds a cycle, so twelve chains read
 * 0.86 of the rate of fourteen there), as named variables so that they stay
 * in registers, each updated by STEP once per iteration; OPS operations per
 * STEP. All chains are combined into the sink, so none is dead code. */
#define CHAINS 14
#define KERNEL(NAME, T, INIT, STEP, COMBINE, OPS)                                                     \
    static double NAME(int64_t n, volatile double* sink) {                                          \
        T c0 = INIT(0), c1 = INIT(1), c2 = INIT(2), c3 = INIT(3), c4 = INIT(4), c5 = INIT(5);       \
        T c6 = INIT(6), c7 = INIT(7), c8 = INIT(8), c9 = INIT(9), c10 = INIT(10), c11 = INIT(11);   \
        T c12 = INIT(12), c13 = INIT(13);                                                             \
        for (int64_t it = 0; it < n; ++it) {                                                          \
            c0 = STEP(c0); c1 = STEP(c1); c2 = STEP(c2); c3 = STEP(c3); c4 = STEP(c4);              \
            c5 = STEP(c5); c6 = STEP(c6); c7 = STEP(c7); c8 = STEP(c8); c9 = STEP(c9);              \
            c10 = STEP(c10); c11 = STEP(c11); c12 = STEP(c12); c13 = STEP(c13);                       \
        }                                                                                             \
        c0 = COMBINE(c0, c1); c2 = COMBINE(c2, c3); c4 = COMBINE(c4, c5); c6 = COMBINE(c6, c7);     \
        c8 = COMBINE(c8, c9); c10 = COMBINE(c10, c11); c12 = COMBINE(c12, c13);                     \
        c0 = COMBINE(c0, c2); c4 = COMBINE(c4, c6); c8 = COMBINE(c8, c12);                            \
        c8 = COMBINE(c8, c10); c0 = COMBINE(c0, c4); c0 = COMBINE(c0, c8);                           \
        *sink += low_bits(&c0);                                                                       \
        return (double)n * CHAINS * (OPS);                                                            \
    }

/* Generic 16-byte vectors (GCC/Clang vector extensions): the compiler emits
 * the variant's instructions (SSE2 mulps + addps, NEON fmla, z vfmasb, or
 * scalar code where the variant has no vector unit). c = c * a + b converges
 * (a < 1): no overflow, no denormals. */
typedef float v4f __attribute__((vector_size(16)));
#define ADD(x, y) ((x) + (y))
#define V4F_INIT(i) ((v4f){(float)(i), 1.0f, 2.0f, 3.0f})
#define V4F_STEP(c) ((c) * (v4f){0.999f, 0.999f, 0.999f, 0.999f} + (v4f){0.001f, 0.001f, 0.001f, 0.001f})
KERNEL(vec128_fp32, v4f, V4F_INIT, V4F_STEP, ADD, 8)
#define F_INIT(i) ((float)(i))
#define F_STEP(c) ((c) * 0.999f + 0.001f)
KERNEL(scalar_fp32, float, F_INIT, F_STEP, ADD, 2)

#if defined(__x86_64__)
#if defined(__AVX512F__)
#define PS512_INIT(i) _mm512_set1_ps((float)(i))
#define PS512_FMA(c) _mm512_fmadd_ps((c), _mm512_set1_ps(0.999f), _mm512_set1_ps(0.001f))
KERNEL(fma512_fp32, __m512, PS512_INIT, PS512_FMA, _mm512_add_ps, 32)
#endif
#if defined(__AVX512BW__)
#define EPI512_INIT(i) _mm512_set1_epi32(i)
#define MADDWD512(c) _mm512_madd_epi16((c), _mm512_set1_epi16(3)) /* 32 products of 16-bit lanes */
KERNEL(maddwd512_int8, __m512i, EPI512_INIT, MADDWD512, _mm512_add_epi32, 64)
#endif
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#define DPBF16_512(c) _mm512_dpbf16_ps((c), (__m512bh)_mm512_set1_epi16(0x3a83), (__m512bh)_mm512_set1_epi16(0x3a83))
KERNEL(dpbf16_512, __m512, PS512_INIT, DPBF16_512, _mm512_add_ps, 64) /* 32 bf16 pairs, ~1e-3 each */
#endif
#if defined(__AVX512F__) && defined(__AVX512VNNI__)
#define DPBUSD512(c) _mm512_dpbusd_epi32((c), _mm512_set1_epi8(3), _mm512_set1_epi8(-2))
KERNEL(dpbusd512_int8, __m512i, EPI512_INIT, DPBUSD512, _mm512_add_epi32, 128) /* 64 u8 x s8 products */
#endif
#if defined(__AVXVNNI__)
#define EPI256_INIT(i) _mm256_set1_epi32(i)
#define DPBUSD256(c) _mm256_dpbusd_avx_epi32((c), _mm256_set1_epi8(3), _mm256_set1_epi8(-2))
KERNEL(dpbusd256_int8, __m256i, EPI256_INIT, DPBUSD256, _mm256_add_epi32, 64)
#endif
#if defined(__FMA__) && defined(__AVX__)
#define PS256_INIT(i) _mm256_set1_ps((float)(i))
#define PS256_FMA(c) _mm256_fmadd_ps((c), _mm256_set1_ps(0.999f), _mm256_set1_ps(0.001f))
KERNEL(fma256_fp32, __m256, PS256_INIT, PS256_FMA, _mm256_add_ps, 16)
#endif
#if defined(__AVX2__)
#define EPI256I_INIT(i) _mm256_set1_epi32(i)
#define MADDWD256(c) _mm256_madd_epi16((c), _mm256_set1_epi16(3))
KERNEL(maddwd256_int8, __m256i, EPI256I_INIT, MADDWD256, _mm256_add_epi32, 32)
#endif
#define EPI128_INIT(i) _mm_set1_epi32(i)
#define MADDWD128(c) _mm_madd_epi16((c), _mm_set1_epi16(3)) /* SSE2 pmaddwd: 8 products */
KERNEL(maddwd128_int8, __m128i, EPI128_INIT, MADDWD128, _mm_add_epi32, 16)

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AMX_INT8__)
/* AMX: four 16 x 16 accumulator tiles (tmm0-3) fed by two A and two B tiles
 * (tmm4-7), as a 32 x 32 block; 16 rows x 64 bytes each. Linux needs the
 * XTILEDATA permission first (requested in main). */
struct tilecfg {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
static void amx_config(void) {
    struct tilecfg cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    /* Operands as a GEMM sees them: on an Emerald Rapids class VM all-zero
     * tiles ran 1.15-1.2x as fast as any data on one core (interleaved) and
     * this two-thread probe 1.34-1.55x, a rate no real product reaches.
     * Values in [2^-7, 2) of either sign as bf16; as int8 the same bytes. */
    uint16_t operand[16 * 32] __attribute__((aligned(64)));
    uint32_t x = 12345;
    for (int i = 0; i < 16 * 32; ++i) {
        x = x * 1103515245u + 12345u;
        operand[i] = (uint16_t)(0x3c00u + ((x >> 16) & 0x3ffu) + ((x >> 4) & 0x8000u));
    }
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, operand, 64);
    _tile_loadd(5, operand, 64);
    _tile_loadd(6, operand, 64);
    _tile_loadd(7, operand, 64);
}
static double amx_bf16(int64_t n, volatile double* sink) { /* tdpbf16ps: 16 x 16 x 32 */
    amx_config();
    for (int64_t it = 0; it < n; ++it) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float out[16 * 16];
    _tile_stored(0, out, 64);
    _tile_release();
    *sink += out[0];
    return (double)n * 4 * 16 * 16 * 32 * 2;
}
static double amx_int8(int64_t n, volatile double* sink) { /* tdpbssd: 16 x 16 x 64 */
    amx_config();
    for (int64_t it = 0; it < n; ++it) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    int32_t out[16 * 16];
    _tile_stored(0, out, 64);
    _tile_release();
    *sink += out[0];
    return (double)n * 4 * 16 * 16 * 64 * 2;
}
#define HAVE_AMX 1
#endif
#endif /* __x86_64__ */

#if defined(__aarch64__)
#define S32_INIT(i) vdupq_n_s32(i)
#if defined(__ARM_FEATURE_DOTPROD)
#define SDOT(c) vdotq_s32((c), vdupq_n_s8(3), vdupq_n_s8(-2)) /* sdot .4s: 16 products */
KERNEL(sdot128_int8, int32x4_t, S32_INIT, SDOT, vaddq_s32, 32)
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8)
#define SMMLA(c) vmmlaq_s32((c), vdupq_n_s8(3), vdupq_n_s8(-2)) /* smmla: 2x8 by 8x2, 32 products */
KERNEL(smmla128_int8, int32x4_t, S32_INIT, SMMLA, vaddq_s32, 64)
#endif
#if defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
#define F32_INIT(i) vdupq_n_f32((float)(i))
#define BF_ONE vreinterpretq_bf16_u16(vdupq_n_u16(0x3a83))
#define BFMMLA(c) vbfmmlaq_f32((c), BF_ONE, BF_ONE) /* bfmmla: 2x4 by 4x2, 16 products */
KERNEL(bfmmla128_bf16, float32x4_t, F32_INIT, BFMMLA, vaddq_f32, 32)
#endif
#define S16_INIT(i) vdupq_n_s16((int16_t)(i))
#define SMLAL(c) vmlal_s8((c), vdup_n_s8(3), vdup_n_s8(-2)) /* smlal .8h: 8 products */
KERNEL(smlal128_int8, int16x8_t, S16_INIT, SMLAL, vaddq_s16, 16)
#endif /* __aarch64__ */

static const struct kernel KERNELS[] = {
    {"vec128_fp32", vec128_fp32},
    {"scalar_fp32", scalar_fp32},
#if defined(__x86_64__)
    {"maddwd128_int8", maddwd128_int8},
#if defined(__FMA__) && defined(__AVX__)
    {"fma256_fp32", fma256_fp32},
#endif
#if defined(__AVX2__)
    {"maddwd256_int8", maddwd256_int8},
#endif
#if defined(__AVXVNNI__)
    {"dpbusd256_int8", dpbusd256_int8},
#endif
#if defined(__AVX512F__)
    {"fma512_fp32", fma512_fp32},
#endif
#if defined(__AVX512BW__)
    {"maddwd512_int8", maddwd512_int8},
#endif
#if defined(__AVX512F__) && defined(__AVX512VNNI__)
    {"dpbusd512_int8", dpbusd512_int8},
#endif
#if defined(__AVX512F__) && defined(__AVX512BF16__)
    {"dpbf16_512", dpbf16_512},
#endif
#if defined(HAVE_AMX)
    {"amx_bf16", amx_bf16},
    {"amx_int8", amx_int8},
#endif
#endif
#if defined(__aarch64__)
    {"smlal128_int8", smlal128_int8},
#if defined(__ARM_FEATURE_DOTPROD)
    {"sdot128_int8", sdot128_int8},
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8)
    {"smmla128_int8", smmla128_int8},
#endif
#if defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
    {"bfmmla128_bf16", bfmmla128_bf16},
#endif
#endif
};

/* ------------------------------------------------------------ threads */

struct job {
    /* in */
    kernel_fn fn;
    int64_t iterations;
    int mode; /* 0: kernel, 1: read, 2: copy, 3: update in place */
    unsigned char* src;
    unsigned char* dst;
    size_t bytes;
    double seconds;
    pthread_barrier_t* barrier;
    /* out */
    double work; /* ops or bytes */
    double elapsed;
};

/* The read loop uses the widest vector the build's ISA has (one load per
   vector register, as a kernel built for that ISA does): a 64-byte generic
   vector on an AVX2 build is split and spilled, and the loop then measures its
   own instructions (37-49 GB/s in cache on a Zen 4 host where the AVX-512 build
   read 141-245). Eight accumulators per pass (four per stream) keep every load
   port busy; O2 keeps them in registers (checked in the generated code: one
   load-op add per vector, no stack traffic in the loop). */
#if defined(__AVX512F__)
#define READ_VECTOR_BYTES 64
#elif defined(__AVX2__)
#define READ_VECTOR_BYTES 32
#else
#define READ_VECTOR_BYTES 16
#endif
typedef uint64_t vread __attribute__((vector_size(READ_VECTOR_BYTES), aligned(READ_VECTOR_BYTES)));

/* Reads the buffer as two streams side by side (its halves): kernels read several
   inputs at once, and a single stream under-reports what memory delivers (a
   two-input dot product read 127-137% of a one-stream figure). */
__attribute__((optimize("O2"))) static double read_pass(const unsigned char* p, size_t bytes) {
    const size_t half = bytes / 2 / (4 * sizeof(vread)) * (4 * sizeof(vread));
    const vread* a = (const vread*)__builtin_assume_aligned(p, 64);
    const vread* b = (const vread*)__builtin_assume_aligned(p + bytes / 2 / 64 * 64, 64);
    vread a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
    const size_t n = half / sizeof(vread);
    for (size_t i = 0; i < n; i += 4) {
        a0 += a[i]; a1 += a[i + 1]; a2 += a[i + 2]; a3 += a[i + 3];
        b0 += b[i]; b1 += b[i + 1]; b2 += b[i + 2]; b3 += b[i + 3];
    }
    const vread s = (a0 + a1) + (a2 + a3) + (b0 + b1) + (b2 + b3);
    uint64_t x = 0;
    for (size_t l = 0; l < sizeof s / sizeof s[0]; ++l) x ^= s[l];
    return (double)(x & 1);
}

/* Adds one to every vector of the buffer, in place: the traffic of an op that
   writes back what it read (no line fetched for ownership alone, unlike a copy's
   destination): on the Zen 4 class host 1.7x the copy figure from DRAM, 2x from L3. */
__attribute__((optimize("O2"))) static void update_pass(unsigned char* p, size_t bytes) {
    vread* v = (vread*)__builtin_assume_aligned(p, 64);
    const size_t n = bytes / sizeof(vread);
    for (size_t i = 0; i < n; ++i) v[i] += 1;
}

static void* worker(void* arg) {
    struct job* j = (struct job*)arg;
    volatile double sink = 0;
    pthread_barrier_wait(j->barrier);
    const double start = now();
    double work = 0, t = start;
    do {
        if (j->mode == 0) {
            work += j->fn(j->iterations, &sink);
        } else if (j->mode == 1) {
            sink += read_pass(j->src, j->bytes);
            work += (double)j->bytes;
        } else if (j->mode == 2) {
            memcpy(j->dst, j->src, j->bytes);
            __asm__ volatile("" : : "r"(j->dst) : "memory");
            work += 2.0 * (double)j->bytes;
        } else {
            update_pass(j->src, j->bytes);
            __asm__ volatile("" : : "r"(j->src) : "memory");
            work += 2.0 * (double)j->bytes;
        }
        t = now();
    } while (t - start < j->seconds);
    j->work = work;
    j->elapsed = t - start;
    return NULL;
}

/* Best of three rounds of `threads` workers: the sum of their rates. */
static double run_threads(int threads, struct job* proto, unsigned char** srcs, unsigned char** dsts) {
    double best = 0;
    for (int round = 0; round < 3; ++round) {
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, NULL, (unsigned)threads);
        pthread_t tid[256];
        struct job jobs[256];
        for (int i = 0; i < threads; ++i) {
            jobs[i] = *proto;
            jobs[i].barrier = &barrier;
            if (srcs) jobs[i].src = srcs[i];
            if (dsts) jobs[i].dst = dsts[i];
            pthread_create(&tid[i], NULL, worker, &jobs[i]);
        }
        double rate = 0;
        for (int i = 0; i < threads; ++i) {
            pthread_join(tid[i], NULL);
            rate += jobs[i].work / jobs[i].elapsed;
        }
        pthread_barrier_destroy(&barrier);
        if (rate > best) best = rate;
    }
    return best;
}

/* A bandwidth buffer on transparent huge pages where the kernel offers them on
   request (THP "madvise"), as NumPy asks for its arrays from 4 MiB on - the
   benchmarks' inputs: on 4 KiB pages the hardware prefetchers stop at every
   page. Zen 4 class, 2 threads: 32 MiB read 168-172 GB/s on huge pages against
   99-141 on small ones, 256 MiB 68-70 against 50-55 (a GEMV of numpy weights
   read 152 % of the small-page figure). */
static void* bandwidth_buffer(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t huge = (size_t)2 << 20;
    void* p = aligned_alloc(huge, (bytes + huge - 1) / huge * huge);
    if (p) madvise(p, bytes, MADV_HUGEPAGE); /* advice: a refusal keeps small pages */
    return p;
#else
    return aligned_alloc(4096, bytes);
#endif
}

static int usage(void) {
    fprintf(stderr, "usage: peak --list | peak KERNEL THREADS MS | peak bandwidth THREADS MS SIZE...\n");
    return 2;
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "--vector-bytes") == 0) {
        printf("%d\n", READ_VECTOR_BYTES);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < sizeof KERNELS / sizeof KERNELS[0]; ++i) printf("%s\n", KERNELS[i].name);
        return 0;
    }
    if (argc < 4) return usage();
    const int threads = atoi(argv[2]);
    const double seconds = atof(argv[3]) / 1000.0;
    if (threads < 1 || threads > 256 || seconds <= 0) return usage();
    struct job proto;
    memset(&proto, 0, sizeof proto);
    proto.seconds = seconds;

    if (strcmp(argv[1], "bandwidth") == 0) {
        for (int a = 4; a < argc; ++a) {
            const size_t total = (size_t)strtoull(argv[a], NULL, 10);
            const size_t per = (total / (size_t)threads) & ~(size_t)1023;
            if (per < 4096) return usage();
            unsigned char *srcs[256], *dsts[256];
            for (int i = 0; i < threads; ++i) {
                srcs[i] = bandwidth_buffer(per);
                dsts[i] = bandwidth_buffer(per / 2);
                if (!srcs[i] || !dsts[i]) {
                    fprintf(stderr, "peak: out of memory\n");
                    return 1;
                }
                memset(srcs[i], 1, per); /* fault the pages in before timing */
                memset(dsts[i], 0, per / 2);
            }
            proto.mode = 1;
            proto.bytes = per; /* read: one buffer of the working set, as two streams */
            const double read = run_threads(threads, &proto, srcs, NULL);
            proto.mode = 2;
            proto.bytes = per / 2; /* copy: source and destination make the working set */
            const double copy = run_threads(threads, &proto, srcs, dsts);
            proto.mode = 3;
            proto.bytes = per; /* update: the working set, read and written back */
            const double update = run_threads(threads, &proto, srcs, NULL);
            printf("{\"bytes\": %zu, \"read_Bps\": %.6g, \"copy_Bps\": %.6g, \"update_Bps\": %.6g}\n",
                   per * (size_t)threads, read, copy, update);
            fflush(stdout);
            for (int i = 0; i < threads; ++i) {
                free(srcs[i]);
                free(dsts[i]);
            }
        }
        return 0;
    }

    kernel_fn fn = NULL;
    for (size_t i = 0; i < sizeof KERNELS / sizeof KERNELS[0]; ++i)
        if (strcmp(KERNELS[i].name, argv[1]) == 0) fn = KERNELS[i].fn;
    if (!fn) {
        fprintf(stderr, "peak: kernel %s is not compiled into this binary (see --list)\n", argv[1]);
        return 3;
    }
#if defined(HAVE_AMX) && defined(__linux__)
    if (strncmp(argv[1], "amx_", 4) == 0 && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18) != 0) {
        fprintf(stderr, "peak: the kernel refused AMX tile data (arch_prctl XTILEDATA)\n");
        return 4;
    }
#endif
    /* calibrate: one call of about a millisecond between clock reads */
    volatile double sink = 0;
    int64_t iterations = 256;
    for (;;) {
        const double t0 = now();
        fn(iterations, &sink);
        if (now() - t0 >= 1e-3 || iterations >= ((int64_t)1 << 40)) break;
        iterations *= 2;
    }
    proto.mode = 0;
    proto.fn = fn;
    proto.iterations = iterations;
    const double rate = run_threads(threads, &proto, NULL, NULL);
    printf("{\"kernel\": \"%s\", \"threads\": %d, \"ops_per_s\": %.6g}\n", argv[1], threads, rate);
    return 0;
}
