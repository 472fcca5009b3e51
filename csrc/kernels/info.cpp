// Identity of a variant library, so the Python side can verify what it loaded.
#include "cpukern/export.h"
#include "cpukern/simd.h"

#ifndef CPUKERN_VARIANT_NAME
#error "CPUKERN_VARIANT_NAME must be defined by the build"
#endif

CPUKERN_API const char* cpukern_variant_name(void) { return CPUKERN_VARIANT_NAME; }
CPUKERN_API int32_t cpukern_abi_version(void) { return 1; }
CPUKERN_API int32_t cpukern_vector_bytes(void) { return cpukern::simd::kBytes; }
CPUKERN_API int32_t cpukern_has_float16(void) { return CPUKERN_HAVE_FLOAT16; }
