// rms_norm and fused_add_rms_norm: one source, compiled once per variant.
// Memory bound: each row is read from DRAM/L2 once; the second pass over a
// row (scale by 1/rms and weight) hits L1.
#include "cpukern/dtype.h"
#include "cpukern/export.h"
#include "cpukern/parallel.h"
#include "cpukern/simd.h"

#include <type_traits>
#include <vector>

namespace cpukern {
namespace {
using namespace simd;

// Rows per parallel chunk: about 32K elements, so small inputs stay on one
// thread (waking a worker costs more than normalising a few rows).
inline int64_t row_grain(int64_t hidden) {
    int64_t g = (int64_t{1} << 15) / (hidden > 0 ? hidden : 1);
    return g < 1 ? 1 : g;
}

// Rows are walked in pairs of vectors (load_pair / store_pair: the cheapest
// widening and narrowing of the variant), then single vectors, then a
// zero-padded tail. Every array a row meets is walked with the same split.
template <class T>
float sum_squares_exact(const T* x, int64_t hidden);

template <class T>
float sum_squares(const T* x, int64_t hidden) {
#if defined(CPUKERN_HAVE_BF16_DOT)
    if constexpr (std::is_same_v<T, bf16_t>) {
        // The bf16 dot instructions flush denormal squares (|x| < 2^-63) to
        // zero. A sum that small may be made of them (a row of tiny values,
        // eps = 0): take it again exactly. Above 2^-60, what flushed squares
        // (each < 2^-126) could have added is below 2^-40 of the sum for any
        // row of fewer than 2^26 elements.
        float s = sum_squares_bf16(x, hidden);
        return s >= 0x1p-60f ? s : sum_squares_exact(x, hidden);
    }
#endif
    return sum_squares_exact(x, hidden);
}

template <class T>
float sum_squares_exact(const T* x, int64_t hidden) {
    // Eight independent accumulators: the loop is bound by the FMA latency
    // (4 cycles on Zen 4 and Intel), not by loads, with fewer.
    constexpr int kAcc = 8;
    VF acc[kAcc];
    for (VF& a : acc) a = splat(0.f);
    int64_t i = 0;
    for (; i + kAcc * kLanes <= hidden; i += kAcc * kLanes) {
        for (int k = 0; k < kAcc; k += 2) {
            VF a, b;
            load_pair(x + i + k * kLanes, a, b);
            acc[k] += a * a;
            acc[k + 1] += b * b;
        }
    }
    for (; i + kLanes <= hidden; i += kLanes) {
        VF a = load(x + i);
        acc[0] += a * a;
    }
    if (i < hidden) {
        VF a = load_partial(x + i, static_cast<int>(hidden - i));
        acc[1] += a * a;
    }
    return reduce_add(((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
}

// out = x * inv * w, rounded once to T (to nearest; a tie to even or away from
// zero: store_pair_nearest). W: T, or float (widened by with_weights).
// `next` (the next row, or null) is prefetched as we go: its sum of squares
// then reads from L2, not from L3 or memory, at the start of the next row.
template <class T, class W>
void scale_row(T* out, const T* x, const W* w, int64_t hidden, float inv, const T* next = nullptr) {
    VF s = splat(inv);
    int64_t i = 0;
    const char* pre = reinterpret_cast<const char*>(next);
    for (; i + 2 * kLanes <= hidden; i += 2 * kLanes) {
#ifndef CPUKERN_NO_ROW_PREFETCH  // a measuring knob (docs: examples/vllm-cpu/README.md)
        // every line of the step: 128 bytes for AVX-512 fp32, where one prefetch per step
        // (every other line) was slower than none on an Intel host
        if (pre)
            for (size_t off = 0; off < 2 * kLanes * sizeof(T); off += 64) __builtin_prefetch(pre + i * sizeof(T) + off, 0, 2);
#endif
        VF a, b, wa, wb;
        load_pair(x + i, a, b);
        load_pair(w + i, wa, wb);
        store_pair_nearest(out + i, a * s * wa, b * s * wb);
    }
    for (; i + kLanes <= hidden; i += kLanes) store_fast(out + i, load(x + i) * s * load(w + i));
    if (i < hidden) {
        int n = static_cast<int>(hidden - i);
        store_partial(out + i, load_partial(x + i, n) * s * load_partial(w + i, n), n);
    }
}

// 16-bit weights widened to float once per call by the calling thread (every
// thread then reads them: the caller waits for the parallel loop), laid out as
// scale_row reads them (pairs in load_pair's lane order), so the row pass
// multiplies straight from L1.
template <class T, class F>
void with_weights(const T* w, int64_t hidden, int64_t rows, F&& f) {
    if constexpr (std::is_same_v<T, float>) {
        f(w);
    } else {
        if (rows < 4) return f(w);
        thread_local std::vector<float> wide;  // grow-only: no page faults per call
        if (static_cast<int64_t>(wide.size()) < hidden + kLanes) wide.resize(hidden + kLanes);
        float* wf = wide.data();
        int64_t i = 0;
        for (; i + 2 * kLanes <= hidden; i += 2 * kLanes) {
            VF a, b;
            load_pair(w + i, a, b);
            store(wf + i, a);
            store(wf + i + kLanes, b);
        }
        for (; i + kLanes <= hidden; i += kLanes) store(wf + i, load(w + i));
        if (i < hidden) {
            int n = static_cast<int>(hidden - i);
            store_partial(wf + i, load_partial(w + i, n), n);
        }
        f(static_cast<const float*>(wf));
    }
}

inline float inv_rms(float sum_sq, int64_t hidden, float eps) {
    return 1.0f / __builtin_sqrtf(sum_sq / static_cast<float>(hidden) + eps);
}

template <class T>
void rms_norm(T* out, const T* x, const T* w, int64_t rows, int64_t hidden, int64_t x_stride, int64_t out_stride,
              float eps) {
    with_weights(w, hidden, rows, [&](auto* wv) {
        parallel_for_dynamic(rows, row_grain(hidden), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                const T* xr = x + r * x_stride;
                scale_row(out + r * out_stride, xr, wv, hidden, inv_rms(sum_squares(xr, hidden), hidden, eps),
                          r + 1 < end ? xr + x_stride : nullptr);
            }
        });
    });
}

// residual += x (rounded to T), then x = rms_norm(residual) * w: vLLM's semantics.
// The sum of squares is taken over the rounded residual, read back from L1.
template <class T>
void fused_add_rms_norm(T* x, T* residual, const T* w, int64_t rows, int64_t hidden, int64_t x_stride,
                        int64_t res_stride, float eps) {
    with_weights(w, hidden, rows, [&](auto* wv) {
        parallel_for_dynamic(rows, row_grain(hidden), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                T* xr = x + r * x_stride;
                T* rr = residual + r * res_stride;
                VF acc0 = splat(0.f), acc1 = splat(0.f);
                int64_t i = 0;
                for (; i + 2 * kLanes <= hidden; i += 2 * kLanes) {
                    VF xa, xb, ra, rb;
                    load_pair(xr + i, xa, xb);
                    load_pair(rr + i, ra, rb);
                    store_pair_fast(rr + i, xa + ra, xb + rb);
                    load_pair(rr + i, ra, rb);  // the residual as rounded to T, from L1
                    acc0 += ra * ra;
                    acc1 += rb * rb;
                }
                for (; i + kLanes <= hidden; i += kLanes) {
                    store_fast(rr + i, load(xr + i) + load(rr + i));
                    VF a = load(rr + i);
                    acc0 += a * a;
                }
                if (i < hidden) {
                    int n = static_cast<int>(hidden - i);
                    store_partial(rr + i, load_partial(xr + i, n) + load_partial(rr + i, n), n);
                    VF a = load_partial(rr + i, n);
                    acc1 += a * a;
                }
                scale_row(xr, rr, wv, hidden, inv_rms(reduce_add(acc0 + acc1), hidden, eps));
            }
        });
    });
}

}  // namespace
}  // namespace cpukern

using cpukern::by_dtype;

CPUKERN_API int32_t cpukern_rms_norm(void* out, const void* x, const void* weight, int64_t rows, int64_t hidden,
                                     int64_t x_stride, int64_t out_stride, float eps, int32_t dtype) {
    if (rows < 0 || hidden <= 0) return CPUKERN_EINVAL;
    return by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        cpukern::rms_norm(static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(weight), rows, hidden,
                          x_stride, out_stride, eps);
    });
}

CPUKERN_API int32_t cpukern_fused_add_rms_norm(void* x, void* residual, const void* weight, int64_t rows,
                                               int64_t hidden, int64_t x_stride, int64_t res_stride, float eps,
                                               int32_t dtype) {
    if (rows < 0 || hidden <= 0) return CPUKERN_EINVAL;
    return by_dtype(dtype, [&](auto tag) {
        using T = decltype(tag);
        cpukern::fused_add_rms_norm(static_cast<T*>(x), static_cast<T*>(residual), static_cast<const T*>(weight), rows,
                                    hidden, x_stride, res_stride, eps);
    });
}

CPUKERN_SLOTS(cpukern_rms_norm)
CPUKERN_SLOTS(cpukern_fused_add_rms_norm)
