"""The typed matrix loader: the real isa_matrix.toml, documented CPU facts, and
a catalogue of broken matrices that must be rejected with precise messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CPUKERN_MATRIX
from cpubuild.matrix import DEFAULT_MATRIX, MatrixError, _main, cmake_variables, load_matrix

# ------------------------------------------------------------ the real file

# Intel SDM vol. 2A, CPUID (table 3-8 and leaf 07H): [leaf, subleaf, register, bit],
# and XCR0 state components (vol. 1, 13.1): bits 1-2 SSE/AVX = 0x6; + opmask,
# ZMM_Hi256, Hi16_ZMM (bits 5-7) = 0xe6; AMX XTILECFG/XTILEDATA (bits 17-18).
INTEL_CPUID = {
    "sse2": (1, 0, "edx", 26),
    "sse4_2": (1, 0, "ecx", 20),
    "fma": (1, 0, "ecx", 12),
    "avx": (1, 0, "ecx", 28),
    "f16c": (1, 0, "ecx", 29),
    "avx2": (7, 0, "ebx", 5),
    "avx512f": (7, 0, "ebx", 16),
    "avx512dq": (7, 0, "ebx", 17),
    "avx512bw": (7, 0, "ebx", 30),
    "avx512vl": (7, 0, "ebx", 31),
    "avx512_vnni": (7, 0, "ecx", 11),
    "avx512_bf16": (7, 1, "eax", 5),
    "amx_bf16": (7, 0, "edx", 22),
    "amx_tile": (7, 0, "edx", 24),
    "amx_int8": (7, 0, "edx", 25),
}
XCR0_AVX = (1 << 1) | (1 << 2)
XCR0_AVX512 = XCR0_AVX | (1 << 5) | (1 << 6) | (1 << 7)
XCR0_AMX = (1 << 17) | (1 << 18)

# Linux uapi: arch/arm64/include/uapi/asm/hwcap.h and arch/s390/include/asm/elf.h
# (bit numbers); Apple: sysctl hw.optional.* names.
LINUX_HWCAP = {
    ("aarch64", "asimd"): ("hwcap", 1),
    ("aarch64", "asimdhp"): ("hwcap", 10),
    ("aarch64", "asimddp"): ("hwcap", 20),
    ("aarch64", "sve"): ("hwcap", 22),
    ("aarch64", "i8mm"): ("hwcap2", 13),
    ("aarch64", "bf16"): ("hwcap2", 14),
    ("s390x", "vx"): ("hwcap", 11),
    ("s390x", "vxe"): ("hwcap", 13),
    ("s390x", "vxe2"): ("hwcap", 15),
}
APPLE_SYSCTL = {
    "asimd": "hw.optional.neon",
    "asimdhp": "hw.optional.arm.FEAT_FP16",
    "asimddp": "hw.optional.arm.FEAT_DotProd",
    "i8mm": "hw.optional.arm.FEAT_I8MM",
    "bf16": "hw.optional.arm.FEAT_BF16",
}


def test_real_matrix_loads() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    assert matrix.path == str(DEFAULT_MATRIX)
    for arch in matrix.arches:
        variants = matrix.variants_for(arch)
        assert variants[0] is matrix.baseline(arch)
        priorities = [v.priority for v in variants]
        assert priorities == sorted(set(priorities))
    # the names issue 2 fixes for x86_64 (the CLI, images and users rely on them)
    x86 = [v.name for v in matrix.variants_for("x86_64")]
    assert x86 == ["baseline", "avx2", "avx512", "avx512vnni", "avx512bf16", "amx"]


def test_x86_feature_specs_match_intel_cpuid_bits() -> None:
    features = load_matrix(CPUKERN_MATRIX).features["x86_64"]
    assert set(features) <= set(INTEL_CPUID), f"add the documented CPUID bit of {set(features) - set(INTEL_CPUID)}"
    for name, feature in features.items():
        assert feature.cpuid == INTEL_CPUID[name], name
        if name.startswith("amx"):
            assert feature.xcr0 == XCR0_AMX and feature.permission == "xtiledata", name
        elif name.startswith("avx512"):
            assert feature.xcr0 == XCR0_AVX512, name
        elif name in ("avx", "avx2", "fma", "f16c"):  # VEX-encoded: YMM state
            assert feature.xcr0 == XCR0_AVX, name
        else:
            assert feature.xcr0 == 0, name


def test_arm_and_z_feature_specs_match_linux_hwcaps_and_apple_sysctls() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    for arch in ("aarch64", "s390x"):
        for name, feature in matrix.features[arch].items():
            key, bit = LINUX_HWCAP[(arch, name)]
            assert getattr(feature, key) == bit, (arch, name)
            other = "hwcap2" if key == "hwcap" else "hwcap"
            assert getattr(feature, other) is None, (arch, name)
            assert feature.sysctl == (APPLE_SYSCTL.get(name) if arch == "aarch64" else None), (arch, name)


def test_every_variant_requires_what_its_flags_enable() -> None:
    """x86 flags -mX need feature X at run time (catches a flag added without its requirement)."""
    flag_feature = {"-mavx": "avx", "-mavx2": "avx2", "-mfma": "fma", "-mf16c": "f16c", "-mavx512f": "avx512f",
                    "-mavx512bw": "avx512bw", "-mavx512dq": "avx512dq", "-mavx512vl": "avx512vl",
                    "-mavx512vnni": "avx512_vnni", "-mavx512bf16": "avx512_bf16", "-mamx-tile": "amx_tile",
                    "-mamx-bf16": "amx_bf16", "-mamx-int8": "amx_int8"}
    for v in load_matrix(CPUKERN_MATRIX).variants_for("x86_64"):
        for family, flags in v.flags.items():
            for flag in flags:
                if flag.startswith("-m") and not flag.startswith(("-march=x86-64", "-mtune=", "-mprefer")):
                    assert flag in flag_feature, f"{v.name}/{family}: unknown ISA flag {flag}"
                    assert flag_feature[flag] in v.requires, f"{v.name}/{family}: {flag} without {flag_feature[flag]}"


def test_cmake_bridge_and_manifest_follow_the_matrix(tmp_path: Path) -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    script = cmake_variables(matrix, "aarch64", "apple-clang")
    names = [v.name for v in matrix.variants_for("aarch64")]
    usable = [v.name for v in matrix.variants_for("aarch64") if "apple-clang" in v.flags]
    assert f'set(CPUKERN_ALL_VARIANTS "{";".join(names)}")' in script
    assert f'set(CPUKERN_VARIANTS "{";".join(usable)}")' in script
    assert 'set(CPUKERN_BASELINE_VARIANT "neon")' in script
    assert "sve" in names and "sve" not in usable  # Linux-only variant: no Apple flags

    out = tmp_path / "m.json"
    assert _main(["manifest", "--arch", "x86_64", "--variants", "baseline;avx2",
                  "--library", "_cpukern_{variant}.so", "--out", str(out)]) == 0
    manifest = json.loads(out.read_text())
    listed = {v["name"]: v for v in manifest["variants"]}
    assert list(listed) == [v.name for v in matrix.variants_for("x86_64")]  # unbuilt ones listed too
    assert {n for n, v in listed.items() if v["built"]} == {"baseline", "avx2"}
    assert listed["avx512"]["library"] == "_cpukern_avx512.so"
    assert manifest["features"]["avx2"] == {"cpuid": [7, 0, "ebx", 5], "xcr0": 6}


def test_cli_rejects_unknown_arch(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert _main(["cmake", "--arch", "riscv64", "--compiler", "gcc", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "no arch 'riscv64'" in err and "x86_64" in err
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------- broken matrices

GOOD = """\
schema = 1

[arch.x86_64]
compilers = ["gcc", "clang"]
os = ["linux"]
triplet = "x86_64-linux-gnu"
manylinux = "manylinux_2_28_x86_64"
docker_platform = "linux/amd64"
qemu = "x86_64"
debian_arch = "amd64"

[arch.aarch64]
compilers = ["gcc", "apple-clang"]
os = ["linux", "darwin"]
triplet = "aarch64-linux-gnu"
manylinux = "manylinux_2_28_aarch64"
macos = "macosx_11_0_arm64"
docker_platform = "linux/arm64"
qemu = "aarch64"
debian_arch = "arm64"

[features.x86_64]
avx = { cpuid = [1, 0, "ecx", 28], xcr0 = 0x6 }
avx2 = { cpuid = [7, 0, "ebx", 5], xcr0 = 0x6 }

[features.aarch64]
asimddp = { hwcap = 20, sysctl = "hw.optional.arm.FEAT_DotProd" }

[[variant]]
name = "baseline"
arch = "x86_64"
priority = 0
requires = []
flags.gcc = ["-march=x86-64"]
flags.clang = ["-march=x86-64"]

[[variant]]
name = "avx2"
arch = "x86_64"
priority = 10
requires = ["avx", "avx2"]
description = "AVX2"
flags.gcc = ["-march=x86-64", "-mavx2"]
flags.clang = ["-march=x86-64", "-mavx2"]

[[variant]]
name = "neon"
arch = "aarch64"
priority = 0
requires = []
flags.gcc = ["-march=armv8-a"]
flags.apple-clang = ["-arch", "arm64"]

[[variant]]
name = "dotprod"
arch = "aarch64"
priority = 10
compilers = ["gcc"]
requires = ["asimddp"]
flags.gcc = ["-march=armv8.2-a+dotprod"]
"""

AVX2_FLAGS = 'flags.gcc = ["-march=x86-64", "-mavx2"]'
AVX2_HEAD = 'name = "avx2"\narch = "x86_64"\npriority = 10\n'
DOTPROD_HEAD = 'name = "dotprod"\narch = "aarch64"\npriority = 10\ncompilers = ["gcc"]\n'

# (id, text to replace, replacement, expected location, expected words in the problem)
BROKEN: list[tuple[str, str, str, str, tuple[str, ...]]] = [
    ("unknown top-level key", "schema = 1\n", "schema = 1\nvariants = []\n", "top level, field 'variants'", ("unknown key",)),
    ("unsupported schema", "schema = 1", "schema = 2", "top level, field 'schema'", ("unsupported schema 2",)),
    ("unknown arch key", 'qemu = "x86_64"', 'qemu = "x86_64"\ncompiler = "gcc"', "arch 'x86_64', field 'compiler'", ("unknown key", "compilers")),
    ("arch compiler family", 'compilers = ["gcc", "clang"]', 'compilers = ["gcc", "msvc"]', "arch 'x86_64', field 'compilers'", ("unknown value 'msvc'",)),
    ("darwin without macos", 'macos = "macosx_11_0_arm64"\n', "", "arch 'aarch64', field 'macos'", ("required", "darwin")),
    ("unknown variant key", AVX2_HEAD, AVX2_HEAD + "prioity = 3\n", "variant 'avx2', field 'prioity'", ("unknown key", "priority")),
    ("duplicate variant name", 'name = "dotprod"', 'name = "neon"', "variant 'neon' (aarch64), field 'name'", ("duplicate", "#3", "#4")),
    ("unknown feature", 'requires = ["avx", "avx2"]', 'requires = ["avx", "avx3"]', "variant 'avx2' (x86_64), field 'requires'", ("unknown feature 'avx3'", "known: avx, avx2")),
    ("feature of another arch", 'requires = ["avx", "avx2"]', 'requires = ["asimddp"]', "variant 'avx2' (x86_64), field 'requires'", ("unknown feature 'asimddp' for x86_64",)),
    ("duplicate requirement", 'requires = ["avx", "avx2"]', 'requires = ["avx", "avx"]', "variant 'avx2' (x86_64), field 'requires'", ("duplicate",)),
    ("claimed family without flags", 'flags.clang = ["-march=x86-64", "-mavx2"]\n', "", "variant 'avx2' (x86_64), field 'flags'", ("no flags for compiler family 'clang'",)),
    ("flags for an unclaimed family", 'flags.gcc = ["-march=armv8.2-a+dotprod"]', 'flags.gcc = ["-march=armv8.2-a+dotprod"]\nflags.apple-clang = ["-arch", "arm64"]', "variant 'dotprod' (aarch64), field 'flags'", ("'apple-clang'", "does not claim")),
    ("family the arch lacks", DOTPROD_HEAD, DOTPROD_HEAD.replace('["gcc"]', '["gcc", "clang"]'), "variant 'dotprod' (aarch64), field 'compilers'", ("'clang' is not a compiler family of arch aarch64",)),
    ("unknown compiler family", AVX2_FLAGS, AVX2_FLAGS + '\nflags.icc = ["-xHost"]', "variant 'avx2' (x86_64), field 'flags'", ("unknown compiler family 'icc'",)),
    ("empty flags", AVX2_FLAGS, "flags.gcc = []", "variant 'avx2' (x86_64), field 'flags.gcc'", ("non-empty list",)),
    ("flags not a list", AVX2_FLAGS, 'flags.gcc = "-mavx2"', "variant 'avx2' (x86_64), field 'flags.gcc'", ("list", "got '-mavx2'")),
    ("-march=native", AVX2_FLAGS, 'flags.gcc = ["-march=native"]', "variant 'avx2' (x86_64), field 'flags.gcc'", ("-march=native", "build machine")),
    ("-mcpu=native+ext", 'flags.gcc = ["-march=armv8.2-a+dotprod"]', 'flags.gcc = ["-mcpu=native+crypto"]', "variant 'dotprod' (aarch64), field 'flags.gcc'", ("-mcpu=native+crypto",)),
    ("cpuid register", '[7, 0, "ebx", 5]', '[7, 0, "exx", 5]', "feature 'avx2' (x86_64), field 'cpuid'", ("register", "exx")),
    ("cpuid bit out of range", '[7, 0, "ebx", 5]', '[7, 0, "ebx", 32]', "feature 'avx2' (x86_64), field 'cpuid'", ("bit 0-31",)),
    ("cpuid too short", '[7, 0, "ebx", 5]', '[7, "ebx", 5]', "feature 'avx2' (x86_64), field 'cpuid'", ("[leaf, subleaf",)),
    ("cpuid negative leaf", '[7, 0, "ebx", 5]', '[-7, 0, "ebx", 5]', "feature 'avx2' (x86_64), field 'cpuid'", ("32-bit unsigned",)),
    ("cpuid boolean bit", '[7, 0, "ebx", 5]', '[7, 0, "ebx", true]', "feature 'avx2' (x86_64), field 'cpuid'", ("got [7, 0, 'ebx', True]",)),
    ("x86 feature without cpuid", 'avx2 = { cpuid = [7, 0, "ebx", 5], xcr0 = 0x6 }', "avx2 = { xcr0 = 0x6 }", "feature 'avx2' (x86_64), field 'cpuid'", ("required for x86_64",)),
    ("hwcap on x86", "xcr0 = 0x6 }\n\n", "xcr0 = 0x6, hwcap = 3 }\n\n", "feature 'avx2' (x86_64), field 'hwcap'", ("does not apply to x86_64",)),
    ("cpuid on arm", "asimddp = { hwcap = 20,", 'asimddp = { cpuid = [1, 0, "ecx", 1], hwcap = 20,', "feature 'asimddp' (aarch64), field 'cpuid'", ("does not apply to aarch64",)),
    ("hwcap bit out of range", "hwcap = 20", "hwcap = 64", "feature 'asimddp' (aarch64), field 'hwcap'", ("0-63", "64")),
    ("arm feature undetectable", 'asimddp = { hwcap = 20, sysctl = "hw.optional.arm.FEAT_DotProd" }', "asimddp = {}", "feature 'asimddp' (aarch64)", ("hwcap, hwcap2 or sysctl",)),
    ("sysctl on a Linux-only arch", '"linux", "darwin"]', '"linux"]', "feature 'asimddp' (aarch64), field 'sysctl'", ("does not list 'darwin'",)),
    ("xcr0 zero", "avx = { cpuid = [1, 0, \"ecx\", 28], xcr0 = 0x6 }", "avx = { cpuid = [1, 0, \"ecx\", 28], xcr0 = 0 }", "feature 'avx' (x86_64), field 'xcr0'", ("non-zero",)),
    ("unknown permission", "xcr0 = 0x6 }\n\n", 'xcr0 = 0x6, permission = "root" }\n\n', "feature 'avx2' (x86_64), field 'permission'", ("unknown permission 'root'", "xtiledata")),
    ("bad feature name", "avx2 = { cpuid", '"avx-2" = { cpuid', "feature 'avx-2' (x86_64)", ("lower case",)),
    ("features of undeclared arch", "[features.aarch64]", "[features.riscv64]", "top level, field 'features'", ("undeclared arch 'riscv64'",)),
    ("duplicate priority", "priority = 10\nrequires = [\"avx\"", "priority = 0\nrequires = [\"avx\"", "variant 'avx2' (x86_64), field 'priority'", ("0 is already used by 'baseline'",)),
    ("missing baseline", 'requires = []\nflags.gcc = ["-march=x86-64"]', 'requires = ["avx"]\nflags.gcc = ["-march=x86-64"]', "arch 'x86_64'", ("no baseline", "empty 'requires'")),
    ("two baselines", 'requires = ["avx", "avx2"]', "requires = []", "arch 'x86_64'", ("2 baselines", "'baseline', 'avx2'")),
    ("baseline not lowest", 'priority = 0\nrequires = []\nflags.gcc = ["-march=x86-64"]', 'priority = 20\nrequires = []\nflags.gcc = ["-march=x86-64"]', "variant 'baseline' (x86_64), field 'priority'", ("lowest priority", "'avx2' has 10 < 20")),
    ("arch without variants", "[features.x86_64]", '[arch.s390x]\ncompilers = ["gcc"]\nos = ["linux"]\ntriplet = "s390x-linux-gnu"\nmanylinux = "m"\ndocker_platform = "linux/s390x"\nqemu = "s390x"\ndebian_arch = "s390x"\n\n[features.x86_64]', "arch 's390x'", ("has no variants",)),
    ("name with a dash", 'name = "avx2"', 'name = "avx-2"', "variant 'avx-2', field 'name'", ("lower case", "file name")),
    ("name with a path", 'name = "avx2"', 'name = "../avx2"', "variant '../avx2', field 'name'", ("lower case",)),
    ("upper-case name", 'name = "avx2"', 'name = "AVX2"', "variant 'AVX2', field 'name'", ("lower case",)),
    ("missing name", 'name = "avx2"\n', "", "variant '#2', field 'name'", ("is required",)),
    ("unknown arch", 'name = "avx2"\narch = "x86_64"', 'name = "avx2"\narch = "riscv64"', "variant 'avx2', field 'arch'", ("unknown arch 'riscv64'", "x86_64, aarch64")),
    ("priority is a string", "priority = 10\nrequires = [\"avx\"", "priority = \"10\"\nrequires = [\"avx\"", "variant 'avx2' (x86_64), field 'priority'", ("must be an integer, got str",)),
    ("priority is a boolean", "priority = 10\nrequires = [\"avx\"", "priority = true\nrequires = [\"avx\"", "variant 'avx2' (x86_64), field 'priority'", ("got a boolean",)),
    ("requires is a string", 'requires = ["avx", "avx2"]', 'requires = "avx2"', "variant 'avx2' (x86_64), field 'requires'", ("must be a list",)),
    ("requires holds a number", 'requires = ["avx", "avx2"]', "requires = [5]", "variant 'avx2' (x86_64), field 'requires'", ("list of strings", "5")),
    ("description is a number", 'description = "AVX2"', "description = 2", "variant 'avx2' (x86_64), field 'description'", ("must be a string",)),
    ("variant is a table", "[[variant]]\nname = \"avx2\"", "[variantx]\nname = \"avx2\"", "top level, field 'variantx'", ("unknown key",)),
]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "isa_matrix.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_good_base_matrix_loads(tmp_path: Path) -> None:
    matrix = load_matrix(_write(tmp_path, GOOD))
    assert [v.name for v in matrix.variants_for("aarch64")] == ["neon", "dotprod"]
    assert matrix.variant("aarch64", "dotprod").compilers == ("gcc",)


@pytest.mark.parametrize(("old", "new", "where", "words"), [c[1:] for c in BROKEN], ids=[c[0] for c in BROKEN])
def test_broken_matrix_is_rejected_precisely(tmp_path: Path, old: str, new: str, where: str, words: tuple[str, ...]) -> None:
    assert GOOD.count(old) == 1, f"test case must change exactly one place: {old!r}"
    path = _write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    exc = info.value
    assert exc.path == str(path)
    assert str(exc) == f"{path}: {exc.where}: {exc.problem}"
    assert exc.where == where
    for word in words:
        assert word in exc.problem, f"{word!r} not in {exc.problem!r}"


def test_variant_written_as_a_single_table(tmp_path: Path) -> None:
    text = GOOD.split("[[variant]]")[0] + '[variant]\nname = "baseline"\n'
    with pytest.raises(MatrixError, match=r"field 'variant': must be an array of tables: write each variant as \[\[variant\]\]"):
        load_matrix(_write(tmp_path, text))


def test_bad_toml_syntax_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace('name = "avx2"', 'name = "avx2'))
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    assert info.value.where == "syntax" and str(path) in str(info.value)
    line = GOOD.splitlines().index('name = "avx2"') + 1
    assert f"line {line}" in info.value.problem


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match=r"missing\.toml: file: cannot be read: No such file or directory"):
        load_matrix(tmp_path / "missing.toml")
    with pytest.raises(MatrixError, match="cannot be read: Is a directory"):
        load_matrix(tmp_path)
    binary = tmp_path / "latin1.toml"
    binary.write_bytes(GOOD.encode() + b"# caf\xe9\n")
    with pytest.raises(MatrixError, match=r"latin1\.toml: file: is not UTF-8 text"):
        load_matrix(binary)
