"""The emulated matrix: real cross-built wheels, run under real QEMU CPU models.

Each case runs `cpubuild test --arch ARCH --cpu MODEL WHEEL --json`, which
installs the wheel into a Python of that arch (a cached Debian rootfs for
aarch64 and s390x; the host's Python for x86_64), reads the dispatcher's
report (`python -m cpukern --json`) and runs `python -m cpukern.selftest`
against float64 NumPy references under that CPU model.

The expected variant is never written down: it follows from each model's
features (facts of the CPU as QEMU 7.2 defines the model, listed below) and
the matrix's `requires`. s390x is big-endian, so its cases are the byte-order
test of every bf16 and int8 path.

Built once per session: the aarch64 and s390x wheels (Debian cross
toolchains), an x86_64 wheel with baseline + avx2, and the two rootfs trees
(cached under /var/cache/cpubuild/rootfs across sessions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cpubuild.matrix import load_matrix
from cpubuild.rootfs import RootfsSpec, cache_dir, ensure_rootfs

from tests.conftest import REPO, require, require_tool, run

pytestmark = [pytest.mark.slow, pytest.mark.qemu, pytest.mark.cross]

MATRIX = load_matrix(REPO / "isa_matrix.toml")
FOREIGN = ("aarch64", "s390x")
# Matrix features of each QEMU 7.2 CPU model: (has, lacks). cortex-a53 is
# ARMv8.0 (no dot product); neoverse-n1 is ARMv8.2 with FP16 and dot product
# but no BF16/I8MM/SVE; `max` has everything TCG implements. On s390x,
# `vxeh=off` switches off vector-enhancements facility 1 (vxe).
MODELS: dict[tuple[str, str], tuple[set[str], set[str]]] = {
    ("aarch64", "cortex-a53"): ({"asimd"}, {"asimdhp", "asimddp", "bf16", "i8mm", "sve"}),
    ("aarch64", "neoverse-n1"): ({"asimd", "asimdhp", "asimddp"}, {"bf16", "i8mm", "sve"}),
    ("aarch64", "max"): ({"asimd", "asimdhp", "asimddp", "bf16", "i8mm", "sve"}, set()),
    ("s390x", "max,vxeh=off"): ({"vx"}, {"vxe"}),
    ("s390x", "max"): ({"vx", "vxe"}, set()),
    ("x86_64", "SandyBridge"): ({"sse2", "sse4_2", "avx"}, {"avx2", "fma", "f16c", "avx512f"}),
    ("x86_64", "Haswell"): ({"sse2", "sse4_2", "avx", "avx2", "fma", "f16c"}, {"avx512f"}),
    ("x86_64", "Nehalem"): ({"sse2", "sse4_2"}, {"avx", "avx2"}),
}
X86_SUBSET = "avx2"


def expected_variant(arch: str, features: set[str], built: list[str]) -> str:
    runnable = [v.name for v in MATRIX.variants_for(arch) if v.name in built and set(v.requires) <= features]
    return runnable[-1]


def build_root() -> Path:
    root = Path(os.environ.get("CPUBUILD_TEST_CACHE") or cache_dir() / "wheel-tests") / "cross"
    root.mkdir(parents=True, exist_ok=True)
    return root


def cpubuild(*args: str, check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", *args]
    return run(cmd, env={**os.environ, "PYTHONPATH": str(REPO / "tools")}, cwd=REPO, check=check, timeout=timeout)


@pytest.fixture(scope="session")
def emulation_ready() -> None:
    require(os.uname().machine == "x86_64", "the emulated matrix runs on an x86_64 host")
    require(os.geteuid() == 0, "needs root (debootstrap, chroot)")
    require_tool("qemu-aarch64-static", "qemu-s390x-static", "qemu-x86_64-static", "debootstrap",
                 "aarch64-linux-gnu-g++", "s390x-linux-gnu-g++", "cmake", "ninja", "auditwheel")
    for arch in FOREIGN:
        qemu = MATRIX.arches[arch].qemu
        require(Path(f"/proc/sys/fs/binfmt_misc/qemu-{qemu}").is_file(),
                f"qemu-{qemu} binfmt handler not registered (run scripts/setup.sh)")


@pytest.fixture(scope="session")
def wheels(emulation_ready: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """arch -> `cpubuild wheel --json` summary; the rootfs trees are made meanwhile."""
    out = tmp_path_factory.mktemp("emulated-wheels")
    with ThreadPoolExecutor(max_workers=len(FOREIGN)) as pool:
        trees = [
            pool.submit(ensure_rootfs, RootfsSpec(arch=a, debian_arch=MATRIX.arches[a].debian_arch, qemu=MATRIX.arches[a].qemu),
                        log=lambda _line: None)
            for a in FOREIGN
        ]
        summaries: dict[str, dict[str, Any]] = {}
        for arch, extra in (("aarch64", []), ("s390x", []), ("x86_64", ["--isa", X86_SUBSET])):
            proc = cpubuild("wheel", "--arch", arch, *extra, "--out", str(out / arch), "--build-root", str(build_root()), "--json")
            summaries[arch] = json.loads(proc.stdout)
        for tree in trees:
            tree.result()  # re-raises a failed debootstrap
    return summaries


def emulate(arch: str, cpu: str, wheel: str, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = cpubuild("test", "--arch", arch, "--cpu", cpu, wheel, "--json", *extra, check=False, timeout=900)
    assert proc.returncode in (0, 1), f"exit {proc.returncode} (a signal or usage error)\n{proc.stdout}\n{proc.stderr}"
    outcome: dict[str, Any] = json.loads(proc.stdout[proc.stdout.index("{"):])
    return proc.returncode, outcome


def test_cross_wheels_are_tagged_for_their_target(wheels: dict[str, dict[str, Any]]) -> None:
    for arch in FOREIGN:
        wheel = wheels[arch]["wheel"]
        assert wheels[arch]["platform"] == "linux-cross"
        assert sorted(wheel["variants"]) == sorted(v.name for v in MATRIX.variants_for(arch)), wheel
        assert wheel["filename"].endswith(f"_{arch}.whl")
        # auditwheel against the target's policy, at or below the matrix's aim
        assert wheel["policy"].startswith("manylinux_") and wheel["policy"].endswith(f"_{arch}")
        major_minor = tuple(int(x) for x in wheel["policy"].split("_")[1:3])
        aim = tuple(int(x) for x in MATRIX.arches[arch].manylinux.split("_")[1:3])
        assert major_minor <= aim, (wheel["policy"], MATRIX.arches[arch].manylinux)


@pytest.mark.parametrize(("arch", "cpu"), list(MODELS), ids=[f"{a}-{c}" for a, c in MODELS])
def test_emulated_model_selects_and_passes(wheels: dict[str, dict[str, Any]], arch: str, cpu: str) -> None:
    has, lacks = MODELS[(arch, cpu)]
    built = wheels[arch]["wheel"]["variants"]
    want = expected_variant(arch, has, built)
    rc, outcome = emulate(arch, cpu, wheels[arch]["wheel"]["path"])
    assert rc == 0 and outcome["ok"], outcome["problems"]
    found = set(outcome["host_features"])
    assert has <= found, f"{cpu}: the probe missed {has - found}"
    assert not lacks & found, f"{cpu}: the probe claims {lacks & found}"
    assert outcome["selected"] == want
    if outcome["checks_skipped"]:  # only where NumPy itself cannot run on the model
        assert arch == "x86_64", outcome["checks_skipped"]
        return
    checks = outcome["checks"]
    assert checks["failed"] == 0 and checks["passed"] > 0, checks["failures"]
    assert want in checks["variants"]
    assert checks["machine_byteorder"] == ("big" if arch == "s390x" else "little")


@pytest.mark.parametrize(
    ("arch", "cpu", "forced"),
    [("aarch64", "cortex-a53", "neon_bf16"), ("aarch64", "neoverse-n1", "sve"), ("s390x", "max,vxeh=off", "vxe"),
     ("x86_64", "SandyBridge", "avx2")],
)
def test_forcing_a_variant_the_model_lacks_fails_cleanly(wheels: dict[str, dict[str, Any]], arch: str, cpu: str, forced: str) -> None:
    has, _ = MODELS[(arch, cpu)]
    missing = [f for f in MATRIX.variant(arch, forced).requires if f not in has]
    assert missing, "the case must force a variant the model cannot run"
    rc, outcome = emulate(arch, cpu, wheels[arch]["wheel"]["path"], "--isa", forced, "--no-checks")
    assert rc == 1 and not outcome["ok"]
    assert outcome["selected"] is None
    error = outcome["report_error"]
    assert error and f"CPUKERN_ISA={forced}" in error and all(f in error for f in missing), error
    assert not any("killed by" in p for p in outcome["problems"]), outcome["problems"]
