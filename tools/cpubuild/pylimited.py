"""The Py_LIMITED_API value of a project's abi3 extension modules: the
lowest Python its `requires-python` admits, as CPython's version hex
(``>=3.10`` -> ``0x030A0000``). Standard library only (the CMake bridge)."""

from __future__ import annotations

import re
from pathlib import Path

from .contract import read_pyproject

_FLOOR = re.compile(r">=\s*3\.(\d+)")


def limited_api(requires_python: str | None) -> str | None:
    """'>=3.10' -> '0x030A0000'; None when no lower bound on Python 3 is given."""
    match = _FLOOR.search(requires_python or "")
    return None if match is None else f"0x03{int(match.group(1)):02X}0000"


def project_limited_api(pyproject: Path) -> str | None:
    project = read_pyproject(pyproject).get("project", {})
    value = project.get("requires-python") if isinstance(project, dict) else None
    return limited_api(value if isinstance(value, str) else None)
