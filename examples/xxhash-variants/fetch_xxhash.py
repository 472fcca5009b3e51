"""Vendor xxHash at build time: its C sources from the `xxhash` Python package's sdist.

    python3 fetch_xxhash.py      # -> third_party/xxhash/{xxhash.h,xxhash.c,LICENSE}

The sdist is downloaded with pip (so pip's index configuration applies), pinned
by version and sha256, checked before anything is unpacked, and only xxHash's
own files under deps/xxhash/ are taken out of it. Nothing of it is committed
(third_party/ is ignored). Standard library and pip only.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "4.1.0"  # the Python binding's version; it vendors xxHash 0.8.x
SHA256 = "c9b288e4c1f5dae54417bc8a05e6f6daf505783d916b4783f4dd2f2e7d5db486"
FILES = ("xxhash.h", "xxhash.c", "LICENSE")
TARGET = Path(__file__).resolve().parent / "third_party" / "xxhash"
STAMP = ".source"  # which sdist the files came from: another pin fetches again
STAMP_TEXT = f"xxhash {VERSION} sdist, sha256 {SHA256}\n"


class FetchError(Exception):
    """The sdist could not be fetched, or is not the pinned one."""


def download(directory: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
           "--no-build-isolation", "-d", str(directory), f"xxhash=={VERSION}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    archives = sorted(directory.glob(f"xxhash-{VERSION}.tar.gz"))
    if proc.returncode != 0 or not archives:
        raise FetchError(f"pip download xxhash=={VERSION} failed: {(proc.stderr.strip().splitlines() or ['no sdist'])[-1]}")
    found = hashlib.sha256(archives[0].read_bytes()).hexdigest()
    if found != SHA256:
        raise FetchError(f"{archives[0].name}: sha256 {found}, the pin is {SHA256}")
    return archives[0]


def unpack(archive: Path, target: Path) -> None:
    """Only deps/xxhash/<FILES>, as regular files; into a sibling first, then one rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".xxhash-", dir=target.parent))
    try:
        with tarfile.open(archive) as tar:
            for name in FILES:
                member = tar.getmember(f"xxhash-{VERSION}/deps/xxhash/{name}")
                source = tar.extractfile(member) if member.isfile() else None
                if source is None:
                    raise FetchError(f"{archive.name}: deps/xxhash/{name} is not a regular file")
                (staging / name).write_bytes(source.read())
        (staging / STAMP).write_text(STAMP_TEXT)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main() -> int:
    stamp = TARGET / STAMP
    if stamp.is_file() and stamp.read_text() == STAMP_TEXT and all((TARGET / name).is_file() for name in FILES):
        print(TARGET)
        return 0
    with tempfile.TemporaryDirectory(prefix="fetch-xxhash-") as tmp:
        try:
            unpack(download(Path(tmp)), TARGET)
        except (FetchError, KeyError, tarfile.TarError, OSError) as exc:
            print(f"fetch_xxhash.py: {exc}", file=sys.stderr)
            return 1
    print(TARGET)
    return 0


if __name__ == "__main__":
    sys.exit(main())
