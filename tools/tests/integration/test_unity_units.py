"""Unity units, built for real with plain CMake: `UNITY_BATCH_SIZE <n>` splits
a variant's SOURCES into units of n files, `UNITY_GROUPS` into one unit per
UNITY_GROUP source property (ungrouped files alone), so a project whose every
file parses heavy headers (torch/all.h) parses them once per unit and still
builds its units in parallel. Each source below defines a static helper of
the same name, as files written for separate compilation do: a unit holding
two of them would not compile, so a grouping that ignored the request fails
the build. Bad values are one configure error naming the keyword."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from testsupport import REPO, require, require_tool, run

SOURCE = """\
static int helper(void) {{ return {value}; }}  /* the same name in every file */
__attribute__((visibility("default"))) int ut_{name}(void) {{ return helper(); }}
"""
NAMES = ("one", "two", "three", "four")


def project(tmp_path: Path, call_tail: str, extra: str = "") -> Path:
    require(platform.machine() == "x86_64", "x86_64 host only")
    require_tool("cmake", "gcc")
    root = tmp_path / "ut"
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    run([sys.executable, "-m", "cpubuild", "init", "--name", "ut", "--arch", "x86_64", "-q", str(root)], env=env)
    for value, name in enumerate(NAMES, 1):
        (root / "csrc" / f"{name}.c").write_text(SOURCE.format(name=name, value=value), encoding="utf-8")
    cmake = (root / "CMakeLists.txt").read_text(encoding="utf-8")
    head = cmake[: cmake.index("cpubuild_add_variants(")]
    sources = " ".join(f"csrc/{name}.c" for name in NAMES)
    (root / "CMakeLists.txt").write_text(f"{head}{extra}cpubuild_add_variants(ut\n  SOURCES csrc/ut.c {sources}\n"
                                         f"  {call_tail})\n", encoding="utf-8")
    return root


def configure(root: Path, build: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["cmake", "-S", str(root), "-B", str(build), f"-Dcpubuild_DIR={REPO / 'tools' / 'cpubuild' / 'cmake'}",
                           f"-DPython_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release", "-DCPUBUILD_ISA=avx2"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "tools")},
                          check=False)


def units(build: Path, variant: str) -> dict[str, list[str]]:
    """Each unity file of a variant's target: the sources it includes (file names)."""
    found: dict[str, list[str]] = {}
    for unit in sorted((build / "CMakeFiles" / f"ut_{variant}.dir" / "Unity").glob("unity_*.c")):
        found[unit.name] = [line.split("/")[-1].rstrip('"') for line in unit.read_text().splitlines()
                            if line.startswith("#include")]
    return found


def build_and_check(root: Path, build: Path) -> None:
    proc = configure(root, build)
    assert proc.returncode == 0, proc.stderr
    run(["cmake", "--build", str(build), "-j2"])
    exported = subprocess.run(["nm", "-D", "--defined-only", str(build / "_ut_avx2.so")], capture_output=True,
                              text=True, check=True).stdout
    assert all(f"ut_{name}" in exported for name in NAMES), exported


def test_a_batch_size_makes_units_of_that_many_sources(tmp_path: Path) -> None:
    root = project(tmp_path, "UNITY_BATCH_SIZE 1")
    build_and_check(root, tmp_path / "build")
    made = units(tmp_path / "build", "avx2")
    # one file per unit: the helpers never meet (the variant's marker is a source too)
    assert sorted(name for files in made.values() for name in files if name in {f"{n}.c" for n in NAMES}) == \
        sorted(f"{n}.c" for n in NAMES), made
    assert all(len(files) == 1 for files in made.values()), made


def test_groups_make_one_unit_per_group_and_leave_the_rest_alone(tmp_path: Path) -> None:
    groups = ("set_source_files_properties(csrc/ut.c csrc/one.c PROPERTIES UNITY_GROUP first)\n"
              "set_source_files_properties(csrc/two.c PROPERTIES UNITY_GROUP second)\n")
    root = project(tmp_path, "UNITY_GROUPS", extra=groups)
    # a unit of two files whose helpers clash would not compile: ut.c has none
    build_and_check(root, tmp_path / "build")
    made = units(tmp_path / "build", "avx2")
    assert made == {"unity_first_c.c": ["ut.c", "one.c"], "unity_second_c.c": ["two.c"]}, made
    objects = {p.name for p in (tmp_path / "build" / "CMakeFiles" / "ut_avx2.dir").rglob("*.o")}
    assert {"three.c.o", "four.c.o"} <= objects, objects  # ungrouped: compiled alone


def test_the_whole_variant_in_one_unit_does_not_compile_here(tmp_path: Path) -> None:
    """The control: UNITY puts every source in one unit, and the clashing helpers stop the build."""
    root = project(tmp_path, "UNITY")
    assert configure(root, tmp_path / "build").returncode == 0
    proc = subprocess.run(["cmake", "--build", str(tmp_path / "build"), "-j2"], capture_output=True, text=True,
                          env={**os.environ, "LC_ALL": "C"}, check=False)  # gcc's quotes in ASCII
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "redefinition of 'helper'" in output, output[-2000:]


@pytest.mark.parametrize(("tail", "message"), [
    ("UNITY_BATCH_SIZE 0", "UNITY_BATCH_SIZE must be a positive integer, not '0'"),
    ("UNITY_BATCH_SIZE", "UNITY_BATCH_SIZE must be a positive integer, not ''"),
    ("UNITY_BATCH_SIZE 2 UNITY_GROUPS", "UNITY_BATCH_SIZE and UNITY_GROUPS exclude each other"),
])
def test_bad_unity_settings_are_one_configure_error(tmp_path: Path, tail: str, message: str) -> None:
    proc = configure(project(tmp_path, tail), tmp_path / "build")
    assert proc.returncode != 0
    assert message in " ".join(proc.stderr.split()), proc.stderr
