"""Folding the classic builder's JSON stream into stages, steps and failures.
The chunks are shaped like the ones dockerd 20.10 streams (recorded by hand)."""

from __future__ import annotations

from typing import Any

from cpubuild.docker.buildlog import BuildLog, Step


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def step_started(self, step: Step) -> None:
        self.events.append(("start", step.label))

    def step_output(self, step: Step | None, line: str) -> None:
        self.events.append(("out", line))

    def step_finished(self, step: Step) -> None:
        self.events.append(("end", f"{step.label} cached={step.cached}"))


def _stream(*lines: str) -> list[dict[str, Any]]:
    return [{"stream": line} for line in lines]


SUCCESS = [
    *_stream("Step 1/6 : ARG CPUKERN_BASE=debian:bookworm-slim", "\n"),
    *_stream("Step 2/6 : FROM ${CPUKERN_BASE} AS base", "\n", " ---> 1a2b3c\n"),
    *_stream("Step 3/6 : RUN apt-get update", "\n", " ---> Using cache\n", " ---> 4d5e6f\n"),
    *_stream("Step 4/6 : FROM base AS build", "\n", " ---> 4d5e6f\n"),
    *_stream("Step 5/6 : RUN echo compiling && echo par", "\n", " ---> Running in 0a0a0a\n", "compiling\n", "par"),
    *_stream("tial line\n", "Removing intermediate container 0a0a0a\n", " ---> 7f7f7f\n"),
    *_stream("Step 6/6 : FROM scratch", "\n", " ---> \n"),
    {"aux": {"ID": "sha256:7f7f7f"}},
    *_stream("Successfully built 7f7f7f\n", "Successfully tagged cpukern:runtime-amd64\n"),
]


def test_steps_are_named_by_their_stage_and_cache_hits_are_seen() -> None:
    recorder = Recorder()
    log = BuildLog(recorder)
    for chunk in SUCCESS:
        log.feed(chunk)
    log.finish()
    assert [(s.number, s.stage) for s in log.steps] == [(1, "global"), (2, "base"), (3, "base"), (4, "build"), (5, "build"), (6, "stage-2")]
    assert [s.cached for s in log.steps] == [False, False, True, False, False, False]
    assert log.cached_steps == 1
    # what ran: layers only (no FROM, no global ARG), cache hits left out
    assert log.rebuilt == ["[build 5/6] RUN echo compiling && echo par"]
    assert log.image_id == "sha256:7f7f7f"
    assert log.failure is None
    # split chunks are joined into whole lines; builder bookkeeping is not output
    assert list(log.steps[4].output) == ["compiling", "partial line"]
    starts = [e for e in recorder.events if e[0] == "start"]
    ends = [e for e in recorder.events if e[0] == "end"]
    assert len(starts) == len(ends) == 6
    assert ("end", "[base 3/6] RUN apt-get update cached=True") in recorder.events


def test_a_failing_step_reports_stage_step_and_the_tail_of_its_output() -> None:
    chunks = [
        *_stream("Step 1/3 : FROM cpubuild/debian:bookworm-amd64 AS base", "\n"),
        *_stream("Step 2/3 : FROM base AS build", "\n"),
        *_stream("Step 3/3 : RUN cpubuild wheel", "\n", " ---> Running in 0b0b0b\n"),
        *_stream(*[f"line {i}\n" for i in range(100)]),
        *_stream("error: variant avx512 failed to compile\n"),
        {
            "errorDetail": {"code": 1, "message": "The command '/bin/sh -c cpubuild wheel' returned a non-zero code: 1"},
            "error": "The command '/bin/sh -c cpubuild wheel' returned a non-zero code: 1",
        },
    ]
    lines: list[str] = []
    log = BuildLog(None, sink=lines.append)
    for chunk in chunks:
        log.feed(chunk)
    failure = log.failure
    assert failure is not None
    assert failure.stage == "build"
    assert failure.step == "step 3/3: RUN cpubuild wheel"
    assert failure.message == "The command '/bin/sh -c cpubuild wheel' returned a non-zero code: 1"
    tail = failure.tail.splitlines()
    assert tail[-1] == "error: variant avx512 failed to compile"
    assert len(tail) == 40 and tail[0] == "line 61"
    assert lines[-1].startswith("ERROR: The command")  # the log file gets the whole story


def test_an_error_before_any_step_has_no_stage() -> None:
    log = BuildLog()
    log.feed({"error": "dockerfile parse error line 3: unknown instruction: RUNN"})
    assert log.failure is not None and log.failure.stage is None and log.failure.tail == ""


def test_pull_status_lines_are_output() -> None:
    recorder = Recorder()
    log = BuildLog(recorder)
    log.feed({"stream": "Step 1/1 : FROM debian:bookworm-slim\n"})
    log.feed({"status": "Pulling from library/debian", "id": "bookworm-slim"})
    assert ("out", "Pulling from library/debian") in recorder.events
