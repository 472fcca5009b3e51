// GEMM building blocks shared by every variant: the packed-B layout, packing,
// cache blocking, threading and epilogues. Only the micro-kernel (a few dozen
// lines per ISA, in gemm_generic.h / gemm_x86.h / gemm_arm.h) differs between
// variants, so the paths that run on the build host exercise all of this.
//
// Packed B: N is cut into panels of `nr` columns (the last one zero-padded);
// inside a panel K runs in groups of `kg` consecutive k values, K zero-padded
// to a multiple of `kpad`:   panel[g][col][kg]   (elements of 1 or 2 bytes).
// A group of one column is one SIMD lane of the micro-kernel (a bf16 pair for
// vdpbf16ps / AMX / the widening FMA path, an int8 quad for vpdpbusd / sdot /
// AMX, a 2x4 / 2x8 block row for bfmmla / smmla). Lanes of 4 bytes hold their
// elements as a native integer (element i at bits [i*w, (i+1)*w)), so the
// generic path is right on big-endian s390x too; wider lanes are in memory
// order (they only exist on little-endian aarch64).
// int8 layouts may append per-column sums of B (int32) after the panels: the
// vpdpbusd path multiplies (a + 128) as unsigned and subtracts 128 * colsum.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cpukern/host.h"
#include "cpukern/parallel.h"
#include "cpukern/simd.h"

#include <sys/mman.h>
#include <unistd.h>

namespace cpukern {
namespace gemm {

constexpr int32_t kKindBf16 = 0;
constexpr int32_t kKindInt8 = 1;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One- and two-row micro-kernels (GEMV) read each B panel once, straight
// through, with little work per byte: fetching 512 bytes ahead took the
// Zen 4 class host's GEMV from 598 to 537 us (bf16, 32 MiB of weights) and
// int8 from 168 to 161 us (16 MiB), alternating in one process, 15 rounds
// (docs/gemm-log.md); 256, 1024 and 2048 bytes ahead did worse there (the avx2
// kernels take 256: kGemvAhead in gemm_generic.h). A prefetch past the
// panel's end is harmless (no fault).
constexpr int64_t kStreamAhead = 512;
template <int Bytes, int64_t Ahead = kStreamAhead>
inline void stream_ahead(const uint8_t* p) {
    for (int off = 0; off < Bytes; off += 64) __builtin_prefetch(p + Ahead + off, 0, 3);
}
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

struct Layout {
    int32_t kind;   // kKindBf16 / kKindInt8
    int32_t nr;     // columns per panel
    int32_t kg;     // k values per lane group
    int32_t kpad;   // K is padded to a multiple of this
    int32_t elem;   // bytes per element (2 bf16, 1 int8)
    bool colsum;    // int32 column sums of B appended

    int64_t k_padded(int64_t K) const { return round_up(K > 0 ? K : 0, kpad); }
    int64_t panels(int64_t N) const { return ceil_div(N, nr); }
    int64_t panel_bytes(int64_t K) const { return k_padded(K) * nr * elem; }
    int64_t colsum_offset(int64_t K, int64_t N) const { return panels(N) * panel_bytes(K); }
    int64_t bytes(int64_t K, int64_t N) const {
        return colsum_offset(K, N) + (colsum ? panels(N) * nr * int64_t(sizeof(int32_t)) : 0);
    }
};

// Position of element i of a kg-group inside its lane (see the header comment).
inline int lane_slot(const Layout& L, int i) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    if (L.kg * L.elem == 4) return L.kg - 1 - i;
#endif
    (void)L;
    return i;
}

// Packed weights are read as long streams (a GEMV reads nothing else): on 2
// MiB pages the hardware prefetchers run on, on 4 KiB pages they stop at each
// page. Zen 4 class, two threads, the same buffer advised either way: the bf16
// GEMV took 1.72x the time on small pages at 32 MiB and 1.28x at 256 MiB
// (DRAM), int8 1.42x / 1.14x (docs/gemm-log.md). NumPy asks for huge pages for its
// large arrays, PyTorch's allocator does not, so the packing asks for the
// whole 2 MiB pages of `dst` before its writes fault them in (THP "madvise";
// "always" needs nothing, "never" refuses - it is only advice).
inline void advise_huge_pages(void* p, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(__STDC_HOSTED__) && __STDC_HOSTED__  // not in a bare-metal guest
    constexpr uintptr_t kHuge = uintptr_t(2) << 20;
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + uintptr_t(bytes)) & ~(kHuge - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

// b[k * sk + n * sn] for any strides (a transposed weight packs as well).
template <class T>
void pack_b(const T* b, int64_t K, int64_t N, int64_t sk, int64_t sn, const Layout& L, uint8_t* dst) {
    advise_huge_pages(dst, L.bytes(K, N));
    const int64_t Kp = L.k_padded(K), panel_bytes = L.panel_bytes(K);
    const int64_t groups = Kp / L.kg;
    int32_t* colsum = L.colsum ? reinterpret_cast<int32_t*>(dst + L.colsum_offset(K, N)) : nullptr;
    parallel_for(L.panels(N), 4, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
            T* panel = reinterpret_cast<T*>(dst + p * panel_bytes);
            const int64_t n0 = p * L.nr;
            for (int64_t g = 0; g < groups; ++g) {
                for (int i = 0; i < L.kg; ++i) {
                    const int64_t k = g * L.kg + i;
                    T* row = panel + g * L.nr * L.kg + lane_slot(L, i);
                    for (int j = 0; j < L.nr; ++j) {
                        const int64_t n = n0 + j;
                        row[j * L.kg] = (k < K && n < N) ? b[k * sk + n * sn] : T{};
                    }
                }
            }
            if (colsum) {
                // from the panel just written (in cache, contiguous; padding is zero): summed down
                // b's columns instead, a 4096 x 4096 int8 pack took 3.0x the time (avx2; avx512vnni 2.2x)
                int32_t* sums = colsum + n0;
                for (int j = 0; j < L.nr; ++j) sums[j] = 0;
                for (int64_t g = 0; g < groups; ++g) {
                    const T* group = panel + g * L.nr * L.kg;
                    for (int j = 0; j < L.nr; ++j)
                        for (int i = 0; i < L.kg; ++i) sums[j] += static_cast<int32_t>(group[j * L.kg + i]);
                }
            }
        }
    });
}

// Per-thread growable buffer: kept between calls, so steady-state calls do
// not allocate (page faults are very expensive on small VMs). Mapped here, not
// taken from malloc: where an allocator puts it decided 10 % of a GEMM (M=256,
// the same build: 20.0 ms with glibc's malloc, 22.0 with tcmalloc preloaded, as
// `cpubuild bench` runs; 20.4-21.0 with its own mapping under either). Each kind
// starts at its own offset into its first page, so the A panels, the B panels
// and the C tiles a micro-kernel touches do not share 4 KiB offsets.
class Scratch {
  public:
    explicit Scratch(size_t offset) : offset_(offset) {}
    ~Scratch() { release(); }
    void* get(size_t bytes) {
        if (bytes > cap_) {
            release();
            const size_t want = (bytes + offset_ + 4095) & ~size_t(4095);
            void* p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) return nullptr;
            base_ = p;
            mapped_ = want;
            cap_ = want - offset_;
        }
        return static_cast<char*>(base_) + offset_;
    }

  private:
    void release() {
        if (base_) munmap(base_, mapped_);
        base_ = nullptr;
        mapped_ = cap_ = 0;
    }
    size_t offset_;
    void* base_ = nullptr;
    size_t mapped_ = 0, cap_ = 0;
};

inline Scratch& a_scratch() {
    static thread_local Scratch s(0);
    return s;
}
inline Scratch& c_scratch() {
    static thread_local Scratch s(2048 + 64);
    return s;
}
inline Scratch& b_scratch() {
    static thread_local Scratch s(1024);
    return s;
}

// Bytes of the next B slice to fetch into L2 while a micro-kernel runs.
// Kernels with `kPrefetchInMicro` take them as their last argument and fetch
// them in shares over their k steps: as one burst before each call (what the
// others get) they stalled on the line fill buffers - AMX M=256 spent 7 % of
// its time on the instruction after the burst, the 8-row vpdpbusd kernel at
// M=9-32 about a quarter.
struct Prefetch {
    const uint8_t* at = nullptr;
    int64_t bytes = 0;
    // bytes per step, whole lines, when spread over `steps`
    int64_t per_step(int64_t steps) const { return steps > 0 ? round_up(ceil_div(bytes, steps), 64) : 0; }
    // fetches step s's share
    void step(int64_t s, int64_t per) const {
        const int64_t end = (s + 1) * per < bytes ? (s + 1) * per : bytes;
        for (int64_t off = s * per; off < end; off += 64) __builtin_prefetch(at + off, 0, 2);
    }
};
// What a micro-kernel may declare beside its shapes, with the defaults every
// kernel inherits (a kernel re-declares what it changes).
struct KernelDefaults {
    // Takes the next B slice as micro's last argument (a Prefetch) and fetches
    // it in shares over its k steps (see Prefetch).
    static constexpr bool kPrefetchInMicro = false;
    // Has micro<1, 1>: a one-row product (M = 1) packs A densely instead of one
    // live row in MR, so the GEMV reads K values of A, not a panel MR times
    // that size beside every B panel (K = 4096: 64 KiB, over Zen 4's L1d). Zen
    // 4, two threads, warm: bf16 (32 MiB of weights) 0.77 of the time
    // (vdpbf16ps), 0.80 (avx2 widen+fma); int8 (16 MiB) 0.83 (both).
    static constexpr bool kDenseGemv = false;
    // Has cached_gemv(a, b, kk, c): a dense one-row form for weights
    // the last-level cache holds, which run() takes in place of micro<1, 1>
    // when all of them fit it (HostCaches::llc).
    static constexpr bool kCachedGemv = false;
    // Reads B offset by +128 as well as A (int8): the epilogue subtracts
    // 128 * rowsum for each row of A too (EpiScaled).
    static constexpr bool kOffsetB = false;
    // Has pack_a_8x16(src, lda, dst): 16 k groups of eight whole rows packed at
    // once (vector transposes), in place of pack_a per row and group.
    static constexpr bool kPackA8x16 = false;
    // Its A panel is k-major - per k group the APER values of each slot side by
    // side across the MR rows ([group][slot][row]) - rather than row-major
    // within the group ([group][row][slot]); pack_a writes d[0], d[MR], ...
    static constexpr bool kAByK = false;
    // The element type B panel slices are converted to once per block
    // (prep_b), for the micro-kernel to read; void: it reads the packed B.
    using BPrep = void;
};

// One or two rows (a GEMV) stream their B panel with stream_ahead, a fixed
// distance ahead of the loads, and take no share of the next panel.
template <int R>
constexpr bool kStreamsB = R <= 2;
template <int R>
inline Prefetch next_slice(const Prefetch& next) {
    return kStreamsB<R> ? Prefetch{} : next;
}

// With one row panel those kernels fetch the panel they stream, this far
// ahead: AMX tiles are not renamed, so a B tile load waits for the products
// reading the last one, and the hardware prefetcher alone left it waiting on
// DRAM (M=32: 0.86 of the time; 8 KiB ahead 0.98, 32 KiB 0.87); vdpbf16ps
// at M=4 / 8: 0.63 / 0.72.
constexpr int64_t kPanelFetchAhead = 16 * 1024;
// Vector kernels fetch a share every this many k steps (each step's share is
// a line or less; a test per step cost them 2-6 % at M = 256).
constexpr int64_t kPrefetchChunk = 8;

// A vector micro-kernel's k loop, body(g) for g in [0, steps): a share of
// `next` every kPrefetchChunk steps when it is more than BurstMax bytes (16
// lines, what the line fill buffers hold, by default), else one burst first
// and the loop as it was (unrolled by 4: 2-4 % on avxvnni at M = 256,
// alternating builds; none on zmm). Not always_inline: GCC 12.2 then dropped
// every prefetch of it inside the kernel templates.
template <int64_t BurstMax = 1024, class Body>
inline void k_loop(int64_t steps, const Prefetch& next, Body&& body) {
    if (next.bytes <= BurstMax) {
        next.step(0, next.bytes);
#pragma GCC unroll 4
        for (int64_t g = 0; g < steps; ++g) body(g);
        return;
    }
    const int64_t per = next.per_step(ceil_div(steps, kPrefetchChunk));
    for (int64_t g0 = 0; g0 < steps; g0 += kPrefetchChunk) {
        next.step(g0 / kPrefetchChunk, per);
        const int64_t g1 = g0 + kPrefetchChunk < steps ? g0 + kPrefetchChunk : steps;
#pragma GCC unroll 4
        for (int64_t g = g0; g < g1; ++g) body(g);
    }
}

// Kernels whose `BPrep` is a type (not KernelDefaults' void) convert each B
// panel slice once per block (prep_b) and run their micro-kernel on the
// converted panel.
template <class Kn>
constexpr bool kPrepB = !std::is_void_v<typename Kn::BPrep>;

// Bytes per element of the B panel the micro-kernel reads: the converted
// panel's, else the packed weights' (bf16 or int8, as A's input).
template <class Kn>
constexpr int64_t micro_b_elem_bytes() {
    if constexpr (kPrepB<Kn>)
        return sizeof(typename Kn::BPrep);
    else
        return sizeof(typename Kn::AIn);
}

// Micro-kernel dispatch on the number of live rows (compile-time in the kernel).
template <class Kn, int... R>
constexpr auto micro_table(std::integer_sequence<int, R...>) {
    using Fn = decltype(&Kn::template micro<1>);
    return std::array<Fn, sizeof...(R)>{{&Kn::template micro<R + 1>...}};
}

// Blocking: an item is an MC x NC block of C, computed in a per-thread scratch
// tile over K in steps of KC (B micro-panels stay in L1 across the rows of the
// block, the A block and the B block in L2). With a single row panel (GEMV and
// small M) K is not blocked: each B panel streams once, straight through.
struct Blocking {
    int64_t mc, nc, kc;
};

// The host's data caches (bytes; 0: unknown): L1d and L2 per core, and the
// last-level cache (L3: one instance, which the cores sharing it share);
// glibc's sysconf (CPUID leaf 4 on x86), else sysfs, else CPUID (the L3:
// sysfs, CPUID, sysconf). CPUKERN_CACHE_SIZES="L1D_KIB,L2_KIB[,LLC_KIB]" stands in for them
// (tests block small matrices as a small-cache host would); read once.
struct HostCaches {
    int64_t l1d = 0, l2 = 0, llc = 0;
};
inline int64_t sysfs_cache_bytes(int level) {
    for (int i = 0; i < 8; ++i) {
        char path[96], text[32] = {};
        int64_t got_level = 0;
        std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (std::FILE* f = std::fopen(path, "r")) {
            if (std::fgets(text, sizeof text, f)) got_level = std::strtol(text, nullptr, 10);
            std::fclose(f);
        } else {
            break;
        }
        std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        std::FILE* f = std::fopen(path, "r");
        if (!f) continue;
        const bool data = std::fgets(text, sizeof text, f) && std::strncmp(text, "Instruction", 11) != 0;
        std::fclose(f);
        if (got_level != level || !data) continue;
        std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = std::fopen(path, "r"))) continue;
        int64_t kib = std::fgets(text, sizeof text, f) ? std::strtol(text, nullptr, 10) : 0;  // "48K"
        std::fclose(f);
        return kib * 1024;
    }
    return 0;
}
inline HostCaches read_host_caches() {
    HostCaches c;
#if defined(__STDC_HOSTED__) && __STDC_HOSTED__  // a freestanding build (a bare-metal guest) has neither
    if (const char* env = std::getenv("CPUKERN_CACHE_SIZES")) {
        char* end = nullptr;
        const long l1 = std::strtol(env, &end, 10);
        const long l2 = end && *end == ',' ? std::strtol(end + 1, &end, 10) : 0;
        const long llc = end && *end == ',' ? std::strtol(end + 1, &end, 10) : 0;
        if (l1 > 0 && l2 > 0 && llc >= 0 && end && *end == 0)
            return HostCaches{int64_t(l1) * 1024, int64_t(l2) * 1024, int64_t(llc) * 1024};
    }
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE)
    c.l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    c.l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    if (c.l1d <= 0) c.l1d = sysfs_cache_bytes(1);
    if (c.l2 <= 0) c.l2 = sysfs_cache_bytes(2);
    c.llc = sysfs_cache_bytes(3);
#endif
    // CPUID where neither says, as glibc's sysconf reads it on x86: what a bare-metal
    // guest (a freestanding build) has, and a libc without sysconf's cache names
    if (c.l1d <= 0) c.l1d = cpuid_cache_bytes(1);
    if (c.l2 <= 0) c.l2 = cpuid_cache_bytes(2);
    if (c.llc <= 0) c.llc = cpuid_cache_bytes(3);
#if defined(__STDC_HOSTED__) && __STDC_HOSTED__ && defined(_SC_LEVEL3_CACHE_SIZE)
    // glibc's L3 last: 2.36 said 320 MiB on the Zen 4 class VM whose sysfs, lscpu and
    // CPUID say 32 MiB (one instance)
    if (c.llc <= 0) c.llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (c.llc < 0) c.llc = 0;
#endif
    return c;
}
inline const HostCaches& host_caches() {
    static const HostCaches caches = read_host_caches();
    return caches;
}

// Blocking: the kernel's targets (measured where noted), capped by this host's
// caches so a smaller core keeps the same residency: the B slice a micro-kernel
// reuses across the row panels of a block within 2/3 of L1d, the A block within
// half of L2. The targets were chosen on cores with 48 KiB L1d / 2 MiB L2 (Intel)
// and 32 KiB / 1 MiB (Zen 4), where the caps change nothing measured; they
// matter on e.g. 256 KiB-L2 client cores (an A block of 256 rows x 256 k floats
// is 256 KiB).
template <class Kn>
Blocking choose_blocking(int64_t M, int64_t N, int64_t Kp, int threads) {
    Blocking bl{};
    const bool stream = M <= Kn::MR && !kPrepB<Kn>;
    bl.kc = stream ? Kp : (Kp < Kn::kKcTarget ? Kp : Kn::kKcTarget);
    if (bl.kc <= 0) bl.kc = Kn::kAkg;
    int64_t mc_target = Kn::kMcTarget;
    const HostCaches& caches = host_caches();
    if (!stream) {
        constexpr int64_t kc_unit = Kn::kAkg > 32 ? Kn::kAkg : 32;  // a multiple of kAkg (32 is)
        constexpr int64_t b_bytes_per_k = Kn::NR * micro_b_elem_bytes<Kn>();
        if (caches.l1d > 0 && bl.kc > kc_unit) {
            const int64_t cap = caches.l1d * 2 / 3 / b_bytes_per_k / kc_unit * kc_unit;
            if (bl.kc > cap) bl.kc = cap > kc_unit ? cap : kc_unit;
        }
        constexpr int64_t a_bytes_per_k = int64_t(Kn::APER) * int64_t(sizeof(typename Kn::APack)) / Kn::kAkg;
        static_assert(a_bytes_per_k > 0, "packed A holds at least a byte per k");
        if (caches.l2 > 0) {
            const int64_t rows = caches.l2 / 2 / (bl.kc * a_bytes_per_k) / Kn::MR * Kn::MR;
            if (mc_target > rows) mc_target = rows > Kn::MR ? rows : Kn::MR;
        }
    }
    const int64_t mb = ceil_div(M, mc_target);
    bl.mc = round_up(ceil_div(M, mb), Kn::MR);
    // enough column blocks to keep every thread busy (4 items each), but no
    // narrower than one panel and no wider than the L2 target
    const int64_t items_wanted = int64_t(threads) * 4;
    int64_t nc = round_up(ceil_div(N, ceil_div(items_wanted, mb)), Kn::NR);
    if (nc > Kn::kNcTarget) nc = Kn::kNcTarget;
    if (nc < Kn::NR) nc = Kn::NR;
    bl.nc = nc;
    return bl;
}

// C = A (M x K, row stride lda) x packed B, handed block by block to `epi`
// as the kernel's accumulator type. Returns false when scratch memory ran out.
template <class Kn, class Epi>
bool run(const typename Kn::AIn* a, int64_t lda, int64_t M, int64_t N, int64_t K, const uint8_t* packed,
         const Layout& L, const Epi& epi) {
    using APack = typename Kn::APack;
    using Acc = typename Kn::Acc;
    constexpr int MR = Kn::MR, NR = Kn::NR;
    static_assert(Kn::kAkg % Kn::KG == 0, "A groups must hold whole B groups");
    static_assert(!Kn::kDenseGemv || Kn::kPrefetchInMicro, "micro<1, 1> takes the Prefetch argument");
    if (M <= 0 || N <= 0) return true;
    const int64_t Kp = L.k_padded(K);
    const int64_t agroups = Kp / Kn::kAkg;
    const int64_t apanel = agroups * MR * Kn::APER;  // APack elements per row panel
    const int64_t mpanels = ceil_div(M, MR);
    const bool dense = Kn::kDenseGemv && M == 1;
    // weights the last-level cache holds (a benchmark's loop, a small model): the kernel's cached form
    const bool cached_gemv = dense && Kn::kCachedGemv && L.bytes(K, N) <= host_caches().llc;
    const int64_t astride = dense ? 1 : MR;  // A values per k group (times APER)
    APack* ap = static_cast<APack*>(a_scratch().get(size_t(mpanels * apanel + 1) * sizeof(APack)));
    if (!ap) return false;

    // 1. pack A (row panels, zero-padded rows and k); a thread wakes up for
    // no less than ~64K elements.
    // Row by row: the groups wholly inside K are packed without a branch
    // (this pass is a few percent of a large GEMM); the K tail and the rows
    // past M go through a zero-padded copy.
    parallel_for(mpanels, ceil_div(int64_t(1) << 16, MR * (Kp > 0 ? Kp : 1)), [&](int64_t p0, int64_t p1) {
        using AIn = typename Kn::AIn;
        AIn tmp[Kn::kAkg];
        const int64_t whole = K / Kn::kAkg;
        // where pack_a puts group g of row r (see kAByK)
        auto slot = [&](APack* dst, int64_t g, int r) {
            return Kn::kAByK ? dst + g * astride * Kn::APER + r : dst + (g * astride + r) * Kn::APER;
        };
        for (int64_t p = p0; p < p1; ++p) {
            APack* dst = ap + p * apanel;
            int64_t packed_groups = 0;
            if constexpr (Kn::kPackA8x16)
                if (!dense && (p + 1) * MR <= M)
                    for (; packed_groups + 16 <= whole; packed_groups += 16)
                        Kn::pack_a_8x16(a + p * MR * lda + packed_groups * Kn::kAkg, lda, dst + packed_groups * MR);
            for (int r = 0; r < MR; ++r) {
                const int64_t m = p * MR + r;
                const AIn* src = a + m * lda;
                int64_t g = packed_groups;
                if (m < M)
                    for (; g < whole; ++g) Kn::pack_a(src + g * Kn::kAkg, slot(dst, g, r));
                for (; g < agroups; ++g) {
                    const int64_t k0 = g * Kn::kAkg;
                    std::memset(tmp, 0, sizeof tmp);
                    if (m < M && k0 < K) std::memcpy(tmp, src + k0, sizeof(tmp[0]) * size_t(K - k0));
                    Kn::pack_a(tmp, slot(dst, g, r));
                }
                if (dense) break;
            }
        }
    });

    // 2. blocks of C
    const Blocking bl = choose_blocking<Kn>(M, N, Kp, num_threads());
    const int64_t mblocks = ceil_div(M, bl.mc), nblocks = ceil_div(N, bl.nc);
    const int64_t panel_bytes = L.panel_bytes(K);
    static constexpr auto table = micro_table<Kn>(std::make_integer_sequence<int, MR>{});
    // a thread wakes up for no less than ~4 MFLOP (waking one costs tens of
    // microseconds, far more on a loaded machine)
    const int64_t item_flops = 2 * bl.mc * bl.nc * (Kp > 0 ? Kp : 1);
    const int64_t grain = ceil_div(int64_t(4) << 20, item_flops);
    // Each thread takes the items of its own share first - the same columns of
    // B every call, so weights that fit the cache stay where they were read
    // last time (GEMVs on the Zen 4 class host, two threads, against items
    // dealt in turn: 16 MiB int8 avx512vnni 0.85-0.95 of the time, 32 MiB bf16
    // avx512bf16 0.77) - then what is left of the others', `grain` items at a
    // time: on a shared (virtual) machine a stalled thread holds up only what
    // it runs.
    const int64_t items = mblocks * nblocks;
    std::atomic<bool> ok{true};
    parallel_for_dynamic(items, grain, [&](int64_t first, int64_t last) {
        Acc* c = static_cast<Acc*>(c_scratch().get(size_t(bl.mc * bl.nc) * sizeof(Acc)));
        if (!c) {
            ok.store(false);
            return;
        }
        uint8_t* prep = nullptr;
        if constexpr (kPrepB<Kn>) {
            prep = static_cast<uint8_t*>(b_scratch().get(size_t(bl.kc * NR) * sizeof(typename Kn::BPrep)));
            if (!prep) {
                ok.store(false);
                return;
            }
        }
        Kn::begin();
        for (int64_t item = first; item < last; ++item) {
            const int64_t nb = item / mblocks, mblk = item % mblocks;
            const int64_t m0 = mblk * bl.mc, n0 = nb * bl.nc;
            const int64_t rows = M - m0 < bl.mc ? M - m0 : bl.mc;
            const int64_t cols = N - n0 < bl.nc ? N - n0 : bl.nc;
            const int64_t npanels = ceil_div(cols, NR), rpanels = ceil_div(rows, MR);
            for (int64_t k0 = 0; k0 < Kp || k0 == 0; k0 += bl.kc) {
                const int64_t kk = Kp - k0 < bl.kc ? Kp - k0 : bl.kc;
                const uint8_t* bblock = packed + (n0 / NR) * panel_bytes + (k0 / Kn::KG) * NR * Kn::KG * L.elem;
                const APack* ablock = ap + (m0 / MR) * apanel + (k0 / Kn::kAkg) * astride * Kn::APER;
                const int64_t slice = kk / Kn::KG * NR * Kn::KG * L.elem;  // bytes of one panel in this k block
                for (int64_t jr = 0; jr < npanels; ++jr) {
                    const uint8_t* bp = bblock + jr * panel_bytes;
                    // the next panel's slice comes from memory: fetched a share per row panel, it is in
                    // cache when its first micro-kernel starts
                    const uint8_t* ahead = jr + 1 < npanels ? bp + panel_bytes
                                          : k0 + kk < Kp ? bblock + slice  // the next k block's first panel
                                                         : nullptr;
                    // one row panel (GEMV): K is not blocked, the next panel follows this one in memory
                    // and the hardware prefetcher streams it; a burst here would stall the only call
                    // (kernels that prefetch in their micro-kernel fetch kPanelFetchAhead ahead of it)
                    const int64_t share = ahead && rpanels > 1 ? round_up(ceil_div(slice, rpanels), 64) : 0;
                    if constexpr (kPrepB<Kn>) {
                        Kn::prep_b(bp, kk, reinterpret_cast<typename Kn::BPrep*>(prep));
                        bp = prep;
                    }
                    for (int64_t ir = 0; ir < rpanels; ++ir) {
                        const int64_t live = rows - ir * MR < MR ? rows - ir * MR : MR;
                        const APack* arow = ablock + ir * apanel;
                        Acc* ctile = c + ir * MR * bl.nc + jr * NR;
                        if constexpr (Kn::kPrefetchInMicro) {
                            const int64_t lo = ir * share < slice ? ir * share : slice;
                            const int64_t hi = (ir + 1) * share < slice ? (ir + 1) * share : slice;
                            const Prefetch next = rpanels == 1 ? Prefetch{bp + kPanelFetchAhead, slice}
                                                                : Prefetch{ahead ? ahead + lo : nullptr, hi - lo};
                            if constexpr (Kn::kCachedGemv)
                                if (cached_gemv) {
                                    Kn::cached_gemv(arow, bp, kk, ctile);
                                    continue;
                                }
                            if constexpr (Kn::kDenseGemv)
                                if (dense) {
                                    Kn::template micro<1, 1>(arow, bp, kk, ctile, bl.nc, k0 > 0, next);
                                    continue;
                                }
                            table[live - 1](arow, bp, kk, ctile, bl.nc, k0 > 0, next);
                        } else {
                            for (int64_t off = ir * share; off < (ir + 1) * share && off < slice; off += 64)
                                __builtin_prefetch(ahead + off, 0, 2);
                            table[live - 1](arow, bp, kk, ctile, bl.nc, k0 > 0);
                        }
                    }
                }
                if (Kp == 0) break;
            }
            epi(c, bl.nc, m0, rows, n0, cols);
        }
        Kn::end();
    });
    return ok.load();
}

// ------------------------------------------------------------- epilogues
using simd::kLanes;
using simd::VF;

template <class T>
inline void store_row(T* out, const float* c, int64_t cols) {
    int64_t j = 0;
    for (; j + kLanes <= cols; j += kLanes) simd::store(out + j, simd::load(c + j));
    if (j < cols) simd::store_partial(out + j, simd::load(c + j), int(cols - j));
}

// float accumulators (bf16 GEMM) -> float32 or bfloat16 output
struct EpiFloat {
    void* out;
    int64_t ldo;
    bool bf16_out;
    void operator()(const float* c, int64_t ldc, int64_t m0, int64_t rows, int64_t n0, int64_t cols) const {
        for (int64_t r = 0; r < rows; ++r) {
            const float* cr = c + r * ldc;
            if (bf16_out)
                store_row(static_cast<bf16_t*>(out) + (m0 + r) * ldo + n0, cr, cols);
            else
                store_row(static_cast<float*>(out) + (m0 + r) * ldo + n0, cr, cols);
        }
    }
};

// int32 accumulators (w8a8 GEMM): (acc - 128 * (colsum + rowsum)) * a_scale[m] * b_scale[n],
// in wrapping 32-bit arithmetic (the offset sums may pass 2^31 where the product does not)
struct EpiScaled {
    void* out;
    int64_t ldo;
    bool bf16_out;
    const float* a_scale;
    const float* b_scale;
    const int32_t* colsum;  // only for kernels that offset A by +128
    const int32_t* rowsum;  // only for kernels that offset B by +128 too: per row of A, the sum of a + 128 over Kp
    void operator()(const int32_t* c, int64_t ldc, int64_t m0, int64_t rows, int64_t n0, int64_t cols) const {
        float row[1024];
        for (int64_t r = 0; r < rows; ++r) {
            const int32_t* cr = c + r * ldc;
            const float as = a_scale[m0 + r];
            const uint32_t row_offset = rowsum ? 128u * uint32_t(rowsum[m0 + r]) : 0u;
            for (int64_t j0 = 0; j0 < cols; j0 += 1024) {
                const int64_t w = cols - j0 < 1024 ? cols - j0 : 1024;
                for (int64_t j = 0; j < w; ++j) {
                    uint32_t v = uint32_t(cr[j0 + j]) - row_offset;
                    if (colsum) v -= 128u * uint32_t(colsum[n0 + j0 + j]);
                    row[j] = float(int32_t(v)) * as * b_scale[n0 + j0 + j];
                }
                if (bf16_out)
                    store_row(static_cast<bf16_t*>(out) + (m0 + r) * ldo + n0 + j0, row, w);
                else
                    std::memcpy(static_cast<float*>(out) + (m0 + r) * ldo + n0 + j0, row, size_t(w) * 4);
            }
        }
    }
};

}  // namespace gemm
}  // namespace cpukern
