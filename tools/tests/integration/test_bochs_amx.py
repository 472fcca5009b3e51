"""The amx variant's GEMM executed: bare metal under Bochs 3.0 `sapphire_rapids`.

No host here has AMX, QEMU (7.2 and 10.0) has none, Bochs 2.7 has none, and
a Linux guest cannot enable it under Bochs 3.0 (no XFD). So
tools/cpubuild/emulate/amx.py compiles what cpukern's [tool.cpubuild.baremetal]
names (csrc/kernels/gemm.cpp, a serial thread pool) with each variant's
matrix flags into a bootable image (no OS), Bochs 3.0
from a cached Debian trixie tree runs it, and the results are compared with
a host-side scalar reference. Known-answer checks of single instructions run
first in the same image, so Bochs's own bugs are told apart from ours.

Cost: the trixie tree once (about 1 min, cached under <cache>/bochs3); then
about 1.5 s of Bochs per image and about 15 s in all.
"""

from __future__ import annotations

import json
import os
import re
import sys
import zipfile
from pathlib import Path

import pytest
from cpubuild.contract import load_config
from cpubuild.emulate import amx
from cpubuild.emulate.bochs3 import SUITE, _ready
from cpubuild.emulate.rootfs import cache_dir
from cpubuild.matrix import load_matrix
from testsupport import CPUKERN_MATRIX, REPO, require, require_host, require_tool, run

pytestmark = [pytest.mark.slow, pytest.mark.bochs]

MATRIX = load_matrix(CPUKERN_MATRIX)
HARNESS = amx.harness_config(load_config(REPO), MATRIX)


def _amx_rows(kind: str) -> int:
    """The rows from which cpukern's amx variant runs AMX tiles (csrc/kernels/gemm.cpp)."""
    source = (REPO / "csrc" / "kernels" / "gemm.cpp").read_text()
    found = re.search(rf"#define CPUKERN_AMX_{kind}_ROWS (\d+)", source)
    assert found, f"CPUKERN_AMX_{kind}_ROWS is not defined in csrc/kernels/gemm.cpp"
    return int(found.group(1))


AMX_BF16_ROWS, AMX_INT8_ROWS = _amx_rows("BF16"), _amx_rows("INT8")
BUGGY_INT8 = "Bochs bug: bytes multiplied as unsigned x unsigned"
CVTNE2_BUG = "Bochs bug: upper 16 lanes repeat the lower 16 (the first source is lost)"


def _prerequisites() -> None:
    require_host(os.uname().machine == "x86_64", "the bare-metal image is built with the host's x86_64 g++")
    require_tool("g++", "objcopy", "objdump")
    if not _ready(cache_dir() / "bochs3" / SUITE):
        require(os.geteuid() == 0, "making the Bochs 3.0 trixie tree needs root (debootstrap, chroot)")
        require_tool("debootstrap")


@pytest.fixture(scope="module")
def harness() -> amx.HarnessRun:
    _prerequisites()
    result = amx.run_harness(HARNESS, MATRIX, log=print)
    for vr in result.runs:
        print(f"{vr.variant}: {len(vr.results)} cases, {vr.seconds:.1f} s in Bochs {result.bochs_version}")
    return result


@pytest.fixture(scope="module")
def corrupted() -> amx.HarnessRun:
    _prerequisites()
    return amx.run_harness(HARNESS, MATRIX, variants=["amx"], corrupt_packing=True, log=print)


def _rows(case: str) -> int:
    return int(case.split("M=")[1].split()[0])


def by_variant(run: amx.HarnessRun, name: str) -> amx.VariantRun:
    return next(vr for vr in run.runs if vr.variant == name)


def test_the_guest_enables_every_state_component(harness: amx.HarnessRun) -> None:
    assert harness.bochs_version.startswith("3.0")
    assert [vr.variant for vr in harness.runs] == ["amx", "avx512bf16"]  # pyproject's variants, in order
    for vr in harness.runs:
        assert vr.xcr0 == 0x602E7, vr.problems  # x87 SSE AVX opmask ZMM PKRU TILECFG TILEDATA
        assert vr.problems == [], vr.problems


def test_known_answer_checks_tell_bochs_bugs_apart(harness: amx.HarnessRun) -> None:
    kats = {k.name: k for k in by_variant(harness, "amx").kats}
    assert set(kats) == {"vcvtne2ps2bf16", "vcvtneps2bf16", "vdpbf16ps", amx.DISP8_KAT, "tdpbssd", "tdpbsud",
                         "tdpbusd", "tdpbuud", "tdpbf16ps"}
    # what the GEMM relies on is right
    for name in ("vcvtneps2bf16", "vdpbf16ps", "tdpbf16ps", "tdpbuud"):
        assert kats[name].ok, kats[name]
    # Bochs 3.0's bugs: either fixed (correct) or exactly the known wrong behaviour
    cvt = kats["vcvtne2ps2bf16"]
    assert cvt.ok or cvt.finding == CVTNE2_BUG, cvt
    assert kats[amx.DISP8_KAT].ok or kats[amx.DISP8_KAT].finding == amx.DISP8_BUG, kats[amx.DISP8_KAT]
    for name in ("tdpbssd", "tdpbsud", "tdpbusd"):
        assert kats[name].ok or kats[name].finding.startswith(BUGGY_INT8), kats[name]
    print({k.name: k.finding for k in kats.values()})


def test_the_gemm_code_never_uses_vcvtne2ps2bf16(harness: amx.HarnessRun) -> None:
    """Bochs's vcvtne2ps2bf16 bug cannot reach the GEMM: none of its code uses the instruction."""
    for vr in harness.runs:
        assert vr.cvtne2_in_gemm == 0, vr.variant
    assert by_variant(harness, "amx").amx_in_gemm > 0
    assert by_variant(harness, "avx512bf16").amx_in_gemm == 0


def test_the_guest_gives_the_one_row_product_the_llc_its_cached_form_needs(harness: amx.HarnessRun) -> None:
    """cpukern's vdpbf16ps GEMV takes B as the instruction's memory operand (Dpbf16::cached_gemv)
    when the weights fit the last-level cache, which a bare-metal build reads from CPUID: the
    guest reports an LLC that holds the M=1 case's weights, so that case runs the form (which
    form ran is not reported; this is what decides it) - with 32-bit displacements, which Bochs
    reads right (a compressed one it misreads: the known-answer check above)."""
    one_row = next(c for c in amx.make_cases() if c.kind == amx.KIND_BF16 and c.m == 1)
    for vr in harness.runs:
        assert vr.caches.get(3, 0) >= one_row.n * one_row.k * 2, (vr.variant, vr.caches)
        assert vr.dpbf16_disp8_in_gemm == 0, vr.variant


def test_amx_bf16_gemm_matches_the_reference_within_the_float32_bound(harness: amx.HarnessRun) -> None:
    results = [r for r in by_variant(harness, "amx").results if r.case.startswith("bf16")]
    kernels = {r.case: r.kernel for r in results}
    assert {k for c, k in kernels.items() if _rows(c) >= AMX_BF16_ROWS} == {"amx-bf16"}, kernels
    assert {k for c, k in kernels.items() if _rows(c) < AMX_BF16_ROWS} == {"vdpbf16ps"}, kernels  # below the tiles
    for r in results:
        assert r.judged and r.ok and r.mismatches == 0, r
        assert r.worst_ratio <= 1.0, r
    print("amx bf16: worst error / bound per case:", {r.case: round(r.worst_ratio, 4) for r in results})


def test_amx_int8_gemm_on_the_labelled_inputs(harness: amx.HarnessRun) -> None:
    results = [r for r in by_variant(harness, "amx").results if r.case.startswith("int8")]
    kats = {k.name: k for k in by_variant(harness, "amx").kats}
    through_amx = [r for r in results if r.kernel == "amx-int8"]
    assert {r.inputs for r in through_amx} == {"int8-nonneg", "int8-signed"}
    assert {_rows(r.case) >= AMX_INT8_ROWS for r in through_amx} == {True}
    assert {r.kernel for r in results if _rows(r.case) < AMX_INT8_ROWS} == {"vpdpbusd"}
    for r in results:
        if r.kernel == "amx-int8" and r.inputs == "int8-signed" and not kats["tdpbssd"].ok:
            # full-range signed bytes through Bochs's unsigned tdpbssd: wrong, so not judged
            assert not r.judged and r.ok and r.mismatches > 0 and "tdpbssd" in r.note, r
            continue
        assert r.judged and r.ok and r.mismatches == 0, r  # exact: every int8-nonneg case, VNNI's signed ones



def test_avx512bf16_gemm_matches_everywhere(harness: amx.HarnessRun) -> None:
    vr = by_variant(harness, "avx512bf16")
    assert {r.kernel for r in vr.results if r.case.startswith("int8")} == {"vpdpbusd"}
    # Bochs's sapphire_rapids says GenuineIntel: from 16 rows on the variant widens bf16 for FMA
    # instead of vdpbf16ps (csrc/kernels/gemm.cpp, widen_bf16), on the same packed B
    bf16 = {r.case: r.kernel for r in vr.results if r.case.startswith("bf16")}
    assert {k for c, k in bf16.items() if _rows(c) >= 16} == {"widened"}, bf16
    assert {k for c, k in bf16.items() if _rows(c) < 16} == {"vdpbf16ps"}, bf16
    for r in vr.results:
        assert r.judged and r.ok and r.mismatches == 0, r


def test_a_corrupted_packing_is_detected(corrupted: amx.HarnessRun) -> None:
    vr = corrupted.runs[0]
    assert not vr.ok
    judged = [r for r in vr.results if r.judged]
    assert judged and all(not r.ok and r.mismatches > 0 for r in judged), [(r.case, r.mismatches) for r in judged]
    assert {r.kernel for r in judged} >= {"amx-bf16", "amx-int8", "vdpbf16ps", "vpdpbusd"}


def _manifest_wheel(tmp: Path) -> Path:
    """A wheel holding only cpukern's manifest (the harness builds from the project's sources)."""
    built = [v.name for v in MATRIX.variants_for("x86_64")]
    manifest = MATRIX.manifest("x86_64", built, "_cpukern_{variant}.so", probe="probe",
                               project={"package": "cpukern", "env_prefix": "CPUKERN"})
    wheel = tmp / "cpukern-0.0.1-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("cpukern/_manifest.json", json.dumps(manifest))
    return wheel


@pytest.mark.parametrize("corrupt", [False, True], ids=["clean", "corrupt-packing"])
def test_cli(tmp_path: Path, corrupt: bool) -> None:
    _prerequisites()
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    env.pop(amx.CORRUPT_ENV, None)
    if corrupt:
        env[amx.CORRUPT_ENV] = "1"
    proc = run([sys.executable, "-m", "cpubuild", "test", "--arch", "x86_64", "--cpu", "bochs:sapphire_rapids",
                "--force-variant", "amx", "--json", str(_manifest_wheel(tmp_path))], check=False, cwd=REPO, env=env)
    data = json.loads(proc.stdout)
    assert proc.returncode == (1 if corrupt else 0), proc.stderr
    assert data["ok"] is not corrupt
    assert [v["variant"] for v in data["checks"]["variants"]] == ["amx"]
