"""Image sizes and build times of `cpubuild image`, measured side by side in one run.

    python benchmarks/bench_image.py [--arm64] [--json]

amd64 (this host): a clean build (no layer cache: the build stage installs the
toolchain and compiles every variant), a rebuild with nothing changed (layer
cache), and the same image from the wheel that build made (`--wheel`, no
layer cache: assembly only). Everything runs from a snapshot of the tree. Sizes: runtime vs build stage vs base image.
--arm64 adds the cross-compiled wheel (`cpubuild wheel --arch aarch64`) and the
arm64 image assembled from it under QEMU. Images are tagged cpubuild-bench/*.
Needs a running Docker daemon (scripts/setup.sh).
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
TAG = "cpubuild-bench/cpukern"


def snapshot(dest: Path) -> Path:
    """A copy of the source tree (what a build context holds), so that edits or
    commits made while the benchmark runs cannot turn a cached rebuild into a
    clean one. Without .git, its wheels get the tree's base version."""
    sys.path.insert(0, str(REPO / "tools"))
    from cpubuild.docker.context import source_files

    for rel in source_files(REPO):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, target, follow_symlinks=False)
    return dest


def cpubuild(tree: Path, *args: str) -> tuple[dict[str, Any], float]:
    """Runs the tree's CLI with --json; (its summary, wall seconds)."""
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", *args, "--json"]
    env = dict(os.environ, PYTHONPATH=str(tree / "tools"))
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, env=env)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"cpubuild {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout), seconds


def image_size(tag: str) -> int:
    out = subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", tag], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def amd64(tree: Path, tmp: Path) -> dict[str, Any]:
    clean, clean_s = cpubuild(tree, "image", "--platform", "linux/amd64", "--tag", f"{TAG}:runtime-amd64", "--no-cache")
    _, warm_s = cpubuild(tree, "image", "--platform", "linux/amd64", "--tag", f"{TAG}:runtime-amd64")
    wheel_dir = tmp / "amd64"
    build, _ = cpubuild(tree, "image", "--platform", "linux/amd64", "--target", "build", "--tag", f"{TAG}:build-amd64", "--output", str(wheel_dir))
    (wheel,) = wheel_dir.glob("*.whl")
    prebuilt, prebuilt_s = cpubuild(tree, "image", "--wheel", str(wheel), "--tag", f"{TAG}:runtime-amd64-wheel", "--no-cache")
    runtime = clean["images"][0]
    return {
        "selected": runtime["selected"],
        "runtime_size": runtime["size"],
        "build_stage_size": build["images"][0]["size"],
        "base_size": image_size(runtime["base"]),
        "wheel_size": wheel.stat().st_size,
        "clean_s": clean_s,
        "prebuilt_wheel_s": prebuilt_s,
        "unchanged_rebuild_s": warm_s,
        "prebuilt_runtime_size": prebuilt["images"][0]["size"],
    }


def arm64(tree: Path, tmp: Path) -> dict[str, Any]:
    out = tmp / "arm64"
    _, cross_s = cpubuild(tree, "wheel", "--arch", "aarch64", "--out", str(out))
    (wheel,) = out.glob("*.whl")
    image, image_s = cpubuild(tree, "image", "--wheel", str(wheel), "--tag", f"{TAG}:runtime-arm64", "--no-cache")
    runtime = image["images"][0]
    return {
        "selected": runtime["selected"],
        "runtime_size": runtime["size"],
        "base_size": image_size(runtime["base"]),
        "cross_wheel_s": cross_s,
        "assembly_s": image_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm64", action="store_true", help="also the arm64 image from a cross-compiled wheel")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-image-") as tmp:
        tree = snapshot(Path(tmp) / "tree")
        result: dict[str, Any] = {"amd64": amd64(tree, Path(tmp))}
        if args.arm64:
            result["arm64"] = arm64(tree, Path(tmp))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    a = result["amd64"]
    mb = 1e6
    print("amd64 (this host)")
    print(f"  image sizes: runtime {a['runtime_size'] / mb:.0f} MB | build stage {a['build_stage_size'] / mb:.0f} MB | base {a['base_size'] / mb:.0f} MB")
    print(f"               runtime adds {(a['runtime_size'] - a['base_size']) / mb:.1f} MB to the base; build stage / runtime = {a['build_stage_size'] / a['runtime_size']:.1f}x")
    print(f"  build times: clean (toolchain + compile) {a['clean_s']:.0f} s | from the built wheel {a['prebuilt_wheel_s']:.0f} s | nothing changed {a['unchanged_rebuild_s']:.0f} s")
    print(f"               clean / from wheel = {a['clean_s'] / a['prebuilt_wheel_s']:.1f}x; selects {a['selected']}")
    if "arm64" in result:
        b = result["arm64"]
        print("arm64 (QEMU for assembly and the smoke test only)")
        print(f"  image size:  runtime {b['runtime_size'] / mb:.0f} MB | base {b['base_size'] / mb:.0f} MB")
        print(f"  build times: cross-compiled wheel {b['cross_wheel_s']:.0f} s | image from it {b['assembly_s']:.0f} s; selects {b['selected']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
