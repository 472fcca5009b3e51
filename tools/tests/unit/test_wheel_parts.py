"""Pure pieces of `cpubuild wheel`: option layering, log parsing (for any
project's target names), frontend commands, deterministic zips, relabelled
wheels, the glibc symbol-version rule, the repair policy, host CPU flags."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cpubuild import hostprobe
from cpubuild.errors import BuildFailedError, UsageError
from cpubuild.hardware import hardware, host_arch
from cpubuild.toolchain import glibc, repair, wheelzip
from cpubuild.wheelbuild import frontend
from cpubuild.wheelbuild.options import WheelOptions, layer_options
from cpubuild.wheelbuild.runner import failure_message, log_tail
from testsupport import require_tool

# ------------------------------------------------------------ options


def layered(pyproject: dict[str, object] | None = None, env: dict[str, str] | None = None, cli: dict[str, object] | None = None) -> WheelOptions:
    return layer_options(pyproject=pyproject or {}, environ=env or {}, cli=cli or {}, project=Path("/proj"), cwd=Path("/cwd"))


def test_defaults() -> None:
    o = layered()
    assert o == WheelOptions()


def test_precedence_pyproject_then_environment_then_command_line() -> None:
    assert layered(pyproject={"frontend": "uv"}).frontend == "uv"
    assert layered(pyproject={"frontend": "uv"}, env={"CPUBUILD_FRONTEND": "pip"}).frontend == "pip"
    assert layered(pyproject={"frontend": "uv"}, env={"CPUBUILD_FRONTEND": "pip"}, cli={"frontend": "build"}).frontend == "build"
    # an option not given on the command line does not erase the layers below
    assert layered(env={"CPUBUILD_JOBS": "3"}, cli={"jobs": None, "isa": ()}).jobs == 3


def test_isa_lists_from_every_layer() -> None:
    assert layered(pyproject={"isa": ["avx2", "avx512"]}).isa == ("avx2", "avx512")
    assert layered(env={"CPUBUILD_ISA": "avx2,amx"}).isa == ("avx2", "amx")
    assert layered(env={"CPUBUILD_ISA": "avx2"}, cli={"isa": ("avx512",)}).isa == ("avx512",)


def test_paths_are_relative_to_where_they_were_written() -> None:
    assert layered(pyproject={"out": "dist"}).out == Path("/proj/dist")
    assert layered(env={"CPUBUILD_OUT": "dist"}).out == Path("/cwd/dist")
    assert layered(cli={"build_root": "/abs"}).build_root == Path("/abs")


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        ({"env": {"CPUBUILD_JOBS": "many"}}, "CPUBUILD_JOBS"),
        ({"env": {"CPUBUILD_JOBS": "0"}}, "CPUBUILD_JOBS"),
        ({"pyproject": {"frontend": "poetry"}}, "pyproject.toml"),
        ({"pyproject": {"colour": "red"}}, "colour: unknown key"),
        ({"cli": {"ccache": "maybe"}}, "--ccache"),
        ({"env": {"CPUBUILD_REPAIR": "perhaps"}}, "CPUBUILD_REPAIR"),
    ],
)
def test_bad_values_name_their_source(kwargs: dict[str, dict[str, object]], where: str) -> None:
    with pytest.raises(UsageError, match=where):
        layered(**kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------ frontend log


CPUKERN_VARIANTS = ("baseline", "avx2", "avx512", "avx512vnni", "avx512bf16", "amx", "neon", "neon_bf16")


def test_stage_markers_and_ninja_steps() -> None:
    assert frontend.parse_line("*** Configuring CMake...") == frontend.Event(kind="stage", text="*** Configuring CMake...", stage="configure")
    step = frontend.parse_line("[3/16] Building CXX object CMakeFiles/cpukern_avx512.dir/csrc/kernels/norm.cpp.o", CPUKERN_VARIANTS)
    assert step is not None and (step.target, step.step, step.total, step.action) == ("avx512", 3, 16, "compile")
    link = frontend.parse_line("[8/16] Linking CXX shared module _cpukern_neon_bf16.so", CPUKERN_VARIANTS)
    assert link is not None and (link.target, link.action) == ("neon_bf16", "link")
    failed = frontend.parse_line("FAILED: CMakeFiles/cpukern_avx2.dir/csrc/kernels/gemm.cpp.o ", CPUKERN_VARIANTS)
    assert failed is not None and (failed.kind, failed.target) == ("failed", "avx2")
    created = frontend.parse_line("*** Created cpukern-0.1.0-py3-none-linux_x86_64.whl")
    assert created is not None and created.text == "cpukern-0.1.0-py3-none-linux_x86_64.whl"
    assert frontend.parse_line("ninja: no work to do.") is not None
    assert frontend.parse_line("-- Found Threads: TRUE") is None
    cmake = frontend.parse_line("  cpubuild: /usr/bin/g++ cannot build variant 'amx' (flags: -mamx-tile)")
    assert cmake is not None and (cmake.kind, cmake.target) == ("cmake-error", "amx")
    assert frontend.parse_line("CMake Error at CMakeLists.txt:3 (find_package):").kind == "cmake-error"  # type: ignore[union-attr]


DOTLIB = ("baseline", "avx2", "avx512", "avx512vnni", "neon", "neon_dotprod")


@pytest.mark.parametrize(
    ("line", "kind", "target", "action"),
    [
        ("[1/9] Building C object CMakeFiles/dotlib_avx2.dir/src/dot.c.o", "step", "avx2", "compile"),
        ("[2/9] Building C object CMakeFiles/dotlib_avx512.dir/src/dot.c.o", "step", "avx512", "compile"),
        # a variant whose name starts with another's is not taken for the shorter one
        ("[3/9] Building C object CMakeFiles/dotlib_avx512vnni.dir/src/dot.c.o", "step", "avx512vnni", "compile"),
        ("[4/9] Linking C shared module _dotlib_avx512vnni.so", "step", "avx512vnni", "link"),
        ("[5/9] Linking C shared module _dotlib_avx512.so", "step", "avx512", "link"),
        ("[6/9] Building C object CMakeFiles/dotlib_probe.dir/opt/cpubuild/runtime/probe.c.o", "step", "probe", "compile"),
        ("[7/9] Linking C shared module _dotlib_probe.so", "step", "probe", "link"),
        ("[8/9] Building C object CMakeFiles/dotlib_common.dir/src/tables.c.o", "step", "common", "compile"),
        ("[9/9] Linking C shared module _dotlib_neon_dotprod.dylib", "step", "neon_dotprod", "link"),
        ("[1/4] Building C object CMakeFiles/dotlib_neon.dir/src/neon_probe.c.o", "step", "neon", "compile"),  # not 'probe'
        ("[2/4] Building C object CMakeFiles/dotlib_avx2.dir/Unity/unity_0_c.c.o", "step", "avx2", "compile"),
        ("[3/4] Generating _manifest.json", "step", None, "compile"),
        ("FAILED: CMakeFiles/dotlib_avx512vnni.dir/src/dot.c.o ", "failed", "avx512vnni", None),
        ("FAILED: _dotlib_probe.so ", "failed", "probe", None),
        ("  cpubuild: /usr/bin/cc cannot build variant 'avx512vnni' (flags: -mavx512vnni)", "cmake-error", "avx512vnni", None),
        ("  cpubuild: unknown variant 'avx3' for x86_64 (known: baseline;avx2)", "cmake-error", "avx3", None),
        # a warning: the build goes on without the variant, which is no failure
        ("  cpubuild: skipping variant 'avx512vnni': /usr/bin/cc rejects its flags", "skipped", "avx512vnni", None),
    ],
)
def test_steps_of_another_project_are_attributed(line: str, kind: str, target: str | None, action: str | None) -> None:
    event = frontend.parse_line(line, DOTLIB)
    assert event is not None
    assert (event.kind, event.target, event.action) == (kind, target, action)


def test_without_the_variant_list_only_probe_and_common_are_known() -> None:
    step = frontend.parse_line("[1/9] Building C object CMakeFiles/dotlib_avx2.dir/src/dot.c.o")
    assert step is not None and step.target is None and step.step == 1
    probe = frontend.parse_line("[2/9] Linking C shared module _dotlib_probe.so")
    assert probe is not None and probe.target == "probe"
    # the project's name is not a variant: 'dotlib_avx2x' is no step of avx2
    other = frontend.parse_line("[3/9] Building C object CMakeFiles/dotlib_avx2x.dir/a.c.o", DOTLIB)
    assert other is not None and other.target is None


def test_a_skipped_variant_is_not_the_failed_target(tmp_path: Path) -> None:
    """The frontend reports the first *failing* target, not a variant CMake skipped on the way."""
    script = tmp_path / "fake_build.py"
    script.write_text(
        "print('*** Configuring CMake...')\n"
        "print(\"  cpubuild: skipping variant 'avx512vnni': /usr/bin/cc rejects its flags\")\n"
        "print('*** Building project with Ninja...')\n"
        "print('[1/3] Building C object CMakeFiles/dotlib_avx2.dir/src/dot.c.o')\n"
        "print('FAILED: CMakeFiles/dotlib_avx2.dir/src/dot.c.o ')\n"
        "raise SystemExit(1)\n"
    )
    events: list[frontend.Event] = []
    result = frontend.run_frontend([sys.executable, str(script)], env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path, log=io.StringIO(),
                                   on_event=events.append, outdir=tmp_path, variants=DOTLIB)
    assert result.returncode == 1 and result.wheel is None
    assert result.failed_target == "avx2"
    assert [e.kind for e in events] == ["stage", "skipped", "stage", "step", "failed"]


@pytest.mark.parametrize("name", ["build", "uv", "pip"])
def test_frontend_commands_pass_every_config_setting(name: str) -> None:
    settings = {"build-dir": "/b/x", "cmake.define.CPUBUILD_ISA": "baseline,avx2"}
    cmd = frontend.frontend_command(name, python="/py", project=Path("/src"), outdir=Path("/out"), settings=settings, isolated=False)
    joined = " ".join(cmd)
    assert cmd[-1] == "/src"
    assert "build-dir=/b/x" in joined and "cmake.define.CPUBUILD_ISA=baseline,avx2" in joined
    assert "isolation" in joined  # --no-isolation / --no-build-isolation
    isolated = frontend.frontend_command(name, python="/py", project=Path("/src"), outdir=Path("/out"), settings={}, isolated=True)
    assert not any("isolation" in part for part in isolated)


def test_failure_messages_name_the_variant() -> None:
    assert "variant 'avx512'" in failure_message(stage="compile", target="avx512", returncode=1)
    assert "configure" in failure_message(stage="configure", target="amx", returncode=1)
    assert "probe" in failure_message(stage="compile", target="probe", returncode=1)
    assert "COMMON_SOURCES" in failure_message(stage="compile", target="common", returncode=1)
    assert "during start-up" in failure_message(stage=None, target=None, returncode=2)
    common = frontend.parse_line("FAILED: CMakeFiles/cpukern_common.dir/csrc/runtime/parallel.cpp.o ")
    assert common is not None and common.target == "common"
    log = "\n".join([f"line {i}" for i in range(100)] + ["FAILED: x.o", "error: boom", "ninja: build stopped"])
    assert log_tail(log).startswith("FAILED: x.o")
    assert log_tail("\n".join(str(i) for i in range(100))).splitlines()[-1] == "99"


# ------------------------------------------------------------ deterministic zips


def write_wheel(path: Path, entries: list[tuple[str, bytes, int, tuple[int, int, int, int, int, int]]]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data, mode, when in entries:
            info = zipfile.ZipInfo(name, date_time=when)
            info.external_attr = (0o100000 | mode) << 16
            z.writestr(info, data)


def test_normalize_makes_archives_depend_only_on_content(tmp_path: Path) -> None:
    files = [
        ("pkg/b.py", b"b", 0o664, (2024, 1, 2, 3, 4, 6)),
        ("pkg-1.0.dist-info/RECORD", b"r", 0o600, (2020, 1, 1, 0, 0, 0)),
        ("pkg/a.so", b"\x7fELF", 0o775, (2023, 5, 5, 5, 5, 6)),
        ("pkg-1.0.dist-info/WHEEL", b"w", 0o644, (2021, 1, 1, 0, 0, 0)),
    ]
    one, two = tmp_path / "one.whl", tmp_path / "two.whl"
    write_wheel(one, files)
    write_wheel(two, [(n, d, 0o644, (2030, 12, 31, 23, 59, 58)) if n.endswith(".py") else (n, d, m, w) for n, d, m, w in reversed(files)])
    for w in (one, two):
        wheelzip.normalize(w, 1_700_000_000)
    assert one.read_bytes() == two.read_bytes()
    with zipfile.ZipFile(one) as z:
        infos = z.infolist()
    assert [i.filename for i in infos] == ["pkg/a.so", "pkg/b.py", "pkg-1.0.dist-info/WHEEL", "pkg-1.0.dist-info/RECORD"]
    assert {i.date_time for i in infos} == {wheelzip.zip_time(1_700_000_000)}
    assert [(i.external_attr >> 16) & 0o777 for i in infos] == [0o755, 0o644, 0o644, 0o644]
    assert not list(tmp_path.glob(".*"))  # no temp files left


# ------------------------------------------------------------ glibc symbol versions


CEILINGS = {"GLIBC": (2, 28), "GLIBCXX": (3, 4, 24)}


def test_moved_symbol_is_bound_to_its_newest_allowed_version() -> None:
    # pthread_once: GLIBC_2.34 by default, the same code as GLIBC_2.2.5
    assert glibc.choose([("GLIBC_2.2.5", True), ("GLIBC_2.34", False)], CEILINGS) == ("GLIBC_2.2.5", "GLIBC_2.34")
    assert glibc.choose([("GLIBC_2.2.5", True), ("GLIBC_2.27", True), ("GLIBC_2.29", False)], CEILINGS) == ("GLIBC_2.27", "GLIBC_2.29")
    assert glibc.choose([("GLIBCXX_3.4.11", True), ("GLIBCXX_3.4.30", False)], CEILINGS) == ("GLIBCXX_3.4.11", "GLIBCXX_3.4.30")


def test_symbols_already_allowed_or_without_older_versions_are_left_alone() -> None:
    assert glibc.choose([("GLIBC_2.2.5", True), ("GLIBC_2.14", False)], CEILINGS) is None  # memcpy
    assert glibc.choose([("GLIBC_2.34", False)], CEILINGS) is None  # new in 2.34: nothing to bind to
    assert glibc.choose([("GCC_12.0.0", False), ("GCC_3.0", True)], CEILINGS) is None  # prefix without a ceiling
    assert glibc.choose([("GLIBCXX_3.4.30", True)], CEILINGS) is None  # no default version


STR_NEW = "_ZNKRSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEE3strEv"  # str() const&, C++20
STR_OLD = "_ZNKSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEE3strEv"  # str() const


def test_cxx20_stringstream_str_is_bound_to_the_cxx11_one() -> None:
    """No older version of C++20's `str() const&` exists (GLIBCXX_3.4.29): it is bound to `str() const`."""
    assert glibc.EQUIVALENTS[STR_NEW] == STR_OLD
    table = {STR_NEW: [("GLIBCXX_3.4.29", False)], STR_OLD: [("GLIBCXX_3.4.21", False)]}
    assert glibc.choose_equivalent(STR_NEW, table, CEILINGS) == glibc.Directive(
        symbol=STR_NEW, version="GLIBCXX_3.4.21", default="GLIBCXX_3.4.29", target=STR_OLD)
    text = glibc.render_header([glibc.choose_equivalent(STR_NEW, table, CEILINGS)], "manylinux_2_28_x86_64")  # type: ignore[list-item]
    assert f'__asm__(".symver {STR_NEW},{STR_OLD}@GLIBCXX_3.4.21");' in text


def test_equivalents_only_where_needed_and_possible() -> None:
    table = {STR_NEW: [("GLIBCXX_3.4.29", False)], STR_OLD: [("GLIBCXX_3.4.21", False)]}
    assert glibc.choose_equivalent(STR_NEW, table, {"GLIBCXX": (3, 4, 30)}) is None  # allowed as it is
    assert glibc.choose_equivalent(STR_NEW, {STR_NEW: table[STR_NEW]}, CEILINGS) is None  # no equivalent defined
    assert glibc.choose_equivalent(STR_OLD, table, CEILINGS) is None  # not listed
    assert glibc.choose_equivalent(STR_NEW, {STR_NEW: table[STR_NEW], STR_OLD: [("GLIBCXX_3.4.26", False)]},
                                   CEILINGS) is None  # the equivalent is above the ceiling too


def test_policy_ceilings_come_from_auditwheel() -> None:
    ceilings = glibc.policy_ceilings("manylinux_2_28_x86_64")
    assert ceilings["GLIBC"] == (2, 28)
    assert glibc.policy_ceilings("manylinux_2_17_x86_64")["GLIBC"] == (2, 17)
    with pytest.raises(ValueError):
        glibc.policy_ceilings("linux_x86_64")


def test_header_is_plain_symver_directives() -> None:
    text = glibc.render_header([glibc.Directive(symbol="pthread_once", version="GLIBC_2.2.5", default="GLIBC_2.34")], "manylinux_2_28_x86_64")
    assert '__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");' in text
    assert text.startswith("/*") and text.count("#if defined(__linux__)") == 1 and text.rstrip().endswith("#endif")


def test_single_threaded_standin_only_below_glibc_2_32() -> None:
    """libstdc++ 11+ reads glibc 2.32's __libc_single_threaded (no older version exists): below a 2.32
    policy it is renamed to a hidden always-0 stand-in; at 2.34 the real one is fine."""
    low = glibc.render_header([], "manylinux_2_28_x86_64")
    assert "#define __libc_single_threaded cpubuild_libc_single_threaded" in low
    assert 'visibility("hidden"))) char cpubuild_libc_single_threaded = 0;' in low
    assert "__libc_single_threaded" not in glibc.render_header([], "manylinux_2_34_x86_64")


@pytest.mark.parametrize("compiler, suffix", [("gcc", ".c"), ("g++", ".cpp")])
def test_the_symver_header_compiles_without_a_warning(compiler: str, suffix: str, tmp_path: Path) -> None:
    """Force-included into every unit of every project: one warning in it is a warning per unit
    (a one-line extern "C" on the stand-in's definition drew one in every C++ unit)."""
    require_tool(compiler)
    header = tmp_path / "symver.h"
    header.write_text(glibc.render_header([glibc.Directive(symbol="pthread_once", version="GLIBC_2.2.5",
                                                            default="GLIBC_2.34")], "manylinux_2_28_x86_64"))
    source = tmp_path / f"unit{suffix}"
    source.write_text("#include <stdio.h>\nint unit(void) { return puts(\"x\"); }\n")
    proc = subprocess.run([compiler, "-Wall", "-Wextra", "-Werror", "-include", str(header), "-c", str(source),
                           "-o", str(tmp_path / "unit.o")], capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr


# ------------------------------------------------------------ repair policy


def test_policy_comparison() -> None:
    assert repair.policy_at_most("manylinux_2_24_x86_64", "manylinux_2_28_x86_64")
    assert repair.policy_at_most("manylinux_2_28_x86_64", "manylinux_2_28_x86_64")
    assert not repair.policy_at_most("manylinux_2_34_x86_64", "manylinux_2_28_x86_64")
    assert not repair.policy_at_most("linux_x86_64", "manylinux_2_28_x86_64")


def test_isa_extension_check_is_disabled_only_for_guarded_variant_libraries() -> None:
    guarded = ["cpukern/_cpukern_avx512.so", "cpukern/_cpukern_avx2.so"]
    note = repair.isa_check_decision({"cpukern/_cpukern_avx512.so": "x86-64-v4"}, guarded)
    assert note.startswith("disabled") and "_cpukern_avx512.so (x86-64-v4)" in note
    with pytest.raises(BuildFailedError, match=r"_cpukern_probe\.so"):
        repair.isa_check_decision({"cpukern/_cpukern_probe.so": "x86-64-v2", "cpukern/_cpukern_avx2.so": "x86-64-v3"}, guarded)


# ------------------------------------------------------------ relabelled wheels


def make_wheel(tmp_path: Path, *, metadata: str | None = None) -> Path:
    wheel = tmp_path / "dot_lib-1.2.0-py3-none-manylinux_2_28_x86_64.whl"
    meta = metadata or "Metadata-Version: 2.1\nName: dot-lib\nVersion: 1.2.0\nSummary: dots\n\nRelease notes\nVersion: 1.1.0 fixed x\n"
    files = {
        "dotlib/__init__.py": b"VALUE = 1\n",
        "dotlib/_manifest.json": b'{"schema": 2}',
        "dot_lib-1.2.0.data/scripts/dotlib-check": b"#!/bin/sh\n",
        "dot_lib-1.2.0.dist-info/METADATA": meta.encode(),
        "dot_lib-1.2.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nTag: py3-none-manylinux_2_28_x86_64\n",
        "dot_lib-1.2.0.dist-info/RECORD": b"stale,sha256=x,1\n",
    }
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100755 if name.endswith(("check", ".so")) else 0o100644) << 16
            z.writestr(info, data)
    return wheel


def test_set_version_renames_everything_that_carries_the_version(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    new = wheelzip.set_version(wheel, "1.2.0+cpu.avx2")
    assert new.name == "dot_lib-1.2.0+cpu.avx2-py3-none-manylinux_2_28_x86_64.whl"
    assert not wheel.exists()
    with zipfile.ZipFile(new) as z:
        names = z.namelist()
        metadata = z.read("dot_lib-1.2.0+cpu.avx2.dist-info/METADATA").decode()
        record = z.read("dot_lib-1.2.0+cpu.avx2.dist-info/RECORD").decode()
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in z.infolist()}
    assert sorted(names) == sorted([
        "dotlib/__init__.py", "dotlib/_manifest.json", "dot_lib-1.2.0+cpu.avx2.data/scripts/dotlib-check",
        "dot_lib-1.2.0+cpu.avx2.dist-info/METADATA", "dot_lib-1.2.0+cpu.avx2.dist-info/WHEEL",
        "dot_lib-1.2.0+cpu.avx2.dist-info/RECORD",
    ])
    assert names[-1].endswith("/RECORD")
    assert "Version: 1.2.0+cpu.avx2\n" in metadata and "Name: dot-lib\n" in metadata
    assert metadata.endswith("Release notes\nVersion: 1.1.0 fixed x\n")  # the description is left alone
    assert "stale" not in record and record.splitlines()[-1] == "dot_lib-1.2.0+cpu.avx2.dist-info/RECORD,,"
    assert wheelzip.record_problems(new) == []
    assert modes["dot_lib-1.2.0+cpu.avx2.data/scripts/dotlib-check"] == 0o755
    contents = wheelzip.inspect(new)
    assert (contents.name, contents.version) == ("dot-lib", "1.2.0+cpu.avx2")
    assert contents.manifest == {"schema": 2} and contents.manifest_dir == "dotlib"


def test_set_version_then_normalize_is_deterministic(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = wheelzip.set_version(make_wheel(tmp_path / "a"), "1.2.0+cpu")
    two = wheelzip.set_version(make_wheel(tmp_path / "b"), "1.2.0+cpu")
    for w in (one, two):
        wheelzip.normalize(w, 1_700_000_000)
    assert one.read_bytes() == two.read_bytes()
    assert wheelzip.record_problems(one) == []


def test_set_version_to_the_same_version_keeps_the_file(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    assert wheelzip.set_version(wheel, "1.2.0") == wheel and wheel.is_file()
    assert wheelzip.record_problems(wheel) == []


def test_record_problems_finds_edits(tmp_path: Path) -> None:
    good = wheelzip.set_version(make_wheel(tmp_path), "1.2.0+cpu")
    bad = tmp_path / "bad.whl"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"VALUE = 2\n" if info.filename == "dotlib/__init__.py" else data)
        dst.writestr("dotlib/extra.py", b"")
    assert sorted(wheelzip.record_problems(bad)) == ["dotlib/__init__.py: hash differs from RECORD", "dotlib/extra.py: not in RECORD"]
    norecord = tmp_path / "norecord.whl"
    with zipfile.ZipFile(norecord, "w") as z:
        z.writestr("a.py", "")
    assert wheelzip.record_problems(norecord) == ["no RECORD"]


# ------------------------------------------------------------ host CPU flags


def test_cpu_flag_names_match_with_or_without_underscores() -> None:
    assert hostprobe.match_flags(["avx512_vnni", "sse4_2", "amx_tile", "avx2"], ["avx512vnni", "sse4_2", "AVX2"]) == {"avx512_vnni", "sse4_2", "avx2"}


def test_cpu_flags_use_the_cpuinfo_spelling() -> None:
    """/proc/cpuinfo and py-cpuinfo call SSE3 'pni': the hardware data says so."""
    table = hardware().features["x86_64"]
    aliases = {n: f.cpuinfo_name for n, f in table.items()}
    haswell_flags = ["fpu", "sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "avx", "fma", "f16c", "avx2", "bmi1", "bmi2"]
    found = hostprobe.match_flags(table, haswell_flags, aliases)
    assert found == {"sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "popcnt", "avx", "fma", "f16c", "avx2", "bmi1", "bmi2"}
    assert "sse3" not in hostprobe.match_flags(table, haswell_flags)  # without the spelling it is missed
    arm = hardware().features["aarch64"]
    assert hostprobe.match_flags(arm, ["fp", "asimd", "asimdhp", "asimddp", "asimdfhm", "sve", "sve2"]) == {
        "asimd", "asimdhp", "asimddp", "asimdfhm", "sve", "sve2"}


def test_host_features_of_another_arch_are_unavailable() -> None:
    other = next(a for a in hardware().arches if a != host_arch())
    features = hostprobe.host_features(other, hardware().features[other])
    assert features.found == frozenset() and features.source == f"unavailable: the host is {host_arch()}"


def test_a_cxx20_message_built_with_an_ostringstream_stays_below_the_policy(tmp_path: Path) -> None:
    """The real header from this host's libstdc++: a C++20 library that returns an ostringstream's
    str() (as torch's c10::str does, not inlined here at -O0) needs no GLIBCXX_3.4.29 and works."""
    require_tool("g++", "objdump")
    header, _ = glibc.write_header(["g++"], "manylinux_2_28_x86_64", tmp_path)
    source, main = tmp_path / "msg.cpp", tmp_path / "main.cpp"
    source.write_text('#include <sstream>\n#include <string>\nstd::string message(int x) '
                      '{ std::ostringstream ss; ss << "v=" << x; return ss.str(); }\n')
    main.write_text('#include <cstdio>\n#include <string>\nstd::string message(int);\n'
                    'int main() { std::puts(message(42).c_str()); }\n')
    library = tmp_path / "libmsg.so"
    subprocess.run(["g++", "-std=gnu++20", "-O0", "-fPIC", "-shared", "-include", str(header), str(source), "-o",
                    str(library)], check=True)
    needed = subprocess.run(["objdump", "-T", str(library)], capture_output=True, text=True, check=True).stdout
    assert f"GLIBCXX_3.4.21) {STR_OLD}" in " ".join(needed.split()) and STR_NEW not in needed, needed
    assert "GLIBCXX_3.4.29" not in needed, needed
    subprocess.run(["g++", str(main), "-L", str(tmp_path), "-lmsg", "-o", str(tmp_path / "main"),
                    f"-Wl,-rpath,{tmp_path}"], check=True)
    assert subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True).stdout == "v=42\n"
