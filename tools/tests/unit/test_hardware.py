"""cpubuild's hardware facts (tools/cpubuild/hardware/hardware.toml) checked
against the documentation they come from, plus the loader's own rules.

Sources of the expected values below:

* Intel SDM vol. 2A, CPUID instruction: leaf 01H (table 3-10, ECX; table
  3-11, EDX) and leaf 07H (subleaf 0: EBX/ECX/EDX, subleaf 1: EAX);
  vol. 1 section 13.1 (XCR0 state components: bit 1 SSE, bit 2 AVX, bits 5-7
  opmask/ZMM_Hi256/Hi16_ZMM, bits 17-18 XTILECFG/XTILEDATA);
* Linux: arch/arm64/include/uapi/asm/hwcap.h (HWCAP_*, HWCAP2_*),
  arch/s390/include/asm/elf.h (HWCAP_S390_*), arch/x86/include/asm/cpufeatures.h
  (the /proc/cpuinfo spellings, e.g. "pni" for SSE3);
* Apple, "Determining instruction set characteristics": hw.optional.* sysctls;
* Debian / QEMU / Docker / GNU naming of the three arches.
"""

from __future__ import annotations

import copy
import itertools
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from cpubuild.hardware import (
    COMPILER_FAMILIES,
    DATA_FILE,
    PERMISSIONS,
    HardwareDataError,
    hardware,
    host_arch,
    parse_hardware,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

HW = hardware()

# ------------------------------------------------------------------ documented facts

# [leaf, subleaf, register, bit]
INTEL_CPUID = {
    "sse2": (1, 0, "edx", 26),
    "sse3": (1, 0, "ecx", 0),
    "ssse3": (1, 0, "ecx", 9),
    "fma": (1, 0, "ecx", 12),
    "sse4_1": (1, 0, "ecx", 19),
    "sse4_2": (1, 0, "ecx", 20),
    "popcnt": (1, 0, "ecx", 23),
    "avx": (1, 0, "ecx", 28),
    "f16c": (1, 0, "ecx", 29),
    "bmi1": (7, 0, "ebx", 3),
    "avx2": (7, 0, "ebx", 5),
    "bmi2": (7, 0, "ebx", 8),
    "avx512f": (7, 0, "ebx", 16),
    "avx512dq": (7, 0, "ebx", 17),
    "avx512ifma": (7, 0, "ebx", 21),
    "avx512cd": (7, 0, "ebx", 28),
    "avx512bw": (7, 0, "ebx", 30),
    "avx512vl": (7, 0, "ebx", 31),
    "avx512vbmi": (7, 0, "ecx", 1),
    "avx512_vnni": (7, 0, "ecx", 11),
    "amx_bf16": (7, 0, "edx", 22),
    "avx512_fp16": (7, 0, "edx", 23),
    "amx_tile": (7, 0, "edx", 24),
    "amx_int8": (7, 0, "edx", 25),
    "avx_vnni": (7, 1, "eax", 4),
    "avx512_bf16": (7, 1, "eax", 5),
    "avx10_2": (7, 1, "edx", 19),  # AVX10 (any version); the version check is below
    "amx_fp8": (0x1E, 1, "eax", 4),  # Intel ISE: CPUID.(EAX=1EH,ECX=1):EAX[4]
}
# Intel AVX10 architecture spec: CPUID.(EAX=24H,ECX=0):EBX[7:0] is the AVX10 version
AVX10_VERSION = {"avx10_2": (0x24, 0, "ebx", 8, 2)}
XCR0_SSE, XCR0_AVX = 1 << 1, 1 << 2
XCR0_YMM = XCR0_SSE | XCR0_AVX  # 0x6: VEX-encoded vector instructions
XCR0_ZMM = XCR0_YMM | (1 << 5) | (1 << 6) | (1 << 7)  # 0xe6: + opmask, ZMM_Hi256, Hi16_ZMM
XCR0_TILE = (1 << 17) | (1 << 18)  # 0x60000: XTILECFG, XTILEDATA
# Features whose instructions use YMM registers (VEX-encoded vector ISAs). BMI1/BMI2
# are VEX-encoded too, but on general-purpose registers: no XCR0 state.
YMM_FEATURES = {"avx", "fma", "f16c", "avx2", "avx_vnni"}

# /proc/cpuinfo "flags" spellings where they differ from cpubuild's names (cpufeatures.h)
X86_CPUINFO = {"sse3": "pni"}

# AT_HWCAP / AT_HWCAP2 bit numbers
ARM64_HWCAP = {"asimd": 1, "asimdhp": 10, "asimddp": 20, "sve": 22, "asimdfhm": 23}
ARM64_HWCAP2 = {"sve2": 1, "i8mm": 13, "bf16": 14}
S390_HWCAP = {"vx": 11, "vxe": 13, "vxe2": 15}  # HWCAP_S390_VXRS, VXRS_EXT, VXRS_EXT2
APPLE_SYSCTL = {
    "asimd": "hw.optional.neon",
    "asimdhp": "hw.optional.arm.FEAT_FP16",
    "asimddp": "hw.optional.arm.FEAT_DotProd",
    "asimdfhm": "hw.optional.arm.FEAT_FHM",
    "i8mm": "hw.optional.arm.FEAT_I8MM",
    "bf16": "hw.optional.arm.FEAT_BF16",
}  # Apple silicon has no SVE: sve / sve2 have no sysctl

ARCH_NAMES = {
    # name: (GNU triplet, Debian arch, qemu-user name, Docker platform, /proc/cpuinfo feature line)
    "x86_64": ("x86_64-linux-gnu", "amd64", "x86_64", "linux/amd64", "flags"),
    "aarch64": ("aarch64-linux-gnu", "arm64", "aarch64", "linux/arm64", "Features"),
    "s390x": ("s390x-linux-gnu", "s390x", "s390x", "linux/s390x", "features"),
}
# Features added with the hardware data (beyond what cpukern's matrix needed before):
# each must be present and documented above.
ADDED = ("sse3", "ssse3", "sse4_1", "popcnt", "bmi1", "bmi2", "avx_vnni", "avx512cd", "avx512ifma", "avx512vbmi",
         "avx512_fp16", "asimdfhm", "sve2", "amx_fp8", "avx10_2")


def test_the_expected_arches_in_order() -> None:
    assert list(HW.arches) == ["x86_64", "aarch64", "s390x"]
    assert list(HW.features) == list(HW.arches) and list(HW.qemu) == list(HW.arches)


def test_every_documented_feature_is_there_and_nothing_undocumented() -> None:
    documented = {
        "x86_64": set(INTEL_CPUID),
        "aarch64": set(ARM64_HWCAP) | set(ARM64_HWCAP2),
        "s390x": set(S390_HWCAP),
    }
    for arch, names in documented.items():
        assert set(HW.features[arch]) == names, arch
    every = {n for table in HW.features.values() for n in table}
    assert set(ADDED) <= every


@pytest.mark.parametrize("name", list(INTEL_CPUID))
def test_x86_cpuid_bits_and_xcr0_masks(name: str) -> None:
    feature = HW.features["x86_64"][name]
    assert feature.cpuid == INTEL_CPUID[name]
    assert feature.hwcap is None and feature.hwcap2 is None and feature.sysctl is None
    if name.startswith("amx"):
        assert (feature.xcr0, feature.permission) == (XCR0_TILE, "xtiledata")
    elif name.startswith(("avx512", "avx10")):
        assert (feature.xcr0, feature.permission) == (XCR0_ZMM, None)
    elif name in YMM_FEATURES:
        assert (feature.xcr0, feature.permission) == (XCR0_YMM, None)
    else:  # SSE family, POPCNT, BMI: no OS state beyond what every x86-64 OS enables
        assert (feature.xcr0, feature.permission) == (0, None)
    assert feature.cpuinfo_name == X86_CPUINFO.get(name, name)
    assert feature.version == AVX10_VERSION.get(name)


@pytest.mark.parametrize("name", [*ARM64_HWCAP, *ARM64_HWCAP2])
def test_arm64_hwcap_bits_and_apple_sysctls(name: str) -> None:
    feature = HW.features["aarch64"][name]
    assert feature.cpuid is None and feature.xcr0 == 0 and feature.permission is None
    assert feature.hwcap == ARM64_HWCAP.get(name)
    assert feature.hwcap2 == ARM64_HWCAP2.get(name)
    assert feature.sysctl == APPLE_SYSCTL.get(name)
    assert feature.cpuinfo_name == name  # the Linux "Features" line uses the hwcap names


@pytest.mark.parametrize("name", list(S390_HWCAP))
def test_s390x_hwcap_bits(name: str) -> None:
    feature = HW.features["s390x"][name]
    assert (feature.hwcap, feature.hwcap2, feature.sysctl, feature.cpuid) == (S390_HWCAP[name], None, None, None)
    assert feature.cpuinfo_name == name


@pytest.mark.parametrize("arch", list(ARCH_NAMES))
def test_arch_names(arch: str) -> None:
    a = HW.arches[arch]
    assert (a.triplet, a.debian_arch, a.qemu, a.docker_platform, a.cpuinfo) == ARCH_NAMES[arch]
    assert a.manylinux == f"manylinux_2_28_{arch}"
    assert "linux" in a.os
    assert set(a.compilers) <= set(COMPILER_FAMILIES) and {"gcc", "clang"} <= set(a.compilers)
    # apple-clang exactly where macOS is, and a macOS tag with it
    assert ("apple-clang" in a.compilers) == ("darwin" in a.os) == (a.macos is not None)
    assert HW.by_docker_platform(a.docker_platform) is a
    assert HW.arch(a.debian_arch) is a
    assert HW.arch(arch) is a


def test_apple_silicon_tag() -> None:
    # macOS 11 is the first release for Apple silicon
    assert HW.arches["aarch64"].macos == "macosx_11_0_arm64"
    assert "darwin" in HW.arches["aarch64"].os
    assert HW.arches["x86_64"].os == ("linux",) and HW.arches["s390x"].os == ("linux",)


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [("x86_64", "x86_64"), ("amd64", "x86_64"), ("AMD64", "x86_64"), ("x64", "x86_64"), (" x86-64 ", "x86_64"),
     ("aarch64", "aarch64"), ("arm64", "aarch64"), ("ARM64", "aarch64"), ("armv8", "aarch64"),
     ("s390x", "s390x"), ("riscv64", None), ("i686", None), ("", None)],
)
def test_canonical_arch(spelling: str, canonical: str | None) -> None:
    assert HW.canonical_arch(spelling) == canonical


def test_aliases_are_unambiguous() -> None:
    seen: dict[str, str] = {}
    for a in HW.arches.values():
        for spelling in (a.name, *a.aliases):
            assert spelling == spelling.lower()
            assert seen.setdefault(spelling, a.name) == a.name, f"{spelling!r} names {seen[spelling]} and {a.name}"


def test_unknown_arch_lookup_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"unknown arch 'riscv64' \(known: x86_64, aarch64, s390x\)"):
        HW.arch("riscv64")
    assert HW.by_docker_platform("linux/riscv64") is None


@pytest.mark.parametrize(("machine", "expected"), [("x86_64", "x86_64"), ("AMD64", "x86_64"), ("arm64", "aarch64"),
                                                   ("aarch64", "aarch64"), ("s390x", "s390x"), ("riscv64", "riscv64")])
def test_host_arch_uses_the_aliases(monkeypatch: pytest.MonkeyPatch, machine: str, expected: str) -> None:
    import platform

    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert host_arch() == expected


# ------------------------------------------------------------------ implies


def _walk(arch: str, name: str, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    for implied in HW.features[arch][name].implies:
        assert implied not in path, f"cycle: {' -> '.join((*path, implied))}"
        yield (*path, implied)
        yield from _walk(arch, implied, (*path, implied))


@pytest.mark.parametrize("arch", list(HW.arches))
def test_implies_is_acyclic_and_stays_within_the_arch(arch: str) -> None:
    table = HW.features[arch]
    for name, feature in table.items():
        assert name not in feature.implies
        assert len(set(feature.implies)) == len(feature.implies)
        for implied in feature.implies:
            assert implied in table, f"{name} ({arch}) implies {implied}, which is not a {arch} feature"
        for _ in _walk(arch, name, (name,)):
            pass


@pytest.mark.parametrize("arch", list(HW.arches))
def test_implied_features_come_first_in_the_table(arch: str) -> None:
    """Reports list features in table order: what a feature implies is listed before it."""
    order = list(HW.features[arch])
    for name, feature in HW.features[arch].items():
        for implied in feature.implies:
            assert order.index(implied) < order.index(name), (name, implied)


def test_closure_follows_implies_in_table_order() -> None:
    assert HW.closure("x86_64", ["avx2"]) == ("sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2")
    assert HW.closure("x86_64", ["popcnt"]) == ("popcnt",)
    assert HW.closure("x86_64", []) == ()
    skylake = HW.closure("x86_64", ["avx512vl", "avx512bw", "avx512dq"])
    assert {"avx512f", "avx2", "fma", "f16c", "avx", "sse2"} <= set(skylake)
    assert "avx512_vnni" not in skylake and "bmi1" not in skylake
    assert HW.closure("x86_64", ["avx512vbmi"])[-2:] == ("avx512bw", "avx512vbmi")
    assert HW.closure("x86_64", ["amx_bf16", "amx_int8"]) == ("amx_tile", "amx_bf16", "amx_int8")
    assert HW.closure("aarch64", ["asimdfhm"]) == ("asimd", "asimdhp", "asimdfhm")
    assert HW.closure("aarch64", ["sve2", "bf16"]) == ("asimd", "sve", "sve2", "bf16")
    assert HW.closure("s390x", ["vxe2"]) == ("vx", "vxe", "vxe2")
    # idempotent, order-independent
    for arch, table in HW.features.items():
        for name in table:
            once = HW.closure(arch, [name])
            assert HW.closure(arch, once) == once == HW.closure(arch, reversed(once))


# ------------------------------------------------------------------ qemu models


@pytest.mark.parametrize("arch", list(HW.arches))
def test_qemu_models_are_subsets_of_the_arch_features_and_closed(arch: str) -> None:
    models = HW.qemu[arch]
    assert models, f"no qemu-user CPU model for {arch}"
    assert len({m.cpu for m in models}) == len(models)
    for model in models:
        assert model.arch == arch
        assert model.features <= set(HW.features[arch]), model.cpu
        # a CPU that reports a feature reports what it implies
        assert set(HW.closure(arch, model.features)) == model.features, model.cpu


@pytest.mark.parametrize("arch", list(HW.arches))
def test_qemu_models_are_listed_weakest_first(arch: str) -> None:
    models = HW.qemu[arch]
    for weaker, stronger in itertools.pairwise(models):
        assert weaker.features < stronger.features, (weaker.cpu, stronger.cpu)


def test_known_qemu_models() -> None:
    x86 = {m.cpu: m for m in HW.qemu["x86_64"]}
    assert list(x86) == ["Nehalem", "SandyBridge", "Haswell"]
    assert "avx" not in x86["Nehalem"].features  # no XSAVE
    assert "avx" in x86["SandyBridge"].features and "avx2" not in x86["SandyBridge"].features
    assert {"avx2", "fma", "f16c", "bmi1", "bmi2"} <= x86["Haswell"].features
    assert not any(f.startswith("avx512") for m in x86.values() for f in m.features)  # QEMU 7.2 TCG: no AVX-512
    arm = {m.cpu: m for m in HW.qemu["aarch64"]}
    assert "sve" not in arm["max,sve=off"].features and {"sve", "sve2"} <= arm["max"].features
    assert [m.cpu for m in HW.qemu["s390x"]] == ["max,vxeh=off", "max"]
    assert HW.qemu["s390x"][0].features == frozenset({"vx"})


# ------------------------------------------------------------------ manifest recipes


def test_detection_recipes() -> None:
    x86, arm = HW.features["x86_64"], HW.features["aarch64"]
    assert x86["sse2"].detection() == {"cpuid": [1, 0, "edx", 26]}
    assert x86["avx2"].detection() == {"cpuid": [7, 0, "ebx", 5], "xcr0": 6}
    assert x86["amx_tile"].detection() == {"cpuid": [7, 0, "edx", 24], "xcr0": 0x60000, "permission": "xtiledata"}
    assert x86["avx10_2"].detection() == {"cpuid": [7, 1, "edx", 19], "version": [0x24, 0, "ebx", 8, 2], "xcr0": 0xe6}
    assert arm["asimd"].detection() == {"hwcap": 1, "sysctl": "hw.optional.neon"}
    assert arm["sve2"].detection() == {"hwcap2": 1}
    assert HW.features["s390x"]["vxe"].detection() == {"hwcap": 13}


def test_every_permission_is_one_the_probe_can_ask_for() -> None:
    probe = (DATA_FILE.parent.parent / "runtime" / "probe.c").read_text()
    for table in HW.features.values():
        for feature in table.values():
            if feature.permission is not None:
                assert feature.permission in PERMISSIONS
    assert PERMISSIONS == ("xtiledata",) and "cpubuild_probe_amx_permission" in probe and "XTILEDATA" in probe


# ------------------------------------------------------------------ the loader's rules


def _raw() -> dict[str, Any]:
    return copy.deepcopy(tomllib.loads(DATA_FILE.read_text(encoding="utf-8")))


def test_the_shipped_file_parses_the_same_twice() -> None:
    assert parse_hardware(_raw()).features == HW.features
    assert hardware() is HW  # parsed once per process


def _broken(edit: Any) -> str:
    data = _raw()
    edit(data)
    with pytest.raises(HardwareDataError) as info:
        parse_hardware(data)
    assert str(info.value).startswith(f"{DATA_FILE}: ")
    return str(info.value)


def test_malformed_data_is_refused() -> None:
    def setitem(path: list[str], value: Any) -> Any:
        def edit(data: dict[str, Any]) -> None:
            node = data
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        return edit

    assert "schema 1" in _broken(setitem(["schema"], 2))
    assert "unknown keys" in _broken(setitem(["arch", "x86_64", "colour"], "red"))
    assert "unknown compiler family" in _broken(setitem(["arch", "x86_64", "compilers"], ["gcc", "msvc"]))
    assert "macos tag" in _broken(lambda d: d["arch"]["aarch64"].pop("macos"))
    assert "cpuid = [leaf, subleaf, register, bit]" in _broken(setitem(["features", "x86_64", "avx2", "cpuid"], [7, 0, "exx", 5]))
    assert "cpuid = [leaf, subleaf, register, bit]" in _broken(setitem(["features", "x86_64", "avx2", "cpuid"], [7, 0, "ebx", 32]))
    assert "version = [leaf" in _broken(setitem(["features", "x86_64", "avx10_2", "version"], [0x24, 0, "ebx", 8]))
    assert "unknown permission" in _broken(setitem(["features", "x86_64", "amx_tile", "permission"], "root"))
    assert "hwcap, hwcap2 or sysctl" in _broken(setitem(["features", "aarch64", "sve"], {"cpuid": [1, 0, "ecx", 1]}))
    assert "implies unknown feature 'avx2'" in _broken(setitem(["features", "aarch64", "sve", "implies"], ["avx2"]))
    assert "undeclared arch" in _broken(setitem(["features", "riscv64"], {"v": {"hwcap": 21}}))
    assert "unknown features ['sve']" in _broken(lambda d: d["qemu"]["x86_64"][0]["features"].append("sve"))
    assert "bad name" in _broken(setitem(["features", "x86_64", "AVX-2"], {"cpuid": [7, 0, "ebx", 5]}))


def test_one_arch_resolver_for_every_command() -> None:
    from cpubuild.errors import UnknownArchError

    hw = hardware()
    assert hw.resolve_arch("amd64") == "x86_64" and hw.resolve_arch("ARM64") == "aarch64"
    assert hw.resolve_arch("x86_64", ("x86_64",), offered_by="isa_matrix.toml declares") == "x86_64"
    with pytest.raises(UnknownArchError, match=r"unknown arch 'aarch64' \(isa_matrix.toml declares: x86_64\)"):
        hw.resolve_arch("aarch64", ("x86_64",), offered_by="isa_matrix.toml declares")
    with pytest.raises(UnknownArchError, match=r"unknown arch 'sparc64' \(cpubuild knows: x86_64"):
        hw.resolve_arch("sparc64")
