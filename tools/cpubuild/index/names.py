"""Names that become paths or URLs in an index: wheel file names, commits,
variants, project names. Everything is validated before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from packaging.utils import InvalidWheelFilename, NormalizedName, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ..errors import UsageError
from ..variantsjson import LABEL

if TYPE_CHECKING:
    from packaging.tags import Tag

# Characters a wheel file name may hold here: what packaging's parser accepts
# for real wheels, minus anything that could mean something in a path or URL.
SAFE_WHEEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+!-]*\.whl$")
COMMIT_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
VARIANT_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")  # an index tree such as cpu
# Index trees that are not commits: the moving nightly pointer.
NIGHTLY = "nightly"


class IndexInputError(UsageError):
    """A wheel, commit or variant name that cannot go into an index."""


@dataclass(frozen=True, kw_only=True)
class WheelName:
    filename: str
    project: NormalizedName
    version: Version
    build: tuple[int, str] | tuple[()]
    tags: frozenset[Tag]
    label: str | None = None  # PEP 825 variant label (after the platform tag), None: not a variant wheel

    @property
    def public_version(self) -> Version:
        return Version(self.version.public)


def parse_wheel_name(filename: str) -> WheelName:
    """The parsed name of a wheel file, or IndexInputError saying why not."""
    if "/" in filename or "\\" in filename or filename in (".", ".."):
        raise IndexInputError(f"{filename!r} is not a plain file name")
    if not filename.endswith(".whl"):
        raise IndexInputError(f"{filename!r} is not a wheel (the name does not end in .whl)")
    if not SAFE_WHEEL_NAME.fullmatch(filename):
        raise IndexInputError(f"{filename!r} has characters a wheel file name cannot have")
    parts = filename[: -len(".whl")].split("-")
    label = None
    # PEP 825: name-version[-build]-python-abi-platform[-label]; a build tag starts with a digit
    if len(parts) == 7 or (len(parts) == 6 and not parts[2][:1].isdigit()):
        label = parts.pop()
        if not LABEL.fullmatch(label):
            raise IndexInputError(f"{filename!r}: variant label {label!r} is not [0-9a-z_.]{{1,16}} (PEP 825)")
    try:
        project, version, build, tags = parse_wheel_filename("-".join(parts) + ".whl")
    except InvalidWheelFilename as exc:
        raise IndexInputError(f"{filename!r} is not a valid wheel file name: {exc}") from None
    return WheelName(filename=filename, project=project, version=version, build=build, tags=tags, label=label)


def check_variant(variant: str) -> str:
    if not VARIANT_NAME.fullmatch(variant) or variant == NIGHTLY:
        raise IndexInputError(
            f"variant {variant!r} is not a valid index tree name (lower case letters, digits, '.', '_', '-'; "
            f"starting with a letter or digit, e.g. 'cpu')"
        )
    return variant


def resolve_commit(commit: str | None, *, repo: Path | None = None) -> str:
    """A full commit SHA: taken as is, or resolved from a git revision."""
    if commit is None or not commit.strip():
        raise IndexInputError("no commit given: pass --commit SHA (the full git commit the wheels were built from)")
    commit = commit.strip()
    if COMMIT_SHA.fullmatch(commit):
        return commit
    if commit.startswith("-") or any(c.isspace() for c in commit):
        raise IndexInputError(f"--commit {commit!r} is not a commit SHA or git revision")
    import subprocess  # only here: most publishes pass a full SHA

    try:
        proc = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
            capture_output=True, text=True, cwd=repo, timeout=30, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        proc = None
    if proc is not None and proc.returncode == 0 and COMMIT_SHA.fullmatch(proc.stdout.strip()):
        return proc.stdout.strip()
    raise IndexInputError(
        f"--commit {commit!r} is neither a full commit SHA (40 or 64 hex digits) nor a git revision of this checkout"
    )


def project_dir(name: str) -> str:
    """PEP 503 normalised name: the project's directory in an index tree."""
    return canonicalize_name(name)


def href(path: str) -> str:
    """A relative URL for a path of safe segments; '+' and friends escaped (PEP 503)."""
    return quote(path, safe="/")
