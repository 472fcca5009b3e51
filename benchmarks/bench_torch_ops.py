"""The torch example's ops (examples/torch_ops) against torch eager, side by side.

    python benchmarks/bench_torch_ops.py [--wheel PATH] [--tcmalloc] [--json] [--rounds N] [--round-ms MS]

Builds the example's native wheel with `cpubuild wheel` (or takes `--wheel`),
unpacks it into a temporary directory (torch comes from this Python, the
wheel's dependency pin is this torch's minor) and runs one subprocess per
variant this CPU supports, forced with TORCH_OPS_ISA (a process loads one
variant). Each subprocess times, interleaved in rounds (ours, eager, ... again;
median of the rounds, so machine noise hits every candidate alike):

* rms_norm, bf16 512x4096: torch.ops.torch_ops.rms_norm into a preallocated
  `out`; the torch_ops.rms_norm wrapper (allocates its result); torch eager
  in float (`xf * rsqrt(mean(xf^2) + eps) * w.float()`, cast back to bf16);
  torch.nn.functional.rms_norm;
* silu_and_mul, bf16 512x(2*4096): torch.ops.torch_ops.silu_and_mul into
  `out` vs torch eager `F.silu(x[:, :d]) * x[:, d:]`;

and prints ms per call and eager / ours. Target: rms_norm >= 3x torch eager on
the best variant (as cpukern's). Eager allocates on every call and this VM's
page faults are costly: with glibc malloc torch pays them, with tcmalloc
(`--tcmalloc` re-runs every subprocess with LD_PRELOAD=libtcmalloc_minimal.so.4,
installing Debian's libtcmalloc-minimal4 if absent) it mostly does not; the
output names the allocator each subprocess really had mapped.
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
EXAMPLE = REPO / "examples" / "torch_ops"
TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
TARGET = 3.0  # rms_norm: torch eager / ours on the best variant
TOKENS, HIDDEN, EPS = 512, 4096, 1e-6
# candidate -> the one it is compared against
BASELINES = {
    "rms_norm": ("torch.ops rms_norm(out)", ["wrapper rms_norm (allocates)", "eager (float)", "F.rms_norm"]),
    "silu_and_mul": ("torch.ops silu_and_mul(out)", ["eager F.silu * up"]),
}


# ------------------------------------------------------------------ worker (one variant per process)


def allocator_mapped() -> str:
    """The malloc this process really runs: tcmalloc when its library is mapped."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "tcmalloc" in line:
                return f"tcmalloc ({line.split()[-1]})"
    return "glibc malloc"


def interleaved(candidates: dict[str, Callable[[], Any]], rounds: int, budget_s: float) -> dict[str, dict[str, float]]:
    """Round robin: in every round each candidate runs about budget_s (after a
    warm-up call); per candidate the median and the best of its rounds' ms per call."""
    per_round: dict[str, list[float]] = {name: [] for name in candidates}
    clock = time.perf_counter
    for fn in candidates.values():  # first touches, lazy initialisation
        fn()
    for _ in range(rounds):
        for name, fn in candidates.items():
            fn()
            calls, start = 0, clock()
            while True:
                fn()
                calls += 1
                elapsed = clock() - start
                if calls >= 3 and elapsed >= budget_s:
                    break
            per_round[name].append(elapsed / calls * 1e3)
    return {name: {"ms": statistics.median(ms), "best_ms": min(ms)} for name, ms in per_round.items()}


def worker(rounds: int, round_ms: float) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    import torch_ops

    torch.manual_seed(0)
    bf16 = torch.bfloat16
    ops = torch.ops.torch_ops

    x = torch.randn(TOKENS, HIDDEN).to(bf16)
    w = torch.rand(HIDDEN).add(0.5).to(bf16)
    out = torch.empty_like(x)

    def eager_rms_norm() -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(bf16)

    ops.rms_norm(out, x, w, EPS)
    torch.testing.assert_close(out, eager_rms_norm(), rtol=1.6e-2, atol=1e-2)
    rms = interleaved({
        "torch.ops rms_norm(out)": lambda: ops.rms_norm(out, x, w, EPS),
        "wrapper rms_norm (allocates)": lambda: torch_ops.rms_norm(x, w, EPS),
        "eager (float)": eager_rms_norm,
        "F.rms_norm": lambda: F.rms_norm(x, (HIDDEN,), w, EPS),
    }, rounds, round_ms / 1000)

    gate_up = torch.randn(TOKENS, 2 * HIDDEN).to(bf16)
    act = torch.empty(TOKENS, HIDDEN, dtype=bf16)
    d = HIDDEN

    def eager_silu_and_mul() -> torch.Tensor:
        return F.silu(gate_up[:, :d]) * gate_up[:, d:]

    ops.silu_and_mul(act, gate_up)
    torch.testing.assert_close(act, eager_silu_and_mul(), rtol=1.6e-2, atol=1e-2)
    silu = interleaved({
        "torch.ops silu_and_mul(out)": lambda: ops.silu_and_mul(act, gate_up),
        "eager F.silu * up": eager_silu_and_mul,
    }, rounds, round_ms / 1000)

    return {
        "variant": torch_ops.selected_isa(),
        "allocator": allocator_mapped(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "ops": {
            "rms_norm": {"shape": [TOKENS, HIDDEN], "dtype": "bf16", "candidates": rms},
            "silu_and_mul": {"shape": [TOKENS, 2 * HIDDEN], "dtype": "bf16", "candidates": silu},
        },
    }


# ------------------------------------------------------------------ driver


def build_wheel(out: Path) -> Path:
    cmd = [sys.executable, "-m", "cpubuild", "wheel", "--json", "-q", "--project", str(EXAMPLE), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "tools"), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"building the example's wheel failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return Path(json.loads(proc.stdout)["wheel"]["path"])


def ensure_tcmalloc() -> Path:
    if not TCMALLOC.exists():
        print(f"# {TCMALLOC} missing: apt-get install -y libtcmalloc-minimal4", file=sys.stderr, flush=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "libtcmalloc-minimal4"], check=False,
                       stdout=subprocess.DEVNULL)
        if not TCMALLOC.exists():
            sys.exit(f"{TCMALLOC} is still missing after apt-get install libtcmalloc-minimal4")
    return TCMALLOC


def run_python(site: Path, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OPS_") and k != "LD_PRELOAD"}
    full = {**clean, **env, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full, cwd=site)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args)} ({env}) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


def print_table(run: dict[str, Any]) -> None:
    print(f"\n## {run['variant']}  (allocator: {run['allocator']}; torch {run['torch']}, {run['threads']} threads)")
    print(f"{'op':<13} {'candidate':<30} {'ms/call':>9} {'best ms':>9}  {'eager/ours':>10}")
    for op, (ours, others) in BASELINES.items():
        cands = run["ops"][op]["candidates"]
        base = cands[ours]["ms"]
        print(f"{op:<13} {ours:<30} {base:9.3f} {cands[ours]['best_ms']:9.3f}  {'':>10}")
        for name in others:
            c = cands[name]
            print(f"{'':<13} {name:<30} {c['ms']:9.3f} {c['best_ms']:9.3f}  {c['ms'] / base:9.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, help="the example's wheel (default: build it now)")
    parser.add_argument("--tcmalloc", action="store_true",
                        help="also run every variant with LD_PRELOAD=libtcmalloc_minimal.so.4 (print both)")
    parser.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (median kept)")
    parser.add_argument("--round-ms", type=float, default=40.0, help="time per candidate per round")
    parser.add_argument("--variants", help="comma-separated (default: every variant this CPU supports)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args.rounds, args.round_ms)))
        return 0

    work = Path(tempfile.mkdtemp(prefix="bench-torch-ops-"))
    try:
        wheel = args.wheel.resolve() if args.wheel else build_wheel(work / "wheelhouse")
        site = work / "site"
        sys.path.insert(0, str(REPO / "tools"))
        from cpubuild.unpack import unpack_wheel

        unpack_wheel(wheel, site)
        shutil.copy2(Path(__file__), site / "_bench_torch_ops.py")
        probe = ("import json, torch_ops; "
                 "print(json.dumps({'supported': torch_ops.supported_variants(), 'best': torch_ops.selected_isa()}))")
        found = run_python(site, ["-c", probe], {})
        variants = args.variants.split(",") if args.variants else found["supported"]
        allocators: list[tuple[str, dict[str, str]]] = [("glibc", {})]
        if args.tcmalloc:
            allocators.append(("tcmalloc", {"LD_PRELOAD": str(ensure_tcmalloc())}))
        note = f"# {wheel.name}; CPU supports {', '.join(found['supported'])} (best: {found['best']})"
        print(note, file=sys.stderr if args.json else sys.stdout, flush=True)

        runs: list[dict[str, Any]] = []
        for alloc, env in allocators:
            for variant in variants:
                run = run_python(site, ["_bench_torch_ops.py", "--worker", "--rounds", str(args.rounds),
                                        "--round-ms", str(args.round_ms)], {**env, "TORCH_OPS_ISA": variant})
                if run["variant"] != variant:
                    sys.exit(f"TORCH_OPS_ISA={variant} loaded {run['variant']}")
                run["preload"] = alloc
                runs.append(run)
                if not args.json:
                    print_table(run)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    verdicts = []
    for run in runs:
        if run["variant"] != found["best"]:
            continue
        cands = run["ops"]["rms_norm"]["candidates"]
        ratio = cands["eager (float)"]["ms"] / cands["torch.ops rms_norm(out)"]["ms"]
        verdicts.append({"allocator": run["allocator"], "variant": run["variant"], "ratio": round(ratio, 2),
                         "target": TARGET, "met": ratio >= TARGET})
    if args.json:
        print(json.dumps({"wheel": wheel.name, "best": found["best"], "runs": runs, "verdicts": verdicts}, indent=1))
    else:
        print(f"\n# target: rms_norm bf16 {TOKENS}x{HIDDEN} through torch.ops >= {TARGET:g}x torch eager "
              f"on the best variant ({found['best']})")
        for v in verdicts:
            print(f"  {v['allocator']}: {v['ratio']:.2f}x  ({'met' if v['met'] else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
