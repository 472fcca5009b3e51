"""Print what building a project's wheel needs from PyPI besides cpubuild, one
requirement a line: its build-system.requires without cpubuild(-core) itself (the
image's build stage installs that from the wheels of the cpubuild that runs
`cpubuild image`), so the Dockerfile never repeats a list. cpubuild's template
installs the hashed set docker/hashed.py resolves from it; older copies of the
template run this module in the build stage.

    python -m cpubuild.docker.requirements PROJECT_DIR
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..selfwheel import CLI, CORE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib


def requirements(root: Path) -> list[str]:
    data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    out: list[str] = []
    for req in data.get("build-system", {}).get("requires", []):
        name = re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;@\[ ]", str(req), maxsplit=1)[0].strip()).lower()  # PEP 503
        if name not in (CLI, CORE) and req not in out:
            out.append(str(req))
    return out


if __name__ == "__main__":
    print("\n".join(requirements(Path(sys.argv[1] if len(sys.argv) > 1 else "."))))
