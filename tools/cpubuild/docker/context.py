"""The build context `cpubuild image` sends: the source tree plus, optionally, a wheel.

The sources are the files git tracks or would track (untracked files not
ignored count, so work in progress builds too); build outputs, wheelhouses and
caches stay out. A given wheel goes into docker/wheels/ of the context, the
directory the Dockerfile's context mode reads, and nothing else ever does.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

WHEEL_DIR = PurePosixPath("docker/wheels")
# Never part of a context, even without git: top-level build trees and wheels,
# and caches at any depth.
SKIP_TOP = frozenset({".git", "build", "wheelhouse", "dist"})
SKIP_ANYWHERE = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


def _skipped(rel: PurePosixPath) -> bool:
    return rel.parts[0] in SKIP_TOP or bool(SKIP_ANYWHERE.intersection(rel.parts))


@dataclass(frozen=True, kw_only=True)
class Context:
    file: IO[bytes]  # an uncompressed tar, positioned at 0
    files: int
    size: int


def _git_files(repo: Path) -> list[PurePosixPath] | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return [PurePosixPath(p) for p in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def _walk_files(repo: Path) -> list[PurePosixPath]:
    out = []
    for path in repo.rglob("*"):
        rel = PurePosixPath(path.relative_to(repo).as_posix())
        if path.is_file() and not _skipped(rel) and not rel.name.endswith((".so", ".whl", ".pyc")):
            out.append(rel)
    return out


def source_files(repo: Path) -> list[PurePosixPath]:
    """Relative paths of the context's source files, sorted."""
    files = _git_files(repo)
    if files is None:
        files = _walk_files(repo)
    keep = []
    for rel in files:
        if _skipped(rel):
            continue
        if WHEEL_DIR in rel.parents and rel != WHEEL_DIR / ".gitignore":
            continue  # only the wheel given on the command line goes here
        path = repo / rel
        if path.is_file() or path.is_symlink():  # tracked files may be deleted in the tree
            keep.append(rel)
    return sorted(set(keep))


def build_context(repo: Path, *, wheel: Path | None = None) -> Context:
    """Writes the context tar to a temporary file (removed when closed)."""
    handle = tempfile.TemporaryFile(prefix="cpubuild-context-")  # noqa: SIM115 - the caller closes it
    files = source_files(repo)
    with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            info = tar.gettarinfo(str(repo / rel), arcname=str(rel))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isfile():
                with open(repo / rel, "rb") as src:
                    tar.addfile(info, src)
            else:
                tar.addfile(info)
        if wheel is not None:
            info = tar.gettarinfo(str(wheel), arcname=str(WHEEL_DIR / wheel.name))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            with open(wheel, "rb") as src:
                tar.addfile(info, src)
    size = handle.tell()
    handle.seek(0)
    return Context(file=handle, files=len(files) + (wheel is not None), size=size)


def single_file_context(files: dict[str, Path | bytes]) -> Context:
    """A context of a few named files (the base image: a Dockerfile and a rootfs tar)."""
    handle = tempfile.TemporaryFile(prefix="cpubuild-context-")  # noqa: SIM115 - the caller closes it
    with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in sorted(files.items()):
            if isinstance(content, bytes):
                info = tarfile.TarInfo(name)
                info.size = len(content)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(content))
            else:
                info = tar.gettarinfo(str(content), arcname=name)
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                with open(content, "rb") as src:
                    tar.addfile(info, src)
    size = handle.tell()
    handle.seek(0)
    return Context(file=handle, files=len(files), size=size)
