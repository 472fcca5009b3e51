// Maps the C ABI's dtype code to a storage type and calls f(T{}).
#pragma once
#include "cpukern/export.h"
#include "cpukern/simd.h"

namespace cpukern {

template <class F>
int32_t by_dtype(int32_t dtype, F&& f) {
    switch (dtype) {
        case CPUKERN_F32: f(float{}); return CPUKERN_OK;
        case CPUKERN_BF16: f(bf16_t{}); return CPUKERN_OK;
#if CPUKERN_HAVE_FLOAT16
        case CPUKERN_F16: f(f16_t{}); return CPUKERN_OK;
#endif
        default: return CPUKERN_EDTYPE;
    }
}

}  // namespace cpukern
