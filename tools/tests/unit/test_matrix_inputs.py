"""Per-variant build inputs (sources, compile-definitions, compile-options,
link-libraries, optional-flags) and an arch floor in isa_matrix.toml: what the
loader derives, what the CMake bridge and the manifest carry, and the broken
forms it refuses with file / item / field / problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cpubuild.contract import load_config
from cpubuild.hardware import hardware
from cpubuild.matrix import MatrixError, OptionalFlag, _main, cmake_variables, load_matrix

PYPROJECT = '[project]\nname = "vk"\nversion = "1.0"\n\n[tool.cpubuild]\npackage = "vk"\n'

# vLLM's shape: no kernel below AVX2; AVX-512 adds sources, AMX more sources,
# a define and compiler-dependent flags.
LADDER = """\
schema = 2

[arch.x86_64]
floor = "avx2"

[[variant]]
name = "avx2"
arch = "x86_64"
priority = 10
requires = ["avx2", "fma", "f16c"]
flags = ["-mavx2", "-mfma", "-mf16c"]
compile-options = ["-fopenmp"]
link-libraries = ["numa"]

[[variant]]
name = "avx512"
extends = "avx2"
requires = ["avx512f", "avx512bw", "avx512dq", "avx512vl"]
flags = ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl"]
sources = ["csrc/cpu/shm.cpp"]
compile-definitions = ["CPU_CAPABILITY_AVX512"]

[[variant]]
name = "amx"
extends = "avx512"
requires = ["amx_bf16", "amx_int8"]
flags = ["-mamx-tile", "-mamx-bf16", "-mamx-int8"]
sources = ["csrc/cpu/sgl-kernels/gemm.cpp", "csrc/cpu/shm.cpp"]
compile-definitions = ["CPU_CAPABILITY_AMXBF16", "VLEN=512"]
optional-flags = [{flag = "-mamx-fp8", define = "CPU_CAPABILITY_AMXFP8"}, {flag = "-mavx10.2"}]
"""


def project(tmp_path: Path, matrix: str = LADDER) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (tmp_path / "isa_matrix.toml").write_text(matrix, encoding="utf-8")
    return tmp_path


def test_inputs_add_up_along_extends(tmp_path: Path) -> None:
    m = load_matrix(project(tmp_path) / "isa_matrix.toml")
    avx2, avx512, amx = (m.variant("x86_64", n) for n in ("avx2", "avx512", "amx"))
    assert (avx2.sources, avx2.compile_options, avx2.link_libraries) == ((), ("-fopenmp",), ("numa",))
    assert avx512.sources == ("csrc/cpu/shm.cpp",) and avx512.link_libraries == ("numa",)
    # the parent's first, each once
    assert amx.sources == ("csrc/cpu/shm.cpp", "csrc/cpu/sgl-kernels/gemm.cpp")
    assert amx.compile_definitions == ("CPU_CAPABILITY_AVX512", "CPU_CAPABILITY_AMXBF16", "VLEN=512")
    assert amx.optional_flags == (OptionalFlag(flag="-mamx-fp8", define="CPU_CAPABILITY_AMXFP8"), OptionalFlag(flag="-mavx10.2"))
    assert avx512.optional_flags == ()


def test_a_floor_is_the_arch_lowest_variant(tmp_path: Path) -> None:
    m = load_matrix(project(tmp_path) / "isa_matrix.toml")
    floor = m.baseline("x86_64")
    assert floor.name == "avx2" and floor.floor and floor.is_baseline and floor.requires
    assert m.floor("x86_64") is floor
    manifest = m.manifest("x86_64", ["avx2"], "_vk_{variant}.so", probe="_vk_probe.so", project={})
    assert manifest["floor"] == "avx2"
    assert m.best_for("x86_64", {"sse2"}).name == "avx2"  # nothing runs there; the floor stands for it


def test_cmake_bridge_carries_inputs_probe_flags_and_floor(tmp_path: Path) -> None:
    p = project(tmp_path)
    script = cmake_variables(load_matrix(p / "isa_matrix.toml"), load_config(p), "x86_64", "gcc").splitlines()
    for line in (
        'set(CPUBUILD_BASELINE_VARIANT "avx2")',
        'set(CPUBUILD_FLOOR "avx2")',
        # the probe is built for the arch's lowest ISA, never with the floor's AVX2 flags
        'set(CPUBUILD_PROBE_FLAGS "' + ";".join(hardware().arches["x86_64"].probe_flags) + '")',
        'set(CPUBUILD_VARIANT_amx_SOURCES "csrc/cpu/shm.cpp;csrc/cpu/sgl-kernels/gemm.cpp")',
        'set(CPUBUILD_VARIANT_amx_DEFINITIONS "CPU_CAPABILITY_AVX512;CPU_CAPABILITY_AMXBF16;VLEN=512")',
        'set(CPUBUILD_VARIANT_avx2_OPTIONS "-fopenmp")',
        'set(CPUBUILD_VARIANT_avx2_LIBRARIES "numa")',
        "set(CPUBUILD_VARIANT_amx_OPTIONAL_COUNT 2)",
        'set(CPUBUILD_VARIANT_amx_OPTIONAL_0_FLAG "-mamx-fp8")',
        'set(CPUBUILD_VARIANT_amx_OPTIONAL_0_DEFINE "CPU_CAPABILITY_AMXFP8")',
        'set(CPUBUILD_VARIANT_amx_OPTIONAL_1_DEFINE "")',
        "set(CPUBUILD_VARIANT_avx2_OPTIONAL_COUNT 0)",
    ):
        assert line in script, line
    assert hardware().arches["x86_64"].probe_flags == ("-march=x86-64", "-mtune=generic")


def test_probe_flags_of_a_matrix_with_a_baseline_are_the_baseline_flags(tmp_path: Path) -> None:
    text = LADDER.replace('[arch.x86_64]\nfloor = "avx2"\n', "") + (
        '\n[[variant]]\nname = "base"\narch = "x86_64"\npriority = 0\nflags = ["-march=x86-64", "-mtune=k8"]\n')
    p = project(tmp_path, text)
    script = cmake_variables(load_matrix(p / "isa_matrix.toml"), load_config(p), "x86_64", "gcc")
    assert 'set(CPUBUILD_PROBE_FLAGS "-march=x86-64;-mtune=k8")' in script and 'set(CPUBUILD_FLOOR "")' in script


def test_manifest_records_which_optional_flags_the_compiler_took(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = project(tmp_path)
    out = tmp_path / "_manifest.json"
    code = _main(["--project", str(p), "manifest", "--arch", "x86_64", "--variants", "avx2,amx", "--library", "_vk_{variant}.so",
                  "--probe", "_vk_probe.so", "--optional-flag", "amx:1:-mamx-fp8", "--optional-flag", "amx:0:-mavx10.2",
                  "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    rows = {v["name"]: v for v in json.loads(out.read_text())["variants"]}
    assert rows["amx"]["optional_flags"] == {"-mamx-fp8": True, "-mavx10.2": False}
    assert "optional_flags" not in rows["avx2"]


# (text to replace, replacement, where, problem words)
BROKEN = [
    ('sources = ["csrc/cpu/shm.cpp"]', 'sources = ["/abs/shm.cpp"]', "variant 'avx512' (x86_64), field 'sources'",
     ("relative to", "VARIANT_SOURCE_DIR")),
    ('sources = ["csrc/cpu/shm.cpp"]', 'sources = ["${VLLM}/shm.cpp"]', "field 'sources'", ("relative to",)),
    ('sources = ["csrc/cpu/shm.cpp"]', 'sources = "csrc/cpu/shm.cpp"', "field 'sources'", ("must be a list",)),
    ('compile-definitions = ["CPU_CAPABILITY_AVX512"]', 'compile-definitions = ["-DCPU_CAPABILITY_AVX512"]',
     "field 'compile-definitions'", ("NAME or NAME=VALUE",)),
    ('compile-options = ["-fopenmp"]', 'compile-options = ["-march=native"]', "variant 'avx2' (x86_64), field 'compile-options'",
     ("build machine",)),
    ('link-libraries = ["numa"]', 'link-libraries = ["-lnuma"]', "field 'link-libraries'", ("'numa' for -lnuma",)),
    ('link-libraries = ["numa"]', 'link-libraries = ["numa", "numa"]', "field 'link-libraries'", ("duplicate",)),
    ('{flag = "-mavx10.2"}', '{flag = "-mavx10.2", defines = "X"}', "field 'optional-flags[1]'", ("unknown key 'defines'",)),
    ('{flag = "-mavx10.2"}', '{flag = "mavx10.2"}', "field 'optional-flags[1]'", ("one compiler flag",)),
    ('{flag = "-mavx10.2"}', '"-mavx10.2"', "field 'optional-flags[1]'", ("must be a table",)),
    ('{flag = "-mavx10.2"}', '{flag = "-mamx-fp8"}', "field 'optional-flags'", ("names -mamx-fp8 twice",)),
    ('define = "CPU_CAPABILITY_AMXFP8"', 'define = "A B"', "field 'optional-flags[0]'", ("NAME or NAME=VALUE",)),
    ('floor = "avx2"', 'floor = "avx3"', "arch 'x86_64', field 'floor'", ("no x86_64 variant 'avx3'", "avx2, avx512, amx")),
    ('floor = "avx2"', 'floor = "avx512"', "variant 'avx512' (x86_64), field 'priority'", ("lowest priority",)),
    ('[arch.x86_64]\nfloor = "avx2"\n', "", "arch 'x86_64'", ("has no baseline", 'floor = "<variant>"')),
    ('floor = "avx2"', "floor = 2", "arch 'x86_64', field 'floor'", ("must be a string",)),
]


@pytest.mark.parametrize("old, new, where, words", BROKEN, ids=[f"{b[1][:30]}" for b in BROKEN])
def test_broken_inputs_are_refused_precisely(tmp_path: Path, old: str, new: str, where: str, words: tuple[str, ...]) -> None:
    assert old in LADDER
    path = project(tmp_path, LADDER.replace(old, new, 1)) / "isa_matrix.toml"
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and where in message, message
    for word in words:
        assert word in message, message


def test_a_floor_with_a_baseline_below_it_is_refused(tmp_path: Path) -> None:
    text = LADDER + '\n[[variant]]\nname = "base"\narch = "x86_64"\npriority = 0\nflags = ["-march=x86-64"]\n'
    with pytest.raises(MatrixError, match=r"field 'floor': 'base' has an empty 'requires'.*drop the floor"):
        load_matrix(project(tmp_path, text) / "isa_matrix.toml")


def test_below_the_floor_the_dispatcher_names_what_is_missing(tmp_path: Path) -> None:
    from cpubuild.runtime.errors import NoVariantError
    from cpubuild.runtime.select import select_variant

    m = load_matrix(project(tmp_path) / "isa_matrix.toml")
    variants = m.manifest("x86_64", ["avx2", "amx"], "_vk_{variant}.so", probe="p.so", project={})["variants"]
    sandy_bridge = hardware().closure("x86_64", ["avx", "popcnt"])
    with pytest.raises(NoVariantError) as info:
        select_variant(variants, sandy_bridge, built=["avx2", "amx"], env_prefix="VK", package="vk")
    assert str(info.value) == "no variant for this CPU: vk needs at least 'avx2', and this CPU lacks fma, f16c, avx2"
    assert info.value.missing == ["fma", "f16c", "avx2"] and len(info.value.variants) == 3


def test_doctor_looks_up_linked_system_libraries_with_the_compiler(tmp_path: Path) -> None:
    import shutil as sh

    from cpubuild.wheelbuild import syslibs

    m = load_matrix(project(tmp_path, LADDER.replace('["numa"]', '["numa", "gomp", "no_such_lib_cpubuild"]')) / "isa_matrix.toml")
    assert syslibs.linked_libraries(m, "x86_64") == ("numa", "gomp", "no_such_lib_cpubuild")
    compiler = sh.which("gcc")
    if compiler is None:
        pytest.skip("no gcc")
    statuses = {s.requirement.name: s for s in syslibs.library_statuses(m, "x86_64", "gcc")}
    assert statuses["libgomp"].ok and Path(str(statuses["libgomp"].path)).name.startswith("libgomp.so")
    missing = statuses["libno_such_lib_cpubuild"]
    assert not missing.ok and missing.problem == "gcc finds no libno_such_lib_cpubuild.so"
    assert statuses["libnuma"].requirement.fix == "apt-get install -y libnuma-dev"
    assert statuses["libnuma"].ok == (syslibs.find_library(compiler, "numa") is not None)


def test_the_build_report_lists_the_optional_flags(tmp_path: Path) -> None:
    from cpubuild.wheelbuild.report import optional_flags, render_summary

    m = load_matrix(project(tmp_path) / "isa_matrix.toml")
    manifest = m.manifest("x86_64", ["avx2", "amx"], "_vk_{variant}.so", probe="p.so", project={},
                          optional_flags={"amx": {"-mamx-fp8": True, "-mavx10.2": False}})
    assert optional_flags(manifest) == {"amx": {"-mamx-fp8": True, "-mavx10.2": False}}
    summary = {"version": "1.0", "version_origin": "pyproject", "seconds": 1.0, "stages": {"compile": 1.0},
               "wheel": {"path": "w.whl", "variants": ["avx2", "amx"], "optional_flags": optional_flags(manifest),
                         "policy": "manylinux_2_28_x86_64", "audited": "ok", "isa_ext_check": "off", "size": 1, "sha256": "0"}}
    assert "  optional  amx: -mamx-fp8 accepted, -mavx10.2 rejected" in render_summary(summary).splitlines()
    assert "optional" not in render_summary({**summary, "wheel": {**summary["wheel"], "optional_flags": {}}})


@pytest.mark.parametrize("spec, value", [(">=3.10", "0x030A0000"), (">= 3.9, <4", "0x03090000"), (">=3.13", "0x030D0000"),
                                         ("<3.14", None), (None, None)])
def test_limited_api_from_requires_python(spec: str | None, value: str | None) -> None:
    from cpubuild.pylimited import limited_api

    assert limited_api(spec) == value


def test_cmake_bridge_carries_the_limited_api(tmp_path: Path) -> None:
    p = project(tmp_path)
    bare = cmake_variables(load_matrix(p / "isa_matrix.toml"), load_config(p), "x86_64", "gcc")
    assert 'set(CPUBUILD_PYTHON_LIMITED_API "")' in bare.splitlines()
    (p / "pyproject.toml").write_text(PYPROJECT.replace('version = "1.0"', 'version = "1.0"\nrequires-python = ">=3.11"'))
    floor = cmake_variables(load_matrix(p / "isa_matrix.toml"), load_config(p), "x86_64", "gcc")
    assert 'set(CPUBUILD_PYTHON_LIMITED_API "0x030B0000")' in floor.splitlines()
