"""A CMake build directory cached outside the checkout and shared by every
checkout on the machine (CI clones into a fresh folder each run): configure
and build under a lock, starting the cache afresh when it belongs to another
source tree (CMake refuses to reuse it; the objects are cheap again through
ccache / zig's own cache)."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from collections.abc import Iterator
from pathlib import Path

from cpubuild.cmake import CMAKE_DIR
from testsupport import REPO, run


def cached_source(build: Path) -> str | None:
    try:
        text = (build / "CMakeCache.txt").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("CMAKE_HOME_DIRECTORY:"):
            return line.split("=", 1)[1]
    return None


@contextlib.contextmanager
def locked(build: Path) -> Iterator[None]:
    build.parent.mkdir(parents=True, exist_ok=True)
    with open(build.parent / f"{build.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_here(build: Path, *defines: str, timeout: float = 1800) -> None:
    """cmake -S REPO -B build <defines>; cmake --build build -j2 (cpubuild's CMake package
    named directly, as any non-scikit-build-core build does: -Dcpubuild_DIR=$(cpubuild --cmake-dir))."""
    with locked(build):
        source = cached_source(build)
        if source is not None and Path(source) != REPO:
            (build / "CMakeCache.txt").unlink(missing_ok=True)
            shutil.rmtree(build / "CMakeFiles", ignore_errors=True)
        run(["cmake", "-S", str(REPO), "-B", str(build), "-G", "Ninja", f"-Dcpubuild_DIR={CMAKE_DIR}", *defines], timeout=timeout)
        run(["cmake", "--build", str(build), "-j2"], timeout=timeout)
