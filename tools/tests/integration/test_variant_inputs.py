"""Per-variant build inputs and an arch floor, built for real: a project from
`cpubuild init` whose x86_64 matrix starts at avx2 (no baseline kernel) and
whose avx512 variant adds a source, a definition and optional flags (one the
compiler accepts, one it rejects). Built with plain CMake; the package then
runs natively and, under qemu-user CPU models below the floor (Sandy Bridge,
Nehalem), imports, reports "no variant for this CPU" with the missing
features and raises the dispatcher's clean error on an op - never SIGILL."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from testsupport import REPO, require, require_tool, run

QEMU = "qemu-x86_64-static"
MATRIX = """\
schema = 2

[arch.x86_64]
floor = "avx2"

[[variant]]
name = "avx2"
arch = "x86_64"
priority = 10
requires = ["avx2", "fma", "f16c"]
flags = ["-mavx2", "-mfma", "-mf16c"]

[[variant]]
name = "avx512"
extends = "avx2"
requires = ["avx512f", "avx512bw", "avx512vl"]
flags = ["-mavx512f", "-mavx512bw", "-mavx512vl"]
sources = ["csrc/only512.c"]
compile-definitions = ["FL_EXTRA=2"]
optional-flags = [{flag = "-mavx512fp16", define = "FL_FP16"}, {flag = "-mno-such-isa-at-all", define = "FL_NEVER"}]
"""
# compiles only with the variant's definition, the accepted flag's define and not the rejected one's
ONLY512 = """\
#if FL_EXTRA != 2 || !defined(FL_FP16) || defined(FL_NEVER) || !defined(__AVX512FP16__)
#error "per-variant inputs did not arrive"
#endif
__attribute__((visibility("default"))) int fl_only512(void) { return FL_EXTRA; }
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(platform.machine() == "x86_64", "x86_64 host only")
    require_tool("cmake", "gcc")
    work = tmp_path_factory.mktemp("floor")
    project = work / "fl"
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    run([sys.executable, "-m", "cpubuild", "init", "--name", "fl", "--arch", "x86_64", "-q", str(project)], env=env)
    (project / "isa_matrix.toml").write_text(MATRIX, encoding="utf-8")
    (project / "csrc" / "only512.c").write_text(ONLY512, encoding="utf-8")
    build, prefix = work / "build", work / "site"
    run(["cmake", "-S", str(project), "-B", str(build), f"-Dcpubuild_DIR={REPO / 'tools' / 'cpubuild' / 'cmake'}",
         f"-DCMAKE_INSTALL_PREFIX={prefix}", f"-DPython_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"], env=env)
    run(["cmake", "--build", str(build), "-j2"], env=env)
    run(["cmake", "--install", str(build)], env=env)
    for src in (project / "src" / "fl").glob("*.py"):
        shutil.copy(src, prefix / "fl" / src.name)
    return prefix


def test_the_build_has_no_baseline_and_records_optional_flags(installed: Path) -> None:
    manifest = json.loads((installed / "fl" / "_manifest.json").read_text())
    assert manifest["floor"] == "avx2"
    assert [(v["name"], v["built"]) for v in manifest["variants"]] == [("avx2", True), ("avx512", True)]
    avx512 = manifest["variants"][1]
    assert avx512["optional_flags"] == {"-mavx512fp16": True, "-mno-such-isa-at-all": False}
    symbols = {name: subprocess.run(["nm", "-D", "--defined-only", str(installed / "fl" / f"_fl_{name}.so")],
                                    capture_output=True, text=True, check=True).stdout for name in ("avx2", "avx512")}
    assert "fl_only512" in symbols["avx512"] and "fl_only512" not in symbols["avx2"]  # a source of avx512 only


def _python(installed: Path, args: list[str], qemu_model: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FL_")}
    env["PYTHONPATH"] = str(installed)
    cmd = [sys.executable, *args] if qemu_model is None else [QEMU, "-cpu", qemu_model, sys.executable, *args]
    return subprocess.run(cmd, cwd=installed, env=env, capture_output=True, text=True, timeout=300, check=False)


OP = "import fl\nfrom fl._cpubuild import DispatchError\ntry:\n    fl.dot([1.0, 2.0], [3.0, 4.0])\nexcept DispatchError as exc:\n    print(type(exc).__name__, exc)\n"


def test_an_avx2_host_runs_the_floor(installed: Path) -> None:
    proc = _python(installed, ["-c", "import fl; print(fl.selected_isa(), fl.dot([1.0, 2.0], [3.0, 4.0]))"])
    if proc.returncode != 0 and "no variant for this CPU" in proc.stderr:
        pytest.skip("host fact: this CPU is below avx2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[1] == "11.0"


@pytest.mark.qemu
@pytest.mark.parametrize("model, lacking", [("SandyBridge", "fma, f16c, avx2"), ("Nehalem", "avx, fma, f16c, avx2")])
def test_below_the_floor_imports_and_says_what_is_missing(installed: Path, model: str, lacking: str) -> None:
    require_tool(QEMU)
    report = _python(installed, ["-m", "fl"], qemu_model=model)
    assert report.returncode == 1, report.stdout + report.stderr
    assert f"error: no variant for this CPU: fl needs at least 'avx2', and this CPU lacks {lacking}" in report.stderr
    assert "avx2" in report.stdout and "cannot run" in report.stdout  # the variant table is still there
    op = _python(installed, ["-c", OP], qemu_model=model)
    assert op.returncode == 0, op.stderr  # no SIGILL, no traceback
    assert op.stdout.startswith("NoVariantError no variant for this CPU"), op.stdout


def test_plain_cmake_configure_of_a_torch_project_finds_the_build_python_torch(tmp_path: Path) -> None:
    """No -DCPUBUILD_TORCH_DIR: the torch of the build's Python (the lookup's code once held a ';', which CMake split)."""
    require_tool("cmake")
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, check=False)
    require(probe.returncode == 0, f"no torch for {sys.executable}")
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    project = tmp_path / "tp"
    run([sys.executable, "-m", "cpubuild", "init", "--name", "tp", "--kind", "torch", "--arch", "x86_64", "-q", str(project)], env=env)
    proc = run(["cmake", "-S", str(project), "-B", str(tmp_path / "build"), f"-Dcpubuild_DIR={REPO / 'tools' / 'cpubuild' / 'cmake'}",
                f"-DPython_EXECUTABLE={sys.executable}"], env=env)
    torch_dir = Path(subprocess.run([sys.executable, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
                                    capture_output=True, text=True, check=True).stdout.strip())
    assert f"cpubuild: torch {probe.stdout.strip().split('+')[0]}" in proc.stdout and str(torch_dir) in proc.stdout, proc.stdout


DEP_CMAKE = "cmake_minimum_required(VERSION 3.21)\nproject(dep3 C)\noption(DEP3_TWICE \"\" OFF)\n" \
            "add_library(dep3 STATIC dep3.c)\nif(DEP3_TWICE)\n  target_compile_definitions(dep3 PRIVATE DEP3_FACTOR=2)\nendif()\n"
DEP_SOURCE = """\
#if !defined(__AVX2__) || defined(__AVX512F__) || !defined(DEP3_FACTOR)
#error "built with the floor's flags and its OPTIONS"
#endif
int dep3_scale(int x) { return x * DEP3_FACTOR; }
"""


def test_a_third_party_cmake_project_is_built_once_with_the_floor_flags(tmp_path: Path) -> None:
    require(platform.machine() == "x86_64", "x86_64 host only")
    require_tool("cmake", "gcc")
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    project, dep = tmp_path / "fl", tmp_path / "cache" / "dep3"
    run([sys.executable, "-m", "cpubuild", "init", "--name", "fl", "--arch", "x86_64", "-q", str(project)], env=env)
    (project / "isa_matrix.toml").write_text(MATRIX, encoding="utf-8")
    (project / "csrc" / "only512.c").write_text(ONLY512, encoding="utf-8")
    dep.mkdir(parents=True)
    (dep / "CMakeLists.txt").write_text(DEP_CMAKE, encoding="utf-8")
    (dep / "dep3.c").write_text(DEP_SOURCE, encoding="utf-8")
    cmake = (project / "CMakeLists.txt").read_text()
    (project / "CMakeLists.txt").write_text(cmake.replace(
        "cpubuild_add_variants(fl\n", f'cpubuild_add_dependency(dep3 SOURCE_DIR "{dep}" OPTIONS DEP3_TWICE=ON)\n'
        "cpubuild_add_variants(fl\n  LINK_LIBRARIES dep3\n"), encoding="utf-8")
    (project / "csrc" / "use_dep.c").write_text(
        'int dep3_scale(int x);\n__attribute__((visibility("default"))) int fl_dep(int x) { return dep3_scale(x); }\n')
    (project / "CMakeLists.txt").write_text((project / "CMakeLists.txt").read_text().replace(
        "SOURCES csrc/fl.c", "SOURCES csrc/fl.c csrc/use_dep.c"), encoding="utf-8")
    build = tmp_path / "build"
    run(["cmake", "-S", str(project), "-B", str(build), f"-Dcpubuild_DIR={REPO / 'tools' / 'cpubuild' / 'cmake'}",
         f"-DPython_EXECUTABLE={sys.executable}"], env=env)
    out = run(["cmake", "--build", str(build), "-j2"], env=env).stdout
    assert out.count("Building C object cpubuild-deps/dep3/CMakeFiles/dep3.dir/dep3.c.o") == 1, out
    for variant in ("avx2", "avx512"):
        symbols = subprocess.run(["nm", str(build / f"_fl_{variant}.so")], capture_output=True, text=True, check=True).stdout
        assert " dep3_scale" in symbols and "fl_dep" in symbols, variant
    import ctypes

    assert ctypes.CDLL(str(build / "_fl_avx2.so")).fl_dep(21) == 42  # dlopen only; the call runs dep3's scalar code
