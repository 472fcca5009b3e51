"""cpukern's worker pool in real processes: thread binding
(CPUKERN_OMP_THREADS_BIND) read back from the workers' kernel affinity masks,
`python -m cpukern` reporting it, bad values failing cleanly, and cpukern's
threads next to torch's OpenMP runtime (interleaved and concurrent calls)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytest.importorskip("numpy")
pytest.importorskip("ml_dtypes")

ALLOWED = sorted(os.sched_getaffinity(0))
BIND_VARS = ("CPUKERN_OMP_THREADS_BIND", "CPUKERN_NUM_OF_RESERVED_CPU", "CPUKERN_NUM_THREADS", "CPUKERN_LOCAL_RANK",
             "LOCAL_RANK")

# For each (variant, environment) given on the command line: sets the
# environment, loads that variant's library (each library plans its own pool
# when it is loaded, so one process checks as many bindings as this CPU runs
# variants), runs a GEMM big enough for every worker and reports each
# worker's thread id, affinity (the kernel's view) and CPU time. CPU time
# comes from schedstat (nanoseconds): /proc/.../stat counts 10 ms ticks, too
# coarse for a worker's share of a short loop on a busy machine.
PROBE = textwrap.dedent("""
    import json, os, sys, time, numpy as np, ml_dtypes, cpukern
    from cpukern import _dispatch, _threads, ops
    bf = ml_dtypes.bfloat16
    a = np.ones((64, 512), bf)
    def cpu_ns(tid):
        return int(open(f"/proc/self/task/{tid}/schedstat").read().split()[0])
    results = []
    for variant, env in json.loads(sys.argv[1]):
        for name in BIND_VARS:
            os.environ.pop(name, None)
        os.environ.update(env)
        with ops.use_variant(variant):
            packed = cpukern.pack_b(np.ones((512, 512), bf))
            for _ in range(3):
                out = cpukern.gemm_bf16(a, packed)
            assert float(out[0, 0]) == 512.0
            tids = _threads.worker_tids(_dispatch.DISPATCHER.load_variant(variant))
            before = {t: cpu_ns(t) for t in tids}
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:
                cpukern.gemm_bf16(a, packed)
        results.append({
            "workers": [{"tid": t, "cpus": sorted(os.sched_getaffinity(t)), "cpu_ns": cpu_ns(t) - before[t]} for t in tids],
            "caller": sorted(os.sched_getaffinity(0)),
        })
    print(json.dumps(results))
""").replace("BIND_VARS", repr(BIND_VARS))


def run_python(code: str, env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in BIND_VARS}
    return subprocess.run([sys.executable, "-c", code, *args], env={**clean, **env}, capture_output=True, text=True,
                          timeout=timeout)


def probe(*envs: dict[str, str]) -> list[dict[str, Any]]:
    """One result per environment, as few processes as the variants allow."""
    import cpukern

    variants = cpukern.supported_variants()
    results: list[dict[str, Any]] = []
    for start in range(0, len(envs), len(variants)):
        chunk = list(zip(variants, envs[start : start + len(variants)], strict=False))
        proc = run_python(PROBE, {}, json.dumps(chunk))
        assert proc.returncode == 0, proc.stderr[-3000:]
        results.extend(json.loads(proc.stdout))
    return results


def test_bindings_read_back_from_the_workers() -> None:
    last = ALLOWED[-1]
    pair = ALLOWED[-2:]
    unbound, listed, single, auto, ranked = probe(
        {},
        {"CPUKERN_OMP_THREADS_BIND": ",".join(map(str, pair))},
        {"CPUKERN_OMP_THREADS_BIND": str(last)},
        {"CPUKERN_OMP_THREADS_BIND": "auto"},
        {"CPUKERN_OMP_THREADS_BIND": "|".join(map(str, ALLOWED)), "LOCAL_RANK": str(len(ALLOWED) - 1)},
    )
    # unset: not pinned, the caller runs one share itself
    assert len(unbound["workers"]) == len(ALLOWED) - 1
    assert all(w["cpus"] == ALLOWED for w in unbound["workers"])
    # a CPU list: one worker per CPU, pinned; they do the work; the caller stays unpinned
    assert sorted(w["cpus"] for w in listed["workers"]) == [[c] for c in pair]
    assert sum(w["cpu_ns"] for w in listed["workers"]) > 0, "the pinned workers did not run the work"
    assert listed["caller"] == ALLOWED, "the calling thread must not be re-pinned"
    # a single CPU: the work still runs on the pinned worker
    assert [w["cpus"] for w in single["workers"]] == [[last]]
    assert single["workers"][0]["cpu_ns"] > 0
    # auto: one pinned worker per core of the process mask
    pinned = sorted(w["cpus"][0] for w in auto["workers"])
    assert all(len(w["cpus"]) == 1 for w in auto["workers"])
    assert pinned and set(pinned) <= set(ALLOWED) and len(set(pinned)) == len(pinned)
    # one list per local rank
    assert [w["cpus"] for w in ranked["workers"]] == [[last]]
    if len(pinned) >= 2:
        (fewer,) = probe({"CPUKERN_OMP_THREADS_BIND": "auto", "CPUKERN_NUM_OF_RESERVED_CPU": "1"})
        assert sorted(w["cpus"][0] for w in fewer["workers"]) == pinned[:-1]


REPORT = "import cpukern.__main__ as m; m.main(['--json']); print('@@'); m.main([])"


def test_python_m_cpukern_reports_the_binding() -> None:
    cpu = ALLOWED[-1]
    proc = run_python(REPORT, {"CPUKERN_OMP_THREADS_BIND": str(cpu)})
    assert proc.returncode == 0, proc.stderr
    data, text = proc.stdout.split("@@")
    threads = json.loads(data)["threads"]
    assert (threads["mode"], threads["pinned"], threads["cpus"], threads["threads"]) == ("list", True, [cpu], 1)
    assert f"threads: list: 1 thread pinned to CPUs {cpu}" in text


def test_bad_values_fail_cleanly() -> None:
    """Unit tests cover every message; here: a clear exception, no signal."""
    import cpukern

    bad = {"CPUKERN_OMP_THREADS_BIND": str(max(ALLOWED) + 1)}
    proc = run_python(PROBE, {}, json.dumps([[cpukern.supported_variants()[0], bad]]))
    assert proc.returncode == 1, f"exit {proc.returncode} (negative: a signal)\n{proc.stderr[-2000:]}"
    assert "ThreadBindError: CPUKERN_OMP_THREADS_BIND" in proc.stderr and "is not available to this process" in proc.stderr
    report = run_python(REPORT, {"CPUKERN_OMP_THREADS_BIND": "auto", "CPUKERN_NUM_OF_RESERVED_CPU": str(len(ALLOWED))})
    assert "leaves no CPU" in json.loads(report.stdout.split("@@")[0])["threads"]["error"]


TORCH_MIX = textwrap.dedent("""
    import json, os, threading, time
    import numpy as np, ml_dtypes, torch, cpukern
    from concurrent.futures import ThreadPoolExecutor
    from cpukern import _dispatch, _threads
    bf = ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    a = rng.standard_normal((48, 256)).astype(bf)
    b = rng.standard_normal((256, 384)).astype(bf)
    want = a.astype(np.float64) @ b.astype(np.float64)
    packed = cpukern.pack_b(b)
    ta, tb = torch.randn(96, 256), torch.randn(256, 256)
    twant = ta.double() @ tb.double()
    def ours():
        got = cpukern.gemm_bf16(a, packed)
        assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max(), "cpukern result"
    def theirs():
        got = torch.matmul(ta, tb)
        assert (got.double() - twant).abs().max() <= 1e-3 * twant.abs().max(), "torch result"
    for _ in range(10):  # interleaved on one thread
        ours(); theirs()
    with ThreadPoolExecutor(2) as pool:  # concurrently from two Python threads
        jobs = [pool.submit(f) for _ in range(20) for f in (ours, theirs)]
        for j in jobs:
            j.result()
    # cpukern alone for a while: which threads do its work?
    def cpu_ns(tid):
        try:
            return int(open(f"/proc/self/task/{tid}/schedstat").read().split()[0])
        except FileNotFoundError:  # a thread that has just exited (the executor's)
            return None
    main = threading.get_native_id()
    time.sleep(0.1)
    before = {t: ns for t in map(int, os.listdir("/proc/self/task")) if (ns := cpu_ns(t)) is not None}
    tasks = list(before)
    x = np.ones((2048, 1024), np.float32)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        cpukern.rms_norm(x, np.ones(1024, np.float32))
    others_ns = sum((cpu_ns(t) or before[t]) - before[t] for t in tasks if t != main)
    time.sleep(0.2)
    tids = _threads.worker_tids(_dispatch.DISPATCHER.library())
    states = [open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[0] for t in tids]
    print(json.dumps({"workers": len(tids), "states": states, "torch_threads": torch.get_num_threads(),
                      "others_ns": others_ns, "tasks_before": len(tasks),
                      "added": sorted(set(map(int, os.listdir("/proc/self/task"))) - set(tasks))}))
""")


@pytest.mark.skipif(len(ALLOWED) < 2, reason="one CPU: no thread pool to share")
def test_runs_on_torch_openmp_threads() -> None:
    """With torch in the process, cpukern's parallel loops run on torch's
    OpenMP threads (CPUKERN_POOL=auto): no pool of its own starts, no thread
    is added, and torch's threads (every thread but the caller) do part of a
    cpukern-only loop. A second busy-waiting pool next to OpenMP's made
    cpukern's ops up to 2x slower between torch ops."""
    pytest.importorskip("torch")
    proc = run_python(TORCH_MIX, {})
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    assert r["workers"] == 0, r
    # threads that appeared, not a count: the executor's finished threads may still be listed before
    # and gone after (a loaded CI run saw 5 then 3)
    assert r["added"] == [], r
    assert r["others_ns"] > 50_000_000, r  # of ~1 s of CPU over 0.5 s on 2+ CPUs


@pytest.mark.skipif(len(ALLOWED) < 2, reason="one CPU: the pool has no worker")
def test_own_pool_next_to_torch_when_asked() -> None:
    """CPUKERN_POOL=own keeps cpukern's pool beside torch's OpenMP: sized to
    the CPUs, its idle workers asleep after the poll."""
    pytest.importorskip("torch")
    proc = run_python(TORCH_MIX, {"CPUKERN_POOL": "own"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    assert r["workers"] == len(ALLOWED) - 1
    assert all(s in "SD" for s in r["states"]), r["states"]


SPIN_PROBE = textwrap.dedent("""
    import json, time, numpy as np, ml_dtypes, cpukern
    from cpukern import _dispatch, _threads
    x = np.ones((4096, 64), ml_dtypes.bfloat16)
    out = cpukern.rms_norm(x, np.ones(64, ml_dtypes.bfloat16))
    assert float(out[0, 0]) == 1.0
    time.sleep(0.05)
    tids = _threads.worker_tids(_dispatch.DISPATCHER.library())
    print(json.dumps([open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[0] for t in tids]))
""")


@pytest.mark.skipif(len(ALLOWED) < 2, reason="one CPU: the pool has no worker to watch")
def test_idle_workers_poll_for_cpukern_spin_us_then_sleep() -> None:
    """CPUKERN_SPIN_US: 50 ms after a call a worker that polls for a second is
    still runnable (R), one told not to poll sleeps (S); a value that is not
    a number of microseconds falls back to the default (200), long over."""
    states = {value: json.loads(run_python(SPIN_PROBE, {"CPUKERN_SPIN_US": value}).stdout)
              for value in ("1000000", "0", "soon")}
    assert states["1000000"] and all(s == "R" for s in states["1000000"]), states
    assert all(s in "SD" for s in states["0"]), states
    assert all(s in "SD" for s in states["soon"]), states


FORK_PROBE = textwrap.dedent("""
    import os, sys, ml_dtypes, numpy as np, torch, cpukern
    x = np.ones((4096, 256), np.float32)
    w = np.ones(256, np.float32)
    if sys.argv[1] == "cpukern":
        cpukern.rms_norm(x, w)  # the library loaded, on torch's OpenMP threads
    else:
        torch.ones(2048, 2048) @ torch.ones(2048, 64)  # torch's OpenMP team exists, cpukern not loaded
    pid = os.fork()
    if pid == 0:
        out = cpukern.rms_norm(x, w)
        # a product too (numpy's: torch's own ops hang here): its A pack is a static split, which waits for every part
        y = cpukern.gemm_bf16(np.ones((512, 256), ml_dtypes.bfloat16), np.ones((256, 64), ml_dtypes.bfloat16))
        os._exit(0 if abs(float(out[100, 100]) - 1.0) < 1e-3 and bool((y == 256).all()) else 3)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))
""")


@pytest.mark.parametrize(("parent_ran", "env"), [("cpukern", {}), ("torch", {}), ("cpukern", {"CPUKERN_POOL": "own"})],
                         ids=["cpukern-on-openmp", "torch", "cpukern-own-pool"])
def test_a_forked_child_runs_cpukern_on_its_own_pool(parent_ran: str, env: dict[str, str]) -> None:
    """libgomp's team does not survive fork: a child forked after the parent ran
    an OpenMP region hangs in its next one (torch's own ops too). cpukern,
    imported before the fork, keeps to its own pool in the child - a new one
    where the parent ran on cpukern's own pool, whose workers the child lacks
    (the library knows its process id from before the fork: pthread_atfork)."""
    pytest.importorskip("torch")
    proc = run_python(FORK_PROBE, env, parent_ran, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "0", proc.stdout


# Runs in-place fused_add_rms_norm (a chunk run twice adds its residual twice)
# over row counts around every way of cutting chunks into per-thread shares,
# and int8 GEMMs whose blocks (one share of them per thread, too) are fewer,
# as many or more than the threads (a block left out leaves its C unwritten),
# against numpy; CPUKERN_NUM_THREADS may exceed the CPUs (threads then share them).
SHARES_PROBE = textwrap.dedent("""
    import json, sys, numpy as np
    if sys.argv[1] == "torch":
        import torch
    import cpukern
    from cpukern import _dispatch
    rng = np.random.default_rng(0)
    bad = []
    for rows in (1, 2, 3, 4, 5, 7, 8, 9, 31, 64, 257, 1000):
        x = rng.standard_normal((rows, 4096), dtype=np.float32)
        r = rng.standard_normal((rows, 4096), dtype=np.float32)
        w = rng.standard_normal(4096, dtype=np.float32)
        s = x + r
        want = s / np.sqrt(np.mean(s * s, axis=1, keepdims=True) + 1e-6) * w
        cpukern.fused_add_rms_norm(x, r, w, 1e-6)
        if not (np.allclose(r, s, rtol=1e-6, atol=1e-6) and np.allclose(x, want, rtol=1e-4, atol=1e-4)):
            bad.append(rows)
    for m, n, k in ((1, 4096, 1024), (1, 96, 64), (40, 700, 300), (256, 1024, 512)):
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        out = np.full((m, n), np.nan, np.float32)
        cpukern.gemm_w8a8(a, np.ones(m, np.float32), cpukern.pack_b_int8(b), np.ones(n, np.float32), out=out)
        if not np.array_equal(out, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32)):
            bad.append(f"gemm {m}x{n}x{k}")
    print(json.dumps({"bad": bad, "threads": _dispatch.DISPATCHER.library().cpukern_get_num_threads()}))
""")


@pytest.mark.parametrize("threads", [3, 5])
@pytest.mark.parametrize("runtime", ["own", "torch"])
def test_dynamic_loops_run_every_chunk_once(runtime: str, threads: int) -> None:
    """Element-wise kernels and the GEMMs' blocks take chunks owner first (one
    share per thread, then the others'): whatever the rows and threads, every
    chunk runs exactly once, on cpukern's pool and on torch's OpenMP threads."""
    if runtime == "torch":
        pytest.importorskip("torch")
    proc = run_python(SHARES_PROBE, {"CPUKERN_NUM_THREADS": str(threads)}, runtime)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result == {"bad": [], "threads": threads}, result
