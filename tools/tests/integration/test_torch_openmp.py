"""OpenMP in a torch project: the variants compile with -fopenmp and link
torch's own libgomp (no second OpenMP runtime in the process). A project from
`cpubuild init --kind torch` whose one op counts the OS threads that ran a
`#pragma omp parallel for`: it follows torch.set_num_threads (the same
runtime's settings), and /proc/self/maps shows one OpenMP library, torch's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from testsupport import REPO, require, require_tool, run

pytestmark = pytest.mark.slow  # builds torch extensions (minutes on 2 cores)

OMP_SOURCE = """\
#include <Python.h>  // a torch extension that is a Python module (vLLM's registration.h) needs Python's headers
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <set>
#include <vector>

#include <torch/library.h>

// how many OS threads ran the iterations of one parallel loop
static int64_t omp_threads(int64_t items) {
  std::vector<long> tid(static_cast<size_t>(items), 0);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < items; ++i) tid[static_cast<size_t>(i)] = syscall(SYS_gettid);
  return static_cast<int64_t>(std::set<long>(tid.begin(), tid.end()).size());
}

TORCH_LIBRARY(tq, m) { m.def("omp_threads(int items) -> int", &omp_threads); }

extern "C" __attribute__((visibility("default"))) long tq_python_api(void) { return Py_LIMITED_API; }
"""
# a source outside the project (as an unpacked sdist in a cache is): its __FILE__ and torch's must not name build paths
EXTERNAL_SOURCE = """\
#include <torch/library.h>

extern "C" __attribute__((visibility("default"))) const char *tq_external_file(int64_t n) {
  TORCH_CHECK(n >= 0, "n must not be negative");
  return __FILE__;
}
"""
CMAKELISTS = """\
cmake_minimum_required(VERSION 3.21)
project(tq LANGUAGES C CXX)
find_package(cpubuild CONFIG REQUIRED)
cpubuild_add_variants(tq SOURCES csrc/omp.cpp "${EXTERNAL_DIR}/external.cpp" PYTHON_MODULE)
"""
CHECK = """\
import ctypes, json, re, torch, tq
threads = {}
for k in (1, 2, 3):
    torch.set_num_threads(k)
    threads[k] = torch.ops.tq.omp_threads(96)
paths = {line.split()[-1] for line in open("/proc/self/maps") if len(line.split()) >= 6}
print(json.dumps({"threads": threads, "omp": sorted(p for p in paths if re.search(r"/lib(g|i)?omp[^/]*\\.so", p)),
                  "variant": [p for p in paths if "/_tq_" in p and not p.endswith("_probe.so")],
                  "limited_api": ctypes.CDLL(tq._cpubuild.library_path(tq._cpubuild.selected_isa())).tq_python_api()}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_tool("cmake", "g++")
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, check=False)
    require(probe.returncode == 0, f"no torch for {sys.executable}")
    work = tmp_path_factory.mktemp("omp")
    project = work / "tq"
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    run([sys.executable, "-m", "cpubuild", "init", "--name", "tq", "--kind", "torch", "-q", str(project)], env=env)
    (project / "CMakeLists.txt").write_text(CMAKELISTS, encoding="utf-8")
    (project / "csrc" / "omp.cpp").write_text(OMP_SOURCE, encoding="utf-8")
    (work / "cache").mkdir()
    (work / "cache" / "external.cpp").write_text(EXTERNAL_SOURCE, encoding="utf-8")
    build, prefix = work / "build", work / "site"
    run(["cmake", "-S", str(project), "-B", str(build), f"-Dcpubuild_DIR={REPO / 'tools' / 'cpubuild' / 'cmake'}",
         f"-DCMAKE_INSTALL_PREFIX={prefix}", f"-DPython_EXECUTABLE={sys.executable}", "-DCPUBUILD_ISA=baseline", f"-DEXTERNAL_DIR={work / 'cache'}",
         "-DCMAKE_BUILD_TYPE=Release"], env=env)
    run(["cmake", "--build", str(build), "-j2"], env=env)
    run(["cmake", "--install", str(build)], env=env)
    (prefix / "tq" / "__init__.py").write_text("from . import _cpubuild\nfrom ._cpubuild import library\n\nlibrary()\n", encoding="utf-8")
    return prefix


def torch_openmp() -> Path:
    out = subprocess.run([sys.executable, "-m", "cpubuild.torchdist", "openmp",
                          subprocess.run([sys.executable, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
                                         capture_output=True, text=True, check=True).stdout.strip()],
                         capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO / "tools")})
    return Path(out.stdout.strip())


def test_the_variant_needs_torchs_openmp_runtime(installed: Path) -> None:
    runtime = torch_openmp()
    require(runtime.is_file(), "this torch links no OpenMP runtime")
    lib = installed / "tq" / "_tq_baseline.abi3.so"  # PYTHON_MODULE: an abi3 extension module per variant
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]",
                        subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout)
    assert [n for n in needed if re.match(r"lib(g|i)?omp", n)] == [runtime.name]


def test_an_openmp_kernel_runs_on_torchs_threads_with_one_runtime(installed: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "TQ_"))}
    env["PYTHONPATH"] = str(installed)
    proc = subprocess.run([sys.executable, "-c", CHECK], cwd=installed, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    # the loop's threads follow torch.set_num_threads: one runtime's settings
    assert data["threads"] == {"1": 1, "2": 2, "3": 3}
    assert data["omp"] == [str(torch_openmp().resolve())], data["omp"]
    assert [Path(p).name for p in data["variant"]] == ["_tq_baseline.abi3.so"]  # loaded by the dispatcher, as torch.ops libraries are
    assert data["limited_api"] == 0x030A0000  # Py_LIMITED_API from init's requires-python = ">=3.10"


def test_no_build_source_or_venv_path_in_any_library(installed: Path) -> None:
    """-ffile-prefix-map for the project, the build, sources outside the project, torch's and Python's headers."""
    import sysconfig

    import torch

    work = installed.parent
    forbidden = {str(work), str(Path(torch.__file__).parent), sysconfig.get_paths()["include"], sys.prefix}
    libraries = sorted((installed / "tq").glob("*.so"))
    assert len(libraries) == 2  # the variant and the probe
    for lib in libraries:
        data = lib.read_bytes()
        found = [p for p in forbidden if p.encode() in data]
        assert not found, f"{lib.name} names {found}"
