"""Shared test helpers.

Tests that need an external tool call `require_tool` / `require`: on a
developer machine without it they skip with the reason; under CI=true a
missing tool fails the test (no silent skips in CI). The rule holds for every
skip, whatever its marker or origin (`pytest.importorskip` included): under
CI=true a skip fails the test unless it states a fact of the host that no
installation changes (`skip_host_fact`, e.g. "this CPU runs every variant").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CPUKERN_MATRIX = REPO / "isa_matrix.toml"  # cpukern, the first project built with cpubuild
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

sys.path.insert(0, str(REPO / "tools"))


def require(condition: bool, reason: str) -> None:
    """Skip (developer machine) or fail (CI) when a prerequisite is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI=true and a prerequisite is missing: {reason}", pytrace=False)
    pytest.skip(reason)


HOST_FACT = "host fact: "


def skip_host_fact(reason: str) -> None:
    """Skip because of what this host is (its CPU, its NumPy build), not what it lacks: allowed in CI."""
    pytest.skip(HOST_FACT + reason)


def _skip_reason(longrepr: object) -> str:
    return str(longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail") and HOST_FACT not in _skip_reason(report.longrepr):
        report.outcome = "failed"
        report.longrepr = f"CI=true forbids this skip (install what it needs): {_skip_reason(report.longrepr)}"
    return None


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if IN_CI and report.skipped and HOST_FACT not in _skip_reason(report.longrepr):
        report.outcome = "failed"
        report.longrepr = f"CI=true forbids skipping a whole module (install what it needs): {_skip_reason(report.longrepr)}"


def require_tool(*names: str) -> None:
    for name in names:
        require(shutil.which(name) is not None, f"{name} is not installed (run scripts/setup.sh)")


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
