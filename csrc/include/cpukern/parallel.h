// A small persistent thread pool shared by every kernel of one variant library.
// std::thread (dynamic libstdc++) instead of OpenMP: grafting Debian's libgomp
// would raise the wheel's glibc floor to 2.34 and put a second OpenMP runtime
// next to torch's. Workers start on first use, never from a static initialiser
// (no variant code may run before the dispatcher approved the variant).
#pragma once
#include <cstdint>

namespace cpukern {

using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);

// Splits [0, n) into at most num_threads() contiguous ranges, each a multiple
// of `grain` except the last, and runs fn on them; the caller runs the first
// (with CPUKERN_OMP_THREADS_BIND the pinned workers run them all, see
// runtime/affinity.cpp). Runs inline when n <= grain, when one unpinned
// thread is configured, or when another caller holds the pool (concurrent
// Python threads: ctypes drops the GIL).
void parallel_for_raw(int64_t n, int64_t grain, RangeFn fn, void* ctx);

template <class F>
inline void parallel_for(int64_t n, int64_t grain, F&& f) {
    parallel_for_raw(n, grain, [](void* c, int64_t b, int64_t e) { (*static_cast<F*>(c))(b, e); }, &f);
}

// Like parallel_for, but [0, n) is cut into `grain`-sized chunks that the
// threads take one at a time (an atomic counter), the caller included: a
// thread the OS delays (a shared or oversubscribed machine) holds up only
// the chunk it is running, never a fixed share of the work. For element-wise
// kernels (norms, activations, rotary), whose chunks cost alike.
void parallel_for_dynamic_raw(int64_t n, int64_t grain, RangeFn fn, void* ctx);

template <class F>
inline void parallel_for_dynamic(int64_t n, int64_t grain, F&& f) {
    parallel_for_dynamic_raw(n, grain, [](void* c, int64_t b, int64_t e) { (*static_cast<F*>(c))(b, e); }, &f);
}

int num_threads();

}  // namespace cpukern
