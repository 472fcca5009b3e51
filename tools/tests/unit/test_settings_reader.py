"""The settings reader's own checks, message by message: what a user reads when a
value of [tool.cpubuild], a CPUBUILD_* variable or an option is refused, and
where each layer's paths are relative to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cpubuild.settings import Field, SettingsError, fields_of
from cpubuild.settings.model import CpubuildSettings, WheelSettings
from cpubuild.settings.reader import check_value, from_text, layer, read_table, shown_key


def fail(problem: str) -> SettingsError:
    return SettingsError("pyproject.toml", "[tool.cpubuild] key", problem)


def field(kind: str, **meta: Any) -> Field:
    return Field(name="some_key", kind=kind, default=None, meta=meta)


RECORDS = {"record_keys": ("library", "requires"), "record_required": ("library",)}
REFUSED = [
    (field("str"), 5, "must be a string, got 5"),
    (field("str"), "a\nb", "'a\\nb' holds a control character (a newline?)"),
    (field("str", nonempty=True), "  ", "must be a non-empty string"),
    (field("str", choices=("on", "off")), "up", "unknown some-key 'up' (known: on, off)"),
    (field("bool"), 1, "must be true or false, got 1"),
    (field("int"), "3", "must be an integer, got '3'"),
    (field("int", minimum=1), 0, "must be at least 1, got 0"),
    (field("strs"), 5, "must be a list of strings, got 5"),
    (field("strs", comma_list=True), 5, "must be a list of strings or a comma-separated string, got 5"),
    (field("strs", nonempty=True), [], "must be a non-empty list of strings"),
    (field("strs", nonempty=True), ["a", " "], "must be a non-empty list of strings"),
    (field("records", **RECORDS), 5, 'must be a list of tables {library = "...", requires = "..."}, got 5'),
    (field("records", **RECORDS), [5], 'must be a list of tables {library = "...", requires = "..."}, got [5]'),
    (field("records", **RECORDS), [{"requires": "x"}], "entry 1: `library` is required"),
    (field("records", **RECORDS), [{"library": "a", "soname": "x"}], "entry 1: unknown key soname (known: library, requires)"),
    (field("records", **RECORDS), [{"library": "a"}, {"library": " "}], "entry 2: library must be a non-empty string"),
    (field("records", **RECORDS), [{"library": "a", "requires": 5}], "entry 1: requires must be a string, got 5"),
]


@pytest.mark.parametrize(("f", "value", "problem"), REFUSED, ids=[f"{c[0].kind}-{i}" for i, c in enumerate(REFUSED)])
def test_each_refusal_says_what_is_wrong(f: Field, value: Any, problem: str) -> None:
    with pytest.raises(SettingsError) as info:
        check_value(f, value, fail)
    assert info.value.problem == problem


def test_a_custom_problem_replaces_every_generic_one() -> None:
    f = field("strs", nonempty=True, problem="must be the sources, got {value!r}")
    for bad in (5, [], [" "]):
        with pytest.raises(SettingsError) as info:
            check_value(f, bad, fail)
        assert info.value.problem == f"must be the sources, got {bad!r}"


def test_accepted_values_come_back_typed() -> None:
    assert check_value(field("int", minimum=1), 1, fail) == 1  # the minimum itself is allowed
    assert check_value(field("strs", nonempty=True), ["a", "b"], fail) == ("a", "b")
    assert check_value(field("records", **RECORDS), [{"library": "libgomp.so.1"}], fail) == ({"library": "libgomp.so.1"},)


def test_paths_are_relative_to_where_they_were_written() -> None:
    assert check_value(field("path"), Path("out"), fail, base=Path("/proj")) == Path("/proj/out")
    assert check_value(field("path"), "out", fail) == Path("out")  # no base: as given
    assert check_value(field("path"), "/abs", fail, base=Path("/proj")) == Path("/abs")


@pytest.mark.parametrize(("text", "value"), [("1", True), ("ON", True), ("yes", True), ("0", False), ("Off", False),
                                             ("false", False), ("no", False)])
def test_environment_booleans(text: str, value: bool) -> None:
    assert from_text(field("bool"), text, fail) is value


@pytest.mark.parametrize(("kind", "text", "problem"), [("bool", "maybe", "must be true or false, got 'maybe'"),
                                                       ("int", "2x", "must be an integer, got '2x'")])
def test_environment_text_that_is_no_value(kind: str, text: str, problem: str) -> None:
    with pytest.raises(SettingsError) as info:
        from_text(field(kind), text, fail)
    assert info.value.problem == problem


def test_plain_keys_are_shown_as_written() -> None:
    assert (shown_key("Build-Dir_2.x"), shown_key("a b"), shown_key("x\n")) == ("Build-Dir_2.x", "'a b'", "'x\\n'")


def wheel(environ: dict[str, str] | None = None, **cli: Any) -> WheelSettings:
    settings: WheelSettings = layer(WheelSettings, pyproject={}, pyproject_path="/proj/pyproject.toml",
                                    table_name="tool.cpubuild.wheel", environ=environ or {}, cli=cli,
                                    project=Path("/proj"), cwd=Path("/cwd"))
    return settings


def test_each_variable_counts_whatever_comes_before_it() -> None:
    """An unset or blank variable is skipped, not the end of the list."""
    assert wheel({"CPUBUILD_ISA": " ", "CPUBUILD_CCACHE": "off"}).ccache == "off"


def test_a_bad_variable_is_refused_naming_the_environment() -> None:
    with pytest.raises(SettingsError) as info:
        wheel({"CPUBUILD_JOBS": "0"})
    assert (info.value.path, info.value.where, info.value.problem) == (
        "environment", "CPUBUILD_JOBS='0'", "must be at least 1, got 0")


def test_options_split_only_comma_lists_and_take_paths_from_the_working_directory() -> None:
    settings = wheel(isa=("avx2,avx512",), config_settings=("cmake.define.A=1,2",), out=Path("w"))
    assert settings.isa == ("avx2", "avx512")
    assert settings.config_settings == ("cmake.define.A=1,2",)  # a value may hold commas
    assert settings.out == Path("/cwd/w")


def test_a_sub_table_is_read_whole_and_its_paths_are_the_projects() -> None:
    settings = read_table(CpubuildSettings, {"wheel": {"out": "w"}, "kind": "torch"}, "/proj/pyproject.toml",
                          "tool.cpubuild", base=Path("/proj"))
    assert (settings.wheel.out, settings.kind) == (Path("/proj/w"), "torch")  # keys after a sub-table count too
    with pytest.raises(SettingsError) as info:
        read_table(CpubuildSettings, {"wheel": 5}, "/proj/pyproject.toml", "tool.cpubuild")
    assert (info.value.where, info.value.problem) == ("[tool.cpubuild.wheel]", "must be a table")


def test_an_option_left_unset_does_not_end_the_list() -> None:
    assert wheel(arch=None, ccache="off").ccache == "off"


@pytest.mark.parametrize(("value", "problem"), [(5, "5 is not a Python package name"),
                                                ("a\nb", "'a\\nb' is not a Python package name")])
def test_a_custom_problem_quotes_the_value_given(value: Any, problem: str) -> None:
    package = next(f for f in fields_of(CpubuildSettings) if f.name == "package")
    with pytest.raises(SettingsError) as info:
        check_value(package, value, fail)
    assert info.value.problem == problem


QUOTING = "{value!r} is refused"


@pytest.mark.parametrize(("bad", "value", "problem"), [
    (field("str", nonempty=True, problem=QUOTING), " ", "' ' is refused"),
    (field("bool", problem=QUOTING), "yes", "'yes' is refused"),
    (field("int", problem=QUOTING), "2", "'2' is refused"),
    (field("int", minimum=1, problem=QUOTING), 0, "0 is refused"),
    (field("records", problem=QUOTING, **RECORDS), {"library": "a"}, "{'library': 'a'} is refused"),
])
def test_a_custom_problem_quotes_the_value_of_every_kind(bad: Field, value: Any, problem: str) -> None:
    with pytest.raises(SettingsError) as info:
        check_value(bad, value, fail)
    assert info.value.problem == problem


def test_a_custom_problem_quotes_the_environment_text() -> None:
    with pytest.raises(SettingsError) as info:
        from_text(field("int", problem=QUOTING), "2x", fail)
    assert info.value.problem == "'2x' is refused"
