"""Wall times of `cpubuild wheel`, measured side by side in one run.

* clean all-variant build (fresh build directory, empty ccache)
* clean single-variant build (one optional variant; the baseline is always in)
* clean baseline-only build (for reference)
* rebuild of the all-variant wheel with nothing changed
* with ccache: the all-variant wheel in a new build directory, and switching
  to the single-variant set, both served by the all-variant build's cache

and the ratios against their targets: all-variant <= 2x single-variant
(2.5x for a torch project, `kind = "torch"`: every variant links against
libtorch and the torch headers dominate; --target-ratio overrides),
no-change rebuild <= 20% of a clean build. The version and SOURCE_DATE_EPOCH
are pinned once, so every build names its wheel the same way. Then a new
project from scratch: `cpubuild init` -> `cpubuild wheel` (isolated, as in a
fresh environment; empty private ccache) -> the wheel installed into a new
venv and its report run (target: under 30 s on 2 cores).

    python benchmarks/bench_build.py [--project DIR] [--single NAME] [--jobs N] [--keep DIR] [--no-init]
                                     [--target-ratio R]
    python benchmarks/bench_build.py --project examples/torch_ops --single avx2 --no-init
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from cpubuild.platforms import Host  # noqa: E402
from cpubuild.project import load_project  # noqa: E402

CLI = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())"]
# all-variant / single-variant targets by the project's kind (torch: its headers
# are parsed once, in COMMON_SOURCES, but each variant links against libtorch).
TARGET_RATIO = {"ctypes": 2.0, "torch": 2.5}


def build(project: Path, root: Path, out: Path, env: dict[str, str], *args: str) -> tuple[float, dict[str, Any]]:
    cmd = [*CLI, "wheel", "--json", "-q", "--project", str(project), "--build-root", str(root), "--out", str(out), *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "tools"), **env})
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"build failed ({' '.join(args) or 'all'}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    summary: dict[str, Any] = json.loads(proc.stdout)
    # CPU seconds of the whole process tree: far less sensitive than wall time
    # to other jobs sharing the machine.
    summary["_cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, summary


def timed(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> float:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "tools"), **(env or {})},
                          cwd=cwd)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return time.monotonic() - started


def new_project(work: Path, has_ccache: bool) -> None:
    """`cpubuild init` to an installed, dispatching wheel, the way a new user goes."""
    root = work / "newproj"
    env = {"CCACHE_DIR": str(work / "ccache-newproj")} if has_ccache else {}
    venv = work / "newproj-venv"
    steps = [
        ("cpubuild init", timed([*CLI, "init", str(root), "--name", "benchproj", "-q"], env)),
        ("cpubuild wheel (isolated, cold ccache)", timed([*CLI, "wheel", "-q", "--project", str(root), "--isolation", "on"], env)),
        ("uv venv", timed([sys.executable, "-m", "uv", "venv", "-q", str(venv)])),
    ]
    wheel = next((root / "wheelhouse").glob("benchproj-*.whl"))
    steps.append(("uv pip install the wheel", timed([sys.executable, "-m", "uv", "pip", "install", "-q", "--python",
                                                       str(venv / "bin" / "python"), str(wheel)])))
    steps.append(("python -m benchproj", timed([str(venv / "bin" / "python"), "-m", "benchproj"], cwd=work)))
    total = sum(seconds for _, seconds in steps)
    print("\nnew project, from nothing to an installed wheel that dispatches:")
    for name, seconds in steps:
        print(f"  {name:<44} {seconds:8.1f} s")
    print(f"  {'total':<44} {total:8.1f} s   (target < 30 s: {'met' if total < 30 else 'NOT met'})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", type=Path, default=REPO)
    parser.add_argument("--single", help="the single variant (default: the host arch's first optional variant)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--keep", type=Path, help="build here and keep it (default: a temporary directory)")
    parser.add_argument("--no-init", action="store_true", help="skip the new-project measurement")
    parser.add_argument("--target-ratio", type=float,
                        help="all-variant / single-variant target (default: by the project's kind, "
                             + ", ".join(f"{k} {v:g}" for k, v in TARGET_RATIO.items()) + ")")
    args = parser.parse_args()

    project = args.project.resolve()
    loaded = load_project(project)
    matrix = loaded.load_matrix()
    target = args.target_ratio or TARGET_RATIO.get(loaded.config.kind, TARGET_RATIO["ctypes"])
    arch = Host.current().arch
    single = args.single or next(v.name for v in matrix.variants_for(arch) if not v.is_baseline)
    pinned = loaded.source_version()
    env = {"CPUBUILD_VERSION": pinned.text, "SOURCE_DATE_EPOCH": str(pinned.source_date_epoch)}
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-build-"))
    work.mkdir(parents=True, exist_ok=True)
    has_ccache = shutil.which("ccache") is not None

    def cache(name: str) -> dict[str, str]:
        """Clean builds start from an empty private ccache (or none): no object is reused."""
        return {**env, "CCACHE_DIR": str(work / f"ccache-{name}")} if has_ccache else env

    common = ("--jobs", str(args.jobs))
    print(f"project {project} (kind {loaded.config.kind}, {arch}, {args.jobs} jobs, version pinned to {pinned.text});"
          f" work dir {work}")

    rows: list[tuple[str, float, dict[str, Any]]] = []
    t_all, s_all = build(project, work / "all", work / "out-all", cache("all"), *common)
    rows.append(("clean all-variant", t_all, s_all))
    t_single, s_single = build(project, work / "single", work / "out-single", cache("single"), "--isa", single, *common)
    rows.append((f"clean single-variant (--isa {single})", t_single, s_single))
    t_base, s_base = build(project, work / "baseline", work / "out-baseline", cache("baseline"), "--isa", "baseline", *common)
    rows.append(("clean baseline-only", t_base, s_base))
    t_again, s_again = build(project, work / "all", work / "out-again", cache("all"), *common)
    rows.append(("all-variant rebuild, nothing changed", t_again, s_again))
    if has_ccache:
        t_warm, s_warm = build(project, work / "all-warm", work / "out-warm", cache("all"), *common)
        rows.append(("all-variant, new build dir, ccache warm", t_warm, s_warm))
        t_switch, s_switch = build(project, work / "switch", work / "out-switch", cache("all"), "--isa", single, *common)
        rows.append((f"--isa {single} after the all-variant build", t_switch, s_switch))
    identical = Path(s_all["wheel"]["path"]).read_bytes() == Path(s_again["wheel"]["path"]).read_bytes()

    print(f"\n{'build':<44} {'wall s':>8} {'cpu s':>8}  variants  stages (wall s)")
    for name, seconds, summary in rows:
        stages = " ".join(f"{k}={v:.1f}" for k, v in summary["stages"].items())
        print(f"{name:<44} {seconds:8.1f} {summary['_cpu']:8.1f}  {len(summary['wheel']['variants']):>8}  {stages}")
    ratio_all = t_all / t_single
    ratio_rebuild = t_again / t_all
    print(f"\nall-variant / single-variant  = {ratio_all:.2f} wall, {s_all['_cpu'] / s_single['_cpu']:.2f} cpu"
          f"   (target <= {target:.2f}: {'met' if ratio_all <= target else 'NOT met'})")
    print(f"all-variant / baseline-only   = {t_all / t_base:.2f} wall, {s_all['_cpu'] / s_base['_cpu']:.2f} cpu")
    print(f"no-change rebuild / clean     = {ratio_rebuild:.2f} wall, {s_again['_cpu'] / s_all['_cpu']:.2f} cpu"
          f"   (target <= 0.20: {'met' if ratio_rebuild <= 0.2 else 'NOT met'})")
    print(f"rebuild byte-identical to the clean build: {identical}")
    if not args.no_init:
        new_project(work, has_ccache)
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
