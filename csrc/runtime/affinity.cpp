// Thread binding of the worker pool (CPUKERN_OMP_THREADS_BIND, like vLLM's
// VLLM_CPU_OMP_THREADS_BIND). The Python side parses the environment (one
// pure function with unit tests: python/cpukern/_threads.py) and hands the
// resulting plan to cpukern_set_thread_plan when it loads a variant library;
// parallel.cpp applies it when it creates the pool, at first use.
//
// With a plan, the pool has one worker per planned thread, worker i pinned to
// cpus[i % ncpus], and the calling thread only hands out work and waits: it is
// never re-pinned, so binding does not leak into the caller's own threads.
#include <atomic>
#include <cstdint>

#if defined(__linux__)
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cpukern/export.h"

namespace cpukern {

bool pool_started();  // parallel.cpp

namespace affinity {
namespace {

#if defined(__linux__)
constexpr int kMaxCpus = CPU_SETSIZE;  // cpu ids a static cpu_set_t can hold
#else
constexpr int kMaxCpus = 1024;
#endif
constexpr int kMaxWorkers = 1024;

// Constant-initialised (no static constructor runs at dlopen).
std::atomic<int> g_threads{0};  // 0: no plan
std::atomic<int> g_ncpus{0};    // 0: threads are not pinned
int g_cpus[kMaxCpus];
std::atomic<int64_t> g_tids[kMaxWorkers];
std::atomic<int> g_workers{0};
std::atomic<long> g_plan_pid{0};  // the process that loaded the library and set its plan (0: never set)

}  // namespace

int planned_threads() { return g_threads.load(std::memory_order_acquire); }
long planned_in() { return g_plan_pid.load(std::memory_order_relaxed); }
bool bound() { return g_ncpus.load(std::memory_order_acquire) > 0; }

void pool_reset(int workers) {
    for (int i = 0; i < kMaxWorkers; ++i) g_tids[i].store(0, std::memory_order_relaxed);
    g_workers.store(workers < kMaxWorkers ? workers : kMaxWorkers, std::memory_order_release);
}

// Runs first in worker thread `index`: pins it and records its thread id.
void worker_started(int index) {
#if defined(__linux__)
    const int n = g_ncpus.load(std::memory_order_acquire);
    if (n > 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(g_cpus[index % n], &set);
        sched_setaffinity(0, sizeof set, &set);  // 0: the calling thread
    }
    if (index < kMaxWorkers) g_tids[index].store(static_cast<int64_t>(syscall(SYS_gettid)), std::memory_order_release);
#else
    (void)index;
#endif
}

}  // namespace affinity
}  // namespace cpukern

using namespace cpukern::affinity;

// Sets the plan for the pool this library creates at first use: `threads`
// workers (0: the default count), pinned round-robin to `cpus` (ncpus 0: not
// pinned). Status: 0 ok, 1 invalid, 4 the pool already runs (plan too late),
// 5 pinning is not supported on this OS.
CPUKERN_API int32_t cpukern_set_thread_plan(int32_t threads, const int32_t* cpus, int32_t ncpus) {
    if (threads < 0 || ncpus < 0 || ncpus > kMaxCpus || (ncpus > 0 && !cpus)) return 1;
    for (int i = 0; i < ncpus; ++i)
        if (cpus[i] < 0 || cpus[i] >= kMaxCpus) return 1;
#if defined(__linux__)
    g_plan_pid.store(static_cast<long>(getpid()), std::memory_order_relaxed);
#endif
    if (cpukern::pool_started()) return 4;
#if !defined(__linux__)
    if (ncpus > 0) return 5;
#endif
    for (int i = 0; i < ncpus; ++i) g_cpus[i] = cpus[i];
    g_ncpus.store(ncpus, std::memory_order_release);
    g_threads.store(threads, std::memory_order_release);
    return 0;
}

// The OS thread ids of the pool's workers (started so far), for tests and
// reports that read their affinity. Returns how many were written.
CPUKERN_API int32_t cpukern_worker_tids(int64_t* out, int32_t cap) {
    const int n = g_workers.load(std::memory_order_acquire);
    int written = 0;
    for (int i = 0; i < n && written < cap; ++i) {
        const int64_t tid = g_tids[i].load(std::memory_order_acquire);
        if (tid) out[written++] = tid;
    }
    return written;
}

// 1 when the pool's workers are pinned to CPUs.
CPUKERN_API int32_t cpukern_threads_bound(void) { return bound() ? 1 : 0; }
