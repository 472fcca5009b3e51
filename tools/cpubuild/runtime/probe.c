/* The CPU feature probe cpubuild ships into every package. Built for each
 * arch's baseline, without LTO and without any variant code: it only returns
 * raw facts (CPUID registers, XCR0, HWCAP words, sysctl values, the AMX
 * tile permission). The decoding into feature names is data-driven in
 * Python (cpubuild's hardware data, copied into each package's manifest).
 *
 * Nothing here may execute an instruction the baseline lacks: XGETBV runs
 * only after CPUID reports OSXSAVE (a CPU without XSAVE raises #UD on it). */
#include <stdint.h>

#if defined(__GNUC__)
#define CPUBUILD_EXPORT __attribute__((visibility("default")))
#else
#define CPUBUILD_EXPORT
#endif

CPUBUILD_EXPORT int cpubuild_probe_abi(void) { return 1; }

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* Fills regs with CPUID(leaf, subleaf); returns 0 (and zeros) when the CPU
 * does not implement that leaf or subleaf. */
CPUBUILD_EXPORT int cpubuild_probe_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t regs[4]) {
    uint32_t a, b, c, d;
    regs[0] = regs[1] = regs[2] = regs[3] = 0;
    uint32_t max_leaf = __get_cpuid_max(leaf & 0x80000000u, 0);
    if (max_leaf == 0 || leaf > max_leaf) return 0;
    if (subleaf != 0) {
        __cpuid_count(leaf, 0, a, b, c, d);
        if (subleaf > a) return 0; /* leaf 7 reports its last subleaf in eax */
    }
    __cpuid_count(leaf, subleaf, a, b, c, d);
    regs[0] = a; regs[1] = b; regs[2] = c; regs[3] = d;
    return 1;
}

/* Returns 1 and stores XCR0 when the OS enabled XSAVE (CPUID.1:ECX.OSXSAVE),
 * else 0 without touching XGETBV. */
CPUBUILD_EXPORT int cpubuild_probe_xcr0(uint64_t *xcr0) {
    uint32_t a, b, c, d;
    *xcr0 = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!(c & (1u << 27))) return 0;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    *xcr0 = ((uint64_t)hi << 32) | lo;
    return 1;
}

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Linux gates AMX tile data per process: GET, REQ, GET again to verify.
 * Returns 1 granted, 0 refused by the kernel. */
CPUBUILD_EXPORT int cpubuild_probe_amx_permission(void) {
    unsigned long bitmask = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bitmask) != 0) return 0;
    if (bitmask & (1ul << XFEATURE_XTILEDATA)) return 1;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return 0;
    bitmask = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bitmask) != 0) return 0;
    return (bitmask & (1ul << XFEATURE_XTILEDATA)) ? 1 : 0;
}
#endif
#endif /* x86 */

#if defined(__linux__) && !defined(__x86_64__) && !defined(__i386__)
#include <sys/auxv.h>
/* which: 1 = AT_HWCAP, 2 = AT_HWCAP2 */
CPUBUILD_EXPORT uint64_t cpubuild_probe_hwcap(int which) {
#ifdef AT_HWCAP2
    if (which == 2) return (uint64_t)getauxval(AT_HWCAP2);
#endif
    return which == 1 ? (uint64_t)getauxval(AT_HWCAP) : 0;
}
#endif

#if defined(__APPLE__)
#include <sys/sysctl.h>
/* Returns the integer value of a hw.optional.* sysctl, 0 when absent. */
CPUBUILD_EXPORT int64_t cpubuild_probe_sysctl(const char *name) {
    int64_t value = 0;
    size_t size = sizeof(value);
    if (sysctlbyname(name, &value, &size, 0, 0) != 0) return 0;
    if (size == sizeof(int32_t)) return (int64_t)(int32_t)value;
    return value;
}
#endif
