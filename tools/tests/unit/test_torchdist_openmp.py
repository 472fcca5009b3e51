"""Which OpenMP runtime a torch tree's libtorch_cpu loads (torchdist.openmp_runtime):
torch's own copy in lib/ or the wheel's torch.libs/, and an error - not "no
OpenMP" - when the tree lacks it (variants would build without -fopenmp)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cpubuild.errors import UsageError
from cpubuild.torchdist import needed, openmp_runtime
from testsupport import require_tool


def fake_torch(tmp_path: Path, *, openmp: bool) -> Path:
    """A torch tree whose lib/libtorch_cpu.so is a real library (NEEDED libgomp.so.1 with OpenMP)."""
    require_tool("gcc")
    lib = tmp_path / "torch" / "lib"
    lib.mkdir(parents=True)
    src = tmp_path / "omp.c"
    src.write_text("#include <omp.h>\nint threads(void) { return omp_get_max_threads(); }\n" if openmp else
                   "int threads(void) { return 1; }\n")
    flags = ["-fopenmp"] if openmp else []
    subprocess.run(["gcc", "-shared", "-fPIC", *flags, "-o", str(lib / "libtorch_cpu.so"), str(src)], check=True)
    return tmp_path / "torch"


def host_libgomp() -> Path:
    out = subprocess.run(["gcc", "-print-file-name=libgomp.so.1"], capture_output=True, text=True, check=True)
    path = Path(out.stdout.strip())
    if not path.is_file():
        pytest.skip(f"gcc names no libgomp.so.1 file ({path})")
    return path


def test_torch_libs_copy_is_the_runtime(tmp_path: Path) -> None:
    torch = fake_torch(tmp_path, openmp=True)
    assert "libgomp.so.1" in needed(torch / "lib" / "libtorch_cpu.so")
    (tmp_path / "torch.libs").mkdir()
    shutil.copy(host_libgomp(), tmp_path / "torch.libs" / "libgomp.so.1")
    assert openmp_runtime(torch) == tmp_path / "torch.libs" / "libgomp.so.1"


def test_a_tree_without_the_runtime_is_an_error(tmp_path: Path) -> None:
    torch = fake_torch(tmp_path, openmp=True)
    with pytest.raises(UsageError, match=r"needs libgomp\.so\.1, which is in neither lib/ nor \.\./torch\.libs/"):
        openmp_runtime(torch)


def test_no_openmp_needed_is_none(tmp_path: Path) -> None:
    assert openmp_runtime(fake_torch(tmp_path, openmp=False)) is None
