"""The macOS platform's pure parts: tag -> CMake/wheel settings, platform
choice, and the Mach-O check that replaces auditwheel there."""

from __future__ import annotations

import struct

import pytest
from cpubuild.errors import UsageError
from cpubuild.hardware import Arch, hardware
from cpubuild.matrix import load_matrix, parse_matrix
from cpubuild.platforms import Host, select_platform
from cpubuild.platforms.macos import (
    LC_BUILD_VERSION,
    LC_LOAD_DYLIB,
    PLATFORM,
    MachO,
    macho_problems,
    macos_env,
    macos_settings,
    parse_tag,
    read_macho,
)
from testsupport import CPUKERN_MATRIX

MATRIX = load_matrix(CPUKERN_MATRIX)
MAC_ARCHES = [a for a in MATRIX.arches.values() if "darwin" in a.os]


def test_the_matrix_declares_a_macos_arch() -> None:
    assert [a.name for a in MAC_ARCHES] == ["aarch64"]


@pytest.mark.parametrize("arch", MAC_ARCHES, ids=lambda a: a.name)
def test_settings_follow_the_matrix_tag(arch: Arch) -> None:
    tag = parse_tag(str(arch.macos))
    settings = macos_settings(arch)
    assert settings["cmake.define.CMAKE_OSX_ARCHITECTURES"] == tag.machine == "arm64"
    assert settings["cmake.define.CMAKE_OSX_DEPLOYMENT_TARGET"] == tag.deployment_target
    assert settings["cmake.define.CPUBUILD_ARCH"] == arch.name
    env = macos_env(arch)
    # scikit-build-core derives the wheel tag from these two
    assert env["MACOSX_DEPLOYMENT_TARGET"] == tag.deployment_target
    assert env["ARCHFLAGS"] == "-arch arm64"
    assert f"macosx_{tag.deployment_target.replace('.', '_')}_{tag.machine}" == arch.macos
    # the tag is the hardware data's default, the project did not override it
    assert arch.macos == hardware().arches[arch.name].macos


def test_parse_tag_rejects_non_mac_tags() -> None:
    assert parse_tag("macosx_10_15_x86_64").deployment_target == "10.15"
    for bad in ("manylinux_2_28_aarch64", "macosx_11_arm64", "macosx_11_0_ppc"):
        with pytest.raises(UsageError):
            parse_tag(bad)
    with pytest.raises(UsageError, match=r"builds no macOS wheels for s390x"):
        macos_settings(MATRIX.arches["s390x"])


def linux_only(arch: str) -> Arch:
    """The arch as a project that does not list darwin in its [arch] os builds it."""
    return parse_matrix({"schema": 2, "variant": [{"name": "base", "arch": arch, "priority": 0, "flags": ["-O2"]}]}).arches[arch]


def test_platform_choice_by_host() -> None:
    mac = Host(os="darwin", arch="aarch64")
    aarch64, s390x = MATRIX.arches["aarch64"], MATRIX.arches["s390x"]
    assert PLATFORM.builds(aarch64, mac)
    assert select_platform(aarch64, mac).name == "macos"
    assert not PLATFORM.builds(s390x, mac)  # the matrix has no macOS s390x
    assert not PLATFORM.builds(aarch64, Host(os="linux", arch="x86_64"))
    with pytest.raises(UsageError, match="no build platform for s390x"):
        select_platform(s390x, mac)
    # a project whose aarch64 is Linux-only gets no macOS wheels even though the hardware could
    plain = linux_only("aarch64")
    assert plain.os == ("linux",) and plain.macos is None and "apple-clang" not in plain.compilers
    assert not PLATFORM.builds(plain, mac)
    with pytest.raises(UsageError, match=r'add os = \["linux", "darwin"\] to \[arch.aarch64\]'):
        macos_settings(plain)


def macho(cpu: int, dylibs: list[str], minos: tuple[int, int] | None) -> bytes:
    """A minimal thin 64-bit Mach-O: header + LC_LOAD_DYLIB and LC_BUILD_VERSION commands."""
    commands = b""
    for name in dylibs:
        raw = name.encode() + b"\0"
        raw += b"\0" * (-(24 + len(raw)) % 8)
        commands += struct.pack("<IIIIII", LC_LOAD_DYLIB, 24 + len(raw), 24, 2, 0x10000, 0x10000) + raw
    count = len(dylibs)
    if minos is not None:
        commands += struct.pack("<IIIIII", LC_BUILD_VERSION, 24, 1, (minos[0] << 16) | (minos[1] << 8), 0, 0)
        count += 1
    header = struct.pack("<IiiIIII", 0xFEEDFACF, cpu, 0, 8, count, len(commands), 0) + b"\0" * 4
    return header + commands


def test_read_macho_finds_cpu_libraries_and_minimum_os() -> None:
    info = read_macho(macho(0x0100000C, ["/usr/lib/libSystem.B.dylib", "/usr/lib/libc++.1.dylib"], (11, 0)))
    assert info == MachO(cpu="arm64", dylibs=("/usr/lib/libSystem.B.dylib", "/usr/lib/libc++.1.dylib"), minos=(11, 0))
    assert read_macho(macho(0x01000007, [], None)).cpu == "x86_64"
    for bad in (b"\x7fELF" + b"\0" * 60, b"", macho(0x0100000C, ["/usr/lib/x"], None)[:40]):
        with pytest.raises(ValueError):
            read_macho(bad)


def test_macho_problems() -> None:
    tag = parse_tag("macosx_11_0_arm64")
    ok = MachO(cpu="arm64", dylibs=("/usr/lib/libSystem.B.dylib", "/System/Library/Frameworks/Accelerate.framework/Accelerate"), minos=(11, 0))
    assert macho_problems("a.dylib", ok, tag) == []
    bad = MachO(cpu="x86_64", dylibs=("/opt/homebrew/lib/libomp.dylib", "@rpath/libtorch.dylib"), minos=(14, 0))
    problems = macho_problems("b.dylib", bad, tag)
    assert len(problems) == 4
    assert "x86_64" in problems[0] and "libomp" in problems[1] and "@rpath" in problems[2] and "14.0" in problems[3]
