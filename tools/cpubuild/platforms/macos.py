"""macOS wheels (Apple silicon) with Apple clang, on a macOS host.

Flags come from the project matrix's `apple-clang` entries; CMake gets
CMAKE_OSX_ARCHITECTURES and CMAKE_OSX_DEPLOYMENT_TARGET from the arch's
`macos` tag (macosx_11_0_arm64 -> arm64, 11.0), and scikit-build-core tags the
wheel from MACOSX_DEPLOYMENT_TARGET and ARCHFLAGS. The variant libraries link
only against the system (libSystem, libc++), so there is nothing to graft:
the "repair" is a check of every Mach-O file in the wheel - its CPU type, that
it loads system libraries only, and that its minimum macOS version is not
above the wheel's tag (which is what delocate would find to complain about).

On Linux this platform does not build wheels; cmake/toolchains/zig-macos.cmake
build-checks the same variant libraries with zig's clang instead (tests).
"""

from __future__ import annotations

import re
import shutil
import struct
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BuildFailedError, UsageError
from ..hardware import Arch
from ..toolchain.compilers import identify
from ..toolchain.repair import Repaired
from ..toolchain.tools import Requirement, pip_fix
from ..toolchain.wheelzip import inspect
from . import BuildSetup, Host, Log, Toolchain
from .linux_native import compiler_commands

if TYPE_CHECKING:  # platforms stand below wheelbuild: the plan is only a type here
    from ..wheelbuild.plan import BuildPlan

_TAG = re.compile(r"^macosx_(\d+)_(\d+)_(arm64|x86_64|universal2)$")
# Libraries every macOS has: loading them is not a portability problem.
SYSTEM_PREFIXES = ("/usr/lib/", "/System/Library/")

MH_MAGIC_64 = 0xFEEDFACF
CPU_TYPES = {0x0100000C: "arm64", 0x01000007: "x86_64"}
LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB, LC_REEXPORT_DYLIB = 0xC, 0x80000018, 0x8000001F
LC_BUILD_VERSION, LC_VERSION_MIN_MACOSX = 0x32, 0x24


@dataclass(frozen=True, kw_only=True)
class MacTag:
    major: int
    minor: int
    machine: str  # arm64

    @property
    def deployment_target(self) -> str:
        return f"{self.major}.{self.minor}"


def parse_tag(tag: str) -> MacTag:
    """'macosx_11_0_arm64' -> MacTag(11, 0, 'arm64')."""
    match = _TAG.match(tag)
    if match is None:
        raise UsageError(f"not a macOS platform tag: {tag!r} (expected e.g. macosx_11_0_arm64)")
    return MacTag(major=int(match.group(1)), minor=int(match.group(2)), machine=match.group(3))


def mac_tag(arch: Arch) -> MacTag:
    if arch.macos is None or "darwin" not in arch.os:
        raise UsageError(f"this project builds no macOS wheels for {arch.name} (add os = [\"linux\", \"darwin\"] to [arch.{arch.name}] in isa_matrix.toml)")
    return parse_tag(arch.macos)


def macos_settings(arch: Arch) -> dict[str, str]:
    """The config-settings of a macOS build (pure: unit-tested)."""
    tag = mac_tag(arch)
    return {
        "cmake.define.CMAKE_OSX_ARCHITECTURES": tag.machine,
        "cmake.define.CMAKE_OSX_DEPLOYMENT_TARGET": tag.deployment_target,
        "cmake.define.CPUBUILD_ARCH": arch.name,
    }


def macos_env(arch: Arch) -> dict[str, str]:
    tag = mac_tag(arch)
    return {"MACOSX_DEPLOYMENT_TARGET": tag.deployment_target, "ARCHFLAGS": f"-arch {tag.machine}"}


# ------------------------------------------------------------------ Mach-O


@dataclass(frozen=True, kw_only=True)
class MachO:
    cpu: str
    dylibs: tuple[str, ...]
    minos: tuple[int, int] | None  # from LC_BUILD_VERSION / LC_VERSION_MIN_MACOSX


def read_macho(data: bytes) -> MachO:
    """The load commands a portability check needs, from a thin 64-bit Mach-O."""
    if len(data) < 32 or struct.unpack_from("<I", data, 0)[0] != MH_MAGIC_64:
        raise ValueError("not a 64-bit little-endian Mach-O file")
    cputype, _sub, _filetype, ncmds, _size, _flags = struct.unpack_from("<iiIIII", data, 4)
    cpu = CPU_TYPES.get(cputype & 0xFFFFFFFF, f"cputype {cputype:#x}")
    dylibs: list[str] = []
    minos: tuple[int, int] | None = None
    offset = 32
    for _ in range(ncmds):
        if offset + 8 > len(data):
            raise ValueError("truncated load commands")
        cmd, size = struct.unpack_from("<II", data, offset)
        if size < 8 or offset + size > len(data):
            raise ValueError(f"load command {cmd:#x} of size {size} does not fit the file")
        if cmd in (LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB, LC_REEXPORT_DYLIB):
            name_offset = struct.unpack_from("<I", data, offset + 8)[0]
            raw = data[offset + name_offset : offset + size]
            dylibs.append(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))
        elif cmd in (LC_BUILD_VERSION, LC_VERSION_MIN_MACOSX):
            version = struct.unpack_from("<I", data, offset + (12 if cmd == LC_BUILD_VERSION else 8))[0]
            minos = (version >> 16, (version >> 8) & 0xFF)
        offset += size
    return MachO(cpu=cpu, dylibs=tuple(dylibs), minos=minos)


def macho_problems(name: str, info: MachO, tag: MacTag) -> list[str]:
    """Why one library would not load on every Mac the tag admits (empty: fine)."""
    problems = []
    if info.cpu != tag.machine:
        problems.append(f"{name}: built for {info.cpu}, the tag says {tag.machine}")
    for lib in info.dylibs:
        if not lib.startswith(SYSTEM_PREFIXES):
            problems.append(f"{name}: loads {lib}, which is not part of macOS (nothing is grafted into macOS wheels)")
    if info.minos is not None and info.minos > (tag.major, tag.minor):
        problems.append(f"{name}: needs macOS {info.minos[0]}.{info.minos[1]}, above the tag's {tag.deployment_target}")
    return problems


def wheel_problems(wheel: Path, tag: MacTag) -> list[str]:
    problems = []
    with zipfile.ZipFile(wheel) as z:
        for member in z.namelist():
            if member.endswith((".dylib", ".so")):
                try:
                    info = read_macho(z.read(member))
                except ValueError as exc:
                    problems.append(f"{member}: {exc}")
                    continue
                problems += macho_problems(member, info, tag)
    return problems


# ------------------------------------------------------------------ the platform


@dataclass(frozen=True, kw_only=True)
class MacOS:
    name: str = "macos"
    description: str = "Apple clang on a macOS host; Mach-O portability check instead of auditwheel"

    def builds(self, arch: Arch, host: Host) -> bool:
        return host.os == "darwin" and "darwin" in arch.os

    def requirements(self, arch: Arch) -> Sequence[Requirement]:
        return [
            Requirement(name="Apple clang", command=(compiler_commands({}, "clang", "clang++")[1][0], "--version"),
                        purpose=f"compiles the {arch.name} variants", fix="xcode-select --install"),
            Requirement(name="cmake", command=("cmake", "--version"), min_version="3.21", purpose="configures the variant build",
                        fix=pip_fix("cmake")),
            Requirement(name="ninja", command=("ninja", "--version"), purpose="runs the compile steps", fix=pip_fix("ninja")),
        ]

    def toolchain(self, arch: Arch, environ: Mapping[str, str]) -> Toolchain:
        cc, cxx = compiler_commands(environ, "clang", "clang++")
        return Toolchain(c=identify(cc), cxx=identify(cxx))

    def setup(self, plan: BuildPlan, toolchain: Toolchain, log: Log) -> BuildSetup:
        arch = plan.target
        settings = {
            "cmake.define.CMAKE_C_COMPILER": toolchain.c.command[0],
            "cmake.define.CMAKE_CXX_COMPILER": toolchain.cxx.command[0],
            **macos_settings(arch),
        }
        env = macos_env(arch)
        return BuildSetup(config_settings=settings, env=env,
                          notes=(f"macOS {env['MACOSX_DEPLOYMENT_TARGET']} {mac_tag(arch).machine} with {toolchain.cxx.display}",))

    def repair(self, wheel: Path, dest: Path, plan: BuildPlan, guarded: Sequence[str], log: Log) -> Repaired:
        arch = plan.target
        tag = mac_tag(arch)
        platforms = inspect(wheel).platforms
        if platforms != (arch.macos,):
            raise BuildFailedError(f"{wheel.name} is tagged {'.'.join(platforms)}, the project aims at {arch.macos}")
        problems = wheel_problems(wheel, tag)
        if problems:
            raise BuildFailedError(f"{wheel.name} would not load on every Mac its tag admits", detail="\n".join(problems))
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / wheel.name
        shutil.copyfile(wheel, target)
        log(f"Mach-O check: {tag.machine}, system libraries only, macOS <= {tag.deployment_target}")
        return Repaired(wheel=target, policy=str(arch.macos), audited=f"Mach-O check passed ({arch.macos})",
                        isa_ext_check="not applicable on macOS")


PLATFORM = MacOS()
