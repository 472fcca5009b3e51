/* xxhash_variants: XXH3 (xxHash, BSD-2-Clause, fetched into third_party/xxhash by
 * fetch_xxhash.py) with one library per variant of isa_matrix.toml.
 *
 * xxhash.c is compiled into every variant library (CMakeLists.txt SOURCES), with
 * that variant's flags and its compile-definitions: XXH_VECTOR picks xxHash's
 * SSE2, AVX2 or AVX-512 code path. The hash is the same in every variant. */
#include <stddef.h>
#include <stdint.h>

#include "xxhash.h"

#define API __attribute__((visibility("default")))

API uint64_t xxhash_variants_xxh3_64(const void *data, size_t n, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, n, seed);
}

/* the code path this library was built with (XXH_SCALAR 0, SSE2 1, AVX2 2, AVX512 3, NEON 4) */
API int xxhash_variants_vector(void)
{
    return XXH_VECTOR;
}
