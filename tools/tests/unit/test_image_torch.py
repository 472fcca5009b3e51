"""Images of torch projects: which torch wheels count as CUDA builds, where a bake file puts them."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from cpubuild.docker import bake, plan
from cpubuild.docker.torchwheels import cuda_reason, image_python
from cpubuild.errors import UsageError
from cpubuild.hardware import hardware
from cpubuild.matrix import load_matrix
from cpubuild.torchdist import minor, release
from cpubuild.unpack import install_all
from testsupport import CPUKERN_MATRIX

PLATFORM, PYTHON = "manylinux_2_28_x86_64", "3.11"


def _torch_wheel(tmp_path: Path, requires: list[str], members: tuple[str, ...] = ()) -> Path:
    path = tmp_path / "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    meta = "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("torch-2.13.0.dist-info/METADATA", meta)
        for name in members:
            archive.writestr(name, b"")
    return path


def test_a_cpu_torch_is_not_a_cuda_build(tmp_path: Path) -> None:
    wheel = _torch_wheel(tmp_path, ["filelock", "sympy>=1.13.3", "triton==3.5.0; platform_system == 'Windows'"])
    assert cuda_reason(wheel, PLATFORM, PYTHON) is None


def test_cuda_requirements_for_this_platform_make_a_cuda_build(tmp_path: Path) -> None:
    reqs = ["filelock", *(f"nvidia-{n}-cu13==1.0; platform_system == 'Linux'" for n in ("cublas", "cudnn", "nccl", "nvtx", "cufft"))]
    why = cuda_reason(_torch_wheel(tmp_path, reqs), PLATFORM, PYTHON)
    assert why is not None and why.startswith("it requires nvidia-cublas-cu13") and why.endswith(", ...")


def test_cuda_requirements_whose_markers_exclude_the_target_do_not_count(tmp_path: Path) -> None:
    wheel = _torch_wheel(tmp_path, ["nvidia-cublas-cu13; platform_machine == 'x86_64'"])
    assert cuda_reason(wheel, "manylinux_2_28_aarch64", PYTHON) is None
    assert cuda_reason(wheel, PLATFORM, PYTHON) == "it requires nvidia-cublas-cu13"


def test_libtorch_cuda_inside_makes_a_cuda_build(tmp_path: Path) -> None:
    wheel = _torch_wheel(tmp_path, [], members=("torch/lib/libtorch_cuda.so",))
    assert cuda_reason(wheel, PLATFORM, PYTHON) == "it holds libtorch_cuda"


def test_versions_and_the_image_python() -> None:
    assert release("2.13.0+cpu") == "2.13.0" and minor("2.13.0+cpu") == "2.13"
    assert image_python("bookworm") == "3.11"
    with pytest.raises(UsageError, match="no known python3 version for Debian sid"):
        image_python("sid")


def test_a_bake_file_gives_each_torch_target_its_platform_and_release_folder() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    specs = [plan.ImageSpec(arch=hardware().arch(name), isas=None, target="runtime", tag=f"t:{name}",
                            base="debian:bookworm-slim", wheel=None) for name in ("x86_64", "aarch64")]
    folders = {spec.tag: bake.torch_dir(spec, "2.9.1+cpu") for spec in specs}
    assert folders == {"t:x86_64": ".cpubuild/torch/amd64-2.9.1", "t:aarch64": ".cpubuild/torch/arm64-2.9.1"}
    document = json.loads(json.dumps(bake.bake_document(matrix, specs, dockerfile="docker/Dockerfile", torch=folders)))
    args = {t["platforms"][0]: t["args"] for t in document["target"].values() if t["target"] == "runtime"}
    assert args["linux/amd64"]["CPUBUILD_TORCH_DIR"] == ".cpubuild/torch/amd64-2.9.1"
    assert args["linux/arm64"]["CPUBUILD_TORCH_DIR"] == ".cpubuild/torch/arm64-2.9.1"
    plain = bake.bake_document(matrix, specs, dockerfile="docker/Dockerfile")  # not a torch project
    assert all("CPUBUILD_TORCH_DIR" not in t["args"] for t in plain["target"].values())


def test_install_all_unpacks_every_wheel_and_makes_dest_even_for_none(tmp_path: Path) -> None:
    empty = tmp_path / "none"
    empty.mkdir()
    assert install_all(empty, tmp_path / "dest-empty") == [] and (tmp_path / "dest-empty").is_dir()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("a", "b"):
        with zipfile.ZipFile(wheels / f"{name}-1.0-py3-none-any.whl", "w") as archive:
            archive.writestr(f"{name}/__init__.py", f"NAME = {name!r}\n")
            archive.writestr(f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
            archive.writestr(f"{name}-1.0.dist-info/RECORD", "")
    installed = install_all(wheels, tmp_path / "dest")
    assert [w.name for w in installed] == ["a-1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl"]
    assert (tmp_path / "dest" / "a" / "__init__.py").read_text() == "NAME = 'a'\n"
    assert (tmp_path / "dest" / "b" / "__init__.py").is_file()
