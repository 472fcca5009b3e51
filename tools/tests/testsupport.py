"""Shared test helpers of cpubuild's tests (tools/tests) and cpukern's (tests/):
`from testsupport import require_tool, run, REPO, ...` (pytest's `pythonpath` has tools/tests).

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
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Collection, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CPUKERN_MATRIX = REPO / "isa_matrix.toml"  # cpukern, the first project built with cpubuild

sys.path.insert(0, str(REPO / "tools"))

# The skip rule is a plugin (`-p ci_skip_rule` in addopts), not hooks of a conftest:
# a conftest's hooks miss the reports of a folder whose own conftest skips while it is imported.
from ci_skip_rule import HOST_FACT, in_ci, require, require_host, skip_host_fact  # noqa: E402

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


def nested_pytest(python: Path, cwd: Path, *, env: Mapping[str, str], host_facts: Collection[str] = (),
                  args: tuple[str, ...] = (), timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Runs a project's own tests with `python -m pytest`; they must pass, and their skips count here.

    Every skip of the nested run is reported to this test: under CI=true one
    fails it, on a developer machine it skips it with the nested reasons. A
    nested skip is allowed only as a host fact: its reason starts with the
    marker, or is one of `host_facts` (reasons the calling test has checked
    against an oracle)."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        proc = run([str(python), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={xml}", *args], cwd=cwd,
                   env=dict(env), check=False, timeout=timeout)
        assert_not_killed(proc, f"pytest in {cwd.name}")
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        suite = ET.parse(xml).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    assert suite is not None, f"pytest in {cwd.name} wrote no test suite"
    reasons = [(case.get("name", "?"), (skip.get("message") or "").removeprefix("Skipped: "))
               for case in suite.iter("testcase") for skip in case.findall("skipped")]
    ran = int(suite.get("tests", "0")) - len(reasons)
    assert ran > 0 and int(suite.get("failures", "0")) == int(suite.get("errors", "0")) == 0, proc.stdout[-4000:]
    undeclared = [f"{name}: {why}" for name, why in reasons if not why.startswith(HOST_FACT) and why not in host_facts]
    require(not undeclared, f"the nested pytest run in {cwd.name} skipped {len(undeclared)}: {'; '.join(undeclared)}")
    return proc
