"""`cpubuild bench` against the installed cpukern: a small real run of the
project's declared benchmark (benchmarks/bench_variants.py; every runnable
variant, one GEMM and one foundation op) with --json and --plot, its roofline
fields (this host's measured limits, each record's % of its bound, a 'not on
this host' note instead of a figure for a variant the host cannot run), the
bandwidth ladder's structure (one named point per cache level and DRAM, the
same probes whatever --variants times), bad arguments, and the table /
targets rendering on made-up records.

Structure and sanity only: every figure here is a timing on a shared machine,
so no test asserts a percentage, a ratio or an ordering of speeds (the
benchmark prints those, with its own verdicts)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("numpy")
pytest.importorskip("ml_dtypes")

import cpukern
from cpubuild.bench import roofline, targets
from cpubuild.bench.table import render
from testsupport import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_variants import TARGETS

CLI = "import sys; from cpubuild.cli import main; main(sys.argv[1:])"


def cpubuild(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=600, cwd=REPO)


def test_json_records_roofline_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "ladder.png"
    # --side-bandwidth-from 16: the 16 MiB GEMV gets the probe's bandwidth measured between its rounds
    proc = cpubuild("bench", "--ops", "gemm_w8a8,rms_norm,fused_add_rms_norm", "--m", "1", "--gemv-n", "4096", "--tokens",
                    "1", "--dtypes", "bf16", "--rounds", "1", "--round-ms", "1", "--no-torch", "--side-bandwidth-from",
                    "16", "--json", "--plot", str(png))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    records = out["records"]
    variants = cpukern.supported_variants()
    ops = ("gemm_w8a8", "rms_norm", "fused_add_rms_norm")
    assert [(r["op"], r["variant"]) for r in records] == [(op, v) for op in ops for v in variants]
    for r in records:
        assert {"op", "dtype", "shape", "variant", "us", "torch_us", "memcpy_us", "flops", "bytes", "bytes_written",
                "working_set", "bound", "pct_bound", "pct_peak", "pct_bandwidth", "torch_pct_bound"} <= set(r)
        assert r["us"] > 0 and r["torch_us"] is None
        assert r["memcpy_us"] > 0  # GEMV and the norms are memory-bound
        assert r["bound"] == ("memory" if r["op"] != "gemm_w8a8" else max(
            ("compute", r["pct_peak"]), ("memory", r["pct_bandwidth"]), key=lambda b: b[1])[0]), r
        assert math.isfinite(r["pct_bound"]) and r["pct_bound"] > 0, r
        assert 0 < r["pct_bandwidth"] <= r["pct_bound"], r  # the bound is the larger share
        # bounded at its own working set, which the probe measured (issue 25): its footprint,
        # half its traffic where it works in place
        exact = {b["bytes"] for b in out["limits"]["bandwidth"] if b["exact"]}
        in_place = r["op"] == "fused_add_rms_norm"
        assert (r["working_set"] is not None and r["working_set"] < r["bytes"]) == in_place, r
        assert (r["working_set"] or r["bytes"]) in exact, r
        if r["op"] == "gemm_w8a8":  # bounded by what the probe measured beside it, in the same process's rounds
            assert r["level"] == "16.0 MiB side by side" and r["bandwidth"]["read_Bps"] > 0, r
            assert r["bandwidth"]["copy_Bps"] > 0 and r["bandwidth"]["update_Bps"] > 0, r
        else:
            assert r["level"].endswith(" measured") and "bandwidth" not in r, r
    gemv = [r for r in records if r["op"] == "gemm_w8a8"]
    assert all(r["flops"] == 2 * 4096 * 4096 and 0 < r["pct_peak"] <= r["pct_bound"] for r in gemv)
    assert records[0]["shape"] == [1, 4096, 4096] and records[0]["dtype"] == "int8"
    # the limits: a measured peak for every variant this host runs, a note for the built ones it cannot
    limits = out["limits"]
    ladder = [b for b in limits["bandwidth"] if not b["exact"]]
    assert limits["threads"] >= 1 and ladder[-1]["bytes"] > limits["llc_bytes"]
    assert all(b["read_Bps"] > 0 and b["copy_Bps"] > 0 and b["update_Bps"] > 0 for b in limits["bandwidth"])
    assert_ladder_structure(limits)
    assert all(line.startswith("model: ") for line in out["model"]) and out["model"]
    peaks = {p["variant"]: p for p in limits["peaks"] if p["dtype"] == "int8"}
    assert all(peaks[v]["ops_per_s"] > 0 and peaks[v]["instruction"] for v in variants)
    for name, p in peaks.items():
        if name not in variants:
            assert p["ops_per_s"] is None and p["note"].startswith("not on this host (lacks "), p
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tcmalloc" in proc.stderr or "glibc malloc" in proc.stderr


def assert_ladder_structure(limits: dict[str, Any]) -> None:
    """One point per cache level this host's sysfs names (for the benchmark's threads), then DRAM; sizes grow,
    each level's point inside its capacity."""
    ladder = [b for b in limits["bandwidth"] if not b["exact"]]  # the rest: the records' working sets
    caches = roofline.cache_levels(sorted(os.sched_getaffinity(0))[:limits["threads"]])
    assert [c["name"] for c in limits["caches"]] == [c.name for c in caches]
    assert [b["level"] for b in ladder] == [c.name for c in caches] + ["DRAM"]
    sizes = [b["bytes"] for b in ladder]
    assert sizes == sorted(set(sizes))
    assert all(b["bytes"] <= b["capacity"] for b in ladder[:-1]) and ladder[-1]["capacity"] == 0
    assert limits["ladder_from"], limits


def test_the_ladder_does_not_depend_on_the_timed_variants() -> None:
    """--variants with only the lowest variant builds the same ladder probes as the default run (issue 18: an
    avx2-built probe measured itself, not the caches)."""
    args = ["bench", "--ops", "rms_norm", "--tokens", "1", "--dtypes", "fp32", "--rounds", "1", "--round-ms", "1",
            "--no-torch", "--json"]
    runs = {}
    for chosen in (None, cpukern.supported_variants()[0]):
        proc = cpubuild(*args, *(["--variants", chosen] if chosen else []))
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[chosen] = json.loads(proc.stdout)["limits"]
        assert_ladder_structure(runs[chosen])
    default, lowest = runs.values()
    assert default["ladder_from"] == lowest["ladder_from"]
    assert [(b["level"], b["bytes"], b["exact"]) for b in default["bandwidth"]] == [
        (b["level"], b["bytes"], b["exact"]) for b in lowest["bandwidth"]]
    # peaks only for what was timed (and the 'not on this host' notes)
    timed = {p["variant"] for p in lowest["peaks"] if p["ops_per_s"]}
    assert timed == {cpukern.supported_variants()[0]}


def test_table_shows_percentages_and_the_limits() -> None:
    proc = cpubuild("bench", "--ops", "gemm_bf16", "--m", "1", "--gemv-n", "4096", "--rounds", "1", "--round-ms", "1",
                    "--no-torch")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "% of the roofline bound" in proc.stdout and "bf16 peak:" in proc.stdout
    assert "bandwidth GB/s read/copy/update by working set" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("gemm_bf16"))
    assert row.count("%") == len(cpukern.supported_variants())
    assert row.split()[-1] == "compute" or " memory " in row, row  # 'memory 32 MiB measured' names the set
    plain = cpubuild("bench", "--ops", "gemm_bf16", "--m", "1", "--rounds", "1", "--round-ms", "1", "--no-torch",
                     "--no-roofline")
    assert plain.returncode == 0 and "bf16 peak:" not in plain.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ops", "gemm_fp8"], "--ops: unknown gemm_fp8"),
        (["--variants", "amx_not_a_variant"], "cannot run here; this host runs:"),
        (["--m", "0"], "--m: values must be >= 1"),
        (["--gemv-n", "4096,x"], "--gemv-n: expected comma-separated integers"),
        (["--dtypes", "fp16"], "--dtypes: unknown fp16"),
        (["--plot", "/nonexistent-dir/x.png"], "--plot: directory /nonexistent-dir does not exist"),
    ],
)
def test_bad_arguments(args: list[str], message: str) -> None:
    proc = cpubuild("bench", *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_render_shows_ratios_and_targets() -> None:
    def rec(op: str, m: int, variant: str, us: float, torch_us: float | None, memcpy_us: float | None) -> dict[str, object]:
        return {"op": op, "dtype": "bf16", "shape": [m, 4096, 4096], "variant": variant, "us": us,
                "torch_us": torch_us, "memcpy_us": memcpy_us}

    records = [
        rec("gemm_bf16", 1, "baseline", 4000.0, 120000.0, 2000.0),
        rec("gemm_bf16", 1, "avx2", 2000.0, 120000.0, 2000.0),
        rec("gemm_bf16", 256, "baseline", 900000.0, 30000000.0, None),
        rec("gemm_bf16", 256, "avx2", 300000.0, 30000000.0, None),
    ]
    meta = {"title": "cpukern 0", "selected": "avx2", "allocator": "tcmalloc (x)", "torch": "torch 2"}
    lines = targets.check_all(TARGETS, records, ["baseline", "avx2"], ["avx2"])
    text = render({"meta": meta, "records": records, "targets": lines}, ["baseline", "avx2"])
    assert "60.00x" in text  # vs torch at M=1
    assert "3.00x" in text  # the ladder at M=256
    assert "target: gemm_bf16 256 avx2 vs baseline: 3.00x (>= 4.0x: MISSED)" in text
    assert "target: gemm_bf16 1x4096 avx2 vs torch: 60.00x (>= 1.5x: met)" in text
    assert "target: gemm_bf16 256 vs bound (>= 85): n/a, this host lacks avx512_bf16" in text
    assert targets.check_all(TARGETS, [], ["baseline"], ["avx512_bf16"]) == []
