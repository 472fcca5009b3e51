"""A downloaded torch wheel's build tree (torchdist.unpacked): unpacked once, by
one process at a time; a tree without the mark is replaced, a marked tree that
another process finished while this one waited for the lock is left alone."""

from __future__ import annotations

import threading
import zipfile
from pathlib import Path

from cpubuild.progress import locked
from cpubuild.torchdist import UNPACKED_MARK, unpacked

WHEEL = "torch-2.9.1-cp311-cp311-manylinux_2_28_aarch64.whl"


def make_wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / WHEEL
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch/version.py", "__version__ = '2.9.1'\n")
        archive.writestr("torch/include/torch/all.h", "#pragma once\n")
        archive.writestr("torch/lib/libtorch_cpu.so", b"\x7fELF")
        archive.writestr("torch.libs/libgomp-a49a47f9.so.1.0.0", b"\x7fELF")
        archive.writestr("torch/nn/modules/linear.py", "# not a build member\n")
    return wheel


def test_the_build_members_are_unpacked_with_the_mark(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    directory = unpacked(make_wheel(tmp_path), root)
    assert (directory / "include" / "torch" / "all.h").is_file()
    assert (directory.parent / "torch.libs" / "libgomp-a49a47f9.so.1.0.0").is_file()
    assert not (directory / "nn").exists()
    assert (directory.parent / UNPACKED_MARK).read_text() == WHEEL + "\n"


def test_a_tree_without_the_mark_is_replaced(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    old = root / WHEEL.removesuffix(".whl") / "torch"
    (old / "lib").mkdir(parents=True)
    (old / "lib" / "stale.so").write_bytes(b"old layout")
    directory = unpacked(make_wheel(tmp_path), root)
    assert directory == old and not (old / "lib" / "stale.so").exists()
    assert (directory.parent / "torch.libs").is_dir()


def test_a_waiting_process_keeps_the_tree_another_finished(tmp_path: Path) -> None:
    """While one unpacker holds the lock the other waits; once the first has
    written the mark, the second returns that tree without removing it."""
    root = tmp_path / "cache"
    wheel = make_wheel(tmp_path)
    directory = root / WHEEL.removesuffix(".whl") / "torch"
    result: list[Path] = []
    with locked(root / f".{WHEEL}.lock", "the test: another unpacker"):
        waiter = threading.Thread(target=lambda: result.append(unpacked(wheel, root)))
        waiter.start()
        waiter.join(timeout=1.0)
        assert waiter.is_alive(), "the second unpacker did not wait for the lock"
        (directory / "lib").mkdir(parents=True)
        (directory / "lib" / "in-use.so").write_bytes(b"being read by a build")
        (directory.parent / UNPACKED_MARK).write_text(WHEEL + "\n")
    waiter.join(timeout=30)
    assert result == [directory]
    assert (directory / "lib" / "in-use.so").is_file(), "a finished tree was unpacked again"
