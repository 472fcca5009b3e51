"""cpubuild.bench.timing without a probe: the round robin and where the
side-by-side bandwidth measurements fall between the rounds."""

from __future__ import annotations

from typing import Any

import pytest
from cpubuild.bench import timing


def test_each_round_runs_before_the_first_round_and_after_every_round() -> None:
    order: list[str] = []
    us = timing.measure({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, 2, 0.0005,
                        each_round=lambda: order.append("|"))
    assert set(us) == {"a", "b"} and all(t > 0 for t in us.values())
    marks = [i for i, x in enumerate(order) if x == "|"]
    assert len(marks) == 3 and marks[0] == 0 and marks[-1] == len(order) - 1
    between = order[marks[0] + 1:marks[1]]
    assert between.index("b") > between.index("a") and "b" in order[marks[1] + 1:marks[2]]


def test_best_bandwidth_takes_each_figure_from_its_best_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    a = {"read_Bps": 30.0, "copy_Bps": 25.0, "update_Bps": 50.0}
    b = {"read_Bps": 40.0, "copy_Bps": 20.0, "update_Bps": 45.0}
    assert timing.best_bandwidth([a, None, b]) == {"read_Bps": 40.0, "copy_Bps": 25.0, "update_Bps": 50.0}
    assert timing.best_bandwidth([None]) is None
    monkeypatch.delenv(timing.ENV_PROBE, raising=False)  # outside `cpubuild bench`: no probe, no figure
    assert timing.measure_beside_bandwidth({"x": lambda: None}, 1, 0.0005, 2, working_set=64 << 20)[1] is None


def test_an_in_context_candidate_enters_its_context_once_per_round() -> None:
    """A forced variant is timed as a host that selects it runs it: its context
    (cpukern's use_variant) is entered around each round, not each call."""
    import contextlib

    events: list[str] = []

    @contextlib.contextmanager
    def context() -> Any:
        events.append("enter")
        yield
        events.append("exit")

    candidate = timing.InContext(fn=lambda: events.append("call"), context=context)
    timing.measure({"forced": candidate, "plain": lambda: None}, 3, 0.0005)
    assert events.count("enter") == events.count("exit") == 3
    assert events.count("call") > 3 * 3 and events[0] == "enter" and events[-1] == "exit"
    events.clear()
    candidate()  # called on its own, it enters its context for that call
    assert events == ["enter", "call", "exit"]
