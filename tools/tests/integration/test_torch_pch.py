"""Precompiled headers per variant (cpubuild_add_variants PRECOMPILE_HEADERS):
every source of a torch project includes torch's headers (vLLM's include
<torch/all.h>; <torch/library.h> here keeps the test short); each variant
precompiles them once with its own flags, every unit really uses it (with the
manylinux symver header `cpubuild wheel` force-includes), the ops work, and a
rebuild from an empty build directory is served by ccache (cpubuild's
launcher sets the sloppiness ccache needs for PCH builds)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cpubuild.toolchain import glibc
from testsupport import REPO, require, require_tool, run

pytestmark = pytest.mark.slow  # builds torch extensions (minutes on 2 cores)

KERNEL = """\
#include <torch/library.h>

at::Tensor tp_twice(const at::Tensor& x) { return x.mul(2); }
"""
BINDINGS = """\
#include <torch/library.h>

at::Tensor tp_twice(const at::Tensor& x);

TORCH_LIBRARY(tp, m) { m.def("twice(Tensor x) -> Tensor", &tp_twice); }
"""
CMAKELISTS = """\
cmake_minimum_required(VERSION 3.21)
project(tp LANGUAGES C CXX)
find_package(cpubuild CONFIG REQUIRED)
cpubuild_add_variants(tp SOURCES csrc/kernel.cpp csrc/bindings.cpp PRECOMPILE_HEADERS <torch/library.h>)
"""


def ccache_stats(env: dict[str, str]) -> dict[str, int]:
    out = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split("\t", 1) for line in out.splitlines() if "\t" in line) if v.strip().isdigit()}


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, int]]:
    require_tool("cmake", "g++", "ccache")
    require(subprocess.run([sys.executable, "-c", "import torch"], check=False).returncode == 0, f"no torch for {sys.executable}")
    work = tmp_path_factory.mktemp("pch")
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools"), "CCACHE_DIR": str(work / "ccache")}
    env.pop("CCACHE_SLOPPINESS", None)
    project = work / "tp"
    run([sys.executable, "-m", "cpubuild", "init", "--name", "tp", "--kind", "torch", "--arch", "x86_64", "-q", str(project)], env=env)
    (project / "CMakeLists.txt").write_text(CMAKELISTS, encoding="utf-8")
    (project / "csrc" / "kernel.cpp").write_text(KERNEL, encoding="utf-8")
    (project / "csrc" / "bindings.cpp").write_text(BINDINGS, encoding="utf-8")
    prefix = work / "site"
    symver = work / "symver.h"  # what `cpubuild wheel` force-includes: code before the PCH would void it
    symver.write_text(glibc.render_header([glibc.Directive(symbol="pthread_once", version="GLIBC_2.2.5",
                                                           default="GLIBC_2.34")], "manylinux_2_28_x86_64"))

    def build() -> None:
        shutil.rmtree(work / "build", ignore_errors=True)
        run(["cmake", "-S", str(project), "-B", str(work / "build"), f"-Dcpubuild_DIR={REPO / 'tools' / 'cpubuild' / 'cmake'}",
             f"-DCMAKE_INSTALL_PREFIX={prefix}", f"-DPython_EXECUTABLE={sys.executable}", "-DCPUBUILD_ISA=avx2",
             "-DCMAKE_BUILD_TYPE=Release", f"-DCPUBUILD_SYMVER_HEADER={symver}", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"],
            env=env)
        run(["cmake", "--build", str(work / "build"), "-j2"], env=env)

    build()
    (work / "pch-files").write_text("\n".join(str(p) for p in (work / "build").rglob("cmake_pch.hxx.gch")))
    run(["ccache", "--zero-stats"], env=env)
    build()  # cold build directory, warm cache
    stats = ccache_stats(env)
    run(["cmake", "--install", str(work / "build")], env=env)
    (prefix / "tp" / "__init__.py").write_text("from ._cpubuild import library\n\nlibrary()\n", encoding="utf-8")
    return work, prefix, stats


def test_each_variant_has_its_own_precompiled_header(builds: tuple[Path, Path, dict[str, int]]) -> None:
    work, _, _ = builds
    pch = (work / "pch-files").read_text().split()
    owners = sorted(Path(p).parts[-2] for p in pch)  # CMakeFiles/<target>.dir/cmake_pch.hxx.gch
    assert owners == ["tp_avx2.dir", "tp_baseline.dir"], pch


def test_every_unit_uses_its_precompiled_header(builds: tuple[Path, Path, dict[str, int]]) -> None:
    """gcc -H marks a PCH it loads with '!': each variant's units load their own. With the symver
    header force-included in front, gcc silently parsed the headers again (the PCH was pure cost:
    vLLM's full set built 0.86x as fast with it)."""
    work, _, _ = builds
    commands = json.loads((work / "build" / "compile_commands.json").read_text())
    units = [c for c in commands if c["file"].endswith(("kernel.cpp", "bindings.cpp"))]
    assert len(units) == 4, [c["file"] for c in units]
    for unit in units:
        argv = [*shlex.split(unit["command"]), "-H", "-fsyntax-only"]
        argv = [a for i, a in enumerate(argv) if a != "-o" and (i == 0 or argv[i - 1] != "-o")]
        proc = subprocess.run(argv, cwd=unit["directory"], capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        loaded = [line for line in proc.stderr.splitlines() if line.startswith("! ") and line.endswith(".gch")]
        assert len(loaded) == 1 and "cmake_pch.hxx.gch" in loaded[0], (unit["file"], proc.stderr[:2000])


def test_a_rebuild_is_served_by_ccache(builds: tuple[Path, Path, dict[str, int]]) -> None:
    _, _, stats = builds
    hits = stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0)
    assert stats.get("cache_miss", 0) == 0 and hits >= 4, stats  # two sources x two variants, and the PCHs


@pytest.mark.parametrize("isa", ["baseline", "avx2"])
def test_the_ops_of_each_variant_work(builds: tuple[Path, Path, dict[str, int]], isa: str) -> None:
    _, prefix, _ = builds
    env = {**os.environ, "PYTHONPATH": str(prefix), "TP_ISA": isa}
    proc = subprocess.run([sys.executable, "-c", "import torch, tp; print(torch.ops.tp.twice(torch.ones(3)).tolist())"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0 and "cannot run variant" in proc.stderr:
        pytest.skip(f"host fact: this CPU cannot run {isa}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[2.0, 2.0, 2.0]"
