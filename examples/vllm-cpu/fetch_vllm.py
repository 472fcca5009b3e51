"""Fetch vLLM's sdist, pinned by version and sha256, and unpack it outside the repository.

    python3 fetch_vllm.py [--print-dir]      # prints the unpacked source tree

The archive comes from the package registry's file URL (the simple index, PEP 691
JSON, names it); its sha256 is checked against the pin below before anything is
unpacked, and nothing of vLLM is built or run. The cache is cpubuild's:
$CPUBUILD_CACHE_DIR, else $XDG_CACHE_HOME/cpubuild, else ~/.cache/cpubuild, under
`sdists/`. A second call with the tree in place touches no network. CMakeLists.txt
calls this at configure time; the tests call it to reach vLLM's own tests.
Standard library only (it runs in the build's isolated environment).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

VERSION = "0.33.0"
SHA256 = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"
INDEX = "https://pypi.org/simple/vllm/"
FILENAME = f"vllm-{VERSION}.tar.gz"


class FetchError(Exception):
    """The sdist could not be fetched, or is not the pinned one."""


def cache_dir() -> Path:
    explicit = os.environ.get("CPUBUILD_CACHE_DIR")
    if explicit:
        return Path(explicit) / "sdists"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cpubuild" / "sdists"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_url() -> str:
    """The registry's URL for the pinned file, read from the simple index (PEP 691)."""
    request = urllib.request.Request(INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        index = json.load(response)
    for entry in index.get("files", []):
        if entry.get("filename") == FILENAME:
            if entry.get("hashes", {}).get("sha256") != SHA256:
                raise FetchError(f"{INDEX}: {FILENAME} has sha256 {entry.get('hashes')}, the pin is {SHA256}")
            return str(entry["url"])
    raise FetchError(f"{INDEX}: no file {FILENAME}")


def archive(cache: Path) -> Path:
    target = cache / FILENAME
    if target.is_file() and sha256_of(target) == SHA256:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".download-", dir=cache)
    part = Path(name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(file_url(), timeout=600) as response:
            shutil.copyfileobj(response, out)
        found = sha256_of(part)
        if found != SHA256:
            raise FetchError(f"{FILENAME}: downloaded sha256 {found}, the pin is {SHA256}")
        part.replace(target)
    finally:
        part.unlink(missing_ok=True)
    return target


def source_tree(cache: Path | None = None) -> Path:
    """The unpacked sdist (`<cache>/vllm-<version>/`), fetched and unpacked once."""
    cache = cache or cache_dir()
    tree = cache / f"vllm-{VERSION}"
    stamp = tree / ".cpubuild-sha256"
    if stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == SHA256:
        return tree
    tarball = archive(cache)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache))
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            tar.extractall(staging, filter="data")
        unpacked = staging / f"vllm-{VERSION}"
        if not (unpacked / "csrc" / "cpu").is_dir():
            raise FetchError(f"{FILENAME}: no vllm-{VERSION}/csrc/cpu inside")
        (unpacked / ".cpubuild-sha256").write_text(SHA256 + "\n", encoding="utf-8")
        if tree.exists():
            shutil.rmtree(tree)
        unpacked.replace(tree)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return tree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fetch_vllm.py", description=__doc__.splitlines()[0])
    parser.add_argument("--print-dir", action="store_true", help="print only the unpacked tree's path")
    args = parser.parse_args(argv)
    try:
        tree = source_tree()
    except (FetchError, OSError, tarfile.TarError, ValueError) as exc:
        print(f"fetch_vllm.py: {exc}", file=sys.stderr)
        return 1
    print(tree if args.print_dir else f"vllm {VERSION} (sha256 {SHA256[:12]}...) at {tree}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
