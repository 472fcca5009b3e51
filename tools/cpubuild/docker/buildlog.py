"""Following a classic-builder log: which stage and step runs, what failed.

The Docker engine streams JSON chunks (`stream`, `status`, `error`, `aux`);
`BuildLog` folds them into steps (``Step 7/19 : RUN ...``) named by the stage
whose ``FROM ... AS name`` opened them, keeps each step's output for the
failure report, and tells a listener when a step starts, prints or ends.
Pure and synchronous: unit tests feed it recorded chunks.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
FROM_AS = re.compile(r"^FROM\s+.*?\s+AS\s+([A-Za-z0-9_.-]+)\s*$", re.IGNORECASE)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # the builder colours a step's stderr
TAIL_LINES = 40
GLOBAL = "global"


@dataclass(kw_only=True)
class Step:
    number: int
    total: int
    instruction: str
    stage: str
    cached: bool = False
    output: deque[str] = field(default_factory=lambda: deque(maxlen=400))

    @property
    def label(self) -> str:
        return f"[{self.stage} {self.number}/{self.total}] {self.instruction}"


class Listener(Protocol):
    def step_started(self, step: Step) -> None: ...

    def step_output(self, step: Step | None, line: str) -> None: ...

    def step_finished(self, step: Step) -> None: ...


@dataclass(frozen=True, kw_only=True)
class BuildFailure:
    stage: str | None
    step: str | None
    message: str
    tail: str


class BuildLog:
    def __init__(self, listener: Listener | None = None, *, sink: Callable[[str], None] | None = None) -> None:
        self.listener = listener
        self.sink = sink  # the full log, line by line (a log file)
        self.steps: list[Step] = []
        self.image_id: str | None = None
        self.failure: BuildFailure | None = None
        self._stage_count = 0
        self._stage = GLOBAL  # ARGs before the first FROM
        self._partial = ""

    @property
    def current(self) -> Step | None:
        return self.steps[-1] if self.steps else None

    @property
    def cached_steps(self) -> int:
        return sum(1 for s in self.steps if s.cached)

    @property
    def rebuilt(self) -> list[str]:
        """Steps that ran instead of coming from the layer cache (FROM and global
        ARGs have no layer and are left out)."""
        return [
            s.label for s in self.steps if not s.cached and s.stage != GLOBAL and not s.instruction.upper().startswith("FROM")
        ]

    def feed(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk or "errorDetail" in chunk:
            detail = chunk.get("errorDetail") or {}
            self._fail(str(chunk.get("error") or detail.get("message") or "unknown build error"))
            return
        aux = chunk.get("aux")
        if isinstance(aux, dict) and isinstance(aux.get("ID"), str):
            self.image_id = aux["ID"]
        if isinstance(chunk.get("stream"), str):
            self._text(chunk["stream"])
        elif isinstance(chunk.get("status"), str):  # pulls and other daemon messages
            progress = chunk.get("progress")
            self._line(chunk["status"] + (f" {progress}" if progress else ""))

    def finish(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = ""
        if self.current is not None and self.listener is not None:
            self.listener.step_finished(self.current)

    def _text(self, text: str) -> None:
        text = self._partial + text
        *lines, self._partial = text.split("\n")
        for line in lines:
            self._line(line.rstrip("\r"))

    def _line(self, line: str) -> None:
        line = ANSI.sub("", line)
        if self.sink is not None:
            self.sink(line)
        match = STEP.match(line)
        if match:
            self._start_step(int(match.group(1)), int(match.group(2)), match.group(3).strip())
            return
        step = self.current
        if line.strip() == "---> Using cache" and step is not None:
            step.cached = True
        if not line.strip() or line.startswith(" ---> ") or line.startswith("Removing intermediate container"):
            return  # builder bookkeeping, not the step's output
        if step is not None:
            step.output.append(line)
        if self.listener is not None:
            self.listener.step_output(step, line)

    def _start_step(self, number: int, total: int, instruction: str) -> None:
        previous = self.current
        if previous is not None and self.listener is not None:
            self.listener.step_finished(previous)
        if instruction.upper().startswith("FROM"):
            match = FROM_AS.match(instruction)
            self._stage = match.group(1) if match else f"stage-{self._stage_count}"
            self._stage_count += 1
        step = Step(number=number, total=total, instruction=instruction, stage=self._stage)
        self.steps.append(step)
        if self.listener is not None:
            self.listener.step_started(step)

    def _fail(self, message: str) -> None:
        step = self.current
        tail = "\n".join(list(step.output)[-TAIL_LINES:]) if step is not None else ""
        self.failure = BuildFailure(
            stage=step.stage if step else None,
            step=f"step {step.number}/{step.total}: {step.instruction}" if step else None,
            message=message.strip(),
            tail=tail,
        )
        if self.sink is not None:
            self.sink(f"ERROR: {message.strip()}")
