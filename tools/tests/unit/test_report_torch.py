"""The build report's note on a GPU torch (vLLM #43115: PyPI's aarch64 torch is a CUDA build since 2.10)."""

from __future__ import annotations

import pytest
from cpubuild.wheelbuild.report import gpu_torch_note


@pytest.mark.parametrize("version", ["2.13.0+cpu", "2.9.1", "2.12.0+cpu.cxx11.abi"])
def test_a_cpu_torch_gets_no_note(version: str) -> None:
    assert gpu_torch_note(version) is None


@pytest.mark.parametrize(("version", "pin"), [("2.13.0+cu130", "torch==2.13.*"), ("2.10.1+rocm6.4", "torch==2.10.*")])
def test_a_gpu_torch_is_named_with_the_requirement_the_cpu_build_satisfies(version: str, pin: str) -> None:
    note = gpu_torch_note(version)
    assert note is not None and note.startswith(f"torch {version} is a GPU build") and f"requires {pin}," in note
    assert "download.pytorch.org/whl/cpu" in note
