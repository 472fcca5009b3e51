"""Shared test helpers.

Tests that need an external tool call `require_tool` / `require`: on a
developer machine without it they skip with the reason; under CI=true a
missing tool fails the test (no silent skips in CI). The rule holds for every
skip, whatever its marker or origin (`pytest.importorskip` at module level
included): under CI=true a skip fails unless its reason starts with the
host-fact marker (`skip_host_fact`, e.g. "this CPU runs every variant").
The hooks live in the `ci_skip_rule` plugin.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CPUKERN_MATRIX = REPO / "isa_matrix.toml"  # cpukern, the first project built with cpubuild

sys.path.insert(0, str(REPO / "tools"))

pytest.register_assert_rewrite("ci_skip_rule")  # a plugin (below) that this module imports first
from ci_skip_rule import HOST_FACT, in_ci, require, require_host, skip_host_fact  # noqa: E402

# A plugin, not hooks of this conftest: a conftest's hooks miss the reports of
# a folder whose own conftest skips while it is imported.
pytest_plugins = ["ci_skip_rule"]

__all__ = [
    "CPUKERN_MATRIX",
    "HOST_FACT",
    "REPO",
    "assert_not_killed",
    "in_ci",
    "require",
    "require_host",
    "require_tool",
    "run",
    "skip_host_fact",
]


def require_tool(*names: str) -> None:
    for name in names:
        require(shutil.which(name) is not None, f"{name} is not installed (run scripts/setup.sh)")


def assert_not_killed(proc: subprocess.CompletedProcess[str], what: str) -> None:
    """A process killed by a signal is a failure that names the signal, never a skip."""
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        raise AssertionError(f"{what} was killed by {name}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")


def run(cmd: list[str], *, check: bool = True, timeout: float = 1800, **kw: object) -> subprocess.CompletedProcess[str]:
    """Runs a command, capturing text output; on failure shows its output."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
