"""The CI=true no-skip rule, proven on scratch projects (pytester).

Each kind of skip fails under CI=true with its reason - with the project's
flags, with `-rfE`, and with `-o addopts=` - unless the reason starts with the
host-fact marker; on a developer machine it stays a skip.
"""

from __future__ import annotations

import pytest
from ci_skip_rule import HOST_FACT

pytest_plugins = ["pytester"]

HOOKS = 'pytest_plugins = ["ci_skip_rule"]\n'  # as tools/tests/testsupport.py loads it

# Every kind of skip, as a test module whose only skip carries REASON.
KINDS = {
    "module importorskip": 'import pytest\npytest.importorskip("no_such_module_ci_rule", reason=REASON)\n'
                           "def test_a():\n    pass\n",
    "module skip": "import pytest\npytest.skip(REASON, allow_module_level=True)\ndef test_a():\n    pass\n",
    "module pytestmark": "import pytest\npytestmark = pytest.mark.skipif(True, reason=REASON)\ndef test_a():\n    pass\n",
    "in test": "import pytest\ndef test_a():\n    pytest.skip(REASON)\n",
    "importorskip in test": 'import pytest\ndef test_a():\n    pytest.importorskip("no_such_module_ci_rule", reason=REASON)\n',
    "skip marker": "import pytest\n@pytest.mark.skip(reason=REASON)\ndef test_a():\n    pass\n",
    "skipif marker": "import pytest\n@pytest.mark.skipif(True, reason=REASON)\ndef test_a():\n    pass\n",
    "fixture": "import pytest\n@pytest.fixture\ndef tool():\n    pytest.skip(REASON)\ndef test_a(tool):\n    pass\n",
    "parametrize": "import pytest\n@pytest.mark.parametrize('n', [1, pytest.param(2, marks=pytest.mark.skip(reason=REASON))])\n"
                   "def test_a(n):\n    assert n\n",
    "class fixture": "import pytest\nclass TestA:\n    @pytest.fixture(autouse=True)\n    def needs(self):\n"
                     "        pytest.skip(REASON)\n    def test_a(self):\n        pass\n",
}
FLAGS = {"project flags": (), "-rfE": ("-rfE",), "no addopts": ("-o", "addopts=")}
MISSING = "gcc-aarch64-linux-gnu is not installed"


@pytest.fixture(autouse=True)
def bare_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the scratch runs need no installed plugin


def scratch(pytester: pytest.Pytester, kind: str, reason: str) -> None:
    pytester.makeini("[pytest]\naddopts = -ra --strict-markers\n")  # the project's own addopts
    pytester.makeconftest(HOOKS)
    pytester.makepyfile(test_kind=f"REASON = {reason!r}\n" + KINDS[kind])


@pytest.mark.parametrize("flags", list(FLAGS), ids=str)
@pytest.mark.parametrize("kind", list(KINDS), ids=str)
def test_a_skip_fails_under_ci_with_its_reason(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                               kind: str, flags: str) -> None:
    monkeypatch.setenv("CI", "true")
    scratch(pytester, kind, MISSING)
    result = pytester.runpytest(*FLAGS[flags])
    outcomes = result.parseoutcomes()
    assert result.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED), result.stdout.str()
    assert "skipped" not in outcomes, result.stdout.str()
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) + outcomes.get("error", 0) >= 1
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines([f"*CI=true forbids*{MISSING}*"])


@pytest.mark.parametrize("kind", list(KINDS), ids=str)
def test_a_declared_host_fact_skips_under_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                             kind: str) -> None:
    monkeypatch.setenv("CI", "true")
    scratch(pytester, kind, HOST_FACT + "this CPU has no AVX-512 (oracle: CPUID)")
    result = pytester.runpytest()
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), result.stdout.str()
    assert result.parseoutcomes().get("skipped", 0) >= 1
    assert "failed" not in result.parseoutcomes()


@pytest.mark.parametrize("kind", list(KINDS), ids=str)
def test_the_host_fact_marker_counts_only_at_the_start(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                       kind: str) -> None:
    monkeypatch.setenv("CI", "true")
    scratch(pytester, kind, f"{MISSING} (not a {HOST_FACT}at all)")
    result = pytester.runpytest()
    assert result.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED), result.stdout.str()
    assert "skipped" not in result.parseoutcomes()


@pytest.mark.parametrize("kind", list(KINDS), ids=str)
def test_a_skip_stays_a_skip_on_a_developer_machine(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                     kind: str) -> None:
    monkeypatch.delenv("CI", raising=False)
    scratch(pytester, kind, MISSING)
    result = pytester.runpytest("-rs")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), result.stdout.str()
    assert result.parseoutcomes().get("skipped", 0) >= 1
    result.stdout.fnmatch_lines([f"SKIPPED*{MISSING}*"])


def test_a_skipping_conftest_fails_under_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory whose conftest skips (a whole test folder gated on a tool) is a skip too."""
    monkeypatch.setenv("CI", "true")
    pytester.makeconftest(HOOKS)
    sub = pytester.mkpydir("sub")
    (sub / "conftest.py").write_text(f"import pytest\npytest.skip({MISSING!r}, allow_module_level=True)\n")
    (sub / "test_a.py").write_text("def test_a():\n    pass\n")
    result = pytester.runpytest("-rfE")
    assert result.ret != pytest.ExitCode.OK, result.stdout.str()
    assert "skipped" not in result.parseoutcomes()
    result.stdout.fnmatch_lines([f"*CI=true forbids*{MISSING}*"])
