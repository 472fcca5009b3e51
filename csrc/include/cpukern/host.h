#pragma once
// The host CPU's vendor (CPUID leaf 0), for the kernel choices that depend on
// how a vendor's cores run an instruction rather than on whether they have it.
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

}  // namespace cpukern
