"""The project being built: where it is and what its pyproject.toml says."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion

from ..errors import MatrixFileError, UsageError
from ..matrix import DEFAULT_MATRIX, Matrix, MatrixError, load_matrix

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MATRIX_NAME = "isa_matrix.toml"


@dataclass(frozen=True, kw_only=True)
class Project:
    root: Path
    pyproject: dict[str, Any] = field(hash=False)

    @property
    def matrix_path(self) -> Path:
        return self.root / MATRIX_NAME

    def tool(self, *keys: str) -> Any:
        node: Any = self.pyproject.get("tool", {})
        for key in keys:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        return node

    @property
    def base_version_file(self) -> Path:
        """The file holding the no-tag base version (the version provider's fallback)."""
        for entry in self.tool("dynamic-metadata") or []:
            if isinstance(entry, dict) and isinstance(entry.get("fallback"), str):
                return self.root / str(entry["fallback"])
        legacy = self.tool("scikit-build", "metadata", "version")
        if isinstance(legacy, dict) and isinstance(legacy.get("input"), str):
            return self.root / str(legacy["input"])
        raise UsageError(f"{self.root / 'pyproject.toml'}: no version provider with a fallback/input file")

    def load_matrix(self) -> Matrix:
        try:
            return load_matrix(self.matrix_path)
        except MatrixError as exc:
            raise MatrixFileError(str(exc)) from None

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


def find_project(start: Path | None) -> Project:
    """`start` (if given) must be a project; else the nearest one above the working
    directory; else the checkout cpubuild itself came from."""
    candidates: list[Path]
    if start is not None:
        candidates = [start.resolve()]
    else:
        here = Path.cwd().resolve()
        candidates = [here, *here.parents, DEFAULT_MATRIX.parent]
    for root in candidates:
        if (root / "pyproject.toml").is_file() and (root / MATRIX_NAME).is_file():
            try:
                data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise UsageError(f"{root / 'pyproject.toml'}: {exc}") from None
            return Project(root=root, pyproject=data)
    where = start if start is not None else Path.cwd()
    raise UsageError(f"no project (pyproject.toml + {MATRIX_NAME}) at or above {where}; pass --project DIR")
