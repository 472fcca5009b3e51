/* dotlib: float32 and int8 dot products.
 *
 * cpubuild compiles this file once per variant of isa_matrix.toml, with the
 * variant's flags and -DDOTLIB_VARIANT_<NAME>=1; the #if blocks below pick
 * each variant's code path. Every library exports the same C ABI, loaded with
 * ctypes by src/dotlib/__init__.py. Symbols are hidden unless marked API.
 */
#include <stddef.h>
#include <stdint.h>

#if defined(DOTLIB_VARIANT_AVX512) || defined(DOTLIB_VARIANT_AVX2)
#include <immintrin.h>
#elif defined(DOTLIB_VARIANT_NEON_DOTPROD) || defined(DOTLIB_VARIANT_NEON)
#include <arm_neon.h>
#endif

#define API __attribute__((visibility("default")))

/* int8 products are summed in 32-bit lanes, at most this many elements at a
 * time: 65536 * 128 * 128 = 2^30 cannot overflow a lane (or their sum). */
#define I8_BLOCK ((size_t)1 << 16)

API float dotlib_dot_f32(const float *a, const float *b, size_t n)
{
    size_t i = 0;
    float sum = 0.0f;
#if defined(DOTLIB_VARIANT_AVX512)
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    sum = _mm512_reduce_add_ps(acc);
#elif defined(DOTLIB_VARIANT_AVX2)
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    sum = _mm_cvtss_f32(s);
#elif defined(DOTLIB_VARIANT_NEON_DOTPROD) || defined(DOTLIB_VARIANT_NEON)
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (; i + 4 <= n; i += 4)
        acc = vfmaq_f32(acc, vld1q_f32(a + i), vld1q_f32(b + i));
    sum = vaddvq_f32(acc);
#endif
    for (; i < n; i++) /* the tail, and the whole of it in a baseline build */
        sum += a[i] * b[i];
    return sum;
}

/* n <= I8_BLOCK */
static int32_t dot_i8_block(const int8_t *a, const int8_t *b, size_t n)
{
    size_t i = 0;
    int32_t sum = 0;
#if defined(DOTLIB_VARIANT_AVX512)
    __m512i acc = _mm512_setzero_si512();
    for (; i + 32 <= n; i += 32) {
        __m512i x = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(a + i)));
        __m512i y = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(b + i)));
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(x, y));
    }
    sum = _mm512_reduce_add_epi32(acc);
#elif defined(DOTLIB_VARIANT_AVX2)
    __m256i acc = _mm256_setzero_si256();
    for (; i + 16 <= n; i += 16) {
        __m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a + i)));
        __m256i y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + i)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(x, y));
    }
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    sum = _mm_cvtsi128_si32(s);
#elif defined(DOTLIB_VARIANT_NEON_DOTPROD)
    int32x4_t acc = vdupq_n_s32(0);
    for (; i + 16 <= n; i += 16) /* SDOT: four int8 products per 32-bit lane */
        acc = vdotq_s32(acc, vld1q_s8(a + i), vld1q_s8(b + i));
    sum = vaddvq_s32(acc);
#elif defined(DOTLIB_VARIANT_NEON)
    int32x4_t acc = vdupq_n_s32(0);
    for (; i + 16 <= n; i += 16) {
        int8x16_t x = vld1q_s8(a + i), y = vld1q_s8(b + i);
        acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(x), vget_low_s8(y)));
        acc = vpadalq_s16(acc, vmull_high_s8(x, y));
    }
    sum = vaddvq_s32(acc);
#endif
    for (; i < n; i++)
        sum += (int32_t)a[i] * (int32_t)b[i];
    return sum;
}

API int64_t dotlib_dot_i8(const int8_t *a, const int8_t *b, size_t n)
{
    int64_t total = 0;
    for (size_t i = 0; i < n; i += I8_BLOCK)
        total += dot_i8_block(a + i, b + i, n - i < I8_BLOCK ? n - i : I8_BLOCK);
    return total;
}
