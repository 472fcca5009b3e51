"""Feature decoding and variant selection (cpubuild.runtime.select, the dispatcher
cpubuild copies into every package) on made-up hosts whose probe facts are
those of real CPU models: pure data, no compiler.

The CPU facts below are bit positions documented by Intel (SDM vol. 2A, CPUID
leaves 01H and 07H; vol. 1 ch. 13 for XCR0), by Linux (arm64 and s390 hwcap
headers) and by Apple (hw.optional sysctls), applied to the feature lists those
CPUs publish. The variants are cpukern's (its isa_matrix.toml, its CPUKERN
environment prefix); the feature recipes are cpubuild's hardware data, as the
manifest carries them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from cpubuild.contract import load_config
from cpubuild.hardware import hardware
from cpubuild.matrix import load_matrix
from cpubuild.runtime import errors
from cpubuild.runtime import select as sel
from testsupport import CPUKERN_MATRIX, REPO

MATRIX = load_matrix(CPUKERN_MATRIX)
CONFIG = load_config(REPO)
PREFIX = CONFIG.env_prefix
assert PREFIX == "CPUKERN"


def manifest(arch: str, built: Iterable[str] | None = None) -> dict[str, Any]:
    names = [v.name for v in MATRIX.variants_for(arch)] if built is None else list(built)
    return MATRIX.manifest(arch, names, "_cpukern_{variant}.so", probe="_cpukern_probe.so", project=CONFIG.runtime_facts())


def bits(*positions: int) -> int:
    return sum(1 << p for p in positions)


# ------------------------------------------------------------------ x86 hosts

# CPUID.01H:ECX bits: 0 sse3, 1 pclmulqdq, 3 monitor, 9 ssse3, 12 fma, 13 cx16,
# 19 sse4.1, 20 sse4.2, 22 movbe, 23 popcnt, 25 aes, 26 xsave, 27 osxsave,
# 28 avx, 29 f16c, 30 rdrand. EDX bit 26 is sse2 (0xbfebfbff Intel, 0x178bfbff AMD).
OSXSAVE = 1 << 27
# XCR0: 0 x87, 1 SSE, 2 AVX, 5 opmask, 6 ZMM_Hi256, 7 Hi16_ZMM, 9 PKRU, 17 XTILECFG, 18 XTILEDATA
XCR0_SSE_AVX = 0x7
XCR0_AVX512 = 0x2E7
XCR0_AMX = 0x602E7

SKYLAKE_SP_7_EBX = bits(0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 14, 15, 16, 17, 18, 19, 20, 23, 24, 25, 28, 30, 31)
ZEN3_7_EBX = bits(0, 3, 5, 7, 8, 9, 10, 12, 15, 18, 19, 20, 23, 24, 29)


@dataclass(frozen=True, kw_only=True)
class X86Model:
    name: str
    leaf1: tuple[int, int]  # ecx, edx
    leaf7: tuple[int, int, int, int] = (0, 0, 0, 0)  # subleaf 0: eax (last subleaf), ebx, ecx, edx
    leaf7_1_eax: int = 0
    xcr0: int | None = None  # what XGETBV returns; None: no XSAVE at all

    def raw(self) -> Any:
        """The probe's answer: XGETBV is only read when CPUID says OSXSAVE."""
        regs1 = (0, 0, self.leaf1[0], self.leaf1[1])
        return sel.RawProbe(
            cpuid={(1, 0): regs1, (7, 0): self.leaf7, (7, 1): (self.leaf7_1_eax, 0, 0, 0)},
            xcr0=self.xcr0 if self.leaf1[0] & OSXSAVE else None,
        )


NEHALEM = X86Model(name="Nehalem (Core i7-920)", leaf1=(0x0098E3BD, 0xBFEBFBFF))
SANDY_BRIDGE = X86Model(name="Sandy Bridge (i7-2600K)", leaf1=(0x1FBAE3FF, 0xBFEBFBFF), xcr0=XCR0_SSE_AVX)
IVY_BRIDGE = X86Model(name="Ivy Bridge (i7-3770K)", leaf1=(0x7FBAE3FF, 0xBFEBFBFF), leaf7=(0, 0x281, 0, 0), xcr0=XCR0_SSE_AVX)
HASWELL = X86Model(name="Haswell (i7-4770K)", leaf1=(0x7FFAFBFF, 0xBFEBFBFF), leaf7=(0, 0x27AB, 0, 0), xcr0=XCR0_SSE_AVX)
ZEN3 = X86Model(name="Zen 3 (EPYC 7763)", leaf1=(0x7ED8320B, 0x178BFBFF), leaf7=(0, ZEN3_7_EBX, 0x0040069C, 0x10), xcr0=0x207)
SKYLAKE_SP = X86Model(
    name="Skylake-SP (Xeon Gold 6148)", leaf1=(0x7FFEFBFF, 0xBFEBFBFF),
    leaf7=(0, SKYLAKE_SP_7_EBX, bits(3, 4), bits(26, 27, 28, 29, 31)), xcr0=XCR0_AVX512,
)
CASCADE_LAKE = X86Model(
    name="Cascade Lake (Xeon Gold 6248)", leaf1=(0x7FFEFBFF, 0xBFEBFBFF),
    leaf7=(0, SKYLAKE_SP_7_EBX, bits(3, 4, 11), bits(10, 26, 27, 28, 29, 31)), xcr0=XCR0_AVX512,
)
COOPER_LAKE = X86Model(
    name="Cooper Lake (Xeon 8380H)", leaf1=(0x7FFEFBFF, 0xBFEBFBFF),
    leaf7=(1, SKYLAKE_SP_7_EBX, bits(3, 4, 11), bits(10, 26, 27, 28, 29, 31)), leaf7_1_eax=bits(5), xcr0=XCR0_AVX512,
)
ZEN4 = X86Model(
    name="Zen 4 (EPYC 9654)", leaf1=(0x7EF8320B, 0x178BFBFF),
    leaf7=(1, ZEN3_7_EBX | bits(16, 17, 21, 28, 30, 31), bits(1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 14, 22), 0x10),
    leaf7_1_eax=bits(5), xcr0=XCR0_AVX512,
)
# Alder Lake as shipped: AVX-VNNI (VEX-encoded, leaf 07H.1 EAX bit 4) without AVX-512.
# 07H.0 EBX: fsgsbase, bmi1, avx2, smep, bmi2, erms, invpcid, rdseed, adx, smap, clflushopt, clwb, sha;
# ECX: umip, waitpkg, gfni, vaes, vpclmulqdq, rdpid, movdiri, movdir64b; EDX: fsrm, serialize, hybrid.
ALDER_LAKE = X86Model(
    name="Alder Lake (i9-12900K)", leaf1=(0x7FFAFBFF, 0xBFEBFBFF),
    leaf7=(1, bits(0, 3, 5, 7, 8, 9, 10, 18, 19, 20, 23, 24, 29), bits(2, 5, 8, 9, 10, 22, 27, 28), bits(4, 14, 15)),
    leaf7_1_eax=bits(4), xcr0=XCR0_SSE_AVX,
)
SAPPHIRE_RAPIDS = X86Model(
    name="Sapphire Rapids (Xeon 8480+)", leaf1=(0x7FFEFBFF, 0xBFEBFBFF),
    leaf7=(
        1,
        bits(0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 14, 16, 17, 18, 19, 20, 21, 23, 24, 25, 26, 28, 29, 30, 31),
        bits(1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 16, 22, 23, 24, 25, 27, 28, 30),
        bits(2, 4, 5, 8, 10, 14, 15, 16, 18, 20, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31),
    ),
    leaf7_1_eax=bits(4, 5), xcr0=XCR0_AMX,
)
X86_FEATURES = manifest("x86_64")["features"]


class Permission:
    """The OS's answer to an extra grant request (Linux AMX tile data), counted."""

    def __init__(self, granted: bool) -> None:
        self.granted = granted
        self.asked: list[str] = []

    def __call__(self, name: str) -> bool:
        self.asked.append(name)
        return self.granted


def decode_x86(model: X86Model, *, permission: Callable[[str], bool] | None = None, xcr0: int | None = None) -> Any:
    """Decodes a model's probe facts, optionally with another XCR0 (what the OS enabled)."""
    if xcr0 is not None:
        model = replace(model, xcr0=xcr0)
    return sel.decode_features(X86_FEATURES, model.raw(), permission=permission)


def best(arch: str, found: Iterable[str], built: Iterable[str] | None = None, **kw: Any) -> str:
    m = manifest(arch, built)
    present = [v["name"] for v in m["variants"] if v["built"]]
    return str(sel.select_variant(m["variants"], found, built=present, **{"env_prefix": PREFIX, **kw}).selected)


# What each model publishes, in cpubuild's names (no XSAVE-free model has AVX; BMI1/2 came with Haswell)
SSE4 = {"sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "popcnt"}
HASWELL_SET = SSE4 | {"avx", "f16c", "fma", "avx2", "bmi1", "bmi2"}
SKYLAKE_SET = HASWELL_SET | {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"}


@pytest.mark.parametrize(
    ("model", "expected", "features"),
    [
        (NEHALEM, "baseline", SSE4),
        (SANDY_BRIDGE, "baseline", SSE4 | {"avx"}),
        (IVY_BRIDGE, "baseline", SSE4 | {"avx", "f16c"}),
        (HASWELL, "avx2", HASWELL_SET),
        (ZEN3, "avx2", HASWELL_SET),
        (ALDER_LAKE, "avxvnni", HASWELL_SET | {"avx_vnni"}),
        (SKYLAKE_SP, "avx512", SKYLAKE_SET),
        (CASCADE_LAKE, "avx512vnni", SKYLAKE_SET | {"avx512_vnni"}),
        (COOPER_LAKE, "avx512bf16", SKYLAKE_SET | {"avx512_vnni", "avx512_bf16"}),
        (ZEN4, "avx512bf16", SKYLAKE_SET | {"avx512ifma", "avx512vbmi", "avx512_vnni", "avx512_bf16"}),
        (SAPPHIRE_RAPIDS, "amx", set(X86_FEATURES) - {"amx_fp8", "avx10_2"}),
    ],
    ids=lambda x: x.name.split(" (")[0] if isinstance(x, X86Model) else None,
)
def test_real_x86_models(model: X86Model, expected: str, features: set[str]) -> None:
    report = decode_x86(model, permission=Permission(True))
    assert set(report.found) == features
    assert set(report.found) | set(report.not_found) == set(X86_FEATURES)
    assert list(report.found) == [f for f in X86_FEATURES if f in features]  # the hardware data's order
    assert best("x86_64", report.found) == expected
    # what a real CPU reports is closed under `implies`, as the matrix's requires are
    assert set(hardware().closure("x86_64", report.found)) == features


def _with_leaves(model: X86Model, extra: dict[tuple[int, int], tuple[int, int, int, int]]) -> Any:
    raw = model.raw()
    return replace(raw, cpuid={**raw.cpuid, **extra})


@pytest.mark.parametrize("version, found", [(1, False), (2, True), (3, True)])
def test_avx10_2_needs_the_avx10_bit_and_version_2(version: int, found: bool) -> None:
    """Granite Rapids reports AVX10 version 1 (no AVX10.2); a version-2 CPU has it."""
    raw = _with_leaves(SAPPHIRE_RAPIDS, {(7, 1): (bits(4, 5), 0, 0, bits(19)), (0x24, 0): (0, version, 0, 0)})
    report = sel.decode_features(X86_FEATURES, raw, permission=Permission(True))
    assert ("avx10_2" in report.found) is found
    if not found:
        assert report.not_found["avx10_2"] == "CPUID reports version 1, not 2 or later"
    without_bit = _with_leaves(SAPPHIRE_RAPIDS, {(0x24, 0): (0, version, 0, 0)})
    assert sel.decode_features(X86_FEATURES, without_bit).not_found["avx10_2"] == "CPUID does not report it"


def test_amx_fp8_is_read_from_leaf_1e_subleaf_1() -> None:
    raw = _with_leaves(SAPPHIRE_RAPIDS, {(0x1E, 1): (bits(4), 0, 0, 0)})
    assert "amx_fp8" in sel.decode_features(X86_FEATURES, raw, permission=Permission(True)).found
    assert "amx_fp8" in sel.decode_features(X86_FEATURES, SAPPHIRE_RAPIDS.raw(), permission=Permission(True)).not_found
    refused = sel.decode_features(X86_FEATURES, raw, permission=Permission(False))
    assert refused.not_found["amx_fp8"] == "the OS refused the xtiledata permission"


def test_xcr0_without_avx_state_hides_every_vex_feature() -> None:
    """CPUID says AVX2 but the OS (or a hypervisor) did not enable YMM state."""
    report = decode_x86(HASWELL, xcr0=0x3)
    assert set(report.found) == SSE4 | {"bmi1", "bmi2"}  # BMI is VEX-encoded but works on general registers
    assert "XCR0 0x3 lacks 0x4" in report.not_found["avx2"]
    assert best("x86_64", report.found) == "baseline"


def test_avx512_needs_opmask_and_zmm_state() -> None:
    """A VM whose CPUID shows AVX-512 but whose XCR0 lacks 0xe0 (ZMM/opmask): avx2."""
    report = decode_x86(CASCADE_LAKE, xcr0=XCR0_SSE_AVX)
    assert "avx2" in report.found
    assert not any(f.startswith("avx512") for f in report.found)
    assert "lacks 0xe0" in report.not_found["avx512f"]
    assert best("x86_64", report.found) == "avx2"
    # one missing ZMM bit (Hi16_ZMM) is enough to refuse AVX-512
    partial = decode_x86(SKYLAKE_SP, xcr0=XCR0_AVX512 & ~(1 << 7))
    assert best("x86_64", partial.found) == "avx2"


def test_no_osxsave_means_no_xgetbv_and_no_avx() -> None:
    """CPUID reports AVX but OSXSAVE is clear: the probe never runs XGETBV (xcr0 None)."""
    model = X86Model(name="AVX CPU, XSAVE off", leaf1=(HASWELL.leaf1[0] & ~OSXSAVE, HASWELL.leaf1[1]),
                     leaf7=HASWELL.leaf7, xcr0=XCR0_SSE_AVX)
    raw = model.raw()
    assert raw.xcr0 is None
    report = sel.decode_features(X86_FEATURES, raw)
    assert set(report.found) == SSE4 | {"bmi1", "bmi2"}
    assert report.not_found["avx"] == "the OS has not enabled XSAVE (no XGETBV)"
    assert report.not_found["avx_vnni"] == "CPUID does not report it"
    assert report.not_found["avx512f"] == "CPUID does not report it"


def test_amx_permission_granted() -> None:
    perm = Permission(True)
    report = decode_x86(SAPPHIRE_RAPIDS, permission=perm)
    assert {"amx_tile", "amx_bf16", "amx_int8"} <= set(report.found)
    assert perm.asked == ["xtiledata"]  # asked once for the three AMX features


def test_amx_permission_refused() -> None:
    perm = Permission(False)
    report = decode_x86(SAPPHIRE_RAPIDS, permission=perm)
    assert perm.asked == ["xtiledata"]
    for name in ("amx_tile", "amx_bf16", "amx_int8"):
        assert report.not_found[name] == "the OS refused the xtiledata permission"
    assert best("x86_64", report.found) == "avx512bf16"


def test_amx_without_callback_is_refused() -> None:
    report = decode_x86(SAPPHIRE_RAPIDS, permission=None)
    assert "amx_tile" in report.not_found
    assert best("x86_64", report.found) == "avx512bf16"


def test_amx_needs_xcr0_tile_state_before_asking() -> None:
    perm = Permission(True)
    report = decode_x86(SAPPHIRE_RAPIDS, permission=perm, xcr0=XCR0_AVX512)  # kernel without AMX support
    assert perm.asked == []
    assert "lacks 0x60000" in report.not_found["amx_tile"]
    assert best("x86_64", report.found) == "avx512bf16"


@pytest.mark.parametrize("model", [HASWELL, SKYLAKE_SP, COOPER_LAKE], ids=lambda m: m.name.split(" (")[0])
def test_amx_permission_not_asked_when_cpuid_lacks_amx(model: X86Model) -> None:
    perm = Permission(True)
    decode_x86(model, permission=perm)
    assert perm.asked == []


def test_missing_cpuid_leaf_reads_as_absent() -> None:
    """An old CPU whose max leaf is below 7: the probe returns zeros for it."""
    raw = sel.RawProbe(cpuid={(1, 0): (0, 0, HASWELL.leaf1[0], HASWELL.leaf1[1])}, xcr0=XCR0_SSE_AVX)
    report = sel.decode_features(X86_FEATURES, raw)
    assert "avx2" not in report.found and "avx" in report.found


# --------------------------------------------------------------- Arm and Z

# arm64 AT_HWCAP bits: 0 fp, 1 asimd, 2 evtstrm, 3 aes, 4 pmull, 5 sha1, 6 sha2, 7 crc32,
# 8 atomics, 9 fphp, 10 asimdhp, 11 cpuid, 12 asimdrdm, 13 jscvt, 14 fcma, 15 lrcpc,
# 16 dcpop, 17 sha3, 18 sm3, 19 sm4, 20 asimddp, 21 sha512, 22 sve, 23 asimdfhm,
# 24 dit, 25 uscat, 26 ilrcpc, 27 flagm, 28 ssbs, 30 paca, 31 pacg.
# AT_HWCAP2: 0 dcpodp, 9 svei8mm, 12 svebf16, 13 i8mm, 14 bf16, 15 dgh, 16 rng.
CORTEX_A53 = (bits(0, 1, 2, 3, 4, 5, 6, 7, 11), 0)
NEOVERSE_N1 = (bits(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 16, 20, 28), 0)
NEOVERSE_V1 = (bits(*range(0, 29), 30, 31) & ~bits(29), bits(0, 9, 12, 13, 14, 15, 16))
# bf16 + i8mm but no SVE (e.g. an SVE-less core such as qemu's -cpu max with sve=off)
ARMV86_NO_SVE = (NEOVERSE_N1[0] | bits(13, 14, 17, 21, 23), bits(13, 14))
AARCH64_FEATURES = manifest("aarch64")["features"]


@pytest.mark.parametrize(
    ("hwcaps", "expected"),
    [(CORTEX_A53, "neon"), (NEOVERSE_N1, "neon_dotprod"), (ARMV86_NO_SVE, "neon_bf16"), (NEOVERSE_V1, "sve")],
    ids=["cortex-a53", "neoverse-n1", "armv8.6-no-sve", "neoverse-v1"],
)
def test_linux_arm_hwcaps(hwcaps: tuple[int, int], expected: str) -> None:
    report = sel.decode_features(AARCH64_FEATURES, sel.RawProbe(hwcap=hwcaps[0], hwcap2=hwcaps[1]))
    assert best("aarch64", report.found) == expected


def test_linux_arm_reasons_name_the_hwcap_word_and_bit() -> None:
    report = sel.decode_features(AARCH64_FEATURES, sel.RawProbe(hwcap=NEOVERSE_N1[0], hwcap2=0))
    assert report.not_found["bf16"] == "AT_HWCAP2 bit 14 is clear"
    assert report.not_found["sve"] == "AT_HWCAP bit 22 is clear"
    assert "asimddp" in report.found


def test_hwcap2_bits_are_not_read_from_hwcap() -> None:
    """bf16 is AT_HWCAP2 bit 14; AT_HWCAP bit 14 (fcma) must not count."""
    report = sel.decode_features(AARCH64_FEATURES, sel.RawProbe(hwcap=bits(1, 10, 13, 14, 20), hwcap2=0))
    assert "bf16" not in report.found and "i8mm" not in report.found


APPLE_M1 = {"hw.optional.neon": 1, "hw.optional.arm.FEAT_FP16": 1, "hw.optional.arm.FEAT_DotProd": 1,
            "hw.optional.arm.FEAT_BF16": 0, "hw.optional.arm.FEAT_I8MM": 0}
APPLE_M2 = {**APPLE_M1, "hw.optional.arm.FEAT_BF16": 1, "hw.optional.arm.FEAT_I8MM": 1}


@pytest.mark.parametrize(("sysctl", "expected"), [(APPLE_M1, "neon_dotprod"), (APPLE_M2, "neon_bf16"), ({}, "neon")],
                         ids=["M1", "M2", "no-sysctls"])
def test_macos_sysctls(sysctl: dict[str, int], expected: str) -> None:
    report = sel.decode_features(AARCH64_FEATURES, sel.RawProbe(sysctl=sysctl, hwcap=-1 & (2**64 - 1)), darwin=True)
    # Apple clang builds only the variants with apple-clang flags: sve is absent there
    apple = [v.name for v in MATRIX.variants_for("aarch64") if "apple-clang" in v.flags]
    assert "sve" not in apple
    assert report.not_found["sve"] == "not available on macOS"
    assert best("aarch64", report.found, built=apple) == expected


def test_macos_reason_names_the_sysctl() -> None:
    report = sel.decode_features(AARCH64_FEATURES, sel.RawProbe(sysctl=APPLE_M1), darwin=True)
    assert report.not_found["bf16"] == "sysctl hw.optional.arm.FEAT_BF16 is 0"


# s390x AT_HWCAP bits: 0 esan3 ... 10 te, 11 vx, 12 vxd, 13 vxe, 14 gs, 15 vxe2, 16 vxp
Z13 = bits(*range(0, 12))
Z14 = bits(*range(0, 15))
Z15 = bits(*range(0, 19))
S390X_FEATURES = manifest("s390x")["features"]


@pytest.mark.parametrize(("hwcap", "expected"), [(Z13, "baseline"), (Z14, "vxe"), (Z15, "vxe"), (bits(13), "baseline")],
                         ids=["z13", "z14", "z15", "vxe-without-vx"])
def test_s390x_hwcaps(hwcap: int, expected: str) -> None:
    report = sel.decode_features(S390X_FEATURES, sel.RawProbe(hwcap=hwcap))
    assert best("s390x", report.found) == expected


# ------------------------------------------------------------ selection rules

HASWELL_FOUND = tuple(sel.decode_features(X86_FEATURES, HASWELL.raw()).found)
X86_VARIANTS = manifest("x86_64")["variants"]
ALL_X86 = [v["name"] for v in X86_VARIANTS]


def select(found: Iterable[str] = HASWELL_FOUND, built: Iterable[str] = ALL_X86, **kw: Any) -> Any:
    return sel.select_variant(X86_VARIANTS, found, built=built, **{"env_prefix": PREFIX, **kw})


def test_priority_order_not_list_order() -> None:
    shuffled = list(reversed(X86_VARIANTS[2:])) + X86_VARIANTS[:2]
    assert sel.select_variant(shuffled, HASWELL_FOUND, built=ALL_X86, env_prefix=PREFIX).selected == "avx2"
    everything = [f for v in X86_VARIANTS for f in v["requires"]]
    assert sel.select_variant(shuffled, everything, built=ALL_X86, env_prefix=PREFIX).selected == "amx"


def test_statuses_explain_every_variant() -> None:
    result = select()
    rows = {s.name: s for s in result.variants}
    assert [s.name for s in result.variants] == list(reversed(ALL_X86))  # highest priority first
    assert rows["avx2"].reason == "highest priority variant this CPU runs"
    assert rows["baseline"].reason == "lower priority than avx2" and rows["baseline"].supported
    assert rows["avx512"].missing == ("avx512f", "avx512dq", "avx512bw", "avx512vl")  # the hardware data's order
    assert rows["avx512"].reason == "CPU lacks avx512f, avx512dq, avx512bw, avx512vl"
    assert rows["avx512"].built and not rows["avx512"].supported and rows["avx512"].priority == 20
    assert result.override is None


def test_forced_supported_variant_is_chosen() -> None:
    result = select(forced="baseline")
    assert result.selected == "baseline" and result.override == "baseline"
    rows = {s.name: s.reason for s in result.variants}
    assert rows["baseline"] == f"forced by {PREFIX}_ISA"
    assert rows["avx2"] == f"{PREFIX}_ISA=baseline forces another variant"


def test_forcing_baseline_names_each_arch_baseline_whatever_it_is_called() -> None:
    """<PREFIX>_ISA=baseline, like `cpubuild wheel --isa baseline`, means the arch's baseline (aarch64: neon)."""
    arm = [{"name": v.name, "priority": v.priority, "requires": list(v.requires)} for v in MATRIX.variants_for("aarch64")]
    every = [f for v in arm for f in v["requires"]]
    result = sel.select_variant(arm, every, built=[v["name"] for v in arm], forced="baseline", env_prefix=PREFIX)
    assert result.selected == "neon" and result.override == "neon"
    with pytest.raises(errors.UnknownISAError, match="CPUKERN_ISA=neon: 'neon' is not built into this package"):
        sel.select_variant(arm, every, built=["neon_dotprod"], forced="baseline", env_prefix=PREFIX)


def test_forced_unsupported_variant_names_missing_features() -> None:
    with pytest.raises(errors.UnsupportedISAError) as info:
        select(forced="amx")
    assert info.value.missing == ["avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                                  "amx_tile", "amx_bf16", "amx_int8"]
    assert info.value.name == "amx"
    assert str(info.value).startswith("CPUKERN_ISA=amx: this CPU cannot run variant 'amx'; missing features: avx512f")
    sandy = sel.decode_features(X86_FEATURES, SANDY_BRIDGE.raw()).found
    with pytest.raises(errors.UnsupportedISAError, match=r"missing features: fma, f16c, avx2$"):
        select(found=sandy, forced="avx2")
    # a CPU that only lacks what a required feature implies is refused too (requires went through `implies`)
    with pytest.raises(errors.UnsupportedISAError, match=r"missing features: sse4_2$"):
        select(found=[f for f in HASWELL_FOUND if f != "sse4_2"], forced="avx2")


def test_forced_unknown_name_lists_available_variants() -> None:
    with pytest.raises(errors.UnknownISAError) as info:
        select(forced="avx9000")
    assert info.value.available == ALL_X86
    assert str(info.value) == ("CPUKERN_ISA=avx9000: 'avx9000' is not a variant of this arch; "
                               f"available: {', '.join(ALL_X86)}")
    with pytest.raises(errors.UnknownISAError, match="'neon' is not a variant of this arch"):
        select(forced="neon")  # a variant of another arch


def test_forced_variant_not_built() -> None:
    with pytest.raises(errors.UnknownISAError) as info:
        select(built=["baseline", "avx2"], forced="avx512")
    assert info.value.available == ["baseline", "avx2"]
    assert "'avx512' is not built into this package; available: baseline, avx2" in str(info.value)


def test_missing_library_files_fall_back() -> None:
    result = select(built=["baseline", "avx512"])
    assert result.selected == "baseline"
    rows = {s.name: s for s in result.variants}
    assert rows["avx2"].reason == "not built into this package" and not rows["avx2"].built
    assert rows["avx2"].supported


def test_disable_removes_variants() -> None:
    result = select(disabled=["avx2"])
    assert result.selected == "baseline"
    assert result.disabled == ("avx2",)
    assert {s.name: s.reason for s in result.variants}["avx2"] == "disabled by CPUKERN_DISABLE_ISA"
    # disabling a variant this CPU cannot run changes nothing
    assert select(disabled=["avx512", "amx"]).selected == "avx2"


def test_disable_rejects_unknown_names() -> None:
    with pytest.raises(errors.UnknownISAError, match=r"^CPUKERN_DISABLE_ISA=avx9000: 'avx9000' is not a variant"):
        select(disabled=["avx2", "avx9000"])


def test_forcing_wins_over_disabling() -> None:
    assert select(forced="avx2", disabled=["avx2"]).selected == "avx2"


def test_nothing_usable_is_a_clear_error() -> None:
    with pytest.raises(errors.NoVariantError, match=r"^no usable cpukern variant: .*baseline: disabled by CPUKERN_DISABLE_ISA"):
        select(disabled=["baseline", "avx2"], package="cpukern")
    with pytest.raises(errors.NoVariantError, match=r"^no usable this package variant: .*baseline: not built into this package"):
        select(built=["avx512"])


def test_error_classes_are_catchable_as_one() -> None:
    for cls in (errors.UnsupportedISAError, errors.UnknownISAError, errors.NoVariantError):
        assert issubclass(cls, errors.DispatchError) and issubclass(cls, RuntimeError)


# ------------------------------------------------------------ another project's prefix


def test_messages_carry_the_projects_prefix() -> None:
    """The runtime is the same code in every package: the variables it names are the package's own."""
    def run(**kw: Any) -> Any:
        return sel.select_variant(X86_VARIANTS, HASWELL_FOUND, built=ALL_X86, env_prefix="DOTLIB", package="dotlib", **kw)

    forced = run(forced="baseline")
    texts = [s.reason for s in forced.variants]
    assert "forced by DOTLIB_ISA" in texts and "DOTLIB_ISA=baseline forces another variant" in texts
    assert {s.name: s.reason for s in run(disabled=["avx2"]).variants}["avx2"] == "disabled by DOTLIB_DISABLE_ISA"
    raised: list[str] = []
    for kw in ({"forced": "amx"}, {"forced": "avx9000"}, {"disabled": ["avx9000"]}, {"disabled": ALL_X86}):
        with pytest.raises(errors.DispatchError) as info:
            run(**kw)
        raised.append(str(info.value))
    assert raised[0].startswith("DOTLIB_ISA=amx: this CPU cannot run variant 'amx'")
    assert raised[1].startswith("DOTLIB_ISA=avx9000: 'avx9000' is not a variant of this arch")
    assert raised[2].startswith("DOTLIB_DISABLE_ISA=avx9000: ")
    assert raised[3].startswith("no usable dotlib variant: ") and "disabled by DOTLIB_DISABLE_ISA" in raised[3]
    assert not any("CPUKERN" in text for text in [*texts, *raised])


def test_the_prefix_is_required() -> None:
    with pytest.raises(TypeError, match="env_prefix"):
        sel.select_variant(X86_VARIANTS, HASWELL_FOUND, built=ALL_X86)  # type: ignore[call-arg]


def test_error_defaults_without_a_prefix() -> None:
    assert str(errors.UnsupportedISAError("avx2", ["fma"])).startswith("ISA=avx2: ")
    assert str(errors.UnknownISAError("x", [], known=False)) == "ISA=x: 'x' is not a variant of this arch; available: none"


@pytest.mark.parametrize(
    ("text", "names"),
    [(None, []), ("", []), ("avx2", ["avx2"]), (" avx2 , avx512;amx,,", ["avx2", "avx512", "amx"])],
)
def test_parse_name_list(text: str | None, names: list[str]) -> None:
    assert sel.parse_name_list(text) == names


@pytest.mark.parametrize("register", ["eax", "ebx", "ecx", "edx"])
def test_a_cpuid_leaf_the_probe_did_not_read_reports_nothing(register: str) -> None:
    """A leaf above the CPU's maximum is absent from the probe: every bit of it reads as clear."""
    assert sel._why_missing({"cpuid": [7, 0, register, 0]}, sel.RawProbe(), darwin=False) == "CPUID does not report it"


def test_a_feature_without_any_detection_says_so() -> None:
    assert sel._why_missing({}, sel.RawProbe(), darwin=False) == "no way to detect it here"


def test_nothing_usable_lists_every_variant_and_its_reason() -> None:
    with pytest.raises(errors.NoVariantError) as raised:
        select(disabled=["baseline", "avx2"], package="cpukern")
    reasons = str(raised.value).removeprefix("no usable cpukern variant: ").split("; ")
    assert sorted(r.split(": ", 1)[0] for r in reasons) == sorted(v.name for v in MATRIX.variants_for("x86_64"))
    assert any(r.startswith("baseline: disabled by CPUKERN_DISABLE_ISA") for r in reasons), reasons


@pytest.mark.parametrize("register", ["eax", "ebx", "ecx", "edx"])
def test_a_version_leaf_the_probe_did_not_read_is_version_0(register: str) -> None:
    """The feature bit is set but the version leaf lies above the CPU's maximum: version 0, refused."""
    raw = sel.RawProbe(cpuid={(7, 1): (0, 0, 0, bits(19))})
    spec = {"cpuid": [7, 1, "edx", 19], "version": [0x24, 0, register, 8, 1]}
    assert sel._why_missing(spec, raw, darwin=False) == "CPUID reports version 0, not 1 or later"


def test_only_the_version_field_counts_not_the_bits_above_it() -> None:
    """AVX10's leaf 24H EBX holds the version in bits 0-7 and vector-length bits above it:
    a version-1 CPU with every other bit set still lacks AVX10.2."""
    raw = _with_leaves(SAPPHIRE_RAPIDS, {(7, 1): (bits(4, 5), 0, 0, bits(19)), (0x24, 0): (0, 0xFFFFFF01, 0, 0)})
    report = sel.decode_features(X86_FEATURES, raw, permission=Permission(True))
    assert report.not_found["avx10_2"] == "CPUID reports version 1, not 2 or later"


def test_nothing_usable_keeps_every_variants_status_for_the_report() -> None:
    """`cpubuild`'s report prints these rows when selection fails (runtime/report.py)."""
    with pytest.raises(errors.NoVariantError) as raised:
        select(built=[])
    rows = raised.value.variants
    assert [getattr(r, "name", None) for r in rows] == [v["name"] for v in sorted(
        X86_VARIANTS, key=lambda v: int(v["priority"]), reverse=True)]
    assert all(isinstance(r, sel.VariantStatus) and r.reason == "not built into this package" for r in rows)
    assert raised.value.missing == []


def test_a_manifest_without_variants_for_this_arch_is_a_clear_error() -> None:
    with pytest.raises(errors.NoVariantError, match=r"^no usable cpukern variant: $"):
        sel.select_variant([], HASWELL_FOUND, built=[], env_prefix=PREFIX, package="cpukern")
