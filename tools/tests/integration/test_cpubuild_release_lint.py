"""ci/cpubuild-release.yml (hand-written, unlike the rendered release.yml) passes
actionlint; tests/test_pypi_roundtrip.py runs its steps."""

from __future__ import annotations

from testsupport import REPO, require_tool, run


def test_cpubuild_release_workflow_passes_actionlint() -> None:
    require_tool("actionlint")
    run(["actionlint", "-no-color", str(REPO / "ci" / "cpubuild-release.yml")])
