"""The wheel version, from git.

Rules (documented in docs/wheels.md):

* a commit tagged ``vX.Y.Z`` with a clean tree builds ``X.Y.Z``;
* N commits after tag ``vX.Y.Z`` build ``X.Y.(Z+1).devN+g<hash>`` (the next
  release's dev build, so it sorts after the tag and before the next release);
* with no tag at all, the base version is the package's own ``__version__``
  (the version provider's fallback file, e.g. 0.1.0) and N counts every
  commit: ``0.1.0.devN+g<hash>``;
* a tree with uncommitted changes to tracked files adds the local segment
  ``dirty`` (and the hash even on a tag), so it can never be mistaken for, or
  published over, the clean build of that commit;
* ``SOURCE_DATE_EPOCH`` is the commit time.

Without git metadata (a container build context), CPUBUILD_VERSION and
SOURCE_DATE_EPOCH give both values explicitly. A project with a static
``[project] version`` builds exactly that version (plus the ISA-set label).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..errors import UsageError
from ..toolchain.tools import find_tool

TAG_GLOB = "v[0-9]*"
ENV_VERSION = "CPUBUILD_VERSION"
ENV_EPOCH = "SOURCE_DATE_EPOCH"
ZIP_EPOCH_MIN = 315532800  # 1980-01-01: the earliest time a zip entry can hold
_LOCAL_SEGMENT = re.compile(r"^[a-z0-9]+$")


@dataclass(frozen=True, kw_only=True)
class GitState:
    """What `git describe` and friends say about HEAD."""

    tag: str | None  # nearest v* tag reachable from HEAD
    distance: int  # commits since that tag (since the root when there is none)
    short_hash: str
    dirty: bool
    commit_time: int


@dataclass(frozen=True, kw_only=True)
class SourceVersion:
    """The version of the source tree, before the ISA-set label is added."""

    public: str  # e.g. 0.1.0.dev12
    local: tuple[str, ...]  # e.g. ("g1a2b3c4", "dirty")
    source_date_epoch: int
    origin: str  # how it was found, for the report

    def with_label(self, label: tuple[str, ...]) -> str:
        """The full version with extra local segments (the ISA-set label)."""
        return compose(self.public, self.local + label)

    @property
    def text(self) -> str:
        return compose(self.public, self.local)


def compose(public: str, local: tuple[str, ...]) -> str:
    for segment in local:
        if not _LOCAL_SEGMENT.match(segment):
            raise ValueError(f"local version segment {segment!r} must be lower-case letters and digits")
    return public + ("+" + ".".join(local) if local else "")


def next_release(version: Version) -> str:
    """The release after `version`: bump the pre-release number, else the last release digit."""
    if version.pre is not None:
        kind, number = version.pre
        return f"{'.'.join(map(str, version.release))}{kind}{number + 1}"
    release = list(version.release)
    release[-1] += 1
    return ".".join(map(str, release))


def version_from_git(state: GitState, base: str) -> SourceVersion:
    """Pure: the source version for a git state and the no-tag base version."""
    local: list[str] = []
    if state.tag is None:
        public = f"{Version(base).base_version}.dev{state.distance}"
        local.append(f"g{state.short_hash}")
    else:
        try:
            tagged = Version(state.tag)
        except InvalidVersion:
            raise UsageError(f"git tag {state.tag!r} is not a PEP 440 version (expected vX.Y.Z)") from None
        if state.distance == 0:
            public = str(tagged)
            if state.dirty:
                local.append(f"g{state.short_hash}")
        else:
            public = f"{next_release(tagged)}.dev{state.distance}"
            local.append(f"g{state.short_hash}")
    if state.dirty:
        local.append("dirty")
    origin = f"git {state.tag or 'no tag'}, {state.distance} commits, g{state.short_hash}" + (", dirty" if state.dirty else "")
    return SourceVersion(public=public, local=tuple(local), source_date_epoch=state.commit_time, origin=origin)


def version_from_env(environ: Mapping[str, str]) -> SourceVersion | None:
    """CPUBUILD_VERSION (+ SOURCE_DATE_EPOCH) when set: builds without git metadata."""
    raw = environ.get(ENV_VERSION, "").strip()
    if not raw:
        return None
    try:
        parsed = Version(raw)
    except InvalidVersion:
        raise UsageError(f"{ENV_VERSION}={raw!r} is not a PEP 440 version") from None
    if str(parsed) != raw:
        raise UsageError(f"{ENV_VERSION}={raw!r} is not in canonical form (use {str(parsed)!r})")
    public = parsed.public
    local = tuple(parsed.local.split(".")) if parsed.local else ()
    return SourceVersion(public=public, local=local, source_date_epoch=epoch_from_env(environ) or ZIP_EPOCH_MIN, origin=ENV_VERSION)


def epoch_from_env(environ: Mapping[str, str]) -> int | None:
    raw = environ.get(ENV_EPOCH, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise UsageError(f"{ENV_EPOCH}={raw!r} must be a whole number of seconds")
    return max(int(raw), ZIP_EPOCH_MIN)


def _git(project: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(project), *args], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def read_git_state(project: Path) -> GitState | None:
    """The git state of HEAD, or None outside a git checkout (or without git)."""
    if find_tool("git") is None or _git(project, "rev-parse", "--is-inside-work-tree") != "true":
        return None
    short_hash = _git(project, "rev-parse", "--short=7", "HEAD")
    commit_time = _git(project, "log", "-1", "--format=%ct", "HEAD")
    if not short_hash or not commit_time:
        return None  # a repository without commits
    described = _git(project, "describe", "--tags", "--long", "--match", TAG_GLOB, "HEAD")
    tag: str | None = None
    if described:
        # <tag>-<distance>-g<hash>; the tag itself may contain dashes
        tag_part, distance_part, _ = described.rsplit("-", 2)
        tag, distance = tag_part, int(distance_part)
    else:
        distance = int(_git(project, "rev-list", "--count", "HEAD") or "0")
    status = _git(project, "status", "--porcelain", "--untracked-files=no")
    return GitState(
        tag=tag.removeprefix("v") if tag else None,
        distance=distance,
        short_hash=short_hash,
        dirty=bool(status),
        commit_time=int(commit_time),
    )


def read_base_version(path: Path) -> str:
    match = re.search(r"""^__version__\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", path.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise UsageError(f"no __version__ = '...' in {path}")
    return match.group(1)


def source_version(project: Path, base_file: Path, environ: Mapping[str, str]) -> SourceVersion:
    """The version to build: CPUBUILD_VERSION if set, else git, else the base version.

    SOURCE_DATE_EPOCH from the environment always wins over the commit time
    (the reproducible-builds convention)."""
    explicit = version_from_env(environ)
    if explicit is not None:
        return explicit
    state = read_git_state(project)
    epoch = epoch_from_env(environ)
    if state is None:
        base = read_base_version(base_file)
        return SourceVersion(
            public=Version(base).public,
            local=("nogit",),
            source_date_epoch=epoch or ZIP_EPOCH_MIN,
            origin=f"{base_file.name} (no git metadata; set {ENV_VERSION})",
        )
    version = version_from_git(state, read_base_version(base_file))
    if epoch is not None:
        return SourceVersion(public=version.public, local=version.local, source_date_epoch=epoch, origin=version.origin)
    return version


def static_source_version(version: str, project: Path, environ: Mapping[str, str]) -> SourceVersion:
    """A static [project] version, used as written (+dirty for uncommitted changes to
    tracked files); the timestamp comes from SOURCE_DATE_EPOCH, else the commit time, else 1980."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise UsageError(f"{project / 'pyproject.toml'}: [project] version {version!r} is not a PEP 440 version") from None
    if parsed.local:
        raise UsageError(f"{project / 'pyproject.toml'}: [project] version {version!r} has a local label; "
                         "cpubuild adds the ISA-set label (+cpu...) itself")
    state = read_git_state(project)
    epoch = epoch_from_env(environ) or (state.commit_time if state else ZIP_EPOCH_MIN)
    dirty = state is not None and state.dirty  # never mistaken for, or published over, the clean build
    return SourceVersion(public=str(parsed), local=("dirty",) if dirty else (), source_date_epoch=epoch,
                         origin="pyproject.toml [project] version (static)" + (", dirty tree" if dirty else ""))
