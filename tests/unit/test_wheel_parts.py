"""Pure pieces of `cpubuild wheel`: option layering, log parsing, frontend
commands, deterministic zips, the glibc symbol-version rule, the repair policy."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from cpubuild.errors import BuildFailedError, UsageError
from cpubuild.wheelbuild import frontend, glibc, hostcpu, repair, wheelzip
from cpubuild.wheelbuild.options import WheelOptions, layer_options
from cpubuild.wheelbuild.runner import failure_message, log_tail

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
        ({"pyproject": {"colour": "red"}}, "unknown key 'colour'"),
        ({"cli": {"ccache": "maybe"}}, "--ccache"),
        ({"env": {"CPUBUILD_REPAIR": "perhaps"}}, "CPUBUILD_REPAIR"),
    ],
)
def test_bad_values_name_their_source(kwargs: dict[str, dict[str, object]], where: str) -> None:
    with pytest.raises(UsageError, match=where):
        layered(**kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------ frontend log


def test_stage_markers_and_ninja_steps() -> None:
    assert frontend.parse_line("*** Configuring CMake...") == frontend.Event(kind="stage", text="*** Configuring CMake...", stage="configure")
    step = frontend.parse_line("[3/16] Building CXX object CMakeFiles/cpukern_avx512.dir/csrc/kernels/norm.cpp.o")
    assert step is not None and (step.target, step.step, step.total, step.action) == ("avx512", 3, 16, "compile")
    link = frontend.parse_line("[8/16] Linking CXX shared module _cpukern_neon_bf16.so")
    assert link is not None and (link.target, link.action) == ("neon_bf16", "link")
    failed = frontend.parse_line("FAILED: CMakeFiles/cpukern_avx2.dir/csrc/kernels/gemm.cpp.o ")
    assert failed is not None and (failed.kind, failed.target) == ("failed", "avx2")
    created = frontend.parse_line("*** Created cpukern-0.1.0-py3-none-linux_x86_64.whl")
    assert created is not None and created.text == "cpukern-0.1.0-py3-none-linux_x86_64.whl"
    assert frontend.parse_line("ninja: no work to do.") is not None
    assert frontend.parse_line("-- Found Threads: TRUE") is None
    cmake = frontend.parse_line("  cpukern: /usr/bin/g++ cannot build variant 'amx' (flags: -mamx-tile)")
    assert cmake is not None and (cmake.kind, cmake.target) == ("cmake-error", "amx")


@pytest.mark.parametrize("name", ["build", "uv", "pip"])
def test_frontend_commands_pass_every_config_setting(name: str) -> None:
    settings = {"build-dir": "/b/x", "cmake.define.CPUKERN_ISA": "baseline,avx2"}
    cmd = frontend.frontend_command(name, python="/py", project=Path("/src"), outdir=Path("/out"), settings=settings, isolated=False)
    joined = " ".join(cmd)
    assert cmd[-1] == "/src"
    assert "build-dir=/b/x" in joined and "cmake.define.CPUKERN_ISA=baseline,avx2" in joined
    assert "isolation" in joined  # --no-isolation / --no-build-isolation
    isolated = frontend.frontend_command(name, python="/py", project=Path("/src"), outdir=Path("/out"), settings={}, isolated=True)
    assert not any("isolation" in part for part in isolated)


def test_failure_messages_name_the_variant() -> None:
    assert "variant 'avx512'" in failure_message(stage="compile", target="avx512", returncode=1)
    assert "configure" in failure_message(stage="configure", target="amx", returncode=1)
    assert "probe" in failure_message(stage="compile", target="probe", returncode=1)
    assert "csrc/runtime" in failure_message(stage="compile", target="runtime", returncode=1)
    runtime = frontend.parse_line("FAILED: CMakeFiles/cpukern_runtime.dir/csrc/runtime/parallel.cpp.o ")
    assert runtime is not None and runtime.target == "runtime"
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


def test_policy_ceilings_come_from_auditwheel() -> None:
    ceilings = glibc.policy_ceilings("manylinux_2_28_x86_64")
    assert ceilings["GLIBC"] == (2, 28)
    assert glibc.policy_ceilings("manylinux_2_17_x86_64")["GLIBC"] == (2, 17)
    with pytest.raises(ValueError):
        glibc.policy_ceilings("linux_x86_64")


def test_header_is_plain_symver_directives() -> None:
    text = glibc.render_header([glibc.Directive(symbol="pthread_once", version="GLIBC_2.2.5", default="GLIBC_2.34")], "manylinux_2_28_x86_64")
    assert '__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");' in text
    assert text.count("#if") == 1 and text.rstrip().endswith("#endif")


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


# ------------------------------------------------------------ host CPU flags


def test_cpu_flag_names_match_with_or_without_underscores() -> None:
    assert hostcpu.match_flags(["avx512_vnni", "sse4_2", "amx_tile", "avx2"], ["avx512vnni", "sse4_2", "AVX2"]) == {"avx512_vnni", "sse4_2", "avx2"}
