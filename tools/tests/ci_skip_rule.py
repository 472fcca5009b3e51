"""The CI=true rule: no skip passes unless it states a fact of the host.

On a developer machine a test that lacks a tool or package skips with the
reason. Under CI=true every skip - in a test, a fixture, a marker, a
parametrized case, or a whole module or class skipped while being collected
(`pytest.importorskip` at module level) - becomes a failure that carries the
reason, unless the reason starts with `HOST_FACT` (`skip_host_fact`: what this
CPU is, which no installation changes). The reports are rewritten inside the
hooks that make them, so pytest counts, summarises and exits on the failure
whatever `-r` or `addopts` says. `tools/tests/testsupport.py` and the scratch suite
(`tools/tests/unit/test_ci_skip_rule.py`) load these hooks.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

HOST_FACT = "host fact: "


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip (developer machine) or fail (CI) when a prerequisite is missing."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"CI=true and a prerequisite is missing: {reason}", pytrace=False)
    pytest.skip(reason)


def skip_host_fact(reason: str) -> None:
    """Skip because of what this host is (its CPU, its NumPy build), not what it lacks: allowed in CI."""
    pytest.skip(HOST_FACT + reason)


def require_host(condition: bool, reason: str) -> None:
    """Skip as a host fact (allowed in CI) unless this host is what the test needs (its arch, its CPU)."""
    if not condition:
        skip_host_fact(reason)


def skip_reason(longrepr: object) -> str:
    """The reason a skip report carries, without pytest's 'Skipped: ' prefix."""
    text = str(longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else longrepr)
    return text.removeprefix("Skipped: ")


def forbidden_skip(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """The reason of a skip that CI=true forbids, None for any other report."""
    if not in_ci() or not report.skipped or hasattr(report, "wasxfail"):
        return None
    reason = skip_reason(report.longrepr)
    return None if reason.startswith(HOST_FACT) else reason


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    reason = forbidden_skip(report)
    if reason is not None:
        report.outcome = "failed"
        report.longrepr = f"CI=true forbids this skip (install what it needs): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    # Here, not in pytest_collectreport: by then the terminal reporter has counted the skip.
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    reason = forbidden_skip(report)
    if reason is not None:
        report.outcome = "failed"
        report.longrepr = f"CI=true forbids skipping {collector.nodeid or 'this directory'} (install what it needs): {reason}"
