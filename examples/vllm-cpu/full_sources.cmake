# VLLM_CPU_OPS_FULL=ON: every vLLM x86 CPU source that needs only torch, OpenMP
# and libnuma, registered by vLLM's own bindings (included from CMakeLists.txt,
# which sets vllm_cpu, vllm_sources, vllm_registrations, vllm_definitions).
# Every file includes torch/all.h (about 12 s to parse here); vLLM's build
# compiles each as its own unit, this one as unity units (VLLM_CPU_OPS_UNITY,
# below). The sources vLLM builds for some
# ISAs only (shm.cpp and cpu_wna16.cpp from AVX-512 up, the 22 sgl-kernels
# from AVX-512 BF16 up) are those variants' matrix `sources`.
list(APPEND vllm_sources
  "${vllm_cpu}/cpu_fused_moe.cpp"
  "${vllm_cpu}/sampling_kernels.cpp"
  "${vllm_cpu}/mamba_cpu.cpp"
  "${vllm_cpu}/spec_decode_utils.cpp"
  "${vllm_cpu}/fp8_quant.cpp"
  "${vllm_cpu}/dynamic_4bit_int_moe_cpu.cpp"
  "${vllm_cpu}/mla_decode.cpp"
  "${vllm_cpu}/sgl-kernels/fla.cpp"
  csrc/full/vllm_bindings.cpp)
# VLLM_CPU_OPS_UNITY=ON (the default): vLLM's every-variant sources (and
# cpu_wna16.cpp) as two unity units per variant, of about equal cost here, and
# the 21 sgl-kernels as six, so a variant parses torch/all.h two to eight
# times instead of eleven to thirty-two. What cannot share a unit: vLLM's
# bindings and fla.cpp (the bindings redeclare its functions with default
# arguments); shm.cpp and the others (its KernelVecType is theirs too); most
# sgl-kernels (they repeat helper names such as tinygemm_kernel in anonymous
# namespaces): their groups below are the ones gcc -fsyntax-only accepted.
option(VLLM_CPU_OPS_UNITY "Compile vLLM's sources as unity units (two per variant, six more for the sgl-kernels)" ON)
set(vllm_unity "")
if(VLLM_CPU_OPS_UNITY)
  set(vllm_unity UNITY_GROUPS)
  set_source_files_properties(csrc/full/vllm_bindings.cpp csrc/vllm_attn.cpp
                              PROPERTIES UNITY_GROUP bindings_attention)
  # on Arm vllm_ops.cpp holds activation_lut_bf16.cpp, whose two overloads of
  # activation_lut_bf16 make the bindings' &activation_lut_bf16 ambiguous
  if(CPUBUILD_ARCH STREQUAL "aarch64")
    set_source_files_properties(csrc/vllm_ops.cpp PROPERTIES UNITY_GROUP ops)
  else()
    set_source_files_properties(csrc/vllm_ops.cpp PROPERTIES UNITY_GROUP bindings_attention)
  endif()
  set_source_files_properties("${vllm_cpu}/sampling_kernels.cpp" "${vllm_cpu}/spec_decode_utils.cpp"
                              "${vllm_cpu}/cpu_fused_moe.cpp"
                              "${vllm_cpu}/mamba_cpu.cpp" "${vllm_cpu}/fp8_quant.cpp"
                              "${vllm_cpu}/dynamic_4bit_int_moe_cpu.cpp" "${vllm_cpu}/mla_decode.cpp"
                              "${vllm_cpu}/sgl-kernels/fla.cpp" "${vllm_cpu}/cpu_wna16.cpp"
                              PROPERTIES UNITY_GROUP kernels)
  set(sgl_groups
    "conv gemm_fp8_w8a8 mhc store_cache paged_mqa_logits topk"
    "gemm moe_int4 moe_fp8 moe_fp8_w8a8 mla_cache compressor"
    "gemm_int8 gemm_int4 indexer"
    "moe moe_int8 extend"
    "bmm decode"
    "gemm_fp8")
  set(index 0)
  foreach(group IN LISTS sgl_groups)
    string(REPLACE " " ";" files "${group}")
    list(TRANSFORM files REPLACE "(.+)" "${vllm_cpu}/sgl-kernels/\\1.cpp")
    set_source_files_properties(${files} PROPERTIES UNITY_GROUP sgl_${index})
    math(EXPR index "${index} + 1")
  endforeach()
endif()
# vLLM's bindings register every op, so our registration units give way to
# the stand-ins for the functions they name that are not built (csrc/full/not_built.cpp)
set(vllm_registrations csrc/full/not_built.cpp)
# gcc 12.2 (Debian 12's) stops with an internal compiler error in
# sgl-kernels/flash_mla.cpp (DeepSeek-V4 sparse MLA decode); vLLM itself asks
# for gcc >= 12.3. Older compilers leave that file and its one op out.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 12.3)
  set_source_files_properties("${vllm_cpu}/sgl-kernels/flash_mla.cpp" PROPERTIES HEADER_FILE_ONLY ON)
  list(APPEND vllm_definitions VLLM_CPU_OPS_NO_FLASH_MLA)
  message(STATUS "vllm-cpu: sgl-kernels/flash_mla.cpp not built: gcc ${CMAKE_CXX_COMPILER_VERSION} < 12.3 "
                 "fails on it (vLLM needs gcc >= 12.3)")
endif()
list(APPEND vllm_definitions VLLM_CPU_OPS_FULL)
set(vllm_link_libraries numa)  # utils.cpp's NUMA binding (vLLM's ENABLE_NUMA=ON)
