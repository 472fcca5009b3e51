// vLLM's csrc/cpu/shm.cpp, built for the AVX-512 variants only (as vLLM
// does) and only with VLLM_CPU_OPS_FULL=ON; otherwise an empty unit.
#ifdef VLLM_CPU_OPS_FULL
#include "shm.cpp"
#endif
