#include "cpukern/parallel.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cpukern/export.h"

namespace cpukern {
namespace affinity {  // affinity.cpp: the thread plan (CPUKERN_OMP_THREADS_BIND)
int planned_threads();
long planned_in();  // the pid that set the plan, 0 if none did
bool bound();
void pool_reset(int workers);
void worker_started(int index);
}  // namespace affinity
namespace {

// This process's id, read once and again in a forked child (pthread_atfork):
// getpid() is a system call since glibc 2.25, and every parallel call asks
// whether it runs in a forked child (the pool's threads and OpenMP's team do
// not survive fork) - 2-4 of them a product: a one-row int8 product's call from
// Python took 6.5 us with them, 5.3 us with this (Zen 4 class VM).
pid_t current_pid() {
    static std::atomic<pid_t> pid{0};
    static std::once_flag once;
    std::call_once(once, [] {
        pid.store(getpid(), std::memory_order_relaxed);
        pthread_atfork(nullptr, nullptr, [] { pid.store(getpid(), std::memory_order_relaxed); });
    });
    return pid.load(std::memory_order_relaxed);
}

struct Job {
    RangeFn fn = nullptr;
    void* ctx = nullptr;
    int64_t n = 0;
    int64_t chunk = 0;
    int64_t chunks = 0;  // > 0: a dynamic job (chunks taken one at a time)
    int shares = 0;      // a dynamic job's threads, one share each: no more than its chunks
};

// Dynamic jobs take chunks owner first: the chunk range is cut into one share
// per thread, each thread takes its own share's chunks in order and then helps
// with the others'. Called again on the same data (a model's layers, a loop),
// a thread finds its rows still in its caches, as with a static split, while
// a delayed thread still holds up only the chunk it runs. Measured against one
// shared counter: rotary fp32 206 -> 148 us, fused_add_rms_norm fp32 254 ->
// 223 us (Zen 4 class, 2 threads, 5 of 5 alternating processes; docs/gemm-log.md).
struct alignas(64) Cursor {
    std::atomic<uint64_t> next{0};
};

inline int64_t share_begin(int64_t chunks, int shares, int share) { return chunks * share / shares; }

// How long an idle worker polls for the next job before it blocks
// (CPUKERN_SPIN_US, default 200; 0: block at once). Kernels are called back
// to back (a model's layers, a benchmark loop); a blocked worker's wake-up
// costs tens of microseconds, more in a VM whose idle vCPU halted - longer
// than many whole kernels. OpenMP runtimes spin the same way (GOMP_SPINCOUNT,
// KMP_BLOCKTIME); the poll yields, so other runnable threads still get the CPU.
int64_t spin_ns() {
    if (const char* env = std::getenv("CPUKERN_SPIN_US")) {
        char* end = nullptr;
        long long v = std::strtoll(env, &end, 10);
        if (end != env && *end == '\0' && v >= 0 && v <= 1000000) return static_cast<int64_t>(v) * 1000;
    }
    return 200 * 1000;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

int default_threads() {
    if (const char* env = std::getenv("CPUKERN_NUM_THREADS")) {
        int v = std::atoi(env);
        if (v > 0) return v;
    }
#if defined(__linux__)  // the CPUs this process may use (taskset, cgroups)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c > 0) return c;
    }
#endif  // macOS has no affinity masks
    unsigned hc = std::thread::hardware_concurrency();
    return hc ? static_cast<int>(hc) : 1;
}

class Pool {
  public:
    // Bound (pinned) pools run every part on a worker; otherwise the caller
    // runs part 0 itself.
    explicit Pool(int threads)
        : size_(threads < 1 ? 1 : threads), pid_(current_pid()), bound_(affinity::bound()), spin_ns_(spin_ns()) {
        const int first = bound_ ? 0 : 1;
        affinity::pool_reset(size_);
        for (int i = first; i < size_; ++i) workers_.emplace_back([this, i] {
            affinity::worker_started(i);
            loop(i);
        });
    }
    ~Pool() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stop_ = true;
            published_.fetch_add(1, std::memory_order_release);
        }
        cv_.notify_all();
        for (auto& t : workers_) t.join();
    }
    int size() const { return size_; }
    bool bound() const { return bound_; }
    pid_t pid() const { return pid_; }

    // Caller holds busy_. Runs chunk 0 itself, the rest on workers.
    void run(const Job& job, int parts) {
        {
            std::lock_guard<std::mutex> lk(mu_);
            job_ = job;
            parts_ = parts;
            pending_.store(bound_ ? parts : parts - 1, std::memory_order_relaxed);
            published_.store(++generation_, std::memory_order_release);
        }
        cv_.notify_all();
        if (!bound_) run_part(job, 0);
        // Short spin (the common case: equal chunks finish together), then block.
        for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
            if (spin > 2000) {
                std::unique_lock<std::mutex> lk(mu_);
                done_cv_.wait(lk, [this] { return pending_.load(std::memory_order_acquire) == 0; });
                break;
            }
            std::this_thread::yield();
        }
    }

    // Caller holds busy_. Every thread with a share - one per chunk at most,
    // the caller's the first unless the pool is pinned - claims chunks from
    // the shares' cursors, its own share first,
    // until none is left; the caller then waits only for chunks already
    // claimed. A worker that wakes late finds the job's tag gone from the
    // cursors and never touches the job (its ctx lives on the caller's stack).
    void run_dynamic(const Job& job) {
        Job shared = job;
        uint64_t gen;
        {
            std::lock_guard<std::mutex> lk(mu_);
            // a thread per share, up to one per chunk: the others are not woken for nothing
            shared.shares = static_cast<int>(job.chunks < size_ ? job.chunks : size_);
            job_ = shared;
            parts_ = shared.shares;
            gen = ++generation_;
            published_.store(gen, std::memory_order_release);
            done_.store(0, std::memory_order_relaxed);
            for (int s = 0; s < shared.shares; ++s)
                cursors_[s].next.store(tag(gen) | static_cast<uint64_t>(share_begin(job.chunks, shared.shares, s)),
                                       std::memory_order_release);
        }
        cv_.notify_all();
        if (!bound_) run_chunks(shared, gen, 0);
        for (int spin = 0; done_.load(std::memory_order_acquire) != job.chunks; ++spin) {
            if (spin > 2000) {
                std::unique_lock<std::mutex> lk(mu_);
                done_cv_.wait(lk, [&] { return done_.load(std::memory_order_acquire) == job.chunks; });
                break;
            }
            std::this_thread::yield();
        }
    }

    std::mutex busy;

  private:
    // a cursor = the job's generation (high 32 bits) | its share's next chunk (low 32)
    static uint64_t tag(uint64_t gen) { return gen << 32; }

    void run_chunks(const Job& job, uint64_t gen, int index) {
        const uint64_t mine = tag(gen);
        for (int k = 0; k < job.shares; ++k) {
            const int share = (index + k) % job.shares;
            const int64_t share_end = share_begin(job.chunks, job.shares, share + 1);
            std::atomic<uint64_t>& cursor = cursors_[share].next;
            for (;;) {
                uint64_t v = cursor.load(std::memory_order_acquire);
                do {
                    if ((v & ~uint64_t{0xffffffff}) != mine) return;  // a newer job: this one is done
                    if (static_cast<int64_t>(v & 0xffffffff) >= share_end) break;
                } while (!cursor.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire));
                if (static_cast<int64_t>(v & 0xffffffff) >= share_end) break;
                int64_t begin = static_cast<int64_t>(v & 0xffffffff) * job.chunk;
                int64_t end = begin + job.chunk < job.n ? begin + job.chunk : job.n;
                job.fn(job.ctx, begin, end);
                if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == job.chunks) {
                    std::lock_guard<std::mutex> lk(mu_);
                    done_cv_.notify_all();
                }
            }
        }
    }

    static void run_part(const Job& job, int part) {
        int64_t begin = part * job.chunk;
        int64_t end = begin + job.chunk < job.n ? begin + job.chunk : job.n;
        if (begin < end) job.fn(job.ctx, begin, end);
    }

    // Polls until a job newer than `seen` is published or spin_ns_ passes.
    void spin_for_job(uint64_t seen) const {
        if (spin_ns_ <= 0) return;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns_);
        for (unsigned i = 1;; ++i) {
            if (published_.load(std::memory_order_acquire) != seen) return;
            cpu_relax();
            if (i % 256 == 0) {
                if (std::chrono::steady_clock::now() >= deadline) return;
                std::this_thread::yield();
            }
        }
    }

    void loop(int index) {
        uint64_t seen = 0;
        for (;;) {
            Job job;
            spin_for_job(seen);
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
                if (stop_) return;
                seen = generation_;
                if (index >= parts_) continue;
                job = job_;
            }
            if (job.chunks > 0) {
                run_chunks(job, seen, index);
                continue;
            }
            run_part(job, index);
            if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                std::lock_guard<std::mutex> lk(mu_);
                done_cv_.notify_all();
            }
        }
    }

    int size_;
    pid_t pid_;
    bool bound_;
    int64_t spin_ns_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_, done_cv_;
    Job job_;
    int parts_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
    std::atomic<uint64_t> published_{0};  // generation_, readable without mu_
    std::atomic<int> pending_{0};
    std::unique_ptr<Cursor[]> cursors_{new Cursor[static_cast<size_t>(size_)]};
    std::atomic<int64_t> done_{0};
};

// Plain pointers (constant-initialised): no static constructor runs at dlopen.
std::mutex* g_create_mu = nullptr;
Pool* g_pool = nullptr;
int g_requested = 0;  // 0: default_threads()

Pool* pool() {
    static std::once_flag once;
    std::call_once(once, [] { g_create_mu = new std::mutex; });
    std::lock_guard<std::mutex> lk(*g_create_mu);
    if (g_pool && g_pool->pid() != current_pid()) g_pool = nullptr;  // forked child: threads are gone, leak the old pool
    if (!g_pool) {
        const int planned = affinity::planned_threads();
        g_pool = new Pool(g_requested > 0 ? g_requested : planned > 0 ? planned : default_threads());
    }
    return g_pool;
}

// ---------------------------------------------------------------- OpenMP
// With torch in the process, its OpenMP runtime is loaded with global
// symbols, and its threads busy-wait for milliseconds after every parallel
// region: a second pool next to them gets a CPU only by preemption, and two
// pools put twice the threads on the CPUs (docs/gemm.md, "Next to torch").
// So cpukern runs its
// parallel loops on the process's OpenMP threads whenever a runtime is loaded
// (libgomp, or LLVM's and Intel's with their GOMP entry points):
// CPUKERN_POOL=auto, the default. CPUKERN_POOL=own, or a thread binding
// (CPUKERN_OMP_THREADS_BIND: pinned workers), keeps cpukern's own pool.
struct OpenMP {
    void (*parallel)(void (*)(void*), void*, unsigned, unsigned);
    int (*thread_num)();
    int (*team_size)();
    int (*max_threads)();
};

std::atomic<bool> g_own_pool_forced{false};  // cpukern_use_own_pool

bool own_pool_chosen() {
    static const bool own = [] {
        const char* env = std::getenv("CPUKERN_POOL");
        return env && std::strcmp(env, "own") == 0;
    }();
    return own || g_own_pool_forced.load(std::memory_order_relaxed);
}

// The runtime's entry points, looked up again at most every 100 ms until
// found (torch may be imported after cpukern's first call; a failed dlsym
// walks every loaded library). Not in a forked child (of the process that
// loaded this library, or that found the runtime): libgomp's team does not
// survive fork (the child's next parallel region hangs, torch's own ops too),
// while cpukern's pool starts afresh there.
const OpenMP* process_openmp() {
    static std::atomic<const OpenMP*> found{nullptr};
    static std::atomic<int64_t> next_try_ns{0};
    static std::atomic<pid_t> found_in{0};
    static OpenMP table;
    static std::mutex mu;
    const long loaded_in = affinity::planned_in();
    if (loaded_in != 0 && loaded_in != static_cast<long>(current_pid())) return nullptr;
    if (own_pool_chosen() || affinity::bound()) return nullptr;
    if (const OpenMP* f = found.load(std::memory_order_acquire))
        return found_in.load(std::memory_order_relaxed) == current_pid() ? f : nullptr;
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count();
    if (now < next_try_ns.load(std::memory_order_relaxed)) return nullptr;
    std::lock_guard<std::mutex> lk(mu);
    if (const OpenMP* f = found.load(std::memory_order_acquire)) return f;
    next_try_ns.store(now + 100 * 1000 * 1000, std::memory_order_relaxed);
    void* par = dlsym(RTLD_DEFAULT, "GOMP_parallel");
    void* num = dlsym(RTLD_DEFAULT, "omp_get_thread_num");
    void* team = dlsym(RTLD_DEFAULT, "omp_get_num_threads");
    void* max = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
    if (!par || !num || !team || !max) return nullptr;
    table.parallel = reinterpret_cast<void (*)(void (*)(void*), void*, unsigned, unsigned)>(par);
    table.thread_num = reinterpret_cast<int (*)()>(num);
    table.team_size = reinterpret_cast<int (*)()>(team);
    table.max_threads = reinterpret_cast<int (*)()>(max);
    found_in.store(current_pid(), std::memory_order_relaxed);
    found.store(&table, std::memory_order_release);
    return &table;
}

int openmp_threads(const OpenMP* omp) {
    const int planned = affinity::planned_threads();
    if (planned > 0) return planned;
    if (g_requested > 0) return g_requested;
    static const int from_env = std::getenv("CPUKERN_NUM_THREADS") ? default_threads() : 0;  // read once, as the pool does
    if (from_env > 0) return from_env;
    const int t = omp->max_threads();  // torch.set_num_threads sets it
    return t > 0 ? t : 1;
}

// One call at a time on the runtime; a concurrent caller runs inline.
std::mutex g_openmp_busy;

struct OpenMPJob {
    const OpenMP* omp;
    RangeFn fn;
    void* ctx;
    int64_t n, grain, chunks;  // chunks > 0: dynamic, one share per thread (Cursor)
    int shares;
    std::unique_ptr<Cursor[]> cursors;
};

void openmp_body(void* p) {
    auto* job = static_cast<OpenMPJob*>(p);
    if (job->chunks > 0) {
        const int index = job->omp->thread_num();
        for (int k = 0; k < job->shares; ++k) {
            const int share = (index + k) % job->shares;
            const auto end = static_cast<uint64_t>(share_begin(job->chunks, job->shares, share + 1));
            for (uint64_t c; (c = job->cursors[share].next.fetch_add(1, std::memory_order_relaxed)) < end;) {
                const int64_t begin = static_cast<int64_t>(c) * job->grain;
                job->fn(job->ctx, begin, begin + job->grain < job->n ? begin + job->grain : job->n);
            }
        }
        return;
    }
    // static: as many contiguous ranges as the team has threads, each a multiple of grain
    const int64_t parts = job->omp->team_size();
    int64_t chunk = (job->n + parts - 1) / parts;
    chunk = (chunk + job->grain - 1) / job->grain * job->grain;
    const int64_t begin = job->omp->thread_num() * chunk;
    const int64_t end = begin + chunk < job->n ? begin + chunk : job->n;
    if (begin < end) job->fn(job->ctx, begin, end);
}

// Runs the job on the process's OpenMP runtime; false when there is none
// (or it is busy with another caller of cpukern, or one thread would do).
bool run_on_openmp(int64_t n, int64_t grain, RangeFn fn, void* ctx, bool dynamic) {
    const OpenMP* omp = process_openmp();
    if (!omp) return false;
    const int64_t chunks = (n + grain - 1) / grain;
    int64_t threads = openmp_threads(omp);
    if (threads > chunks) threads = chunks;
    if (threads <= 1 || !g_openmp_busy.try_lock()) {
        fn(ctx, 0, n);
        return true;
    }
    OpenMPJob job{omp, fn, ctx, n, grain, dynamic ? chunks : 0, static_cast<int>(threads), nullptr};
    if (dynamic) {
        job.cursors.reset(new Cursor[static_cast<size_t>(threads)]);
        for (int s = 0; s < job.shares; ++s)
            job.cursors[s].next.store(static_cast<uint64_t>(share_begin(chunks, job.shares, s)), std::memory_order_relaxed);
    }
    omp->parallel(&openmp_body, &job, static_cast<unsigned>(threads), 0);
    g_openmp_busy.unlock();
    return true;
}

}  // namespace

int num_threads() {
    if (const OpenMP* omp = process_openmp()) return openmp_threads(omp);
    return pool()->size();
}

bool pool_started() {
    if (!g_create_mu) return false;
    std::lock_guard<std::mutex> lk(*g_create_mu);
    return g_pool != nullptr && g_pool->pid() == current_pid();
}

void parallel_for_raw(int64_t n, int64_t grain, RangeFn fn, void* ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (run_on_openmp(n, grain, fn, ctx, false)) return;
    Pool* p = pool();
    int64_t max_parts = (n + grain - 1) / grain;
    int parts = static_cast<int>(max_parts < p->size() ? max_parts : p->size());
    // inline: tiny jobs, one thread, or the pool busy with another caller; a
    // pinned pool runs even a single part on its worker (on its CPU)
    if (max_parts <= 1 || (parts <= 1 && !p->bound()) || !p->busy.try_lock()) {
        fn(ctx, 0, n);
        return;
    }
    int64_t chunk = (n + parts - 1) / parts;
    chunk = (chunk + grain - 1) / grain * grain;
    parts = static_cast<int>((n + chunk - 1) / chunk);
    p->run(Job{fn, ctx, n, chunk}, parts);
    p->busy.unlock();
}

void parallel_for_dynamic_raw(int64_t n, int64_t grain, RangeFn fn, void* ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n / grain >= (int64_t{1} << 30)) grain = n / (int64_t{1} << 30) + 1;  // chunk indices fit 32 bits
    if (run_on_openmp(n, grain, fn, ctx, true)) return;
    Pool* p = pool();
    int64_t chunks = (n + grain - 1) / grain;
    if (chunks <= 1 || (p->size() <= 1 && !p->bound()) || !p->busy.try_lock()) {
        fn(ctx, 0, n);
        return;
    }
    p->run_dynamic(Job{fn, ctx, n, grain, chunks});
    p->busy.unlock();
}

}  // namespace cpukern

CPUKERN_API int32_t cpukern_get_num_threads(void) { return cpukern::num_threads(); }

// Keeps this library on its own pool from now on (the Python side calls it in
// a forked child; see process_openmp).
CPUKERN_API void cpukern_use_own_pool(void) { cpukern::g_own_pool_forced.store(true, std::memory_order_relaxed); }

// Rebuilds the pool with n threads (n <= 0: back to the default). Not safe to
// call while a kernel runs; the Python side serialises it.
CPUKERN_API int32_t cpukern_set_num_threads(int32_t n) {
    cpukern::pool();
    std::lock_guard<std::mutex> lk(*cpukern::g_create_mu);
    cpukern::g_requested = n;
    delete cpukern::g_pool;
    cpukern::g_pool = nullptr;
    return 0;
}
