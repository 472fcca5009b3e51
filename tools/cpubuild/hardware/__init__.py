"""The hardware facts cpubuild ships as data (``hardware.toml`` next to this file).

Arches (their names for Debian, QEMU, Docker, the cross compilers, aliases),
CPU features (how the baseline probe detects each one, what it implies) and
the qemu-user CPU models the tests and the rendered CI run under. Projects
name features and variants; they never restate any of this.

Standard library only: the CMake bridge (``python -m cpubuild.matrix``) loads
it inside isolated builds.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import UnknownArchError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

DATA_FILE = Path(__file__).with_name("hardware.toml")
COMPILER_FAMILIES = ("gcc", "clang", "apple-clang")
OPERATING_SYSTEMS = ("linux", "darwin")
CPUID_REGISTERS = ("eax", "ebx", "ecx", "edx")
PERMISSIONS = ("xtiledata",)
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*\Z")  # \Z: no trailing newline


class HardwareDataError(ValueError):
    """hardware.toml is malformed: a cpubuild bug, never a user mistake."""


@dataclass(frozen=True, kw_only=True)
class Arch:
    name: str
    aliases: tuple[str, ...]
    os: tuple[str, ...]
    compilers: tuple[str, ...]
    triplet: str
    debian_arch: str
    qemu: str
    docker_platform: str
    manylinux: str
    cpuinfo: str
    macos: str | None = None
    # gcc/clang flags of the arch's lowest ISA: the probe of a project whose
    # matrix declares a floor (no baseline variant) is built with these
    probe_flags: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Feature:
    """How the probe detects one CPU feature."""

    name: str
    arch: str
    cpuid: tuple[int, int, str, int] | None = None
    # [leaf, subleaf, register, width, minimum]: the register's low `width` bits
    # must read at least `minimum` (AVX10 reports its version, not a bit per level)
    version: tuple[int, int, str, int, int] | None = None
    xcr0: int = 0
    permission: str | None = None
    hwcap: int | None = None
    hwcap2: int | None = None
    sysctl: str | None = None
    implies: tuple[str, ...] = ()
    cpuinfo: str | None = None

    @property
    def cpuinfo_name(self) -> str:
        """The name /proc/cpuinfo lists it under."""
        return self.cpuinfo or self.name

    def detection(self) -> dict[str, Any]:
        """The probe's recipe, as the runtime manifest carries it."""
        spec: dict[str, Any] = {}
        if self.cpuid is not None:
            spec["cpuid"] = list(self.cpuid)
        if self.version is not None:
            spec["version"] = list(self.version)
        for key in ("xcr0", "permission", "hwcap", "hwcap2", "sysctl"):
            value = getattr(self, key)
            if value not in (None, 0):
                spec[key] = value
        return spec


@dataclass(frozen=True, kw_only=True)
class QemuModel:
    arch: str
    cpu: str  # the -cpu value, with ,prop=value options
    features: frozenset[str]


@dataclass(frozen=True, kw_only=True)
class Peak:
    """The instruction that bounds a variant's arithmetic in one dtype (first match wins)."""

    arch: str
    dtype: str
    requires: tuple[str, ...]
    instruction: str  # as reports show it
    probe: str  # the loop of cpubuild/bench/peak.c that issues it


@dataclass(frozen=True, kw_only=True)
class Hardware:
    arches: dict[str, Arch] = field(hash=False)
    features: dict[str, dict[str, Feature]] = field(hash=False)  # arch -> name -> feature, in file order
    qemu: dict[str, tuple[QemuModel, ...]] = field(hash=False)
    peaks: dict[str, tuple[Peak, ...]] = field(hash=False, default_factory=dict)  # arch -> entries, strongest first

    def peak_for(self, arch: str, dtype: str, features: Iterable[str]) -> Peak | None:
        """The first [[peak.<arch>]] entry of `dtype` whose requires a CPU (or a
        variant) with `features` has; None when the data has no entry for it."""
        have = set(self.closure(arch, features)) if arch in self.features else set(features)
        return next((p for p in self.peaks.get(arch, ()) if p.dtype == dtype and set(p.requires) <= have), None)

    def arch(self, name: str) -> Arch:
        """An arch by name or alias (KeyError naming the known ones)."""
        canonical = self.canonical_arch(name)
        if canonical is None:
            raise KeyError(f"unknown arch {name!r} (known: {', '.join(self.arches)})")
        return self.arches[canonical]

    def canonical_arch(self, name: str) -> str | None:
        """'amd64' / 'arm64' / 'x86_64' -> the arch's name; None when unknown."""
        lowered = name.strip().lower()
        for arch in self.arches.values():
            if lowered == arch.name or lowered in arch.aliases:
                return arch.name
        return None

    def resolve_arch(self, name: str, offered: Iterable[str] | None = None, *, offered_by: str = "cpubuild knows") -> str:
        """The one arch lookup of every command: a name or alias ('amd64', 'arm64') -> the
        arch's name, which must be among `offered` (default: every arch cpubuild knows)."""
        choices = tuple(offered) if offered is not None else tuple(self.arches)
        canonical = self.canonical_arch(name)
        if canonical is None or canonical not in choices:
            raise UnknownArchError(f"unknown arch {name!r} ({offered_by}: {', '.join(choices)})")
        return canonical

    def closure(self, arch: str, names: Iterable[str]) -> tuple[str, ...]:
        """`names` plus everything they imply, in this table's feature order."""
        table = self.features[arch]
        wanted: set[str] = set()
        todo = list(names)
        while todo:
            name = todo.pop()
            if name not in wanted:
                wanted.add(name)
                todo.extend(table[name].implies)
        return tuple(n for n in table if n in wanted)

    def by_docker_platform(self, platform: str) -> Arch | None:
        return next((a for a in self.arches.values() if a.docker_platform == platform), None)


def _fail(where: str, problem: str) -> HardwareDataError:
    return HardwareDataError(f"{DATA_FILE}: {where}: {problem}")


def _arch(name: str, raw: dict[str, Any]) -> Arch:
    known = {"aliases", "os", "compilers", "triplet", "debian_arch", "qemu", "docker_platform", "manylinux", "cpuinfo", "macos", "probe_flags"}
    if set(raw) - known:
        raise _fail(f"arch {name}", f"unknown keys {sorted(set(raw) - known)}")
    if not set(raw["compilers"]) <= set(COMPILER_FAMILIES) or not set(raw["os"]) <= set(OPERATING_SYSTEMS):
        raise _fail(f"arch {name}", "unknown compiler family or os")
    if "darwin" in raw["os"] and "macos" not in raw:
        raise _fail(f"arch {name}", "a darwin arch needs a macos tag")
    return Arch(
        name=name,
        aliases=tuple(raw.get("aliases", ())),
        os=tuple(raw["os"]),
        compilers=tuple(raw["compilers"]),
        triplet=raw["triplet"],
        debian_arch=raw["debian_arch"],
        qemu=raw["qemu"],
        docker_platform=raw["docker_platform"],
        manylinux=raw["manylinux"],
        cpuinfo=raw["cpuinfo"],
        macos=raw.get("macos"),
        probe_flags=tuple(raw.get("probe_flags", ())),
    )


def _feature(arch: str, name: str, raw: dict[str, Any]) -> Feature:
    where = f"feature {name} ({arch})"
    known = {"cpuid", "version", "xcr0", "permission", "hwcap", "hwcap2", "sysctl", "implies", "cpuinfo"}
    if set(raw) - known or not NAME_PATTERN.fullmatch(name):
        raise _fail(where, "bad name or unknown keys")
    cpuid = raw.get("cpuid")
    if arch == "x86_64":
        if not (isinstance(cpuid, list) and len(cpuid) == 4 and cpuid[2] in CPUID_REGISTERS and 0 <= cpuid[3] < 32):
            raise _fail(where, "x86_64 features need cpuid = [leaf, subleaf, register, bit]")
        version = raw.get("version")
        if version is not None and not (isinstance(version, list) and len(version) == 5 and version[2] in CPUID_REGISTERS
                                        and 0 < version[3] <= 32 and version[4] > 0):
            raise _fail(where, "version = [leaf, subleaf, register, width, minimum]")
        if raw.get("permission") not in (None, *PERMISSIONS):
            raise _fail(where, f"unknown permission {raw['permission']!r}")
    elif cpuid is not None or "version" in raw or not ({"hwcap", "hwcap2", "sysctl"} & set(raw)):
        raise _fail(where, "non-x86 features are detected by hwcap, hwcap2 or sysctl")
    return Feature(
        name=name,
        arch=arch,
        cpuid=(int(cpuid[0]), int(cpuid[1]), str(cpuid[2]), int(cpuid[3])) if cpuid else None,
        version=_version(raw.get("version")),
        xcr0=int(raw.get("xcr0", 0)),
        permission=raw.get("permission"),
        hwcap=raw.get("hwcap"),
        hwcap2=raw.get("hwcap2"),
        sysctl=raw.get("sysctl"),
        implies=tuple(raw.get("implies", ())),
        cpuinfo=raw.get("cpuinfo"),
    )


def _version(raw: Any) -> tuple[int, int, str, int, int] | None:
    return None if raw is None else (int(raw[0]), int(raw[1]), str(raw[2]), int(raw[3]), int(raw[4]))


def parse_hardware(data: dict[str, Any]) -> Hardware:
    if data.get("schema") != 1:
        raise _fail("schema", "this cpubuild reads schema 1")
    arches = {name: _arch(name, raw) for name, raw in data["arch"].items()}
    features: dict[str, dict[str, Feature]] = {}
    for arch, table in data["features"].items():
        if arch not in arches:
            raise _fail(f"features.{arch}", "undeclared arch")
        features[arch] = {name: _feature(arch, name, raw) for name, raw in table.items()}
        for feat in features[arch].values():
            for implied in feat.implies:
                if implied not in features[arch]:
                    raise _fail(f"feature {feat.name} ({arch})", f"implies unknown feature {implied!r}")
    qemu: dict[str, tuple[QemuModel, ...]] = {}
    for arch, models in data.get("qemu", {}).items():
        if arch not in arches:
            raise _fail(f"qemu.{arch}", "undeclared arch")
        parsed = []
        for raw in models:
            unknown = set(raw["features"]) - set(features[arch])
            if unknown:
                raise _fail(f"qemu model {raw['cpu']} ({arch})", f"unknown features {sorted(unknown)}")
            parsed.append(QemuModel(arch=arch, cpu=raw["cpu"], features=frozenset(raw["features"])))
        qemu[arch] = tuple(parsed)
    peaks: dict[str, tuple[Peak, ...]] = {}
    for arch, entries in data.get("peak", {}).items():
        if arch not in arches:
            raise _fail(f"peak.{arch}", "undeclared arch")
        parsed_peaks = []
        for raw in entries:
            where = f"peak {raw.get('instruction')!r} ({arch})"
            if set(raw) != {"dtype", "requires", "instruction", "probe"}:
                raise _fail(where, "needs exactly dtype, requires, instruction, probe")
            if set(raw["requires"]) - set(features.get(arch, {})):
                raise _fail(where, f"unknown features {sorted(set(raw['requires']) - set(features[arch]))}")
            if not NAME_PATTERN.fullmatch(raw["dtype"]) or not NAME_PATTERN.fullmatch(raw["probe"]):
                raise _fail(where, "bad dtype or probe name")
            parsed_peaks.append(Peak(arch=arch, dtype=raw["dtype"], requires=tuple(raw["requires"]),
                                     instruction=raw["instruction"], probe=raw["probe"]))
        peaks[arch] = tuple(parsed_peaks)
    for arch in arches:
        features.setdefault(arch, {})
        qemu.setdefault(arch, ())
        peaks.setdefault(arch, ())
    return Hardware(arches=arches, features=features, qemu=qemu, peaks=peaks)


@cache
def hardware() -> Hardware:
    """The shipped facts (parsed once per process)."""
    return parse_hardware(tomllib.loads(DATA_FILE.read_text(encoding="utf-8")))


def host_arch() -> str:
    """This machine's arch in the table's vocabulary (uname's name when unknown)."""
    import platform

    machine = platform.machine().lower()
    return hardware().canonical_arch(machine) or machine
