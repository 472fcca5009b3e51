"""Licence texts `cpubuild init` can write for a new project (PEP 639 style).

The project's pyproject.toml gets `license = "<SPDX expression>"`; for the ids
below it also gets the full licence text as LICENSE and `license-files =
["LICENSE"]`, so its wheels and sdists carry it. Any other valid SPDX
expression is accepted, and the project's authors add the text themselves.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression

from .errors import UsageError

# SPDX id -> file under cpubuild/templates/licenses ({{year}} and {{holder}} filled in)
TEXTS = {"Apache-2.0": "Apache-2.0.txt", "MIT": "MIT.txt"}
DEFAULT = "Apache-2.0"


def spdx_expression(value: str) -> str:
    """The canonical form of an SPDX licence expression; UsageError (one line) if it is not one."""
    try:
        return str(canonicalize_license_expression(value))
    except InvalidLicenseExpression as exc:
        raise UsageError(f"--license {value!r}: not an SPDX licence expression ({exc}); "
                         f"e.g. {', '.join(TEXTS)} or 'MIT OR Apache-2.0'") from None


def license_text(expression: str, *, holder: str) -> str | None:
    """The full text for a single known id (None when cpubuild has no text for it)."""
    name = TEXTS.get(expression)
    if name is None:
        return None
    text = resources.files("cpubuild.templates").joinpath("licenses").joinpath(name).read_text(encoding="utf-8")
    # SOURCE_DATE_EPOCH keeps generated projects reproducible
    year = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", "") or time.time())).tm_year
    return text.replace("{{year}}", str(year)).replace("{{holder}}", holder)


def unmatched_license_files(project: Path, pyproject: Mapping[str, Any]) -> list[str]:
    """`[project] license-files` patterns that match no file under `project` (PEP 639: each must
    match one; a vendored library's licence is missing until its sources are fetched)."""
    patterns = pyproject.get("project", {}).get("license-files")
    if not isinstance(patterns, list):
        return []
    return [p for p in patterns if isinstance(p, str) and not any(f.is_file() for f in project.glob(p))]
