// vLLM's csrc/cpu/mla_decode.cpp, built for the AVX-512 variants only: it has
// no AVX2 path for bf16 (vllm#33991), so the avx2 variant leaves it out
// instead of failing to build. Only with VLLM_CPU_OPS_FULL=ON; otherwise an
// empty unit.
#ifdef VLLM_CPU_OPS_FULL
#include "mla_decode.cpp"
#endif
