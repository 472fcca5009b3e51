"""`cpubuild image` planning without Docker: platforms, ISA sets per platform,
tags, wheels given on the command line, and the bake file it writes."""

from __future__ import annotations

import json
import re
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from cpubuild.docker import bake, dockerfile, plan
from cpubuild.docker.images import make_specs
from cpubuild.docker.platforms import parse_platforms, wheel_arch
from cpubuild.errors import UnknownISAError, UsageError
from cpubuild.hardware import Arch
from cpubuild.matrix import Matrix, load_matrix
from testsupport import CPUKERN_MATRIX

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE_TEXT = (REPO / "docker" / "Dockerfile").read_text()  # cpukern keeps its rendered copy


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(CPUKERN_MATRIX)


def _names(matrix: Matrix, arch: str) -> list[str]:
    return [v.name for v in matrix.variants_for(arch)]


def _specs(matrix: Matrix, **kw: object) -> list[plan.ImageSpec]:
    options: dict[str, object] = {
        "isa": (),
        "platforms": (),
        "target": "runtime",
        "tag": None,
        "base": None,
        "wheels": (),
        "each_variant": False,
        "default_base": lambda arch: f"base-{arch.debian_arch}",
        "repository": "cpukern",
    }
    options.update(kw)
    return make_specs(matrix, **options)  # type: ignore[arg-type]


# ------------------------------------------------------------------ platforms


def test_platforms_map_to_matrix_arches_in_order(matrix: Matrix) -> None:
    arches = parse_platforms(matrix.arches, ["linux/arm64,linux/amd64", "linux/arm64"])
    assert [a.name for a in arches] == ["aarch64", "x86_64"]


def test_no_platform_means_this_host(matrix: Matrix) -> None:
    import os

    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(os.uname().machine, os.uname().machine)
    assert [a.name for a in parse_platforms(matrix.arches, [])] == [machine]


def test_unknown_platform_is_a_usage_error_listing_the_known(matrix: Matrix) -> None:
    with pytest.raises(UsageError, match=r"unknown platform 'linux/ppc64le' \(known: linux/amd64, linux/arm64, linux/s390x\)"):
        parse_platforms(matrix.arches, ["linux/ppc64le"])


@pytest.mark.parametrize(
    ("filename", "arch"),
    [
        ("cpukern-0.1.0-py3-none-linux_x86_64.whl", "x86_64"),
        ("cpukern-0.1.0.dev3+g1234567.cpu-py3-none-manylinux_2_28_aarch64.whl", "aarch64"),
        ("cpukern-0.1.0-py3-none-manylinux_2_17_s390x.manylinux2014_s390x.whl", "s390x"),
    ],
)
def test_wheel_arch_from_the_platform_tag(matrix: Matrix, filename: str, arch: str) -> None:
    assert wheel_arch(matrix.arches, Path(filename)).name == arch


def test_wheel_without_a_known_arch_is_refused(matrix: Matrix) -> None:
    with pytest.raises(UsageError, match="names no single arch"):
        wheel_arch(matrix.arches, Path("cpukern-0.1.0-py3-none-any.whl"))
    with pytest.raises(UsageError, match="not a wheel file name"):
        wheel_arch(matrix.arches, Path("cpukern.tar.gz"))


# ------------------------------------------------------------------ ISA sets


def test_default_isa_set_is_every_variant_of_each_platform(matrix: Matrix) -> None:
    arches = parse_platforms(matrix.arches, ["linux/amd64,linux/arm64"])
    assert plan.resolve_isas(matrix, arches, []) == {"x86_64": None, "aarch64": None}
    assert plan.resolve_isas(matrix, arches, ["all"]) == {"x86_64": None, "aarch64": None}


def test_named_isas_go_to_their_platform_with_its_baseline(matrix: Matrix) -> None:
    arches = parse_platforms(matrix.arches, ["linux/amd64,linux/arm64"])
    got = plan.resolve_isas(matrix, arches, ["avx512,neon_bf16", "avx2"])
    assert got == {"x86_64": ("baseline", "avx2", "avx512"), "aarch64": ("neon", "neon_bf16")}


def test_naming_every_variant_is_the_all_set(matrix: Matrix) -> None:
    arches = parse_platforms(matrix.arches, ["linux/amd64"])
    assert plan.resolve_isas(matrix, arches, _names(matrix, "x86_64")[1:]) == {"x86_64": None}


def test_an_isa_of_another_platform_is_refused_by_name(matrix: Matrix) -> None:
    arches = parse_platforms(matrix.arches, ["linux/amd64"])
    with pytest.raises(UnknownISAError, match=r"ISA 'neon_bf16' is a variant of linux/arm64, not of linux/amd64"):
        plan.resolve_isas(matrix, arches, ["neon_bf16"])


def test_unknown_isa_lists_each_platforms_variants(matrix: Matrix) -> None:
    arches = parse_platforms(matrix.arches, ["linux/amd64"])
    with pytest.raises(UnknownISAError, match=r"unknown ISA 'avx1024' \(linux/amd64: baseline, avx2"):
        plan.resolve_isas(matrix, arches, ["avx1024"])


def test_a_platform_left_without_isa_is_refused(matrix: Matrix) -> None:
    arches = parse_platforms(matrix.arches, ["linux/amd64,linux/arm64"])
    with pytest.raises(UnknownISAError, match="no --isa names a variant of linux/arm64"):
        plan.resolve_isas(matrix, arches, ["avx2"])


def test_all_mixed_with_names_is_refused(matrix: Matrix) -> None:
    with pytest.raises(UsageError, match="cannot be combined"):
        plan.resolve_isas(matrix, parse_platforms(matrix.arches, []), ["all,avx2"])


# ------------------------------------------------------------------ tags and specs


def test_default_tags_name_target_arch_and_subset(matrix: Matrix) -> None:
    specs = _specs(matrix, platforms=("linux/amd64,linux/arm64",), isa=("avx2,neon_dotprod",))
    assert [s.tag for s in specs] == ["cpukern:runtime-amd64-avx2", "cpukern:runtime-arm64-neon_dotprod"]
    specs = _specs(matrix, platforms=("linux/s390x",), target="test")
    assert [s.tag for s in specs] == ["cpukern:test-s390x"]


def test_given_tag_is_kept_for_one_image_and_suffixed_for_several(matrix: Matrix) -> None:
    assert [s.tag for s in _specs(matrix, platforms=("linux/amd64",), tag="me/kern:1.0")] == ["me/kern:1.0"]
    several = _specs(matrix, platforms=("linux/amd64,linux/arm64",), tag="me/kern:1.0")
    assert [s.tag for s in several] == ["me/kern:1.0-amd64", "me/kern:1.0-arm64"]
    port = _specs(matrix, platforms=("linux/amd64,linux/arm64",), tag="localhost:5000/kern")
    assert [s.tag for s in port] == ["localhost:5000/kern:amd64", "localhost:5000/kern:arm64"]


def test_each_variant_adds_one_image_per_variant(matrix: Matrix) -> None:
    specs = _specs(matrix, platforms=("linux/amd64",), each_variant=True)
    names = _names(matrix, "x86_64")
    assert [s.isas for s in specs] == [None, ("baseline",), *[("baseline", n) for n in names[1:]]]
    assert len({s.tag for s in specs}) == len(specs)


def test_build_args_select_the_set_and_the_wheel_source(matrix: Matrix) -> None:
    spec = _specs(matrix, platforms=("linux/amd64",), isa=("avx2",))[0]
    args = spec.build_args(matrix)
    assert args["CPUBUILD_CPU_AVX2"] == "true"
    assert all(args[f"CPUBUILD_CPU_{n.upper()}"] == "false" for n in _names(matrix, "x86_64")[2:])
    assert args["CPUBUILD_WHEEL_SOURCE"] == "compile"
    assert args["CPUBUILD_BASE"] == "base-amd64"
    assert set(args) <= dockerfile.declared_args(DOCKERFILE_TEXT)


def _fake_wheel(tmp: Path, arch: str, variants: list[str], filename: str) -> Path:
    """A wheel shaped like cpukern's: a manifest naming libraries, some present."""
    path = tmp / filename
    manifest = {"arch": arch, "variants": [{"name": v, "library": f"_cpukern_{v}.so"} for v in variants]}
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("cpukern/_manifest.json", json.dumps(manifest))
        for v in variants:
            zf.writestr(f"cpukern/_cpukern_{v}.so", b"\x7fELF")
    return path


def test_a_given_wheel_picks_platform_and_isa_label(matrix: Matrix, tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path, "aarch64", ["neon", "neon_dotprod"], "cpukern-0.1.0-py3-none-manylinux_2_28_aarch64.whl")
    (spec,) = _specs(matrix, wheels=(wheel,))
    assert spec.arch.name == "aarch64" and spec.isas == ("neon", "neon_dotprod") and spec.wheel == wheel
    assert spec.build_args(matrix)["CPUBUILD_WHEEL_SOURCE"] == "context"
    assert spec.tag == "cpukern:runtime-arm64-neon_dotprod"


def test_a_wheel_that_contradicts_isa_is_refused(matrix: Matrix, tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path, "x86_64", _names(matrix, "x86_64"), "cpukern-0.1.0-py3-none-linux_x86_64.whl")
    with pytest.raises(UsageError, match=r"holds all .* but --isa asks for avx2 on linux/amd64"):
        _specs(matrix, wheels=(wheel,), isa=("avx2",))


def test_a_wheel_outside_the_platforms_is_refused(matrix: Matrix, tmp_path: Path) -> None:
    wheel = _fake_wheel(tmp_path, "aarch64", ["neon"], "cpukern-0.1.0-py3-none-manylinux_2_28_aarch64.whl")
    with pytest.raises(UsageError, match="which --platform leaves out"):
        _specs(matrix, wheels=(wheel,), platforms=("linux/amd64",))
    with pytest.raises(UsageError, match="no such file"):
        _specs(matrix, wheels=(tmp_path / "cpukern-0.1.0-py3-none-linux_x86_64.whl",))


# ------------------------------------------------------------------ bake


def _bake(matrix: Matrix) -> tuple[list[plan.ImageSpec], dict[str, object]]:
    specs = _specs(
        matrix, platforms=("linux/amd64,linux/arm64,linux/s390x",), each_variant=True, default_base=lambda a: "debian:bookworm-slim"
    )
    document = bake.bake_document(matrix, specs, dockerfile="docker/Dockerfile")
    return specs, json.loads(json.dumps(document))  # what a JSON reader gets


def test_bake_has_one_image_target_per_platform_and_isa_set(matrix: Matrix) -> None:
    specs, document = _bake(matrix)
    targets = document["target"]
    assert isinstance(targets, dict)
    images = {n: t for n, t in targets.items() if t["target"] == "runtime"}
    expected_pairs = {(a.docker_platform, s) for a in matrix.arches.values() for s in [None, *_single_sets(matrix, a)]}
    got_pairs = {(t["platforms"][0], _isas_of(matrix, t)) for t in images.values()}
    assert got_pairs == expected_pairs
    assert len(images) == len(specs) == len(expected_pairs)
    # every image target has a wheel-export twin with a local output
    wheels = {n: t for n, t in targets.items() if t["target"] == "wheel"}
    assert len(wheels) == len(images)
    assert all(t["output"][0].startswith("type=local,dest=") for t in wheels.values())


def _single_sets(matrix: Matrix, arch: Arch) -> list[tuple[str, ...]]:
    names = _names(matrix, arch.name)
    sets = [(names[0],), *[(names[0], n) for n in names[1:]]]
    return [s for s in sets if len(s) < len(names)]  # one holding every variant is the `all` image


def _isas_of(matrix: Matrix, target: dict[str, object]) -> tuple[str, ...] | None:
    """Independent reading of a target's args: which variants it turns on."""
    args = target["args"]
    assert isinstance(args, dict)
    platform = target["platforms"][0]  # type: ignore[index]
    arch = next(a for a in matrix.arches.values() if a.docker_platform == platform)
    names = _names(matrix, arch.name)
    on = [n for n in names[1:] if args[f"CPUBUILD_CPU_{n.upper()}"] == "true"]
    return None if len(on) == len(names) - 1 else (names[0], *on)


def test_bake_document_is_structurally_valid(matrix: Matrix) -> None:
    _, document = _bake(matrix)
    assert bake.validate(document, DOCKERFILE_TEXT) == []
    stages = set(dockerfile.stages(DOCKERFILE_TEXT))
    declared = dockerfile.declared_args(DOCKERFILE_TEXT)
    groups = document["group"]
    assert isinstance(groups, dict)
    for name, target in document["target"].items():  # type: ignore[union-attr]
        assert re.fullmatch(r"[a-zA-Z0-9_-]+", name)
        assert target["context"] == "." and (REPO / target["dockerfile"]).is_file()
        assert target["target"] in stages
        assert set(target["args"]) <= declared and all(isinstance(v, str) for v in target["args"].values())
        assert target["args"]["CPUBUILD_BASE"] == "debian:bookworm-slim"
    assert set(groups["default"]["targets"]) == {n for n, t in document["target"].items() if t["target"] != "wheel"}  # type: ignore[union-attr]
    assert set(groups) >= {"default", "wheels", "amd64", "arm64", "s390x"}


@pytest.mark.parametrize(
    ("breakage", "problem"),
    [
        (lambda d: d["target"]["runtime-amd64-all"].update(target="deploy"), "stage 'deploy' is not in the Dockerfile"),
        (lambda d: d["target"]["runtime-amd64-all"]["args"].update(CPUBUILD_CPU_AVX9="true"), "args not declared in the Dockerfile: CPUBUILD_CPU_AVX9"),
        (lambda d: d["target"]["runtime-amd64-all"].update(platforms=["amd64"]), "'platforms' must be a non-empty list"),
        (lambda d: d["group"].pop("default"), "'default' group"),
        (lambda d: d["group"]["default"]["targets"].append("nope"), "unknown targets nope"),
        (lambda d: d["target"].update({"bad name": {}}), "name must match"),
        (lambda d: d["target"]["runtime-amd64-all"].update(ssh="x"), "unknown keys ssh"),
    ],
)
def test_bake_validation_catches_broken_documents(matrix: Matrix, breakage: object, problem: str) -> None:
    _, document = _bake(matrix)
    breakage(document)  # type: ignore[operator]
    problems = bake.validate(document, DOCKERFILE_TEXT)
    assert any(problem in p for p in problems), problems


def test_pyproject_markers_cover_image_tests() -> None:
    markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("docker:") for m in markers) and any(m.startswith("slow:") for m in markers)


def test_rendered_template_is_cpukerns_dockerfile_and_names_the_project(matrix: Matrix) -> None:
    """docker/Dockerfile is cpubuild's template rendered for cpukern (`cpubuild image --sync-dockerfile`
    wrote it): any project gets the same stages and args, with its own package name and selftest."""
    from cpubuild.project import load_project

    project = load_project(REPO)
    assert dockerfile.render(project.config, matrix) == DOCKERFILE_TEXT
    other = dockerfile.render(replace(project.config, package="dotlib", dist_name="dot-lib", selftest=None), matrix)
    assert dockerfile.stages(other) == dockerfile.stages(DOCKERFILE_TEXT) == ["base", "build", "runtime", "test", "wheel"]
    assert dockerfile.declared_args(other) == dockerfile.declared_args(DOCKERFILE_TEXT)
    assert 'CMD ["python3", "-m", "dotlib"]' in other and "/opt/dotlib" in other and "cpukern" not in other
    assert "RUN python3 -m dotlib\n" in other  # no selftest declared: the report alone
    assert "RUN python3 -m cpukern && python3 -m cpukern.selftest --raw-bf16\n" in DOCKERFILE_TEXT
