"""Property-based fuzzing of the [tool.cpubuild] reader: any TOML-shaped input is
either accepted or refused with one one-line SettingsError, never another exception."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpubuild.contract import parse_config
from cpubuild.settings import TABLES, SettingsError, fields_of
from cpubuild.wheelbuild.options import layer_options
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PATH = Path("/proj/pyproject.toml")
KEYS = sorted({f.key for cls in TABLES.values() for f in fields_of(cls)} | {"isa", "x", ""})
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["auto", "uv", "avx2", "ctypes", "torch", "1", "a,b", "x\n"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner,
                                                                                             max_size=3), max_leaves=8)
TABLE = st.dictionaries(st.sampled_from(KEYS) | st.text(st.sampled_from("ab-_\n\t\x00é"), max_size=4), VALUES, max_size=5)
PROJECT = st.dictionaries(st.sampled_from(["name", "version", "dynamic", "dependencies"]),
                          st.one_of(VALUES, st.just("dotlib"), st.just(["version"])), max_size=4)


def _none_to_absent(value: Any) -> Any:
    """TOML has no null: drop None values (a reader never sees them)."""
    if isinstance(value, dict):
        return {k: _none_to_absent(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_none_to_absent(v) for v in value if v is not None]
    return value


def _refused_in_one_line(exc: SettingsError) -> None:
    assert exc.path and exc.where and exc.problem
    assert "\n" not in str(exc), str(exc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=TABLE, project=PROJECT, system=st.one_of(st.none(), VALUES))
def test_any_contract_is_accepted_or_refused_in_one_line(table: dict[str, Any], project: dict[str, Any],
                                                         system: Any) -> None:
    data: dict[str, Any] = {"project": project, "tool": {"cpubuild": table}}
    if system is not None:
        data["build-system"] = system
    try:
        parse_config(_none_to_absent(data), PATH)
    except SettingsError as exc:
        _refused_in_one_line(exc)


@settings(max_examples=300, deadline=None)
@given(table=TABLE, env=st.dictionaries(st.sampled_from([f.env for f in fields_of(TABLES["tool.cpubuild.wheel"])]),
                                        st.text(max_size=8), max_size=3))
def test_any_wheel_layering_is_accepted_or_refused_in_one_line(table: dict[str, Any], env: dict[str, str]) -> None:
    try:
        layer_options(pyproject=_none_to_absent(table), environ=env, cli={}, project=Path("/p"), cwd=Path("/c"))
    except SettingsError as exc:
        _refused_in_one_line(exc)
