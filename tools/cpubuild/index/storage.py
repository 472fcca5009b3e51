"""Where an index lives: a local directory or an S3 prefix, behind one small
protocol. Keys are '/'-separated paths below the index root, built only from
validated names (see names.py).

Guarantees each backend gives:
- `create` stores a file only if the key is free (no overwrite, ever);
- `replace` is a compare-and-swap on the token `read` returned (None: the key
  must not exist), so concurrent page updates never lose one another;
- readers only ever see whole objects (local: temp file + rename).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import PublishError

LOCK_NAME = ".cpubuild.lock"
TEMP_PREFIX = ".cpubuild-tmp-"


@dataclass(frozen=True, kw_only=True)
class Blob:
    data: bytes
    token: str  # opaque version of the object: local content hash, S3 ETag


class Storage(Protocol):
    url: str

    def read(self, key: str) -> Blob | None: ...

    def create(self, key: str, data: bytes, content_type: str) -> bool:
        """Stores data at key if nothing is there; False if the key exists."""
        ...

    def replace(self, key: str, data: bytes, content_type: str, token: str | None) -> bool:
        """Stores data if key still holds the version `token` (None: absent)."""
        ...

    def page_lock(self, directory: str) -> contextlib.AbstractContextManager[None]:
        """Serialises writers of one page directory where the backend can."""
        ...


class LocalStorage:
    """An index in a local directory (served by nginx, `cpubuild serve`, file://)."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = root.resolve()
        self.url = str(self.root)
        # durable: fsync files and directories so that a power loss cannot
        # leave a renamed but empty file (a killed process cannot either way)
        self.durable = durable

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if key.startswith("/") or any(p in ("", ".", "..") for p in parts[:-1]) or parts[-1] in (".", ".."):
            raise PublishError(f"internal error: unsafe index key {key!r}")
        return self.root.joinpath(*parts)

    def read(self, key: str) -> Blob | None:
        try:
            data = self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):  # nothing there (a path under a file has nothing either)
            return None
        except IsADirectoryError:
            raise PublishError(f"{self._path(key)} is a directory, expected a file") from None
        except OSError as exc:
            raise PublishError(f"cannot read the index: {self._path(key)}: {exc.strerror or exc}") from None
        return Blob(data=data, token=hashlib.sha256(data).hexdigest())

    def _temp(self, path: Path, data: bytes) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{TEMP_PREFIX}{os.urandom(6).hex()}-{path.name}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                if self.durable:
                    os.fsync(out.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def create(self, key: str, data: bytes, content_type: str) -> bool:
        path = self._path(key)
        if path.exists():
            return False
        with _writing(path):
            tmp = self._temp(path, data)
            try:
                os.link(tmp, path)  # atomic, and fails if the name is taken
            except FileExistsError:
                return False
            finally:
                tmp.unlink(missing_ok=True)
            if self.durable:
                _fsync_dir(path.parent)
        return True

    def replace(self, key: str, data: bytes, content_type: str, token: str | None) -> bool:
        # Called under page_lock(), which makes check-then-rename atomic.
        path = self._path(key)
        current = self.read(key)
        if (current.token if current else None) != token:
            return False
        with _writing(path):
            tmp = self._temp(path, data)
            try:
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
        # no directory fsync: after a power loss a page may come back as its
        # previous version, which is still a valid page (files are synced)
        return True

    @contextlib.contextmanager
    def page_lock(self, directory: str) -> Iterator[None]:
        path = self._path(f"{directory.rstrip('/')}/{LOCK_NAME}")
        with _writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel if we die
            yield
        finally:
            os.close(fd)


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """OS errors of a write as one PublishError naming the file (an index the user
    cannot write is a user mistake, not a traceback)."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or path
        raise PublishError(f"cannot write the index: {where}: {exc.strerror or exc}") from None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # some file systems refuse directory fsync
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


def open_storage(dest: str) -> Storage:
    """A directory path, file:// URL or s3://bucket/prefix."""
    if dest.startswith("s3://"):
        from .s3 import S3Storage

        return S3Storage.from_url(dest)
    if dest.startswith("file://"):
        from urllib.parse import unquote, urlparse

        dest = unquote(urlparse(dest).path)
    elif "://" in dest:
        raise PublishError(f"unsupported index destination {dest!r}: use a directory or s3://bucket/prefix")
    root = Path(dest)
    if root.exists() and not root.is_dir():
        raise PublishError(f"{root} exists and is not a directory")
    return LocalStorage(root)
