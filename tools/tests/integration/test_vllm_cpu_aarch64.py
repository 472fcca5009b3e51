"""vLLM's CPU kernels (examples/vllm-cpu) cross-built for aarch64 and run under QEMU Arm models.

cpubuild (its wheel, in a fresh venv with torch, as users install it) cross-builds
the example's `neon` (vLLM's -march=armv8.2-a+dotprod+fp16, the Arm floor) and
`neon_bf16` (+bf16, ARM_BF16_SUPPORT) variants of vLLM's unmodified layernorm,
activation and pos_encoding sources against torch 2.9.1's aarch64 wheel: the
last release whose aarch64 wheel on the package registry is a CPU build (vLLM
#43115: since 2.10 it is a CUDA build). The wheel holds no CUDA library, needs
none and requires none. `cpubuild test` then runs it under QEMU: neoverse-n1
(dotprod + fp16, no bf16) picks neon, `max` picks neon_bf16 and runs the
example's selftest (vLLM's ops through torch.ops._C against torch eager, fp32
and bf16), and cortex-a53 (below the floor) imports and refuses cleanly. vLLM's own
kernel tests of these ops (activation, with the Arm-only activation_lut_bf16,
pos_encoding, layernorm) run under QEMU max and neoverse-n1 in the rootfs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from oracle import ARCH
from public_cpubuild import PublicCpubuild, public_cpubuild  # noqa: F401 (a fixture)
from test_torch_project import metadata, torch_cpubuild  # noqa: F401 (a fixture)
from test_vllm_cpu import pytest_result, vllm_tree  # noqa: F401 (a fixture)
from testsupport import REPO, require, require_host, require_tool, run

pytestmark = [pytest.mark.slow, pytest.mark.cross, pytest.mark.qemu]

EXAMPLE = REPO / "examples" / "vllm-cpu"
AARCH64_TORCH = "2.9.1"
GPU_LIBRARY = re.compile(r"lib(cuda|cudart|cublas|cudnn|nccl|nvrtc|c10_cuda|torch_cuda)\b|nvidia/")


@pytest.fixture(scope="module")
def wheel(torch_cpubuild: PublicCpubuild, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    require_host(ARCH == "x86_64", "cross-built and emulated from an x86_64 host")
    require_tool("cmake", "aarch64-linux-gnu-g++")
    root = tmp_path_factory.mktemp("vllm-aarch64")
    _, summary = torch_cpubuild.json("wheel", "--project", str(EXAMPLE), "--arch", "aarch64", "--torch", AARCH64_TORCH,
                                     "--out", str(root / "out"), "--build-root", str(root / "build"), cwd=root, timeout=3600)
    assert summary["ok"], summary
    assert summary["torch"]["version"] == f"{AARCH64_TORCH}+cpu", summary["torch"]
    return Path(summary["wheel"]["path"])


def test_the_aarch64_wheel_holds_both_variants_and_nothing_of_cuda(wheel: Path, tmp_path: Path) -> None:
    assert wheel.name.endswith("_aarch64.whl") and ".cpu.pt29-" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path)
    libraries = {Path(n).name: tmp_path / n for n in names if n.endswith(".so") or ".so." in n}
    assert {"_vllm_cpu_ops_neon.so", "_vllm_cpu_ops_neon_bf16.so", "_vllm_cpu_ops_probe.so"} <= set(libraries), names
    assert not [n for n in names if GPU_LIBRARY.search(n)], names
    for variant in ("neon", "neon_bf16"):  # torch's CPU libraries only
        dynamic = subprocess.run(["readelf", "-d", str(libraries[f"_vllm_cpu_ops_{variant}.so"])], capture_output=True,
                                 text=True, check=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
        assert "libtorch_cpu.so" in needed and not [n for n in needed if GPU_LIBRARY.search(n)], needed
    requires = [line for line in metadata(wheel).splitlines() if line.startswith("Requires-Dist:")]
    assert "Requires-Dist: torch==2.9.*" in requires, requires
    assert not [r for r in requires if "nvidia" in r or "cuda" in r], requires


@pytest.mark.parametrize(("cpu", "expect", "checks"),
                         [("neoverse-n1", "neon", False), ("max", "neon_bf16", True), ("cortex-a53", "none", False)])
def test_under_qemu_each_model_gets_its_variant_or_a_clean_refusal(
    torch_cpubuild: PublicCpubuild, wheel: Path, tmp_path: Path, cpu: str, expect: str, checks: bool,  # noqa: F811
) -> None:
    require(os.geteuid() == 0, "cpubuild test needs root for the aarch64 rootfs (debootstrap, chroot)")
    require_tool("qemu-aarch64-static", "debootstrap")
    args = ["--checks" if checks else "--no-checks"]
    code, outcome = torch_cpubuild.json("test", "--arch", "aarch64", "--cpu", cpu, "--expect", "auto", *args, str(wheel),
                                        cwd=tmp_path, check=False, timeout=1800)
    assert code == 0 and outcome["ok"], outcome
    if expect == "none":
        assert outcome["selected"] is None
        assert "no variant for this CPU" in outcome["report_error"] and "asimddp" in outcome["report_error"], outcome
        return
    assert outcome["selected"] == expect, outcome
    if checks:
        assert outcome["checks"]["failed"] == 0 and outcome["checks"]["passed"] >= 36, outcome["checks"]


# vLLM's own tests of the ops this wheel builds, under QEMU, in the cached
# Debian rootfs (the one `cpubuild test` made above): the rootfs holds torch
# 2.9.1; what vLLM's test modules import comes from the example's requirements,
# installed for the rootfs's platform and Python by uv on the host (binary
# wheels only; torch and CUDA's triton left out), cached in the rootfs by the
# requirements' hash. The rootfs has no C++ compiler, which torch.compile's CPU
# backend needs, hence --vllm-cpu-eager (the plugin: vLLM's layers run
# forward_native eagerly, custom ops off as in the compiled default).
VLLM_CORE_TESTS = ("tests/kernels/core/test_cpu_activation.py", "tests/kernels/core/test_pos_encoding.py",
                   "tests/kernels/core/test_layernorm.py")
TESTING = EXAMPLE / "vllm_cpu_testing"
NOT_IN_THE_ROOTFS = 'torch; sys_platform == "never"\n'  # the rootfs's own torch serves


def requirements_site(root: Path, python: str) -> PurePosixPath:
    """The test modules' imports for the rootfs (aarch64, CPython `python`), made once; the path inside it."""
    texts = [(TESTING / name).read_text(encoding="utf-8") for name in ("requirements.txt", "overrides.txt")]
    digest = hashlib.sha256("\0".join([*texts, NOT_IN_THE_ROOTFS, python]).encode()).hexdigest()[:16]
    inside = PurePosixPath("/opt/cpubuild-vllm-tests") / digest
    site = root / inside.relative_to("/")
    if not (site / ".complete").is_file():
        require_tool("uv")
        shutil.rmtree(site, ignore_errors=True)
        overrides = site.parent / f"{digest}.overrides.txt"
        site.parent.mkdir(parents=True, exist_ok=True)
        overrides.write_text(texts[1] + NOT_IN_THE_ROOTFS, encoding="utf-8")
        run(["uv", "pip", "install", "-q", "--no-build", "--target", str(site), "--python-platform",
             "aarch64-manylinux_2_28", "--python-version", python, "setuptools",  # torch.utils.cpp_extension's
             "-r", str(TESTING / "requirements.txt"), "--overrides", str(overrides)], timeout=1800)
        (site / ".complete").write_text("ok\n")
    return inside


@pytest.mark.parametrize(("cpu", "variant", "tests"), [("max", "neon_bf16", VLLM_CORE_TESTS),
                                                       ("neoverse-n1", "neon", VLLM_CORE_TESTS[:1])])
def test_vllms_own_kernel_tests_pass_under_qemu(
    wheel: Path, vllm_tree: Path, tmp_path: Path, cpu: str, variant: str, tests: tuple[str, ...],  # noqa: F811
    record_property: Callable[[str, Any], None],
) -> None:
    """max (bf16): the three core files; neoverse-n1 (the floor, no bf16): the activation file (2 minutes)."""
    require(os.geteuid() == 0, "the aarch64 rootfs needs root (debootstrap, chroot)")
    require_tool("qemu-aarch64-static", "debootstrap")
    from cpubuild.emulate.rootfs import RUN_DIR, Emulator, RootfsSpec, ensure_rootfs, installed_wheel
    from cpubuild.emulate.torchsite import ensure_torch_site, tree_python
    from cpubuild.hardware import hardware

    arch = hardware().arch("aarch64")
    root = ensure_rootfs(RootfsSpec.for_arch(arch))
    torch_site = ensure_torch_site(root, arch, f"{AARCH64_TORCH}+cpu")
    requirements = requirements_site(root, tree_python(root))
    (root / RUN_DIR.relative_to("/")).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vllm-tests-", dir=root / RUN_DIR.relative_to("/")))
    try:
        for name in ("vllm", "tests"):  # vLLM's Python and tests, imported from the tree as on x86_64
            shutil.copytree(vllm_tree / name, work / "src" / name, symlinks=True)
        shutil.copytree(TESTING, work / "example" / "vllm_cpu_testing")
        inside = RUN_DIR / work.name
        with installed_wheel(wheel, root) as wheel_site:
            pythonpath = ":".join([f"{inside}/src", f"{inside}/example", wheel_site, str(requirements), str(torch_site)])
            junit = work / "junit.xml"
            proc = Emulator(qemu=arch.qemu, cpu=cpu, root=root).run(
                ["-m", "pytest", "-p", "vllm_cpu_testing.plugin", "--noconftest", "-p", "no:cacheprovider", "-q", "-rs",
                 "--vllm-cpu-quick", "--vllm-cpu-eager", f"--junitxml={inside}/junit.xml", f"--rootdir={inside}/src",
                 *(f"{inside}/src/{test}" for test in tests)],
                pythonpath=pythonpath, host_python=sys.executable, timeout=3600)
            result = pytest_result(proc, junit)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record_property(f"vllm_tests_{cpu}", result["counts"])
    assert result["returncode"] == 0 and result["counts"]["failures"] == 0 and result["counts"]["errors"] == 0, \
        result["tail"]
    assert result["counts"]["passed"] >= (300 if len(tests) > 1 else 50), result["counts"]
    assert result["variant"] == variant, result["tail"]
