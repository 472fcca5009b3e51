"""A torch dependency that cannot be fetched for an emulated test: a GPU one names the cause and the fix (vLLM #43115)."""

from __future__ import annotations

from cpubuild.torchdist import missing_dependency

WHY = "ERROR: Could not find a version that satisfies the requirement nvidia-cudnn-cu13==9.20.0.48"


def test_a_cuda_package_says_the_torch_is_a_gpu_build_and_how_to_avoid_it() -> None:
    line = missing_dependency("2.13.0", "manylinux_2_28_aarch64", 'nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"', WHY)
    assert line.startswith("torch 2.13.0 for manylinux_2_28_aarch64 is a GPU build (it requires nvidia-cudnn-cu13==9.20.0.48,")
    assert "--torch 2.9.1" in line and "download.pytorch.org/whl/cpu" in line and "\n" not in line


def test_any_other_package_is_named_as_before() -> None:
    line = missing_dependency("2.13.0", "manylinux_2_28_aarch64", "sympy>=1.13.3", "ERROR: no such version")
    assert line == "torch 2.13.0 for manylinux_2_28_aarch64: cannot fetch its dependency 'sympy>=1.13.3': ERROR: no such version"
