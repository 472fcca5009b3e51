"""Placing a published wheel's build products next to a checkout's sources
(`cpubuild develop --precompiled`) without ever touching a file it did not put
there: what it extracts is recorded in a manifest in the build directory, only
those files are replaced or removed later, and a tracked or foreign file in
the way is an error naming it (unless forced).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from ..errors import CpubuildError, UsageError

LIBRARY = re.compile(r"\.(?:so|dylib)(?:\.[0-9.]+)?$")
MANIFEST = Path("build") / "cpubuild" / "develop-precompiled.json"  # below the project root


class FileInTheWayError(UsageError):
    """A file the wheel would overwrite that `develop` did not put there."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _is_product(name: str, package: str) -> bool:
    """Members that are always build products, even where a file of that name exists."""
    return (name.startswith(f"{package}.libs/") or bool(LIBRARY.search(name)) or name.endswith("/_manifest.json")
            or "/_cpubuild/" in name)


def load_manifest(path: Path) -> dict[str, str]:
    """Paths (relative to the import root) -> sha256 this tool wrote; {} when absent or unreadable."""
    try:
        doc = json.loads(path.read_text())
        files = doc["files"]
        return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _tracked(root: Path, paths: list[Path]) -> set[Path]:
    if not paths:
        return set()
    try:
        proc = subprocess.run(["git", "ls-files", "-z", "--", *map(str, paths)], cwd=root, capture_output=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    if proc.returncode != 0:
        return set()
    return {(root / p).resolve() for p in proc.stdout.decode(errors="replace").split("\0") if p}


def members_to_extract(names: list[str], package: str, source: Path, import_root: Path, ours: dict[str, str]) -> list[str]:
    """Wheel members to place: under the package or <package>.libs/, absent from the
    sources, or build products (libraries, manifest, runtime) this tool may own."""
    out = []
    for name in names:
        parts = PurePosixPath(name).parts
        if name.endswith("/") or name.startswith("/") or ".." in parts:
            continue  # a directory, or a member that would escape the package
        if not (name.startswith(f"{package}/") or name.startswith(f"{package}.libs/")):
            continue
        here = source / name[len(package) + 1:] if name.startswith(f"{package}/") else import_root / name
        if not here.exists() or name in ours or _is_product(name, package):
            out.append(name)
    return out


def place_products(wheel_bytes: bytes, *, root: Path, package: str, source: Path, force: bool = False,
                   describe: Callable[[str], str] | None = None) -> list[str]:
    """Extracts the wheel's build products next to the sources (each file atomically),
    removes those an earlier run put there that this wheel no longer holds, and records
    what is there now. Returns the members placed."""
    import_root = source.parent
    manifest = root / MANIFEST
    ours = load_manifest(manifest)
    with zipfile.ZipFile(io.BytesIO(wheel_bytes)) as archive:
        members = members_to_extract(archive.namelist(), package, source, import_root, ours)
        if f"{package}/_manifest.json" not in archive.namelist():
            raise CpubuildError(f"the published wheel holds no {package}/_manifest.json: not a wheel built by cpubuild")
        payload = {m: archive.read(m) for m in members}
    # Everything checked before anything is written.
    in_the_way = []
    for member, data in list(payload.items()):
        target = import_root / member
        if member not in ours and target.is_file() and not target.is_symlink() and _sha(target.read_bytes()) == _sha(data):
            del payload[member]  # already there, byte for byte, and not ours: leave it (and never remove it later)
            continue
        target = import_root / member
        if target.is_symlink() or (target.exists() and not target.is_file()) or (target.is_file() and member not in ours and _sha(target.read_bytes()) != _sha(data)):
            in_the_way.append(target)
        elif target.is_file() and member in ours and _sha(target.read_bytes()) != ours[member]:
            in_the_way.append(target)  # ours once, changed since: someone's edit
    if in_the_way and not force:
        tracked = _tracked(root, in_the_way)
        first = in_the_way[0]
        why = "is tracked by git" if first.resolve() in tracked else "was not put there by cpubuild develop"
        shown = os.path.relpath(first, root)
        more = f" (and {len(in_the_way) - 1} more)" if len(in_the_way) > 1 else ""
        raise FileInTheWayError(f"{shown}{more}: {why} and the precompiled wheel would overwrite it; pass --force to overwrite")
    written: dict[str, str] = {}
    for member, data in payload.items():
        target = import_root / member
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.chmod(tmp, 0o755 if LIBRARY.search(target.name) else 0o644)
        if target.is_symlink():
            target.unlink()  # --force: replace the link itself, never write through it
        os.replace(tmp, target)  # a running interpreter keeps its mapped copy
        written[member] = _sha(data)
    for member, digest in ours.items():  # earlier products this wheel no longer holds: ours, unchanged
        target = import_root / member
        if member not in written and target.is_file() and not target.is_symlink() and _sha(target.read_bytes()) == digest:
            target.unlink()
    manifest.parent.mkdir(parents=True, exist_ok=True)
    tmp = manifest.with_name(f".{manifest.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"import_root": str(import_root), "files": written}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, manifest)
    return sorted(members)
