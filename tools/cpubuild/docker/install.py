"""`python3 -m cpubuild.docker.install DIR DEST`: unpack the one wheel in DIR into DEST.

The build stage of docker/Dockerfile installs the wheel this way (the same
unpacking `cpubuild test` uses), so the runtime stage needs neither pip nor
a venv: it copies DEST and points a .pth file at it. Standard library only.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..emulate.rootfs import unpack_wheel
from ..errors import CpubuildError


def install_one(wheel_dir: Path, dest: Path) -> Path:
    wheels = sorted(wheel_dir.glob("*.whl"))
    if len(wheels) != 1:
        names = ", ".join(w.name for w in wheels) or "none"
        raise CpubuildError(f"expected exactly one wheel in {wheel_dir}, found {len(wheels)} ({names})")
    unpack_wheel(wheels[0], dest)
    return wheels[0]


def _main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m cpubuild.docker.install WHEEL_DIR DEST", file=sys.stderr)
        return 2
    try:
        wheel = install_one(Path(argv[0]), Path(argv[1]))
    except CpubuildError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    print(f"installed {wheel.name} into {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
