"""The cross platform's decisions, without running a compiler: which platform
builds what, and the settings a cross build hands scikit-build-core (the
triplet, sysroot and tags come from cpubuild's hardware data through the
project's Arch; the toolchain file is the one cpubuild ships)."""

from __future__ import annotations

import pytest
from cpubuild.cmake import CMAKE_DIR, TOOLCHAINS
from cpubuild.hardware import hardware
from cpubuild.matrix import load_matrix
from cpubuild.platforms import Host, select_platform
from cpubuild.platforms.linux_cross import (
    PLATFORM,
    TOOLCHAIN_FILE,
    compiler_names,
    cross_env,
    cross_package,
    cross_settings,
    host_platform_tag,
    ldpaths,
)
from testsupport import CPUKERN_MATRIX

MATRIX = load_matrix(CPUKERN_MATRIX)
FOREIGN = [a for a in MATRIX.arches if a != "x86_64"]


@pytest.mark.parametrize("arch", FOREIGN)
def test_foreign_linux_arches_use_the_cross_platform(arch: str) -> None:
    host = Host(os="linux", arch="x86_64")
    target = MATRIX.arches[arch]
    assert select_platform(target, host).name == "linux-cross"
    assert select_platform(MATRIX.arches["x86_64"], host).name == "linux-native"
    assert not PLATFORM.builds(target, Host(os="linux", arch=arch))  # on its own arch: native
    assert select_platform(target, Host(os="linux", arch=arch)).name == "linux-native"
    assert not PLATFORM.builds(target, Host(os="darwin", arch="aarch64"))


@pytest.mark.parametrize("arch", FOREIGN)
def test_cross_settings_come_from_the_hardware_data(arch: str) -> None:
    a = MATRIX.arches[arch]
    facts = hardware().arches[arch]
    assert (a.triplet, a.manylinux) == (facts.triplet, facts.manylinux)  # cpukern overrides neither
    settings = cross_settings(a, TOOLCHAIN_FILE)
    assert settings["cmake.toolchain-file"] == str(TOOLCHAINS / "linux-cross.cmake")
    assert settings["cmake.define.CPUBUILD_CROSS_TRIPLET"] == a.triplet
    assert settings["cmake.define.CPUBUILD_CROSS_SYSROOT"] == f"/usr/{a.triplet}"
    assert settings["cmake.define.CPUBUILD_ARCH"] == arch
    # the toolchain confines find_package to the sysroot: cpubuild's own package is named directly
    assert settings["cmake.define.cpubuild_DIR"] == str(CMAKE_DIR)
    assert (CMAKE_DIR / "cpubuildConfig.cmake").is_file()
    assert not any("CPUKERN" in key for key in settings)  # nothing project-specific
    assert compiler_names(a) == (f"{a.triplet}-gcc", f"{a.triplet}-g++")
    assert cross_package(a) == f"g++-{a.triplet}"
    # scikit-build-core turns linux-<arch> into the linux_<arch> tag auditwheel then raises
    env = cross_env(a)
    assert env["_PYTHON_HOST_PLATFORM"] == host_platform_tag(a) == f"linux-{arch}"
    assert env["CPUBUILD_CROSS_TRIPLET"] == a.triplet
    assert a.manylinux.endswith("_" + arch)
    assert ldpaths(a).split(":")[0] == f"/usr/{a.triplet}/lib"


def test_shipped_toolchain_file_reads_the_triplet() -> None:
    assert TOOLCHAIN_FILE == TOOLCHAINS / "linux-cross.cmake" and TOOLCHAIN_FILE.is_file()
    text = TOOLCHAIN_FILE.read_text()
    assert "CPUBUILD_CROSS_TRIPLET" in text and "CMAKE_TRY_COMPILE_PLATFORM_VARIABLES" in text
    assert "$ENV{CPUBUILD_CROSS_TRIPLET}" in text  # cross_env's variable is a fallback input
    assert "CPUKERN" not in text
    assert "set(CMAKE_SYSTEM_PROCESSOR aarch64" not in text  # derived from the triplet, not hard-coded
