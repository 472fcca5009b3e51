"""The wheel build plan, built without running it: ISA-set resolution, local
labels, config-settings and environment per set - against the real matrix."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest
from cpubuild.errors import UnknownISAError, UsageError
from cpubuild.matrix import Matrix, MatrixError, load_matrix, parse_matrix
from cpubuild.version_provider import ENV_VERSION
from cpubuild.wheelbuild.plan import (
    ALL,
    NATIVE,
    best_runnable,
    build_dir_for,
    isa_label,
    label_segment,
    make_plan,
    resolve_isa_set,
    split_isa_args,
)
from cpubuild.wheelbuild.version import SourceVersion, compose
from packaging.version import Version
from testsupport import CPUKERN_MATRIX, REPO

MATRIX = load_matrix(CPUKERN_MATRIX)
ARCHES = list(MATRIX.arches)
SOURCE = SourceVersion(public="0.1.0.dev12", local=("g1a2b3c4",), source_date_epoch=1_700_000_000, origin="test")


def names(arch: str) -> list[str]:
    return [v.name for v in MATRIX.variants_for(arch)]


def optional(arch: str) -> list[str]:
    return [n for n in names(arch) if n != MATRIX.baseline(arch).name]


def foreign_variant(arch: str) -> str:
    """A variant name that exists for some other arch but not for `arch`."""
    mine = set(names(arch))
    return next(v.name for v in MATRIX.variants if v.arch != arch and v.name not in mine and not v.is_baseline)


# ------------------------------------------------------------------ --isa values


def test_split_accepts_repeats_commas_blanks_and_case() -> None:
    assert split_isa_args(["AVX2, avx512", "avx2", " ", "amx;neon"]) == ["avx2", "avx512", "amx", "neon"]


@pytest.mark.parametrize("arch", ARCHES)
def test_default_and_all_mean_every_variant_in_priority_order(arch: str) -> None:
    for requested in ([], [ALL], [f"{optional(arch)[0]},{ALL}"]):
        isa = resolve_isa_set(MATRIX, arch, requested)
        assert isa.variants == tuple(names(arch))
        assert isa.complete
        assert isa.label == ("cpu",)


@pytest.mark.parametrize("arch", ARCHES)
def test_every_set_carries_the_baseline_first(arch: str) -> None:
    for name in optional(arch):
        isa = resolve_isa_set(MATRIX, arch, [name])
        assert isa.variants == (MATRIX.baseline(arch).name, name)
        assert isa.complete == (len(names(arch)) == 2)


@pytest.mark.parametrize("arch", ARCHES)
def test_baseline_keyword_means_the_arch_baseline_alone(arch: str) -> None:
    isa = resolve_isa_set(MATRIX, arch, ["baseline"])
    assert isa.variants == (MATRIX.baseline(arch).name,)
    assert isa.label == ("cpu", label_segment(MATRIX.baseline(arch).name))


def test_an_explicit_full_list_is_the_all_wheel() -> None:
    arch = "x86_64"
    isa = resolve_isa_set(MATRIX, arch, [",".join(reversed(names(arch)))])
    assert isa.complete and isa.label == ("cpu",)
    assert isa.variants == tuple(names(arch))


@pytest.mark.parametrize("arch", ARCHES)
def test_unknown_isa_is_a_usage_error_listing_the_known_ones(arch: str) -> None:
    with pytest.raises(UnknownISAError) as info:
        resolve_isa_set(MATRIX, arch, ["avx1024"])
    assert info.value.exit_code == 2
    assert "avx1024" in info.value.message
    for name in names(arch):
        assert name in info.value.message


@pytest.mark.parametrize("arch", ARCHES)
def test_isa_of_another_arch_names_that_arch(arch: str) -> None:
    name = foreign_variant(arch)
    owners = sorted({v.arch for v in MATRIX.variants if v.name == name})
    with pytest.raises(UnknownISAError) as info:
        resolve_isa_set(MATRIX, arch, [name])
    assert info.value.exit_code == 2
    assert f"variant of {', '.join(owners)}" in info.value.message and f"not of {arch}" in info.value.message


def test_unknown_arch_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="sparc64"):
        resolve_isa_set(MATRIX, "sparc64", [])


def test_native_uses_the_hosts_best_variant_and_only_for_the_host() -> None:
    arch = "x86_64"
    best = optional(arch)[1]
    isa = resolve_isa_set(MATRIX, arch, [NATIVE], native=lambda: best)
    assert isa.variants == (MATRIX.baseline(arch).name, best)
    with pytest.raises(UsageError, match="native"):
        resolve_isa_set(MATRIX, arch, [NATIVE], native=None)


@pytest.mark.parametrize("arch", ARCHES)
def test_best_runnable_is_the_highest_variant_whose_features_are_all_present(arch: str) -> None:
    variants = MATRIX.variants_for(arch)
    assert best_runnable(MATRIX, arch, []).name == MATRIX.baseline(arch).name
    for v in variants:
        assert best_runnable(MATRIX, arch, v.requires).priority >= v.priority
    everything = {f for v in variants for f in v.requires}
    assert best_runnable(MATRIX, arch, everything).name == variants[-1].name


# ------------------------------------------------------------------ labels


@pytest.mark.parametrize("arch", ARCHES)
def test_two_isa_sets_never_share_a_label(arch: str) -> None:
    """Every subset of the optional variants gets its own wheel filename."""
    seen: dict[tuple[str, ...], tuple[str, ...]] = {}
    opts = optional(arch)
    for size in range(len(opts) + 1):
        for combo in itertools.combinations(opts, size):
            isa = resolve_isa_set(MATRIX, arch, list(combo) or ["baseline"])
            assert isa.label not in seen, f"{combo} and {seen.get(isa.label)} share {isa.label}"
            seen[isa.label] = combo
            # a valid PEP 440 local label, kept verbatim by normalisation
            version = Version(compose("0.1.0", isa.label))
            assert version.local == isa.label_text


def test_label_spelling() -> None:
    arch = "x86_64"
    base = MATRIX.baseline(arch).name
    assert isa_label(MATRIX, arch, names(arch)) == ("cpu",)
    assert isa_label(MATRIX, arch, [base]) == ("cpu", label_segment(base))
    two = optional(arch)[:2]
    assert isa_label(MATRIX, arch, [base, *reversed(two)]) == ("cpu", *map(label_segment, two))


def test_underscores_are_dropped_from_label_segments() -> None:
    assert label_segment("neon_bf16") == "neonbf16"
    assert "_" not in "".join(label_segment(v.name) for v in MATRIX.variants)


def test_label_collisions_are_refused_by_the_matrix_and_by_the_plan() -> None:
    """'ab_c' and 'a_bc' would both be labelled 'abc': the matrix refuses them, and
    the plan checks again for a Matrix made some other way."""
    variants = [{"name": "base", "arch": "x86_64", "priority": 0, "flags": ["-O2"]}]
    variants += [{"name": n, "arch": "x86_64", "priority": i, "requires": ["sse3"], "flags": ["-msse3"]}
                 for i, n in ((10, "ab_c"), (20, "a_bc"))]
    with pytest.raises(MatrixError, match="share the wheel label 'abc'"):
        parse_matrix({"schema": 2, "variant": variants})
    good = parse_matrix({"schema": 2, "variant": variants[:2]})
    clash = replace(good, variants=(*good.variants, replace(good.variants[1], name="a_bc", priority=20)))
    with pytest.raises(UsageError, match="share the wheel label segment 'abc'"):
        resolve_isa_set(clash, "x86_64", ["ab_c"])


# ------------------------------------------------------------------ the plan


def plan_for(requested: list[str], *, ccache: str | None = "/usr/bin/ccache", arch: str = "x86_64"):  # type: ignore[no-untyped-def]
    isa = resolve_isa_set(MATRIX, arch, requested)
    return make_plan(
        matrix=MATRIX, project=Path("/src"), isa=isa, platform="linux-native", source=SOURCE,
        build_root=Path("/cache/build"), out_dir=Path("/out"), frontend="build", isolated=False,
        jobs=2, ccache=ccache, repair=True, clean=False,
    )


def test_plan_config_settings_for_one_variant() -> None:
    name = optional("x86_64")[1]
    plan = plan_for([name])
    base = MATRIX.baseline("x86_64").name
    cs = plan.config_settings
    assert cs["cmake.define.CPUBUILD_ISA"] == f"{base},{name}"
    assert cs["cmake.define.CPUBUILD_ARCH"] == "x86_64"
    assert not any("CPUKERN" in key for key in cs)  # nothing project-specific
    assert cs["build-dir"] == f"/cache/build/x86_64-cpu.{label_segment(name)}"
    assert cs["wheel.reproducible"] == "true"
    assert cs["cmake.build-type"] == "Release"
    assert cs["cmake.define.CMAKE_CXX_COMPILER_LAUNCHER"] == "/usr/bin/ccache"
    assert cs["cmake.define.CMAKE_C_COMPILER_LAUNCHER"] == "/usr/bin/ccache"


def test_plan_environment_carries_version_epoch_and_jobs() -> None:
    name = optional("x86_64")[0]
    plan = plan_for([name])
    assert plan.version == f"0.1.0.dev12+g1a2b3c4.cpu.{label_segment(name)}"
    assert plan.env["CPUBUILD_BUILD_VERSION"] == plan.version  # what cpubuild.version_provider reads
    assert plan.env["CPUBUILD_BUILD_VERSION"] == plan.env[ENV_VERSION]
    assert plan.env["SOURCE_DATE_EPOCH"] == "1700000000"
    assert plan.env["CMAKE_BUILD_PARALLEL_LEVEL"] == "2"
    assert plan.manylinux == MATRIX.arches["x86_64"].manylinux


def test_all_variant_plan() -> None:
    plan = plan_for([])
    assert plan.config_settings["cmake.define.CPUBUILD_ISA"] == ",".join(names("x86_64"))
    assert plan.version == "0.1.0.dev12+g1a2b3c4.cpu"
    assert plan.build_dir == Path("/cache/build/x86_64-cpu")


def test_no_ccache_means_no_launcher() -> None:
    plan = plan_for([], ccache=None)
    # set, and empty: a reused build directory must not keep an earlier build's launcher
    assert {k: v for k, v in plan.config_settings.items() if "LAUNCHER" in k} == {
        "cmake.define.CMAKE_C_COMPILER_LAUNCHER": "", "cmake.define.CMAKE_CXX_COMPILER_LAUNCHER": ""}
    assert plan.config_settings["cmake.define.CPUBUILD_PATH_TOKENS"] == "OFF"
    assert "CCACHE_IGNOREOPTIONS" not in plan.env and "CCACHE_BASEDIR" not in plan.env


def test_ccache_ignores_only_the_build_directory_prefix_map() -> None:
    """Objects do not depend on the build directory (it is mapped away), so every ISA set shares them."""
    assert plan_for([]).env["CCACHE_IGNOREOPTIONS"] == "-ffile-prefix-map=/cache/build/*"
    # unity files live in the build directories: hashed relative to the root
    assert plan_for([]).env["CCACHE_BASEDIR"] == "/cache/build"
    isa = resolve_isa_set(MATRIX, "x86_64", [])
    plan = make_plan(
        matrix=MATRIX, project=Path("/src"), isa=isa, platform="linux-native", source=SOURCE,
        build_root=Path("/cache/build"), out_dir=Path("/out"), frontend="build", isolated=False,
        jobs=2, ccache="/usr/bin/ccache", repair=True, clean=False, inherited_ccache_ignore="-fmessage-length=*",
    )
    assert plan.env["CCACHE_IGNOREOPTIONS"] == "-fmessage-length=* -ffile-prefix-map=/cache/build/*"


def test_each_set_has_its_own_build_dir() -> None:
    dirs = {build_dir_for(Path("/b"), "x86_64", resolve_isa_set(MATRIX, "x86_64", [n])) for n in optional("x86_64")}
    dirs.add(build_dir_for(Path("/b"), "x86_64", resolve_isa_set(MATRIX, "x86_64", [])))
    assert len(dirs) == len(optional("x86_64")) + 1


@pytest.mark.parametrize("arch", ARCHES)
def test_plans_for_other_arches_are_built_the_same_way(arch: str) -> None:
    plan = plan_for(["baseline"], arch=arch)
    assert plan.config_settings["cmake.define.CPUBUILD_ARCH"] == arch
    assert plan.config_settings["cmake.define.CPUBUILD_ISA"] == MATRIX.baseline(arch).name
    assert plan.target == MATRIX.arches[arch] and plan.arch == arch
    assert plan.manylinux == plan.target.manylinux and plan.manylinux.endswith(arch)
    assert plan.build_dir.name == f"{arch}-cpu.{label_segment(MATRIX.baseline(arch).name)}"


def test_static_version_plan_is_relabelled_after_the_build() -> None:
    """A static [project] version: the build sees it as written, the label goes on afterwards."""
    static = SourceVersion(public="2.1.0", local=(), source_date_epoch=1_700_000_000, origin="static")
    isa = resolve_isa_set(MATRIX, "x86_64", [optional("x86_64")[0]])
    plan = make_plan(
        matrix=MATRIX, project=Path("/src"), isa=isa, platform="linux-native", source=static,
        build_root=Path("/b"), out_dir=Path("/out"), frontend="build", isolated=False,
        jobs=1, ccache=None, repair=True, clean=False, relabel=True,
    )
    assert plan.relabel and plan.source_version == "2.1.0"
    assert plan.version == f"2.1.0+cpu.{label_segment(optional('x86_64')[0])}"
    assert not plan_for([]).relabel  # the default: the provider already sets the labelled version


def test_user_config_settings_join_the_plan_but_not_cpubuilds_own() -> None:
    isa = resolve_isa_set(MATRIX, "x86_64", [])
    common = dict(matrix=MATRIX, project=Path("/src"), isa=isa, platform="linux-native", source=SOURCE,
                  build_root=Path("/cache/build"), out_dir=Path("/out"), frontend="build", isolated=False,
                  jobs=2, ccache=None, repair=True, clean=False)
    plan = make_plan(**common, extra_settings={"cmake.build-type": "RelWithDebInfo", "cmake.define.FOO": "1"})  # type: ignore[arg-type]
    assert plan.config_settings["cmake.build-type"] == "RelWithDebInfo"
    assert plan.config_settings["cmake.define.FOO"] == "1"
    assert dict(plan.extra_settings) == {"cmake.build-type": "RelWithDebInfo", "cmake.define.FOO": "1"}
    for key in ("build-dir", "wheel.reproducible", "cmake.define.CPUBUILD_ISA"):
        with pytest.raises(UsageError, match=f"-C {key}: cpubuild sets this config-setting itself"):
            make_plan(**common, extra_settings={key: "x"})  # type: ignore[arg-type]


# ------------------------------------------------------------------ --partial

FLOORED = load_matrix(REPO / "examples" / "vllm-cpu" / "isa_matrix.toml")  # x86_64 floor avx2, aarch64 floor neon


def test_a_floor_is_added_to_every_wheel_but_a_partial() -> None:
    whole = resolve_isa_set(FLOORED, "x86_64", ["amx"])
    assert whole.variants == ("avx2", "amx") and not whole.without_floor
    part = resolve_isa_set(FLOORED, "x86_64", ["amx"], partial=True)
    assert part.variants == ("amx",) and part.without_floor
    assert part.label == whole.label == ("cpu", "amx")  # one label: the build directories tell them apart
    assert build_dir_for(Path("/b"), "x86_64", part) != build_dir_for(Path("/b"), "x86_64", whole)
    for named in (["avx2", "avx512"], ["baseline", "avx512"]):  # the floor where the partial names it
        named_part = resolve_isa_set(FLOORED, "x86_64", named, partial=True)
        assert named_part.variants == ("avx2", "avx512") and not named_part.without_floor
    assert resolve_isa_set(FLOORED, "aarch64", [], partial=True).variants == ("neon", "neon_bf16", "neon_i8mm")


def test_a_partial_tells_cmake_to_leave_the_floor_out_only_when_it_does() -> None:
    def settings(matrix: Matrix, names: list[str], partial: bool) -> dict[str, str]:
        isa = resolve_isa_set(matrix, "x86_64", names, partial=partial)
        plan = make_plan(matrix=matrix, project=Path("/src"), isa=isa, platform="linux-native", source=SOURCE,
                         build_root=Path("/b"), out_dir=Path("/out"), frontend="build", isolated=False, jobs=2,
                         ccache=None, repair=True, clean=False)
        return {k.removeprefix("cmake.define."): v for k, v in plan.config_settings.items() if "CPUBUILD_ISA" in k or "PARTIAL" in k}

    assert settings(FLOORED, ["amx"], True) == {"CPUBUILD_ISA": "amx", "CPUBUILD_PARTIAL": "ON"}
    assert settings(FLOORED, ["amx"], False) == {"CPUBUILD_ISA": "avx2,amx", "CPUBUILD_PARTIAL": "OFF"}
    # a baseline (cpukern's) is in every partial: it is small and every partial must run somewhere
    base = MATRIX.baseline("x86_64").name
    assert settings(MATRIX, ["amx"], True) == {"CPUBUILD_ISA": f"{base},amx", "CPUBUILD_PARTIAL": "OFF"}
