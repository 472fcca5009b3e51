"""Linux wheels for another arch, cross-compiled with the Debian cross toolchains.

No emulated compiler anywhere: `<triplet>-gcc`/`<triplet>-g++` (the triplet
comes from cpubuild's hardware data) build every variant through the generic
toolchain file cpubuild ships (cpubuild/cmake/toolchains/linux-cross.cmake);
the wheel is tagged
for the target with `_PYTHON_HOST_PLATFORM` (scikit-build-core honours it) and
repaired by auditwheel, which reads the foreign ELF files itself and resolves
their libraries in the cross sysroot (`--ldpaths /usr/<triplet>/lib...`)
against the target's manylinux policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..cmake import CMAKE_DIR, TOOLCHAINS
from ..errors import ToolMissingError
from ..hardware import Arch
from ..toolchain.compilers import identify
from ..toolchain.repair import Repaired, excluded_sonames, repair_linux
from ..toolchain.tools import Requirement, apt_fix
from . import BuildSetup, Host, Log, Toolchain
from .linux_native import common_requirements, linux_setup

if TYPE_CHECKING:  # platforms stand below wheelbuild: the plan is only a type here
    from ..wheelbuild.plan import BuildPlan

TOOLCHAIN_FILE = TOOLCHAINS / "linux-cross.cmake"
# Debian's cross packages install the target's libraries here.
SYSROOT_PATTERN = "/usr/{triplet}"


def cross_package(arch: Arch) -> str:
    """Debian's package for the cross C++ compiler (g++-aarch64-linux-gnu)."""
    return f"g++-{arch.triplet}"


def compiler_names(arch: Arch) -> tuple[str, str]:
    return f"{arch.triplet}-gcc", f"{arch.triplet}-g++"


def sysroot(arch: Arch) -> Path:
    return Path(SYSROOT_PATTERN.format(triplet=arch.triplet))


def ldpaths(arch: Arch) -> str:
    """Where auditwheel finds the target's shared libraries (the cross sysroot)."""
    root = sysroot(arch)
    return ":".join(str(root / sub) for sub in ("lib", "lib64"))


def host_platform_tag(arch: Arch) -> str:
    """sysconfig-style platform of the target; scikit-build-core turns it into linux_<arch>."""
    return f"linux-{arch.name}"


def cross_settings(arch: Arch, toolchain_file: Path) -> dict[str, str]:
    """The config-settings a cross build adds (pure: unit-tested)."""
    return {
        "cmake.toolchain-file": str(toolchain_file),
        "cmake.define.CPUBUILD_CROSS_TRIPLET": arch.triplet,
        "cmake.define.CPUBUILD_CROSS_SYSROOT": str(sysroot(arch)),
        "cmake.define.CPUBUILD_ARCH": arch.name,
        # The toolchain confines find_package to the target's sysroot; cpubuild's
        # own CMake package is a build-host tool: name it directly.
        "cmake.define.cpubuild_DIR": str(CMAKE_DIR),
    }


def cross_env(arch: Arch) -> dict[str, str]:
    return {"_PYTHON_HOST_PLATFORM": host_platform_tag(arch), "CPUBUILD_CROSS_TRIPLET": arch.triplet}


@dataclass(frozen=True, kw_only=True)
class LinuxCross:
    name: str = "linux-cross"
    description: str = "Debian cross toolchains (<triplet>-g++) for another Linux arch; auditwheel against the target's policy"

    def builds(self, arch: Arch, host: Host) -> bool:
        return host.os == "linux" and "linux" in arch.os and arch.name != host.arch

    def requirements(self, arch: Arch) -> Sequence[Requirement]:
        cc, cxx = compiler_names(arch)
        return [
            Requirement(name=f"{arch.name} cross c++ compiler", command=(cxx, "--version"),
                        purpose=f"cross-compiles the {arch.name} variants", fix=apt_fix(cross_package(arch))),
            Requirement(name=f"{arch.name} cross c compiler", command=(cc, "--version"),
                        purpose=f"cross-compiles the {arch.name} probe", fix=apt_fix(f"gcc-{arch.triplet}")),
            *common_requirements(),
        ]

    def toolchain(self, arch: Arch, environ: Mapping[str, str]) -> Toolchain:
        # CC/CXX name the host's compilers in most environments: not used here.
        cc, cxx = compiler_names(arch)
        toolchain = Toolchain(c=identify([cc]), cxx=identify([cxx]))
        for compiler in (toolchain.c, toolchain.cxx):
            if compiler.target != arch.triplet:
                raise ToolMissingError(
                    f"{compiler.command[0]} targets {compiler.target}, not {arch.triplet}",
                    detail=f"fix: {apt_fix(cross_package(arch))}",
                )
        return toolchain

    def setup(self, plan: BuildPlan, toolchain: Toolchain, log: Log) -> BuildSetup:
        arch = plan.target
        base = linux_setup(plan, toolchain, log)
        return BuildSetup(
            config_settings={**base.config_settings, **cross_settings(arch, TOOLCHAIN_FILE)},
            env={**base.env, **cross_env(arch)},
            notes=(*base.notes, f"cross: {toolchain.cxx.display}, sysroot {sysroot(arch)}, tag {host_platform_tag(arch)}"),
        )

    def repair(self, wheel: Path, dest: Path, plan: BuildPlan, guarded: Sequence[str], log: Log) -> Repaired:
        return repair_linux(wheel, dest, ceiling=plan.manylinux, guarded=guarded, log=log, ldpaths=ldpaths(plan.target),
                            exclude=excluded_sonames(plan.project, plan.torch.libraries if plan.torch else ()))


PLATFORM = LinuxCross()
