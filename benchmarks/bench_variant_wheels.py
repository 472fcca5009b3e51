"""Variant wheels vs the fat wheel, measured in one run.

1. Bytes uv downloads to install a project from an index (`cpubuild serve -v`'s
   log of GET requests, each wheel counted at its size): uv with
   `--preview-features wheel-variants` (the level wheel of this CPU) against
   uv without preview (the fat wheel), for cpukern and examples/torch_ops
   (--no-deps: only the project's own wheel is counted).
2. Publishing a variant set (the fat wheel, four level wheels and the merged
   variants.json) into indexes already holding 100 and 1,000 versions: median
   wall time of --repeat interleaved rounds, and the ratio (flat = about 1x).

    python benchmarks/bench_variant_wheels.py [--projects cpukern,torch_ops] [--sizes 100,1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(Path(__file__).parent))

from bench_publish import commit_sha, fill  # noqa: E402
from cpubuild.index.publish import publish  # noqa: E402
from cpubuild.index.storage import LocalStorage  # noqa: E402
from cpubuild.index.wheelfile import read_wheel, write_wheel  # noqa: E402
from cpubuild.installlevels import install_levels  # noqa: E402
from cpubuild.wheelbuild.variantwheels import variant_document  # noqa: E402

PROJECTS = {"cpukern": ("cpukern", REPO), "torch_ops": ("torch-ops", REPO / "examples" / "torch_ops")}
ENV = dict(os.environ, PYTHONPATH=str(REPO / "tools"))
CLI = [sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])"]
GET = re.compile(r'"GET (\S+) HTTP')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def downloaded_bytes(root: Path, log: Path, start: int) -> dict[str, int]:
    """Wheel file -> bytes, for the wheels requested since `start` (a log offset)."""
    got = {}
    for path in GET.findall(log.read_text()[start:]):
        name = urllib.request.unquote(path.split("?")[0])
        if name.endswith(".whl"):
            got[name.rsplit("/", 1)[-1]] = (root / name.lstrip("/")).stat().st_size
    return got


def install_bytes(work: Path) -> list[dict[str, object]]:
    rows = []
    root = work / "index"
    for key, (_, project) in PROJECTS.items():
        out = work / f"wheels-{key}"
        proc = subprocess.run([*CLI, "wheel", "--variant-wheels", "--json", "--project", str(project), "--out", str(out),
                               "--build-root", str(work / f"build-{key}")], capture_output=True, text=True, env=ENV)
        if proc.returncode != 0:
            sys.exit(f"{key}: cpubuild wheel failed:\n{proc.stderr[-3000:]}")
        wheels = sorted(out.glob("*.whl"))
        subprocess.run([*CLI, "publish", *map(str, wheels), "--to", str(root), "--commit", "f" * 40, "-q"], check=True, env=ENV)
    port, log = free_port(), work / "serve.log"
    with log.open("w") as sink:
        server = subprocess.Popen([*CLI, "serve", str(root), "--port", str(port), "-v"], stderr=sink, env=ENV)
    url = f"http://127.0.0.1:{port}/{'f' * 40}/cpu/"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except OSError:
                time.sleep(0.2)
        for key, (dist, _) in PROJECTS.items():
            row: dict[str, object] = {"project": key}
            for mode, extra in (("fat (uv, no preview)", []), ("variant (uv preview)", ["--preview-features", "wheel-variants"])):
                venv = work / f"venv-{key}-{len(extra)}"
                env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_", "VIRTUAL_ENV"))}
                env["UV_CACHE_DIR"] = str(venv) + "-cache"
                subprocess.run(["uv", "venv", "-q", str(venv)], check=True, env=env)
                start = len(log.read_text())
                subprocess.run(["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "--no-deps",
                                "--index-url", url, *extra, dist], check=True, env=env)
                time.sleep(0.2)
                got = downloaded_bytes(root, log, start)
                row[mode] = (sum(got.values()), sorted(got))
            # what a host of each level would download: each published wheel of the project, by label
            norm = dist.replace("-", "_")
            row["by label"] = {(p.name[: -len(".whl")].split("-")[5] if p.name.count("-") == 5 else "fat"): p.stat().st_size
                               for p in root.glob(f"{'f' * 40}/{norm}-*.whl")}
            rows.append(row)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return rows


def variant_set(out: Path, n: int) -> list[Path]:
    """A fat wheel and its four x86-64 variant wheels (synthetic, realistic sizes) of version 0.1.0.dev<n>."""
    scheme = install_levels()["x86_64"]
    version = f"0.1.0.dev{n}+g{n:07x}.cpu"
    blob = os.urandom(512 * 1024)
    out.mkdir(parents=True, exist_ok=True)
    paths = [write_wheel(out, name="cpukern", version=version, tag="py3-none-manylinux_2_28_x86_64",
                         files={"cpukern/__init__.py": b"", "cpukern/_libs.bin": blob})]
    for label, level in (("x86_64_v1", "v1"), ("x86_64_v3", "v3"), ("x86_64_v4", "v4"), ("null", None)):
        doc = json.dumps(variant_document(scheme, {label: level})).encode()
        (out / label).mkdir(parents=True, exist_ok=True)
        plain = write_wheel(out / label, name="cpukern", version=version, tag="py3-none-manylinux_2_28_x86_64",
                            files={"cpukern/__init__.py": b"", "cpukern/_libs.bin": blob[: 128 * 1024],
                                   f"cpukern-{version}.dist-info/variant.json": doc})
        paths.append(plain.rename(out / (plain.name[: -len(".whl")] + f"-{label}.whl")))
    return paths


def publish_times(work: Path, sizes: list[int], repeat: int) -> dict[int, float]:
    roots = {}
    for size in sizes:
        roots[size] = work / f"pindex-{size}"
        fill(roots[size], size, work / "scratch")
    samples: dict[int, list[float]] = {s: [] for s in sizes}
    for r in range(repeat):
        for size in sizes:
            n = 20_000_000 + size * 100 + r
            infos = [read_wheel(p) for p in variant_set(work / f"set-{size}-{r}", n)]
            start = time.perf_counter()
            publish(LocalStorage(roots[size]), infos, commit=commit_sha(n), channel="nightly")
            samples[size].append(time.perf_counter() - start)
    return {size: statistics.median(v) for size, v in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--projects", default=",".join(PROJECTS))
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for key in list(PROJECTS):
        if key not in args.projects.split(","):
            del PROJECTS[key]
    work = Path(tempfile.mkdtemp(prefix="bench-variant-wheels-"))
    (work / "scratch").mkdir()
    try:
        print("bytes uv downloads for the project's own wheel (--no-deps), from one index")
        for row in install_bytes(work):
            fat_bytes, _ = row["fat (uv, no preview)"]  # type: ignore[misc]
            var_bytes, var_files = row["variant (uv preview)"]  # type: ignore[misc]
            print(f"  {row['project']:<10} fat {fat_bytes:>10,} B   variant {var_bytes:>10,} B   variant/fat {var_bytes / fat_bytes:.2f}"
                  f"   ({', '.join(var_files)})")
            sizes_by = row["by label"]
            assert isinstance(sizes_by, dict)
            print("             per level (what a host of that level downloads): " + ", ".join(
                f"{label} {size / sizes_by['fat']:.2f}" for label, size in sorted(sizes_by.items()) if label != "fat") + " of the fat wheel")
        sizes = [int(s) for s in args.sizes.split(",")]
        times = publish_times(work, sizes, args.repeat)
        print(f"publishing a variant set (fat + 4 level wheels + variants.json), median of {args.repeat} interleaved rounds")
        for size in sizes:
            print(f"  index of {size:>6,} wheels: {times[size] * 1000:7.1f} ms")
        print(f"  ratio {sizes[-1]:,} / {sizes[0]:,}: {times[sizes[-1]] / times[sizes[0]]:.2f}x (flat = about 1x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
