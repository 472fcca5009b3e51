"""`cpubuild wheel --install [PYTHON]`: the wheel just built, installed into an interpreter.

It replaces an installed copy of the same version (a rebuild keeps the version
when nothing was committed) and installs missing dependencies from the
configured index. uv when this environment has it (fast), else cpubuild's pip
(`pip --python PYTHON`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from packaging.utils import parse_wheel_filename

from ..errors import CpubuildError, UsageError
from ..toolchain.tools import find_tool, find_user_program


class InstallFailedError(CpubuildError):
    """The installer refused or failed to install the built wheel."""


def install_commands(wheel: Path, python: str, *, uv: list[str] | None) -> list[list[str]]:
    """Pure: the installer runs that put `wheel` into `python` (uv: one; pip: replace, then dependencies)."""
    if uv is not None:
        name = str(parse_wheel_filename(wheel.name)[0])
        return [[*uv, "pip", "install", "-q", "--python", python, "--reinstall-package", name, str(wheel)]]
    # cpubuild's own pip (a dependency) drives PYTHON, which needs no pip of its own
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--disable-pip-version-check"]
    return [[*pip, "--force-reinstall", "--no-deps", str(wheel)], [*pip, str(wheel)]]


def uv_command() -> list[str] | None:
    exe = find_tool("uv")
    if exe:
        return [exe]
    probe = subprocess.run([sys.executable, "-m", "uv", "--version"], capture_output=True, check=False)
    return [sys.executable, "-m", "uv"] if probe.returncode == 0 else None


def install_wheel(wheel: Path, python: str | None) -> str:
    """Installs `wheel` into `python` (a path, or a name looked up on the user's PATH; default:
    the interpreter running cpubuild); returns the interpreter used."""
    target = python or sys.executable
    exe = find_user_program(target) if not Path(target).is_absolute() else target
    if exe is None or not Path(exe).is_file():
        raise UsageError(f"--install {target}: no such Python interpreter")
    for cmd in install_commands(wheel, exe, uv=uv_command()):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        if proc.returncode != 0:
            raise InstallFailedError(f"installing {wheel.name} into {exe} failed: {' '.join(cmd)}",
                                     detail=(proc.stdout + proc.stderr)[-3000:])
    return exe
