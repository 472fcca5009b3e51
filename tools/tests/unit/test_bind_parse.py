"""CPUKERN_OMP_THREADS_BIND / CPUKERN_NUM_OF_RESERVED_CPU parsing and the
thread plan (python/cpukern/_threads.py): pure functions on made-up machines
(two NUMA nodes with SMT siblings, restricted affinity masks, ranks)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

SOURCE = Path(__file__).resolve().parents[3] / "python" / "cpukern" / "_threads.py"


def _load() -> Any:
    name = "_cpukern_threads_under_test"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SOURCE)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


th = _load()

# 2 sockets x 4 cores x 2 hyperthreads: node 0 = CPUs 0-3 + siblings 8-11,
# node 1 = CPUs 4-7 + siblings 12-15 (Linux numbers siblings this way on Intel)
SMT_TWO_NODES = th.Topology(
    nodes={0: frozenset([0, 1, 2, 3, 8, 9, 10, 11]), 1: frozenset([4, 5, 6, 7, 12, 13, 14, 15])},
    core_of={**{c: c for c in range(8)}, **{c: c - 8 for c in range(8, 16)}},
)
ALL16 = frozenset(range(16))
FLAT4 = th.Topology(nodes={0: frozenset(range(4))}, core_of={c: c for c in range(4)})


def plan(env: dict[str, str], allowed: frozenset[int] = ALL16, topo: Any = SMT_TWO_NODES) -> Any:
    return th.plan_threads(env, allowed, topo)


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0", (0,)), ("0-3", (0, 1, 2, 3)), ("0-3,8", (0, 1, 2, 3, 8)), (" 8 , 0-1 ", (8, 0, 1)), ("5-5", (5,))],
)
def test_cpu_lists(text: str, cpus: tuple[int, ...]) -> None:
    assert th.parse_cpu_list(text) == cpus
    assert th.parse_cpu_list(th.format_cpu_list(cpus)) == tuple(sorted(cpus))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty CPU list"),
        ("a", "'a' is not a CPU number"),
        ("0-", "'0-' is not a CPU number"),
        ("-1", "'-1' is not a CPU number"),
        ("3-1", "runs backwards"),
        ("0,1,0", "CPU 0 is listed twice"),
        ("0-2,2", "CPU 2 is listed twice"),
        ("0;1", "'0;1' is not"),
        ("4096", "beyond the supported"),
    ],
)
def test_bad_cpu_lists(text: str, message: str) -> None:
    with pytest.raises(th.ThreadBindError, match=message) as info:
        th.parse_cpu_list(text)
    assert isinstance(info.value, ValueError)
    assert "CPUKERN_OMP_THREADS_BIND" in str(info.value)


def test_format_cpu_list() -> None:
    assert th.format_cpu_list((8, 0, 1, 2, 3, 10)) == "0-3,8,10"
    assert th.format_cpu_list(()) == ""


def test_unset_and_nobind_do_not_pin() -> None:
    for env, mode in (({}, "default"), ({"CPUKERN_OMP_THREADS_BIND": "nobind"}, "nobind")):
        p = plan(env)
        assert (p.mode, p.cpus, p.threads) == (mode, (), None)
    p = plan({"CPUKERN_OMP_THREADS_BIND": "nobind", "CPUKERN_NUM_THREADS": "3"})
    assert (p.cpus, p.threads) == ((), 3)


def test_explicit_list_pins_one_worker_per_cpu() -> None:
    p = plan({"CPUKERN_OMP_THREADS_BIND": "0-3,8"})
    assert (p.mode, p.cpus, p.threads) == ("list", (0, 1, 2, 3, 8), 5)


def test_lists_per_rank() -> None:
    env = {"CPUKERN_OMP_THREADS_BIND": "0-3|4-7"}
    assert plan(env).cpus == (0, 1, 2, 3)
    assert plan({**env, "LOCAL_RANK": "1"}).cpus == (4, 5, 6, 7)
    # CPUKERN_LOCAL_RANK wins over torchrun's LOCAL_RANK
    assert plan({**env, "LOCAL_RANK": "1", "CPUKERN_LOCAL_RANK": "0"}).cpus == (0, 1, 2, 3)
    with pytest.raises(th.ThreadBindError, match="local rank 2 has no CPU list"):
        plan({**env, "LOCAL_RANK": "2"})


def test_list_outside_the_affinity_mask_is_refused() -> None:
    with pytest.raises(th.ThreadBindError, match=r"CPU 4-5 is not available to this process \(allowed: 0-3\)"):
        plan({"CPUKERN_OMP_THREADS_BIND": "2-5"}, allowed=frozenset(range(4)), topo=FLAT4)


def test_num_threads_overrides_the_count() -> None:
    p = plan({"CPUKERN_OMP_THREADS_BIND": "0-1", "CPUKERN_NUM_THREADS": "4"})
    assert (p.cpus, p.threads) == ((0, 1), 4)
    for ignored in ("0", "-2", "many", ""):  # as the library does: not a positive integer -> unset
        assert plan({"CPUKERN_OMP_THREADS_BIND": "0-1", "CPUKERN_NUM_THREADS": ignored}).threads == 2
        assert plan({"CPUKERN_NUM_THREADS": ignored}).threads is None


def test_auto_one_cpu_per_core_of_the_rank_node() -> None:
    p = plan({"CPUKERN_OMP_THREADS_BIND": "auto"})
    assert (p.mode, p.node, p.cpus, p.threads) == ("auto", 0, (0, 1, 2, 3), 4)
    p = plan({"CPUKERN_OMP_THREADS_BIND": "auto", "LOCAL_RANK": "1"})
    assert (p.node, p.cpus) == (1, (4, 5, 6, 7))
    p = plan({"CPUKERN_OMP_THREADS_BIND": "auto", "LOCAL_RANK": "2"})  # ranks wrap around the nodes
    assert p.node == 0


def test_auto_reserves_cpus_and_respects_the_mask() -> None:
    p = plan({"CPUKERN_OMP_THREADS_BIND": "auto", "CPUKERN_NUM_OF_RESERVED_CPU": "1"})
    assert (p.cpus, p.reserved) == ((0, 1, 2), 1)
    # only hyperthread siblings allowed on node 0: they stand for their cores
    p = plan({"CPUKERN_OMP_THREADS_BIND": "auto"}, allowed=frozenset([9, 10, 4, 5]))
    assert (p.node, p.cpus) == (0, (9, 10))
    # a node without allowed CPUs is skipped
    p = plan({"CPUKERN_OMP_THREADS_BIND": "auto", "LOCAL_RANK": "1"}, allowed=frozenset([0, 1]))
    assert (p.node, p.cpus) == (0, (0, 1))
    with pytest.raises(th.ThreadBindError, match="CPUKERN_NUM_OF_RESERVED_CPU=4 leaves no CPU"):
        plan({"CPUKERN_OMP_THREADS_BIND": "auto", "CPUKERN_NUM_OF_RESERVED_CPU": "4"})


def test_auto_without_topology_uses_the_mask() -> None:
    p = plan({"CPUKERN_OMP_THREADS_BIND": "auto"}, allowed=frozenset([2, 3]), topo=th.Topology())
    assert p.cpus == (2, 3)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CPUKERN_NUM_OF_RESERVED_CPU": "-1"}, "CPUKERN_NUM_OF_RESERVED_CPU: expected an integer >= 0, got '-1'"),
        ({"CPUKERN_NUM_OF_RESERVED_CPU": "one"}, "CPUKERN_NUM_OF_RESERVED_CPU"),
        ({"LOCAL_RANK": "x"}, "LOCAL_RANK: expected an integer >= 0"),
        ({"CPUKERN_OMP_THREADS_BIND": "all"}, "'all' is not a CPU number or range"),
        ({"CPUKERN_OMP_THREADS_BIND": "0-1|", "LOCAL_RANK": "1"}, "empty CPU list"),
    ],
)
def test_bad_environment_values(env: dict[str, str], message: str) -> None:
    with pytest.raises(th.ThreadBindError, match=message):
        plan({"CPUKERN_OMP_THREADS_BIND": "auto", **env})


def test_describe_names_the_cpus() -> None:
    text = plan({"CPUKERN_OMP_THREADS_BIND": "auto", "CPUKERN_NUM_OF_RESERVED_CPU": "1"}).describe()
    assert "3 threads pinned to CPUs 0-2 of NUMA node 0" in text
    assert plan({}).describe(2) == "default: 2 threads, not pinned"


def test_read_topology_of_a_sys_tree(tmp_path: Path) -> None:
    for node, cpus in ((0, "0-1"), (1, "2-3")):
        (tmp_path / "node" / f"node{node}").mkdir(parents=True)
        (tmp_path / "node" / f"node{node}" / "cpulist").write_text(cpus + "\n")
    for cpu, sib in ((0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3")):
        d = tmp_path / "cpu" / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(sib + "\n")
    topo = th.read_topology(tmp_path)
    assert topo.nodes == {0: frozenset([0, 1]), 1: frozenset([2, 3])}
    assert topo.core_of == {0: 0, 1: 1, 2: 0, 3: 1}
    assert th.read_topology(tmp_path / "missing") == th.Topology()
