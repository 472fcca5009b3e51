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

Every key and sub-table is declared once in cpubuild.settings (model.py);
this module derives the project facts. Sub-tables: [tool.cpubuild.wheel]
(wheelbuild.options), [tool.cpubuild.test] (emulate.testrun), [tool.cpubuild.bench] (bench.run),
[tool.cpubuild.ci] (workflow.render), [tool.cpubuild.baremetal] (emulate.amx: the GEMM run bare metal under
Bochs 3.0).
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .repairexclude import RepairExclude, parse_repair_exclude
from .settings import CpubuildSettings, SettingsError, fields_of, read_table
from .settings import LocatedError as LocatedError
from .settings import model as settings_model
from .settings.reader import CONTROL

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

TABLE = "tool.cpubuild"
# ctypes: plain C ABI libraries loaded with ctypes; torch: torch C++ extensions
# (TORCH_LIBRARY) loaded with torch.ops.load_library, one variant per process.
KINDS = settings_model.KINDS
DEFAULT_MATRIX = settings_model.DEFAULT_MATRIX
MODULE_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# PEP 508 distribution names
DIST_NAME = re.compile(r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]")
SUB_TABLES = tuple(f.key for f in fields_of(CpubuildSettings) if f.kind == "table")
KEYS = tuple(f.key for f in fields_of(CpubuildSettings))
DOCS = "docs/project.md"

ContractError = SettingsError  # one error class for every bad setting


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
    tables: dict[str, Any] = field(hash=False, default_factory=dict)  # the sub-tables (wheel, test, bench, ci, baremetal), as written
    settings: CpubuildSettings = field(hash=False, default_factory=CpubuildSettings)  # all, typed
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


def _command(path: Path, key: str, value: str | None, *, module: bool) -> Command | None:
    if value is None:
        return None
    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise ContractError(path, f"[{TABLE}] {key}", f"cannot be split into words: {exc}") from None
    if module and not MODULE_PATTERN.fullmatch(words[0]):
        raise ContractError(path, f"[{TABLE}] {key}", f"{words[0]!r} is not a module name (e.g. mypkg.selftest)")
    return Command(target=words[0], args=tuple(words[1:]))


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and not CONTROL.search(v) for v in value)


def check_standard_tables(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The PEP 517/621 fields cpubuild reads, type-checked; returns [project]."""
    system = data.get("build-system", {})
    if not isinstance(system, dict):
        raise ContractError(path, "[build-system]", "must be a table")
    if "requires" in system and not _strings(system["requires"]):
        raise ContractError(path, "[build-system] requires", "must be a list of requirement strings")
    if "build-backend" in system and not isinstance(system["build-backend"], str):
        raise ContractError(path, "[build-system] build-backend", "must be a string")
    project = data.get("project", {})
    if not isinstance(project, dict):
        raise ContractError(path, "[project]", "must be a table")
    name = project.get("name")
    if not isinstance(name, str) or not name:
        raise ContractError(path, "[project] name", "is required")
    if not DIST_NAME.fullmatch(name):
        raise ContractError(path, "[project] name", f"{name!r} is not a distribution name (letters, digits, '.', '_', '-')")
    for key in ("dynamic", "dependencies"):
        if key in project and not _strings(project[key]):
            raise ContractError(path, f"[project] {key}", "must be a list of strings")
    return project


def parse_config(data: dict[str, Any], path: Path) -> ProjectConfig:
    """Validates [tool.cpubuild] (which must exist; every sub-table through the
    settings model) and the standard fields cpubuild reads, fills in the defaults."""
    if not has_table(data):
        raise ContractError(
            path, f"[{TABLE}]", f"missing; add a [{TABLE}] table (at least `package = \"NAME\"`), see {DOCS}"
        )
    table = data["tool"]["cpubuild"]
    model: CpubuildSettings = read_table(CpubuildSettings, table, path, TABLE)
    project = check_standard_tables(data, path)
    dist_name = project["name"]
    package = model.package or re.sub(r"[-.]+", "_", dist_name).lower()
    if not re.fullmatch(settings_model.PACKAGE, package):
        raise ContractError(path, f"[{TABLE}] package", f"{package!r} is not a Python package name")
    prefix = model.env_prefix or package.upper()
    if not re.fullmatch(settings_model.PREFIX, prefix):
        raise ContractError(path, f"[{TABLE}] env-prefix", f"{prefix!r} must be upper-case letters, digits and '_' (e.g. {package.upper()})")
    dynamic = project.get("dynamic", [])
    version = project.get("version")
    if "version" not in dynamic and not isinstance(version, str):
        raise ContractError(path, "[project] version", "is required (a static string, or \"version\" in project.dynamic)")
    if isinstance(version, str) and CONTROL.search(version):
        raise ContractError(path, "[project] version", f"{version!r} holds a control character")
    if model.kind == "torch" and "dependencies" not in dynamic:
        raise ContractError(path, "[project] dynamic", "a torch project lists \"dependencies\" there: cpubuild's provider "
                            "pins the torch minor it was built against (the C++ ABI changes between minors), see docs/project.md")
    deps = project.get("dependencies")
    static_deps = [str(d) for d in deps] if "dependencies" not in dynamic and isinstance(deps, list) else (
        [] if "dependencies" not in dynamic else None)
    excludes, problem = parse_repair_exclude([dict(r) for r in model.repair_exclude] or None, static_deps)
    if problem:
        raise ContractError(path, f"[{TABLE}] repair-exclude", problem)
    return ProjectConfig(
        pyproject=path,
        dist_name=dist_name,
        package=package,
        env_prefix=prefix,
        matrix=path.parent / model.matrix,
        kind=model.kind,
        selftest=_command(path, "selftest", model.selftest, module=True),
        benchmark=_command(path, "benchmark", model.benchmark, module=False),
        source=path.parent / model.source if model.source else None,
        static_version=version if "version" not in dynamic else None,
        tables={key: dict(table.get(key, {})) for key in SUB_TABLES},
        settings=model,
        repair_exclude=excludes,
    )


def load_config(root: Path) -> ProjectConfig:
    path = root / "pyproject.toml"
    return parse_config(read_pyproject(path), path)
