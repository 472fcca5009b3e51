// vLLM's CPU attention, one translation unit per variant (torch headers parsed
// once): cpu_attn.cpp (with the dispatch header CMakeLists.txt generates into
// the build tree), the scratch-pad allocator it uses (utils.cpp) and the
// AMX-FP8 CPUID check (cpu_isa.cpp), unmodified from vLLM's sdist. utils.cpp
// is built without libnuma (vLLM's VLLM_NUMA_DISABLED) unless
// VLLM_CPU_OPS_FULL=ON, which links libnuma and registers its NUMA ops.
#include "cpu_attn.cpp"
#include "utils.cpp"
#include "cpu_isa.cpp"
