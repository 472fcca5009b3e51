"""The project being built: the one way cpubuild finds it and reads its contract.

`--project DIR` names it; otherwise it is the nearest directory at or above the
working directory that holds a pyproject.toml next to an isa_matrix.toml (or a
pyproject.toml with a [tool.cpubuild] table). Outside any project every
command says so - cpubuild never falls back to a checkout of its own.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion

from .contract import DEFAULT_MATRIX, ContractError, ProjectConfig, has_table, parse_config, read_pyproject
from .errors import MatrixFileError, UsageError
from .matrix import Matrix, MatrixError, load_matrix
from .wheelbuild.version import SourceVersion, source_version, static_source_version

PYPROJECT = "pyproject.toml"
DOCS = "docs/project.md"
VERSION_PROVIDER = "cpubuild"  # the dynamic_metadata.provider entry point
# What a CMakeLists.txt of a cpubuild project calls (checked before building).
FIND_PACKAGE = re.compile(r"find_package\s*\(\s*cpubuild\b", re.IGNORECASE)
ADD_VARIANTS = re.compile(r"\bcpubuild_add_variants\s*\(")
BRACKET_COMMENT = re.compile(r"#\[(=*)\[.*?\]\1\]", re.DOTALL)
LINE_COMMENT = re.compile(r"#.*")


@dataclass(frozen=True, kw_only=True)
class Project:
    root: Path
    pyproject: dict[str, Any] = field(hash=False)
    config: ProjectConfig

    @property
    def matrix_path(self) -> Path:
        return self.config.matrix

    def tool(self, *keys: str) -> Any:
        node: Any = self.pyproject.get("tool", {})
        for key in keys:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        return node

    def load_matrix(self) -> Matrix:
        try:
            return load_matrix(self.matrix_path)
        except MatrixError as exc:
            raise MatrixFileError(str(exc)) from None

    @property
    def base_version_file(self) -> Path | None:
        """The file holding the no-tag base version (cpubuild's version provider's
        fallback); None for a static [project] version."""
        if self.config.static_version is not None:
            return None
        for entry in self.tool("dynamic-metadata") or []:
            if isinstance(entry, dict) and isinstance(entry.get("fallback"), str):
                return self.root / str(entry["fallback"])
        raise UsageError(
            f"{self.root / PYPROJECT}: [project] version is dynamic but no [[tool.dynamic-metadata]] entry "
            f"with provider = \"{VERSION_PROVIDER}\" and a fallback file sets it (see {DOCS})"
        )

    @property
    def source_dir(self) -> Path | None:
        """The package's source directory: [tool.cpubuild] source, a wheel.packages
        entry of scikit-build-core, else src/<pkg>, python/<pkg> or <pkg>."""
        if self.config.source is not None:
            return self.config.source
        package = self.config.package
        declared = [str(p) for p in self.tool("scikit-build", "wheel", "packages") or [] if isinstance(p, str)]
        candidates = [self.root / p for p in declared if Path(p).name == package]
        candidates += [self.root / "src" / package, self.root / "python" / package, self.root / package]
        return next((c for c in candidates if (c / "__init__.py").is_file()), None)

    def source_version(self) -> SourceVersion:
        """The version to build: a static [project] version as written, else
        cpubuild's provider's (CPUBUILD_VERSION, else git, else the fallback file)."""
        if self.config.static_version is not None:
            return static_source_version(self.config.static_version, self.root, os.environ)
        base = self.base_version_file
        assert base is not None
        return source_version(self.root, base, os.environ)

    def cmake_problems(self) -> list[str]:
        """What the project's CMakeLists.txt lacks of the cpubuild CMake interface."""
        path = self.root / "CMakeLists.txt"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return [f"{path}: missing; a cpubuild project builds with CMake (see {DOCS}, or run `cpubuild init`)"]
        texts = [text, *(p.read_text(encoding="utf-8", errors="replace") for p in sorted(self.root.glob("cmake/*.cmake")))]
        # comments do not count: bracket comments #[[ ... ]] (any number of '='), then line comments
        code = "\n".join(LINE_COMMENT.sub("", BRACKET_COMMENT.sub("", t)) for t in texts)
        problems = []
        if not FIND_PACKAGE.search(code):
            problems.append(f"{path}: never calls find_package(cpubuild CONFIG REQUIRED) (see {DOCS})")
        if not ADD_VARIANTS.search(code):
            problems.append(f"{path}: never calls cpubuild_add_variants(NAME SOURCES ...), so no variant would be built (see {DOCS})")
        return problems

    def backend_importable(self) -> bool:
        """Whether build-system.requires is already satisfied here (then no isolated env is needed)."""
        for raw in self.pyproject.get("build-system", {}).get("requires", []):
            try:
                req = Requirement(raw)
            except InvalidRequirement:
                return False
            if req.marker is not None and not req.marker.evaluate():
                continue
            try:
                installed = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                return False
            try:
                if installed not in req.specifier and not req.specifier.contains(installed, prereleases=True):
                    return False
            except InvalidVersion:
                return False
        return True


def _is_project(directory: Path) -> bool:
    if not (directory / PYPROJECT).is_file():
        return False
    if (directory / DEFAULT_MATRIX).is_file():
        return True
    try:
        return has_table(read_pyproject(directory / PYPROJECT))
    except ContractError:
        return False


def load_project(root: Path) -> Project:
    """The project at `root` (its contract validated)."""
    path = root / PYPROJECT
    try:
        data = read_pyproject(path)
        config = parse_config(data, path)
    except ContractError as exc:
        raise UsageError(str(exc)) from None
    return Project(root=root, pyproject=data, config=config)


def nearest_project(cwd: Path | None = None) -> Project | None:
    """The nearest project at or above the working directory (its contract validated), or None."""
    here = (cwd or Path.cwd()).resolve()
    for root in (here, *here.parents):
        if _is_project(root):
            return load_project(root)
    return None


def find_project(start: Path | None, *, cwd: Path | None = None) -> Project:
    """`start` (if given) must be a project; else the nearest one at or above the working directory."""
    if start is not None:
        root = start.resolve()
        if not (root / PYPROJECT).is_file():
            raise UsageError(f"--project {start}: no {PYPROJECT} there (a cpubuild project has pyproject.toml + {DEFAULT_MATRIX}; `cpubuild init DIR` makes one)")
        return load_project(root)
    project = nearest_project(cwd)
    if project is not None:
        return project
    here = (cwd or Path.cwd()).resolve()
    raise UsageError(
        f"not inside a cpubuild project: no {PYPROJECT} with {DEFAULT_MATRIX} at or above {here}; "
        "pass --project DIR, or create one with `cpubuild init DIR --name NAME`"
    )
