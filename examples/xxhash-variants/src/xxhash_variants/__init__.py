"""xxhash_variants: XXH3 hashes from xxHash (BSD-2-Clause), one native library per CPU ISA variant.

The dispatcher cpubuild ships inside this package picks the best variant this
CPU runs, or the one ``XXHASH_VARIANTS_ISA=<variant>`` forces; every variant
gives the same hashes.

    >>> import xxhash_variants
    >>> hex(xxhash_variants.xxh3_64(b""))
    '0x2d06800538d394c2'
"""

from __future__ import annotations

import ctypes

from ._cpubuild import (
    UnknownISAError,
    UnsupportedISAError,
    add_load_hook,
    library,
    load_variant,
    selected_isa,
    supported_variants,
)
from ._version import __version__

__all__ = ["UnknownISAError", "UnsupportedISAError", "__version__", "selected_isa", "supported_variants",
           "vector_path", "xxh3_64"]

# xxHash's XXH_VECTOR values
VECTOR_PATHS = {0: "scalar", 1: "sse2", 2: "avx2", 3: "avx512", 4: "neon"}


def _declare(variant: str, lib: ctypes.CDLL) -> None:
    """The C signatures, set on each variant library as it is loaded."""
    lib.xxhash_variants_xxh3_64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    lib.xxhash_variants_xxh3_64.restype = ctypes.c_uint64
    lib.xxhash_variants_vector.argtypes = []
    lib.xxhash_variants_vector.restype = ctypes.c_int


add_load_hook(_declare)


def _lib(variant: str | None) -> ctypes.CDLL:
    lib: ctypes.CDLL = library() if variant is None else load_variant(variant)
    return lib


def xxh3_64(data: bytes, seed: int = 0, *, variant: str | None = None) -> int:
    """XXH3-64 of `data` with `seed`; `variant` runs that variant (built and runnable here) instead."""
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"seed {seed} is not an unsigned 64-bit integer")
    data = bytes(data)
    return int(_lib(variant).xxhash_variants_xxh3_64(data, len(data), seed))


def vector_path(variant: str | None = None) -> str:
    """xxHash's code path in a variant's library (its XXH_VECTOR): sse2, avx2, avx512, neon."""
    return VECTOR_PATHS.get(_lib(variant).xxhash_variants_vector(), "unknown")
