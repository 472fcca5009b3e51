"""timing.side_bandwidth with the real probe (compiled as `cpubuild bench`
compiles it, for the baseline's flags): what a benchmark measures between a
record's rounds. Figures are timings on a shared machine: only their
presence and sanity are asserted, never a value."""

from __future__ import annotations

import pytest
from cpubuild.bench import roofline, timing
from testsupport import require_tool

BASELINE = roofline.VariantInfo(name="baseline", requires=(), runnable=True, flags=())


def test_side_bandwidth_runs_the_probe_cpubuild_bench_names(monkeypatch: pytest.MonkeyPatch) -> None:
    require_tool("cc")
    monkeypatch.delenv(timing.ENV_PROBE, raising=False)
    assert timing.side_bandwidth(1 << 20, 1) is None  # outside `cpubuild bench`: nothing to measure with
    with roofline.probe_builds([BASELINE], "cc") as builds:
        assert builds.bandwidth_probe == builds.binaries["baseline"], builds
        monkeypatch.setenv(timing.ENV_PROBE, str(builds.bandwidth_probe))
        calls: list[str] = []
        us, side = timing.measure_beside_bandwidth({"noop": lambda: calls.append("x")}, 2, 0.001, 2,
                                                   working_set=4 << 20)
        assert us["noop"] > 0 and calls
        assert side is not None and min(side[f] for f in timing.BANDWIDTH_FIGURES) > 1e8, side
        _, none = timing.measure_beside_bandwidth({"noop": lambda: None}, 1, 0.001, 2, working_set=None)
        assert none is None
        monkeypatch.setenv(timing.ENV_PROBE, str(builds.bandwidth_probe) + "-missing")
        assert timing.side_bandwidth(1 << 20, 1) is None  # a probe that cannot run: no figure, no traceback
