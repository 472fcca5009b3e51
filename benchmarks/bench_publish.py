"""Publishing one wheel into an index that already holds 100 / 1,000 / 10,000
wheels: wall time side by side (target: at most 1 s, flat in index size).

The index is filled the way CI fills it (4 wheels per commit: three arches
and one ISA subset, every commit also moving nightly), then one more wheel
is published three ways: into a new commit with --channel nightly (the CI
case), into an existing commit, and through the `cpubuild publish` command
(a fresh process: imports included). Median of --repeat runs each.

    python benchmarks/bench_publish.py [--sizes 100,1000,10000] [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from cpubuild.index.publish import publish  # noqa: E402
from cpubuild.index.storage import LocalStorage  # noqa: E402
from cpubuild.index.verify import verify_tree  # noqa: E402
from cpubuild.index.wheelfile import WheelInfo, read_wheel, write_wheel  # noqa: E402

TAGS = ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64", "manylinux_2_28_s390x")
PAYLOAD = os.urandom(256 * 1024)  # incompressible: a wheel of realistic size


def commit_sha(n: int) -> str:
    return f"{n:040x}"


def make_wheels(out: Path, n: int) -> list[WheelInfo]:
    """The 4 wheels of commit n (version 0.1.0.dev<n>)."""
    wheels = []
    for i, (label, tag) in enumerate([("cpu", t) for t in TAGS] + [("cpu.avx512", TAGS[0])]):
        path = write_wheel(
            out, name="cpukern", version=f"0.1.0.dev{n}+g{n:07x}.{label}", tag=f"py3-none-{tag}",
            files={"cpukern/__init__.py": b"", f"cpukern/_blob{i}.bin": PAYLOAD[: 1024 * (8 + i)]},
        )
        wheels.append(read_wheel(path))
        path.unlink()
    return wheels


def fill(root: Path, wheels: int, scratch: Path) -> float:
    start = time.perf_counter()
    storage = LocalStorage(root, durable=False)  # filling only: no fsync
    for n in range(1, wheels // 4 + 1):
        publish(storage, make_wheels(scratch, n), commit=commit_sha(n), channel="nightly")
    return time.perf_counter() - start


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def bench(size: int, repeat: int, work: Path) -> dict[str, float]:
    root = work / f"index-{size}"
    scratch = work / "scratch"
    scratch.mkdir(exist_ok=True)
    filled_s = fill(root, size, scratch)
    storage = LocalStorage(root)  # measured publishes are durable (fsync), as in real use
    new_commit: list[float] = []
    existing: list[float] = []
    via_cli: list[float] = []
    bare: list[float] = []
    for r in range(repeat):
        n = 10_000_000 + size * 10 + r
        one = make_wheels(scratch, n)[:1]
        new_commit.append(timed(lambda one=one, n=n: publish(storage, one, commit=commit_sha(n), channel="nightly")))
        extra = make_wheels(scratch, n)[1:2]
        existing.append(timed(lambda extra=extra, n=n: publish(storage, extra, commit=commit_sha(n))))
        path = write_wheel(scratch, name="cpukern", version=f"0.1.0.dev{n}+g{n:07x}.cpu.x", tag="py3-none-any", files={"cpukern/x.py": b""})
        cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])",
               "publish", str(path), "--to", str(root), "--commit", commit_sha(n), "--channel", "nightly", "-q"]
        env = dict(os.environ, PYTHONPATH=str(REPO / "tools"))
        via_cli.append(timed(lambda cmd=cmd, env=env: subprocess.run(cmd, check=True, env=env)))
        bare.append(timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True)))
    files = sum(1 for p in root.rglob("*.whl"))
    problems = verify_tree(storage, "nightly/cpu").problems + verify_tree(storage, f"{commit_sha(n)}/cpu").problems
    if problems:
        raise SystemExit(f"index invalid after benchmark: {problems[:5]}")
    return {
        "wheels": files,
        "fill_s": filled_s,
        "new_commit_s": statistics.median(new_commit),
        "existing_commit_s": statistics.median(existing),
        "cli_s": statistics.median(via_cli),
        "bare_s": statistics.median(bare),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="build the indexes here and keep them")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-publish-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        rows = []
        for size in sizes:
            rows.append(bench(size, args.repeat, work))
            print(f"  filled {rows[-1]['wheels']:>6} wheels in {rows[-1]['fill_s']:.1f} s", file=sys.stderr)
        print(f"publish one wheel (median of {args.repeat}; durable writes with fsync)")
        print(f"{'wheels in index':>16} {'new commit+nightly':>19} {'existing commit':>16} {'cpubuild publish':>17} {'(python -c pass)':>17}")
        for row in rows:
            print(
                f"{row['wheels']:>16,} {row['new_commit_s']*1000:>16.1f} ms {row['existing_commit_s']*1000:>13.1f} ms "
                f"{row['cli_s']*1000:>14.1f} ms {row['bare_s']*1000:>14.1f} ms"
            )
        first, last = rows[0], rows[-1]
        print(
            f"ratio {last['wheels']:,} / {first['wheels']:,} wheels: "
            f"new commit {last['new_commit_s'] / first['new_commit_s']:.2f}x, "
            f"existing {last['existing_commit_s'] / first['existing_commit_s']:.2f}x, "
            f"command {last['cli_s'] / first['cli_s']:.2f}x (flat = about 1x)"
        )
        worst = max(max(r["new_commit_s"], r["existing_commit_s"], r["cli_s"]) for r in rows)
        print(f"target <= 1 s: {'met' if worst <= 1.0 else 'MISSED'} (worst {worst*1000:.0f} ms)")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
