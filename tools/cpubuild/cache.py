"""A small on-disk cache outside the source tree (compiler probes, glibc tables)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """CPUBUILD_CACHE_DIR, else $XDG_CACHE_HOME/cpubuild, else ~/.cache/cpubuild."""
    explicit = os.environ.get("CPUBUILD_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cpubuild"


def file_key(path: Path) -> str:
    """Identity of a file for cache keys: real path, size and mtime."""
    try:
        st = path.resolve().stat()
    except OSError:
        return f"{path}:missing"
    return f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def load(name: str) -> dict[str, Any]:
    try:
        data = json.loads((cache_dir() / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def store(name: str, data: Mapping[str, Any]) -> None:
    """Atomic write; a cache that cannot be written is silently skipped."""
    path = cache_dir() / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass
