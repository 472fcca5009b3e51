"""Tests of the installed vecnorm package (build and install the wheel first, see README.md)."""

from __future__ import annotations

import array
import json
import math
import os
import subprocess
import sys

import pytest

import vecnorm
from vecnorm import _cpubuild


def python(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VNORM_")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env={**clean, **env}, timeout=300)


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 64, 1001])
def test_every_variant_agrees(n: int) -> None:
    x = [((i * 7) % 11 - 5) / 4 for i in range(n)]
    norm = math.sqrt(sum(v * v for v in x))  # squares of multiples of 1/4: the float32 sum is exact
    q = [(i * 37) % 256 - 128 for i in range(n)]
    for variant in _cpubuild.supported_variants():
        assert vecnorm.l2(x, variant=variant) == pytest.approx(norm, rel=1e-6)
        unit = vecnorm.normalize(x, variant=variant)
        assert [round(u, 5) for u in unit] == [round(v / norm, 5) for v in x]
        assert vecnorm.sumsq_i8(q, variant=variant) == sum(v * v for v in q)


def test_normalize_into_a_buffer_in_place() -> None:
    x = array.array("f", [3.0, 0.0, 4.0])
    assert vecnorm.normalize(x, out=x) is x
    assert list(x) == pytest.approx([0.6, 0.0, 0.8])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="norm is zero"):
        vecnorm.normalize([0.0, 0.0])
    with pytest.raises(ValueError, match="norm is not finite"):
        vecnorm.normalize([3e38, 3e38])
    with pytest.raises(TypeError, match="float32"):
        vecnorm.l2(array.array("d", [1.0]))
    with pytest.raises(TypeError, match="writable"):
        vecnorm.normalize([1.0], out=[0.0])
    with pytest.raises(ValueError, match="elements"):
        vecnorm.normalize([1.0, 2.0], out=array.array("f", [0.0]))
    with pytest.raises(ValueError):
        vecnorm.sumsq_i8([200])
    with pytest.raises(TypeError):
        vecnorm.sumsq_i8(["x"])


def test_report_and_forcing() -> None:
    baseline = _cpubuild.variants()[0]["name"]
    report = python("-m", "vecnorm", "--json", VNORM_ISA=baseline)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["selected"] == baseline
    bad = python("-m", "vecnorm", VNORM_ISA="no_such_variant")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr


def test_selftest() -> None:
    proc = python("-m", "vecnorm.selftest", "--json")
    result = json.loads(proc.stdout)
    assert proc.returncode == 0, result["failures"]
    assert result["variants"] == _cpubuild.supported_variants() and result["passed"] > 0
