"""Which matrix features this host's CPU has.

The installed cpukern's baseline probe (CPUID + XCR0 + OS permissions, or
HWCAP) is the authority when it is importable; otherwise py-cpuinfo's flags are
matched to the matrix's feature names (py-cpuinfo is fine for a build tool: it
is never on cpukern's import path).
"""

from __future__ import annotations

import importlib
import platform
from collections.abc import Iterable
from dataclasses import dataclass

ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


@dataclass(frozen=True, kw_only=True)
class HostFeatures:
    arch: str
    found: frozenset[str]
    source: str  # "cpukern probe", "py-cpuinfo" or "unavailable: ..."


def host_arch() -> str:
    machine = platform.machine().lower()
    return ARCH_ALIASES.get(machine, machine)


def normalise_flag(name: str) -> str:
    """'avx512_vnni' and 'avx512vnni' are the same feature to /proc/cpuinfo and py-cpuinfo."""
    return name.lower().replace("_", "").replace(".", "")


def match_flags(feature_names: Iterable[str], flags: Iterable[str]) -> frozenset[str]:
    """Pure: the matrix features whose normalised name is among the CPU flags."""
    have = {normalise_flag(f) for f in flags}
    return frozenset(n for n in feature_names if normalise_flag(n) in have)


def _from_cpukern(arch: str) -> frozenset[str] | None:
    try:
        dispatch = importlib.import_module("cpukern._dispatch")
        host = dispatch.host()
    except Exception:  # not installed, not built, or a different build: fall back
        return None
    if getattr(host, "arch", None) != arch:
        return None
    return frozenset(str(f) for f in host.features.found)


def _from_cpuinfo(feature_names: Iterable[str]) -> frozenset[str] | None:
    try:
        cpuinfo = importlib.import_module("cpuinfo")
        flags = cpuinfo.get_cpu_info().get("flags", [])
    except Exception:
        return None
    return match_flags(feature_names, flags)


def host_features(arch: str, feature_names: Iterable[str]) -> HostFeatures:
    """Features of the host CPU, for the host's own arch only."""
    names = list(feature_names)
    if arch != host_arch():
        return HostFeatures(arch=arch, found=frozenset(), source=f"unavailable: the host is {host_arch()}")
    probed = _from_cpukern(arch)
    if probed is not None:
        return HostFeatures(arch=arch, found=probed & set(names) if names else probed, source="cpukern probe")
    matched = _from_cpuinfo(names)
    if matched is not None:
        return HostFeatures(arch=arch, found=matched, source="py-cpuinfo")
    return HostFeatures(arch=arch, found=frozenset(), source="unavailable: neither cpukern nor py-cpuinfo is installed (python3 -m pip install py-cpuinfo)")
