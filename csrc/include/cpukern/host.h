#pragma once
// The host CPU's vendor (CPUID leaf 0), for the kernel choices that depend on
// how a vendor's cores run an instruction rather than on whether they have it,
// and its cache sizes as CPUID gives them.
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace cpukern {

inline bool host_vendor_is(const char* name) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    return std::strcmp(vendor, name) == 0;
#else
    (void)name;
    return false;
#endif
}

// The size of the data (or unified) cache of `level`, one instance, from
// CPUID's deterministic cache parameters (leaf 4; AMD and Hygon: 0x8000001D),
// as glibc's sysconf reads it on x86; 0 where CPUID does not say.
inline int64_t cpuid_cache_bytes(int level) {
#if defined(__x86_64__) || defined(__i386__)
    const unsigned leaf = host_vendor_is("AuthenticAMD") || host_vendor_is("HygonGenuine") ? 0x8000001Du : 4u;
    if (__get_cpuid_max(leaf & 0x80000000u, nullptr) < leaf) return 0;
    for (unsigned sub = 0; sub < 16; ++sub) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        __cpuid_count(leaf, sub, a, b, c, d);
        const unsigned type = a & 31;  // 0: no more caches, 1 data, 2 instruction, 3 unified
        if (type == 0) break;
        if (type == 2 || ((a >> 5) & 7) != unsigned(level)) continue;
        const int64_t ways = (b >> 22) + 1, partitions = ((b >> 12) & 0x3ff) + 1, line = (b & 0xfff) + 1;
        return ways * partitions * line * (int64_t(c) + 1);
    }
#else
    (void)level;
#endif
    return 0;
}

}  // namespace cpukern
