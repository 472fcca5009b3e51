"""vLLM's CPU kernels (examples/vllm-cpu) cross-built for aarch64 and run under QEMU Arm models.

cpubuild (its wheel, in a fresh venv with torch, as users install it) cross-builds
the example's `neon` (vLLM's -march=armv8.2-a+dotprod+fp16, the Arm floor) and
`neon_bf16` (+bf16, ARM_BF16_SUPPORT) and `neon_i8mm` (+i8mm, ARM_I8MM_SUPPORT)
variants of vLLM's unmodified layernorm, activation, pos_encoding and attention
sources against torch 2.9.1's aarch64 wheel: the
last release whose aarch64 wheel on the package registry is a CPU build (vLLM
#43115: since 2.10 it is a CUDA build). The wheel holds no CUDA library, needs
none and requires none. `cpubuild test` then runs it under QEMU: neoverse-n1
(dotprod + fp16, no bf16) picks neon, `max` picks neon_i8mm (and neon_bf16
forced) and runs the
example's selftest (vLLM's ops through torch.ops._C against torch eager, fp32
and bf16), and cortex-a53 (below the floor) imports and refuses cleanly. vLLM's own
kernel tests of these ops (activation, with the Arm-only activation_lut_bf16,
pos_encoding, layernorm) run under QEMU max and neoverse-n1 in the rootfs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from oracle import ARCH
from public_cpubuild import PublicCpubuild, public_cpubuild  # noqa: F401 (a fixture)
from test_torch_project import metadata, torch_cpubuild  # noqa: F401 (a fixture)
from test_vllm_cpu import REGISTERED, pytest_result, vllm_tree  # noqa: F401 (a fixture)
from testsupport import REPO, require, require_host, require_tool, run

pytestmark = [pytest.mark.slow, pytest.mark.cross, pytest.mark.qemu]

EXAMPLE = REPO / "examples" / "vllm-cpu"
AARCH64_TORCH = "2.9.1"
VARIANTS = ("neon", "neon_bf16", "neon_i8mm")
GPU_LIBRARY = re.compile(r"lib(cuda|cudart|cublas|cudnn|nccl|nvrtc|c10_cuda|torch_cuda)\b|nvidia/")


@pytest.fixture(scope="module")
def wheel(torch_cpubuild: PublicCpubuild, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    require_host(ARCH == "x86_64", "cross-built and emulated from an x86_64 host")
    require_tool("cmake", "aarch64-linux-gnu-g++")
    root = tmp_path_factory.mktemp("vllm-aarch64")
    _, summary = torch_cpubuild.json("wheel", "--project", str(EXAMPLE), "--arch", "aarch64", "--torch", AARCH64_TORCH,
                                     "--out", str(root / "out"), "--build-root", str(root / "build"), cwd=root, timeout=3600)
    assert summary["ok"], summary
    assert summary["torch"]["version"] == f"{AARCH64_TORCH}+cpu", summary["torch"]
    return Path(summary["wheel"]["path"])


def test_the_aarch64_wheel_holds_its_variants_and_nothing_of_cuda(wheel: Path, tmp_path: Path) -> None:
    assert wheel.name.endswith("_aarch64.whl") and ".cpu.pt29-" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path)
    libraries = {Path(n).name: tmp_path / n for n in names if n.endswith(".so") or ".so." in n}
    assert {f"_vllm_cpu_ops_{v}.so" for v in (*VARIANTS, "probe")} <= set(libraries), names
    assert not [n for n in names if GPU_LIBRARY.search(n)], names
    for variant in VARIANTS:  # torch's CPU libraries only
        dynamic = subprocess.run(["readelf", "-d", str(libraries[f"_vllm_cpu_ops_{variant}.so"])], capture_output=True,
                                 text=True, check=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
        assert "libtorch_cpu.so" in needed and not [n for n in needed if GPU_LIBRARY.search(n)], needed
    requires = [line for line in metadata(wheel).splitlines() if line.startswith("Requires-Dist:")]
    assert "Requires-Dist: torch==2.9.*" in requires, requires
    assert not [r for r in requires if "nvidia" in r or "cuda" in r], requires


# QEMU 7.2 has no model with BF16 and without I8MM: neon_bf16 is forced under max.
@pytest.mark.parametrize(("cpu", "expect", "checks", "force"),
                         [("neoverse-n1", "neon", False, None), ("max", "neon_i8mm", True, None),
                          ("max", "neon_bf16", True, "neon_bf16"), ("cortex-a53", "none", False, None)])
def test_under_qemu_each_model_gets_its_variant_or_a_clean_refusal(
    torch_cpubuild: PublicCpubuild, wheel: Path, tmp_path: Path, cpu: str, expect: str, checks: bool,  # noqa: F811
    force: str | None,
) -> None:
    require(os.geteuid() == 0, "cpubuild test needs root for the aarch64 rootfs (debootstrap, chroot)")
    require_tool("qemu-aarch64-static", "debootstrap")
    args = ["--checks" if checks else "--no-checks", *(("--force-variant", force, "--expect", force) if force else
                                                       ("--expect", "auto"))]
    code, outcome = torch_cpubuild.json("test", "--arch", "aarch64", "--cpu", cpu, *args, str(wheel),
                                        cwd=tmp_path, check=False, timeout=1800)
    assert code == 0 and outcome["ok"], outcome
    if expect == "none":
        assert outcome["selected"] is None
        assert "no variant for this CPU" in outcome["report_error"] and "asimddp" in outcome["report_error"], outcome
        return
    assert outcome["selected"] == expect, outcome
    if checks:
        assert outcome["checks"]["failed"] == 0 and outcome["checks"]["passed"] >= 36, outcome["checks"]


# vLLM's own tests of the ops this wheel builds, under QEMU, in the cached
# Debian rootfs (the one `cpubuild test` made above): the rootfs holds torch
# 2.9.1; what vLLM's test modules import comes from the example's requirements,
# installed for the rootfs's platform and Python by uv on the host (binary
# wheels only; torch and CUDA's triton left out), cached in the rootfs by the
# requirements' hash. The rootfs has no C++ compiler, which torch.compile's CPU
# backend needs, hence --vllm-cpu-eager (the plugin: vLLM's layers run
# forward_native eagerly, custom ops off as in the compiled default).
VLLM_CORE_TESTS = ("tests/kernels/core/test_cpu_activation.py", "tests/kernels/core/test_pos_encoding.py",
                   "tests/kernels/core/test_layernorm.py")
# vLLM's attention on Arm (its NEON path, vLLM's Arm-only test): one case, 2.5 minutes under QEMU max (its
# other cases hold GPU-sized batches: the encoder one alone ran past 40 minutes)
VLLM_ARM_ATTENTION_CASE = ("tests/kernels/attention/test_cpu_attn.py::test_varlen_with_paged_kv_normal_neon"
                           "[neon-False-False-1024-None-dtype0-None-96-96-num_heads0-seq_lens0]")
TESTING = EXAMPLE / "vllm_cpu_testing"
NOT_IN_THE_ROOTFS = 'torch; sys_platform == "never"\n'  # the rootfs's own torch serves


def requirements_site(root: Path, python: str, extra: tuple[str, ...] = ()) -> PurePosixPath:
    """The test modules' imports for the rootfs (aarch64, CPython `python`) and `extra` requirements,
    made once; the path inside it."""
    texts = [(TESTING / name).read_text(encoding="utf-8") for name in ("requirements.txt", "overrides.txt")]
    digest = hashlib.sha256("\0".join([*texts, NOT_IN_THE_ROOTFS, python, *extra]).encode()).hexdigest()[:16]
    inside = PurePosixPath("/opt/cpubuild-vllm-tests") / digest
    site = root / inside.relative_to("/")
    if not (site / ".complete").is_file():
        require_tool("uv")
        shutil.rmtree(site, ignore_errors=True)
        overrides = site.parent / f"{digest}.overrides.txt"
        site.parent.mkdir(parents=True, exist_ok=True)
        overrides.write_text(texts[1] + NOT_IN_THE_ROOTFS, encoding="utf-8")
        run(["uv", "pip", "install", "-q", "--no-build", "--target", str(site), "--python-platform",
             "aarch64-manylinux_2_28", "--python-version", python, "setuptools",  # torch.utils.cpp_extension's
             *extra, "-r", str(TESTING / "requirements.txt"), "--overrides", str(overrides)], timeout=1800)
        (site / ".complete").write_text("ok\n")
    return inside


@contextlib.contextmanager
def rootfs_python(wheel: Path, vllm_tree: Path, cpu: str, *, libraries: tuple[Path, ...] = (),  # noqa: F811
                  extra: tuple[str, ...] = ()) -> Iterator[tuple[Callable[..., Any], Path, PurePosixPath]]:
    """(run, work, inside): run(python args, env=..., timeout=...) runs the aarch64 rootfs's Python under
    QEMU `cpu` with the wheel installed, vLLM's Python and tests and our plugin importable, `libraries`
    on the loader's path; work is the run's directory here, inside the same seen from the rootfs."""
    require(os.geteuid() == 0, "the aarch64 rootfs needs root (debootstrap, chroot)")
    require_tool("qemu-aarch64-static", "debootstrap")
    from cpubuild.emulate.rootfs import RUN_DIR, Emulator, RootfsSpec, ensure_rootfs, installed_wheel
    from cpubuild.emulate.torchsite import ensure_torch_site, tree_python
    from cpubuild.hardware import hardware

    arch = hardware().arch("aarch64")
    root = ensure_rootfs(RootfsSpec.for_arch(arch))
    torch_site = ensure_torch_site(root, arch, f"{AARCH64_TORCH}+cpu")
    requirements = requirements_site(root, tree_python(root), extra)
    (root / RUN_DIR.relative_to("/")).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vllm-tests-", dir=root / RUN_DIR.relative_to("/")))
    try:
        for name in ("vllm", "tests"):  # vLLM's Python and tests, imported from the tree as on x86_64
            shutil.copytree(vllm_tree / name, work / "src" / name, symlinks=True)
        shutil.copytree(TESTING, work / "example" / "vllm_cpu_testing")
        (work / "lib").mkdir()
        for library in libraries:
            shutil.copy(library, work / "lib" / library.name)
        inside = RUN_DIR / work.name
        with installed_wheel(wheel, root) as wheel_site:
            pythonpath = ":".join([f"{inside}/src", f"{inside}/example", wheel_site, str(requirements), str(torch_site)])
            emulator = Emulator(qemu=arch.qemu, cpu=cpu, root=root)

            def run_python(args: list[str], *, timeout: float, env: dict[str, str] | None = None) -> Any:
                return emulator.run(args, pythonpath=pythonpath, host_python=sys.executable, timeout=timeout,
                                    env={"LD_LIBRARY_PATH": f"{inside}/lib", **(env or {})})

            yield run_python, work, inside
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_vllm_tests_in_rootfs(wheel: Path, vllm_tree: Path, cpu: str, tests: list[str], *, timeout: float,  # noqa: F811
                             env: dict[str, str] | None = None, libraries: tuple[Path, ...] = (),
                             extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """vLLM's tests (paths under its tree, then pytest options) through our plugin, under QEMU `cpu`."""
    with rootfs_python(wheel, vllm_tree, cpu, libraries=libraries, extra=extra) as (run_python, work, inside):
        args = [f"{inside}/src/{arg}" if arg.startswith("tests/") else arg for arg in tests]
        proc = run_python(["-m", "pytest", "-p", "vllm_cpu_testing.plugin", "--noconftest", "-p", "no:cacheprovider",
                           "-q", "-rs", "--vllm-cpu-quick", "--vllm-cpu-eager", f"--junitxml={inside}/junit.xml",
                           f"--rootdir={inside}/src", *args], timeout=timeout, env=env)
        return pytest_result(proc, work / "junit.xml")


@pytest.mark.parametrize(("cpu", "variant", "tests"), [("max", "neon_i8mm", (*VLLM_CORE_TESTS, VLLM_ARM_ATTENTION_CASE)),
                                                       ("neoverse-n1", "neon", VLLM_CORE_TESTS[:1])])
def test_vllms_own_kernel_tests_pass_under_qemu(
    wheel: Path, vllm_tree: Path, cpu: str, variant: str, tests: tuple[str, ...],  # noqa: F811
    record_property: Callable[[str, Any], None],
) -> None:
    """max (bf16, i8mm): the three core files and one NEON attention case; neoverse-n1 (the floor, no bf16):
    the activation file (2 minutes)."""
    result = run_vllm_tests_in_rootfs(wheel, vllm_tree, cpu, list(tests), timeout=3600)
    record_property(f"vllm_tests_{cpu}", result["counts"])
    assert result["returncode"] == 0 and result["counts"]["failures"] == 0 and result["counts"]["errors"] == 0, \
        result["tail"]
    assert result["counts"]["passed"] >= (300 if len(tests) > 1 else 50), result["counts"]
    assert result["variant"] == variant, result["tail"]


# ---------------------------------------------------------------- the full set on Arm (marker vllm_full)
# VLLM_CPU_OPS_FULL=ON cross-built for aarch64: vLLM's every-variant sources,
# shm.cpp (Arm's CCL), conv.cpp with BF16, cpu_fused_moe_int8.cpp with I8MM,
# registered by vLLM's own bindings. utils.cpp links libnuma: Debian's arm64
# package (scripts/setup.sh) for the cross link, and - as the wheel is built
# with --no-repair, like the x86 full set - on the loader's path in the rootfs.
ARM64_LIBNUMA = Path("/usr/lib/aarch64-linux-gnu/libnuma.so.1")
# one op of each of vLLM's Arm #if blocks, per variant (cumulative)
ARM_FULL_OPS = {
    "neon": ("rms_norm", "activation_lut_bf16", "cpu_attention_with_kv_cache", "cpu_fused_moe", "mla_decode_kvcache",
             "fused_gumbel_argmax", "static_scaled_fp8_quant", "init_cpu_memory_env", "shm_allreduce"),
    "neon_bf16": ("causal_conv1d_fwd_cpu",),
    "neon_i8mm": ("cpu_fused_moe_int8",),
}
# vLLM's tests of the full set's ops that run under QEMU in minutes (the fused
# MoE and attention files take hours there: GPU-sized cases, 10-20 s natively)
VLLM_ARM_FULL_TESTS = ("tests/kernels/test_cpu_fused_sampling.py", "tests/kernels/quantization/test_cpu_fp8_quant.py",
                       "tests/kernels/mamba/cpu/test_cpu_gdn_ops.py", "tests/kernels/attention/test_mla_decode_cpu.py")


# vLLM's Arm MoE tests at their smallest shapes (hidden and intermediate 128,
# 8 experts, 1 and 64 tokens: 80 cases of test_cpu_fused_moe.py, its `vec` and
# `neon` paths and the I8MM int8 MoE in three dtypes; the int4 MoE's smallest
# config, one and two tokens) - about 4 minutes under QEMU max; the
# 2880-wide cases are GPU-sized.
VLLM_ARM_MOE_TESTS = ("tests/kernels/moe/test_cpu_fused_moe.py", "tests/kernels/moe/test_cpu_int4_moe.py",
                      "-k", "128-128-8-1] or 128-128-8-64] or (-0-256-512-8-2- and -1])")


@pytest.fixture(scope="module")
def full_wheel(torch_cpubuild: PublicCpubuild, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    require_host(ARCH == "x86_64", "cross-built and emulated from an x86_64 host")
    require_tool("cmake", "aarch64-linux-gnu-g++")
    require(ARM64_LIBNUMA.is_file(), f"{ARM64_LIBNUMA}: no arm64 libnuma (scripts/setup.sh installs libnuma-dev:arm64)")
    root = tmp_path_factory.mktemp("vllm-aarch64-full")
    _, summary = torch_cpubuild.json("wheel", "--project", str(EXAMPLE), "--arch", "aarch64", "--torch", AARCH64_TORCH,
                                     "-C", "cmake.define.VLLM_CPU_OPS_FULL=ON", "--no-repair",
                                     "--out", str(root / "out"), "--build-root", str(root / "build"), cwd=root, timeout=3600)
    assert summary["ok"], summary
    return Path(summary["wheel"]["path"])


@pytest.mark.vllm_full
def test_the_arm_full_set_registers_each_variants_ops_under_qemu(
    full_wheel: Path, vllm_tree: Path, record_property: Callable[[str, Any], None],  # noqa: F811
) -> None:
    with rootfs_python(full_wheel, vllm_tree, "max", libraries=(ARM64_LIBNUMA,)) as (run_python, _, _):
        expected: set[str] = set()
        for variant in VARIANTS:
            proc = run_python(["-c", REGISTERED], timeout=900, env={"VLLM_CPU_OPS_ISA": variant})
            assert proc.returncode == 0, proc.stderr[-3000:]
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            assert result["variant"] == variant
            expected |= set(ARM_FULL_OPS[variant])
            ops = set(result["ops"])
            record_property(f"vllm_ops[{variant}]", len(ops))
            assert expected <= ops, sorted(expected - ops)
            later = {op for v in VARIANTS[VARIANTS.index(variant) + 1:] for op in ARM_FULL_OPS[v]}
            assert not later & ops, sorted(later & ops)


@pytest.mark.vllm_full
def test_vllms_full_set_tests_pass_under_qemu(
    full_wheel: Path, vllm_tree: Path, record_property: Callable[[str, Any], None],  # noqa: F811
) -> None:
    result = run_vllm_tests_in_rootfs(full_wheel, vllm_tree, "max", list(VLLM_ARM_FULL_TESTS), timeout=3600,
                                      libraries=(ARM64_LIBNUMA,), extra=("scipy",))  # the sampling tests' reference
    record_property("vllm_full_tests_max", result["counts"])
    print(f"vLLM full-set tests under QEMU max ({result['variant']}): {result['counts']}")
    assert result["returncode"] == 0 and result["counts"]["failures"] == 0 and result["counts"]["errors"] == 0, \
        result["tail"]
    assert result["variant"] == "neon_i8mm" and result["counts"]["passed"] > 0, result


@pytest.mark.vllm_full
def test_vllms_arm_moe_tests_pass_under_qemu(
    full_wheel: Path, vllm_tree: Path, record_property: Callable[[str, Any], None],  # noqa: F811
) -> None:
    result = run_vllm_tests_in_rootfs(full_wheel, vllm_tree, "max", list(VLLM_ARM_MOE_TESTS), timeout=3600,
                                      libraries=(ARM64_LIBNUMA,), extra=("scipy",))
    record_property("vllm_moe_tests_max", result["counts"])
    print(f"vLLM Arm MoE tests under QEMU max ({result['variant']}): {result['counts']}")
    assert result["returncode"] == 0 and result["counts"]["failures"] == 0 and result["counts"]["errors"] == 0, \
        result["tail"]
    # 80 fused MoE cases + the int4 MoE's 9 less the one torch 2.9.1 cannot run (xfail, the plugin's TORCH_XFAILS)
    assert result["variant"] == "neon_i8mm" and result["counts"]["passed"] >= 88, result
