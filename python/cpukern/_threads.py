"""Thread binding of cpukern's worker pool, like vLLM's CPU backend.

    CPUKERN_OMP_THREADS_BIND=auto | nobind | <cpu list>[|<cpu list>...]
    CPUKERN_NUM_OF_RESERVED_CPU=<n>        (auto: CPUs left out per rank)
    CPUKERN_LOCAL_RANK=<r> (or LOCAL_RANK)  which `|`-separated list / NUMA node

- unset: no pinning; CPUKERN_NUM_THREADS or one thread per CPU this process
  may use.
- `nobind`: the same, said explicitly.
- `auto`: the CPUs this process may use on NUMA node (rank mod nodes), one
  logical CPU per physical core, minus the last CPUKERN_NUM_OF_RESERVED_CPU
  of them (for the framework's own threads); one pinned worker per CPU.
- a CPU list such as `0-3,8` (or one list per rank: `0-31|32-63`): one
  pinned worker per listed CPU.
CPUKERN_NUM_THREADS, when a positive integer, overrides the worker count of a
binding (workers are pinned round robin); other values are ignored.

The plan is computed here by a pure function (`plan_threads`), handed to the
variant library when it is loaded and applied by the library when it starts
its pool (first use). The calling thread is never pinned: with a binding it
hands out the work and waits. Standard library only (`python -m cpukern`).
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_BIND = "CPUKERN_OMP_THREADS_BIND"
ENV_RESERVED = "CPUKERN_NUM_OF_RESERVED_CPU"
ENV_RANK = ("CPUKERN_LOCAL_RANK", "LOCAL_RANK")
ENV_THREADS = "CPUKERN_NUM_THREADS"
MAX_CPU = 1024  # the C side pins with a static cpu_set_t

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")



class ThreadBindError(ValueError):
    """A binding environment variable has a value cpukern cannot use."""


@dataclass(frozen=True, kw_only=True)
class Topology:
    """NUMA nodes and physical cores of the machine (from /sys on Linux)."""

    nodes: Mapping[int, frozenset[int]] = field(default_factory=dict)  # node -> CPUs
    core_of: Mapping[int, int] = field(default_factory=dict)  # CPU -> first CPU of its core


@dataclass(frozen=True, kw_only=True)
class ThreadPlan:
    mode: str  # "default", "nobind", "auto" or "list"
    threads: int | None  # worker count; None: the library's default
    cpus: tuple[int, ...]  # pin targets, round robin; () = not pinned
    rank: int = 0
    reserved: int = 0
    node: int | None = None

    def describe(self, default_threads: int | None = None) -> str:
        threads = self.threads if self.threads is not None else default_threads
        count = "the default number of threads" if threads is None else f"{threads} thread{'' if threads == 1 else 's'}"
        if not self.cpus:
            return f"{self.mode}: {count}, not pinned"
        where = f" of NUMA node {self.node}" if self.node is not None else ""
        return f"{self.mode}: {count} pinned to CPUs {format_cpu_list(self.cpus)}{where} (local rank {self.rank})"


def parse_cpu_list(text: str, *, what: str = ENV_BIND) -> tuple[int, ...]:
    """'0-3,8' -> (0, 1, 2, 3, 8), in the order given; no duplicates."""
    cpus: list[int] = []
    if not text.strip():
        raise ThreadBindError(f"{what}: empty CPU list")
    for part in text.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise ThreadBindError(f"{what}: {part.strip()!r} is not a CPU number or range like 0-3 (in {text!r})")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ThreadBindError(f"{what}: range {part.strip()!r} runs backwards")
        if hi >= MAX_CPU:
            raise ThreadBindError(f"{what}: CPU {hi} is beyond the supported {MAX_CPU - 1}")
        for cpu in range(lo, hi + 1):
            if cpu in cpus:
                raise ThreadBindError(f"{what}: CPU {cpu} is listed twice (in {text!r})")
            cpus.append(cpu)
    return tuple(cpus)


def format_cpu_list(cpus: tuple[int, ...] | list[int] | frozenset[int]) -> str:
    """(0, 1, 2, 3, 8) -> '0-3,8' (sorted)."""
    out: list[str] = []
    values = sorted(cpus)
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(out)


def _count(env: Mapping[str, str], name: str, *, minimum: int) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    if not re.fullmatch(r"\d+", raw) or int(raw) < minimum:
        raise ThreadBindError(f"{name}: expected an integer >= {minimum}, got {raw!r}")
    return int(raw)


def _threads_override(env: Mapping[str, str]) -> int | None:
    """CPUKERN_NUM_THREADS; like the library, values that are not a positive
    integer are ignored (docs/dispatch.md)."""
    raw = env.get(ENV_THREADS, "").strip()
    return int(raw) if re.fullmatch(r"\d+", raw) and int(raw) > 0 else None


def plan_threads(env: Mapping[str, str], allowed: frozenset[int], topology: Topology) -> ThreadPlan:
    """The worker pool plan for an environment, the CPUs this process may
    use (sched_getaffinity) and the machine's topology. Pure."""
    spec = env.get(ENV_BIND, "").strip()
    reserved = _count(env, ENV_RESERVED, minimum=0) or 0
    threads = _threads_override(env)
    rank = 0
    for name in ENV_RANK:
        if env.get(name, "").strip():
            rank = _count(env, name, minimum=0) or 0
            break
    if not spec or spec == "nobind":
        return ThreadPlan(mode=spec or "default", threads=threads, cpus=(), rank=rank, reserved=reserved)
    if spec == "auto":
        return _auto(allowed, topology, rank=rank, reserved=reserved, threads=threads)
    lists = spec.split("|")
    if rank >= len(lists):
        raise ThreadBindError(
            f"{ENV_BIND}: local rank {rank} has no CPU list ({len(lists)} given, separated by '|': {spec!r})"
        )
    cpus = parse_cpu_list(lists[rank])
    outside = [c for c in cpus if c not in allowed]
    if outside:
        raise ThreadBindError(
            f"{ENV_BIND}: CPU {format_cpu_list(outside)} is not available to this process "
            f"(allowed: {format_cpu_list(allowed) or 'none'})"
        )
    return ThreadPlan(mode="list", threads=threads or len(cpus), cpus=cpus, rank=rank, reserved=reserved)


def _auto(allowed: frozenset[int], topology: Topology, *, rank: int, reserved: int, threads: int | None) -> ThreadPlan:
    nodes = {n: cpus & allowed for n, cpus in sorted(topology.nodes.items()) if cpus & allowed}
    if not nodes:
        nodes = {0: allowed}
    node = sorted(nodes)[rank % len(nodes)]
    seen_cores: set[int] = set()
    cpus: list[int] = []
    for cpu in sorted(nodes[node]):
        core = topology.core_of.get(cpu, cpu)
        if core not in seen_cores:  # one logical CPU per physical core
            seen_cores.add(core)
            cpus.append(cpu)
    if reserved >= len(cpus):
        raise ThreadBindError(
            f"{ENV_RESERVED}={reserved} leaves no CPU for the workers on NUMA node {node} "
            f"(cores there: {format_cpu_list(cpus) or 'none'})"
        )
    kept = tuple(cpus[: len(cpus) - reserved])
    return ThreadPlan(mode="auto", threads=threads or len(kept), cpus=kept, rank=rank, reserved=reserved, node=node)


# ---------------------------------------------------------------- the host
def _read_list(path: Path) -> frozenset[int]:
    try:
        return frozenset(parse_cpu_list(path.read_text().strip(), what=str(path)))
    except (OSError, ThreadBindError):
        return frozenset()


def read_topology(sys_root: Path = Path("/sys/devices/system")) -> Topology:
    nodes = {}
    for d in sorted(sys_root.glob("node/node[0-9]*")):
        cpus = _read_list(d / "cpulist")
        if cpus:
            nodes[int(d.name[4:])] = cpus
    core_of = {}
    for d in sys_root.glob("cpu/cpu[0-9]*"):
        siblings = _read_list(d / "topology" / "thread_siblings_list")
        if siblings:
            core_of[int(d.name[3:])] = min(siblings)
    return Topology(nodes=nodes, core_of=core_of)


def allowed_cpus() -> frozenset[int]:
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))


def current_plan() -> ThreadPlan:
    return plan_threads(os.environ, allowed_cpus(), read_topology())


def configure(lib: Any) -> ThreadPlan:
    """Hands the plan to a freshly loaded variant library (before its pool
    starts). Raises ThreadBindError for unusable environment values."""
    plan = current_plan()
    fn = lib.cpukern_set_thread_plan
    fn.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.c_int32]
    fn.restype = ctypes.c_int32
    cpus = (ctypes.c_int32 * max(len(plan.cpus), 1))(*plan.cpus)
    status = fn(plan.threads or 0, cpus, len(plan.cpus))  # also tells the library which process loaded it
    from ._process import IMPORTED_IN  # here: the unit tests load this file on its own

    if os.getpid() != IMPORTED_IN:  # a forked child: an OpenMP runtime the parent used hangs here
        lib.cpukern_use_own_pool()
    if plan.threads is None and not plan.cpus:
        return plan  # the library's defaults
    if status == 5:
        raise ThreadBindError(f"{ENV_BIND}: pinning threads to CPUs is not supported on this OS; use nobind")
    if status:
        raise ThreadBindError(f"{ENV_BIND}: the library rejected the plan {plan.describe()!r} (status {status})")
    return plan


def worker_tids(lib: Any) -> list[int]:
    """OS thread ids of the library's pool workers started so far."""
    fn = lib.cpukern_worker_tids
    fn.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]
    fn.restype = ctypes.c_int32
    buf = (ctypes.c_int64 * 1024)()
    n = fn(buf, 1024)
    return [int(buf[i]) for i in range(n)]


def report() -> dict[str, Any]:
    """The binding as `python -m cpukern` shows it."""
    env = {k: os.environ[k] for k in (ENV_BIND, ENV_RESERVED, ENV_THREADS, *ENV_RANK) if k in os.environ}
    allowed = allowed_cpus()
    result: dict[str, Any] = {"env": env, "allowed_cpus": format_cpu_list(allowed), "error": None}
    try:
        plan = current_plan()
    except ThreadBindError as exc:
        result["error"] = str(exc)
        return result
    default = _threads_override(os.environ) or len(allowed)
    result.update(
        mode=plan.mode,
        threads=plan.threads if plan.threads is not None else default,
        pinned=bool(plan.cpus),
        cpus=list(plan.cpus),
        rank=plan.rank,
        reserved=plan.reserved,
        numa_node=plan.node,
        summary=plan.describe(default),
    )
    return result
