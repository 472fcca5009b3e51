// Where the x86 intrinsics come from. Production builds: the compiler's own
// headers, exactly as before. Under CPUKERN_SIMDE (defined only by
// tests/test_simde_avx512.py, never by CMake) the emulation header
// cpukern_simde.h - found on that test's include path - supplies them from
// SIMD Everywhere's portable code, so the AVX-512 kernel paths execute on a
// host without AVX-512 (docs/gemm.md, "AVX-512 kernels under SIMDe").
#pragma once

#if defined(CPUKERN_SIMDE)
#include "cpukern_simde.h"
#else
// GCC 12's AVX-512 headers trip its own -W(maybe-)uninitialized (their
// "undefined" vectors, fixed in GCC 12.3): silence the headers only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#if defined(__AVX512F__) || defined(__AVX__) || defined(__F16C__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
