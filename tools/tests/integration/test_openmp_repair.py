"""OpenMP through the repair step, with real gcc and auditwheel: a ctypes-style
library linked with -fopenmp gets the build host's libgomp bundled where it
fits the policy and is refused with the reason where it does not; a torch
project's libgomp resolves to torch's own copy and stays out of the wheel."""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cpubuild.errors import BuildFailedError
from cpubuild.toolchain import repair
from testsupport import require, require_tool, run

# clock_gettime: a glibc 2.17 symbol, as every torch extension needs 2.17 or later (libstdc++'s)
OMP = ("#include <time.h>\nint tiny_threads(void) { int n = 0;\n#pragma omp parallel reduction(+:n)\n n += 1;\n return n; }\n"
       "long tiny_now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec; }\n")


def omp_wheel(tmp: Path, link: list[str]) -> Path:
    """A minimal real wheel holding one library that calls into OpenMP."""
    src, obj, lib = tmp / "omp.c", tmp / "omp.o", tmp / "_omp.so"
    src.write_text(OMP)
    run(["gcc", "-O2", "-fPIC", "-fopenmp", "-c", "-o", str(obj), str(src)])
    run(["gcc", "-shared", "-o", str(lib), str(obj), *link])  # `link` names the OpenMP runtime
    files = {"tiny/_omp.so": lib.read_bytes(), "tiny/__init__.py": b""}
    dist = "tiny-1.0.dist-info"
    files[f"{dist}/METADATA"] = b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n"
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
                     for n, d in files.items())
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    wheel = tmp / "tiny-1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
    return wheel


def host_libgomp_glibc() -> tuple[int, int]:
    path = subprocess.run(["gcc", "-print-file-name=libgomp.so.1"], capture_output=True, text=True, check=True).stdout.strip()
    versions = [tuple(int(p) for p in v.split("_", 1)[1].split(".")) for _, v in repair.undefined_versions(Path(path))
                if re.fullmatch(r"GLIBC_\d+\.\d+", v)]
    return max(versions)  # type: ignore[return-value]


@pytest.fixture()
def tools() -> None:
    require(sys.platform == "linux" and Path("/proc/self/maps").exists(), "Linux only")
    require_tool("gcc", "auditwheel", "patchelf")


def test_a_ctypes_library_gets_the_host_libgomp_or_the_reason(tools: None, tmp_path: Path) -> None:
    wheel = omp_wheel(tmp_path, ["-fopenmp"])  # the compiler's libgomp
    need = host_libgomp_glibc()
    lines: list[str] = []
    if need > (2, 28):
        with pytest.raises(BuildFailedError) as info:
            repair.repair_linux(wheel, tmp_path / "refused", ceiling="manylinux_2_28_x86_64", guarded=[], log=lines.append)
        message = str(info.value)
        assert "libgomp" in message and "bundles from this build host" in message and "manylinux image" in message, message
        assert f"GLIBC_{need[0]}.{need[1]}" in info.value.detail
    ceiling = f"manylinux_{need[0]}_{need[1]}_x86_64"  # a policy the host's libgomp fits: bundled
    repaired = repair.repair_linux(wheel, tmp_path / "ok", ceiling=ceiling, guarded=[], log=lines.append)
    names = zipfile.ZipFile(repaired.wheel).namelist()
    assert any(re.search(r"\.libs/libgomp-[0-9a-f]+\.so", n) for n in names), names


def test_a_torch_library_resolves_libgomp_in_torch_and_does_not_carry_it(tools: None, tmp_path: Path) -> None:
    torch_dir = subprocess.run([sys.executable, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
                               capture_output=True, text=True, check=False).stdout.strip()
    require(bool(torch_dir), "no torch")
    from cpubuild.torchdist import openmp_runtime

    runtime = openmp_runtime(Path(torch_dir))
    require(runtime is not None, "this torch links no OpenMP runtime")
    assert runtime is not None
    wheel = omp_wheel(tmp_path, [str(runtime)])  # torch's libgomp file, as cpubuild's CMake links it
    excluded = sorted(p.name for p in runtime.parent.glob("*.so*"))
    repaired = repair.repair_linux(wheel, tmp_path / "ok", ceiling="manylinux_2_28_x86_64", guarded=[], log=[].append,
                                   exclude=excluded, lookup_first=[runtime.parent])
    assert repair.policy_at_most(repaired.policy, "manylinux_2_28_x86_64")
    assert not any("libgomp" in n for n in zipfile.ZipFile(repaired.wheel).namelist())


def test_a_repair_exclude_library_is_left_out_of_the_wheel(tools: None, tmp_path: Path) -> None:
    """[tool.cpubuild] repair-exclude: the project says the system (or a required package) provides libgomp."""
    wheel = omp_wheel(tmp_path, ["-fopenmp"])
    repaired = repair.repair_linux(wheel, tmp_path / "ok", ceiling="manylinux_2_28_x86_64", guarded=[], log=[].append,
                                   exclude=["libgomp.so.1"])
    assert not any("libgomp" in n for n in zipfile.ZipFile(repaired.wheel).namelist())
    assert repair.policy_at_most(repaired.policy, "manylinux_2_28_x86_64") and "without libgomp.so.1" in repaired.audited
