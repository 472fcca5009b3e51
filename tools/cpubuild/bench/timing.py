"""Timing shared by `cpubuild bench` and benchmarks/bench_ops.py: round robin
over the candidates of one case (so machine noise hits them alike), best round
kept; slow candidates (torch's bf16 matmul without AVX-512 BF16 takes tens of
seconds) are timed once instead of for a whole budget per round."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

ENV_PRELOADED = "CPUBUILD_BENCH_PRELOADED"
ENV_PROBE = "CPUBUILD_BENCH_PROBE"  # set by `cpubuild bench`: its bandwidth probe, for side_bandwidth
SIDE_MS = 20.0  # each of the probe's three rounds of each figure
BANDWIDTH_FIGURES = ("read_Bps", "copy_Bps", "update_Bps")  # what the probe measures, bytes/s
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


@dataclass(frozen=True, kw_only=True)
class InContext:
    """A candidate whose calls run inside `context`, entered once per round
    rather than per call: a variant forced the way a host that selects it
    runs it (a per-call `use_variant` costs ~5 us after a kernel that
    streamed the caches, 4 % of a 16 MiB GEMV)."""

    fn: Callable[[], Any]
    context: Callable[[], AbstractContextManager[Any]]

    def __call__(self) -> Any:
        with self.context():
            return self.fn()


def for_round(candidate: Callable[[], Any]) -> tuple[Callable[[], Any], AbstractContextManager[Any]]:
    """(the call to time, the context to time a round of it in): an
    InContext's own, else no context."""
    if isinstance(candidate, InContext):
        return candidate.fn, candidate.context()
    return candidate, nullcontext()


def time_round(fn: Callable[[], Any], budget_s: float) -> float:
    """Average microseconds per call over one round of about budget_s
    (at least 3 calls), after a warm-up of a quarter of the budget (at least
    one call); a single call for slow fns. The warm-up lets the previous
    candidate's after-effects pass - its data in the caches, torch's OpenMP
    threads still spinning on a 2-vCPU VM: a 32 MiB GEMV's first 30 calls
    after torch or another variant ran 3-10 % slower than its steady state.
    An InContext candidate's round runs inside its context."""
    call, context = for_round(fn)
    with context:
        return _time_calls(call, budget_s)


def _time_calls(fn: Callable[[], Any], budget_s: float) -> float:
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


def measure(candidates: dict[str, Callable[[], Any]], rounds: int, budget_s: float,
            each_round: Callable[[], Any] | None = None) -> dict[str, float]:
    """Round robin over the candidates; the best round of each (least disturbed).
    `each_round` runs before the first round and after every round (side_bandwidth:
    each round's best moment lies between two of its measurements)."""
    best = {name: float("inf") for name in candidates}
    if each_round is not None:
        each_round()
    for r in range(rounds):
        for name, fn in candidates.items():
            if r and best[name] >= SLOW_S * 1e6:
                continue
            best[name] = min(best[name], time_round(fn, budget_s))
        if each_round is not None:
            each_round()
    return best


def probe_rows(cmd: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The JSON lines a roofline probe (peak.c) prints. Raises RuntimeError with its last
    error line when it fails, ValueError on other output, OSError or TimeoutExpired."""
    proc = subprocess.run(list(cmd), env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1])
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def bandwidth_rows(probe: str, threads: int, ms: float, sizes: Sequence[int], timeout: float) -> list[dict[str, float]]:
    """The bandwidth probe (peak.c, `bandwidth` mode) over each of `sizes` bytes: one row
    each, {"bytes": the size it measured (rounded to whole KiB per thread), and
    BANDWIDTH_FIGURES in bytes/s (0.0 for a figure the probe did not print)}. Run
    without LD_PRELOAD, as `cpubuild bench` runs it for its ladder. Raises
    RuntimeError (the probe failed), ValueError / KeyError (not its output),
    OSError or subprocess.TimeoutExpired."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    rows = probe_rows([probe, "bandwidth", str(threads), str(ms), *(str(size) for size in sizes)], timeout, env=env)
    return [{"bytes": float(row["bytes"]), **{key: float(row.get(key, 0.0)) for key in BANDWIDTH_FIGURES}}
            for row in rows]


def side_bandwidth(working_set: int, threads: int) -> dict[str, float] | None:
    """The read, copy and in-place update bandwidth (bytes/s) of `threads` threads over
    `working_set` bytes, measured now by the probe `cpubuild bench` built for
    its roofline (named in CPUBUILD_BENCH_PROBE): a benchmark calls it between
    the rounds of a record whose bytes live in DRAM or a shared L3, whose
    bandwidth swings with the neighbours (2x within minutes on a 2-vCPU VM),
    so that the record is bounded by what the memory gave beside it, not by
    a ladder measured minutes apart. None outside `cpubuild bench`, or when
    the probe fails."""
    probe = os.environ.get(ENV_PROBE)
    if not probe:
        return None
    try:
        row = bandwidth_rows(probe, threads, SIDE_MS, [working_set], timeout=120)[-1]
    except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError, IndexError):
        return None
    return {key: row[key] for key in BANDWIDTH_FIGURES}


def best_bandwidth(figures: Sequence[dict[str, float] | None]) -> dict[str, float] | None:
    """Each figure's best over the rounds' side_bandwidth measurements (as each candidate keeps its best round)."""
    got = [f for f in figures if f]
    return {key: max(f[key] for f in got) for key in BANDWIDTH_FIGURES} if got else None


def measure_beside_bandwidth(candidates: dict[str, Callable[[], Any]], rounds: int, budget_s: float, threads: int,
                             *, working_set: int | None) -> tuple[dict[str, float], dict[str, float] | None]:
    """measure(), with side_bandwidth at `working_set` before the first round and after every
    round, each figure's best kept (working_set None: no bandwidth)."""
    figures: list[dict[str, float] | None] = []
    def beside() -> None:
        figures.append(side_bandwidth(working_set or 0, threads))

    return measure(candidates, rounds, budget_s, each_round=beside if working_set else None), best_bandwidth(figures)
