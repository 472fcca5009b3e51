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


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    """The dynamic-metadata 0.3 hook: returns the [project] fields it sets."""
    return {"version": resolve_version(settings, os.environ)}
