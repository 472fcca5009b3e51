"""The ISA-set label as the merge recomputes it from a manifest's variant order
equals the build's (plan.isa_label from the matrix), for every subset of cpukern's x86 variants."""

from __future__ import annotations

import itertools

from cpubuild.matrix import load_matrix
from cpubuild.wheelbuild.merge import MANYLINUX, _policy
from cpubuild.wheelbuild.plan import CPU_LABEL, isa_label, label_extras
from testsupport import CPUKERN_MATRIX


def test_label_from_the_variant_order_equals_the_builds_for_every_subset() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    order = [v.name for v in matrix.variants_for("x86_64")]
    others = order[1:]
    for size in range(len(others) + 1):
        for chosen in itertools.combinations(others, size):
            subset = [order[0], *chosen]
            assert isa_label(matrix, "x86_64", subset) == (CPU_LABEL, *label_extras(order, subset))


def test_label_extras() -> None:
    order = ["baseline", "avx2", "avx512", "neon_bf16"]
    assert label_extras(order, order) == ()
    assert label_extras(order, ["baseline"]) == ("baseline",)
    assert label_extras(order, ["neon_bf16", "baseline", "avx2"]) == ("avx2", "neonbf16")  # matrix order, no '_'


def test_manylinux_policies_order_by_glibc() -> None:
    assert _policy("manylinux_2_27_x86_64") > _policy("manylinux_2_17_x86_64") > _policy("linux_x86_64")
    assert _policy("manylinux_2_5_x86_64") < _policy("manylinux_2_17_x86_64")
    assert not MANYLINUX.match("macosx_11_0_arm64")
