"""Progress while building (stderr) and the summary (stdout, text or --json).

Three progress styles: live (rich, on a terminal), plain lines (logs, CI) and
quiet. `-v` also streams the full build log.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .frontend import Event

STAGES = ("preflight", "frontend", "configure", "compile", "package", "repair", "normalize", "audit", "finalize")


@dataclass
class TargetState:
    name: str
    objects: int = 0
    linked: bool = False
    failed: bool = False


@dataclass
class Progress:
    """Shared bookkeeping: stage times and per-variant compile state."""

    stage_seconds: dict[str, float] = field(default_factory=dict)
    current: str | None = None
    started: float = 0.0
    step: int = 0
    total: int = 0
    targets: dict[str, TargetState] = field(default_factory=dict)
    up_to_date: bool = False

    def begin(self, stage: str) -> None:
        now = time.monotonic()
        if self.current is not None:
            self.stage_seconds[self.current] = self.stage_seconds.get(self.current, 0.0) + now - self.started
        self.current, self.started = stage, now

    def end(self) -> None:
        if self.current is not None:
            self.begin("_")
            self.current = None

    def declare(self, names: Sequence[str]) -> None:
        for n in names:
            self.targets.setdefault(n, TargetState(name=n))

    def apply(self, event: Event) -> None:
        if event.kind == "step":
            self.step, self.total = event.step or 0, event.total or 0
            if event.target:
                state = self.targets.setdefault(event.target, TargetState(name=event.target))
                if event.action == "link":
                    state.linked = True
                else:
                    state.objects += 1
        elif event.kind == "nowork":
            self.up_to_date = True
        elif event.kind == "failed" and event.target:
            self.targets.setdefault(event.target, TargetState(name=event.target)).failed = True


class Reporter:
    """Base: quiet. Subclasses draw progress."""

    def __init__(self, *, verbose: bool = False) -> None:
        self.progress = Progress()
        self.verbose = verbose

    def stage(self, name: str) -> None:
        self.progress.begin(name)

    def variants(self, names: Sequence[str]) -> None:
        self.progress.declare(names)

    def event(self, event: Event) -> None:
        self.progress.apply(event)

    def line(self, text: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def close(self) -> None:
        self.progress.end()

    @property
    def stage_seconds(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.progress.stage_seconds.items() if k != "_"}


class PlainReporter(Reporter):
    """One line per stage and per linked variant: readable in CI logs."""

    def __init__(self, *, verbose: bool = False, stream: Any = None) -> None:
        super().__init__(verbose=verbose)
        self.stream = stream or sys.stderr

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def stage(self, name: str) -> None:
        previous = self.progress.current
        super().stage(name)
        if previous is not None and previous != name:
            self._print(f"    {previous}: {self.progress.stage_seconds.get(previous, 0.0):.1f} s")
        if previous != name:
            self._print(f"==> {name}")

    def event(self, event: Event) -> None:
        super().event(event)
        if event.kind == "step" and event.action == "link" and event.target:
            state = self.progress.targets[event.target]
            self._print(f"    [{event.step}/{event.total}] {event.target}: linked ({state.objects} objects)")
        elif event.kind == "nowork":
            self._print("    every variant is up to date")
        elif event.kind == "failed":
            self._print(f"    {event.text}")

    def line(self, text: str) -> None:
        if self.verbose:
            self._print(f"  | {text}")

    def note(self, text: str) -> None:
        self._print(f"    {text}")

    def close(self) -> None:
        previous = self.progress.current
        super().close()
        if previous is not None and previous != "_":
            self._print(f"    {previous}: {self.progress.stage_seconds.get(previous, 0.0):.1f} s")


class LiveReporter(Reporter):
    """A live table of stages and variants (rich), for terminals."""

    def __init__(self, *, verbose: bool = False, console: Console | None = None) -> None:
        super().__init__(verbose=verbose)
        self.console = console or Console(stderr=True)
        self.notes: list[str] = []
        self.live = Live(self, console=self.console, refresh_per_second=8, transient=False)
        self.live.start()

    def __rich__(self) -> Group:
        p = self.progress
        table = Table.grid(padding=(0, 2))
        now = time.monotonic()
        for stage in STAGES:
            if stage == p.current:
                seconds = p.stage_seconds.get(stage, 0.0) + now - p.started
                status = Text("running", style="yellow")
                if stage == "compile" and p.total:
                    status = Text(f"[{p.step}/{p.total}]", style="yellow")
            elif stage in p.stage_seconds:
                seconds = p.stage_seconds[stage]
                status = Text("done", style="green")
            else:
                continue
            table.add_row(Text(stage, style="bold"), status, f"{seconds:5.1f} s")
            if stage == "compile" and p.targets:
                finished = p.up_to_date or stage != p.current
                for t in p.targets.values():
                    if t.failed:
                        mark = Text("FAILED", style="red")
                    elif t.linked:
                        mark = Text("linked", style="green")
                    elif finished:
                        mark = Text("up to date", style="green")
                    else:
                        mark = Text(f"{t.objects} objects", style="yellow")
                    table.add_row(Text(f"  {t.name}"), mark, "")
        parts: list[Any] = [table]
        parts += [Text(n, style="dim") for n in self.notes[-3:]]
        return Group(*parts)

    def line(self, text: str) -> None:
        if self.verbose:
            self.console.print(Text(f"  | {text}", style="dim"))

    def note(self, text: str) -> None:
        self.notes.append(text)

    def close(self) -> None:
        super().close()
        if self.live.is_started:
            self.live.refresh()
            self.live.stop()


def make_reporter(*, quiet: bool, verbose: bool) -> Reporter:
    if quiet:
        return Reporter()
    if Console(stderr=True).is_terminal:
        return LiveReporter(verbose=verbose)
    return PlainReporter(verbose=verbose)


def optional_flags(manifest: Mapping[str, Any] | None) -> dict[str, dict[str, bool]]:
    """Which optional flags (isa_matrix.toml `optional-flags`) the compiler accepted, per built variant."""
    rows = (manifest or {}).get("variants", [])
    return {str(v["name"]): dict(v["optional_flags"]) for v in rows if v.get("built", True) and v.get("optional_flags")}


def gpu_torch_note(version: str) -> str | None:
    """vLLM #43115: PyPI's aarch64 torch is a CUDA build since 2.10. Building against it is fine (only
    libtorch_cpu and libc10 are linked, its CUDA libraries are excluded), but targets should install the CPU build."""
    local = version.partition("+")[2]
    if not local.startswith(("cu", "rocm")):
        return None
    release = version.partition("+")[0].rsplit(".", 1)[0]
    return (f"torch {version} is a GPU build (the package index's wheel for this arch): the wheel links its CPU "
            f"libraries only and requires torch=={release}.*, which the CPU build from "
            "https://download.pytorch.org/whl/cpu satisfies without any CUDA package")


def render_summary(summary: Mapping[str, Any]) -> str:
    wheel = summary["wheel"]
    gpu_note = gpu_torch_note(summary["torch"]["version"]) if summary.get("torch") else None
    stages = ", ".join(f"{k} {v:.1f}s" for k, v in summary["stages"].items())
    optional = "; ".join(f"{variant}: " + ", ".join(f"{flag} {'accepted' if ok else 'rejected'}" for flag, ok in flags.items())
                         for variant, flags in (wheel.get("optional_flags") or {}).items())
    return "\n".join([
        f"built {wheel['path']}",
        f"  version   {summary['version']}  ({summary['version_origin']})",
        f"  variants  {', '.join(wheel['variants'])}",
        *([f"  optional  {optional}"] if optional else []),
        *([f"  torch     {summary['torch']['version']} ({summary['torch']['origin']})"] if summary.get("torch") else []),
        *([f"  note      {gpu_note}"] if gpu_note else []),
        *([f"  settings  {' '.join(f'-C{k}={v}' for k, v in summary['config_settings'].items())}"]
          if summary.get("config_settings") else []),
        f"  policy    {wheel['policy']} (auditwheel show: {wheel['audited']}; ISA-extension check {wheel['isa_ext_check']})",
        f"  size      {wheel['size']} bytes  sha256 {wheel['sha256']}",
        f"  time      {summary['seconds']:.1f} s  ({stages})",
    ])


def dump_json(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=False)
