"""Cross compilation vs a native build vs compiling under emulation.

Measured side by side in one run, ccache disabled, fresh build directories:

* the all-variant aarch64 wheel by `cpubuild wheel --arch aarch64` (Debian
  cross toolchain) vs the all-variant wheel of this host's own arch
  (target: cross <= 1.5x native);
* with --emulated, for the record: one variant's sources compiled by the
  g++ *inside* an arm64 Debian rootfs run through qemu-user (what building
  under QEMU means: cibuildwheel's foreign-arch path), vs the very same
  compile commands with the cross compiler. That rootfs (python3 + g++) is
  made once by debootstrap and cached beside the test rootfs.

    python benchmarks/bench_cross.py [--arch aarch64] [--jobs N] [--emulated] [--variant neon]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from cpubuild.emulate.rootfs import RootfsSpec, ensure_rootfs  # noqa: E402
from cpubuild.matrix import Matrix, load_matrix  # noqa: E402
from cpubuild.platforms import Host  # noqa: E402
from cpubuild.wheelbuild.version import source_version  # noqa: E402

# The flags every variant library gets (cmake/CpukernVariants.cmake), minus
# the path-mapping ones: the same list on both sides of the comparison.
COMMON_FLAGS = ["-O3", "-ffp-contract=fast", "-fno-math-errno", "-fno-plt", "-fPIC", "-fvisibility=hidden", "-std=gnu++17"]


def build_wheel(arch: str, root: Path, out: Path, env: dict[str, str], jobs: int) -> tuple[float, dict[str, Any]]:
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())",
           "wheel", "--json", "-q", "--arch", arch, "--build-root", str(root), "--out", str(out), "--jobs", str(jobs)]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "tools"), **env})
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{arch} wheel failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return seconds, json.loads(proc.stdout)


def compile_commands(matrix: Matrix, arch: str, variant: str, compiler: str, src: Path, obj: Path) -> list[list[str]]:
    """One command per translation unit of the variant library, then the link.
    `src`/`obj` are paths as the compiler sees them (inside a chroot or not)."""
    flags = [*COMMON_FLAGS, *matrix.variant(arch, variant).flags_for("gcc"), f"-I{src / 'csrc/include'}",
             f'-DCPUKERN_VARIANT_NAME="{variant}"']
    names = sorted([*(REPO / "csrc").glob("kernels/*.cpp"), *(REPO / "csrc").glob("runtime/*.cpp")])
    sources = [src / "csrc" / p.relative_to(REPO / "csrc") for p in names]
    commands = [[compiler, *flags, "-c", str(s), "-o", str(obj / (s.stem + ".o"))] for s in sources]
    commands.append([compiler, "-shared", "-pthread", *[str(obj / (s.stem + ".o")) for s in sources], "-o", str(obj / f"_cpukern_{variant}.so")])
    return commands


def run_parallel(commands: list[list[str]], jobs: int, *, chroot: Path | None = None) -> float:
    """Compiles with `jobs` processes at a time (the link last); returns wall seconds."""
    prefix = [shutil.which("chroot") or "/usr/sbin/chroot", str(chroot)] if chroot else []
    started = time.monotonic()
    pending = list(commands[:-1])
    running: list[subprocess.Popen[bytes]] = []
    while pending or running:
        while pending and len(running) < jobs:
            running.append(subprocess.Popen([*prefix, *pending.pop(0)], stderr=subprocess.PIPE))
        proc = running.pop(0)
        _, err = proc.communicate()
        if proc.returncode:
            sys.exit(f"compile failed: {' '.join(map(str, proc.args))}\n{err.decode()[-2000:]}")  # type: ignore[arg-type]
    subprocess.run([*prefix, *commands[-1]], check=True)
    return time.monotonic() - started


def emulated_compile(matrix: Matrix, arch: str, variant: str, jobs: int) -> tuple[float, float]:
    """(cross seconds, emulated seconds) for one variant's identical compile commands."""
    a = matrix.arches[arch]
    spec = RootfsSpec(arch=a.name, debian_arch=a.debian_arch, qemu=a.qemu, packages=("g++", "python3"), flavor="gxx")
    root = ensure_rootfs(spec, log=lambda line: print(line, flush=True))
    inside = Path("/opt/bench-cross")
    host_dir = root / inside.relative_to("/")
    shutil.rmtree(host_dir, ignore_errors=True)
    (host_dir / "obj").mkdir(parents=True)
    shutil.copytree(REPO / "csrc", host_dir / "csrc")
    try:
        emulated = run_parallel(compile_commands(matrix, arch, variant, "g++", inside, inside / "obj"), jobs, chroot=root)
        with tempfile.TemporaryDirectory(prefix="bench-cross-") as tmp:
            (Path(tmp) / "obj").mkdir()
            cross = run_parallel(compile_commands(matrix, arch, variant, f"{a.triplet}-g++", host_dir, Path(tmp) / "obj"), jobs)
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)
    return cross, emulated


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="aarch64", help="the cross target (default aarch64)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--emulated", action="store_true", help="also compile one variant inside an emulated rootfs (slow)")
    parser.add_argument("--variant", help="the variant for --emulated (default: the target's baseline)")
    parser.add_argument("--skip-wheels", action="store_true", help="only the --emulated comparison")
    args = parser.parse_args()

    matrix = load_matrix(REPO / "isa_matrix.toml")
    host = Host.current().arch
    if args.arch == host or args.arch not in matrix.arches:
        sys.exit(f"--arch must be another arch of isa_matrix.toml than this host's {host}")
    pinned = source_version(REPO, REPO / "python/cpukern/_version.py", os.environ)
    cold = {"CPUBUILD_VERSION": pinned.text, "SOURCE_DATE_EPOCH": str(pinned.source_date_epoch), "CCACHE_DISABLE": "1"}
    print(f"host {host}, target {args.arch}, {args.jobs} jobs, ccache disabled, version {pinned.text}")

    if not args.skip_wheels:
        with tempfile.TemporaryDirectory(prefix="bench-cross-") as tmp:
            work = Path(tmp)
            t_native, s_native = build_wheel(host, work / "native", work / "out-native", cold, args.jobs)
            t_cross, s_cross = build_wheel(args.arch, work / "cross", work / "out-cross", cold, args.jobs)
        print(f"\n{'clean all-variant wheel':<34} {'wall s':>8} {'variants':>9}  compile s  policy")
        for label, seconds, summary in ((f"native {host}", t_native, s_native), (f"cross {args.arch}", t_cross, s_cross)):
            wheel = summary["wheel"]
            print(f"{label:<34} {seconds:8.1f} {len(wheel['variants']):>9}  {summary['stages'].get('compile', 0):9.1f}  {wheel['policy']}")
        ratio = t_cross / t_native
        per_variant = (t_cross / len(s_cross["wheel"]["variants"])) / (t_native / len(s_native["wheel"]["variants"]))
        print(f"\ncross / native wall time       = {ratio:.2f}   (target <= 1.50: {'met' if ratio <= 1.5 else 'NOT met'})")
        print(f"cross / native per variant     = {per_variant:.2f}")

    if args.emulated:
        variant = args.variant or matrix.baseline(args.arch).name
        cross, emulated = emulated_compile(matrix, args.arch, variant, args.jobs)
        print(f"\none variant ({variant}), identical compile commands, {args.jobs} jobs:")
        print(f"  cross compiler on the host      {cross:8.1f} s")
        print(f"  g++ inside the emulated rootfs  {emulated:8.1f} s")
        print(f"  emulated / cross                = {emulated / cross:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
