"""The independent CPU oracle every test derives its expectations from.

The native host's /proc/cpuinfo flags (Linux drops AVX/AVX-512/AMX flags there
when the kernel did not enable their register state, which is the OS-support
rule), mapped to the feature names of cpubuild's hardware data by their
/proc/cpuinfo spelling. Nothing here runs cpubuild's probe or a package's
dispatcher, and nothing hard-codes what this machine has.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from pathlib import Path

import pytest
from cpubuild.hardware import hardware, host_arch
from cpubuild.matrix import Matrix
from testsupport import require

ARCH = host_arch()
# XSAVE-managed state: Linux lists these only when the kernel enabled their
# state in XCR0, and lists `xsave` itself only when XSAVE is in use.
XSAVE_FEATURE_PREFIXES = ("avx", "fma", "f16c", "amx")


def cpuinfo_flags(arch: str = ARCH) -> set[str]:
    key = hardware().arches[arch].cpuinfo if arch in hardware().arches else None
    require(key is not None and Path("/proc/cpuinfo").is_file(), f"no /proc/cpuinfo feature line known for {arch}")
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        name, _, value = line.partition(":")
        if name.strip() == key:
            return set(value.split())
    pytest.fail(f"/proc/cpuinfo has no {key!r} line")


def linux_amx_permission() -> bool:
    """Linux arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) from this process."""
    libc = ctypes.CDLL(None, use_errno=True)
    sys_arch_prctl, get_perm, req_perm, xtiledata = 158, 0x1022, 0x1023, 18
    mask = ctypes.c_ulong(0)
    if libc.syscall(sys_arch_prctl, req_perm, xtiledata) != 0:
        return False
    return libc.syscall(sys_arch_prctl, get_perm, ctypes.byref(mask)) == 0 and bool(mask.value >> xtiledata & 1)


def oracle_features(arch: str = ARCH) -> set[str]:
    """The hardware data's features of this host, by /proc/cpuinfo."""
    flags = cpuinfo_flags(arch)
    found = {name for name, f in hardware().features[arch].items() if f.cpuinfo_name in flags}
    if arch == "x86_64":
        if "xsave" not in flags:
            found = {f for f in found if not f.startswith(XSAVE_FEATURE_PREFIXES)}
        if any(f.startswith("amx") for f in found) and not linux_amx_permission():
            found = {f for f in found if not f.startswith("amx")}
    return found


def oracle_ranking(matrix: Matrix, built: Iterable[str], arch: str = ARCH) -> list[str]:
    """Built variants this host runs, best first, by the matrix's priorities."""
    have, built = oracle_features(arch), set(built)
    return [v.name for v in reversed(matrix.variants_for(arch)) if v.name in built and set(v.requires) <= have]


def support_rows(matrix: Matrix) -> list[tuple[str, str, str, str]]:
    """(arch, variant, native here?, qemu models of the hardware data that run it) for every variant."""
    rows = []
    have = oracle_features() if ARCH in matrix.arches else set()
    for arch in matrix.arches:
        for v in matrix.variants_for(arch):
            native = "yes" if arch == ARCH and set(v.requires) <= have else "no"
            models = [m.cpu for m in hardware().qemu.get(arch, ()) if set(v.requires) <= m.features]
            rows.append((arch, v.name, native, ", ".join(models) or "-"))
    return rows


if __name__ == "__main__":  # python tools/tests/oracle.py: the live "executed here" column of the README's support table
    from cpubuild.matrix import load_matrix
    from testsupport import CPUKERN_MATRIX

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU")
    print(f"host: {ARCH}, {model}")
    print(f"{'arch':<8} {'variant':<12} {'native here':<12} qemu-user models that run it")
    for arch, name, native, models in support_rows(load_matrix(CPUKERN_MATRIX)):
        print(f"{arch:<8} {name:<12} {native:<12} {models}")
