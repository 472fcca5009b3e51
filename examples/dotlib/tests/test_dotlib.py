"""Tests of the installed dotlib package (build and install a wheel first, see README.md)."""

from __future__ import annotations

import array
import json
import os
import subprocess
import sys

import pytest

import dotlib
from dotlib._cpubuild import variants

ENV = "DOTLIB_ISA"


def python(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DOTLIB_")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env={**clean, **env}, timeout=300)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 16, 17, 33, 1000])
def test_dot_every_variant(n: int) -> None:
    a = [(i % 13 - 6) / 2 for i in range(n)]
    b = [(i % 7 - 3) / 4 for i in range(n)]
    want = sum(x * y for x, y in zip(a, b, strict=True))  # exact: small multiples of 1/8
    for variant in dotlib.supported_variants():
        assert dotlib.dot(a, b, variant=variant) == want, variant
        assert dotlib.dot(array.array("f", a), array.array("f", b), variant=variant) == want, variant


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 100, 65536 + 5])
def test_dot_i8_every_variant(n: int) -> None:
    a = [(i * 37) % 256 - 128 for i in range(n)]
    b = [(i * 91 + 5) % 256 - 128 for i in range(n)]
    want = sum(x * y for x, y in zip(a, b, strict=True))
    for variant in dotlib.supported_variants():
        assert dotlib.dot_i8(a, b, variant=variant) == want, variant
        assert dotlib.dot_i8(array.array("b", a), array.array("b", b), variant=variant) == want, variant


def test_numpy_arrays_when_installed() -> None:
    np = pytest.importorskip("numpy")
    a = np.arange(10, dtype=np.float32)
    assert dotlib.dot(a, a) == float((a * a).sum())
    with pytest.raises(TypeError, match="float32"):
        dotlib.dot(a.astype(np.float64), a)
    with pytest.raises(TypeError, match="contiguous"):
        dotlib.dot(a[::2], a[::2])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        dotlib.dot([1.0, 2.0], [1.0])
    with pytest.raises(TypeError, match="numbers"):
        dotlib.dot(["x"], [1.0])
    with pytest.raises(TypeError, match="not str"):
        dotlib.dot("12", "12")
    with pytest.raises(TypeError, match="int"):
        dotlib.dot(3, 4)
    with pytest.raises(ValueError, match="int8"):
        dotlib.dot_i8([128], [1])
    with pytest.raises(TypeError, match="int8"):
        dotlib.dot_i8(b"\x01", b"\x01")  # bytes are unsigned


def test_selected_is_the_best_supported() -> None:
    if os.environ.get(ENV) or os.environ.get("DOTLIB_DISABLE_ISA"):
        pytest.skip(f"{ENV} / DOTLIB_DISABLE_ISA is set")
    assert dotlib.selected_isa() == dotlib.supported_variants()[-1]


def test_forcing_the_baseline() -> None:
    baseline = variants()[0]["name"]  # lowest priority first
    proc = python("-m", "dotlib", "--json", **{ENV: baseline})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["selected"] == baseline


def test_unknown_variant_fails_cleanly() -> None:
    proc = python("-m", "dotlib", **{ENV: "no_such_variant"})
    assert proc.returncode == 1
    assert "no_such_variant" in proc.stderr and "Traceback" not in proc.stderr


def test_selftest() -> None:
    proc = python("-m", "dotlib.selftest", "--json")
    result = json.loads(proc.stdout)
    assert proc.returncode == 0, result["failures"]
    assert result["failed"] == 0 and result["passed"] > 0
    assert result["variants"] == dotlib.supported_variants()
