"""Full-system x86_64 runs under Bochs: CPU models QEMU 7.2 cannot emulate.

QEMU 7.2's TCG has no AVX-512, so the `avx512` / `avx512vnni` variants need
another emulator to execute. Debian 12's Bochs 2.7 implements AVX-512
F/BW/DQ/VL and VNNI (not AVX512_BF16, not AMX) in its `tigerlake`,
`corei7_icelake_u` and `corei7_skylake_x` models. Bochs has no user mode, so
a run boots a real Debian kernel from an El Torito ISO (isolinux) whose
initramfs is the pruned x86_64 test rootfs (python3 + python3-numpy, from
rootfs.py) plus one small per-run archive: the wheel, unpacked, and an /init
that runs the given commands and prints their output between markers on
the serial console, then powers off.

Inputs are cached under ``<cache>/bochs`` (kernel per Debian package version,
base initramfs per rootfs stamp), each made atomically under a lock file.

Bochs 2.7 quirks the kernel command line works around (found booting
Debian's 6.1 kernel under `tigerlake`):
  * CPUID.(EAX=0DH,ECX=9), the PKRU xstate leaf, reads all zeros (an `#if`
    typo in Bochs), so the kernel sees a misordered xstate layout and turns
    XSAVE off - no AVX at all. `nopku` + clearing PKU keeps PKRU out.
  * CPUID.(0DH,1).EBX gives the standard-format size where the kernel
    expects the compacted one ("XSAVE consistency problem"): clearing XSAVEC
    and XSAVES makes the kernel use the standard format (XCR0 = 0xe7).
  * Fast strings are off in IA32_MISC_ENABLE, so the kernel drops ERMS but
    keeps FSRM, and 6.1's memmove then takes a path that corrupts short
    copies (kernel text overwritten, page-fault loop after "LSM: Security
    Framework initializing"). Clearing FSRM avoids it.
These change only what the kernel uses; CPUID and XGETBV in user space still
report the model's own features.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import BuildFailedError, EmulatedTestError, ToolMissingError, UsageError
from ..hardware import hardware
from ..progress import locked, step
from ..toolchain.tools import find_tool
from .rootfs import RootfsSpec, cache_dir, ensure_rootfs, unpack_wheel

Log = Callable[[str], None]

KERNEL_PACKAGE = "linux-image-cloud-amd64"  # Debian's small VM kernel: 8250 console, initramfs built in
MODELS = ("tigerlake", "corei7_icelake_u", "corei7_skylake_x")
# Kernel feature bits (arch/x86/include/asm/cpufeatures.h) cleared for the
# quirks above: XSAVEC 10*32+1, XSAVES 10*32+3, PKU 16*32+3, FSRM 18*32+4.
KERNEL_ARGS = (
    "console=ttyS0,115200", "quiet", "panic=-1", "mitigations=off", "nokaslr", "idle=halt",
    "rdinit=/init", "nopku", "clearcpuid=321,323,515,580",
)
# Left out of the guest's initramfs: not needed to run python3 + numpy.
PRUNE = (
    "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/i18n",
    "usr/share/zoneinfo", "usr/share/lintian", "usr/share/bash-completion", "usr/share/common-licenses",
    "usr/share/perl5", "usr/lib/x86_64-linux-gnu/perl-base", "usr/lib/x86_64-linux-gnu/gconv",
    "usr/lib/python3.11/test", "usr/lib/python3.11/idlelib", "usr/lib/python3.11/tkinter",
    "usr/lib/python3.11/ensurepip", "usr/lib/python3.11/lib2to3", "usr/lib/python3.11/pydoc_data",
    "var/cache", "var/lib/apt", "var/lib/dpkg", "var/log", "boot", "dev", "proc", "sys", "run", "tmp",
)
SITE = "/opt/cpubuild/site"  # where the wheel is unpacked inside the guest
MARK = "@@cpubuild"
ISOLINUX_FILES = (Path("/usr/lib/ISOLINUX/isolinux.bin"), Path("/usr/lib/syslinux/modules/bios/ldlinux.c32"))
BIOS = Path("/usr/share/bochs/BIOS-bochs-latest")
VGABIOS = Path("/usr/share/vgabios/vgabios.bin")
APT_PACKAGES = ("bochs", "bochs-term", "bochsbios", "vgabios", "isolinux", "syslinux-common", "xorriso")


@dataclass(frozen=True, kw_only=True)
class GuestCommand:
    """One command for the guest's /init; its output comes back by name."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class GuestResult:
    name: str
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True, kw_only=True)
class BochsRun:
    model: str
    results: dict[str, GuestResult]
    boot_seconds: float | None  # until /init started
    seconds: float  # the whole Bochs run
    serial: str  # the guest's console output


def guest_tree_spec() -> RootfsSpec:
    return RootfsSpec.for_arch(hardware().arches["x86_64"])


def check_tools() -> None:
    missing = [t for t in ("bochs-bin", "xorriso", "apt-get", "dpkg-deb") if find_tool(t) is None]
    missing += [str(p) for p in (*ISOLINUX_FILES, BIOS, VGABIOS) if not p.is_file()]
    if missing:
        raise ToolMissingError(
            f"Bochs full-system runs need {', '.join(missing)}",
            detail=f"fix: apt-get install {' '.join(APT_PACKAGES)}",
        )


def _run(cmd: Sequence[str], *, cwd: Path | None = None) -> str:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        raise BuildFailedError(f"{cmd[0]} failed (exit {proc.returncode})",
                               detail=f"$ {shlex.join(cmd)}\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout


# ------------------------------------------------------------------ kernel


def kernel_package() -> tuple[str, str]:
    """(package, version) of the kernel image the metapackage points at now."""
    out = _run(["apt-cache", "depends", "--important", KERNEL_PACKAGE])
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("Depends:")]
    images = [n for n in names if n.startswith("linux-image-")]
    if not images:
        raise ToolMissingError(f"apt knows no kernel image behind {KERNEL_PACKAGE}", detail="fix: apt-get update")
    version = _run(["apt-cache", "show", "--no-all-versions", images[0]])
    ver = next((line.split(":", 1)[1].strip() for line in version.splitlines() if line.startswith("Version:")), "")
    return images[0], ver


def ensure_kernel(cache: Path, log: Log = print) -> Path:
    """vmlinuz of Debian's current cloud kernel, downloaded once per version."""
    package, version = kernel_package()
    base = cache / "bochs"
    final = base / f"{package}_{version}" / "vmlinuz"
    if final.is_file():
        return final
    with locked(base / "kernel.lock", "the Bochs guest kernel"):
        if final.is_file():
            return final
        base.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".tmp-kernel-", dir=base) as tmp:
            log(f"bochs: apt-get download {package}={version} (once; cached)")
            with step(f"bochs: apt-get download {package}={version}"):
                _run(["apt-get", "download", f"{package}={version}"], cwd=Path(tmp))
            deb = next(Path(tmp).glob("*.deb"))
            _run(["dpkg-deb", "-x", str(deb), str(Path(tmp) / "x")])
            images = sorted((Path(tmp) / "x" / "boot").glob("vmlinuz-*"))
            if not images:
                raise BuildFailedError(f"{deb.name} holds no /boot/vmlinuz-*")
            staged = Path(tmp) / "out"
            staged.mkdir()
            shutil.copyfile(images[0], staged / "vmlinuz")
            staged.rename(final.parent)
    return final


# ------------------------------------------------------------------ cpio (newc)


class CpioWriter:
    """A `newc` archive as the kernel's initramfs unpacker reads it."""

    def __init__(self, handle: BinaryIO) -> None:
        self._out = handle
        self._ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"", *, rdev: tuple[int, int] = (0, 0),
               mtime: int = 0) -> None:
        raw = name.encode() + b"\0"
        fields = (self._ino, mode, 0, 0, 1, mtime, len(data), 0, 0, rdev[0], rdev[1], len(raw), 0)
        header = b"070701" + b"".join(b"%08X" % v for v in fields)
        self._ino += 1
        pad = (-(len(header) + len(raw))) % 4
        self._write(header + raw + b"\0" * pad)
        self._write(data + b"\0" * ((-len(data)) % 4))

    def _write(self, data: bytes) -> None:
        self._out.write(data)

    def directory(self, name: str, mode: int = 0o755) -> None:
        self._entry(name, stat.S_IFDIR | mode)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | mode, data)

    def char_device(self, name: str, major: int, minor: int, mode: int = 0o600) -> None:
        self._entry(name, stat.S_IFCHR | mode, rdev=(major, minor))

    def tree(self, root: Path, prefix: str = "", skip: Sequence[str] = ()) -> None:
        """Directories, regular files and symlinks under `root` (hard links
        become copies; device nodes, sockets and fifos are left out)."""
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(d for d in dirnames if os.path.normpath(os.path.join(rel_dir, d)) not in skip)
            for name in (*dirnames, *sorted(filenames)):
                path = os.path.join(dirpath, name)
                rel = os.path.normpath(os.path.join(prefix, rel_dir, name))
                st = os.lstat(path)
                perm = stat.S_IMODE(st.st_mode)
                if stat.S_ISLNK(st.st_mode):
                    self._entry(rel, stat.S_IFLNK | 0o777, os.readlink(path).encode())
                elif stat.S_ISDIR(st.st_mode):
                    self.directory(rel, perm)
                elif stat.S_ISREG(st.st_mode):
                    self.file(rel, Path(path).read_bytes(), perm)

    def close(self) -> None:
        self._entry("TRAILER!!!", 0)


def ensure_base_initramfs(cache: Path, log: Log = print) -> Path:
    """The pruned x86_64 test rootfs as an uncompressed cpio (the guest's /)."""
    spec = guest_tree_spec()
    root = ensure_rootfs(spec, cache=cache, log=log)
    # schema 2: numpy's test directories are left out as well
    key = hashlib.sha256(json.dumps({"rootfs": spec.stamp(), "prune": PRUNE, "schema": 2},
                                    sort_keys=True).encode()).hexdigest()[:16]
    base = cache / "bochs"
    final = base / f"rootfs-{key}.cpio"
    if final.is_file():
        return final
    with locked(base / "initramfs.lock", "the Bochs guest tree"):
        if final.is_file():
            return final
        for leftover in base.glob(".tmp-rootfs-*.cpio"):
            leftover.unlink(missing_ok=True)
        log(f"bochs: packing {root} into {final} (once; cached)")
        fd, tmp_name = tempfile.mkstemp(prefix=".tmp-rootfs-", suffix=".cpio", dir=base)
        try:
            with os.fdopen(fd, "wb") as handle, step(f"bochs: packing the guest tree into {final.name}"):
                writer = CpioWriter(handle)
                tests = [str(d.relative_to(root)) for d in (root / "usr/lib/python3/dist-packages").rglob("tests")]
                writer.tree(root, skip=(*PRUNE, *tests))
                for empty in ("dev", "proc", "sys", "run", "tmp"):
                    writer.directory(empty, 0o1777 if empty == "tmp" else 0o755)
                writer.char_device("dev/console", 5, 1)
                writer.char_device("dev/null", 1, 3, 0o666)
                writer.close()
            os.chmod(tmp_name, 0o644)
            os.replace(tmp_name, final)
            for stale in base.glob("rootfs-*.cpio"):  # made from an older tree or prune list
                if stale != final:
                    stale.unlink(missing_ok=True)
        finally:
            Path(tmp_name).unlink(missing_ok=True)
    return final


# ------------------------------------------------------------------ one run


def init_script(commands: Sequence[GuestCommand]) -> str:
    lines = [
        "#!/bin/sh",
        "export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin LANG=C.UTF-8 HOME=/root",
        f"export PYTHONPATH={SITE} PYTHONNOUSERSITE=1",
        "mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev 2>/dev/null",
        "mount -t tmpfs tmpfs /tmp",
        f"echo '{MARK} booted'",
        "run() {",
        f"  name=$1; shift; echo \"{MARK} begin $name\"",
        "  \"$@\" >/tmp/out 2>/tmp/err; rc=$?",
        f"  cat /tmp/out; echo; echo \"{MARK} stderr $name\"; cat /tmp/err; echo; echo \"{MARK} end $name $rc\"",
        "}",
    ]
    for cmd in commands:
        env = [f"{k}={v}" for k, v in cmd.env.items()]
        lines.append(f"run {shlex.quote(cmd.name)} env {shlex.join([*env, *cmd.argv])}")
    lines += [f"echo '{MARK} done'", "sleep 1", "echo o > /proc/sysrq-trigger", "sleep 10"]
    return "\n".join(lines) + "\n"


def run_initramfs(wheel: Path, commands: Sequence[GuestCommand], out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="cpubuild-bochs-site-") as tmp:
        unpack_wheel(wheel, Path(tmp))
        with open(out, "wb") as handle:
            writer = CpioWriter(handle)
            path = ""
            for part in SITE.strip("/").split("/"):
                path = f"{path}/{part}".lstrip("/")
                writer.directory(path)
            writer.tree(Path(tmp), prefix=SITE.strip("/"))
            writer.file("init", init_script(commands).encode(), 0o755)
            writer.close()


def make_iso(kernel: Path, initrds: Sequence[Path], out: Path, work: Path) -> None:
    stage = work / "iso"
    boot = stage / "isolinux"
    boot.mkdir(parents=True)
    for src in ISOLINUX_FILES:
        shutil.copyfile(src, boot / src.name)
    names = ["vmlinuz"]
    shutil.copyfile(kernel, boot / "vmlinuz")
    for i, initrd in enumerate(initrds):
        names.append(f"initrd{i}")
        try:
            os.link(initrd, boot / names[-1])
        except OSError:
            shutil.copyfile(initrd, boot / names[-1])
    (boot / "isolinux.cfg").write_text(
        "SERIAL 0 115200\nDEFAULT linux\nPROMPT 0\nTIMEOUT 0\nLABEL linux\n"
        f"  KERNEL vmlinuz\n  INITRD {','.join(names[1:])}\n  APPEND {' '.join(KERNEL_ARGS)}\n"
    )
    _run(["xorriso", "-as", "mkisofs", "-quiet", "-o", str(out), "-b", "isolinux/isolinux.bin",
          "-c", "isolinux/boot.cat", "-no-emul-boot", "-boot-load-size", "4", "-boot-info-table", str(stage)])


def bochsrc(model: str, iso: Path, serial: Path, megs: int) -> str:
    return "\n".join([
        f"megs: {megs}",
        f"cpu: model={model}, count=1, ips=200000000",
        f"romimage: file={BIOS}",
        f"vgaromimage: file={VGABIOS}",
        'display_library: rfb, options="timeout=0"',  # Debian builds no `nogui`; rfb does not wait for a client
        "ata0: enabled=1, ioaddr1=0x1f0, ioaddr2=0x3f0, irq=14",
        f"ata0-master: type=cdrom, path={iso}, status=inserted",
        "boot: cdrom",
        "clock: sync=none, time0=local",  # guest time follows instructions: idle skips ahead
        f"com1: enabled=1, mode=file, dev={serial}",
        "log: /dev/null",
        "panic: action=fatal", "error: action=ignore", "info: action=ignore", "debug: action=ignore",
        "mouse: enabled=0", "speaker: enabled=0",
        "",
    ])


def parse_serial(text: str) -> dict[str, GuestResult]:
    results: dict[str, GuestResult] = {}
    name: str | None = None
    out: list[str] = []
    err: list[str] = []
    target = out
    for line in text.replace("\r", "").split("\n"):
        if line.startswith(f"{MARK} begin "):
            name, out, err = line.split(" ", 2)[2], [], []
            target = out
        elif name and line == f"{MARK} stderr {name}":
            target = err
        elif name and line.startswith(f"{MARK} end {name} "):
            rc = int(line.rsplit(" ", 1)[1])
            results[name] = GuestResult(name=name, returncode=rc, stdout="\n".join(out).strip("\n"),
                                        stderr="\n".join(err).strip("\n"))
            name = None
        elif name:
            target.append(line)
    return results


def run_wheel(wheel: Path, commands: Sequence[GuestCommand], *, model: str = "tigerlake",
              cache: Path | None = None, timeout: float = 900, megs: int = 1024, log: Log = print) -> BochsRun:
    """Boots `model` with the wheel installed and runs `commands` in the guest."""
    if model not in MODELS:
        raise UsageError(f"unknown Bochs CPU model {model!r}; known: {', '.join(MODELS)}")
    if not wheel.is_file():
        raise UsageError(f"{wheel}: no such wheel")
    check_tools()
    cache = cache or cache_dir()
    kernel = ensure_kernel(cache, log)
    base = ensure_base_initramfs(cache, log)
    with tempfile.TemporaryDirectory(prefix="cpubuild-bochs-") as tmp:
        work = Path(tmp)
        run_initramfs(wheel, commands, work / "run.cpio")
        make_iso(kernel, [base, work / "run.cpio"], work / "boot.iso", work)
        serial = work / "serial.log"
        serial.touch()
        (work / "bochsrc").write_text(bochsrc(model, work / "boot.iso", serial, megs))
        (work / "debugger.rc").write_text("c\nquit\n")  # Debian's bochs-bin has the debugger built in
        log(f"bochs: booting {model} ({kernel.parent.name})")
        start = time.monotonic()
        booted: float | None = None
        with open(work / "bochs.out", "wb") as console:
            proc = subprocess.Popen(["bochs-bin", "-q", "-f", str(work / "bochsrc"), "-rc", str(work / "debugger.rc")],
                                    cwd=work, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT)
            try:
                while True:
                    text = serial.read_text(errors="replace")
                    if booted is None and f"{MARK} booted" in text:
                        booted = time.monotonic() - start
                    if f"{MARK} done" in text or proc.poll() is not None:
                        break
                    if time.monotonic() - start > timeout:
                        raise EmulatedTestError(f"Bochs {model} run passed {timeout:.0f} s",
                                                detail=text[-3000:])
                    time.sleep(0.5)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)  # the guest powers itself off
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        seconds = time.monotonic() - start
        text = serial.read_text(errors="replace")
        if f"{MARK} done" not in text:
            tail = (work / "bochs.out").read_text(errors="replace")[-2000:]
            raise EmulatedTestError(f"the Bochs {model} guest stopped before finishing (exit {proc.returncode})",
                                    detail=f"--- serial\n{text[-3000:]}\n--- bochs\n{tail}")
    return BochsRun(model=model, results=parse_serial(text), boot_seconds=booted, seconds=seconds, serial=text)
