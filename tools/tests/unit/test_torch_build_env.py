"""A torch project's isolated build must compile against a CPU torch: the version
provider reads the build environment's torch/version.py and refuses a CUDA build
in one line that names the fix (docs/project.md)."""

from __future__ import annotations

import pytest
from cpubuild import version_provider as vp

CPU = "__version__ = '2.13.0+cpu'\ndebug = False\ncuda: Optional[str] = None\n"
CUDA = "__version__ = '2.15.0'\ndebug = False\ncuda: Optional[str] = '12.8'\n"


def test_cuda_release_is_read_from_version_py() -> None:
    assert vp.cuda_of(CPU) is None
    assert vp.cuda_of(CUDA) == "12.8"
    assert vp.cuda_of("cuda = \"13.0\"\n") == "13.0"
    assert vp.cuda_of("") is None


def test_the_fix_is_one_line_naming_both_frontends_and_the_cpu_build() -> None:
    text = vp.cpu_torch_fix("2.15.0", "12.8")
    assert "\n" not in text
    for part in ("torch 2.15.0", "CUDA 12.8", "'torch==2.15.0+cpu'", "PIP_BUILD_CONSTRAINT=F", "UV_BUILD_CONSTRAINT=F",
                 vp.CPU_TORCH_INDEX, "CPUBUILD_TORCH_VERSION=2.15.0"):
        assert part in text, part


def test_an_explicit_torch_version_skips_the_build_environment() -> None:
    assert vp.torch_pin({"CPUBUILD_TORCH_VERSION": "2.15.0"}) == "torch==2.15.*"


def test_a_cuda_torch_in_the_build_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vp, "_build_env_torch", lambda: ("2.15.0", "12.8"))
    with pytest.raises(ValueError, match=r"a CUDA 12\.8 build"):
        vp.torch_pin({})
    monkeypatch.setattr(vp, "_build_env_torch", lambda: ("2.13.0+cpu", None))
    assert vp.torch_pin({}) == "torch==2.13.*"
