"""The torch a torch project's wheel needs, inside an emulated Python.

`cpubuild test` of a torch project's wheel (its manifest names the torch it was
built against) needs that torch in the target arch's Python. For a foreign-arch
rootfs: the CPU torch wheel of that exact release for the tree's platform and
Python, with its dependencies, fetched once with `pip download --platform
... --only-binary :all:` and unpacked into a cached directory inside the tree
(``/opt/cpubuild-torch/<release>-cp<XY>``), reused by every later run. For the
host's own Python (x86_64 under qemu-x86_64): the torch installed there, which
must be of the same minor.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path, PurePosixPath

from .. import unpack
from ..errors import BuildFailedError, UsageError
from ..hardware import Arch
from ..progress import locked
from ..torchdist import fetch_with_dependencies, minor, release
from .rootfs import Log

SITE_DIR = PurePosixPath("/opt/cpubuild-torch")
STAMP = ".cpubuild-torch.json"


def tree_python(root: Path) -> str:
    """The X.Y of the tree's /usr/bin/python3 (python3.11 -> 3.11)."""
    versions = sorted((p.name[len("python"):] for p in (root / "usr" / "lib").glob("python3.*")
                       if re.fullmatch(r"python3\.\d+", p.name)), key=lambda v: int(v.split(".")[1]))
    if not versions:
        raise UsageError(f"{root} has no /usr/lib/python3.*: not a rootfs with Python")
    return versions[-1]


def ensure_torch_site(root: Path, arch: Arch, version: str, *, log: Log = print) -> PurePosixPath:
    """torch `version` (and its dependencies) unpacked inside `root`; returns the
    PYTHONPATH entry as the tree sees it. Made once, atomically, under a lock."""
    python = tree_python(root)
    name = f"{version.split('+', 1)[0]}-cp{python.replace('.', '')}"
    inside = SITE_DIR / name
    target = root / inside.relative_to("/")
    if (target / STAMP).is_file():
        return inside
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / f"{name}.lock", f"torch {version} for {arch.name} in the rootfs"):
        if (target / STAMP).is_file():
            return inside
        log(f"torch {version} for {arch.name} / CPython {python}: downloading (once, into {inside})")
        with tempfile.TemporaryDirectory(prefix=".download-", dir=target.parent) as tmp:
            wheels = fetch_with_dependencies(release(version), arch.manylinux, python, Path(tmp) / "wheels")
            site = Path(tmp) / "site"
            names = [w.name for w in wheels]
            for wheel in wheels:
                try:
                    unpack.unpack_wheel(wheel, site)
                except unpack.UnpackError as exc:
                    raise BuildFailedError(f"{wheel.name}: {exc}") from None
            (site / STAMP).write_text(json.dumps({"torch": version, "python": python, "wheels": names}, indent=1) + "\n")
            shutil.rmtree(target, ignore_errors=True)
            site.rename(target)
    return inside


def check_host_torch(python: str, built: str) -> None:
    """The host Python that runs the wheel must have torch of the minor it was built for."""
    proc = subprocess.run([python, "-c", "from importlib.metadata import version; print(version('torch'))"],
                          capture_output=True, text=True, timeout=120)
    found = proc.stdout.strip() if proc.returncode == 0 else None
    if found is None:
        raise UsageError(f"the wheel is a torch extension built for torch {minor(built)}, and {python} has no torch: "
                         f"pip install 'torch=={minor(built)}.*' there")
    if minor(found) != minor(built):
        raise UsageError(f"the wheel was built for torch {minor(built)}; {python} has torch {found}: "
                         f"pip install 'torch=={minor(built)}.*' there")
