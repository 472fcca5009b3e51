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


# As installed tools run: byte-compiled (an environment that forbids writing
# .pyc files would time the compiler instead of the command).
CLI_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": str(REPO / "tools")}


def measure(root: Path, size: int, r: int, scratch: Path) -> dict[str, float]:
    """One round of the three publishes (and a bare interpreter start) on one index."""
    storage = LocalStorage(root)  # measured publishes are durable (fsync), as in real use
    n = 10_000_000 + size * 100 + r
    one = make_wheels(scratch, n)[:1]
    extra = make_wheels(scratch, n)[1:2]
    times = {
        "new_commit_s": timed(lambda: publish(storage, one, commit=commit_sha(n), channel="nightly")),
        "existing_commit_s": timed(lambda: publish(storage, extra, commit=commit_sha(n))),
    }
    path = write_wheel(scratch, name="cpukern", version=f"0.1.0.dev{n}+g{n:07x}.cpu.x", tag="py3-none-any", files={"cpukern/x.py": b""})
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])",
           "publish", str(path), "--to", str(root), "--commit", commit_sha(n), "--channel", "nightly", "-q"]
    times["cli_s"] = timed(lambda: subprocess.run(cmd, check=True, env=CLI_ENV))
    times["bare_s"] = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))
    problems = verify_tree(storage, "nightly/cpu").problems + verify_tree(storage, f"{commit_sha(n)}/cpu").problems
    if problems:
        raise SystemExit(f"index invalid after publishing: {problems[:5]}")
    return times


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
        scratch = work / "scratch"
        scratch.mkdir(exist_ok=True)
        roots = {}
        for size in sizes:
            roots[size] = work / f"index-{size}"
            seconds = fill(roots[size], size, scratch)
            print(f"  filled {size:>6} wheels in {seconds:.1f} s", file=sys.stderr)
        subprocess.run([sys.executable, "-c", "import cpubuild.cli, cpubuild.commands.publish"], check=True, env=CLI_ENV)  # warm .pyc
        # rounds interleave the sizes, so that load on the machine hits all alike
        samples: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
        for r in range(args.repeat):
            for size in sizes:
                samples[size].append(measure(roots[size], size, r, scratch))
        rows = []
        for size in sizes:
            row = {key: statistics.median(s[key] for s in samples[size]) for key in samples[size][0]}
            row["wheels"] = sum(1 for _ in roots[size].rglob("*.whl"))
            rows.append(row)
        print(f"publish one wheel (median of {args.repeat} interleaved rounds; durable writes with fsync)")
        print(f"{'wheels in index':>16} {'new commit+nightly':>19} {'existing commit':>16} {'cpubuild publish':>17} {'(python -c pass)':>17}")
        for row in rows:
            print(
                f"{int(row['wheels']):>16,} {row['new_commit_s']*1000:>16.1f} ms {row['existing_commit_s']*1000:>13.1f} ms "
                f"{row['cli_s']*1000:>14.1f} ms {row['bare_s']*1000:>14.1f} ms"
            )
        first, last = rows[0], rows[-1]
        print(
            f"ratio {int(last['wheels']):,} / {int(first['wheels']):,} wheels: "
            f"new commit {last['new_commit_s'] / first['new_commit_s']:.2f}x, "
            f"existing {last['existing_commit_s'] / first['existing_commit_s']:.2f}x, "
            f"command {last['cli_s'] / first['cli_s']:.2f}x (flat = about 1x)"
        )
        worst = max(max(r["new_commit_s"], r["existing_commit_s"]) for r in rows)
        worst_cli = max(r["cli_s"] for r in rows)
        startup = max(r["bare_s"] for r in rows)
        print(f"target <= 1 s: publish {'met' if worst <= 1.0 else 'MISSED'} (worst {worst*1000:.0f} ms); "
              f"whole command {'met' if worst_cli <= 1.0 else 'MISSED'} (worst {worst_cli*1000:.0f} ms, "
              f"of which a bare interpreter start takes up to {startup*1000:.0f} ms on this machine now)")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
