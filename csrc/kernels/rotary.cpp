// rotary_embedding, vLLM semantics, in place on query and (optional) key.
// cos_sin_cache[pos] = [cos(0..rot/2), sin(0..rot/2)]; only the first rot_dim
// lanes of every head rotate (partial rotary), the rest are left alone.
//   neox (halves):       x[i], x[i + rot/2]  form the pair i
//   gptj (interleaved):  x[2i], x[2i + 1]    form the pair i
// Per token the cos/sin row is widened to float once and shared by all heads.
#include <type_traits>
#include <vector>

#include "cpukern/dtype.h"
#include "cpukern/export.h"
#include "cpukern/parallel.h"
#include "cpukern/simd.h"

namespace cpukern {
namespace {
using namespace simd;

struct Heads {
    void* data;
    int64_t count, token_stride, head_stride;
};

// neox: c, s hold rot/2 floats each, the whole pairs of vectors at their
// start in load_pair's lane order (see neox_table). kFast: store without the
// NaN fix-up (store_fast), right when every input was 16-bit.
template <class T, bool kFast>
void rotate_neox(T* x, const float* c, const float* s, int64_t half) {
    T* y = x + half;
    int64_t i = 0;
    for (; i + 2 * kLanes <= half; i += 2 * kLanes) {
        VF a0, a1, b0, b1;
        load_pair(x + i, a0, a1);
        load_pair(y + i, b0, b1);
        VF c0 = load(c + i), c1 = load(c + i + kLanes), s0 = load(s + i), s1 = load(s + i + kLanes);
        if constexpr (kFast) {
            store_pair_fast(x + i, a0 * c0 - b0 * s0, a1 * c1 - b1 * s1);
            store_pair_fast(y + i, b0 * c0 + a0 * s0, b1 * c1 + a1 * s1);
        } else {
            store_pair(x + i, a0 * c0 - b0 * s0, a1 * c1 - b1 * s1);
            store_pair(y + i, b0 * c0 + a0 * s0, b1 * c1 + a1 * s1);
        }
    }
    for (; i + kLanes <= half; i += kLanes) {
        VF a = load(x + i), b = load(y + i), cv = load(c + i), sv = load(s + i);
        store(x + i, a * cv - b * sv);
        store(y + i, b * cv + a * sv);
    }
    if (i < half) {
        int n = static_cast<int>(half - i);
        VF a = load_partial(x + i, n), b = load_partial(y + i, n), cv = load(c + i), sv = load(s + i);
        store_partial(x + i, a * cv - b * sv, n);
        store_partial(y + i, b * cv + a * sv, n);
    }
}

// Puts the whole pairs of vectors of a neox table (natural order) into
// load_pair<T>'s lane order, as rotate_neox reads them.
template <class T>
void neox_table(float* t, int64_t half) {
    for (int64_t i = 0; i + 2 * kLanes <= half; i += 2 * kLanes) {
        VF a, b;
        load_pair_order<T>(t + i, a, b);
        store(t + i, a);
        store(t + i + kLanes, b);
    }
}

// gptj: cd = cos duplicated per pair, sd = (-sin, +sin) per pair, rot floats each.
template <class T>
void rotate_gptj(T* x, const float* cd, const float* sd, int64_t rot) {
    int64_t i = 0;
    for (; i + kLanes <= rot; i += kLanes) {
        VF v = load(x + i);
        store(x + i, v * load(cd + i) + swap_pairs(v) * load(sd + i));
    }
    if (i < rot) {
        int n = static_cast<int>(rot - i);
        VF v = load_partial(x + i, n);
        store_partial(x + i, v * load(cd + i) + swap_pairs(v) * load(sd + i), n);
    }
}

// A cache row to float: vectors first (the baseline's float16 has no scalar
// conversion but a libgcc call per element).
template <class C>
void widen(float* dst, const C* src, int64_t n) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) store(dst + i, load(src + i));
    for (; i < n; ++i) dst[i] = to_float(src[i]);
}

template <class T, class C>
void rotary(const int64_t* positions, int64_t pos_stride, Heads q, Heads k, const C* cache, int64_t cache_stride,
            int64_t tokens, int64_t rot, bool neox) {
    const int64_t half = rot / 2;
    // float tables padded to whole vectors, so tails load cos/sin unmasked
    const int64_t padded = (rot + kLanes - 1) / kLanes * kLanes + kLanes;
    int64_t per_token = (q.count + k.count) * rot;
    int64_t grain = (int64_t{1} << 14) / (per_token > 0 ? per_token : 1);
    parallel_for_dynamic(tokens, grain < 1 ? 1 : grain, [&](int64_t begin, int64_t end) {
        // cos and sin; gptj also the row widened, then spread over them
        std::vector<float> table((neox ? 2 : 3) * padded, 0.0f);
        float* c = table.data();
        float* s = c + padded;
        float* row_f = neox ? nullptr : s + padded;
        for (int64_t t = begin; t < end; ++t) {
            const C* row = cache + positions[t * pos_stride] * cache_stride;
            if (neox) {
                widen(c, row, half);
                widen(s, row + half, half);
                neox_table<T>(c, half);
                neox_table<T>(s, half);
            } else {
                widen(row_f, row, rot);
                for (int64_t i = 0; i < half; ++i) {
                    const float cv = row_f[i], sv = row_f[half + i];
                    c[2 * i] = c[2 * i + 1] = cv;
                    s[2 * i] = -sv;
                    s[2 * i + 1] = sv;
                }
            }
            for (const Heads* h : {&q, &k}) {
                T* base = static_cast<T*>(h->data) + t * h->token_stride;
                for (int64_t j = 0; j < h->count; ++j) {
                    if (neox)
                        rotate_neox<T, std::is_same_v<C, T>>(base + j * h->head_stride, c, s, half);
                    else
                        rotate_gptj(base + j * h->head_stride, c, s, rot);
                }
            }
        }
    });
}

}  // namespace
}  // namespace cpukern

// key may be NULL (num_kv_heads is then ignored). cache_dtype is the dtype
// code of cos_sin_cache: the query's own, or float32.
CPUKERN_API int32_t cpukern_rotary_embedding(const int64_t* positions, int64_t pos_stride, void* query, void* key,
                                             const void* cache, int64_t tokens, int64_t num_heads,
                                             int64_t num_kv_heads, int64_t rot_dim, int64_t q_token_stride,
                                             int64_t q_head_stride, int64_t k_token_stride, int64_t k_head_stride,
                                             int64_t max_position, int64_t cache_stride, int32_t is_neox,
                                             int32_t dtype, int32_t cache_dtype) {
    if (tokens < 0 || num_heads < 0 || rot_dim < 0 || rot_dim % 2 || (key && num_kv_heads < 0)) return CPUKERN_EINVAL;
    if (cache_dtype != dtype && cache_dtype != CPUKERN_F32) return CPUKERN_EDTYPE;
    for (int64_t t = 0; t < tokens; ++t)  // last line of defence: the Python side reports bad positions
        if (positions[t * pos_stride] < 0 || positions[t * pos_stride] >= max_position) return CPUKERN_EINVAL;
    cpukern::Heads q{query, num_heads, q_token_stride, q_head_stride};
    cpukern::Heads k{key, key ? num_kv_heads : 0, k_token_stride, k_head_stride};
    return cpukern::by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        if (tokens == 0 || rot_dim == 0) return;
        if (cache_dtype == CPUKERN_F32)
            cpukern::rotary<T>(positions, pos_stride, q, k, static_cast<const float*>(cache), cache_stride, tokens,
                               rot_dim, is_neox != 0);
        else
            cpukern::rotary<T>(positions, pos_stride, q, k, static_cast<const T*>(cache), cache_stride, tokens,
                               rot_dim, is_neox != 0);
    });
}

CPUKERN_SLOTS(cpukern_rotary_embedding)
