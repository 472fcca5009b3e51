"""The build context `cpubuild image` sends: the source tree plus, optionally, a wheel and CAs.

The sources are the files git tracks or would track (untracked files not
ignored count, so work in progress builds too); build outputs, wheelhouses and
caches stay out. A given wheel goes into docker/wheels/ of the context, the
directory the Dockerfile's context mode reads, and the host's local CAs into
docker/ca-certificates/ (the build stage trusts them for pip); whatever the
tree holds in those two folders never goes in.
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
CA_DIR = PurePosixPath("docker/ca-certificates")
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
GENERATED_DIRS = (WHEEL_DIR, CA_DIR)  # filled per build; what the tree has there stays out
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
        if any(d in rel.parents and rel != d / ".gitignore" for d in GENERATED_DIRS):
            continue  # only what this build puts there
        path = repo / rel
        if path.is_file() or path.is_symlink():  # tracked files may be deleted in the tree
            keep.append(rel)
    return sorted(set(keep))


def host_ca_certificates(folder: Path = HOST_CA_DIR) -> list[Path]:
    """CAs the host trusts locally (Debian's place for them): a TLS-inspecting proxy
    between the build and PyPI signs with one of these."""
    return sorted(p for p in folder.glob("*.crt") if p.is_file()) if folder.is_dir() else []


def build_context(repo: Path, *, wheel: Path | None = None, ca_certificates: list[Path] | None = None) -> Context:
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
        extra = [(wheel, WHEEL_DIR / wheel.name)] if wheel is not None else []
        extra += [(cert, CA_DIR / cert.name) for cert in ca_certificates or []]
        for source, arcname in extra:
            info = tar.gettarinfo(str(source), arcname=str(arcname))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            with open(source, "rb") as src:
                tar.addfile(info, src)
    size = handle.tell()
    handle.seek(0)
    return Context(file=handle, files=len(files) + len(extra), size=size)


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
