"""Bochs 3.0 from Debian 13 (trixie), run from a cached tree on the host.

Bochs 3.0 has a `sapphire_rapids` CPU model (AVX512_BF16, AVX512_FP16,
AMX-TILE/INT8/BF16; CPUID 0xD reports XCR0 0x602e7) that Debian 12's Bochs
2.7 lacks. Without touching the host's apt sources, a minbase trixie tree is
made once by debootstrap and Bochs installed into it with the tree's own apt:

    debootstrap --variant=minbase trixie DIR <mirror>
    chroot DIR apt-get install -y --no-install-recommends bochs bochs-term bochsbios vgabios

The binary needs glibc 2.38, so it runs from the host through the tree's own
loader (`DIR/usr/lib64/ld-linux-x86-64.so.2 --library-path ...`) with the
tree's plugin directory in LTDL_LIBRARY_PATH, under a pseudo-terminal
(`display_library: term` wants a tty). The tree is cached like the rootfs
trees: ``<cache>/bochs3/trixie``, made in a temporary sibling under a lock
file, a stamp written last, one rename.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildFailedError, EmulatedTestError, ToolMissingError, UsageError
from ..progress import locked, step
from ..toolchain.tools import find_tool
from .rootfs import cache_dir, debian_mirror, install_tree

Log = Callable[[str], None]

SUITE = "trixie"
PACKAGES = ("bochs", "bochs-term", "bochsbios", "vgabios")
STAMP = ".cpubuild-bochs3.json"
LIB = "usr/lib/x86_64-linux-gnu"
LOADER = "usr/lib64/ld-linux-x86-64.so.2"
BINARY = "usr/bin/bochs-bin"
PLUGINS = f"{LIB}/bochs/plugins"
BIOS = "usr/share/bochs/BIOS-bochs-latest"
VGABIOS = "usr/share/vgabios/vgabios.bin"
SHUTDOWN_PORT = 0x8900  # writing "Shutdown" there ends the simulation


def stamp() -> dict[str, object]:
    return {"suite": SUITE, "packages": sorted(PACKAGES), "schema": 1}


@dataclass(frozen=True, kw_only=True)
class Bochs3:
    """A ready trixie tree with Bochs 3.0 in it."""

    root: Path

    @property
    def version(self) -> str:
        data = json.loads((self.root / STAMP).read_text(encoding="utf-8"))
        return str(data.get("version", ""))

    def command(self, bochsrc: Path) -> list[str]:
        return [str(self.root / LOADER), "--library-path", str(self.root / LIB), str(self.root / BINARY),
                "-q", "-f", str(bochsrc)]

    def environment(self) -> dict[str, str]:
        return {**os.environ, "LTDL_LIBRARY_PATH": str(self.root / PLUGINS), "TERM": "xterm"}

    @property
    def bios(self) -> Path:
        return self.root / BIOS

    @property
    def vgabios(self) -> Path:
        return self.root / VGABIOS


def _ready(root: Path) -> bool:
    try:
        data = json.loads((root / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and {k: data.get(k) for k in stamp()} == stamp()


def _run(cmd: list[str], what: str, *, timeout: float = 1800) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    except subprocess.TimeoutExpired:
        raise BuildFailedError(f"{what} ran past {timeout:.0f} s", detail="$ " + " ".join(cmd)) from None
    if proc.returncode != 0:
        raise BuildFailedError(f"{what} failed (exit {proc.returncode})",
                               detail=f"$ {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout


def ensure_bochs3(cache: Path | None = None, log: Log = print) -> Bochs3:
    """The cached trixie tree with Bochs 3.0, made now (about 40 s) when missing."""
    base = (cache or cache_dir()) / "bochs3"
    root = base / SUITE
    if _ready(root):
        return Bochs3(root=root)
    if os.geteuid() != 0:
        raise UsageError(f"making the Bochs 3.0 tree needs root (debootstrap, chroot); none cached at {root}")
    chroot = find_tool("chroot") or shutil.which("chroot", path="/usr/sbin:/sbin")
    if find_tool("debootstrap") is None or chroot is None:
        raise ToolMissingError("debootstrap is not installed (needed once for the Bochs 3.0 tree)",
                               detail="fix: apt-get install debootstrap")
    with locked(base / f"{SUITE}.lock", f"the Bochs 3.0 {SUITE} tree"):
        if _ready(root):
            return Bochs3(root=root)
        for leftover in base.glob(f".tmp-{SUITE}.*"):
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{SUITE}.", dir=base))
        try:
            log(f"bochs3: debootstrap {SUITE} + {' '.join(PACKAGES)} into {root} (once; cached)")
            with step(f"bochs3: debootstrap {SUITE}"):
                _run(["debootstrap", "--variant=minbase", SUITE, str(tmp), debian_mirror()], f"debootstrap {SUITE}")
            with step(f"bochs3: apt-get install {' '.join(PACKAGES)}"):
                _run([chroot, str(tmp), "apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES],
                     f"apt-get install {' '.join(PACKAGES)} in the {SUITE} tree")
            version = _run([chroot, str(tmp), "dpkg-query", "-W", "-f=${Version}", "bochs"], "dpkg-query").strip()
            for path in (LOADER, BINARY, BIOS, VGABIOS):
                if not (tmp / path).exists():
                    raise BuildFailedError(f"the {SUITE} tree lacks {path} after installing {' '.join(PACKAGES)}")
            install_tree(tmp, root, stamp=(STAMP, {**stamp(), "version": version}))
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return Bochs3(root=root)


# ------------------------------------------------------------------ one run


def bochsrc(bochs: Bochs3, *, model: str, disk: Path, serial: Path, megs: int = 64) -> str:
    """A machine that boots `disk` (a flat hard-disk image) and writes COM1 to `serial`."""
    sectors = disk.stat().st_size // 512
    heads, spt = 16, 63
    cylinders = max(1, sectors // (heads * spt))
    return "\n".join([
        f"megs: {megs}",
        f"cpu: model={model}, count=1, ips=10000000",
        f"romimage: file={bochs.bios}",
        f"vgaromimage: file={bochs.vgabios}",
        "display_library: term",
        "ata0: enabled=1, ioaddr1=0x1f0, ioaddr2=0x3f0, irq=14",
        f"ata0-master: type=disk, path={disk}, mode=flat, cylinders={cylinders}, heads={heads}, spt={spt}",
        "boot: disk",
        "clock: sync=none, time0=local",
        f"com1: enabled=1, mode=file, dev={serial}",
        "log: -",
        "panic: action=fatal", "error: action=report", "info: action=ignore", "debug: action=ignore",
        "mouse: enabled=0", "speaker: enabled=0",
        "",
    ])


@dataclass(frozen=True, kw_only=True)
class ImageRun:
    serial: str  # what the guest wrote to COM1
    console: str  # Bochs' own output (the terminal)
    returncode: int
    seconds: float


def run_image(bochs: Bochs3, disk: Path, *, model: str, end_marker: str, timeout: float = 300,
              megs: int = 64) -> ImageRun:
    """Boots a bare-metal disk image under Bochs 3.0 until it writes `end_marker`
    to COM1 and shuts the simulation down (port 0x8900), or the timeout."""
    with tempfile.TemporaryDirectory(prefix="cpubuild-bochs3-") as tmp:
        work = Path(tmp)
        serial = work / "com1.txt"
        serial.touch()
        rc = work / "bochsrc"
        rc.write_text(bochsrc(bochs, model=model, disk=disk, serial=serial, megs=megs))
        start = time.monotonic()
        pid, fd = pty.fork()
        if pid == 0:  # the child: Bochs on the pseudo-terminal
            try:
                os.chdir(work)
                os.execve(str(bochs.root / LOADER), bochs.command(rc), bochs.environment())
            finally:
                os._exit(127)
        console = bytearray()
        status = None
        try:
            while True:
                ready, _, _ = select.select([fd], [], [], 0.2)
                if ready:
                    try:
                        chunk = os.read(fd, 65536)
                    except OSError:
                        chunk = b""
                    console += chunk[-200000:]
                    if not chunk:
                        break
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.monotonic() - start > timeout:
                    text = serial.read_text(errors="replace")
                    raise EmulatedTestError(f"Bochs 3.0 {model} ran past {timeout:.0f} s",
                                            detail=f"--- COM1\n{text[-2000:]}\n--- bochs\n{_clean(console)[-2000:]}")
        finally:
            if status is None:
                done, status = os.waitpid(pid, os.WNOHANG)
                if not done:
                    os.kill(pid, 9)
                    _, status = os.waitpid(pid, 0)
            os.close(fd)
        seconds = time.monotonic() - start
        text = serial.read_text(errors="replace")
        code = os.waitstatus_to_exitcode(status) if status is not None else -1
        if end_marker not in text:
            raise EmulatedTestError(f"the bare-metal guest stopped before finishing under Bochs 3.0 {model} (exit {code})",
                                    detail=f"--- COM1\n{text[-3000:]}\n--- bochs\n{_clean(console)[-3000:]}")
        return ImageRun(serial=text, console=_clean(console), returncode=code, seconds=seconds)


def _clean(raw: bytes | bytearray) -> str:
    """Bochs' terminal output without its escape sequences."""
    text = bytes(raw).decode(errors="replace")
    out, i = [], 0
    while i < len(text):
        if text[i] == "\x1b":
            j = i + 1
            if j < len(text) and text[j] == "[":
                j += 1
                while j < len(text) and not text[j].isalpha():
                    j += 1
            i = j + 1
            continue
        out.append(text[i])
        i += 1
    return "".join(out)
