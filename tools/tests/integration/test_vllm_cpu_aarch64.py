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
and bf16), and cortex-a53 (below the floor) imports and refuses cleanly.
"""

from __future__ import annotations

import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from oracle import ARCH
from public_cpubuild import PublicCpubuild, public_cpubuild  # noqa: F401 (a fixture)
from test_torch_project import metadata, torch_cpubuild  # noqa: F401 (a fixture)
from testsupport import REPO, require, require_host, require_tool

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
