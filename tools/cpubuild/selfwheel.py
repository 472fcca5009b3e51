"""A wheel of the running cpubuild, made from its installed files.

Isolated builds need cpubuild (it is in every project's build-system.requires)
and image builds install it in their build stage; neither may depend on an
index having this very version. The wheel is reproducible (fixed timestamps,
sorted entries), cached by content under cpubuild's cache directory, and
offered through find-links plus a constraint pinning this version.

An isolated build needs only the backend side of cpubuild (the CMake package,
the version provider and the contract reader: standard library only), so the
wheel offered to it declares no dependencies (`backend_only`): a cross build's
environment resolves wheels for the target's platform tags, where some of the
CLI's dependencies (iced-x86) have no wheel and would build from Rust sources.
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
WHEEL_TEXT = "Wheel-Version: 1.0\nGenerator: cpubuild (selfwheel)\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True, kw_only=True)
class SelfWheel:
    wheel: Path
    constraints: Path  # "cpubuild==<this version>"

    @property
    def find_links(self) -> Path:
        return self.wheel.parent

    def pip_env(self, pins: Sequence[str] = ()) -> dict[str, str]:
        """Environment that makes pip / uv / build resolve cpubuild to this wheel;
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


def _metadata_text(dist: metadata.Distribution, *, backend_only: bool = False) -> str:
    """Core metadata of the running cpubuild, whatever form its install keeps it in
    (a .dist-info METADATA, or a checkout's .egg-info PKG-INFO + requires.txt)."""
    message = dist.metadata
    version = (message.get_all("Metadata-Version") or ["2.1"])[0]
    lines = [f"Metadata-Version: {version}", "Name: cpubuild", f"Version: {__version__}"]
    for key in ("Summary", "Requires-Python", "License-Expression"):
        lines += [f"{key}: {value}" for value in message.get_all(key) or []][:1]
    lines += [f"Provides-Extra: {extra}" for extra in message.get_all("Provides-Extra") or []]
    lines += [f"Requires-Dist: {req}" for req in dist.requires or []
              if not backend_only or req.startswith("tomli")]  # the backend reads TOML, nothing else
    return "\n".join(lines) + "\n"


def _members(*, backend_only: bool = False) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(PACKAGE_DIR.rglob("*")):
        rel = path.relative_to(PACKAGE_DIR.parent).as_posix()
        if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith((".pyc", ".pyo")):
            files[rel] = path.read_bytes()
    info = f"cpubuild-{__version__}.dist-info"
    dist = metadata.distribution("cpubuild")
    files[f"{info}/METADATA"] = _metadata_text(dist, backend_only=backend_only).encode()
    entry_points = dist.read_text("entry_points.txt")
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points.encode()
    files[f"{info}/WHEEL"] = WHEEL_TEXT.encode()
    return files


def _record(files: dict[str, bytes], record: str) -> bytes:
    rows = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    return ("\n".join([*rows, f"{record},,"]) + "\n").encode()


def self_wheel(*, backend_only: bool = False) -> SelfWheel:
    """This cpubuild as a wheel (made once per content, then reused); `backend_only`:
    without Requires-Dist, for isolated builds."""
    files = _members(backend_only=backend_only)
    key = hashlib.sha256(b"".join(name.encode() + b"\0" + data for name, data in files.items())).hexdigest()[:16]
    folder = cache_dir() / "self-wheel" / key
    wheel = folder / f"cpubuild-{__version__}-py3-none-any.whl"
    constraints = folder / "constraints.txt"
    if not wheel.is_file() or not constraints.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        record = f"cpubuild-{__version__}.dist-info/RECORD"
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        os.close(fd)
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
            for name, data in [*files.items(), (record, _record(files, record))]:
                entry = zipfile.ZipInfo(name, date_time=ZIP_TIME)
                entry.external_attr = 0o644 << 16
                z.writestr(entry, data)
        os.replace(tmp, wheel)
        constraints.write_text(f"cpubuild=={__version__}\n", encoding="utf-8")
    return SelfWheel(wheel=wheel, constraints=constraints)


def _write_atomic(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, encoding="utf-8") as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)
