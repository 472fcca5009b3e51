"""Property-based fuzzing of the matrix reader: any TOML-shaped input is
either a Matrix or one MatrixError line; never another exception."""

from __future__ import annotations

from typing import Any

from cpubuild.matrix import MatrixError, parse_matrix
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KEYS = ["name", "arch", "extends", "priority", "requires", "description", "compilers", "flags", "install-level", "bogus"]
atoms = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True),
                  st.sampled_from(["baseline", "avx2", "x86_64", "aarch64", "avx512\n", "gcc", "-mavx2", "-march=native",
                                   "", " ", "avx2", "fma", "x86-64-v3", "\x00"]),
                  st.text(max_size=8))
values = st.recursive(atoms, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
                      max_leaves=8)
variant = st.dictionaries(st.sampled_from(KEYS), values, max_size=6)
good_base = {"name": "baseline", "arch": "x86_64", "priority": 0, "flags": ["-march=x86-64"]}
documents = st.fixed_dictionaries(
    {"schema": st.one_of(st.just(2), st.integers(0, 3), st.text(max_size=2))},
    optional={"variant": st.one_of(st.lists(variant, max_size=4).map(lambda vs: [good_base, *vs]), values),
              "arch": st.dictionaries(st.sampled_from(["x86_64", "aarch64", "mips"]), values, max_size=2)},
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_matrix_reader_accepts_or_refuses_in_one_line(doc: dict[str, Any]) -> None:
    try:
        parse_matrix(doc, "isa_matrix.toml")
    except MatrixError as exc:
        text = str(exc)
        assert "\n" not in text.strip(), text
        assert "isa_matrix.toml" in text
