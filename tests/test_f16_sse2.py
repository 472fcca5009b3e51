"""The x86 baseline's float16 conversions, bit for bit.

Without F16C the baseline converts float16 with integer operations on four
lanes (simd.h, `CPUKERN_F16_SSE2`); GCC's own _Float16 conversions, a libgcc
call per element there, are the reference. tests/native/f16_sse2_check.cpp
compares every float16 -> float and 5.6 million float -> float16 cases (every
sign, exponent and kept mantissa with the dropped bits at each rounding case,
and a stride through all 2^32 patterns), with and without DAZ / FTZ. The op
tests run the kernels that use them on the baseline against the scalar
reference (within 2 ulps); this pins the conversions to exact.
"""

from __future__ import annotations

import platform
from pathlib import Path

from cpubuild.matrix import load_matrix
from testsupport import CPUKERN_MATRIX, REPO, require_host, require_tool, run


def test_baseline_float16_conversions_are_exact(tmp_path: Path) -> None:
    require_host(platform.machine() == "x86_64", "the x86 baseline's conversions need an x86-64 host")
    require_tool("g++")
    exe = tmp_path / "f16_sse2_check"
    baseline = next(v for v in load_matrix(CPUKERN_MATRIX).variants_for("x86_64") if v.name == "baseline")
    run(["g++", "-std=gnu++17", "-O2", *baseline.flags_for("gcc"), "-Wall", "-Werror",
         f"-I{REPO / 'csrc' / 'include'}", str(REPO / "tests" / "native" / "f16_sse2_check.cpp"), "-o", str(exe)],
        timeout=300)
    out = run([str(exe)], timeout=300).stdout
    assert "0 mismatches" in out, out
