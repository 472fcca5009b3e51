"""Drive scikit-build-core through a standard PEP 517 frontend and follow its log.

`python -m build`, `uv build` or `pip wheel` run with config-settings only (no
setup.py, nothing written into the source tree). Their output is streamed to
the build log and parsed into progress events: scikit-build-core's stage
markers and ninja's `[n/N]` lines, attributed to variants by target name
(cpubuild_add_variants names them `<name>_<variant>`, `<name>_probe` and
`<name>_common`, whatever the project's name is).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..toolchain.tools import Requirement, find_tool, pip_fix

_STAGES = (
    ("*** Configuring CMake", "configure"),
    ("*** Building project", "compile"),
    ("*** Installing project", "package"),
    ("*** Making wheel", "package"),
)
_NINJA = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")
# Targets of cpubuild_add_variants besides the variants themselves.
EXTRA_TARGETS = ("probe", "common")
_FAILED = re.compile(r"^FAILED: (.*)$")
_CREATED = re.compile(r"^\*\*\* Created (\S+\.whl)")
_CMAKE_VARIANT = re.compile(r"variant '(\w+)'")


@dataclass(frozen=True, kw_only=True)
class Event:
    kind: str  # stage | step | failed | created | nowork | cmake-error | skipped
    text: str
    stage: str | None = None
    target: str | None = None  # variant name, "probe" or "common"
    step: int | None = None
    total: int | None = None
    action: str | None = None  # "compile" or "link"


@functools.lru_cache(maxsize=16)
def _target_pattern(variants: tuple[str, ...]) -> re.Pattern[str]:
    names = sorted({*variants, *EXTRA_TARGETS}, key=len, reverse=True)
    return re.compile(r"_(" + "|".join(map(re.escape, names)) + r")(?:\.dir/|\.so\b|\.dylib\b)")


def parse_line(line: str, variants: Sequence[str] = ()) -> Event | None:
    """Pure: one log line -> a progress event (None for ordinary output).

    `variants`: the variant names being built, to attribute steps to them."""
    target_re = _target_pattern(tuple(variants))
    text = line.rstrip("\n")
    stripped = text.strip()
    for marker, stage in _STAGES:
        if stripped.startswith(marker):
            return Event(kind="stage", text=stripped, stage=stage)
    created = _CREATED.match(stripped)
    if created:
        return Event(kind="created", text=created.group(1))
    ninja = _NINJA.match(stripped)
    if ninja:
        desc = ninja.group(3)
        target = target_re.search(desc)
        action = "link" if desc.startswith("Linking") else "compile"
        return Event(
            kind="step", text=desc, target=target.group(1) if target else None,
            step=int(ninja.group(1)), total=int(ninja.group(2)), action=action,
        )
    failed = _FAILED.match(stripped)
    if failed:
        target = target_re.search(failed.group(1))
        return Event(kind="failed", text=stripped, target=target.group(1) if target else None)
    if stripped == "ninja: no work to do.":
        return Event(kind="nowork", text=stripped)
    if stripped.startswith("CMake Error"):
        return Event(kind="cmake-error", text=stripped)
    mentioned = _CMAKE_VARIANT.search(stripped)
    if mentioned and "cpubuild: skipping variant" in stripped:
        # a warning (the compiler rejects an optional variant's flags): the build goes on without it
        return Event(kind="skipped", text=stripped, target=mentioned.group(1))
    if mentioned and "cpubuild:" in stripped:
        return Event(kind="cmake-error", text=stripped, target=mentioned.group(1))
    return None


def frontend_command(
    frontend: str,
    *,
    python: str,
    project: Path,
    outdir: Path,
    settings: Mapping[str, str],
    isolated: bool,
) -> list[str]:
    """Pure: the frontend invocation for a wheel build with these config-settings."""
    cs: list[str] = []
    for key, value in settings.items():
        cs.append(f"-C{key}={value}")
    if frontend == "build":
        cmd = [python, "-m", "build", "--wheel", "--outdir", str(outdir)]
        if not isolated:
            cmd.append("--no-isolation")
        return [*cmd, *cs, str(project)]
    if frontend == "uv":
        uv = find_tool("uv") or "uv"
        cmd = [uv, "build", "--wheel", "--out-dir", str(outdir), "--python", python]
        if not isolated:
            cmd.append("--no-build-isolation")
        return [*cmd, *(f"--config-setting={key}={value}" for key, value in settings.items()), str(project)]
    if frontend == "pip":
        # -v: pip hides the backend's output otherwise, and the progress comes from it
        cmd = [python, "-m", "pip", "wheel", "-v", "--no-deps", "--wheel-dir", str(outdir)]
        if not isolated:
            cmd.append("--no-build-isolation")
        return [*cmd, *cs, str(project)]
    raise ValueError(f"unknown frontend {frontend!r}")


def requirement(frontend: str) -> Requirement:
    """The tool a frontend choice needs."""
    if frontend == "uv":
        return Requirement(name="uv", command=("uv", "--version"), purpose="PEP 517 frontend (uv build)", fix=pip_fix("uv"))
    if frontend == "pip":
        return Requirement(name="pip", command=(sys.executable,), distribution="pip", purpose="PEP 517 frontend (pip wheel)",
                           fix="python3 -m ensurepip")
    return Requirement(name="build", command=(sys.executable,), distribution="build", purpose="PEP 517 frontend (python -m build)",
                       fix=pip_fix("build"))


@dataclass(frozen=True, kw_only=True)
class FrontendResult:
    returncode: int
    wheel: Path | None
    failed_target: str | None


def run_frontend(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    log: IO[str],
    on_event: Callable[[Event], None],
    on_line: Callable[[str], None] | None = None,
    outdir: Path,
    variants: Sequence[str] = (),
) -> FrontendResult:
    """Runs the frontend, streaming every line to `log` and events to `on_event`."""
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    failed_target: str | None = None
    proc = subprocess.Popen(
        list(cmd), cwd=cwd, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, errors="replace", bufsize=1, start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))
            event = parse_line(line, variants)
            if event is None:
                continue
            if event.kind in ("failed", "cmake-error") and event.target and failed_target is None:
                failed_target = event.target
            on_event(event)
        returncode = proc.wait()
    except BaseException:
        # Ctrl-C or an error in a callback: stop the whole build process group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        raise
    finally:
        log.flush()
    wheels = sorted(outdir.glob("*.whl"))
    return FrontendResult(returncode=returncode, wheel=wheels[0] if returncode == 0 and len(wheels) == 1 else None, failed_target=failed_target)
