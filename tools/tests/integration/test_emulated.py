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
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cpubuild.emulate.rootfs import RootfsSpec, cache_dir, ensure_rootfs
from cpubuild.hardware import hardware
from cpubuild.matrix import load_matrix
from cross_cmake import build_here
from testsupport import REPO, require, require_host, require_tool, run, skip_host_fact

pytestmark = [pytest.mark.slow, pytest.mark.qemu, pytest.mark.cross]

MATRIX = load_matrix(REPO / "isa_matrix.toml")
FOREIGN = ("aarch64", "s390x")
# Features of each QEMU 7.2 CPU model, as cpubuild's hardware data lists them:
# (has, lacks). cortex-a53 is ARMv8.0 (no dot product); neoverse-n1 is ARMv8.2
# with FP16 and dot product but no BF16/I8MM/SVE; `max` has everything TCG
# implements, `max,sve=off` all of it but SVE. On s390x, `vxeh=off` switches
# off vector-enhancements facility 1 (vxe). The probe must find exactly these:
# that checks the data `cpubuild ci` and `cpubuild test --expect auto` use.
MODELS: dict[tuple[str, str], tuple[set[str], set[str]]] = {
    (arch, m.cpu): (set(m.features), set(hardware().features[arch]) - set(m.features))
    for arch in ("aarch64", "s390x", "x86_64") for m in hardware().qemu[arch]
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
    require_host(os.uname().machine == "x86_64", "the emulated matrix runs on an x86_64 host")
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
            pool.submit(ensure_rootfs, RootfsSpec.for_arch(MATRIX.arches[a]),
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
    if outcome["checks_skipped"]:  # only where NumPy itself cannot run on the model: said, not hidden
        assert arch == "x86_64" and outcome["checks_skipped"].startswith("NumPy cannot import under"), outcome
        skip_host_fact(f"selection checked; {outcome['checks_skipped']}, so no numerical check runs on {cpu}")
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
    rc, outcome = emulate(arch, cpu, wheels[arch]["wheel"]["path"], "--force-variant", forced, "--no-checks")
    assert rc == 1 and not outcome["ok"]
    assert outcome["selected"] is None
    error = outcome["report_error"]
    assert error and f"CPUKERN_ISA={forced}" in error and all(f in error for f in missing), error
    assert not any("killed by" in p for p in outcome["problems"]), outcome["problems"]


# ------------------------------------------------------------------ static ISA content
# What QEMU cannot show (no emulated CPU runs AMX; a kernel could silently
# fall back to generic code) is read from the binaries: each variant library
# must contain the instructions of the ISA it is named for, and the libraries
# a lesser CPU loads must contain none of them.
ISA_MNEMONICS = {
    # aarch64: Armv8.6 BF16 (BFCVTN/BFDOT/BFMMLA), SVE predication, dot product
    "bf16": r"bfcvtn2?|bfdot|bfmmla|bfmlal[bt]",
    "sve": r"ptrue|whilelo|whilelt",
    "asimddp": r"sdot|udot",
    # s390x: any vector-facility instruction (z13+), and VXE's float vectors (z14+)
    "vx": r"v[a-z0-9]+|w[a-z]+db|w[a-z]+sb",
    "vxe": r"vfasb|vfmsb|vfmasb|vfssb|vfdsb|wfasb",
}


def mnemonics(objdump: str, library: Path) -> list[str]:
    text = run([objdump, "-d", "--no-show-raw-insn", str(library)]).stdout
    return [line.split("\t")[1].split()[0] for line in text.splitlines() if line.count("\t") >= 1 and line.startswith(" ")]


def unpack_libraries(wheel: str, dest: Path) -> dict[str, Path]:
    import zipfile

    libs = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            stem = Path(name).name
            if stem.startswith("_cpukern_") and stem.endswith(".so"):
                libs[stem[len("_cpukern_"):-len(".so")]] = Path(z.extract(name, dest))
    return libs


@pytest.mark.parametrize("arch", FOREIGN)
def test_variant_libraries_contain_their_isa(wheels: dict[str, dict[str, Any]], arch: str, tmp_path: Path) -> None:
    import re

    objdump = f"{MATRIX.arches[arch].triplet}-objdump"
    require_tool(objdump)
    libs = unpack_libraries(wheels[arch]["wheel"]["path"], tmp_path)
    checked = [f for f in ISA_MNEMONICS if f in MATRIX.features[arch]]
    for name, library in libs.items():
        requires = set() if name == "probe" else set(MATRIX.variant(arch, name).requires)
        used = mnemonics(objdump, library)
        for feature in checked:
            count = sum(1 for m in used if re.fullmatch(ISA_MNEMONICS[feature], m))
            if feature not in requires:
                assert count == 0, f"{arch} {name}: {count} {feature} instructions, but it runs on CPUs without {feature}"
            elif feature != "asimddp":  # dot products come with the int8 GEMM only
                assert count > 0, f"{arch} {name}: requires {feature} but uses none of its instructions"


@pytest.fixture(scope="module")
def amx_build() -> Path:
    """baseline + amx built from this tree (CMake directly, ccache; a cached build dir)."""
    require_host(os.uname().machine == "x86_64", "x86_64 host only")
    require_tool("g++", "cmake", "ninja", "objdump")
    build = build_root() / "amx-libraries"
    launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
    build_here(build, "-DCPUBUILD_ISA=amx", *launcher)
    return build


def test_amx_variant_is_built_with_tile_instructions(amx_build: Path) -> None:
    """AMX executes nowhere here (no AMX in this CPU, none in QEMU 7.2): the
    amx library must at least be built with tile instructions, and only it."""
    tile = {"ldtilecfg", "tdpbf16ps", "tdpbssd", "tdpbusd", "tileloadd", "tilestored", "tilerelease", "tilezero"}
    libraries = sorted(amx_build.glob("_cpukern_*.so"))
    assert {p.name for p in libraries} >= {"_cpukern_amx.so", "_cpukern_baseline.so", "_cpukern_probe.so"}
    for library in libraries:
        name = library.name[len("_cpukern_"):-len(".so")]
        used = set(mnemonics("objdump", library))
        if name == "amx":
            assert {"ldtilecfg", "tdpbf16ps", "tileloadd"} <= used, sorted(used & tile)
        else:
            assert not used & tile, f"{name} contains AMX instructions {sorted(used & tile)}"
