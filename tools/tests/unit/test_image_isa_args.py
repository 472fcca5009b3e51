"""Dockerfile build args derived from the matrix: the generated ARG block, its sync
check, and the round trip args -> ISA list that the build stage performs."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
from cpubuild.docker import dockerfile, isa_args
from cpubuild.matrix import Matrix, load_matrix, parse_matrix
from testsupport import CPUKERN_MATRIX

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "docker" / "Dockerfile"


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(CPUKERN_MATRIX)


def _matrix_with_extra_variant() -> Matrix:
    data = tomllib.loads(CPUKERN_MATRIX.read_text())
    data["variant"].append(
        {"name": "avx10", "extends": "amx", "priority": 99, "requires": ["avx512_fp16"], "description": "a future variant",
         "flags": ["-mavx512fp16"]}
    )
    return parse_matrix(data, CPUKERN_MATRIX)


def test_repository_dockerfile_is_in_sync_with_the_matrix(matrix: Matrix) -> None:
    assert isa_args.check_block(DOCKERFILE.read_text(), matrix), "run: cpubuild image --sync-dockerfile"


def test_one_declared_arg_per_optional_variant_and_no_other(matrix: Matrix) -> None:
    expected = {"CPUBUILD_CPU_" + v.name.upper() for v in matrix.variants if not v.is_baseline}
    declared = {a for a in dockerfile.declared_args(DOCKERFILE.read_text()) if a.startswith("CPUBUILD_CPU_")}
    assert declared == expected
    # baselines are in every wheel: no arg can drop them
    assert "CPUBUILD_CPU_BASELINE" not in declared and "CPUBUILD_CPU_NEON" not in declared


def test_a_new_variant_makes_the_block_stale_and_sync_adds_only_its_arg(matrix: Matrix) -> None:
    text = DOCKERFILE.read_text()
    bigger = _matrix_with_extra_variant()
    assert not isa_args.check_block(text, bigger)
    synced = isa_args.sync_block(text, bigger)
    assert isa_args.check_block(synced, bigger)
    assert "ARG CPUBUILD_CPU_AVX10=" in synced
    old_lines, new_lines = text.splitlines(), synced.splitlines()
    added = [line for line in new_lines if line not in old_lines]
    assert added == ["# x86_64: a future variant", "ARG CPUBUILD_CPU_AVX10="]
    assert isa_args.sync_block(synced, bigger) == synced  # idempotent


def test_a_dockerfile_without_markers_is_refused(matrix: Matrix) -> None:
    with pytest.raises(isa_args.IsaArgsError, match="BEGIN cpubuild isa-args"):
        isa_args.check_block("FROM scratch\n", matrix)
    doubled = DOCKERFILE.read_text() + isa_args.render_block(matrix)
    with pytest.raises(isa_args.IsaArgsError):
        isa_args.sync_block(doubled, matrix)


def test_env_with_nothing_set_means_every_variant(matrix: Matrix) -> None:
    for arch in matrix.arches:
        assert isa_args.isas_from_env(matrix, arch, {}) is None
        assert isa_args.isas_from_env(matrix, arch, {"CPUBUILD_CPU_AVX2": ""}) is None


def test_true_selects_exactly_those_plus_the_baseline(matrix: Matrix) -> None:
    env = {"CPUBUILD_CPU_AVX512": "true", "CPUBUILD_CPU_AVX2": "TRUE"}
    assert isa_args.isas_from_env(matrix, "x86_64", env) == ["baseline", "avx2", "avx512"]


def test_false_alone_leaves_a_variant_out_of_all(matrix: Matrix) -> None:
    got = isa_args.isas_from_env(matrix, "x86_64", {"CPUBUILD_CPU_AMX": "false"})
    assert got == [v.name for v in matrix.variants_for("x86_64") if v.name != "amx"]


def test_args_of_other_arches_set_false_are_ignored_and_true_is_an_error(matrix: Matrix) -> None:
    assert isa_args.isas_from_env(matrix, "x86_64", {"CPUBUILD_CPU_NEON_BF16": "false"}) is None
    with pytest.raises(isa_args.IsaArgsError, match=r"CPUBUILD_CPU_NEON_BF16=true names the aarch64 variant 'neon_bf16'; this build is for x86_64"):
        isa_args.isas_from_env(matrix, "x86_64", {"CPUBUILD_CPU_NEON_BF16": "true"})


def test_a_value_that_is_not_a_boolean_is_an_error(matrix: Matrix) -> None:
    with pytest.raises(isa_args.IsaArgsError, match=r"CPUBUILD_CPU_AVX2='maybe': use true or false"):
        isa_args.isas_from_env(matrix, "x86_64", {"CPUBUILD_CPU_AVX2": "maybe"})


def test_build_args_round_trip_through_the_environment_for_every_subset(matrix: Matrix) -> None:
    """What cpubuild passes is what the build stage reads back, for every ISA set."""
    for arch in matrix.arches:
        variants = [v.name for v in matrix.variants_for(arch)]
        optional = variants[1:]
        for size in range(len(optional) + 1):
            for subset in itertools.combinations(optional, size):
                isas = (variants[0], *subset)
                args = isa_args.build_args(matrix, arch, isas)
                # every optional variant of the arch is set explicitly, nothing else
                assert set(args) == {isa_args.arg_name(v) for v in optional}
                back = isa_args.isas_from_env(matrix, arch, args)
                if set(isas) == set(variants):
                    assert back is None
                else:
                    assert back == list(isas)
        assert isa_args.isas_from_env(matrix, arch, isa_args.build_args(matrix, arch, None)) is None


def test_module_entry_point_prints_the_list(matrix: Matrix, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CPUBUILD_CPU_AVX2", "true")
    assert isa_args._main(["--project", str(REPO), "--arch", "x86_64"]) == 0
    assert capsys.readouterr().out.strip() == "baseline,avx2"
    monkeypatch.setenv("CPUBUILD_CPU_AVX2", "perhaps")
    assert isa_args._main(["--project", str(REPO), "--arch", "x86_64"]) == 2
    assert "use true or false" in capsys.readouterr().err


def test_requirements_are_the_build_requirements_but_cpubuild() -> None:
    """The image's build stage installs cpubuild from the wheel of the cpubuild that runs; the rest from PyPI."""
    from cpubuild.docker.requirements import requirements

    reqs = requirements(REPO)
    package = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert reqs == [r for r in package if not r.startswith("cpubuild")]
    assert any(r.startswith("scikit-build-core") for r in reqs) and len(reqs) == len(package) - 1


def test_cpubuild_is_recognised_under_any_spelling_of_its_names(tmp_path: Path) -> None:
    """PEP 503 names: cpubuild_core, Cpubuild.Core and a direct reference are cpubuild too."""
    from cpubuild.docker.requirements import requirements

    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["cpubuild_core>=0.2", "Cpubuild.Core", '
                                             '"cpubuild @ file:///src/tools/cli", "scikit-build-core>=0.10", "torch"]\n')
    assert requirements(tmp_path) == ["scikit-build-core>=0.10", "torch"]
