"""Build time of vLLM's CPU extension (examples/vllm-cpu) per variant: cold and warm ccache, without and with
precompiled headers (and, for the full set, unity units), side by side in one run.

    python benchmarks/bench_vllm_build.py [--variants avx2,avx512,...] [--full] [--configs cold,cold+pch,...]
                                          [--jobs N] [--keep DIR] [--json]

For each variant (default: every x86_64 / aarch64 variant of the example's matrix for this host's arch; each
one compiles here whether or not this CPU runs it) one `cpubuild wheel --isa <variant>` build per
configuration, each in a fresh build directory:

* cold: file by file (as vLLM builds), no PCH, an empty private ccache; warm: the same ccache again;
* cold+pch / warm+pch: `-C cmake.define.VLLM_CPU_OPS_PCH=ON` (<torch/all.h> precompiled once per variant);
* with `--full` also cold+unity / warm+unity: `VLLM_CPU_OPS_UNITY=ON` (vLLM's every-variant sources as unity
  units of five files), and cold+unity+pch / warm+unity+pch.

`--full` adds `-C cmake.define.VLLM_CPU_OPS_FULL=ON` (every torch-only vLLM source, registered by vLLM's own
bindings; built without the repair step) instead of the default set (layernorm, activation, pos_encoding,
attention). A warm build reuses the ccache of the cold build of its configuration, which must come first.
Prints wall seconds, the compile stage's seconds and CPU seconds of the build's process tree (less sensitive
to other jobs on a shared machine), and each configuration's ratio to `cold`. Figures vary with the host:
compare ratios taken in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "vllm-cpu"
sys.path.insert(0, str(REPO / "tools"))

from cpubuild.matrix import load_matrix  # noqa: E402
from cpubuild.platforms import Host  # noqa: E402

CLI = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())"]


def on_off(flag: bool) -> str:
    return "ON" if flag else "OFF"


def build(root: Path, variant: str, ccache: Path, config: str, full: bool, jobs: int) -> dict[str, Any]:
    """One fresh-build-directory wheel build of one variant; wall, compile-stage and CPU seconds."""
    parts = set(config.split("+"))
    defines = [f"-Ccmake.define.VLLM_CPU_OPS_PCH={on_off('pch' in parts)}",
               f"-Ccmake.define.VLLM_CPU_OPS_FULL={on_off(full)}",
               *([f"-Ccmake.define.VLLM_CPU_OPS_UNITY={on_off('unity' in parts)}"] if full else [])]
    build_root = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    cmd = [*CLI, "wheel", "--json", "-q", "--project", str(EXAMPLE), "--isa", variant, "--jobs", str(jobs),
           "--build-root", str(build_root), "--out", str(root / "out"), *defines,
           *(["--no-repair"] if full else [])]  # the full set links the host's libnuma (README: repair in an image)
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools"), "CCACHE_DIR": str(ccache)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"bench_vllm_build: {variant} ({config}) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    summary = json.loads(proc.stdout)
    return {"wall": round(wall, 1), "compile": round(float(summary.get("stages", {}).get("compile", 0.0)), 1),
            "cpu": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1)}


def configurations(full: bool) -> list[str]:
    options = ["", "+pch", *(["+unity", "+unity+pch"] if full else [])]
    return [f"{temperature}{option}" for option in options for temperature in ("cold", "warm")]


def measure(root: Path, variant: str, configs: list[str], full: bool, jobs: int) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    caches: dict[str, Path] = {}  # per option: cold fills it, warm reads it
    for key in configs:
        temperature, _, option = key.partition("+")
        if temperature == "cold":
            caches[option] = Path(tempfile.mkdtemp(prefix="ccache-", dir=root))
        results[key] = build(root, variant, caches[option], key, full, jobs)
        print(f"  {variant:<11} {key:<15} wall {results[key]['wall']:7.1f} s  compile {results[key]['compile']:7.1f} s"
              f"  cpu {results[key]['cpu']:7.1f} s", flush=True)
    return results


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "-"


def table(rows: dict[str, dict[str, dict[str, Any]]], configs: list[str]) -> str:
    """Wall seconds per configuration, then cold's wall (and CPU) seconds over each other's."""
    others = [key for key in configs if key != "cold"]
    head = ["variant", *(f"{key} s" for key in configs), *(f"cold / {key} (cpu)" for key in others)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for variant, r in rows.items():
        cells = [variant, *(str(r[key]["wall"]) for key in configs),
                 *(f"{ratio(r['cold']['wall'], r[key]['wall'])} ({ratio(r['cold']['cpu'], r[key]['cpu'])})"
                   for key in others)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", help="comma-separated (default: every variant of this arch)")
    parser.add_argument("--full", action="store_true", help="VLLM_CPU_OPS_FULL=ON: every torch-only vLLM source")
    parser.add_argument("--configs", help="comma-separated, in this order (default: all; cold first; "
                        "a warm one after its cold one): cold, warm, cold+pch, warm+pch, and with --full "
                        "cold+unity, warm+unity, cold+unity+pch, warm+unity+pch")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = parser.parse_args()
    arch = Host.current().arch
    known = [v.name for v in load_matrix(EXAMPLE / "isa_matrix.toml").variants_for(arch)]
    variants = args.variants.split(",") if args.variants else known
    unknown = sorted(set(variants) - set(known))
    if unknown:
        print(f"bench_vllm_build: --variants: {', '.join(unknown)} not in {arch}'s variants ({', '.join(known)})",
              file=sys.stderr)
        return 2
    every = configurations(args.full)
    configs = args.configs.split(",") if args.configs else every
    unknown = [key for key in configs if key not in every]
    if unknown or configs[0] != "cold":
        print(f"bench_vllm_build: --configs: {', '.join(unknown) or 'cold must come first'} "
              f"(known: {', '.join(every)})", file=sys.stderr)
        return 2
    orphans = [key for key in configs if key.startswith("warm")
               and key.replace("warm", "cold", 1) not in configs[:configs.index(key)]]
    if orphans:
        print(f"bench_vllm_build: --configs: {', '.join(orphans)} needs its cold build before it", file=sys.stderr)
        return 2
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-vllm-build-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"vllm-cpu build, {'full' if args.full else 'default'} source set, {arch}, {args.jobs} jobs; work dir {root}")
    rows = {variant: measure(root, variant, configs, args.full, args.jobs) for variant in variants}
    print(table(rows, configs))
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
