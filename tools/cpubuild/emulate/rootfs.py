"""Target-arch Debian root file systems for running wheels under qemu-user.

A rootfs is made once by debootstrap (foreign arches run through the
qemu-user binfmt handlers), cached outside the repository under
``<cache>/rootfs/<name>`` and reused by every later test or session. Building
is atomic (debootstrap into a temporary sibling, a stamp written last, then
one rename) and serialised by a lock file, so concurrent callers either wait
for the tree or find it finished, never half-made.

Wheels are "installed" by unpacking them (cpubuild.unpack) into a per-run directory inside the
tree and pointing PYTHONPATH at it: no pip, no network, nothing left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .. import unpack
from ..errors import BuildFailedError, ToolMissingError, UsageError
from ..hardware import Arch
from ..progress import locked, step
from ..toolchain.tools import find_tool

DEFAULT_CACHE = Path("/var/cache/cpubuild")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SUITE = "bookworm"
# What the correctness checks need inside the emulated Python.
TEST_PACKAGES = ("python3", "python3-numpy")
STAMP = ".cpubuild-rootfs.json"
# Where unpacked wheels live inside a rootfs (removed after each run).
RUN_DIR = PurePosixPath("/opt/cpubuild-run")

Log = Callable[[str], None]


def cache_dir() -> Path:
    """CPUBUILD_CACHE, else /var/cache/cpubuild (outside any checkout)."""
    return Path(os.environ.get("CPUBUILD_CACHE") or DEFAULT_CACHE)


def debian_mirror() -> str:
    return os.environ.get("CPUBUILD_DEBIAN_MIRROR") or DEFAULT_MIRROR


@dataclass(frozen=True, kw_only=True)
class RootfsSpec:
    """One cached tree: its arch, Debian suite, packages and mirror."""

    arch: str  # cpubuild's arch name, e.g. aarch64
    debian_arch: str  # debootstrap's name, e.g. arm64
    qemu: str  # qemu-user's name, e.g. aarch64
    packages: tuple[str, ...] = TEST_PACKAGES
    suite: str = DEFAULT_SUITE
    mirror: str = field(default_factory=debian_mirror)
    flavor: str = ""  # "" for the test tree; e.g. "gxx" for a compiler tree

    @classmethod
    def for_arch(cls, arch: Arch, **options: Any) -> RootfsSpec:
        """The tree of an arch (its Debian and QEMU names from the hardware data)."""
        return cls(arch=arch.name, debian_arch=arch.debian_arch, qemu=arch.qemu, **options)

    @property
    def name(self) -> str:
        return f"{self.arch}-{self.flavor}" if self.flavor else self.arch

    def stamp(self) -> dict[str, object]:
        """What the tree was made from; a tree whose stamp differs is rebuilt.
        The mirror is left out: any mirror of the suite gives the same tree."""
        return {
            "arch": self.arch,
            "debian_arch": self.debian_arch,
            "suite": self.suite,
            "packages": sorted(self.packages),
            "schema": 1,
        }


def debootstrap_command(spec: RootfsSpec, target: Path) -> list[str]:
    return [
        "debootstrap",
        f"--arch={spec.debian_arch}",
        "--variant=minbase",
        f"--include={','.join(sorted(spec.packages))}",
        spec.suite,
        str(target),
        spec.mirror,
    ]


def read_stamp(root: Path) -> dict[str, object] | None:
    try:
        data = json.loads((root / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_ready(spec: RootfsSpec, root: Path) -> bool:
    return read_stamp(root) == spec.stamp()


def binfmt_registered(qemu: str) -> bool:
    """True when the kernel runs `qemu`-arch ELF files through qemu-user."""
    entry = Path("/proc/sys/fs/binfmt_misc") / f"qemu-{qemu}"
    try:
        return entry.read_text().splitlines()[0].strip() == "enabled"
    except (OSError, IndexError):
        return False


def host_qemu_arch() -> str:
    return os.uname().machine


def check_can_run(qemu: str) -> None:
    """Foreign-arch trees need the binfmt handler; name the fix when absent."""
    if qemu == host_qemu_arch():
        return
    if not binfmt_registered(qemu):
        raise ToolMissingError(
            f"qemu-user binfmt handler for {qemu} is not registered",
            detail=(
                "fix: apt-get install qemu-user-static binfmt-support && "
                "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; "
                f"update-binfmts --enable qemu-{qemu}"
            ),
        )


def ensure_rootfs(spec: RootfsSpec, *, cache: Path | None = None, log: Log = print) -> Path:
    """The ready tree for `spec`, made now when missing or stale."""
    base = (cache or cache_dir()) / "rootfs"
    root = base / spec.name
    if is_ready(spec, root):
        return root
    if os.geteuid() != 0:
        raise UsageError(f"making the {spec.name} rootfs needs root (debootstrap, chroot); none cached at {root}")
    if find_tool("debootstrap") is None:
        raise ToolMissingError("debootstrap is not installed", detail="fix: apt-get install debootstrap")
    check_can_run(spec.qemu)
    with locked(base / f"{spec.name}.lock", f"the {spec.name} rootfs"):
        if is_ready(spec, root):  # another caller made it while we waited
            return root
        # Holding the lock, any temporary tree of this name is a killed run's.
        for leftover in base.glob(f".tmp-{spec.name}.*"):
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{spec.name}.", dir=base))
        try:
            log(f"rootfs: debootstrap {spec.suite} {spec.debian_arch} into {root} (once; cached)")
            cmd = debootstrap_command(spec, tmp)
            with step(f"rootfs: debootstrap {spec.suite} {spec.debian_arch} ({len(spec.packages)} packages)"):
                proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise BuildFailedError(
                    f"debootstrap of the {spec.name} rootfs failed (exit {proc.returncode})",
                    detail=f"$ {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-3000:]}",
                )
            install_tree(tmp, root, stamp=(STAMP, spec.stamp()))
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return root


def install_tree(tmp: Path, root: Path, *, stamp: tuple[str, dict[str, object]]) -> None:
    """A finished debootstrap tree in `tmp` becomes the cached tree `root` (under its lock):
    apt's downloads left out (40+ MB), its stamp written last, a stale tree swapped out."""
    shutil.rmtree(tmp / "var/cache/apt/archives", ignore_errors=True)
    (tmp / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    (tmp / stamp[0]).write_text(json.dumps(stamp[1], indent=1, sort_keys=True) + "\n")
    if root.exists():  # stale: move aside, swap in, then delete
        stale = Path(tempfile.mkdtemp(prefix=f".stale-{root.name}-", dir=root.parent))
        root.rename(stale / "tree")
        tmp.rename(root)
        shutil.rmtree(stale, ignore_errors=True)
    else:
        tmp.rename(root)


# ------------------------------------------------------------------ wheels


def unpack_wheel(wheel: Path, site: Path) -> list[str]:
    """Unpacks a wheel into `site` (like an install, without pip); bad archives are usage errors."""
    try:
        return unpack.unpack_wheel(wheel, site)
    except unpack.UnpackError as exc:
        raise UsageError(str(exc)) from None


@contextlib.contextmanager
def installed_wheel(wheel: Path, root: Path | None) -> Iterator[str]:
    """Unpacks `wheel` for one run; yields the PYTHONPATH entry as seen by the
    Python that runs (inside `root` when given, else on the host)."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()[:16]
    if root is None:
        with tempfile.TemporaryDirectory(prefix="cpubuild-run-") as tmp:
            site = Path(tmp) / "site"
            unpack_wheel(wheel, site)
            yield str(site)
        return
    run_parent = root / RUN_DIR.relative_to("/")
    run_parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f"{digest}-", dir=run_parent))
    try:
        unpack_wheel(wheel, tmp_dir / "site")
        yield str(RUN_DIR / tmp_dir.name / "site")
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


# ------------------------------------------------------------------ running


@dataclass(frozen=True, kw_only=True)
class Emulator:
    """How to run a Python of one arch under one qemu CPU model."""

    qemu: str  # qemu-user arch name
    cpu: str  # qemu -cpu model, e.g. cortex-a53, "max,vxeh=off", Haswell
    root: Path | None  # a foreign-arch rootfs; None: the host's own Python

    def command(self, python_args: Sequence[str], *, host_python: str) -> list[str]:
        if self.root is None:
            qemu = find_tool(f"qemu-{self.qemu}-static") or find_tool(f"qemu-{self.qemu}")
            if qemu is None:
                raise ToolMissingError(f"qemu-{self.qemu}-static is not installed", detail="fix: apt-get install qemu-user-static")
            return [qemu, "-cpu", self.cpu, host_python, *python_args]
        # binfmt runs the tree's ELF files through qemu; QEMU_CPU picks the model
        chroot = find_tool("chroot") or shutil.which("chroot", path="/usr/sbin:/sbin")
        if chroot is None:
            raise ToolMissingError("chroot is not installed", detail="fix: apt-get install coreutils")
        return [chroot, str(self.root), "/usr/bin/python3", *python_args]

    def environment(self, pythonpath: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "PYTHONPATH": pythonpath,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
        }
        if self.root is not None:
            env["QEMU_CPU"] = self.cpu
        else:
            env["PATH"] = os.environ.get("PATH", env["PATH"])
        env.update(extra or {})
        return env

    def run(
        self,
        python_args: Sequence[str],
        *,
        pythonpath: str,
        env: Mapping[str, str] | None = None,
        host_python: str,
        timeout: float = 900,
    ) -> subprocess.CompletedProcess[str]:
        cmd = self.command(python_args, host_python=host_python)
        try:
            return subprocess.run(
                cmd, capture_output=True, text=True, env=self.environment(pythonpath, env), timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise BuildFailedError(f"{' '.join(cmd)} under -cpu {self.cpu} ran past {timeout:.0f} s") from None
        except OSError as exc:
            raise ToolMissingError(f"cannot run {cmd[0]}: {exc.strerror or exc}") from None
