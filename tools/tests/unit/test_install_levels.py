"""Variant wheels without building: which level each variant goes to, what each level wheel holds,
variant.json documents and their merging, the matrix's install-level field."""

from __future__ import annotations

import re

import pytest
from cpubuild.errors import UsageError
from cpubuild.installlevels import install_levels
from cpubuild.matrix import MatrixError, load_matrix, parse_matrix
from cpubuild.variantsjson import LABEL, SCHEMA_URL, VariantsJsonConflict, index_file_name, merge_variant_documents
from cpubuild.wheelbuild.variantwheels import plan_level_wheels, variant_document
from testsupport import CPUKERN_MATRIX


def test_x86_levels_place_cpukern_variants_as_the_psabi_says() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    scheme, wheels = plan_level_wheels(matrix, "x86_64", tuple(v.name for v in matrix.variants_for("x86_64")))
    assert scheme.values == ("v1", "v2", "v3", "v4")
    got = {w.label: w.variants for w in wheels}
    assert got == {
        "x86_64_v1": ("baseline",),
        "x86_64_v3": ("baseline", "avx2", "avxvnni"),
        "x86_64_v4": ("baseline", "avx2", "avxvnni", "avx512", "avx512vnni", "avx512bf16", "amx"),
        "null": ("baseline", "avx2", "avxvnni", "avx512", "avx512vnni", "avx512bf16", "amx"),
    }
    assert all(LABEL.match(w.label) for w in wheels)


def test_only_levels_of_built_variants_get_a_wheel() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    _, wheels = plan_level_wheels(matrix, "x86_64", ("baseline", "avx512bf16"))
    assert [(w.label, w.variants) for w in wheels] == [
        ("x86_64_v1", ("baseline",)), ("x86_64_v4", ("baseline", "avx512bf16")), ("null", ("baseline", "avx512bf16"))]


def test_placement_at_the_highest_level_bringing_a_required_feature() -> None:
    x86 = install_levels()["x86_64"]
    assert x86.place(()) == "v1"
    assert x86.place(("sse4_2", "popcnt")) == "v2"
    assert x86.place(("avx2", "fma", "f16c")) == "v3"
    assert x86.place(("avx512f", "avx512bw", "avx512vl", "avx512_bf16")) == "v4"  # beyond v4, and without avx512cd
    assert x86.place(("avx512_vnni",)) == "v1"  # names a feature no level brings: every level may hold it (dispatcher)
    arm = install_levels()["aarch64"]
    assert arm.place(()) == "8a" and arm.place(("asimdhp", "asimddp")) == "8.4a"
    assert arm.property("8.4a") == "aarch64 :: version :: 8.4a"


def test_an_arch_without_levels_is_refused_with_the_reason() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    with pytest.raises(UsageError, match="installers detect no CPU levels for s390x"):
        plan_level_wheels(matrix, "s390x", ("baseline",))


def _matrix(level: str, arch: str = "x86_64") -> dict[str, object]:
    flags = {"gcc": ["-O2"], "clang": ["-O2"]}
    return {"schema": 2, "variant": [
        {"name": "baseline", "arch": arch, "priority": 0, "flags": flags},
        {"name": "fast", "arch": arch, "priority": 10, "requires": ["avx2"] if arch == "x86_64" else ["vx"],
         "flags": flags, "install-level": level},
    ]}


def test_the_matrix_names_a_level_and_bad_ones_name_file_field_and_problem() -> None:
    matrix = parse_matrix(_matrix("v4"))
    assert matrix.variant("x86_64", "fast").install_level == "v4"
    _, wheels = plan_level_wheels(matrix, "x86_64", ("baseline", "fast"))
    assert [w.label for w in wheels] == ["x86_64_v1", "x86_64_v4", "null"]
    with pytest.raises(MatrixError, match=re.escape("field 'install-level'") + r".*unknown x86_64 level 'v9' \(known: v1, v2, v3, v4\)"):
        parse_matrix(_matrix("v9"))
    with pytest.raises(MatrixError) as info:
        parse_matrix(_matrix("v1", arch="s390x"))
    assert (info.value.where, info.value.problem) == (
        "variant 'fast' (s390x), field 'install-level'",
        "installers detect no CPU levels for s390x (levels exist for: x86_64, aarch64)")


def test_variant_documents_and_the_index_file_name() -> None:
    scheme = install_levels()["x86_64"]
    doc = variant_document(scheme, {"x86_64_v3": "v3", "null": None})
    assert doc == {"$schema": SCHEMA_URL, "default-priorities": {"namespace": ["x86_64"]},
                   "providers": {"x86_64": {"requires": ["x86-64-variant-provider"]}},
                   "variants": {"x86_64_v3": {"x86_64": {"level": ["v3"]}}, "null": {}}}
    assert index_file_name("cpukern-0.2.0.dev3+g1.cpu-py3-none-manylinux_2_28_x86_64-x86_64_v3.whl") == \
        "cpukern-0.2.0.dev3+g1.cpu-variants.json"


def test_merging_adds_labels_and_refuses_a_label_described_twice_differently() -> None:
    x86, arm = install_levels()["x86_64"], install_levels()["aarch64"]
    merged = merge_variant_documents(variant_document(x86, {"x86_64_v3": "v3"}),
                                     variant_document(arm, {"aarch64_8.4a": "8.4a", "null": None}), where="idx")
    assert list(merged["variants"]) == ["aarch64_8.4a", "null", "x86_64_v3"]
    assert merged["default-priorities"]["namespace"] == ["x86_64", "aarch64"]
    assert set(merged["providers"]) == {"x86_64", "aarch64"}
    assert merge_variant_documents(merged, variant_document(x86, {"x86_64_v3": "v3"}), where="idx") == merged
    with pytest.raises(VariantsJsonConflict, match=r"idx: variant 'x86_64_v3' is .*v3.* there, this wheel says .*v4"):
        merge_variant_documents(merged, {**variant_document(x86, {}), "variants": {"x86_64_v3": {"x86_64": {"level": ["v4"]}}}},
                                where="idx")
