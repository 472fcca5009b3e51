"""Build-check of the macOS arm64 variant libraries on this Linux host.

Real macOS wheels are built on a Mac with Apple clang (`cpubuild wheel` picks
the macos platform there). Here the same CMake project is configured with
cpubuild's toolchain file zig-macos.cmake: zig's clang (from the `ziglang` PyPI
package, with the macOS SDK headers it bundles) compiles and links every
variant that has apple-clang flags in isa_matrix.toml, with those very flags.
The result must be loadable Mach-O arm64 dylibs that use only system
libraries and no macOS newer than the matrix's tag - and the BF16 variant
must really contain BF16 instructions (the apple-m2 CPU enables them).
Nothing here executes: macOS binaries run only on a Mac.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import sys
from pathlib import Path

import pytest
from cpubuild.cmake import TOOLCHAINS
from cpubuild.emulate.rootfs import cache_dir
from cpubuild.matrix import load_matrix
from cpubuild.platforms.macos import macho_problems, parse_tag, read_macho
from cross_cmake import build_here
from testsupport import REPO, require, require_tool

pytestmark = [pytest.mark.slow, pytest.mark.cross]

MATRIX = load_matrix(REPO / "isa_matrix.toml")
ARCH = "aarch64"
MAC_VARIANTS = [v.name for v in MATRIX.variants_for(ARCH) if "apple-clang" in v.compilers]
LC_SEGMENT_64 = 0x19


def text_section(data: bytes) -> bytes:
    """The __TEXT,__text section of a thin 64-bit Mach-O."""
    ncmds = struct.unpack_from("<I", data, 16)[0]
    offset = 32
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, offset)
        if cmd == LC_SEGMENT_64:
            nsects = struct.unpack_from("<I", data, offset + 64)[0]
            for i in range(nsects):
                sect = offset + 72 + 80 * i
                name = data[sect : sect + 16].rstrip(b"\0")
                seg = data[sect + 16 : sect + 32].rstrip(b"\0")
                if name == b"__text" and seg == b"__TEXT":
                    sect_size = struct.unpack_from("<Q", data, sect + 40)[0]
                    file_offset = struct.unpack_from("<I", data, sect + 48)[0]
                    return data[file_offset : file_offset + sect_size]
        offset += size
    raise AssertionError("no __TEXT,__text section")


def count_instructions(code: bytes, mask: int, value: int) -> int:
    words = struct.unpack(f"<{len(code) // 4}I", code[: len(code) // 4 * 4])
    return sum(1 for w in words if w & mask == value)


# BFDOT Vd.4S, Vn.8H, Vm.8H / .2S: 0 Q 1 01110 010 Rm 111111 Rn Rd
BFDOT = (0xBFE0FC00, 0x2E40FC00)
# BFCVTN(2) Vd.4H, Vn.4S: 0 Q 0 01110 101 00001 011010 Rn Rd
BFCVTN = (0xBFFFFC00, 0x0EA16800)


@pytest.fixture(scope="module")
def build_dir() -> Path:
    require(importlib.util.find_spec("ziglang") is not None, "the ziglang package is not installed (pip install ziglang; scripts/setup.sh does)")
    require_tool("cmake", "ninja")
    build = Path(os.environ.get("CPUBUILD_TEST_CACHE") or cache_dir() / "wheel-tests") / "zig-macos"
    build_here(build, f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAINS / 'zig-macos.cmake'}",
               f"-DCPUBUILD_ZIG_PYTHON={sys.executable}")
    return build


def test_every_apple_clang_variant_builds_a_portable_dylib(build_dir: Path) -> None:
    tag = parse_tag(str(MATRIX.arches[ARCH].macos))
    manifest = json.loads((build_dir / "cpubuild" / "_manifest.json").read_text())
    assert manifest["arch"] == ARCH
    assert [v["name"] for v in manifest["variants"] if v["built"]] == MAC_VARIANTS
    for name in [*MAC_VARIANTS, "probe"]:
        path = build_dir / f"_cpukern_{name}.dylib"
        data = path.read_bytes()
        info = read_macho(data)
        assert macho_problems(path.name, info, tag) == [], info
        assert info.minos is not None
        symbols = (b"_cpubuild_probe_sysctl",) if name == "probe" else (b"_cpukern_rms_norm", b"_cpukern_variant_name",
                                                                        b"_cpubuild_variant_name")
        for symbol in symbols:
            assert symbol + b"\0" in data, f"{path.name} lacks {symbol.decode()}"
    assert not (build_dir / "_cpukern_sve.dylib").exists()  # no apple-clang flags: Linux only


def test_bf16_variant_uses_bf16_instructions(build_dir: Path) -> None:
    for name in MAC_VARIANTS:
        code = text_section((build_dir / f"_cpukern_{name}.dylib").read_bytes())
        bf16 = count_instructions(code, *BFDOT) + count_instructions(code, *BFCVTN)
        needs_bf16 = "bf16" in MATRIX.variant(ARCH, name).requires
        assert (bf16 > 0) == needs_bf16, f"{name}: {bf16} BF16 instructions"
