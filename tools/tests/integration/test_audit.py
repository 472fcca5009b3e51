"""`cpubuild audit` on real builds: clean wheels pass, leaks are caught with
the function's name, declared guarded code passes as "guarded by the project",
a third-party wheel (NumPy's) reports the features NumPy documents."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from public_cpubuild import PublicCpubuild, public_cpubuild  # noqa: F401 (a fixture)
from testsupport import REPO, require_tool, run

pytest.importorskip("iced_x86")
pytest.importorskip("capstone")


def audit(*targets: str | Path, check: bool = False) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", "audit", *map(str, targets)]
    return run(cmd, env={**os.environ, "PYTHONPATH": str(REPO / "tools")}, check=check, timeout=1800)


def manifest(arch: str, variants: list[tuple[str, list[str]]], probe: str = "") -> dict[str, Any]:
    return {"schema": 2, "arch": arch, "probe": probe,
            "variants": [{"name": n, "priority": 10 * i, "requires": r, "built": True, "library": f"_lib_{n}.so"}
                         for i, (n, r) in enumerate(variants)]}


def build_dir(tmp: Path, cc: str, libraries: dict[str, tuple[str, list[str]]], man: dict[str, Any]) -> Path:
    """A package directory as a wheel holds it: libraries compiled by a real compiler, and the manifest."""
    pkg = tmp / "pkg"
    pkg.mkdir()
    for name, (source, flags) in libraries.items():
        src = tmp / f"{name}.c"
        src.write_text(source)
        run([cc, "-O2", "-shared", "-fPIC", *flags, str(src), "-o", str(pkg / name)])
    (pkg / "_manifest.json").write_text(json.dumps(man))
    return tmp


# ------------------------------------------------------------ leaks, fast: compiler + manifest

KERNEL = """
#include <stddef.h>
float kernel_sum(const float *a, size_t n) { float s = 0; for (size_t i = 0; i < n; i++) s += a[i] * a[i]; return s; }
"""


def test_baseline_built_with_a_leaked_mavx2_is_caught(tmp_path: Path) -> None:
    require_tool("gcc")
    root = build_dir(tmp_path, "gcc", {
        "_lib_baseline.so": (KERNEL, ["-march=x86-64", "-mavx2", "-mfma"]),  # a project define that adds -mavx2
        "_lib_avx2.so": (KERNEL, ["-mavx2", "-mfma"]),
    }, manifest("x86_64", [("baseline", []), ("avx2", ["avx", "fma", "avx2"])]))
    proc = audit(root)
    print(proc.stdout)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "pkg/_lib_baseline.so  kernel_sum" in proc.stdout and "needs avx" in proc.stdout
    assert "pkg/_lib_avx2.so  [variant avx2]" in proc.stdout and "_lib_avx2.so  kernel_sum" not in proc.stdout


def test_common_source_compiled_with_variant_flags_in_the_baseline_is_caught(tmp_path: Path) -> None:
    require_tool("gcc")
    common = tmp_path / "common.c"
    common.write_text("float common_scale(float *a, int n, float f) { for (int i = 0; i < n; i++) a[i] *= f; return a[0]; }\n")
    obj = tmp_path / "common.o"
    run(["gcc", "-O3", "-fPIC", "-c", "-mavx512f", str(common), "-o", str(obj)])  # once, with the top variant's flags
    (tmp_path / "w").mkdir()
    root = build_dir(tmp_path / "w", "gcc", {"_lib_baseline.so": (KERNEL, [str(obj)])}, manifest("x86_64", [("baseline", [])]))
    proc = audit(root)
    print(proc.stdout)
    assert proc.returncode == 1 and "common_scale" in proc.stdout and "needs avx512f" in proc.stdout, proc.stdout


@pytest.mark.cross
def test_aarch64_neon_variant_with_a_dotprod_instruction_is_caught(tmp_path: Path) -> None:
    require_tool("aarch64-linux-gnu-gcc")
    source = """
#include <arm_neon.h>
int32x4_t dot_block(int32x4_t acc, int8x16_t a, int8x16_t b) { return vdotq_s32(acc, a, b); }
"""
    root = build_dir(tmp_path, "aarch64-linux-gnu-gcc", {
        "_lib_neon.so": (source, ["-march=armv8.2-a+dotprod"]),  # the neon variant, given dotprod by mistake
        "_lib_neon_dotprod.so": (source, ["-march=armv8.2-a+dotprod+fp16"]),
    }, manifest("aarch64", [("neon", []), ("neon_dotprod", ["asimd", "asimdhp", "asimddp"])]))
    proc = audit(root)
    print(proc.stdout)
    assert proc.returncode == 1, proc.stdout
    assert "pkg/_lib_neon.so  dot_block" in proc.stdout and "sdot" in proc.stdout and "needs asimddp" in proc.stdout
    assert "_lib_neon_dotprod.so  dot_block" not in proc.stdout


def test_a_library_without_a_manifest_reports_what_it_needs(tmp_path: Path) -> None:
    require_tool("gcc")
    src = tmp_path / "k.c"
    src.write_text(KERNEL)
    lib = tmp_path / "k.so"
    run(["gcc", "-O2", "-shared", "-fPIC", "-mavx2", "-mfma", str(src), "-o", str(lib)])
    proc = audit(lib, "--json")
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    (only,) = data["libraries"]
    assert only["role"] == "unmanaged" and only["function_highest"]["kernel_sum"] in ("avx", "fma", "avx2")


def test_bad_targets_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    for target, problem in ((tmp_path / "missing.whl", "no such file"), (tmp_path / "notes.txt", "holds no ELF library")):
        proc = audit(target)
        assert proc.returncode == 2 and problem in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------ a cpubuild project, end to end

LEAK = """
__attribute__((target("avx512f"))) static float wide_sum(const float *a, size_t n)
{ float s = 0; for (size_t i = 0; i < n; i++) s += a[i] * 3.0f; return s; }
__attribute__((visibility("default"))) float leak_entry(const float *a, size_t n) { return wide_sum(a, n); }
"""


@pytest.mark.slow
def test_unguarded_target_attribute_fails_the_build_and_allow_declares_it(
        public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    require_tool("gcc", "cmake", "ninja", "auditwheel", "patchelf")
    project = tmp_path / "leaky"
    public_cpubuild.cli("init", str(project), "--name", "leaky", "--arch", "x86_64", cwd=tmp_path)
    kernel = project / "csrc" / "leaky.c"
    kernel.write_text(kernel.read_text() + "\n#if defined(LEAKY_VARIANT_AVX2)\n" + LEAK.replace("static float", "__attribute__((noinline)) static float") + "#endif\n")
    started = time.monotonic()
    proc = public_cpubuild.cli("wheel", "--isa", "avx2", "--out", str(tmp_path / "out"), cwd=project, check=False)
    print(f"leak build: {time.monotonic() - started:.0f} s")
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode == 1
    assert "instruction audit found" in proc.stderr and "wide_sum" in proc.stderr and "needs avx512f" in proc.stderr
    assert not list((tmp_path / "out").glob("*.whl")) if (tmp_path / "out").exists() else True
    matrix = project / "isa_matrix.toml"
    matrix.write_text(matrix.read_text() + '\n[audit]\nallow = [{symbol = "wide_sum", reason = "called after the project\'s own CPUID check"}]\n')
    proc = public_cpubuild.cli("wheel", "--isa", "avx2", "--out", str(tmp_path / "out"), cwd=project, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "out").glob("*.whl")
    report = public_cpubuild.cli("audit", str(wheel), cwd=tmp_path)  # alone: the wheel records where wide_sum is
    print(report.stdout)
    assert "guarded by the project" in report.stdout and "wide_sum" in report.stdout and "PASS" in report.stdout


@pytest.mark.slow
def test_cpukern_all_variant_wheel_audits_clean(tmp_path: Path) -> None:
    """The all-variant wheel test_wheel_build.py builds (same build root: ccache and the repair cache make it cheap)."""
    from test_wheel_build import build, cache_root

    require_tool("g++", "cmake", "ninja", "auditwheel", "patchelf")
    summary = build("--out", str(tmp_path), "--build-root", str(cache_root() / "root"))
    assert summary["wheel"]["instruction_audit"]["ok"]
    proc = audit(summary["wheel"]["path"], "--json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 0 and data["ok"] and data["manifest"]
    roles = {lib["variant"] or lib["role"]: lib for lib in data["libraries"]}
    assert roles["probe"]["highest"] is None  # the baseline plus its guarded xgetbv
    assert roles["baseline"]["highest"] is None
    for variant, feature in (("avx2", "avx2"), ("avxvnni", "avx_vnni"), ("avx512", "avx512f"), ("avx512vnni", "avx512_vnni"),
                             ("avx512bf16", "avx512_bf16"), ("amx", "amx_bf16")):
        if variant in roles:
            assert feature in roles[variant]["by_feature"], (variant, roles[variant]["by_feature"])
            assert not roles[variant]["warnings"]
    print(audit(summary["wheel"]["path"]).stdout)


@pytest.mark.slow
@pytest.mark.qemu
def test_audit_and_emulator_agree_on_x86_64_variants(tmp_path: Path) -> None:
    """Every x86_64 variant the audit passes runs its selftest under the QEMU model that has
    its features (and no higher variant's): the static proof and an execution agree.
    QEMU 7.2 has no AVX-VNNI or AVX-512 model, so those variants are audited only here."""
    from cpubuild.hardware import hardware
    from cpubuild.matrix import load_matrix
    from test_wheel_build import build, cache_root, cpubuild

    require_tool("g++", "cmake", "ninja", "auditwheel", "patchelf", "qemu-x86_64-static")
    matrix = load_matrix(REPO / "isa_matrix.toml")
    summary = build("--out", str(tmp_path), "--build-root", str(cache_root() / "root"))
    data = json.loads(audit(summary["wheel"]["path"], "--json").stdout)
    clean = {lib["variant"] for lib in data["libraries"] if lib["role"] == "variant" and not lib["violation_count"]}
    ran, unmodelled = [], []
    for variant in matrix.variants_for("x86_64"):
        assert variant.name in clean
        model = next((m for m in hardware().qemu["x86_64"] if set(variant.requires) <= m.features
                      and matrix.best_for("x86_64", m.features).name == variant.name
                      and m.cpu != "Nehalem"), None)  # Nehalem: NumPy's import dies there
        if model is None:
            unmodelled.append(variant.name)
            continue
        started = time.monotonic()
        cpubuild("test", "--arch", "x86_64", "--cpu", model.cpu, "--expect", variant.name, summary["wheel"]["path"])
        ran.append(f"{variant.name} under {model.cpu} ({time.monotonic() - started:.0f} s)")
    print("selftest ran:", ", ".join(ran), "| no QEMU 7.2 model:", ", ".join(unmodelled))
    assert len(ran) >= 2 and set(unmodelled) <= {"avxvnni", "avx512", "avx512vnni", "avx512bf16", "amx"}


@pytest.mark.slow
def test_numpy_wheel_reports_its_documented_baseline_and_dispatch(tmp_path: Path) -> None:
    """NumPy 2.x documents x86-64-v2 as its baseline (SSE3..SSE4.2, POPCNT) and dispatches
    to AVX2/FMA3 (X86_V3), AVX-512 (X86_V4, AVX512_ICL, AVX512_SPR)."""
    run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "numpy>=2.3", "-d", str(tmp_path)],
        timeout=600)
    (wheel,) = tmp_path.glob("numpy-*.whl")
    started = time.monotonic()
    proc = audit(wheel, "--json")
    print(f"numpy audit: {time.monotonic() - started:.0f} s")
    assert proc.returncode == 0  # no manifest: nothing to prove, only to report
    libs = {Path(lib["library"]).name.split(".")[0]: lib for lib in json.loads(proc.stdout)["libraries"]}
    baseline_only = libs["_pcg64"]  # a module without dispatch: the baseline alone
    assert set(baseline_only["by_feature"]) <= {"sse3", "ssse3", "sse4_1", "sse4_2", "popcnt"}
    assert "sse4_1" in baseline_only["by_feature"]
    umath = libs["_multiarray_umath"]["by_feature"]
    assert {"avx2", "fma", "avx512f", "avx512bw", "avx512_fp16"} <= set(umath)
    dispatched = libs["_multiarray_umath"]["function_highest"]
    assert any(name.endswith("_AVX512_SPR") or "AVX512_SPR" in name for name, f in dispatched.items() if f == "avx512_fp16")
    print(audit(wheel).stdout)
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_publish_refuses_a_leaking_wheel_unless_no_audit(tmp_path: Path) -> None:
    from cpubuild.index.wheelfile import write_wheel

    require_tool("gcc")
    (tmp_path / "b").mkdir()
    root = build_dir(tmp_path / "b", "gcc", {"_lib_baseline.so": (KERNEL, ["-mavx2"])}, manifest("x86_64", [("baseline", [])]))
    pkg = root / "pkg"
    files = {f"pkg/{p.name}": p.read_bytes() for p in pkg.iterdir()}
    whl = write_wheel(tmp_path, name="pkg", version="1.0", tag="py3-none-linux_x86_64", files=files)
    index = tmp_path / "index"
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", "publish", str(whl),
           "--to", str(index), "--commit", "a" * 40]
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    refused = run(cmd, env=env, check=False)
    assert refused.returncode == 1 and "instruction audit found" in refused.stderr and "kernel_sum" in refused.stderr
    assert not index.exists() or not any(index.iterdir())
    assert run([*cmd, "--no-audit"], env=env, check=False).returncode == 0
