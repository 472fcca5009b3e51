# VLLM_CPU_OPS_FULL=ON: the rest of vLLM's torch-only x86/Arm CPU sources
# (included from CMakeLists.txt, which sets vllm_cpu, vllm_sources,
# vllm_definitions). Each is its own unit (about 45-60 s per file and variant
# on 2 cores: every one parses torch/all.h). Sources vLLM builds for AVX-512
# and up only (mla_decode.cpp: no AVX2 bf16 path, vllm#33991; shm.cpp;
# cpu_wna16.cpp) are the avx512 variant's matrix `sources` (csrc/full/*.cpp,
# empty units unless this option is on), inherited by the variants above it.
list(APPEND vllm_sources
  "${vllm_cpu}/cpu_fused_moe.cpp"
  "${vllm_cpu}/sampling_kernels.cpp"
  "${vllm_cpu}/mamba_cpu.cpp"
  "${vllm_cpu}/spec_decode_utils.cpp"
  "${vllm_cpu}/fp8_quant.cpp"
  "${vllm_cpu}/dynamic_4bit_int_moe_cpu.cpp"
  "${vllm_cpu}/sgl-kernels/fla.cpp")
list(APPEND vllm_definitions VLLM_CPU_OPS_FULL)
set(vllm_link_libraries numa)  # utils.cpp's NUMA binding (vLLM's ENABLE_NUMA=ON)
