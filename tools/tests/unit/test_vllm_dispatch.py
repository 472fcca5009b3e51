"""vLLM's x86 dispatch weaknesses, each against cpubuild's dispatcher on examples/vllm-cpu's matrix.

vLLM (0.17 and later, `CpuPlatform.import_kernels`) picks one of three
libraries with two torch probes: any AVX-512 BF16 CPU loads `_C`, built with
AMX flags (Zen 4/5 and Cooper Lake included: vLLM #49640's class), every other
AVX-512 CPU `_C_AVX512` (no VNNI tier), the rest `_C_AVX2`, with no override
and a warning when the import fails. The models are real CPUs' CPUID words
(test_select's table); the decoding and the pick are the dispatcher every
cpubuild package carries, fed vLLM's matrix and its `VLLM_CPU_OPS` prefix.
The integration side (a forced variant refused on this host, below the floor
under QEMU, one library mapped) is tools/tests/integration/test_vllm_cpu.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from cpubuild.contract import load_config
from cpubuild.matrix import load_matrix
from cpubuild.runtime import errors
from cpubuild.runtime import select as sel
from test_select import (
    CASCADE_LAKE,
    COOPER_LAKE,
    HASWELL,
    NEHALEM,
    SANDY_BRIDGE,
    SAPPHIRE_RAPIDS,
    SKYLAKE_SP,
    ZEN3,
    ZEN4,
    Permission,
    X86Model,
)
from testsupport import REPO

EXAMPLE = REPO / "examples" / "vllm-cpu"
MATRIX = load_matrix(EXAMPLE / "isa_matrix.toml")
CONFIG = load_config(EXAMPLE)
PREFIX = CONFIG.env_prefix
MANIFEST = MATRIX.manifest("x86_64", [v.name for v in MATRIX.variants_for("x86_64")], "_vllm_cpu_ops_{variant}.so",
                           probe="_vllm_cpu_ops_probe.so", project=CONFIG.runtime_facts())
VARIANTS = MANIFEST["variants"]
BUILT = [v["name"] for v in VARIANTS]
REQUIRES = {v["name"]: set(v["requires"]) for v in VARIANTS}


def found(model: X86Model, *, amx_permission: bool = True) -> tuple[str, ...]:
    return sel.decode_features(MANIFEST["features"], model.raw(), permission=Permission(amx_permission)).found


def pick(have: Iterable[str], **kw: Any) -> str:
    return str(sel.select_variant(VARIANTS, have, built=BUILT, env_prefix=PREFIX, package="vllm_cpu_ops", **kw).selected)


def vllm_pick(have: Iterable[str]) -> str:
    """vLLM's rule, as its platforms/cpu.py states it (torch.cpu._is_avx512_bf16_supported, _is_avx512_supported)."""
    features = set(have)
    if "avx512_bf16" in features:
        return "_C"
    return "_C_AVX512" if "avx512f" in features else "_C_AVX2"


# vLLM's libraries as cpubuild variants: _C holds AMX code, _C_AVX512 is -mavx512f/vl/bw/dq
VLLM_LIBRARY = {"_C": "amx", "_C_AVX512": "avx512", "_C_AVX2": "avx2"}


@pytest.mark.parametrize(
    ("model", "ours", "vllms"),
    [
        (HASWELL, "avx2", "_C_AVX2"),
        (ZEN3, "avx2", "_C_AVX2"),
        (SKYLAKE_SP, "avx512", "_C_AVX512"),
        (CASCADE_LAKE, "avx512vnni", "_C_AVX512"),  # vLLM has no VNNI tier
        (COOPER_LAKE, "avx512bf16", "_C"),  # vLLM loads its AMX build on a CPU without AMX
        (ZEN4, "avx512bf16", "_C"),
        (SAPPHIRE_RAPIDS, "amx", "_C"),
    ],
    ids=lambda x: x.name.split(" (")[0] if isinstance(x, X86Model) else None,
)
def test_each_cpu_gets_the_best_variant_it_runs(model: X86Model, ours: str, vllms: str) -> None:
    have = set(found(model))
    assert pick(have) == ours
    assert REQUIRES[ours] <= have
    assert vllm_pick(have) == vllms
    # where vLLM's library needs features the CPU lacks, ours is a different, runnable one
    if not REQUIRES[VLLM_LIBRARY[vllms]] <= have:
        assert ours != VLLM_LIBRARY[vllms]


@pytest.mark.parametrize("model", [COOPER_LAKE, ZEN4], ids=["Cooper Lake", "Zen 4"])
def test_avx512_bf16_without_amx_never_gets_the_amx_variant(model: X86Model) -> None:
    have = set(found(model))
    assert {"avx512_bf16", "avx512_vnni"} <= have and not {"amx_tile", "amx_bf16"} & have
    assert pick(have) == "avx512bf16"
    rows = {s.name: s for s in sel.select_variant(VARIANTS, have, built=BUILT, env_prefix=PREFIX).variants}
    assert rows["amx"].missing == ("amx_tile", "amx_bf16") and not rows["amx"].supported


def test_amx_that_the_os_does_not_grant_falls_back_to_avx512bf16() -> None:
    """Sapphire Rapids under a kernel that refuses the AMX tile-data permission (Linux < 5.16, or a sandbox)."""
    assert pick(found(SAPPHIRE_RAPIDS, amx_permission=False)) == "avx512bf16"


def test_an_override_forces_a_variant_the_cpu_runs_and_refuses_one_it_lacks() -> None:
    """vLLM has no override; VLLM_CPU_OPS_ISA forces one, checked against the CPU."""
    have = found(SAPPHIRE_RAPIDS)
    assert pick(have, forced="avx512vnni") == "avx512vnni"
    with pytest.raises(errors.UnsupportedISAError) as refused:
        pick(found(ZEN4), forced="amx")
    assert refused.value.missing == ["amx_tile", "amx_bf16"]
    assert str(refused.value).startswith(f"{PREFIX}_ISA=amx: this CPU cannot run variant 'amx'")


@pytest.mark.parametrize("model", [NEHALEM, SANDY_BRIDGE], ids=["Nehalem", "Sandy Bridge"])
def test_below_the_avx2_floor_is_a_clean_error_naming_the_missing_features(model: X86Model) -> None:
    """vLLM's x86 code needs AVX2: below it, an error naming what the floor needs (vLLM: an import warning, then SIGILL or missing ops)."""
    with pytest.raises(errors.NoVariantError) as none:
        pick(found(model))
    assert "avx2" in none.value.missing
    assert "avx2" in str(none.value)
