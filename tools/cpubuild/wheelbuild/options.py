"""Options of `cpubuild wheel`, layered like cibuildwheel's.

Lowest to highest precedence: built-in defaults, pyproject.toml's
``[tool.cpubuild.wheel]`` (the project's choice), ``CPUBUILD_*`` environment
variables (the CI job's choice), command-line options (this run's choice).
Every value is validated with a message naming where it came from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError

FRONTENDS = ("auto", "build", "uv", "pip")  # auto: uv when installed (faster), else build
SWITCHES = ("auto", "on", "off")


@dataclass(frozen=True, kw_only=True)
class WheelOptions:
    isa: tuple[str, ...] = ()  # empty: every variant of the arch
    arch: str | None = None  # None: the host's arch
    out: Path = Path("wheelhouse")
    build_root: Path | None = None  # None: <project>/build/cpubuild
    frontend: str = "auto"
    isolation: str = "auto"  # auto: isolated only when the backend is not importable here
    jobs: int | None = None  # None: all CPUs
    ccache: str = "auto"  # auto: used when installed
    repair: bool = True
    clean: bool = False
    torch: str | None = None  # torch projects: the torch version to build against (None: the environment's)
    variant_wheels: bool = False  # also the PEP 825 variant wheels (variantwheels.py)


# option name -> (pyproject key, environment variable)
KEYS: dict[str, tuple[str, str]] = {
    "isa": ("isa", "CPUBUILD_ISA"),
    "arch": ("arch", "CPUBUILD_ARCH"),
    "out": ("out", "CPUBUILD_OUT"),
    "build_root": ("build-root", "CPUBUILD_BUILD_ROOT"),
    "frontend": ("frontend", "CPUBUILD_FRONTEND"),
    "isolation": ("isolation", "CPUBUILD_ISOLATION"),
    "jobs": ("jobs", "CPUBUILD_JOBS"),
    "ccache": ("ccache", "CPUBUILD_CCACHE"),
    "repair": ("repair", "CPUBUILD_REPAIR"),
    "clean": ("clean", "CPUBUILD_CLEAN"),
    "torch": ("torch", "CPUBUILD_TORCH"),
    "variant_wheels": ("variant-wheels", "CPUBUILD_VARIANT_WHEELS"),
}


def _convert(name: str, value: Any, where: str, base: Path) -> Any:
    """One raw value (TOML value, env string or CLI value) -> the option's type."""
    def fail(problem: str) -> UsageError:
        return UsageError(f"{where}: {problem}")

    if name == "isa":
        if isinstance(value, str):
            return tuple(v for v in value.split(",") if v.strip())
        if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise fail("must be a list of ISA names or a comma-separated string")
    if name in ("arch", "torch"):
        if not isinstance(value, str) or not value.strip():
            raise fail("must be a non-empty string")
        return value.strip()
    if name in ("out", "build_root"):
        if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
            raise fail("must be a path")
        path = Path(value).expanduser()
        return path if path.is_absolute() else base / path
    if name == "frontend":
        if value not in FRONTENDS:
            raise fail(f"unknown frontend {value!r} (choose: {', '.join(FRONTENDS)})")
        return value
    if name in ("isolation", "ccache"):
        if value not in SWITCHES:
            raise fail(f"must be one of {', '.join(SWITCHES)}, got {value!r}")
        return value
    if name == "jobs":
        if isinstance(value, bool):
            raise fail("must be a positive integer")
        try:
            jobs = int(value)
        except (TypeError, ValueError):
            raise fail(f"must be a positive integer, got {value!r}") from None
        if jobs < 1:
            raise fail(f"must be a positive integer, got {value!r}")
        return jobs
    if name in ("repair", "clean", "variant_wheels"):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise fail(f"must be true or false, got {value!r}")
    raise AssertionError(name)  # pragma: no cover


def layer_options(
    *,
    pyproject: Mapping[str, Any],
    environ: Mapping[str, str],
    cli: Mapping[str, Any],
    project: Path,
    cwd: Path,
) -> WheelOptions:
    """Merges defaults < pyproject < environment < CLI. `cli` holds only options given."""
    values: dict[str, Any] = {}
    by_key = {key: name for name, (key, _) in KEYS.items()}
    for key, raw in pyproject.items():
        if key not in by_key:
            raise UsageError(f"pyproject.toml [tool.cpubuild.wheel]: unknown key {key!r} (known: {', '.join(by_key)})")
        values[by_key[key]] = _convert(by_key[key], raw, f"pyproject.toml [tool.cpubuild.wheel] {key}", project)
    for name, (_, env) in KEYS.items():
        raw_env = environ.get(env, "").strip()
        if raw_env:
            values[name] = _convert(name, raw_env, f"environment {env}={raw_env!r}", cwd)
    for name, raw in cli.items():
        if raw is None or raw == ():
            continue
        values[name] = _convert(name, raw, f"option --{name.replace('_', '-')}", cwd)
    return WheelOptions(**values)
