"""Print what `cpubuild wheel` needs from PyPI, one requirement a line.

Read from the two pyproject files (the package's build-system requirements
and cpubuild's own dependencies, plus a `wheel` extra if it declares one), so the build stage of
docker/Dockerfile never repeats a list. The build stage copies this single
file before the sources (a layer that changes only when the requirements do)
and runs it as a script: standard library only, no package imports.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib


def requirements(root: Path) -> list[str]:
    package = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    tools = tomllib.loads((root / "tools" / "pyproject.toml").read_text(encoding="utf-8"))
    project = tools.get("project", {})
    extra = project.get("optional-dependencies", {}).get("wheel", [])
    out: list[str] = []
    for req in [*package.get("build-system", {}).get("requires", []), *project.get("dependencies", []), *extra]:
        if req not in out:
            out.append(req)
    return out


if __name__ == "__main__":
    print("\n".join(requirements(Path(sys.argv[1] if len(sys.argv) > 1 else "."))))
