// vLLM's own op registrations (csrc/cpu/torch_bindings.cpp of the sdist,
// unmodified), one unit per variant as vLLM compiles it: its #if blocks pick
// each ISA's ops (shm and WNA16 from AVX-512 up, the sgl-kernels ops from
// AVX-512 BF16 + VNNI up). Built with VLLM_CPU_OPS_FULL=ON only.
//
// The bindings also register vLLM's oneDNN ops, whose sources this wheel does
// not build (README: no offline oneDNN source). Registered, they would be
// picked (vLLM's `_supports_onednn` is a hasattr check) and fail; left out,
// vLLM takes its torch fallback. So vLLM's block gets a library that leaves
// exactly those ops out; their functions exist (not_built.cpp) only
// because the block takes their addresses.
#ifdef VLLM_CPU_OPS_FULL
#include <torch/library.h>

#include <string_view>
#include <type_traits>
#include <utility>

#include "core/registration.h"  // vLLM's TORCH_LIBRARY_EXPAND, redefined below

namespace vllm_cpu_ops {

// The ops of vLLM's csrc/cpu/dnnl_kernels.cpp (its oneDNN GEMMs and the int8
// quantization kept in that file), and the sgl-kernels op whose source gcc
// older than 12.3 cannot compile (full_sources.cmake).
constexpr std::string_view kNotBuilt[] = {
    "release_dnnl_matmul_handler", "create_onednn_mm_handler",        "onednn_mm",
    "is_onednn_acl_supported",     "create_onednn_scaled_mm_handler", "onednn_scaled_mm",
    "static_scaled_int8_quant",    "dynamic_scaled_int8_quant",
#ifdef VLLM_CPU_OPS_NO_FLASH_MLA
    "flash_mla_with_kvcache_cpu",
#endif
};

template <typename Schema>
bool built(const Schema& schema_or_name) {
  if constexpr (std::is_convertible_v<const Schema&, std::string_view>) {
    std::string_view name(schema_or_name);
    name = name.substr(0, name.find('('));
    for (std::string_view absent : kNotBuilt) {
      if (name == absent) return false;
    }
  }
  return true;
}

// torch::Library's def/impl, minus the ops this wheel does not build.
class BuiltOps {
 public:
  explicit BuiltOps(torch::Library& library) : library_(library) {}

  template <typename Schema, typename... Rest>
  BuiltOps& def(Schema&& schema, Rest&&... rest) {
    if (built(schema)) library_.def(std::forward<Schema>(schema), std::forward<Rest>(rest)...);
    return *this;
  }

  template <typename Name, typename... Rest>
  BuiltOps& impl(Name&& name, Rest&&... rest) {
    if (built(name)) library_.impl(std::forward<Name>(name), std::forward<Rest>(rest)...);
    return *this;
  }

 private:
  torch::Library& library_;
};

}  // namespace vllm_cpu_ops

#undef TORCH_LIBRARY_EXPAND
#define TORCH_LIBRARY_EXPAND(NAME, MODULE)                    \
  static void vllm_cpu_ops_register(vllm_cpu_ops::BuiltOps&); \
  TORCH_LIBRARY(NAME, library) {                               \
    vllm_cpu_ops::BuiltOps built_ops(library);                 \
    vllm_cpu_ops_register(built_ops);                          \
  }                                                            \
  static void vllm_cpu_ops_register(vllm_cpu_ops::BuiltOps& MODULE)

#include "torch_bindings.cpp"
#endif
