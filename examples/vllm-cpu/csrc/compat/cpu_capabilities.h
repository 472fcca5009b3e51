// at::cpu::get_cpu_capabilities() for torch releases without it (before 2.10;
// 2.9.1 is the last aarch64 CPU build the registry serves). vLLM 0.33 reads
// only "l2_cache_size" from it (csrc/cpu/utils.hpp: the attention's and the
// GEMMs' blocking), so that is the one key given: the L2 size of CPU 0 from
// sysfs, else sysconf, else 1 MiB. Force-included (-include) by
// CMakeLists.txt when torch's ATen/cpu/Utils.h does not declare it.
#pragma once
#include <ATen/cpu/Utils.h>
#include <ATen/core/ivalue.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>

namespace at::cpu {
inline int64_t vllm_cpu_ops_l2_bytes() {
    int64_t bytes = 0;
    if (std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index2/size", "r")) {
        long value = 0;
        char unit = 0;
        if (std::fscanf(f, "%ld%c", &value, &unit) >= 1)
            bytes = int64_t(value) * (unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1);
        std::fclose(f);
    }
#if defined(_SC_LEVEL2_CACHE_SIZE)
    if (bytes <= 0) bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return bytes > 0 ? bytes : int64_t(1) << 20;
}
inline std::unordered_map<std::string, c10::IValue> get_cpu_capabilities() {
    return {{"l2_cache_size", c10::IValue(vllm_cpu_ops_l2_bytes())}};
}
}  // namespace at::cpu
