"""The AVX-512 variants executed: the all-variant wheel under Bochs 2.7.

QEMU 7.2 emulates no AVX-512 and this host has none, so `avx512` and
`avx512vnni` run here only under Bochs full-system emulation
(tools/cpubuild/emulate/bochs.py): Debian's cloud kernel boots the `tigerlake`
model from an ISO whose initramfs is the cached x86_64 test rootfs
(python3 + numpy) with the wheel unpacked into it. Inside that guest the
package's own checks run: the dispatcher's report (real CPUID + XGETBV),
the selftest of every variant the model runs against float64 NumPy
references (GEMMs included), and a forced variant the model lacks.

The model's features are facts of Bochs 2.7's `tigerlake` (Intel Tiger
Lake: AVX-512 F/BW/DQ/VL + VNNI; Bochs implements no AVX512_BF16 and no
AMX); the expected variant follows from them and the matrix.

One boot runs every check: about 40 s to /init and 75 s of checks on this
2-core host; the kernel, the packed rootfs and the build are cached.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from cpubuild.emulate.bochs import BIOS, ISOLINUX_FILES, VGABIOS, BochsRun, GuestCommand, run_wheel
from cpubuild.emulate.rootfs import cache_dir
from cpubuild.matrix import load_matrix
from testsupport import REPO, require, require_host, require_tool, run

pytestmark = [pytest.mark.slow, pytest.mark.bochs]

MATRIX = load_matrix(REPO / "isa_matrix.toml")
MODEL = "tigerlake"
# Tiger Lake, as Bochs 2.7 models it, in the features of cpubuild's hardware data
HAS = {"sse2", "sse3", "ssse3", "sse4_1", "sse4_2", "popcnt", "avx", "fma", "f16c", "avx2", "bmi1", "bmi2", "avx512f",
       "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512ifma", "avx512vbmi", "avx512_vnni"}
LACKS = {"avx_vnni", "avx512_bf16", "avx512_fp16", "avx10_2", "amx_tile", "amx_bf16", "amx_int8", "amx_fp8"}
FORCED = "avx512bf16"  # built, but needs avx512_bf16
RAISE_FORCED = "import cpukern; cpukern.selected_isa()"


def runnable(built: list[str]) -> list[str]:
    return [v.name for v in MATRIX.variants_for("x86_64") if v.name in built and set(v.requires) <= HAS]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require_host(os.uname().machine == "x86_64", "the Bochs runs are set up on an x86_64 host")
    require(os.geteuid() == 0, "needs root (debootstrap of the guest rootfs)")
    require_tool("bochs-bin", "xorriso", "apt-get", "dpkg-deb", "debootstrap", "g++", "cmake", "ninja", "auditwheel")
    for path in (*ISOLINUX_FILES, BIOS, VGABIOS):
        require(path.is_file(), f"{path} is missing (run scripts/setup.sh)")
    build_root = Path(os.environ.get("CPUBUILD_TEST_CACHE") or cache_dir() / "wheel-tests") / "root"
    out = tmp_path_factory.mktemp("bochs-wheel")
    proc = run([sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", "wheel", "--json",
                "--out", str(out), "--build-root", str(build_root)],
               env={**os.environ, "PYTHONPATH": str(REPO / "tools")}, cwd=REPO)
    summary: dict[str, Any] = json.loads(proc.stdout)
    assert summary["ok"], summary
    return summary


@pytest.fixture(scope="module")
def guest(wheel: dict[str, Any]) -> BochsRun:
    commands = [
        GuestCommand(name="report", argv=("python3", "-m", "cpukern", "--json")),
        GuestCommand(name="selftest", argv=("python3", "-m", "cpukern.selftest", "--json", "--raw-bf16")),
        GuestCommand(name="forced", argv=("python3", "-m", "cpukern"), env={"CPUKERN_ISA": FORCED}),
        GuestCommand(name="forced_api", argv=("python3", "-c", RAISE_FORCED), env={"CPUKERN_ISA": FORCED}),
    ]
    result = run_wheel(Path(wheel["wheel"]["path"]), commands, model=MODEL, timeout=900, log=lambda _line: None)
    print(f"bochs {MODEL}: /init after {result.boot_seconds or 0:.1f} s, whole run {result.seconds:.1f} s")
    return result


def built_variants(wheel: dict[str, Any]) -> list[str]:
    return list(wheel["wheel"]["variants"])


def test_the_wheel_holds_every_x86_variant(wheel: dict[str, Any]) -> None:
    assert set(built_variants(wheel)) == {v.name for v in MATRIX.variants_for("x86_64")}


def test_report_selects_the_best_variant_the_model_runs(guest: BochsRun, wheel: dict[str, Any]) -> None:
    report = guest.results["report"]
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["package"] == "/opt/cpubuild/site/cpukern"  # the wheel's own copy inside the guest
    assert set(data["host_features"]) == HAS
    assert set(data["missing_features"]) == LACKS
    expected = runnable(built_variants(wheel))[-1]
    assert data["selected"] == expected == "avx512vnni"
    rows = {row["name"]: row for row in data["variants"]}
    assert rows[FORCED]["supported"] is False and rows[FORCED]["missing"] == ["avx512_bf16"]
    assert rows["amx"]["supported"] is False
    assert set(rows["amx"]["missing"]) == {"avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"}
    assert rows["avx512"]["supported"] is True


def test_selftest_passes_on_every_variant_the_model_runs(guest: BochsRun, wheel: dict[str, Any]) -> None:
    """baseline, avx2, avx512 and avx512vnni: every op in float32, bfloat16 and
    float16, gemm_w8a8 and gemm_bf16, against float64 NumPy references."""
    selftest = guest.results["selftest"]
    data = json.loads(selftest.stdout)
    assert data["failures"] == [], data["failures"]
    assert selftest.returncode == 0, selftest.stderr
    assert data["variants"] == runnable(built_variants(wheel))
    assert {"avx512", "avx512vnni"} <= set(data["variants"])
    assert data["passed"] > 0
    print(f"selftest in the guest: variant {data['variant']}, checked {', '.join(data['variants'])}: "
          f"{data['passed']} passed, {data['failed']} failed")


def test_forcing_a_variant_the_model_lacks_fails_cleanly(guest: BochsRun) -> None:
    forced = guest.results["forced"]
    assert forced.returncode == 1, f"exit {forced.returncode} (128 + 4 would be SIGILL)\n{forced.stderr}"
    assert f"CPUKERN_ISA={FORCED}: this CPU cannot run variant '{FORCED}'; missing features: avx512_bf16" in forced.stderr
    assert "Traceback" not in forced.stderr
    api = guest.results["forced_api"]
    assert api.returncode == 1, api.stderr
    last = api.stderr.strip().splitlines()[-1]
    # the class cpukern exports (cpukern.UnsupportedISAError), defined by the runtime cpubuild ships into it
    assert last.startswith("cpukern._cpubuild.errors.UnsupportedISAError:") and "avx512_bf16" in last, last

