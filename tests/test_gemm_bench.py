"""`cpubuild bench` against the installed cpukern: a small real run of the
project's declared benchmark (benchmarks/bench_variants.py; every runnable
variant, one GEMM and one foundation op) with --json and --plot, bad
arguments, and the table / targets rendering on made-up records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numpy")
pytest.importorskip("ml_dtypes")

import cpukern
from conftest import REPO
from cpubuild.commands.bench import render

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_variants import targets

CLI = "import sys; from cpubuild.cli import main; main(sys.argv[1:])"


def cpubuild(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=600, cwd=REPO)


def test_json_records_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "ladder.png"
    proc = cpubuild("bench", "--ops", "gemm_w8a8,rms_norm", "--m", "1", "--tokens", "1", "--dtypes", "bf16",
                    "--rounds", "1", "--round-ms", "1", "--no-torch", "--json", "--plot", str(png))
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = json.loads(proc.stdout)
    variants = cpukern.supported_variants()
    assert [(r["op"], r["variant"]) for r in records] == [(op, v) for op in ("gemm_w8a8", "rms_norm") for v in variants]
    for r in records:
        assert set(r) == {"op", "dtype", "shape", "variant", "us", "torch_us", "memcpy_us"}
        assert r["us"] > 0 and r["torch_us"] is None
        assert r["memcpy_us"] > 0  # GEMV and rms_norm are memory-bound
    assert records[0]["shape"] == [1, 4096, 4096] and records[0]["dtype"] == "int8"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tcmalloc" in proc.stderr or "glibc malloc" in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ops", "gemm_fp8"], "--ops: unknown gemm_fp8"),
        (["--variants", "amx_not_a_variant"], "cannot run here; this host runs:"),
        (["--m", "0"], "--m: values must be >= 1"),
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
    text = render({"meta": meta, "records": records, "targets": targets(records, ["baseline", "avx2"])}, ["baseline", "avx2"])
    assert "60.00x" in text  # vs torch at M=1
    assert "3.00x" in text  # the ladder at M=256
    assert "target: gemm_bf16 M=256 avx2 vs baseline: 3.00x (>= 4.0x: MISSED)" in text
    assert "target: gemm_bf16 M=1 avx2 vs torch: 60.00x (>= 1.5x: met)" in text
    assert targets([], ["baseline"]) == []
