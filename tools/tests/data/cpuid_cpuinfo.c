// A /proc/cpuinfo stand-in from CPUID: the "flags" the x86-64 psABI levels need, in the
// kernel's spelling, as the CPU running this program reports them. Under qemu-x86_64
// -cpu MODEL that is the emulated model (qemu-user shows the host's /proc/cpuinfo).
#include <cpuid.h>
#include <stdio.h>
static unsigned r[4];
static int bit(unsigned leaf, unsigned sub, int reg, int b) {
  unsigned max = __get_cpuid_max(leaf & 0x80000000u, 0);
  if (max < leaf) return 0;
  __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
  return (r[reg] >> b) & 1;
}
enum { A, B, C, D };
int main(void) {
  struct { const char* name; unsigned leaf; int reg, b; } f[] = {
    {"sse", 1, D, 25}, {"sse2", 1, D, 26}, {"pni", 1, C, 0}, {"ssse3", 1, C, 9}, {"fma", 1, C, 12}, {"cx16", 1, C, 13},
    {"sse4_1", 1, C, 19}, {"sse4_2", 1, C, 20}, {"movbe", 1, C, 22}, {"popcnt", 1, C, 23}, {"xsave", 1, C, 26},
    {"avx", 1, C, 28}, {"f16c", 1, C, 29}, {"lahf_lm", 0x80000001u, C, 0}, {"abm", 0x80000001u, C, 5},
    {"bmi1", 7, B, 3}, {"avx2", 7, B, 5}, {"bmi2", 7, B, 8}, {"avx512f", 7, B, 16}, {"avx512dq", 7, B, 17},
    {"avx512cd", 7, B, 28}, {"avx512bw", 7, B, 30}, {"avx512vl", 7, B, 31},
  };
  printf("processor\t: 0\nflags\t\t:");
  for (unsigned i = 0; i < sizeof f / sizeof f[0]; ++i)
    if (bit(f[i].leaf, 0, f[i].reg, f[i].b)) printf(" %s", f[i].name);
  printf("\n\n");
  return 0;
}
