"""Shared by tools/tests/integration/test_hostile_*.py: the cpubuild CLI as a user runs it, a
hash of a whole tree (equal: untouched), and the one-line-error check."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from testsupport import REPO

TOOLS = str(REPO / "tools")


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, PYTHONPATH=TOOLS, **(env or {}))
    return subprocess.run(
        [sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])", *args],
        capture_output=True, text=True, env=full, cwd=cwd, timeout=timeout, check=False,
    )


def tree_hash(root: Path) -> str:
    """Every path, link target, mode and byte under root."""
    digest = hashlib.sha256()
    if not root.exists():
        return "absent"
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_symlink():
            digest.update(b"link:" + os.readlink(path).encode())
        elif path.is_file():
            digest.update(oct(path.stat().st_mode).encode() + path.read_bytes())
    return digest.hexdigest()


def assert_one_line(out: subprocess.CompletedProcess[str], rc: int, *culprits: str) -> str:
    """Exit code `rc`, and stderr one line naming every culprit, no traceback."""
    assert out.returncode == rc, (out.returncode, out.stdout, out.stderr)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    for culprit in culprits:
        assert culprit in lines[0], (culprit, lines[0])
    return lines[0]
