"""The build context `cpubuild image` sends: the project's tree plus cpubuild's `.cpubuild/` folder.

The sources are the files git tracks or would track under the project root
(untracked files not ignored count, so work in progress builds too); build
outputs, wheelhouses and caches stay out. `.cpubuild/` is made per build and
whatever the tree holds there never goes in: the rendered Dockerfile (when
the project keeps none), cpubuild's own wheel and the hashed requirements set
of the build stage (`tool/`, installed by the build stage), a given wheel (`wheel/`, the folder the Dockerfile's context mode
reads), the host's local CAs (`ca-certificates/`, trusted by the build stage
for pip), the CPU torch of a torch project with its dependencies (`torch/`,
unpacked by the build stage, copied into the runtime), the entrypoint and the
unpacking script.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

GENERATED = PurePosixPath(".cpubuild")  # filled per build; what the tree has there stays out
WHEEL_DIR = GENERATED / "wheel"
CA_DIR = GENERATED / "ca-certificates"
TOOL_DIR = GENERATED / "tool"
TORCH_DIR = GENERATED / "torch"  # torch projects: torch and its dependencies (wheels); empty otherwise
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
FOLDERS = (WHEEL_DIR, CA_DIR, TOOL_DIR, TORCH_DIR)  # COPY sources: present even when empty
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
        if rel == GENERATED or GENERATED in rel.parents:
            continue  # only what this build puts there
        path = repo / rel
        if path.is_file() or path.is_symlink():  # tracked files may be deleted in the tree
            keep.append(rel)
    return sorted(set(keep))


def host_ca_certificates(folder: Path = HOST_CA_DIR) -> list[Path]:
    """CAs the host trusts locally (Debian's place for them): a TLS-inspecting proxy
    between the build and PyPI signs with one of these."""
    return sorted(p for p in folder.glob("*.crt") if p.is_file()) if folder.is_dir() else []


def generated_files(*, dockerfile: str | None, wheel: Path | None, ca_certificates: list[Path] | None,
                    tool_wheels: Sequence[Path], wheel_dir: PurePosixPath = WHEEL_DIR,
                    torch_wheels: Sequence[Path] = (), torch_dir: PurePosixPath = TORCH_DIR,
                    tool_requirements: str | None = None) -> dict[str, Path | bytes]:
    """The `.cpubuild/` entries of one build (archive path -> file or content). Files are
    named, not copied: the context tar reads each once (a torch wheel is 100-200 MB)."""
    from .. import unpack

    here = Path(__file__).parent
    files: dict[str, Path | bytes] = {str(d / ".keep"): b"" for d in FOLDERS}
    files[str(GENERATED / "entrypoint.sh")] = here / "entrypoint.sh"
    files[str(GENERATED / "install.py")] = Path(unpack.__file__)
    if dockerfile is not None:
        files[str(GENERATED / "Dockerfile")] = dockerfile.encode("utf-8")
    for tool_wheel in tool_wheels:  # cpubuild-core and cpubuild (selfwheel.py)
        files[str(TOOL_DIR / tool_wheel.name)] = tool_wheel
    if tool_requirements is not None:  # what a compiling build stage installs, hashed (docker/hashed.py)
        files[str(TOOL_DIR / "requirements.txt")] = tool_requirements.encode("utf-8")
    if wheel is not None:
        files[str(wheel_dir / wheel.name)] = wheel
    for cert in ca_certificates or []:
        files[str(CA_DIR / cert.name)] = cert
    for torch_wheel in torch_wheels:
        files[str(torch_dir / torch_wheel.name)] = torch_wheel
    return files


def _add(tar: tarfile.TarFile, arcname: str, content: Path | bytes, *, mode: int | None = None) -> None:
    if isinstance(content, bytes):
        info = tarfile.TarInfo(arcname)
        info.size = len(content)
        info.mode = mode or 0o644
        tar.addfile(info, io.BytesIO(content))
        return
    info = tar.gettarinfo(str(content), arcname=arcname)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if mode is not None:
        info.mode = mode
    if info.isfile():
        with open(content, "rb") as src:
            tar.addfile(info, src)
    else:
        tar.addfile(info)


def build_context(project: Path, generated: dict[str, Path | bytes]) -> Context:
    """Writes the context tar (the project's files + `generated`) to a temporary file (removed when closed)."""
    handle = tempfile.TemporaryFile(prefix="cpubuild-context-")  # noqa: SIM115 - the caller closes it
    files = source_files(project)
    with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            _add(tar, str(rel), project / rel)
        for arcname, content in sorted(generated.items()):
            _add(tar, arcname, content, mode=0o755 if arcname.endswith(".sh") else 0o644)
    size = handle.tell()
    handle.seek(0)
    return Context(file=handle, files=len(files) + len(generated), size=size)


def single_file_context(files: dict[str, Path | bytes]) -> Context:
    """A context of a few named files (the base image: a Dockerfile and a rootfs tar)."""
    handle = tempfile.TemporaryFile(prefix="cpubuild-context-")  # noqa: SIM115 - the caller closes it
    with tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in sorted(files.items()):
            _add(tar, name, content)
    size = handle.tell()
    handle.seek(0)
    return Context(file=handle, files=len(files), size=size)
