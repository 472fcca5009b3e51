"""The cross platform's decisions, without running a compiler: which platform
builds what, and the settings a cross build hands scikit-build-core (all
derived from isa_matrix.toml's [arch.*] tables)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CPUKERN_MATRIX
from cpubuild.matrix import load_matrix
from cpubuild.platforms import Host, select_platform
from cpubuild.platforms.linux_cross import (
    PLATFORM,
    compiler_names,
    cross_env,
    cross_settings,
    host_platform_tag,
    ldpaths,
)

MATRIX = load_matrix(CPUKERN_MATRIX)
FOREIGN = [a for a in MATRIX.arches if a != "x86_64"]


@pytest.mark.parametrize("arch", FOREIGN)
def test_foreign_linux_arches_use_the_cross_platform(arch: str) -> None:
    host = Host(os="linux", arch="x86_64")
    assert select_platform(arch, host).name == "linux-cross"
    assert select_platform("x86_64", host).name == "linux-native"
    assert not PLATFORM.builds(arch, Host(os="linux", arch=arch))  # on its own arch: native
    assert not PLATFORM.builds(arch, Host(os="darwin", arch="aarch64"))


@pytest.mark.parametrize("arch", FOREIGN)
def test_cross_settings_come_from_the_matrix(arch: str) -> None:
    a = MATRIX.arches[arch]
    toolchain = Path("/src/cmake/toolchains/linux-cross.cmake")
    settings = cross_settings(a, toolchain)
    assert settings["cmake.toolchain-file"] == str(toolchain)
    assert settings["cmake.define.CPUKERN_CROSS_TRIPLET"] == a.triplet
    assert settings["cmake.define.CPUKERN_CROSS_SYSROOT"] == f"/usr/{a.triplet}"
    assert settings["cmake.define.CPUKERN_ARCH"] == arch
    assert compiler_names(a) == (f"{a.triplet}-gcc", f"{a.triplet}-g++")
    # scikit-build-core turns linux-<arch> into the linux_<arch> tag auditwheel then raises
    assert cross_env(a)["_PYTHON_HOST_PLATFORM"] == host_platform_tag(a) == f"linux-{arch}"
    assert a.manylinux.endswith("_" + arch)
    assert ldpaths(a).split(":")[0] == f"/usr/{a.triplet}/lib"


def test_toolchain_file_exists_and_reads_the_triplet(repo: Path) -> None:
    text = (repo / "cmake/toolchains/linux-cross.cmake").read_text()
    assert "CPUKERN_CROSS_TRIPLET" in text and "CMAKE_TRY_COMPILE_PLATFORM_VARIABLES" in text
    assert "set(CMAKE_SYSTEM_PROCESSOR aarch64" not in text  # derived from the triplet, not hard-coded
