"""vLLM's full CPU extension: examples/vllm-cpu with VLLM_CPU_OPS_FULL=ON, under vLLM's tests for its ops.

Every vLLM x86 source that needs only torch, OpenMP and libnuma, compiled per
variant as vLLM does (shm and WNA16 from avx512 up, the 22 sgl-kernels from
avx512bf16 up) and registered by vLLM's own csrc/cpu/torch_bindings.cpp, minus
the oneDNN ops it cannot build. Every variant this CPU runs is built and
tested (vLLM's core files and the full set's): 31.5 minutes on the 2-core
Emerald Rapids class host (all five x86 variants, compiled cold as unity
units, then vLLM's tests), too much for the CI run: the `vllm_full` marker is
deselected by default (pyproject.toml) and run by hand:

    python -m pytest -m vllm_full tools/tests/integration/test_vllm_cpu_full.py

The wheel is built with --no-repair: the repair step refuses to bundle the
build host's libnuma when it needs a newer glibc than the matrix's
manylinux_2_28 (Debian 12's does); examples/vllm-cpu/README.md says how to
build the full wheel in an image whose libnuma fits.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cpubuild.matrix import Matrix
from oracle import ARCH
from public_cpubuild import PublicCpubuild, fresh_venv, public_cpubuild  # noqa: F401 (a fixture)
from test_torch_project import torch_requirement
from test_vllm_cpu import (  # noqa: F401 (fixtures)
    EXAMPLE,
    PACKAGE,
    PREFIX,
    REGISTERED,
    TESTING,
    VLLM_TESTS,
    assert_vllm_tests_pass,
    built_variants,
    env,
    matrix,
    run_vllm_tests,
    runnable_variants,
    vllm_tree,
)
from testsupport import require_host, require_tool, run

pytestmark = [pytest.mark.slow, pytest.mark.vllm_full]

# vLLM's tests of the full set's ops (vLLM 0.33.0's tests/ tree); each skips by
# vLLM's own conditions what needs another ISA (AMX, Arm).
VLLM_FULL_TESTS = (
    "tests/kernels/moe/test_cpu_fused_moe.py",
    "tests/kernels/moe/test_cpu_int4_moe.py",
    "tests/kernels/moe/test_cpu_quant_fused_moe.py",
    "tests/kernels/test_cpu_fused_sampling.py",
    "tests/kernels/quantization/test_cpu_fp8_quant.py",
    "tests/kernels/quantization/test_cpu_fp8_scaled_mm.py",
    "tests/kernels/attention/test_mla_decode_cpu.py",
    "tests/kernels/attention/test_amx_mla.py",
    "tests/kernels/mamba/cpu/test_cpu_gdn_ops.py",
    "tests/kernels/test_deepseek_v4_cpu_kernels.py",
)

# Which of vLLM's ops a variant registers, by the #if blocks of vLLM's bindings
# (one op of each block): every x86 variant, AVX-512F (shm, WNA16), AVX-512
# BF16 + VNNI (the sgl-kernels); the oneDNN ops never (not built here).
EVERY_VARIANT = ("rms_norm", "cpu_fused_moe", "fused_gumbel_argmax", "mla_decode_kvcache", "dynamic_4bit_int_moe",
                 "chunk_gated_delta_rule_cpu", "static_scaled_fp8_quant", "cpu_attention_with_kv_cache",
                 "init_cpu_memory_env", "rejection_greedy_sample_kernel_impl")
FROM_AVX512F = ("shm_allreduce", "cpu_gemm_wna16")
FROM_AVX512BF16 = ("fused_experts_cpu", "weight_packed_linear", "int4_scaled_mm_cpu", "decode_attention_cpu")
NOT_BUILT = ("onednn_mm", "create_onednn_mm_handler", "static_scaled_int8_quant")


@pytest.fixture(scope="module")
def wheel(public_cpubuild: PublicCpubuild, matrix: Matrix, vllm_tree: Path,  # noqa: F811
          tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_host(ARCH == "x86_64", "the full set is vLLM's x86 source list")
    require_tool("cmake")
    root = tmp_path_factory.mktemp("vllm-cpu-full")
    fresh_venv(root / "venv", *map(str, public_cpubuild.wheels), "scikit-build-core", *torch_requirement())
    builder = PublicCpubuild(venv=root / "venv", wheels=public_cpubuild.wheels)
    _, summary = builder.json("wheel", "--project", str(EXAMPLE), "--isa", ",".join(runnable_variants(matrix)),
                              "-C", "cmake.define.VLLM_CPU_OPS_FULL=ON", "--no-repair",
                              "--out", str(root / "out"), "--build-root", str(root / "build"), cwd=root, timeout=7200)
    assert summary["ok"], summary
    return Path(summary["wheel"]["path"])


@pytest.fixture(scope="module")
def python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_venv(tmp_path_factory.mktemp("vllm-full-venv") / "venv", str(wheel), *torch_requirement(),
                      "-r", str(TESTING / "requirements.txt"), "scipy", "--overrides", str(TESTING / "overrides.txt"))


def test_each_variant_registers_vllms_ops_for_its_isa(python: Path, matrix: Matrix, tmp_path: Path,  # noqa: F811
                                                      record_property: Callable[[str, Any], None]) -> None:
    for variant in runnable_variants(matrix):
        proc = run([str(python), "-c", REGISTERED], env=env(**{f"{PREFIX}_ISA": variant}), cwd=tmp_path, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout)
        ops, features = set(result["ops"]), set(matrix.variant(ARCH, variant).requires)
        record_property(f"vllm_ops[{variant}]", len(ops))
        assert result["variant"] == variant
        expected = {*EVERY_VARIANT, *(FROM_AVX512F if "avx512f" in features else ()),
                    *(FROM_AVX512BF16 if "avx512_bf16" in features else ())}
        assert expected <= ops, sorted(expected - ops)
        absent = {*NOT_BUILT, *(() if "avx512f" in features else FROM_AVX512F),
                  *(() if "avx512_bf16" in features else FROM_AVX512BF16)}
        assert not absent & ops, sorted(absent & ops)


def test_vllm_full_set_tests_pass_on_every_variant_this_cpu_runs(
    python: Path, vllm_tree: Path, matrix: Matrix, tmp_path: Path,  # noqa: F811
    record_property: Callable[[str, Any], None]
) -> None:
    runs = runnable_variants(matrix)
    assert runs and set(runs) <= set(built_variants(python, tmp_path))
    for variant in runs:
        result = run_vllm_tests(python, vllm_tree, tmp_path / f"{variant}.xml", (*VLLM_TESTS, *VLLM_FULL_TESTS),
                                **{f"{PREFIX}_ISA": variant})
        record_property(f"vllm_full_tests[{variant}]", result["counts"])
        print(f"vLLM full-set tests, {variant} (forced): {result['counts']}")
        assert_vllm_tests_pass(result, variant)
