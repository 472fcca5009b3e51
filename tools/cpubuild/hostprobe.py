"""Which CPU features this host has, found by cpubuild's own probe.

The very probe cpubuild ships into every package (runtime/probe.c: CPUID +
XCR0 + OS permissions, or HWCAP), compiled once for this host with its C
compiler into cpubuild's cache, decoded with the hardware data. Nothing of the
project being built is imported. Without a C compiler, py-cpuinfo's flags are
matched to the feature names instead (a build tool may afford its 1 s).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .cache import cache_dir, digest
from .hardware import hardware, host_arch
from .runtime.dispatch import probe_host
from .toolchain.tools import find_tool

PROBE_SOURCE = Path(__file__).with_name("runtime") / "probe.c"


@dataclass(frozen=True, kw_only=True)
class HostFeatures:
    arch: str
    found: frozenset[str]
    source: str  # "cpubuild probe", "py-cpuinfo" or "unavailable: ..."
    not_found: dict[str, str] | None = None  # feature -> why (the probe only)


def normalise_flag(name: str) -> str:
    """'avx512_vnni' and 'avx512vnni' are the same feature to /proc/cpuinfo and py-cpuinfo."""
    return name.lower().replace("_", "").replace(".", "")


def match_flags(feature_names: Iterable[str], flags: Iterable[str], aliases: dict[str, str] | None = None) -> frozenset[str]:
    """Pure: the features whose (cpuinfo) name is among the CPU flags."""
    have = {normalise_flag(f) for f in flags}
    aliases = aliases or {}
    return frozenset(n for n in feature_names if normalise_flag(aliases.get(n, n)) in have)


def compile_probe() -> Path | None:
    """The host's probe library (built once per compiler and source, cached)."""
    cc = os.environ.get("CC", "").split()[:1] or ["cc"]
    exe = find_tool(cc[0]) or find_tool("gcc")
    if exe is None:
        return None
    source = PROBE_SOURCE.read_bytes()
    st = Path(exe).resolve().stat()
    key = digest(source.decode(), str(Path(exe).resolve()), str(st.st_size), str(st.st_mtime_ns))[:16]
    target = cache_dir() / "probe" / f"probe-{key}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so")
    os.close(fd)
    proc = subprocess.run([exe, "-O2", "-shared", "-fPIC", str(PROBE_SOURCE), "-o", tmp], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        return None
    os.replace(tmp, target)
    return target


@cache
def _probed() -> tuple[frozenset[str], dict[str, str]] | None:
    path = compile_probe()
    if path is None:
        return None
    specs = {n: f.detection() for n, f in hardware().features[host_arch()].items()}
    report, _ = probe_host(ctypes.CDLL(str(path)), specs)
    return frozenset(report.found), dict(report.not_found)


def _from_cpuinfo(arch: str) -> frozenset[str] | None:
    try:
        cpuinfo = importlib.import_module("cpuinfo")
        flags = cpuinfo.get_cpu_info().get("flags", [])
    except Exception:
        return None
    table = hardware().features[arch]
    return match_flags(table, flags, {n: f.cpuinfo_name for n, f in table.items()})


def host_features(arch: str, feature_names: Iterable[str] = ()) -> HostFeatures:
    """Features of the host CPU, for the host's own arch only (restricted to `feature_names` when given)."""
    names = set(feature_names)
    if arch != host_arch():
        return HostFeatures(arch=arch, found=frozenset(), source=f"unavailable: the host is {host_arch()}")
    probed = _probed()
    if probed is not None:
        found, why = probed
        return HostFeatures(arch=arch, found=found & names if names else found, source="cpubuild probe", not_found=why)
    matched = _from_cpuinfo(arch)
    if matched is not None:
        return HostFeatures(arch=arch, found=matched & names if names else matched, source="py-cpuinfo")
    return HostFeatures(arch=arch, found=frozenset(), source="unavailable: no C compiler for the probe and py-cpuinfo is not installed (python3 -m pip install py-cpuinfo)")
