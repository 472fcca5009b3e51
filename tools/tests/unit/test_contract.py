"""The project contract: `[tool.cpubuild]` in a project's pyproject.toml
(cpubuild.contract). Defaults, the facts derived from [project], and every bad
key or value refused with a ContractError that names the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cpubuild.contract import (
    DEFAULT_MATRIX,
    KEYS,
    Command,
    ContractError,
    load_config,
    parse_config,
    read_pyproject,
)
from testsupport import REPO

PATH = Path("/proj/pyproject.toml")


def config(table: dict[str, Any] | None = None, **project: Any) -> Any:
    """parse_config of a pyproject with this [project] (name/version defaulted) and [tool.cpubuild]."""
    project = {"name": "dotlib", "version": "1.0", **project}
    project = {k: v for k, v in project.items() if v is not None}
    return parse_config({"project": project, "tool": {"cpubuild": table or {}}}, PATH)


def refused(data: dict[str, Any]) -> ContractError:
    with pytest.raises(ContractError) as info:
        parse_config(data, PATH)
    exc = info.value
    assert exc.path == str(PATH)
    assert str(exc) == f"{PATH}: {exc.where}: {exc.problem}"
    return exc


# ------------------------------------------------------------------ defaults


def test_defaults_come_from_the_project() -> None:
    c = config()
    assert (c.dist_name, c.package, c.env_prefix) == ("dotlib", "dotlib", "DOTLIB")
    assert c.pyproject == PATH and c.root == Path("/proj")
    assert c.matrix == Path("/proj") / DEFAULT_MATRIX == Path("/proj/isa_matrix.toml")
    assert (c.kind, c.selftest, c.benchmark, c.source) == ("ctypes", None, None, None)
    assert c.tables == {"wheel": {}, "test": {}, "bench": {}, "ci": {}, "baremetal": {}}
    assert c.static_version == "1.0"


@pytest.mark.parametrize(
    ("name", "package", "prefix", "wheel_name"),
    [("dotlib", "dotlib", "DOTLIB", "dotlib"),
     ("Dot-Lib", "dot_lib", "DOT_LIB", "dot_lib"),
     ("dot.lib", "dot_lib", "DOT_LIB", "dot_lib"),
     ("My_Kernels--2", "my_kernels_2", "MY_KERNELS_2", "my_kernels_2")],
)
def test_package_and_prefix_derive_from_the_name(name: str, package: str, prefix: str, wheel_name: str) -> None:
    c = config(name=name)
    assert (c.dist_name, c.package, c.env_prefix, c.wheel_name) == (name, package, prefix, wheel_name)


def test_prefix_follows_an_explicit_package() -> None:
    c = config({"package": "fastdot"}, name="dot-lib")
    assert (c.package, c.env_prefix, c.wheel_name) == ("fastdot", "FASTDOT", "dot_lib")
    assert config({"package": "fastdot", "env-prefix": "FD"}).env_prefix == "FD"


def test_every_key_given() -> None:
    c = config({
        "package": "dotlib", "env-prefix": "DOT", "matrix": "build/isa.toml", "kind": "ctypes",
        "selftest": "dotlib.selftest --quick 'a b'", "benchmark": "benchmarks/bench.py --variants",
        "source": "src/dotlib", "wheel": {"frontend": "uv"}, "ci": {"cpubuild": "./tools"},
    })
    assert c.matrix == Path("/proj/build/isa.toml") and c.source == Path("/proj/src/dotlib")
    assert c.selftest == Command(target="dotlib.selftest", args=("--quick", "a b"))
    assert c.selftest.text == "dotlib.selftest --quick 'a b'"  # shell-quoted back
    assert c.benchmark == Command(target="benchmarks/bench.py", args=("--variants",))  # a script path is fine here
    assert c.tables == {"wheel": {"frontend": "uv"}, "test": {}, "bench": {}, "ci": {"cpubuild": "./tools"}, "baremetal": {}}
    assert c.runtime_facts() == {"dist": "dotlib", "package": "dotlib", "env_prefix": "DOT", "kind": "ctypes",
                                 "selftest": "dotlib.selftest --quick 'a b'"}
    assert set(KEYS) == {"package", "env-prefix", "matrix", "kind", "selftest", "benchmark", "source", "repair-exclude", "wheel", "test", "bench", "ci",
                         "baremetal"}


def test_static_and_dynamic_versions() -> None:
    assert config(version="2.0.1").static_version == "2.0.1"
    dynamic = config(version=None, dynamic=["version"])
    assert dynamic.static_version is None
    assert config(version=None, dynamic=["version", "readme"]).static_version is None
    # version listed as dynamic wins over a stray static one (PEP 621 forbids both)
    assert config(version="1.0", dynamic=["version"]).static_version is None
    assert config(dynamic=["readme"]).static_version == "1.0"


def test_runtime_facts_without_selftest() -> None:
    assert config().runtime_facts()["selftest"] is None


def test_an_empty_table_is_a_contract() -> None:
    data = {"project": {"name": "x", "version": "1"}, "tool": {"cpubuild": {}}}
    assert parse_config(data, PATH).package == "x"


# ------------------------------------------------------------------ refusals

BASE: dict[str, Any] = {"project": {"name": "dotlib", "version": "1.0"}}


def with_table(**table: Any) -> dict[str, Any]:
    return {**BASE, "tool": {"cpubuild": table}}


BAD: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
    ("no table", dict(BASE), "[tool.cpubuild]", ("missing", "package = \"NAME\"", "docs/project.md")),
    ("no [tool] at all but other tools", {**BASE, "tool": {"ruff": {}}}, "[tool.cpubuild]", ("missing",)),
    ("table is a value", {**BASE, "tool": {"cpubuild": "dotlib"}}, "[tool.cpubuild]", ("must be a table",)),
    ("unknown key", with_table(pakage="dotlib"), "[tool.cpubuild] pakage", ("unknown key", "package, env-prefix")),
    ("no [project] name", {"project": {"version": "1"}, "tool": {"cpubuild": {}}}, "[project] name", ("is required",)),
    ("no [project] table", {"tool": {"cpubuild": {}}}, "[project] name", ("is required",)),
    ("[project] name not a string", {"project": {"name": 5, "version": "1"}, "tool": {"cpubuild": {}}}, "[project] name", ("is required",)),
    ("package with a dash", with_table(package="dot-lib"), "[tool.cpubuild] package", ("'dot-lib' is not a Python package name",)),
    ("package starting with a digit", with_table(package="1dot"), "[tool.cpubuild] package", ("'1dot'",)),
    ("package a dotted path", with_table(package="dot.lib"), "[tool.cpubuild] package", ("not a Python package name",)),
    ("package not a string", with_table(package=["dotlib"]), "[tool.cpubuild] package", ("not a Python package name",)),
    ("name that makes no package", {"project": {"name": "3d", "version": "1"}, "tool": {"cpubuild": {}}},
     "[tool.cpubuild] package", ("'3d' is not a Python package name",)),
    ("lower-case prefix", with_table(**{"env-prefix": "dotlib"}), "[tool.cpubuild] env-prefix",
     ("'dotlib' must be upper-case", "e.g. DOTLIB")),
    ("prefix with a dash", with_table(**{"env-prefix": "DOT-LIB"}), "[tool.cpubuild] env-prefix", ("upper-case letters, digits and '_'",)),
    ("prefix starting with an underscore", with_table(**{"env-prefix": "_DOT"}), "[tool.cpubuild] env-prefix", ("'_DOT'",)),
    ("prefix not a string", with_table(**{"env-prefix": 1}), "[tool.cpubuild] env-prefix", ("must be upper-case",)),
    ("empty matrix path", with_table(matrix=""), "[tool.cpubuild] matrix", ("relative to pyproject.toml",)),
    ("matrix not a string", with_table(matrix=["a.toml"]), "[tool.cpubuild] matrix", ("must be a path",)),
    ("unknown kind", with_table(kind="cffi"), "[tool.cpubuild] kind", ("unknown kind 'cffi'", "known: ctypes")),
    ("empty source", with_table(source=""), "[tool.cpubuild] source", ("source directory",)),
    ("source not a string", with_table(source=1), "[tool.cpubuild] source", ("source directory",)),
    ("wheel not a table", with_table(wheel="uv"), "[tool.cpubuild.wheel]", ("must be a table",)),
    ("ci not a table", with_table(ci=["x"]), "[tool.cpubuild.ci]", ("must be a table",)),
    ("no version at all", {"project": {"name": "dotlib"}, "tool": {"cpubuild": {}}}, "[project] version",
     ("is required", "project.dynamic")),
    ("version not a string", {"project": {"name": "dotlib", "version": 1.0}, "tool": {"cpubuild": {}}}, "[project] version",
     ("is required",)),
    ("empty selftest", with_table(selftest=" "), "[tool.cpubuild] selftest", ("non-empty string",)),
    ("selftest not a string", with_table(selftest=["dotlib.selftest"]), "[tool.cpubuild] selftest", ("non-empty string",)),
    ("selftest a script path", with_table(selftest="tests/selftest.py"), "[tool.cpubuild] selftest",
     ("'tests/selftest.py' is not a module name",)),
    ("selftest unclosed quote", with_table(selftest="dotlib.selftest 'x"), "[tool.cpubuild] selftest", ("cannot be split into words",)),
    ("empty benchmark", with_table(benchmark=""), "[tool.cpubuild] benchmark", ("non-empty string",)),
    ("benchmark unclosed quote", with_table(benchmark='bench.py "x'), "[tool.cpubuild] benchmark", ("cannot be split",)),
]


@pytest.mark.parametrize(("data", "where", "words"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_contract_is_refused_naming_file_and_key(data: dict[str, Any], where: str, words: tuple[str, ...]) -> None:
    exc = refused(data)
    assert exc.where == where
    for word in words:
        assert word in exc.problem, f"{word!r} not in {exc.problem!r}"


# ------------------------------------------------------------------ files


def test_load_config_reads_the_file(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "dot-lib"\nversion = "0.3"\n\n[tool.cpubuild]\nselftest = "dot_lib.check"\n')
    c = load_config(tmp_path)
    assert c.pyproject == tmp_path / "pyproject.toml" and c.root == tmp_path
    assert (c.package, c.env_prefix, c.static_version) == ("dot_lib", "DOT_LIB", "0.3")
    assert c.matrix == tmp_path / "isa_matrix.toml"


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ContractError) as info:
        load_config(tmp_path)
    assert info.value.where == "file" and "cannot be read" in info.value.problem
    assert info.value.path == str(tmp_path / "pyproject.toml")
    (tmp_path / "pyproject.toml").write_text("[project\nname = 'x'\n")
    with pytest.raises(ContractError) as info:
        read_pyproject(tmp_path / "pyproject.toml")
    assert info.value.where == "syntax" and "line 1" in info.value.problem


def test_cpukern_contract() -> None:
    c = load_config(REPO)
    assert (c.dist_name, c.package, c.env_prefix, c.kind) == ("cpukern", "cpukern", "CPUKERN", "ctypes")
    assert c.matrix == REPO / "isa_matrix.toml"
    assert c.static_version is None  # the version comes from cpubuild's provider
    assert c.selftest is not None and c.selftest.target == "cpukern.selftest"
    assert c.benchmark is not None and (REPO / c.benchmark.target).is_file()
