"""Timing shared by `cpubuild bench` and benchmarks/bench_ops.py: round robin
over the candidates of one case (so machine noise hits them alike), best round
kept; slow candidates (torch's bf16 matmul without AVX-512 BF16 takes tens of
seconds) are timed once instead of for a whole budget per round."""

from __future__ import annotations

import ctypes.util
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

ENV_PRELOADED = "CPUBUILD_BENCH_PRELOADED"
SLOW_S = 1.0  # a call at least this long is timed once, in the first round only


def tcmalloc_library() -> str | None:
    """The soname of tcmalloc (minimal) when installed, for LD_PRELOAD."""
    return ctypes.util.find_library("tcmalloc_minimal") or ctypes.util.find_library("tcmalloc")


def preload_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: os.environ) with tcmalloc in LD_PRELOAD when installed:
    this VM's page faults are costly and torch allocates per call."""
    env = dict(os.environ if env is None else env)
    lib = tcmalloc_library()
    if lib and "tcmalloc" not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = ":".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    env[ENV_PRELOADED] = "1"
    return env


def reexec_with_tcmalloc(argv: Sequence[str] | None = None) -> None:
    """Re-executes this script with tcmalloc preloaded (once)."""
    if os.environ.get(ENV_PRELOADED) or not tcmalloc_library():
        return
    args = [sys.executable, *(sys.argv if argv is None else argv)]
    os.execve(sys.executable, args, preload_env())


def allocator() -> str:
    preload = os.environ.get("LD_PRELOAD", "")
    if "tcmalloc" in preload:
        return f"tcmalloc ({next(p for p in preload.split(':') if 'tcmalloc' in p)})"
    return "glibc malloc (tcmalloc not installed)"


WARM_UP = 0.25  # of a round's budget, before its timing starts


def time_round(fn: Callable[[], Any], budget_s: float) -> float:
    """Average microseconds per call over one round of about budget_s
    (at least 3 calls), after a warm-up of a quarter of the budget (at least
    one call); a single call for slow fns. The warm-up lets the previous
    candidate's after-effects pass - its data in the caches, torch's OpenMP
    threads still spinning on a 2-vCPU VM: a 32 MiB GEMV's first 30 calls
    after torch or another variant ran 3-10 % slower than its steady state."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    if first >= SLOW_S:
        return first * 1e6
    while time.perf_counter() - start < budget_s * WARM_UP:
        fn()
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s and n >= 3:
            return elapsed / n * 1e6


def measure(candidates: dict[str, Callable[[], Any]], rounds: int, budget_s: float) -> dict[str, float]:
    """Round robin over the candidates; the best round of each (least disturbed)."""
    best = {name: float("inf") for name in candidates}
    for r in range(rounds):
        for name, fn in candidates.items():
            if r and best[name] >= SLOW_S * 1e6:
                continue
            best[name] = min(best[name], time_round(fn, budget_s))
    return best
