#pragma once
#include <cstdint>

#define CPUKERN_API extern "C" __attribute__((visibility("default")))

// dtype codes shared with python/cpukern/_abi.py
enum CpukernDtype : int32_t { CPUKERN_F32 = 0, CPUKERN_BF16 = 1, CPUKERN_F16 = 2 };

// status codes: 0 ok; anything else is a bug in the Python-side validation
enum CpukernStatus : int32_t { CPUKERN_OK = 0, CPUKERN_EINVAL = 1, CPUKERN_EDTYPE = 2 };
