"""Tests of the installed xxhash_variants package (fetch xxHash, build and install a wheel first, see README.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import xxhash_variants

EXPECTED_PATH = {"baseline": "sse2", "avx2": "avx2", "avx512": "avx512", "neon": "neon"}


def test_each_variant_runs_its_own_xxhash_code_path() -> None:
    """The per-variant compile-definitions reached xxHash: XXH_VECTOR differs per library."""
    for variant in xxhash_variants.supported_variants():
        assert xxhash_variants.vector_path(variant) == EXPECTED_PATH[variant]


@pytest.mark.parametrize("n", [0, 1, 16, 17, 128, 129, 240, 241, 1024, 100_003])
def test_every_variant_matches_the_xxhash_package(n: int) -> None:
    """The `xxhash` package (the same xxHash, its own build) is the reference."""
    xxhash = pytest.importorskip("xxhash")
    data = bytes((i * 131 + 7) % 256 for i in range(n))
    for seed in (0, 2**64 - 1):
        want = xxhash.xxh3_64_intdigest(data, seed=seed)
        for variant in xxhash_variants.supported_variants():
            assert xxhash_variants.xxh3_64(data, seed, variant=variant) == want, (variant, n, seed)


def test_bad_seed() -> None:
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        xxhash_variants.xxh3_64(b"x", -1)


def test_selftest() -> None:
    proc = subprocess.run([sys.executable, "-m", "xxhash_variants.selftest", "--json"], capture_output=True, text=True)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["failed"] == 0, result["failures"]
    assert result["variants"] == xxhash_variants.supported_variants()
