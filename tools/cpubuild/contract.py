"""The project contract: what ``[tool.cpubuild]`` in a project's pyproject.toml says.

One typed model (docs/project.md documents each key from here). Standard
library only: the CMake bridge reads it inside isolated builds.

    [tool.cpubuild]
    package = "dotlib"              # import package the libraries go into (default: project.name)
    env-prefix = "DOTLIB"           # runtime variables DOTLIB_ISA / DOTLIB_DISABLE_ISA (default: PACKAGE upper-cased)
    matrix = "isa_matrix.toml"      # the variants (default)
    kind = "ctypes"                 # how variant libraries are loaded: ctypes, or torch (torch.ops libraries)
    selftest = "dotlib.selftest"    # `python -m <this> --json` checks a build (default: the report only)
    benchmark = "benchmarks/bench.py"  # `python <this> --variants a,b --json` times them (default: none)

Sub-tables: [tool.cpubuild.wheel] (wheelbuild.options), [tool.cpubuild.ci]
(commands.ci), [tool.cpubuild.baremetal] (emulate.amx: the GEMM run bare
metal under Bochs 3.0).
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .repairexclude import RepairExclude, parse_repair_exclude

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

TABLE = "tool.cpubuild"
# ctypes: plain C ABI libraries loaded with ctypes; torch: torch C++ extensions
# (TORCH_LIBRARY) loaded with torch.ops.load_library, one variant per process.
KINDS = ("ctypes", "torch")
DEFAULT_MATRIX = "isa_matrix.toml"
PACKAGE_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PREFIX_PATTERN = re.compile(r"^[A-Z][A-Z0-9_]*$")
MODULE_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# Sub-tables other modules own (each validates its own keys).
SUB_TABLES = ("wheel", "ci", "baremetal")
KEYS = ("package", "env-prefix", "matrix", "kind", "selftest", "benchmark", "source", "repair-exclude", *SUB_TABLES)
DOCS = "docs/project.md"


class LocatedError(ValueError):
    """A problem in a project file: which file, where in it, and what (often with the fix)."""

    def __init__(self, path: Path | str, where: str, problem: str) -> None:
        self.path = str(path)
        self.where = where
        self.problem = problem
        super().__init__(f"{self.path}: {where}: {problem}")


class ContractError(LocatedError):
    """A problem in pyproject.toml's [tool.cpubuild]."""


@dataclass(frozen=True, kw_only=True)
class Command:
    """An entry point: a module (`python -m`) or a script path, plus arguments."""

    target: str
    args: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return shlex.join([self.target, *self.args])


@dataclass(frozen=True, kw_only=True)
class ProjectConfig:
    """`[tool.cpubuild]`, validated, defaults filled in."""

    pyproject: Path
    dist_name: str  # [project] name
    package: str
    env_prefix: str
    matrix: Path
    kind: str
    selftest: Command | None
    benchmark: Command | None
    source: Path | None  # the package's source directory, when declared
    static_version: str | None  # [project] version, when not dynamic
    tables: dict[str, Any] = field(hash=False, default_factory=dict)  # the sub-tables (wheel, ci, baremetal)
    repair_exclude: tuple[RepairExclude, ...] = ()  # libraries the wheel must not carry (repairexclude.py)

    @property
    def root(self) -> Path:
        return self.pyproject.parent

    @property
    def wheel_name(self) -> str:
        """The distribution name as wheel file names spell it."""
        return re.sub(r"[-_.]+", "_", self.dist_name).lower()

    def runtime_facts(self) -> dict[str, Any]:
        """What the runtime manifest records about the project."""
        return {
            "dist": self.dist_name,
            "package": self.package,
            "env_prefix": self.env_prefix,
            "kind": self.kind,
            "selftest": self.selftest.text if self.selftest else None,
        }


def read_pyproject(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ContractError(path, "file", f"cannot be read: {exc.strerror or exc}") from None
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ContractError(path, "syntax", str(exc)) from None
    return data


def has_table(data: dict[str, Any]) -> bool:
    tool = data.get("tool")
    return isinstance(tool, dict) and "cpubuild" in tool


def _command(path: Path, key: str, value: Any, *, module: bool) -> Command | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ContractError(path, f"[{TABLE}] {key}", "must be a non-empty string")
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise ContractError(path, f"[{TABLE}] {key}", f"cannot be split into words: {exc}") from None
    if module and not MODULE_PATTERN.match(words[0]):
        raise ContractError(path, f"[{TABLE}] {key}", f"{words[0]!r} is not a module name (e.g. mypkg.selftest)")
    return Command(target=words[0], args=tuple(words[1:]))


def parse_config(data: dict[str, Any], path: Path) -> ProjectConfig:
    """Validates [tool.cpubuild] (which must exist) and fills in the defaults."""
    if not has_table(data):
        raise ContractError(
            path, f"[{TABLE}]", f"missing; add a [{TABLE}] table (at least `package = \"NAME\"`), see {DOCS}"
        )
    table = data["tool"]["cpubuild"]
    if not isinstance(table, dict):
        raise ContractError(path, f"[{TABLE}]", "must be a table")
    for key in table:
        if key not in KEYS:
            raise ContractError(path, f"[{TABLE}] {key}", f"unknown key (known: {', '.join(KEYS)})")
    raw_project = data.get("project")
    project: dict[str, Any] = raw_project if isinstance(raw_project, dict) else {}
    dist_name = project.get("name")
    if not isinstance(dist_name, str) or not dist_name:
        raise ContractError(path, "[project] name", "is required")
    package = table.get("package", re.sub(r"[-.]+", "_", dist_name).lower())
    if not isinstance(package, str) or not PACKAGE_PATTERN.match(package):
        raise ContractError(path, f"[{TABLE}] package", f"{package!r} is not a Python package name")
    prefix = table.get("env-prefix", package.upper())
    if not isinstance(prefix, str) or not PREFIX_PATTERN.match(prefix):
        raise ContractError(path, f"[{TABLE}] env-prefix", f"{prefix!r} must be upper-case letters, digits and '_' (e.g. {package.upper()})")
    matrix = table.get("matrix", DEFAULT_MATRIX)
    if not isinstance(matrix, str) or not matrix:
        raise ContractError(path, f"[{TABLE}] matrix", "must be a path relative to pyproject.toml")
    kind = table.get("kind", "ctypes")
    if kind not in KINDS:
        raise ContractError(path, f"[{TABLE}] kind", f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
    source = table.get("source")
    if source is not None and (not isinstance(source, str) or not source):
        raise ContractError(path, f"[{TABLE}] source", "must be the package's source directory, relative to pyproject.toml")
    for key in SUB_TABLES:
        if key in table and not isinstance(table[key], dict):
            raise ContractError(path, f"[{TABLE}.{key}]", "must be a table")
    dynamic = project.get("dynamic", [])
    version = project.get("version")
    if "version" not in dynamic and not isinstance(version, str):
        raise ContractError(path, "[project] version", "is required (a static string, or \"version\" in project.dynamic)")
    if kind == "torch" and "dependencies" not in dynamic:
        raise ContractError(path, "[project] dynamic", "a torch project lists \"dependencies\" there: cpubuild's provider "
                            "pins the torch minor it was built against (the C++ ABI changes between minors), see docs/project.md")
    deps = project.get("dependencies")
    static_deps = [str(d) for d in deps] if "dependencies" not in dynamic and isinstance(deps, list) else (
        [] if "dependencies" not in dynamic else None)
    excludes, problem = parse_repair_exclude(table.get("repair-exclude"), static_deps)
    if problem:
        raise ContractError(path, f"[{TABLE}] repair-exclude", problem)
    return ProjectConfig(
        pyproject=path,
        dist_name=dist_name,
        package=package,
        env_prefix=prefix,
        matrix=path.parent / matrix,
        kind=kind,
        selftest=_command(path, "selftest", table.get("selftest"), module=True),
        benchmark=_command(path, "benchmark", table.get("benchmark"), module=False),
        source=path.parent / source if source else None,
        static_version=version if "version" not in dynamic else None,
        tables={key: dict(table.get(key, {})) for key in SUB_TABLES},
        repair_exclude=excludes,
    )


def load_config(root: Path) -> ProjectConfig:
    path = root / "pyproject.toml"
    return parse_config(read_pyproject(path), path)
