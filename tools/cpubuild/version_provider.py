"""scikit-build-core dynamic-metadata provider for a project's version.

A project opts in with (docs/project.md)::

    [project]
    dynamic = ["version"]

    [[tool.dynamic-metadata]]
    provider = "cpubuild"                  # this module, by its entry point
    fallback = "src/mypkg/__init__.py"     # holds __version__ = "X.Y.Z"

Standard library only: it runs inside isolated builds too, where cpubuild is
a build requirement. ``cpubuild wheel`` computes the full version from git and
the ISA set (for example ``0.1.0.dev12+g1a2b3c4.cpu.avx512``) and exports it
in ``CPUBUILD_BUILD_VERSION``; nothing is written into the source tree.
Without it (a plain ``pip install .``) the base version is read from the
``fallback`` file's ``__version__``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .repairexclude import project_requirements

ENV_VERSION = "CPUBUILD_BUILD_VERSION"

# PEP 440 public version with an optional local label (canonical spellings only).
PEP440 = re.compile(
    r"(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*"
    r"(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?"
    r"(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?"
)
_ASSIGNMENT = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", re.MULTILINE)


def resolve_version(settings: Mapping[str, Any], environ: Mapping[str, str]) -> str:
    value = environ.get(ENV_VERSION, "").strip()
    if value:
        if not PEP440.fullmatch(value):
            raise ValueError(f"{ENV_VERSION}={value!r} is not a canonical PEP 440 version")
        return value
    fallback = settings.get("fallback")
    if not isinstance(fallback, str):
        raise ValueError("the cpubuild version provider needs a 'fallback' file setting")
    text = Path(fallback).read_text(encoding="utf-8")
    match = _ASSIGNMENT.search(text)
    if match is None:
        raise ValueError(f"no __version__ = '...' assignment in {fallback}")
    return match.group(1)


ENV_TORCH = "CPUBUILD_TORCH_VERSION"
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
_CUDA = re.compile(r"""^cuda\s*(?::[^=]*)?=\s*["']([^"']+)["']""", re.MULTILINE)


def cuda_of(version_py: str) -> str | None:
    """The CUDA release a torch build targets (`cuda = '12.8'` in torch/version.py), None for a CPU build."""
    match = _CUDA.search(version_py)
    return match.group(1) if match else None


def cpu_torch_fix(version: str, cuda: str) -> str:
    """One line: the build environment got a CUDA torch (PyPI's default on Linux x86_64),
    and how to give an isolated build the CPU torch instead."""
    release = version.split("+", 1)[0]
    return (f"the build environment got torch {version} (a CUDA {cuda} build, PyPI's default), not a CPU torch; "
            f"fix: put 'torch=={release}+cpu' (your CPU torch) in a file F and build with "
            f"PIP_BUILD_CONSTRAINT=F PIP_EXTRA_INDEX_URL={CPU_TORCH_INDEX} (uv: UV_BUILD_CONSTRAINT=F "
            f"UV_EXTRA_INDEX_URL={CPU_TORCH_INDEX}), or set {ENV_TORCH}={version} to build against it anyway")


def _build_env_torch() -> tuple[str, str | None]:
    """The build environment's torch: its version and CUDA release (None: a CPU build)."""
    import importlib.util
    from importlib import metadata

    version = metadata.version("torch")
    spec = importlib.util.find_spec("torch")
    locations = list(spec.submodule_search_locations or []) if spec else []
    try:
        text = (Path(locations[0]) / "version.py").read_text(encoding="utf-8") if locations else ""
    except OSError:
        text = ""
    return version, cuda_of(text)


def torch_pin(environ: Mapping[str, str]) -> str:
    """`torch==X.Y.*` for the torch the build compiles against: CPUBUILD_TORCH_VERSION
    (set by `cpubuild wheel`, which may build against a downloaded torch), else the
    torch installed in the build environment, which must be a CPU build (an isolated
    `pip install .` takes PyPI's CUDA torch unless the user's CPU torch is passed in)."""
    version = environ.get(ENV_TORCH, "").strip()
    if not version:
        try:
            version, cuda = _build_env_torch()
        except Exception:
            raise ValueError("a torch project ([tool.cpubuild] kind = torch) builds against torch, which the build "
                             "environment lacks: add torch to build-system.requires") from None
        if cuda is not None:
            raise ValueError(cpu_torch_fix(version, cuda))
    match = re.match(r"^(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"torch version {version!r} is not X.Y...")
    return f"torch=={match.group(1)}.{match.group(2)}.*"


def project_kind(pyproject: Path) -> str:
    """[tool.cpubuild] kind of the project being built (scikit-build-core runs in its directory)."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 only
        import tomli as tomllib
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "ctypes"
    return str(data.get("tool", {}).get("cpubuild", {}).get("kind", "ctypes"))


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    """The dynamic-metadata 0.3 hook: returns the [project] fields it sets: the version
    (when dynamic) and the dependencies (when dynamic: the `dependencies` setting, plus
    for a torch project the pin on the torch minor it is built against)."""
    dynamic = project.get("dynamic", [])
    result: dict[str, Any] = {}
    if "version" in dynamic:
        result["version"] = resolve_version(settings, os.environ)
    if "dependencies" in dynamic:
        extra = settings.get("dependencies", [])
        if not isinstance(extra, list) or not all(isinstance(d, str) for d in extra):
            raise ValueError("the cpubuild version provider's 'dependencies' setting must be a list of requirements")
        pins = [torch_pin(os.environ)] if project_kind(Path("pyproject.toml")) == "torch" else []
        provided = project_requirements(Path("pyproject.toml"))  # what repair-exclude's libraries come from
        result["dependencies"] = [*extra, *pins, *(r for r in provided if r not in extra)]
    return result
