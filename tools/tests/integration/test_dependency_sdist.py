"""`cpubuild_add_dependency` with a real third-party CMake project from the package registry.

zlib-ng (zlib licence) is fetched as the sdist of its Python binding, pinned by
version and sha256, unpacked into cpubuild's cache (nothing committed, nothing
downloaded during the build), and its own CMakeLists.txt is added once with the
lowest variant's flags and linked into every variant of an `init` project
(vLLM's oneDNN route, issue 20 item 5). zlib-ng dispatches its own SIMD at run
time, so its code is the same in every variant; each variant library this CPU
runs must give Python's zlib.crc32 and round-trip a compression.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest
from cpubuild.cache import cache_dir
from cpubuild.matrix import load_matrix
from oracle import oracle_features
from testsupport import REPO, require, require_tool, run

pytestmark = pytest.mark.slow

VERSION = "1.1.0"
SHA256 = "08a3a8468d4f130e3dc80d28ec42fcc7a878a57dfed616233e791066327d78a3"
ARCHIVE = f"zlib_ng-{VERSION}.tar.gz"
OPTIONS = "ZLIB_COMPAT=OFF BUILD_SHARED_LIBS=OFF BUILD_TESTING=OFF WITH_GTEST=OFF ZLIB_ENABLE_TESTS=OFF WITH_GZFILEOP=OFF"
USE = """\
#include <stddef.h>
#include <stdint.h>
#include <zlib-ng.h>
__attribute__((visibility("default"))) uint32_t zl_crc32(const uint8_t *data, uint32_t n) { return zng_crc32(0, data, n); }
__attribute__((visibility("default"))) int zl_roundtrip(const uint8_t *data, size_t n, uint8_t *packed, size_t cap,
                                                        uint8_t *back) {
    size_t packed_n = cap, back_n = n;
    if (zng_compress(packed, &packed_n, data, n) != Z_OK) return -1;
    if (zng_uncompress(back, &back_n, packed, packed_n) != Z_OK || back_n != n) return -2;
    return (int)packed_n;
}
"""


@pytest.fixture(scope="module")
def zlib_ng_source() -> Path:
    """The pinned sdist, checked before it is unpacked (once, into cpubuild's cache)."""
    root = cache_dir() / "sdists"
    tree = root / f"zlib_ng-{VERSION}"
    source = tree / "src" / "zlib_ng" / "zlib-ng"
    if (source / "CMakeLists.txt").is_file():
        return source
    root.mkdir(parents=True, exist_ok=True)
    archive = root / ARCHIVE
    if not archive.is_file():
        run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q", "-d", str(root),
             f"zlib-ng=={VERSION}"], timeout=600)
    found = hashlib.sha256(archive.read_bytes()).hexdigest()
    assert found == SHA256, f"{archive}: sha256 {found}, pinned {SHA256}"
    staging = root / f".zlib_ng-{VERSION}.{os.getpid()}"
    with tarfile.open(archive) as tar:
        tar.extractall(staging, filter="data")
    os.replace(staging / f"zlib_ng-{VERSION}", tree)
    shutil.rmtree(staging, ignore_errors=True)
    return source


def test_zlib_ng_from_its_sdist_is_built_once_and_linked_into_every_variant(zlib_ng_source: Path, tmp_path: Path) -> None:
    require(platform.machine() == "x86_64", "x86_64 host only (the init project's ladder)")
    require_tool("cmake", "gcc")
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    project = tmp_path / "zl"
    run([sys.executable, "-m", "cpubuild", "init", "--name", "zl", "--arch", "x86_64", "-q", str(project)], env=env)
    (project / "csrc" / "use_zlib.c").write_text(USE, encoding="utf-8")
    cmake = (project / "CMakeLists.txt").read_text()
    assert "cpubuild_add_variants(zl\n" in cmake and "SOURCES csrc/zl.c" in cmake, cmake
    cmake = cmake.replace("cpubuild_add_variants(zl\n", f'cpubuild_add_dependency(zlibng SOURCE_DIR "{zlib_ng_source}" '
                          f"OPTIONS {OPTIONS})\ncpubuild_add_variants(zl\n  LINK_LIBRARIES zlib-ng\n")
    (project / "CMakeLists.txt").write_text(cmake.replace("SOURCES csrc/zl.c", "SOURCES csrc/zl.c csrc/use_zlib.c"))
    build = tmp_path / "build"
    launcher = [f"-DCMAKE_C_COMPILER_LAUNCHER={shutil.which('ccache')}"] if shutil.which("ccache") else []
    configure = run(["cmake", "-S", str(project), "-B", str(build), f"-Dcpubuild_DIR={REPO / 'tools' / 'cpubuild' / 'cmake'}",
                     f"-DPython_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release", *launcher], env=env).stdout
    assert "cpubuild: dependency zlibng from" in configure and "built once with baseline's flags" in configure, configure
    out = run(["cmake", "--build", str(build), "-j2"], env=env, timeout=1800).stdout
    assert out.count("cpubuild-deps/zlibng/CMakeFiles/zlib-ng.dir/crc32.c.o") == 1, out  # once, not per variant

    variants = load_matrix(project / "isa_matrix.toml").variants_for("x86_64")
    data = bytes(range(256)) * 4096 + b"cpubuild"
    runnable = 0
    for variant in variants:
        library = build / f"_zl_{variant.name}.so"
        needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
        assert "libz" not in needed, needed  # linked in statically, nothing to repair
        symbols = subprocess.run(["nm", str(library)], capture_output=True, text=True, check=True).stdout
        assert " zng_crc32" in symbols, variant.name
        if not set(variant.requires) <= oracle_features():
            continue  # its own code needs what this CPU lacks; zlib-ng's is the same bytes in every variant
        runnable += 1
        lib = ctypes.CDLL(str(library))
        lib.zl_crc32.restype = ctypes.c_uint32
        assert lib.zl_crc32(data, len(data)) == zlib.crc32(data), variant.name
        packed, back = ctypes.create_string_buffer(len(data) + 1024), ctypes.create_string_buffer(len(data))
        size = lib.zl_roundtrip(data, ctypes.c_size_t(len(data)), packed, ctypes.c_size_t(len(packed)), back)
        assert 0 < size < len(data) and back.raw == data, (variant.name, size)
        assert zlib.decompress(packed.raw[:size]) == data  # zlib-ng's stream is a zlib stream
    assert runnable >= 2  # the baseline and at least the host's next variant
