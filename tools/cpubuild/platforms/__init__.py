"""Build platforms: one module per way of producing a wheel, behind one protocol.

The builder (cpubuild.wheelbuild.runner) is platform-agnostic: it asks the platform
for the toolchain, the tools it needs, the extra build settings and the repair
step. Adding a platform = a module in this package exposing ``PLATFORM`` and
its name in PLATFORM_MODULES; nothing else changes.

* linux_native - the host's compiler, the host's arch (this module's sibling);
* linux_cross  - Debian cross toolchains for another Linux arch: a CMake
  toolchain file, ``_PYTHON_HOST_PLATFORM`` tagging, auditwheel with the target's
  libraries and policy;
* macos        - Apple clang, delocate-style repair.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import UsageError
from ..hardware import host_arch

if TYPE_CHECKING:
    from ..hardware import Arch
    from ..toolchain.compilers import Compiler
    from ..toolchain.repair import Repaired
    from ..toolchain.tools import Requirement
    from ..wheelbuild.plan import BuildPlan

# Tried in order; the first whose `builds(arch, host)` is true builds the wheel.
PLATFORM_MODULES: tuple[str, ...] = ("linux_native", "linux_cross", "macos")

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Host:
    os: str  # sys.platform style: linux, darwin
    arch: str  # the hardware data's name when known (x86_64, aarch64, s390x)

    @classmethod
    def current(cls) -> Host:
        return cls(os="darwin" if sys.platform == "darwin" else sys.platform, arch=host_arch())


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    """The compilers a platform builds one arch with."""

    c: Compiler
    cxx: Compiler

    @property
    def family(self) -> str:
        return self.cxx.family


@dataclass(frozen=True, kw_only=True)
class BuildSetup:
    """What a platform adds to the plan's config-settings and environment."""

    config_settings: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # shown with -v and in the JSON report


@runtime_checkable
class Platform(Protocol):
    name: str
    description: str

    def builds(self, arch: Arch, host: Host) -> bool:
        """Whether this platform produces wheels for `arch` (as the project builds it) on `host`."""
        ...

    def requirements(self, arch: Arch) -> Sequence[Requirement]:
        """Tools a build needs (checked before building; listed by `cpubuild doctor`)."""
        ...

    def toolchain(self, arch: Arch, environ: Mapping[str, str]) -> Toolchain:
        """The C and C++ compilers for `arch` (honouring CC/CXX where that makes sense)."""
        ...

    def setup(self, plan: BuildPlan, toolchain: Toolchain, log: Log) -> BuildSetup:
        """Extra config-settings/env for this build (toolchain file, tags, glibc header)."""
        ...

    def repair(self, wheel: Path, dest: Path, plan: BuildPlan, guarded: Sequence[str], log: Log) -> Repaired:
        """Turns the backend's wheel into the distributable one inside `dest`.

        `guarded`: wheel paths of the variant libraries above the baseline."""
        ...


def registered() -> list[Platform]:
    found: list[Platform] = []
    for name in PLATFORM_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        found.append(module.PLATFORM)
    return found


def select_platform(arch: Arch, host: Host | None = None) -> Platform:
    host = host or Host.current()
    for candidate in registered():
        if candidate.builds(arch, host):
            return candidate
    names = ", ".join(p.name for p in registered())
    raise UsageError(f"no build platform for {arch.name} wheels on this {host.os} {host.arch} host (registered: {names})")
