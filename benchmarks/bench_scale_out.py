"""Builds spread over runners (docs/scale-out.md), measured side by side in one run.

* one runner: `cpubuild wheel` of every variant (fresh build directory, empty ccache)
Every build is of HEAD, in fresh clones (commit first).

* N simulated runners: one partial per variant group (`--partial --isa GROUP`), built here one
  after another, each with a fresh build directory and an empty ccache, then
  `cpubuild merge`: the critical path is the slowest partial + the merge
* a shared S3 cache (moto's S3 server on loopback, as tools/tests/integration/test_shared_cache.py):
  a cold build from one fresh clone, then a warm one from a second clone in
  another directory, both without any local compiler cache

The groups are --groups, else the project's `[tool.cpubuild.ci] variant-groups`
for the arch, else one group per variant above the baseline or floor (a floor no
group names is built by every group, as in the rendered workflow). Targets (issue 24): critical path <=
single / N + 10 %; warm shared-cache build >= 5x faster than cold. Wall and CPU
seconds (the process tree's user + system), median of --repeat runs; the merged
wheel must equal the single build byte for byte.

    python benchmarks/bench_scale_out.py [--project DIR] [--arch ARCH] [--repeat N] [--no-shared-cache] [--no-fan-out] [--json]
    python benchmarks/bench_scale_out.py --project examples/torch_ops --repeat 1
    python benchmarks/bench_scale_out.py --project examples/vllm-cpu --repeat 1 --no-shared-cache \
        --groups 'avx2,avx512,avx512vnni|avx512bf16|amx' --wheel-args '-C cmake.define.VLLM_CPU_OPS_FULL=ON --no-repair'
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from cpubuild.project import load_project  # noqa: E402
from cpubuild.workflow.groups import fan_out  # noqa: E402

CLI = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())"]
BUCKET = "cpubuild-bench"
S3_SERVER = """
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def cpubuild(cwd: Path, env: dict[str, str], *args: str) -> tuple[float, float, dict[str, Any]]:
    """(wall seconds, CPU seconds of the process tree, the --json summary)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CCACHE_", "SCCACHE_"))}
    environ.update(env, PYTHONPATH=str(REPO / "tools"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run([*CLI, *args, "--json"], capture_output=True, text=True, cwd=cwd, env=environ, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"cpubuild {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(proc.stdout)


WHEEL_ARGS: list[str] = []  # --wheel-args: for every build (config settings, --no-repair)


def wheel(project: Path, tmp: Path, name: str, *args: str, env: dict[str, str] | None = None) -> tuple[float, float, dict[str, Any]]:
    """A cold `cpubuild wheel`: its own build directory and an empty private ccache (or the given env)."""
    cold = {"CCACHE_DIR": str(tmp / f"ccache-{name}")} if env is None else env
    return cpubuild(project, cold, "wheel", "-q", "--out", str(tmp / f"out-{name}"), "--build-root", str(tmp / f"build-{name}"),
                    *WHEEL_ARGS, *args)


def one_round(project: Path, arch: str, groups: list[list[str]], tmp: Path) -> dict[str, Any]:
    single_wall, single_cpu, single = wheel(project, tmp, "single", "--arch", arch, "--isa", "all")
    partials = []
    for i, group in enumerate(groups, 1):
        wall, cpu, summary = wheel(project, tmp, f"partial{i}", "--arch", arch, "--partial", "--isa", ",".join(group))
        partials.append({"isa": ",".join(group), "wall_s": wall, "cpu_s": cpu, "wheel": summary["wheel"]["path"],
                         "compile_s": summary["stages"]["compile"]})
    merge_wall, merge_cpu, merged = cpubuild(project, {}, "merge", *(p["wheel"] for p in partials), "--out", str(tmp / "merged"))
    identical = Path(merged["wheel"]).read_bytes() == Path(single["wheel"]["path"]).read_bytes()
    slowest = max(partials, key=lambda p: p["wall_s"])
    return {"single_wall_s": single_wall, "single_cpu_s": single_cpu, "single_compile_s": single["stages"]["compile"],
            "partials": partials, "merge_wall_s": merge_wall, "critical_compile_s": max(p["compile_s"] for p in partials),
            "merge_cpu_s": merge_cpu, "critical_wall_s": slowest["wall_s"] + merge_wall,
            "critical_cpu_s": max(p["cpu_s"] for p in partials) + merge_cpu, "merged_equals_single": identical}


@contextmanager
def s3_server() -> Iterator[dict[str, str]]:
    import boto3  # moto[server] and boto3: scripts/setup.sh

    proc = subprocess.Popen([sys.executable, "-c", S3_SERVER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    try:
        port = int(proc.stdout.readline())
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
               "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "CCACHE_DISABLE": "1"}
        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="bench", aws_secret_access_key="bench",
                     region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield env
    finally:
        proc.kill()
        proc.wait()


def clone_head(head: str, where: Path) -> Path:
    """A fresh clone of the commit under test: every build names its wheel the same way, whatever the work tree does."""
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(REPO), str(where)], check=True)
    subprocess.run(["git", "-C", str(where), "checkout", "-q", head], check=True)
    return where


def shared_cache_round(inside: Path, head: str, arch: str, tmp: Path, env: dict[str, str], round_no: int) -> dict[str, Any]:
    """Two fresh clones of HEAD in different directories sharing one S3 prefix: cold, then warm."""
    url = f"s3://{BUCKET}/round{round_no}"
    results = {}
    for name in ("cold", "warm"):
        clone = clone_head(head, tmp / name / "checkout" if name == "warm" else tmp / name)
        wall, cpu, summary = wheel(clone / inside, tmp, name, "--arch", arch, "--isa", "all", "--cache", url, env=env)
        results[name] = {"wall_s": wall, "cpu_s": cpu, "cache": summary["shared_cache"], "sha256": summary["wheel"]["sha256"]}
    results["identical"] = results["cold"]["sha256"] == results["warm"]["sha256"]
    return results


def median(rounds: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=REPO)
    parser.add_argument("--arch", default="x86_64")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-shared-cache", action="store_true", help="Skip the S3 cold/warm part.")
    parser.add_argument("--no-fan-out", action="store_true", help="Skip the one runner vs partials part.")
    parser.add_argument("--groups", help="Variant groups, e.g. 'avx2,avx512|avx512bf16,amx' (default: the project's "
                                         "[tool.cpubuild.ci] variant-groups, else one group per variant)")
    parser.add_argument("--wheel-args", default="", help="More `cpubuild wheel` arguments for every build, one string "
                                                          "(e.g. '-C cmake.define.VLLM_CPU_OPS_FULL=ON --no-repair')")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    WHEEL_ARGS.extend(shlex.split(args.wheel_args))
    project = load_project(args.project.resolve())
    matrix = project.load_matrix()
    records = project.config.settings.ci.variant_groups
    if args.groups or not any(r["arch"] == args.arch for r in records):
        named = args.groups.split("|") if args.groups else [v.name for v in matrix.variants_for(args.arch) if not v.is_baseline]
        records = tuple({"arch": args.arch, "isa": group} for group in named)
    if len(records) < 2:
        sys.exit(f"{args.arch}: fewer than two groups, nothing to fan out")
    # as `cpubuild ci` renders them: a floor is built by the group naming it, else by every group
    groups = fan_out(matrix, records, list(matrix.arches))[args.arch]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    inside = project.root.relative_to(REPO)
    rounds, shared = [], []
    with tempfile.TemporaryDirectory(prefix="bench-scale-out-") as tmp:
        source = clone_head(head, Path(tmp) / "source") / inside
        for r in range(0 if args.no_fan_out else args.repeat):
            print(f"round {r + 1}/{args.repeat}: one runner, then {len(groups)} partials + merge", file=sys.stderr)
            rounds.append(one_round(source, args.arch, groups, Path(tmp) / f"r{r}"))
        if not args.no_shared_cache:
            with s3_server() as env:
                for r in range(args.repeat):
                    print(f"round {r + 1}/{args.repeat}: shared S3 cache, cold clone then warm clone", file=sys.stderr)
                    shared.append(shared_cache_round(inside, head, args.arch, Path(tmp) / f"s{r}", env, r))
    result: dict[str, Any] = {"project": project.config.dist_name, "arch": args.arch, "groups": [",".join(g) for g in groups],
                              "repeat": args.repeat, "wheel_args": WHEEL_ARGS}
    if rounds:
        result.update(fan_out_result(rounds, len(groups)))
    if shared:
        cold = statistics.median(s["cold"]["wall_s"] for s in shared)
        warm = statistics.median(s["warm"]["wall_s"] for s in shared)
        result.update(cold_wall_s=cold, warm_wall_s=warm, warm_speedup=cold / warm, target_warm_speedup=5.0,
                      warm_cache=shared[-1]["warm"]["cache"], shared_identical=all(s["identical"] for s in shared),
                      warm_speedup_per_round=[s["cold"]["wall_s"] / s["warm"]["wall_s"] for s in shared])
    if args.json:
        print(json.dumps(result, indent=1))
        return
    if rounds:
        print_fan_out(result, args.arch, args.repeat)
    if shared:
        print(f"  shared S3 cache: cold {result['cold_wall_s']:.1f} s, warm {result['warm_wall_s']:.1f} s -> "
              f"{result['warm_speedup']:.1f}x (target >= 5x); warm hits {result['warm_cache']['hits']}/"
              f"{result['warm_cache']['compile_requests']}; same wheel: {result['shared_identical']}")


def fan_out_result(rounds: list[dict[str, Any]], n: int) -> dict[str, Any]:
    single, critical = median(rounds, "single_wall_s"), median(rounds, "critical_wall_s")
    return {
        "single_wall_s": single, "critical_wall_s": critical, "single_cpu_s": median(rounds, "single_cpu_s"),
        "critical_cpu_s": median(rounds, "critical_cpu_s"), "merge_wall_s": median(rounds, "merge_wall_s"),
        "partial_wall_s": [statistics.median(r["partials"][i]["wall_s"] for r in rounds) for i in range(n)],
        "single_compile_s": median(rounds, "single_compile_s"), "critical_compile_s": median(rounds, "critical_compile_s"),
        "critical_over_single": critical / single, "target_critical_over_single": 1 / n + 0.10,
        "merged_equals_single": all(r["merged_equals_single"] for r in rounds),
        "critical_over_single_per_round": [r["critical_wall_s"] / r["single_wall_s"] for r in rounds],
    }


def print_fan_out(result: dict[str, Any], arch: str, repeat: int) -> None:
    single, critical, n = result["single_wall_s"], result["critical_wall_s"], len(result["groups"])
    print(f"{result['project']} {arch}: {n} groups ({' | '.join(result['groups'])}), median of {repeat}")
    print(f"  one runner, all variants      {single:7.1f} s wall  {result['single_cpu_s']:7.1f} s CPU")
    for g, seconds in zip(result["groups"], result["partial_wall_s"], strict=True):
        print(f"  partial {g:22}{seconds:7.1f} s wall")
    print(f"  merge                         {result['merge_wall_s']:7.1f} s wall")
    print(f"  critical path (slowest + merge) {critical:5.1f} s wall  {result['critical_cpu_s']:7.1f} s CPU")
    print(f"  critical / single = {critical / single:.2f} (target <= 1/{n} + 10 % = {1 / n + 0.10:.2f}); "
          f"merged == single: {result['merged_equals_single']}")
    # what fan-out can divide is the compile stage; the rest (configure, repair, audit, start-up) every runner pays
    print(f"  compile stage only: slowest partial {result['critical_compile_s']:.1f} s vs one runner "
          f"{result['single_compile_s']:.1f} s = {result['critical_compile_s'] / result['single_compile_s']:.2f}; "
          f"fixed cost per build {single - result['single_compile_s']:.1f} s")


if __name__ == "__main__":
    main()
