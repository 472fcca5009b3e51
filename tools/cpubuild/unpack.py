"""Install a wheel by unpacking it (no pip, no venv, no network).

`cpubuild test` unpacks wheels into emulated trees this way, and images do
it in their build stage: `cpubuild image` copies this very file into the
build context as `.cpubuild/install.py`, where it runs as a script with the
standard library only (no package imports below)::

    python3 install.py WHEEL_DIR DEST         # the one wheel in WHEEL_DIR into DEST
    python3 install.py --all WHEEL_DIR DEST   # every wheel there (none: an empty DEST)

`--all` installs a set that belongs together, such as a torch release and its
dependencies (how images of torch projects get torch).
"""

from __future__ import annotations

import shutil
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath


class UnpackError(ValueError):
    """An archive that is not a wheel, or one that would escape its directory."""


def wheel_members(names: Sequence[str]) -> dict[str, str]:
    """Maps archive members to their path under site-packages.

    Files of `<dist>.data/purelib|platlib/` go to the root; other `.data`
    schemes (scripts, headers, data) are not needed to import and are left
    out. Absolute paths and `..` are refused (a hostile archive)."""
    out: dict[str, str] = {}
    for name in names:
        if name.endswith("/"):
            continue
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts:
            raise UnpackError(f"wheel member {name!r} escapes the install directory")
        first = path.parts[0]
        if first.endswith(".data"):
            if len(path.parts) < 3 or path.parts[1] not in ("purelib", "platlib"):
                continue
            out[name] = str(PurePosixPath(*path.parts[2:]))
        else:
            out[name] = name
    return out


def unpack_wheel(wheel: Path, site: Path) -> list[str]:
    """Unpacks a wheel into `site` (like an install, without pip)."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise UnpackError(f"{wheel} is not a readable wheel: {exc}") from None
    with archive:
        mapping = wheel_members(archive.namelist())
        for member, rel in mapping.items():
            dest = site / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
            mode = (archive.getinfo(member).external_attr >> 16) & 0o777
            if mode:
                dest.chmod(mode)
    return sorted(mapping.values())


def install_one(wheel_dir: Path, dest: Path) -> Path:
    wheels = sorted(wheel_dir.glob("*.whl"))
    if len(wheels) != 1:
        names = ", ".join(w.name for w in wheels) or "none"
        raise UnpackError(f"expected exactly one wheel in {wheel_dir}, found {len(wheels)} ({names})")
    unpack_wheel(wheels[0], dest)
    return wheels[0]


def install_all(wheel_dir: Path, dest: Path) -> list[Path]:
    """Every wheel in `wheel_dir` into `dest`, which exists afterwards even when there are none."""
    dest.mkdir(parents=True, exist_ok=True)
    wheels = sorted(wheel_dir.glob("*.whl"))
    for wheel in wheels:
        unpack_wheel(wheel, dest)
    return wheels


def _main(argv: list[str]) -> int:
    every = argv[:1] == ["--all"]
    args = argv[1:] if every else argv
    if len(args) != 2:
        print("usage: python3 install.py [--all] WHEEL_DIR DEST", file=sys.stderr)
        return 2
    try:
        wheels = install_all(Path(args[0]), Path(args[1])) if every else [install_one(Path(args[0]), Path(args[1]))]
    except UnpackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"installed {', '.join(w.name for w in wheels) or 'nothing (no wheels)'} into {args[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
