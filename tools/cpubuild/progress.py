"""No silent minutes: a progress line for every step that can take more than a few seconds.

`step("rootfs: debootstrap ...")` around such a step shows what runs and for how
long, on stderr (stdout stays for results and --json): on a terminal a rich
spinner with the elapsed time, elsewhere (CI logs, pipes) a plain line when it
starts, one every CPUBUILD_PROGRESS_INTERVAL seconds (default 12) while it runs
and one when it ends. `locked(path, what)` takes an exclusive flock and, when
another process holds it, says so and shows the wait the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported lazily: the build backend (cpubuild.matrix/torchdist) runs without it
    from rich.console import Console

INTERVAL_ENV = "CPUBUILD_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 12.0
TERMINAL_TICK_S = 1.0


def interval_s() -> float:
    """Seconds between plain progress lines (CPUBUILD_PROGRESS_INTERVAL; a bad value means the default)."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, ""))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S


def elapsed_text(seconds: float) -> str:
    """`8.2 s`, `3 min 05 s`."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def _line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _ticking(every: float, tick: Callable[[], None]) -> Iterator[None]:
    """Calls `tick` every `every` seconds from a daemon thread while the block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            tick()

    thread = threading.Thread(target=loop, name="cpubuild-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def heartbeat(what: str) -> Callable[[], None]:
    """Plain `what ... 24 s` lines every interval_s() on stderr until the returned stop() is called
    (for steps that a caller starts and finishes through callbacks, e.g. an image build's)."""
    started = time.monotonic()
    ticking = _ticking(interval_s(), lambda: _line(f"{what} ... {elapsed_text(time.monotonic() - started)}"))
    ticking.__enter__()

    def stop() -> None:
        ticking.__exit__(None, None, None)

    return stop


@contextlib.contextmanager
def step(what: str, *, console: Console | None = None) -> Iterator[None]:
    """Shows `what` and its elapsed time while the block runs, and how long it took (or that it failed)."""
    started = time.monotonic()

    def took() -> str:
        return elapsed_text(time.monotonic() - started)

    outcome = "failed after"
    if console is None:
        with contextlib.suppress(ImportError):
            from rich.console import Console
            console = Console(stderr=True, highlight=False)
    if console is not None and console.is_terminal:
        from rich.markup import escape
        with console.status(escape(what)) as status, \
                _ticking(TERMINAL_TICK_S, lambda: status.update(escape(f"{what}  {took()}"))):
            try:
                yield
                outcome = "done in"
            finally:
                console.print(f"{escape(what)}: {outcome} {took()}")
        return
    _line(f"{what} ...")
    with _ticking(interval_s(), lambda: _line(f"{what} ... {took()}")):
        try:
            yield
            outcome = "done in"
        finally:
            _line(f"{what}: {outcome} {took()}")


@contextlib.contextmanager
def locked(path: Path, what: str) -> Iterator[None]:
    """An exclusive flock on `path` (released by the kernel if the holder dies); while another
    process holds it, a progress line says who waits for what."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with step(f"waiting for another process's lock on {path} ({what})"):
                fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
