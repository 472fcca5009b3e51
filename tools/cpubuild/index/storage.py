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
import socket
import stat
import time
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

    def sweep(self, directory: str) -> list[str]:
        """Removes what an interrupted publish left below `directory` (temp files); their keys."""
        ...


class IndexBoundaryError(PublishError):
    """A symbolic link (or other non-regular entry) below the index root where
    the index keeps its own files: the root is a boundary, never crossed."""

    exit_code = 2


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
STALE_TEMP_AGE_S = 600.0  # a temp file older than this whose writer's lock is free is a leftover
_HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


class LocalStorage:
    """An index in a local directory (served by nginx, `cpubuild serve`, file://).

    Every path below the root is walked one component at a time with
    O_NOFOLLOW, relative to the directory opened before it: a symbolic link
    planted anywhere below the root is refused, never followed, for reads,
    writes, lock and temp files alike."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = root.resolve()
        self.url = str(self.root)
        # durable: fsync files and directories so that a power loss cannot
        # leave a renamed but empty file (a killed process cannot either way)
        self.durable = durable

    def _parts(self, key: str) -> list[str]:
        parts = key.split("/")
        if key.startswith("/") or any(p in ("", ".", "..") for p in parts[:-1]) or parts[-1] in (".", ".."):
            raise PublishError(f"internal error: unsafe index key {key!r}")
        return parts

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*self._parts(key))

    def _boundary(self, parts: list[str], what: str) -> IndexBoundaryError:
        return IndexBoundaryError(
            f"{self.root.joinpath(*parts)}: {what} below the index root; refusing to follow it (remove it, the root is a boundary)"
        )

    def _open_dir(self, parts: list[str], *, create: bool) -> int:
        """A descriptor of the directory root/parts, walked without following links."""
        if create:
            with _writing(self.root):
                self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for depth, part in enumerate(parts):
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    child = self._open_child_dir(fd, parts[: depth + 1])
                except OSError as exc:
                    child = self._open_child_dir(fd, parts[: depth + 1], exc)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_child_dir(self, fd: int, parts: list[str], first: OSError | None = None) -> int:
        try:
            if first is None:
                return os.open(parts[-1], _DIR_FLAGS, dir_fd=fd)
            raise first
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                try:
                    st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
                except OSError:
                    raise self._boundary(parts, "an unexpected entry") from None
                raise self._boundary(parts, "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a file where a directory belongs") from None
            raise

    def read(self, key: str) -> Blob | None:
        parts = self._parts(key)
        try:
            dfd = self._open_dir(parts[:-1], create=False)
        except (FileNotFoundError, NotADirectoryError):  # nothing there
            return None
        except OSError as exc:
            raise PublishError(f"cannot read the index: {self._path(key)}: {exc.strerror or exc}") from None
        try:
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self._boundary(parts, "a symbolic link") from None
                raise PublishError(f"cannot read the index: {self._path(key)}: {exc.strerror or exc}") from None
            with os.fdopen(fd, "rb") as handle:
                if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                    raise PublishError(f"{self._path(key)} is a directory, expected a file")
                data = handle.read()
        finally:
            os.close(dfd)
        return Blob(data=data, token=hashlib.sha256(data).hexdigest())

    @contextlib.contextmanager
    def _temp(self, dfd: int, name: str, data: bytes) -> Iterator[str]:
        """A temp file beside `name`, written and locked by this process until
        the block ends (the lock tells `sweep` the writer is alive), then removed."""
        tmp = f"{TEMP_PREFIX}{_HOST_TAG}-{os.getpid()}-{os.urandom(4).hex()}-{name}"[:255]
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if self.durable:
                os.fsync(fd)
            yield tmp
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
            os.close(fd)

    def create(self, key: str, data: bytes, content_type: str) -> bool:
        parts = self._parts(key)
        path = self._path(key)
        with _writing(path):
            dfd = self._open_dir(parts[:-1], create=True)
            try:
                if _lexists(parts[-1], dfd):
                    return False
                with self._temp(dfd, parts[-1], data) as tmp:
                    try:
                        # atomic, fails if the name is taken (a link included), never follows one
                        os.link(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                    except FileExistsError:
                        return False
                if self.durable:
                    _fsync_fd(dfd)
            finally:
                os.close(dfd)
        return True

    def replace(self, key: str, data: bytes, content_type: str, token: str | None) -> bool:
        # Called under page_lock(), which makes check-then-rename atomic.
        parts = self._parts(key)
        current = self.read(key)  # refuses a symbolic link in the way
        if (current.token if current else None) != token:
            return False
        with _writing(self._path(key)):
            dfd = self._open_dir(parts[:-1], create=True)
            try:
                with self._temp(dfd, parts[-1], data) as tmp:
                    # rename replaces the name itself: a link put there meanwhile is replaced, not followed
                    os.replace(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
            finally:
                os.close(dfd)
        # no directory fsync: after a power loss a page may come back as its
        # previous version, which is still a valid page (files are synced)
        return True

    @contextlib.contextmanager
    def page_lock(self, directory: str) -> Iterator[None]:
        parts = self._parts(f"{directory.rstrip('/')}/{LOCK_NAME}")
        with _writing(self._path("/".join(parts))):
            dfd = self._open_dir(parts[:-1], create=True)
            try:
                fd = os.open(LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self._boundary(parts, "a symbolic link") from None
                raise
            finally:
                os.close(dfd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel if we die
            yield
        finally:
            os.close(fd)

    def sweep(self, directory: str, *, max_age_s: float = STALE_TEMP_AGE_S) -> list[str]:
        """Removes temp files an interrupted publish left below `directory`
        (its writer's lock is free, and the writer is dead or the file old);
        returns their keys. A link below it is refused (IndexBoundaryError):
        publish sweeps before it writes, so it refuses before writing."""
        removed: list[str] = []
        try:
            dfd = self._open_dir(self._parts(directory) if directory else [], create=False)
        except (FileNotFoundError, NotADirectoryError):
            return removed
        try:
            self._sweep_fd(dfd, directory, max_age_s, removed)
        finally:
            os.close(dfd)
        return removed

    def _sweep_fd(self, dfd: int, directory: str, max_age_s: float, removed: list[str]) -> None:
        for entry in os.scandir(dfd):
            key = f"{directory}/{entry.name}" if directory else entry.name
            if entry.is_symlink():
                raise self._boundary(key.split("/"), "a symbolic link")
            if entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=dfd)
                    try:
                        self._sweep_fd(child, key, max_age_s, removed)
                    finally:
                        os.close(child)
            elif (entry.name.startswith(TEMP_PREFIX) and entry.is_file(follow_symlinks=False)
                  and _remove_if_stale(dfd, entry.name, max_age_s)):
                removed.append(key)


def _remove_if_stale(dfd: int, name: str, max_age_s: float) -> bool:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # its writer is still at work
        age = time.time() - os.fstat(fd).st_mtime
        if age < max_age_s and not _writer_gone(name):
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dfd)
            return True
        return False
    finally:
        os.close(fd)


def _writer_gone(name: str) -> bool:
    """True when the temp file's name says this host's process that wrote it is dead."""
    fields = name[len(TEMP_PREFIX):].split("-", 3)
    if len(fields) < 3 or fields[0] != _HOST_TAG or not fields[1].isdigit():
        return False
    try:
        os.kill(int(fields[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _lexists(name: str, dfd: int) -> bool:
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """OS errors of a write as one PublishError naming the file (an index the user
    cannot write is a user mistake, not a traceback)."""
    try:
        yield
    except IndexBoundaryError:
        raise
    except OSError as exc:
        where = exc.filename or path
        raise PublishError(f"cannot write the index: {where}: {exc.strerror or exc}") from None


def _fsync_fd(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:  # some file systems refuse directory fsync
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
