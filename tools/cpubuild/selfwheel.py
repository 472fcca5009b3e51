"""Wheels of the running cpubuild, made from its installed files.

Isolated builds need cpubuild-core (every project's build-system.requires names
it, or the `cpubuild` distribution that depends on it) and image builds install
the CLI in their build stage; neither may depend on an index having this very
version. The wheels are reproducible (fixed timestamps, sorted entries), cached
by content under cpubuild's cache directory, and offered through find-links
plus constraints pinning this version.

Two wheels, as released (tools/ and tools/cli/): `cpubuild-core` holds every
file and depends on nothing beyond tomli; `cpubuild` holds only the command and
the CLI's dependencies. An isolated build needs only the core (the CMake
package, the version provider, the contract reader and libtorch's ELF facts:
standard library only), so the `cpubuild` wheel offered to it (`backend_only`)
depends on the core alone: a project that still names `cpubuild` resolves
without the CLI's dependencies, some of which (iced-x86) have no wheel for a
cross build's target platform.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from . import __version__
from .cache import cache_dir

PACKAGE_DIR = Path(__file__).resolve().parent
CORE, CLI = "cpubuild-core", "cpubuild"  # the distributions of tools/ and tools/cli/
WHEEL_TEXT = "Wheel-Version: 1.0\nGenerator: cpubuild (selfwheel)\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True, kw_only=True)
class SelfWheel:
    core: Path  # cpubuild-core: every file of this cpubuild
    cli: Path  # cpubuild: the command and its dependencies (only the core's, when backend_only)
    constraints: Path  # both pinned to this version

    @property
    def wheels(self) -> tuple[Path, Path]:
        return (self.core, self.cli)

    @property
    def find_links(self) -> Path:
        return self.core.parent

    def pip_env(self, pins: Sequence[str] = ()) -> dict[str, str]:
        """Environment that makes pip / uv / build resolve cpubuild(-core) to these wheels;
        `pins` (e.g. torch==2.13.0+cpu) constrain the build environment further."""
        links = str(self.find_links)
        constraints = self.constraints
        if pins:
            text = self.constraints.read_text(encoding="utf-8") + "".join(f"{pin}\n" for pin in pins)
            constraints = self.constraints.with_name(f"constraints-{hashlib.sha256(text.encode()).hexdigest()[:12]}.txt")
            if not constraints.is_file():
                _write_atomic(constraints, text)
        return {
            "PIP_FIND_LINKS": " ".join(filter(None, [os.environ.get("PIP_FIND_LINKS", ""), links])),
            "UV_FIND_LINKS": ",".join(filter(None, [os.environ.get("UV_FIND_LINKS", ""), links])),
            "PIP_CONSTRAINT": " ".join(filter(None, [os.environ.get("PIP_CONSTRAINT", ""), str(constraints)])),
            "UV_BUILD_CONSTRAINT": str(constraints),
        }


def _installed(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _metadata_text(name: str, dist: metadata.Distribution | None, requires: Sequence[str]) -> str:
    """Core metadata for `name` at this version, with what the installed `dist` says
    (whatever form its install keeps it in: a .dist-info METADATA, or a checkout's
    .egg-info PKG-INFO + requires.txt)."""
    message = dist.metadata if dist is not None else None
    version = (message.get_all("Metadata-Version") if message else None) or ["2.1"]
    lines = [f"Metadata-Version: {version[0]}", f"Name: {name}", f"Version: {__version__}"]
    if message is not None:
        for key in ("Summary", "Requires-Python", "License-Expression"):
            lines += [f"{key}: {value}" for value in message.get_all(key) or []][:1]
        lines += [f"Provides-Extra: {extra}" for extra in message.get_all("Provides-Extra") or []]
    lines += [f"Requires-Dist: {req}" for req in requires]
    return "\n".join(lines) + "\n"


def _dist_info(files: dict[str, bytes], name: str, dist: metadata.Distribution | None, requires: Sequence[str]) -> str:
    info = f"{name.replace('-', '_')}-{__version__}.dist-info"
    files[f"{info}/METADATA"] = _metadata_text(name, dist, requires).encode()
    entry_points = dist.read_text("entry_points.txt") if dist is not None else None
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points.encode()
    files[f"{info}/WHEEL"] = WHEEL_TEXT.encode()
    return f"{info}/RECORD"


def _core_members() -> tuple[dict[str, bytes], str]:
    files: dict[str, bytes] = {}
    for path in sorted(PACKAGE_DIR.rglob("*")):
        rel = path.relative_to(PACKAGE_DIR.parent).as_posix()
        if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith((".pyc", ".pyo")):
            files[rel] = path.read_bytes()
    dist = _installed(CORE)
    requires = (dist.requires or []) if dist is not None else ["tomli>=1.1; python_version < '3.11'"]
    return files, _dist_info(files, CORE, dist, requires)


def _cli_members(*, backend_only: bool) -> tuple[dict[str, bytes], str]:
    files: dict[str, bytes] = {}
    dist = _installed(CLI)
    pin = f"{CORE}=={__version__}"
    others = [] if backend_only or dist is None else [r for r in dist.requires or [] if not r.startswith(CORE)]
    return files, _dist_info(files, CLI, dist, [pin, *others])


def _record(files: dict[str, bytes], record: str) -> bytes:
    rows = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    return ("\n".join([*rows, f"{record},,"]) + "\n").encode()


def _write_wheel(path: Path, files: dict[str, bytes], record: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in [*files.items(), (record, _record(files, record))]:
            entry = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            entry.external_attr = 0o644 << 16
            z.writestr(entry, data)
    os.replace(tmp, path)


def self_wheel(*, backend_only: bool = False) -> SelfWheel:
    """This cpubuild as its two wheels (made once per content, then reused); `backend_only`:
    the `cpubuild` wheel without the CLI's dependencies, for isolated builds."""
    members = {CORE: _core_members(), CLI: _cli_members(backend_only=backend_only)}
    key = hashlib.sha256(b"".join(name.encode() + b"\0" + data for files, _ in members.values()
                                  for name, data in files.items())).hexdigest()[:16]
    folder = cache_dir() / "self-wheel" / key
    paths = {name: folder / f"{name.replace('-', '_')}-{__version__}-py3-none-any.whl" for name in members}
    constraints = folder / "constraints.txt"
    if not all(p.is_file() for p in [*paths.values(), constraints]):
        folder.mkdir(parents=True, exist_ok=True)
        for name, (files, record) in members.items():
            _write_wheel(paths[name], files, record)
        _write_atomic(constraints, "".join(f"{name}=={__version__}\n" for name in members))
    return SelfWheel(core=paths[CORE], cli=paths[CLI], constraints=constraints)


def _write_atomic(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, encoding="utf-8") as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)
