"""Live build progress on the terminal (rich): one line per finished step with
its time or `cached`, a spinner with the running step and its latest output,
and the whole log with -v."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from ..progress import heartbeat
from .buildlog import Step


class ConsoleProgress:
    """A buildlog.Listener that renders to a rich console (stderr)."""

    def __init__(self, console: Console, *, verbosity: int = 0, prefix: str = "") -> None:
        self.console = console
        self.verbosity = verbosity  # -1 quiet, 0 steps, 1 full log
        self.prefix = prefix
        self._status: Status | None = None
        self._started = time.monotonic()
        self._stop_heartbeat: Callable[[], None] | None = None

    @contextlib.contextmanager
    def live(self, title: str) -> Iterator[ConsoleProgress]:
        if self.verbosity < 0 or not self.console.is_terminal:
            try:
                yield self
            finally:
                self._end_heartbeat()  # a failed step is never finished
            return
        with self.console.status(escape(title)) as status:
            self._status = status
            try:
                yield self
            finally:
                self._status = None

    def _update(self, text: str) -> None:
        if self._status is not None:
            self._status.update(escape(text[: max(20, self.console.width - 4)]))

    def step_started(self, step: Step) -> None:
        self._started = time.monotonic()
        self._update(f"{self.prefix}{step.label}")
        if self.verbosity >= 0 and not self.console.is_terminal:  # a log: a line now and then, no silent minutes
            self._end_heartbeat()
            self._stop_heartbeat = heartbeat(f"{self.prefix}{step.label}")

    def _end_heartbeat(self) -> None:
        if self._stop_heartbeat is not None:
            self._stop_heartbeat()
            self._stop_heartbeat = None

    def step_output(self, step: Step | None, line: str) -> None:
        if self.verbosity >= 1:
            self.console.print(f"    {escape(line)}", style="dim", highlight=False)
        elif step is not None:
            self._update(f"{self.prefix}{step.label}  | {line.strip()}")

    def step_finished(self, step: Step) -> None:
        self._end_heartbeat()
        if self.verbosity < 0:
            return
        took = "cached" if step.cached else f"{time.monotonic() - self._started:5.1f}s"
        room = max(30, self.console.width - len(self.prefix) - 10)
        label = step.label if len(step.label) <= room else step.label[: room - 3] + "..."
        self.console.print(f"{self.prefix}{took:>7}  {escape(label)}", highlight=False)
