"""[tool.cpubuild] repair-exclude: libraries the wheel must not carry and the
requirement providing each (a Requires-Dist of the wheel): the contract's
validation, the provider's dependencies, and what the repair leaves out."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpubuild import version_provider
from cpubuild.contract import ContractError, load_config
from cpubuild.repairexclude import RepairExclude
from cpubuild.toolchain.repair import excluded_sonames

HEAD = '[project]\nname = "vk"\n{project}\n\n[tool.cpubuild]\npackage = "vk"\nrepair-exclude = {entries}\n'
DYNAMIC = 'dynamic = ["version", "dependencies"]'
ENTRIES = '[{library = "libnuma.so.1"}, {library = "libiomp5.so", requires = "intel-openmp>=2024"}]'


def write(tmp_path: Path, entries: str = ENTRIES, project: str = DYNAMIC) -> Path:
    (tmp_path / "pyproject.toml").write_text(HEAD.format(project=project, entries=entries), encoding="utf-8")
    return tmp_path


def test_entries_are_read(tmp_path: Path) -> None:
    config = load_config(write(tmp_path))
    assert config.repair_exclude == (RepairExclude(library="libnuma.so.1"),
                                     RepairExclude(library="libiomp5.so", requires="intel-openmp>=2024"))
    assert excluded_sonames(tmp_path, ("libc10.so", "libnuma.so.1")) == ("libc10.so", "libnuma.so.1", "libiomp5.so")


def test_the_provider_adds_each_requirement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(write(tmp_path))
    deps = version_provider.dynamic_metadata({"dependencies": ["numpy"]}, {"dynamic": ["dependencies"]})["dependencies"]
    assert deps == ["numpy", "intel-openmp>=2024"]


@pytest.mark.parametrize("entries, project, words", [
    ('"libnuma.so.1"', DYNAMIC, "must be a list of tables"),
    ('[{library = "numa"}]', DYNAMIC, "entry 1: library 'numa' must be a shared library's soname"),
    ('[{library = "libnuma.so.1", require = "x"}]', DYNAMIC, "entry 1: unknown key require (known: library, requires)"),
    ('[{library = "libnuma.so.1"}, {library = "libnuma.so.1"}]', DYNAMIC, "entry 2: libnuma.so.1 is listed twice"),
    ('[{library = "libiomp5.so", requires = ">=1"}]', DYNAMIC, "must be a requirement"),
    (ENTRIES, 'version = "1.0"\ndependencies = ["numpy"]', "'intel-openmp>=2024', which [project] dependencies lacks"),
])
def test_mistakes_are_one_line_naming_the_key(tmp_path: Path, entries: str, project: str, words: str) -> None:
    with pytest.raises(ContractError) as info:
        load_config(write(tmp_path, entries, project))
    assert "[tool.cpubuild] repair-exclude" in str(info.value) and words in str(info.value), str(info.value)


def test_static_dependencies_that_name_the_provider_are_accepted(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, project='version = "1.0"\ndependencies = ["Intel_OpenMP>=2024.1"]'))
    assert [e.requires for e in config.repair_exclude] == [None, "intel-openmp>=2024"]
