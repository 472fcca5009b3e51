"""The typed matrix loader (isa_matrix.toml schema 2): cpukern's real file, what
schema 2 derives (extends, flag merging, requires through `implies`, arch
facts from the hardware data and the project's narrowing), the CMake bridge
(`python -m cpubuild.matrix`), and a catalogue of broken matrices that must be
rejected with a MatrixError naming the file, the item and the field."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cpubuild import __version__
from cpubuild.contract import load_config
from cpubuild.hardware import hardware
from cpubuild.matrix import (
    MANIFEST_SCHEMA,
    RESERVED_NAMES,
    MatrixError,
    _main,
    cmake_variables,
    load_matrix,
    parse_matrix,
)
from testsupport import CPUKERN_MATRIX, REPO

HW = hardware()

# ------------------------------------------------------------ cpukern's file


def test_cpukern_matrix_loads() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    assert matrix.path == str(CPUKERN_MATRIX)
    assert list(matrix.arches) == ["x86_64", "aarch64", "s390x"]  # the hardware data's order
    for arch in matrix.arches:
        variants = matrix.variants_for(arch)
        assert variants[0] is matrix.baseline(arch)
        priorities = [v.priority for v in variants]
        assert priorities == sorted(set(priorities))
        assert matrix.features[arch] == HW.features[arch]
    # the names the CLI, images and users rely on
    assert [v.name for v in matrix.variants_for("x86_64")] == [
        "baseline", "avx2", "avxvnni", "avx512", "avx512vnni", "avx512bf16", "amx"]
    assert [v.name for v in matrix.variants_for("aarch64")] == ["neon", "neon_dotprod", "neon_bf16", "sve"]
    assert [v.name for v in matrix.variants_for("s390x")] == ["baseline", "vxe"]


def test_cpukern_ladder_is_built_with_extends() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    x86 = matrix.variants_for("x86_64")
    assert [v.extends for v in x86] == [None, "baseline", "avx2", "avx2", "avx512", "avx512vnni", "avx512bf16"]
    # parent + 10 where none is written; avxvnni names 15 (a branch: AVX-512 CPUs rank above it)
    assert [v.priority for v in x86] == [0, 10, 15, 20, 30, 40, 50]
    for child in x86[1:]:
        parent = matrix.variant("x86_64", child.extends)
        assert set(parent.requires) < set(child.requires), child.name
        for family, flags in child.flags.items():
            assert flags[0] == "-march=x86-64", (child.name, family)
            assert len([f for f in flags if f.startswith("-mtune=")]) == 1, (child.name, family)  # replaced, not stacked
            kept = [f for f in parent.flags[family] if not f.startswith("-mtune=")]
            assert [f for f in flags if f in kept] == kept, (child.name, family)  # the parent's flags, in order
    assert matrix.variant("x86_64", "avx512vnni").flags["gcc"][-1] == "-mtune=cascadelake"
    # requires went through `implies`: AVX-512F implies AVX2, FMA, F16C and everything below
    assert matrix.variant("x86_64", "avx2").requires == ("sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "fma", "f16c", "avx2")
    assert matrix.variant("x86_64", "amx").requires[-3:] == ("amx_tile", "amx_bf16", "amx_int8")
    assert matrix.variant("s390x", "vxe").requires == ("vx", "vxe")


def test_every_x86_variant_requires_what_its_flags_enable() -> None:
    """x86 flags -mX need feature X at run time (catches a flag added without its requirement)."""
    flag_feature = {"-mavx": "avx", "-mavx2": "avx2", "-mfma": "fma", "-mf16c": "f16c", "-mavx512f": "avx512f",
                    "-mavx512bw": "avx512bw", "-mavx512dq": "avx512dq", "-mavx512vl": "avx512vl",
                    "-mavx512vnni": "avx512_vnni", "-mavxvnni": "avx_vnni", "-mavx512bf16": "avx512_bf16", "-mamx-tile": "amx_tile",
                    "-mamx-bf16": "amx_bf16", "-mamx-int8": "amx_int8"}
    for v in load_matrix(CPUKERN_MATRIX).variants_for("x86_64"):
        for family, flags in v.flags.items():
            for flag in flags:
                if flag.startswith("-m") and not flag.startswith(("-march=x86-64", "-mtune=", "-mprefer")):
                    assert flag in flag_feature, f"{v.name}/{family}: unknown ISA flag {flag}"
                    assert flag_feature[flag] in v.requires, f"{v.name}/{family}: {flag} without {flag_feature[flag]}"


def test_cpukern_aarch64_is_also_a_macos_arch() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    aarch64 = matrix.arches["aarch64"]
    assert aarch64.os == ("linux", "darwin") and aarch64.macos == HW.arches["aarch64"].macos
    assert aarch64.compilers == ("gcc", "clang", "apple-clang")
    assert matrix.arches["x86_64"].compilers == ("gcc", "clang") and matrix.arches["x86_64"].macos is None
    sve = matrix.variant("aarch64", "sve")
    assert sve.compilers == ("gcc", "clang") and "apple-clang" not in sve.flags  # Linux only
    assert matrix.variant("aarch64", "neon_bf16").flags["apple-clang"] == ("-arch", "arm64", "-mcpu=apple-m2")
    assert matrix.variant("aarch64", "neon_bf16").flags["gcc"] == ("-march=armv8.6-a+dotprod+fp16+bf16+i8mm",)
    for arch in ("x86_64", "s390x"):
        for facts in ("triplet", "manylinux", "docker_platform", "qemu", "debian_arch"):
            assert getattr(matrix.arches[arch], facts) == getattr(HW.arches[arch], facts), (arch, facts)


def test_best_for_picks_the_highest_runnable_variant() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    for arch in matrix.arches:
        assert matrix.best_for(arch, frozenset()) is matrix.baseline(arch)
        for v in matrix.variants_for(arch):
            assert matrix.best_for(arch, set(v.requires)).priority >= v.priority
    for model in HW.qemu["x86_64"]:
        assert matrix.best_for("x86_64", model.features).name == ("avx2" if model.cpu == "Haswell" else "baseline")
    assert matrix.best_for("aarch64", next(m for m in HW.qemu["aarch64"] if m.cpu == "max").features).name == "sve"


# ------------------------------------------------------------ schema 2 semantics

GOOD = """\
schema = 2

[arch.aarch64]
os = ["linux", "darwin"]

[[variant]]
name = "baseline"
arch = "x86_64"
priority = 0
description = "x86-64"
flags = ["-march=x86-64", "-mtune=generic"]

[[variant]]
name = "avx2"
extends = "baseline"
requires = ["avx2", "fma"]
description = "AVX2"
flags = ["-mavx2", "-mfma", "-mtune=haswell"]

[[variant]]
name = "avx512"
extends = "avx2"
requires = ["avx512bw"]
flags = { default = ["-mavx512f", "-mavx512bw"], clang = ["-mavx512f", "-mavx512bw", "-mevex512"] }

[[variant]]
name = "neon"
arch = "aarch64"
priority = 0
flags = { default = ["-march=armv8-a"], apple-clang = ["-arch", "arm64"] }

[[variant]]
name = "dotprod"
arch = "aarch64"
priority = 10
compilers = ["gcc", "clang"]
requires = ["asimddp"]
flags = ["-march=armv8.2-a+dotprod"]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "isa_matrix.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _variant(name: str, arch: str | None = "x86_64", **fields: Any) -> dict[str, Any]:
    return {"name": name, **({"arch": arch} if arch else {}), **fields}


def test_good_matrix_extends_and_merges_flags(tmp_path: Path) -> None:
    matrix = load_matrix(_write(tmp_path, GOOD))
    avx2, avx512 = matrix.variant("x86_64", "avx2"), matrix.variant("x86_64", "avx512")
    assert (avx2.arch, avx2.priority, avx2.extends, avx2.compilers) == ("x86_64", 10, "baseline", ("gcc", "clang"))
    # the child's -mtune= replaces the parent's; the parent's other flags come first
    assert avx2.flags == {f: ("-march=x86-64", "-mavx2", "-mfma", "-mtune=haswell") for f in ("gcc", "clang")}
    assert avx512.priority == 20 and avx512.description == "AVX2"  # inherited when not written
    assert avx512.flags["gcc"] == ("-march=x86-64", "-mavx2", "-mfma", "-mtune=haswell", "-mavx512f", "-mavx512bw")
    assert avx512.flags["clang"] == avx512.flags["gcc"] + ("-mevex512",)
    # requires: the parent's plus the child's, closed under `implies`, in the hardware data's order
    assert avx2.requires == HW.closure("x86_64", ["avx2", "fma"])
    assert avx512.requires == ("sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "fma", "f16c", "avx2", "avx512f", "avx512bw")
    assert matrix.baseline("x86_64").requires == () and matrix.baseline("x86_64").is_baseline


def test_good_matrix_list_and_table_flags(tmp_path: Path) -> None:
    matrix = load_matrix(_write(tmp_path, GOOD))
    neon, dotprod = matrix.variant("aarch64", "neon"), matrix.variant("aarch64", "dotprod")
    # a table: `default` for every family without its own entry
    assert neon.compilers == ("gcc", "clang", "apple-clang")
    assert neon.flags == {"gcc": ("-march=armv8-a",), "clang": ("-march=armv8-a",), "apple-clang": ("-arch", "arm64")}
    # a list: every compiler family of the variant
    assert dotprod.flags == {"gcc": ("-march=armv8.2-a+dotprod",), "clang": ("-march=armv8.2-a+dotprod",)}
    assert dotprod.requires == ("asimd", "asimddp")  # asimddp implies asimd
    assert dotprod.flags_for("gcc") == ("-march=armv8.2-a+dotprod",)
    with pytest.raises(KeyError, match="no flags for apple-clang"):
        dotprod.flags_for("apple-clang")


def test_good_matrix_arches_come_from_the_hardware_data(tmp_path: Path) -> None:
    matrix = load_matrix(_write(tmp_path, GOOD))
    assert list(matrix.arches) == ["x86_64", "aarch64"] and list(matrix.features) == ["x86_64", "aarch64"]
    x86, arm = matrix.arches["x86_64"], matrix.arches["aarch64"]
    # x86_64 has no [arch] table: the hardware facts, Linux only
    assert (x86.os, x86.compilers, x86.macos) == (("linux",), ("gcc", "clang"), None)
    assert (x86.triplet, x86.manylinux, x86.qemu) == (HW.arches["x86_64"].triplet, HW.arches["x86_64"].manylinux, "x86_64")
    assert (arm.os, arm.compilers, arm.macos) == (("linux", "darwin"), ("gcc", "clang", "apple-clang"), "macosx_11_0_arm64")
    with pytest.raises(KeyError, match=r"no variant 'sve' for aarch64 \(known: neon, dotprod\)"):
        matrix.variant("aarch64", "sve")


def test_arch_table_overrides_manylinux_os_and_macos() -> None:
    base = [_variant("neon", "aarch64", priority=0, flags=["-O2"])]
    plain = parse_matrix({"schema": 2, "variant": base}).arches["aarch64"]
    assert (plain.os, plain.compilers, plain.macos) == (("linux",), ("gcc", "clang"), None)  # darwin is opt-in
    assert plain.manylinux == HW.arches["aarch64"].manylinux
    narrowed = parse_matrix({"schema": 2, "arch": {"aarch64": {"manylinux": "manylinux_2_17_aarch64"}}, "variant": base})
    assert narrowed.arches["aarch64"].manylinux == "manylinux_2_17_aarch64"
    mac = parse_matrix({"schema": 2, "arch": {"aarch64": {"os": ["linux", "darwin"], "macos": "macosx_14_0_arm64"}},
                        "variant": base})
    assert mac.arches["aarch64"].macos == "macosx_14_0_arm64" and "apple-clang" in mac.arches["aarch64"].compilers
    assert mac.variant("aarch64", "neon").compilers == ("gcc", "clang", "apple-clang")  # list flags cover all three
    mac_only = parse_matrix({"schema": 2, "arch": {"aarch64": {"os": ["darwin"]}}, "variant": base})
    assert mac_only.arches["aarch64"].os == ("darwin",)


def test_apple_clang_only_where_darwin_is_built() -> None:
    linux = parse_matrix({"schema": 2, "variant": [_variant("neon", "aarch64", priority=0, flags=["-O2"])]})
    assert "apple-clang" not in linux.variant("aarch64", "neon").flags
    with pytest.raises(MatrixError, match=r"'apple-clang' is not a compiler family this project builds aarch64 with \(add os"):
        parse_matrix({"schema": 2, "variant": [_variant("neon", "aarch64", priority=0, compilers=["apple-clang"], flags=["-O2"])]})


def test_child_may_narrow_its_compilers_and_override_one_family() -> None:
    matrix = parse_matrix({"schema": 2, "arch": {"aarch64": {"os": ["linux", "darwin"]}}, "variant": [
        _variant("neon", "aarch64", priority=0, flags={"default": ["-march=armv8-a"], "apple-clang": ["-arch", "arm64", "-mcpu=apple-m1"]}),
        _variant("bf16", None, extends="neon", requires=["bf16"], flags={"apple-clang": ["-mcpu=apple-m2"]}),
        _variant("sve", "aarch64", extends="bf16", compilers=["gcc"], requires=["sve"], flags=["-march=armv8.6-a+sve"]),
    ]})
    bf16, sve = matrix.variant("aarch64", "bf16"), matrix.variant("aarch64", "sve")
    assert bf16.flags["gcc"] == ("-march=armv8-a",)  # no flags of its own for gcc: the parent's
    assert bf16.flags["apple-clang"] == ("-arch", "arm64", "-mcpu=apple-m2")  # -mcpu= replaced
    assert sve.compilers == ("gcc",) and sve.flags == {"gcc": ("-march=armv8.6-a+sve",)}  # -march= replaced
    assert sve.requires == ("asimd", "sve", "bf16")


def test_a_child_builds_with_its_parents_compilers_unless_it_names_its_own() -> None:
    matrix = parse_matrix({"schema": 2, "arch": {"aarch64": {"os": ["linux", "darwin"]}}, "variant": [
        _variant("neon", "aarch64", priority=0, flags={"default": ["-march=armv8-a"], "apple-clang": ["-arch", "arm64"]}),
        _variant("dotprod", "aarch64", priority=10, compilers=["gcc", "clang"], requires=["asimddp"], flags=["-march=armv8.2-a+dotprod"]),
        _variant("i8mm", None, extends="dotprod", requires=["i8mm"], flags=["-march=armv8.6-a"]),
        _variant("mac", None, extends="dotprod", requires=["bf16"], priority=30, compilers=["clang", "apple-clang"],
                 flags={"default": ["-march=armv8.6-a+bf16"], "apple-clang": ["-mcpu=apple-m2"]}),
    ]})
    assert matrix.variant("aarch64", "i8mm").compilers == ("gcc", "clang")  # the parent's, not all of the arch's
    mac = matrix.variant("aarch64", "mac")
    assert mac.flags == {"clang": ("-march=armv8.6-a+bf16",), "apple-clang": ("-mcpu=apple-m2",)}  # no parent flags for apple-clang
    assert (matrix.variant("aarch64", "neon").description, mac.description) == ("", "")  # none given, none inherited


@pytest.mark.parametrize(("arch", "problem"), [(None, "no variant 'avx3' to extend"),
                                               ("x86_64", "no variant 'avx3' to extend for x86_64")])
def test_extending_an_unknown_variant_names_the_arch_asked_for(arch: str | None, problem: str) -> None:
    with pytest.raises(MatrixError) as info:
        parse_matrix({"schema": 2, "variant": [_variant("baseline", priority=0, flags=["-O2"]),
                                               _variant("avx2", arch, extends="avx3", requires=["avx2"], flags=["-mavx2"])]})
    assert (info.value.where, info.value.problem) == ("variant 'avx2', field 'extends'", problem)


def test_extends_with_arch_picks_among_same_named_variants() -> None:
    matrix = parse_matrix({"schema": 2, "variant": [
        _variant("baseline", "x86_64", priority=0, flags=["-march=x86-64"]),
        _variant("baseline", "s390x", priority=0, flags=["-march=z196"]),
        _variant("vxe", "s390x", extends="baseline", requires=["vxe"], flags=["-march=z14"]),
        # names repeat across arches in opposite directions: not a cycle
        _variant("a", "aarch64", priority=0, flags=["-O2"]),
        _variant("b", "x86_64", extends="baseline", requires=["avx"], flags=["-mavx"]),
        _variant("b", "aarch64", extends="a", requires=["asimddp"], flags=["-O3"]),
    ]})
    vxe = matrix.variant("s390x", "vxe")
    assert (vxe.priority, vxe.flags["gcc"], vxe.requires) == (10, ("-march=z14",), ("vx", "vxe"))
    assert matrix.variant("aarch64", "b").extends == "a" and matrix.variant("x86_64", "b").extends == "baseline"


def test_variant_order_in_the_file_does_not_matter() -> None:
    """A child may come before its parent."""
    matrix = parse_matrix({"schema": 2, "variant": [
        _variant("avx2", None, extends="baseline", requires=["avx2"], flags=["-mavx2"]),
        _variant("baseline", "x86_64", priority=5, flags=["-O2"]),
    ]})
    assert [(v.name, v.priority) for v in matrix.variants_for("x86_64")] == [("baseline", 5), ("avx2", 15)]


# ------------------------------------------------------- broken matrices

DOTPROD_FLAGS = 'flags = ["-march=armv8.2-a+dotprod"]'
NEON_FLAGS = 'flags = { default = ["-march=armv8-a"], apple-clang = ["-arch", "arm64"] }'
ARM_OS = 'os = ["linux", "darwin"]'
AVX2_REQ = 'requires = ["avx2", "fma"]'
NEON_HEAD = 'name = "neon"\narch = "aarch64"\npriority = 0\n'
CLANG512 = 'clang = ["-mavx512f", "-mavx512bw", "-mevex512"]'

# (id, text to replace, replacement, expected location, expected words in the problem)
BROKEN: list[tuple[str, str, str, str, tuple[str, ...]]] = [
    # top level
    ("unknown top-level key", "schema = 2\n", "schema = 2\nvariants = []\n", "top level, field 'variants'", ("unknown key",)),
    ("schema-1 [features] leftover", "[arch.aarch64]", '[features.x86_64]\navx2 = { cpuid = [7, 0, "ebx", 5] }\n\n[arch.aarch64]',
     "top level, field 'features'", ("unknown key", "schema, arch, variant")),
    ("schema 1 migration", "schema = 2", "schema = 1", "top level, field 'schema'",
     ("schema 1", "cpubuild now ships them", "drop [features.*]", "set schema = 2", "docs/project.md")),
    ("unsupported schema", "schema = 2", "schema = 3", "top level, field 'schema'", ("unsupported schema 3", "reads 2")),
    ("schema missing", "schema = 2\n", "", "top level, field 'schema'", ("is required",)),
    ("schema is a string", "schema = 2", 'schema = "2"', "top level, field 'schema'", ("must be an integer",)),
    ("[[variant]] misspelt", '[[variant]]\nname = "avx2"', '[[variantx]]\nname = "avx2"', "top level, field 'variantx'", ("unknown key",)),
    # [arch.X]
    ("arch alias in [arch]", "[arch.aarch64]", "[arch.arm64]", "arch 'arm64'", ("write the arch as 'aarch64'", "alias")),
    ("unknown arch in [arch]", "[arch.aarch64]", "[arch.riscv64]\n\n[arch.aarch64]", "arch 'riscv64'",
     ("unknown arch", "x86_64, aarch64, s390x")),
    ("unknown [arch] key", ARM_OS, ARM_OS + '\ntriplet = "aarch64-linux-gnu"', "arch 'aarch64', field 'triplet'",
     ("unknown key", "os, manylinux, macos")),
    ("os the arch is not built for", "[arch.aarch64]", '[arch.x86_64]\nos = ["linux", "darwin"]\n\n[arch.aarch64]',
     "arch 'x86_64', field 'os'", ("x86_64 for linux only", "'darwin'")),
    ("unknown os", ARM_OS, 'os = ["linux", "windows"]', "arch 'aarch64', field 'os'", ("unknown value 'windows'", "linux, darwin")),
    ("no os", ARM_OS, "os = []", "arch 'aarch64', field 'os'", ("at least one",)),
    ("os is a string", ARM_OS, 'os = "linux"', "arch 'aarch64', field 'os'", ("must be a list",)),
    ("manylinux of another arch", ARM_OS, ARM_OS + '\nmanylinux = "manylinux_2_28_x86_64"', "arch 'aarch64', field 'manylinux'",
     ("manylinux_X_Y_aarch64", "'manylinux_2_28_x86_64'")),
    ("macos not a macOS tag", ARM_OS, ARM_OS + '\nmacos = "manylinux_2_28_aarch64"', "arch 'aarch64', field 'macos'",
     ("macOS platform tag", "macosx_11_0_arm64")),
    ("macos without darwin", ARM_OS, 'os = ["linux"]\nmacos = "macosx_14_0_arm64"', "arch 'aarch64', field 'macos'",
     ('add "darwin" to os = ["linux"]',)),
    ("arch declared without variants", "[arch.aarch64]", "[arch.s390x]\n\n[arch.aarch64]", "arch 's390x'", ("has no variants",)),
    # variant names
    ("duplicate variant name", 'name = "dotprod"', 'name = "neon"', "variant 'neon' (aarch64), field 'name'", ("duplicate", "#4", "#5")),
    ("reserved name", 'name = "dotprod"', 'name = "native"', "variant 'native', field 'name'", ("reserved", "all, native, probe, common")),
    ("name with a dash", 'name = "avx2"', 'name = "avx-2"', "variant 'avx-2', field 'name'", ("lower case", "file name")),
    ("name with a path", 'name = "avx2"', 'name = "../avx2"', "variant '../avx2', field 'name'", ("lower case",)),
    ("upper-case name", 'name = "avx2"', 'name = "AVX2"', "variant 'AVX2', field 'name'", ("lower case",)),
    ("missing name", 'name = "avx2"\n', "", "variant '#2', field 'name'", ("is required",)),
    ("label clash", 'name = "dotprod"', 'name = "neon_"', "variant 'neon_' (aarch64), field 'name'",
     ("'neon' and 'neon_' share the wheel label 'neon'", "rename one")),
    ("unknown variant key", 'name = "avx2"\n', 'name = "avx2"\nprioity = 3\n', "variant 'avx2', field 'prioity'", ("unknown key", "priority")),
    # arch of a variant
    ("arch alias in a variant", NEON_HEAD, NEON_HEAD.replace('"aarch64"', '"arm64"'), "variant 'neon', field 'arch'",
     ("write the arch as 'aarch64'", "'arm64' is an alias")),
    ("unknown arch in a variant", NEON_HEAD, NEON_HEAD.replace('"aarch64"', '"riscv64"'), "variant 'neon', field 'arch'",
     ("unknown arch 'riscv64'", "x86_64, aarch64, s390x")),
    ("missing arch", NEON_HEAD, NEON_HEAD.replace('arch = "aarch64"\n', ""), "variant 'neon', field 'arch'", ("is required",)),
    # requires
    ("unknown feature", AVX2_REQ, 'requires = ["avx2", "avx3"]', "variant 'avx2' (x86_64), field 'requires'",
     ("unknown feature 'avx3' for x86_64", "known: sse2, sse3", "docs/project.md")),
    ("feature of another arch", AVX2_REQ, 'requires = ["asimddp"]', "variant 'avx2' (x86_64), field 'requires'",
     ("unknown feature 'asimddp' for x86_64",)),
    ("cpuinfo spelling is not a name", AVX2_REQ, 'requires = ["pni"]', "variant 'avx2' (x86_64), field 'requires'", ("unknown feature 'pni'",)),
    ("duplicate requirement", AVX2_REQ, 'requires = ["fma", "fma"]', "variant 'avx2' (x86_64), field 'requires'", ("duplicate",)),
    ("requires is a string", AVX2_REQ, 'requires = "avx2"', "variant 'avx2' (x86_64), field 'requires'", ("must be a list",)),
    ("requires holds a number", AVX2_REQ, "requires = [5]", "variant 'avx2' (x86_64), field 'requires'", ("list of strings", "5")),
    # extends
    ("extends an unknown variant", 'extends = "avx2"', 'extends = "avx3"', "variant 'avx512', field 'extends'", ("no variant 'avx3' to extend",)),
    ("extends a variant of another arch", 'extends = "avx2"', 'arch = "aarch64"\nextends = "avx2"', "variant 'avx512', field 'extends'",
     ("'avx2' is a x86_64 variant, this one is aarch64",)),
    ("extends with an arch alias", 'extends = "avx2"', 'arch = "amd64"\nextends = "avx2"', "variant 'avx512', field 'arch'",
     ("write the arch as 'x86_64'",)),
    ("extends an ambiguous name", 'name = "dotprod"', 'name = "baseline"', "variant 'avx2', field 'extends'",
     ("'baseline' names variants of several arches", 'add arch = "..."')),
    ("extends cycle", 'extends = "baseline"', 'extends = "avx512"', "variant 'avx512', field 'extends'",
     ("forms a cycle: avx2 -> avx512 -> avx2",)),
    ("extends itself", 'extends = "avx2"', 'extends = "avx512"', "variant 'avx512', field 'extends'", ("forms a cycle: avx512 -> avx512",)),
    ("extends is a list", 'extends = "avx2"', 'extends = ["avx2"]', "variant 'avx512', field 'extends'", ("must be a string",)),
    # baselines and priorities
    ("two baselines", AVX2_REQ, "requires = []", "arch 'x86_64'", ("2 baselines", "'baseline', 'avx2'")),
    ("missing baseline", NEON_HEAD, NEON_HEAD + 'requires = ["asimd"]\n', "arch 'aarch64'", ("no baseline", "empty 'requires'")),
    ("baseline not lowest", "priority = 10", "priority = -5", "variant 'neon' (aarch64), field 'priority'",
     ("lowest priority", "'dotprod' has -5 < 0")),
    ("duplicate priorities", "priority = 10", "priority = 0", "variant 'dotprod' (aarch64), field 'priority'", ("0 is already used by 'neon'",)),
    ("inherited priority clashes", 'requires = ["avx512bw"]', 'requires = ["avx512bw"]\npriority = 10',
     "variant 'avx512' (x86_64), field 'priority'", ("10 is already used by 'avx2'",)),
    ("missing priority", "priority = 10\n", "", "variant 'dotprod' (aarch64), field 'priority'", ("is required",)),
    ("priority is a string", "priority = 10", 'priority = "10"', "variant 'dotprod' (aarch64), field 'priority'", ("must be an integer, got str",)),
    ("priority is a boolean", "priority = 10", "priority = true", "variant 'dotprod' (aarch64), field 'priority'", ("got a boolean",)),
    ("description is a number", 'description = "AVX2"', "description = 2", "variant 'avx2' (x86_64), field 'description'", ("must be a string",)),
    # compilers and flags
    ("-march=native", '"-mtune=haswell"', '"-march=native"', "variant 'avx2' (x86_64), field 'flags'", ("-march=native", "build machine")),
    ("-mcpu=native+ext in a table", '"-march=armv8-a"', '"-mcpu=native+crypto"', "variant 'neon' (aarch64), field 'flags.default'",
     ("-mcpu=native+crypto", "name the ISA explicitly")),
    ("-mtune=native for one family", '"-mevex512"', '"-mtune=native"', "variant 'avx512' (x86_64), field 'flags.clang'", ("-mtune=native",)),
    ("flags for an unclaimed compiler family", DOTPROD_FLAGS,
     'flags = { default = ["-march=armv8.2-a+dotprod"], apple-clang = ["-arch", "arm64"] }',
     "variant 'dotprod' (aarch64), field 'flags'", ("'apple-clang'", "does not build with", "compilers: gcc, clang")),
    ("apple-clang flags without darwin", ARM_OS, 'os = ["linux"]', "variant 'neon' (aarch64), field 'flags'",
     ("'apple-clang'", "does not build with")),
    ("apple-clang compiler on x86_64", 'description = "x86-64"', 'description = "x86-64"\ncompilers = ["gcc", "apple-clang"]',
     "variant 'baseline' (x86_64), field 'compilers'", ("'apple-clang' is not a compiler family this project builds x86_64 with",)),
    ("unknown compiler in compilers", 'compilers = ["gcc", "clang"]', 'compilers = ["gcc", "msvc"]',
     "variant 'dotprod' (aarch64), field 'compilers'", ("unknown value 'msvc'", "gcc, clang, apple-clang")),
    ("unknown compiler family in flags", CLANG512, CLANG512 + ', icc = ["-xHost"]', "variant 'avx512' (x86_64), field 'flags'",
     ("unknown compiler family 'icc'", "default, gcc, clang, apple-clang")),
    ("claimed family without flags", NEON_FLAGS, NEON_FLAGS.replace("default", "gcc"), "variant 'neon' (aarch64), field 'flags'",
     ("no flags for compiler family 'clang'",)),
    ("no flags at all", DOTPROD_FLAGS + "\n", "", "variant 'dotprod' (aarch64), field 'flags'", ("no flags for compiler family 'gcc'",)),
    ("empty flags", DOTPROD_FLAGS, "flags = []", "variant 'dotprod' (aarch64), field 'flags'", ("no flags",)),
    ("empty flag string", DOTPROD_FLAGS, 'flags = [""]', "variant 'dotprod' (aarch64), field 'flags'", ("non-empty strings",)),
    ("two flags in one string", DOTPROD_FLAGS, 'flags = ["-march=armv8.2-a+dotprod -O2"]', "variant 'dotprod' (aarch64), field 'flags'",
     ("'-march=armv8.2-a+dotprod -O2' holds whitespace", "one flag per string")),
    ("flags is a string", DOTPROD_FLAGS, 'flags = "-O2"', "variant 'dotprod' (aarch64), field 'flags'", ("a list or a table", "got str")),
    ("family flags not a list", CLANG512, 'clang = "-mavx512f"', "variant 'avx512' (x86_64), field 'flags.clang'",
     ("list of non-empty strings", "'-mavx512f'")),
    ("baseline lacks a family its variants use", NEON_HEAD, NEON_HEAD + 'compilers = ["gcc", "apple-clang"]\n',
     "variant 'neon' (aarch64), field 'compilers'", ("every compiler family", "'dotprod' builds with clang")),
]


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


def test_the_good_base_of_the_catalogue_loads(tmp_path: Path) -> None:
    matrix = load_matrix(_write(tmp_path, GOOD))
    assert [v.name for v in matrix.variants_for("aarch64")] == ["neon", "dotprod"]
    assert [v.name for v in matrix.variants_for("x86_64")] == ["baseline", "avx2", "avx512"]


@pytest.mark.parametrize("name", RESERVED_NAMES)
def test_every_reserved_name_is_refused(name: str) -> None:
    with pytest.raises(MatrixError, match=rf"variant '{name}', field 'name': '{name}' is reserved"):
        parse_matrix({"schema": 2, "variant": [_variant(name, priority=0, flags=["-O2"])]})


def test_variant_written_as_a_single_table(tmp_path: Path) -> None:
    text = GOOD.split("[[variant]]")[0] + '[variant]\nname = "baseline"\n'
    with pytest.raises(MatrixError, match=r"field 'variant': must be an array of tables: write each variant as \[\[variant\]\]"):
        load_matrix(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("data", "where", "problem"),
    [
        ({"schema": 2, "variant": []}, "top level, field 'variant'", "declares no variant"),
        ({"schema": 2}, "top level, field 'variant'", "is required"),
        ({"schema": 2, "variant": ["avx2"]}, "variant '#1'", "must be a table, got str"),
        ({"schema": 2, "arch": {"x86_64": "linux"}, "variant": [_variant("b", priority=0, flags=["-O2"])]}, "arch 'x86_64'", "must be a table"),
        ([1, 2], "top level", "must be a table, got list"),
    ],
)
def test_shapes_toml_cannot_always_express(data: Any, where: str, problem: str) -> None:
    with pytest.raises(MatrixError) as info:
        parse_matrix(data, "m.toml")
    assert (info.value.path, info.value.where) == ("m.toml", where)
    assert problem in info.value.problem


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


# ------------------------------------------------------------ the runtime manifest


def test_manifest_lists_every_variant_and_the_project() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    facts = {"dist": "cpukern", "package": "cpukern", "env_prefix": "CPUKERN", "kind": "ctypes", "selftest": None}
    manifest = matrix.manifest("x86_64", ["baseline", "avx2"], "_cpukern_{variant}.so", probe="_cpukern_probe.so", project=facts)
    assert manifest["schema"] == MANIFEST_SCHEMA == 2 and manifest["cpubuild"] == __version__
    assert {k: manifest[k] for k in facts} == facts
    assert (manifest["arch"], manifest["probe"]) == ("x86_64", "_cpukern_probe.so")
    listed = {v["name"]: v for v in manifest["variants"]}
    assert list(listed) == [v.name for v in matrix.variants_for("x86_64")]  # unbuilt ones listed too
    assert {n for n, v in listed.items() if v["built"]} == {"baseline", "avx2"}
    assert listed["avx512"]["library"] == "_cpukern_avx512.so"
    assert listed["avx2"]["requires"] == list(matrix.variant("x86_64", "avx2").requires)
    assert listed["avx2"]["priority"] == 10 and listed["avx2"]["description"].startswith("Haswell")
    # every feature of the arch, in the hardware data's order, with its probe recipe
    assert list(manifest["features"]) == list(HW.features["x86_64"])
    assert manifest["features"]["avx2"] == {"cpuid": [7, 0, "ebx", 5], "xcr0": 6}
    assert manifest["features"]["sse3"] == {"cpuid": [1, 0, "ecx", 0]}
    json.dumps(manifest)  # plain JSON


# ------------------------------------------------------------ python -m cpubuild.matrix

DOTLIB_PYPROJECT = """\
[project]
name = "dot-lib"
version = "1.2.0"

[tool.cpubuild]
package = "dotlib"
selftest = "dotlib.selftest --quick"
"""


def make_project(tmp_path: Path, matrix: str = GOOD, pyproject: str = DOTLIB_PYPROJECT) -> Path:
    (tmp_path / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    (tmp_path / "isa_matrix.toml").write_text(matrix, encoding="utf-8")
    return tmp_path


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = _main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_bridge_cmake_variables_of_another_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path)
    out = tmp_path / "build" / "cmake" / "matrix.cmake"  # folders made as needed
    code, _, err = run_main(["--project", str(project), "cmake", "--arch", "arm64", "--compiler", "apple-clang", "--out", str(out)], capsys)
    assert code == 0, err
    script = out.read_text()
    assert script.startswith(f"# generated by cpubuild {__version__} from ")
    for line in (
        'set(CPUBUILD_PACKAGE "dotlib")',
        'set(CPUBUILD_ENV_PREFIX "DOTLIB")',
        'set(CPUBUILD_ARCH "aarch64")',  # the alias resolved
        'set(CPUBUILD_ALL_VARIANTS "neon;dotprod")',
        'set(CPUBUILD_VARIANTS "neon")',  # dotprod has no apple-clang flags
        'set(CPUBUILD_BASELINE_VARIANT "neon")',
        f'set(CPUBUILD_MATRIX_FILE "{project / "isa_matrix.toml"}")',
        'set(CPUBUILD_VARIANT_neon_FLAGS "-arch;arm64")',
        "set(CPUBUILD_VARIANT_neon_PRIORITY 0)",
    ):
        assert line in script.splitlines(), line
    assert "dotprod_FLAGS" not in script and "CPUKERN" not in script


def test_cmake_variables_follow_the_family(tmp_path: Path) -> None:
    matrix = load_matrix(make_project(tmp_path) / "isa_matrix.toml")
    config = load_config(tmp_path)
    gcc = cmake_variables(matrix, config, "x86_64", "gcc")
    assert 'set(CPUBUILD_VARIANTS "baseline;avx2;avx512")' in gcc
    assert 'set(CPUBUILD_VARIANT_avx512_FLAGS "-march=x86-64;-mavx2;-mfma;-mtune=haswell;-mavx512f;-mavx512bw")' in gcc
    assert "set(CPUBUILD_VARIANT_avx512_PRIORITY 20)" in gcc
    clang = cmake_variables(matrix, config, "x86_64", "clang")
    assert "-mavx512bw;-mevex512" in clang
    apple = cmake_variables(matrix, config, "x86_64", "apple-clang").splitlines()  # a family no variant builds with
    assert 'set(CPUBUILD_VARIANTS "")' in apple and 'set(CPUBUILD_PROBE_FLAGS "")' in apple
    cpukern = cmake_variables(load_matrix(CPUKERN_MATRIX), load_config(REPO), "aarch64", "apple-clang")
    assert 'set(CPUBUILD_PACKAGE "cpukern")' in cpukern and 'set(CPUBUILD_ENV_PREFIX "CPUKERN")' in cpukern
    assert 'set(CPUBUILD_VARIANTS "neon;neon_dotprod;neon_bf16")' in cpukern  # sve: Linux only


def test_cmake_strings_survive_quotes_semicolons_and_dollars(tmp_path: Path) -> None:
    matrix_text = ("schema = 2\n[[variant]]\nname = \"baseline\"\narch = \"x86_64\"\npriority = 0\n"
                   "description = 'say \"hi\" ${X}'\n"
                   "flags = ['-DNAME=\"a;b\"', '-DV=$HOME', 'C:\\dir', '-O2']\n")
    project = make_project(tmp_path, matrix_text)
    script = cmake_variables(load_matrix(project / "isa_matrix.toml"), load_config(project), "x86_64", "gcc")
    assert 'set(CPUBUILD_VARIANT_baseline_FLAGS "-DNAME=\\"a\\\\;b\\";-DV=\\$HOME;C:\\\\dir;-O2")' in script
    cmake = shutil.which("cmake")
    if cmake is None:
        return  # the text above is what CMake reads; with cmake present, read it back too
    (tmp_path / "vars.cmake").write_text(script)
    (tmp_path / "show.cmake").write_text('include("${CMAKE_CURRENT_LIST_DIR}/vars.cmake")\n'
                                         'foreach(f IN LISTS CPUBUILD_VARIANT_baseline_FLAGS)\n  message("[${f}]")\nendforeach()\n')
    shown = subprocess.run([cmake, "-P", str(tmp_path / "show.cmake")], capture_output=True, text=True, check=True).stderr
    assert shown.splitlines() == ['[-DNAME="a;b"]', "[-DV=$HOME]", "[C:\\dir]", "[-O2]"]


def test_bridge_manifest_carries_the_project_facts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path)
    out = tmp_path / "gen" / "_manifest.json"
    argv = ["--project", str(project), "manifest", "--arch", "amd64", "--variants", "baseline;avx512",
            "--library", "_dotlib_{variant}.so", "--probe", "_dotlib_probe.so", "--out", str(out)]
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    manifest = json.loads(out.read_text())
    assert manifest["schema"] == 2 and manifest["cpubuild"] == __version__
    assert (manifest["dist"], manifest["package"], manifest["env_prefix"]) == ("dot-lib", "dotlib", "DOTLIB")
    assert (manifest["kind"], manifest["selftest"]) == ("ctypes", "dotlib.selftest --quick")
    assert (manifest["arch"], manifest["probe"]) == ("x86_64", "_dotlib_probe.so")
    assert list(manifest["features"]) == list(HW.features["x86_64"])  # hardware order, the whole arch
    assert [(v["name"], v["built"], v["library"]) for v in manifest["variants"]] == [
        ("baseline", True, "_dotlib_baseline.so"), ("avx2", False, "_dotlib_avx2.so"), ("avx512", True, "_dotlib_avx512.so")]
    # deterministic, and the file is left alone when nothing changed (stable mtimes for rebuilds)
    os.utime(out, (1_000_000, 1_000_000))
    assert _main([*argv[:-1], str(out)]) == 0
    assert out.stat().st_mtime == 1_000_000
    argv[argv.index("--variants") + 1] = "baseline,avx2"  # ',' separates too
    assert _main(argv) == 0
    assert [v["built"] for v in json.loads(out.read_text())["variants"]] == [True, True, False]


def test_bridge_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path)
    code, out, _ = run_main(["--project", str(project), "check"], capsys)
    assert code == 0 and out.strip() == f"{project / 'isa_matrix.toml'}: ok (5 variants)"


BAD_INPUT = [
    ("unknown arch", GOOD, ["cmake", "--arch", "riscv64", "--compiler", "gcc"], ("arch: no variants for 'riscv64'", "x86_64, aarch64")),
    ("arch without variants", GOOD, ["cmake", "--arch", "s390x", "--compiler", "gcc"], ("no variants for 's390x'",)),
    ("family the arch is not built with", GOOD, ["cmake", "--arch", "x86_64", "--compiler", "apple-clang"],
     ("arch 'x86_64': is not built with apple-clang", "baseline 'baseline' builds with gcc, clang")),
    ("family the baseline is not built with", GOOD.replace(NEON_HEAD, NEON_HEAD + 'compilers = ["gcc", "apple-clang"]\n').replace(
        'compilers = ["gcc", "clang"]', 'compilers = ["gcc"]'), ["cmake", "--arch", "aarch64", "--compiler", "clang"],
     ("arch 'aarch64': is not built with clang", "'neon' builds with gcc, apple-clang")),
    ("broken matrix", GOOD.replace('"fma"]', '"fma3"]'), ["cmake", "--arch", "x86_64", "--compiler", "gcc"],
     ("variant 'avx2' (x86_64), field 'requires': unknown feature 'fma3'",)),
    ("broken matrix (check)", "schema = 1\n", ["check"], ("schema 1",)),
    ("unknown built variants", GOOD, ["manifest", "--arch", "x86_64", "--variants", "baseline,avx3;avx4", "--library", "_d_{variant}.so",
                                      "--probe", "p.so"], ("arch 'x86_64': --variants names 'avx3', 'avx4',", "known: baseline, avx2, avx512")),
    ("library without {variant}", GOOD, ["manifest", "--arch", "x86_64", "--variants", "baseline", "--library", "_d.so",
                                         "--probe", "p.so"], ("--library '_d.so'", "{variant}")),
    ("library with another field", GOOD, ["manifest", "--arch", "x86_64", "--variants", "baseline", "--library", "_d_{name}.so",
                                          "--probe", "p.so"], ("--library '_d_{name}.so'",)),
]


@pytest.mark.parametrize(("matrix", "argv", "words"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT])
def test_bridge_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], matrix: str,
                                                argv: list[str], words: tuple[str, ...]) -> None:
    project = make_project(tmp_path, matrix)
    out = tmp_path / "out.txt"
    full = ["--project", str(project), *argv, *(["--out", str(out)] if argv[0] != "check" else [])]
    code, stdout, err = run_main(full, capsys)
    assert code == 2 and stdout == ""
    assert err.startswith(f"error: {project / 'isa_matrix.toml'}: ") and err.endswith("\n") and err.count("\n") == 1, err
    for word in words:
        assert word in err, f"{word!r} not in {err!r}"
    assert not out.exists()


CMAKE_ARGS = ("cmake", "--arch", "x86_64", "--compiler", "gcc", "--out")
MANIFEST_ARGS = ("manifest", "--arch", "x86_64", "--variants", "baseline", "--library", "_d_{variant}.so", "--probe", "p.so", "--out")


def _without(argv: tuple[str, ...], option: str) -> tuple[str, ...]:
    at = argv.index(option)
    return argv[:at] + argv[at + 2:] if option != "--out" else argv[:at]


@pytest.mark.parametrize(("argv", "named"), [
    *((_without(CMAKE_ARGS, o), o) for o in ("--arch", "--compiler", "--out")),
    *((_without(MANIFEST_ARGS, o), o) for o in ("--arch", "--variants", "--library", "--probe", "--out")),
    (("cmake", "--arch", "x86_64", "--compiler", "msvc", "--out"), "invalid choice: 'msvc'"),
    ((), "required: command"),
    (None, "required: --project"),
])
def test_bridge_usage_mistakes_exit_2_naming_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        argv: tuple[str, ...] | None, named: str) -> None:
    """The bridge is CMake's, but a hand-made call gets argparse's usage line, never a traceback or a silent 0."""
    project = make_project(tmp_path)
    out = tmp_path / "out.txt"
    full = ["check"] if argv is None else ["--project", str(project), *argv, *([str(out)] if argv and argv[-1] == "--out" else [])]
    with pytest.raises(SystemExit) as info:
        _main(full)
    assert info.value.code == 2 and named in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("pyproject", "words"),
    [(None, ("pyproject.toml: file: cannot be read",)),
     ('[project]\nname = "x"\nversion = "1"\n', ("[tool.cpubuild]: missing",)),
     ('[project]\nname = "x"\nversion = "1"\n[tool.cpubuild]\nenv-prefix = "lower"\n', ("[tool.cpubuild] env-prefix",))],
    ids=["no pyproject", "no [tool.cpubuild]", "bad contract"],
)
def test_bridge_contract_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], pyproject: str | None,
                                       words: tuple[str, ...]) -> None:
    (tmp_path / "isa_matrix.toml").write_text(GOOD)
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    code, _, err = run_main(["--project", str(tmp_path), "check"], capsys)
    assert code == 2 and err.startswith(f"error: {tmp_path / 'pyproject.toml'}: ") and err.count("\n") == 1
    for word in words:
        assert word in err


def test_bridge_runs_as_a_module_with_the_standard_library_only(tmp_path: Path) -> None:
    """CMake runs it inside isolated builds: `python -I -m cpubuild.matrix` with nothing but cpubuild importable."""
    project = make_project(tmp_path)
    code = ("import sys, builtins\n"
            "real = builtins.__import__\n"
            "def guard(name, *a, **k):\n"
            "    if name.split('.')[0] in ('packaging', 'click', 'yaml'):\n"
            "        raise ImportError('not in an isolated build: ' + name)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = guard\n"
            f"sys.path.insert(0, {str(REPO / 'tools')!r})\n"
            "import runpy; sys.argv = ['cpubuild.matrix'] + sys.argv[1:]\n"
            "runpy.run_module('cpubuild.matrix', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-I", "-c", code, "--project", str(project), "check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    bad = subprocess.run([sys.executable, "-I", "-c", code, "--project", str(project), "cmake", "--arch", "mips",
                          "--compiler", "gcc", "--out", str(tmp_path / "x")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no variants for 'mips'" in bad.stderr


def test_a_name_with_a_trailing_newline_is_refused() -> None:
    """Full-string matching: `name = "avx512\n"` is no variant name (it failed late, inside the build)."""
    with pytest.raises(MatrixError, match="name"):
        parse_matrix({"schema": 2, "variant": [_variant("baseline\n", priority=0, flags=["-O2"])]})
