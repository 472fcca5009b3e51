"""vLLM's own CPU kernels (examples/vllm-cpu), built by cpubuild from vLLM's pinned sdist, under vLLM's own tests.

cpubuild comes from its wheel in a fresh venv with torch (a torch project builds
against the torch of its environment). The example's wheel is built with the
floor and the best variant this CPU runs, plus avx512 when this CPU lacks it (to be refused), then
installed into a fresh venv with torch and what vLLM's test modules import
(examples/vllm-cpu/vllm_cpu_testing/requirements.txt). vLLM's unmodified
`tests/kernels/core/test_cpu_activation.py`, `test_pos_encoding.py` and
`test_layernorm.py` run from the sdist, through the example's pytest plugin
(device switching, CUDA-only skips with reasons; --vllm-cpu-quick deselects the
GPU-sized cases, 15-50 s each here, counted apart), once per variant under test
(forced with VLLM_CPU_OPS_ISA, one per process) and, the activation file, once
with the default pick; vLLM's `tests/kernels/attention/test_cpu_attn.py` runs once, with
the default pick. The pass/fail/skip counts are recorded as test properties.
Every variant maps one variant library and one OpenMP runtime (torch's); under
QEMU SandyBridge (AVX, no AVX2: below the matrix's avx2 floor) the package
imports and refuses with the missing features.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cpubuild.matrix import Matrix, load_matrix
from oracle import ARCH, oracle_features, oracle_ranking
from public_cpubuild import PublicCpubuild, clean_env, fresh_venv, public_cpubuild  # noqa: F401 (a fixture)
from test_torch_project import torch_requirement
from testsupport import REPO, require, require_tool, run, skip_host_fact

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "vllm-cpu"
TESTING = EXAMPLE / "vllm_cpu_testing"
PACKAGE, PREFIX = "vllm_cpu_ops", "VLLM_CPU_OPS"
VLLM_TESTS = (
    "tests/kernels/core/test_cpu_activation.py",
    "tests/kernels/core/test_pos_encoding.py",
    "tests/kernels/core/test_layernorm.py",
)
# vLLM's CPU attention test: once, for the default pick (--vllm-cpu-quick keeps one
# case per test and dtype: its GPU-sized batches take 10-20 s per case here)
VLLM_ATTENTION_TESTS = ("tests/kernels/attention/test_cpu_attn.py",)
REFUSED = "avx512"  # an AVX-512 variant built into the wheel, to force on a CPU without it


# Which variant loaded and which `_C` ops it registered, as JSON (run in the wheel's Python).
REGISTERED = f"""
import json, torch, {PACKAGE}
{PACKAGE}.ops()
names = {{n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("_C::")}}
print(json.dumps({{"variant": {PACKAGE}.selected_isa(), "ops": sorted(names)}}))
"""


def env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in clean_env(**extra).items() if not k.startswith(f"{PREFIX}_") or k in extra}


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(EXAMPLE / "isa_matrix.toml")


@pytest.fixture(scope="module")
def vllm_tree() -> Path:
    """The pinned sdist, unpacked in cpubuild's cache (fetched once: fetch_vllm.py)."""
    proc = run([sys.executable, str(EXAMPLE / "fetch_vllm.py"), "--print-dir"], env=clean_env(), cwd=EXAMPLE,
               timeout=900)
    return Path(proc.stdout.strip())


def runnable_variants(matrix: Matrix) -> list[str]:
    """Every variant this CPU runs, floor first (each holds vLLM's kernels: the matrix has a
    floor, no baseline)."""
    return [v.name for v in matrix.variants_for(ARCH) if set(v.requires) <= oracle_features()]


def kernel_variants(matrix: Matrix) -> list[str]:
    """The variants under test in CI: the floor and the best this CPU runs. The steps between
    them recompile every vLLM source once more (minutes each on 2 cores) for code paths the
    two ends already take; the full-set test (by hand) runs every one of them."""
    runs = runnable_variants(matrix)
    return sorted({runs[0], runs[-1]}, key=runs.index) if runs else []


@pytest.fixture(scope="module")
def wheel(public_cpubuild: PublicCpubuild, matrix: Matrix, vllm_tree: Path,  # noqa: F811
          tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_tool("cmake")
    root = tmp_path_factory.mktemp("vllm-cpu")
    fresh_venv(root / "venv", *map(str, public_cpubuild.wheels), "scikit-build-core", *torch_requirement())
    builder = PublicCpubuild(venv=root / "venv", wheels=public_cpubuild.wheels)
    refused = {REFUSED} if ARCH == "x86_64" and not set(matrix.variant(ARCH, REFUSED).requires) <= oracle_features() else set()
    variants = sorted({*kernel_variants(matrix), *refused})
    _, summary = builder.json("wheel", "--project", str(EXAMPLE), "--isa", ",".join(variants),
                              "--out", str(root / "out"), "--build-root", str(root / "build"), cwd=root)
    assert summary["ok"], summary
    return Path(summary["wheel"]["path"])


@pytest.fixture(scope="module")
def python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv: the wheel, this Python's torch, and what vLLM's test modules import."""
    return fresh_venv(tmp_path_factory.mktemp("vllm-venv") / "venv", str(wheel), *torch_requirement(),
                      "-r", str(TESTING / "requirements.txt"), "--overrides", str(TESTING / "overrides.txt"))


def built_variants(python: Path, tmp_path: Path) -> list[str]:
    proc = run([str(python), "-m", PACKAGE, "--json"], env=env(), cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    return [v["name"] for v in json.loads(proc.stdout)["variants"] if v["built"]]


def run_vllm_tests(python: Path, vllm_tree: Path, junit: Path, tests: tuple[str, ...], **extra: str) -> dict[str, Any]:
    """vLLM's kernel tests from the sdist through our plugin; the junit counts and the variant."""
    command = [str(python), "-m", "pytest", "-p", "vllm_cpu_testing.plugin", "--noconftest", "-p", "no:cacheprovider",
               "-q", "-rs", "--vllm-cpu-quick", f"--junitxml={junit}", *tests]
    # the sdist's root is the working directory (vllm/ and tests/ import from it);
    # the plugin comes from the example, not from the wheel
    proc = subprocess.run(command, env=env(PYTHONPATH=str(EXAMPLE), **extra), cwd=vllm_tree, capture_output=True,
                          text=True, timeout=3600)
    return pytest_result(proc, junit)


def pytest_result(proc: subprocess.CompletedProcess[str], junit: Path) -> dict[str, Any]:
    """A pytest run of vLLM's tests through our plugin: its junit counts, the variant it loaded, its tail."""
    if not junit.is_file():
        raise AssertionError(f"pytest wrote no report\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    root = ElementTree.parse(junit).getroot()
    suite = root.find("testsuite") if root.tag == "testsuites" else root
    assert suite is not None, proc.stdout[-3000:]
    counts = {key: int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    deselected = re.search(r"(\d+) deselected", proc.stdout)
    counts["deselected"] = int(deselected.group(1)) if deselected else 0
    header = [line for line in proc.stdout.splitlines() if line.startswith("vllm_cpu_ops variant:")]
    return {"returncode": proc.returncode, "counts": counts, "variant": header[0].split(":", 1)[1].strip()
            if header else None, "tail": proc.stdout[-4000:] + proc.stderr[-2000:]}


def assert_vllm_tests_pass(result: dict[str, Any], variant: str) -> None:
    counts = result["counts"]
    assert result["returncode"] == 0 and counts["failures"] == 0 and counts["errors"] == 0, result["tail"]
    assert counts["passed"] > 0, result["tail"]
    assert result["variant"] == variant, result["tail"]


def test_vllm_kernel_tests_pass_on_every_variant_this_cpu_runs(
    python: Path, vllm_tree: Path, matrix: Matrix, tmp_path: Path, record_property: Callable[[str, Any], None]
) -> None:
    built = built_variants(python, tmp_path)
    runs = [v for v in kernel_variants(matrix) if v in built]
    assert runs, "the oracle says this CPU runs none of the example's kernel variants"
    for variant in runs:
        result = run_vllm_tests(python, vllm_tree, tmp_path / f"{variant}.xml", VLLM_TESTS, **{f"{PREFIX}_ISA": variant})
        record_property(f"vllm_tests[{variant}]", result["counts"])
        print(f"vLLM kernel tests, {variant} (forced): {result['counts']}")
        assert_vllm_tests_pass(result, variant)


def test_vllm_kernel_tests_pass_on_the_default_pick(
    python: Path, vllm_tree: Path, matrix: Matrix, tmp_path: Path, record_property: Callable[[str, Any], None]
) -> None:
    """Without VLLM_CPU_OPS_ISA: the dispatcher's own pick, which the test above already ran
    (forced) under all three files; one file here shows the unforced path loads and works."""
    expected = oracle_ranking(matrix, built_variants(python, tmp_path))[0]
    assert expected in kernel_variants(matrix), (expected, kernel_variants(matrix))
    result = run_vllm_tests(python, vllm_tree, tmp_path / "default.xml", VLLM_TESTS[:1])
    record_property("vllm_tests[default]", result["counts"])
    print(f"vLLM kernel tests, default pick {expected}: {result['counts']}")
    assert_vllm_tests_pass(result, expected)


def test_vllm_attention_tests_pass_on_the_default_pick(
    python: Path, vllm_tree: Path, matrix: Matrix, tmp_path: Path, record_property: Callable[[str, Any], None]
) -> None:
    """vLLM's CPU attention (cpu_attn.cpp, its generated dispatch) under vLLM's own test; its
    AMX, Arm and RISC-V cases skip by vLLM's own conditions on other CPUs."""
    expected = oracle_ranking(matrix, built_variants(python, tmp_path))[0]
    result = run_vllm_tests(python, vllm_tree, tmp_path / "attention.xml", VLLM_ATTENTION_TESTS)
    record_property("vllm_attention_tests[default]", result["counts"])
    print(f"vLLM attention tests, default pick {expected}: {result['counts']}")
    assert_vllm_tests_pass(result, expected)


MAPPED = f"""
import json, torch, {PACKAGE}
from {PACKAGE} import vllm_shim
import vllm._C
x = torch.randn(64, 4096)
out = torch.empty_like(x)
torch.ops._C.rms_norm(out, x, torch.ones(4096), 1e-6)
maps = [line.split()[-1] for line in open("/proc/self/maps").read().splitlines() if "/" in line]
print(json.dumps({{"variant": {PACKAGE}.selected_isa(), "module": vllm._C.variant,
                  "libraries": sorted({{m.rsplit("/", 1)[-1] for m in maps if "_{PACKAGE}_" in m}}),
                  "openmp": sorted({{m for m in maps if "gomp" in m or "iomp" in m or "libomp" in m}})}}))
"""


def test_one_variant_library_and_one_openmp_runtime(python: Path, matrix: Matrix, tmp_path: Path) -> None:
    for variant in kernel_variants(matrix):
        # vLLM itself is not installed here (its engine is not under test): a bare parent package
        # stands for it, so `import vllm._C` reaches what the shim bound
        code = ("import sys, types; sys.modules.setdefault('vllm', types.ModuleType('vllm'))\n"
                "import vllm_cpu_ops.vllm_shim; vllm_cpu_ops.vllm_shim.install()\n" + MAPPED)
        proc = run([str(python), "-c", code], env=env(**{f"{PREFIX}_ISA": variant}), cwd=tmp_path, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout)
        assert result["variant"] == variant == result["module"], result
        assert result["libraries"] == sorted([f"_{PACKAGE}_probe.so", f"_{PACKAGE}_{variant}.so"]), result
        assert len(result["openmp"]) == 1 and "/torch/lib/" in result["openmp"][0], result["openmp"]


REFUSE = f"""
import json, torch, {PACKAGE}
from {PACKAGE} import vllm_shim
try:
    vllm_shim.install()
    error = None
except {PACKAGE}.UnsupportedISAError as exc:
    error = str(exc)
maps = open("/proc/self/maps").read()
print(json.dumps({{"error": error, "mapped": [l.split()[-1] for l in maps.splitlines() if "_{PACKAGE}_" in l]}}))
"""


def test_forcing_an_avx512_variant_this_cpu_lacks_fails_cleanly(python: Path, matrix: Matrix, tmp_path: Path) -> None:
    if ARCH != "x86_64":
        skip_host_fact("the refused variant is an x86_64 one")
    have = oracle_features()
    missing = set(matrix.variant(ARCH, REFUSED).requires) - have
    if not missing:
        skip_host_fact(f"this CPU runs {REFUSED} (oracle): nothing to refuse natively")
    proc = run([str(python), "-c", REFUSE], env=env(**{f"{PREFIX}_ISA": REFUSED}), cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]  # no SIGILL, no traceback: the import worked, install() raised
    result = json.loads(proc.stdout)
    assert result["error"] and REFUSED in result["error"], result
    for feature in missing:
        assert feature in result["error"], (feature, result["error"])
    assert {Path(m).name for m in result["mapped"]} == {f"_{PACKAGE}_probe.so"}, result["mapped"]


BELOW_FLOOR = f"""
import json, torch, {PACKAGE}
from {PACKAGE} import vllm_shim
try:
    vllm_shim.install()
    error = None
except {PACKAGE}.DispatchError as exc:
    error = str(exc)
maps = open("/proc/self/maps").read()
print(json.dumps({{"error": error, "mapped": [l.split()[-1] for l in maps.splitlines() if "_{PACKAGE}_" in l]}}))
"""


@pytest.mark.qemu
def test_below_the_avx2_floor_under_qemu_sandybridge_imports_and_refuses(python: Path, tmp_path: Path) -> None:
    """vLLM's x86 kernels need AVX2: on a CPU without it the package imports, says which
    features are missing and maps no variant library (never a SIGILL)."""
    require(ARCH == "x86_64", "runs the x86_64 venv's Python under qemu-x86_64")
    require_tool("qemu-x86_64-static")
    proc = run(["qemu-x86_64-static", "-cpu", "SandyBridge", str(python), "-c", BELOW_FLOOR], env=env(), cwd=tmp_path,
               check=False, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["error"] and "no variant for this CPU" in result["error"] and "avx2" in result["error"], result
    assert {Path(m).name for m in result["mapped"]} == {f"_{PACKAGE}_probe.so"}, result["mapped"]
