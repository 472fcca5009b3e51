"""The settings model (cpubuild.settings): the generated schema and docs tables
are the committed ones, and every field of every table refuses a wrong type,
an unknown key and a trailing newline the same way wherever it is read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cpubuild.contract import ContractError, parse_config
from cpubuild.settings import TABLES, Field, SettingsError, fields_of, layer
from cpubuild.settings.generate import DOC_TABLES, SCHEMA_FILE, render_docs, schema, schema_text
from cpubuild.wheelbuild.options import layer_options

REPO = Path(__file__).resolve().parents[3]
ROOT = Path("/proj")
PATH = ROOT / "pyproject.toml"
FIELDS = [(name, f) for name, cls in TABLES.items() for f in fields_of(cls) if f.kind != "table"]
# (table, field, case): a trailing newline only where the field takes strings
CASES = [(t, f, case) for t, f in FIELDS for case in ("wrong type", "unknown key", "trailing newline")
         if case != "trailing newline" or f.kind not in ("int", "bool")]


def test_the_shipped_schema_is_the_models() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), "run: python -m cpubuild.settings --schema"
    assert json.loads(schema_text()) == schema()


@pytest.mark.parametrize("doc", sorted(DOC_TABLES))
def test_the_docs_tables_are_the_models(doc: str) -> None:
    text = (REPO / doc).read_text(encoding="utf-8")
    assert render_docs(text, DOC_TABLES[doc]) == text, "run: python -m cpubuild.settings --docs"


def project(table: str, values: dict[str, Any]) -> dict[str, Any]:
    """A pyproject with `values` in [table] (a sub-table of [tool.cpubuild] or the table itself)."""
    cpubuild: dict[str, Any] = {}
    if table == "tool.cpubuild":
        cpubuild.update(values)
    else:
        cpubuild[table.rsplit(".", 1)[1]] = values
    return {"project": {"name": "dotlib", "version": "1.0"}, "tool": {"cpubuild": cpubuild}}


def wrong_type(field: Field) -> Any:
    return {"int": 1.5, "bool": "yes", "strs": 5}.get(field.kind, 5)


def newline_string(field: Field) -> Any:
    sample = (field.meta.get("choices") or ("abc",))[0] + "\n"
    return [sample] if field.kind == "strs" else sample


def refusals(table: str, values: dict[str, Any]) -> list[str]:
    """The message of every reader of `table`: the project (doctor and every command), and
    for a layered table (wheel, test, bench) the reader its command layers with."""
    messages = []
    with pytest.raises(SettingsError) as info:
        parse_config(project(table, values), PATH)
    messages.append(str(info.value))
    if table == "tool.cpubuild.wheel":
        with pytest.raises(SettingsError) as info:
            layer_options(pyproject=values, environ={}, cli={}, project=ROOT, cwd=ROOT)
        messages.append(str(info.value))
    if getattr(TABLES[table], "layered", False):  # wheel, test, bench: the reader their commands layer with
        with pytest.raises(SettingsError) as info:
            layer(TABLES[table], pyproject=values, pyproject_path=PATH, table_name=table, environ={}, cli={},
                  project=ROOT, cwd=ROOT)
        messages.append(str(info.value))
    return messages


@pytest.mark.parametrize(("table", "field", "case"), CASES, ids=[f"{t}.{f.key}-{c}" for t, f, c in CASES])
def test_every_field_refuses_bad_input_everywhere_alike(table: str, field: Field, case: str) -> None:
    if case == "wrong type":
        values: dict[str, Any] = {field.key: wrong_type(field)}
    elif case == "unknown key":
        values = {field.key + "x": "1"}
    else:
        values = {field.key: newline_string(field)}
    messages = refusals(table, values)
    assert len(set(messages)) == 1, messages
    key = field.key + ("x" if case == "unknown key" else "")
    assert messages[0].startswith(f"{PATH}: [{table}] {key}: "), messages[0]
    assert "\n" not in messages[0].rstrip("\n").replace("\\n", "")
    assert isinstance(SettingsError(PATH, "k", "p"), ContractError)


def test_no_coercion_and_full_string_names() -> None:
    with pytest.raises(SettingsError, match=r"\[tool.cpubuild.wheel\] jobs: must be an integer, got 1.5"):
        layer_options(pyproject={"jobs": 1.5}, environ={}, cli={}, project=ROOT, cwd=ROOT)
    with pytest.raises(SettingsError, match="CPUBUILD_JOBS"):
        layer_options(pyproject={}, environ={"CPUBUILD_JOBS": "1.5"}, cli={}, project=ROOT, cwd=ROOT)
    with pytest.raises(SettingsError, match="package"):
        parse_config(project("tool.cpubuild", {"package": "relp\n"}), PATH)
    with pytest.raises(SettingsError, match=r"\[tool.cpubuild\] 'a\\nb': unknown key"):
        parse_config(project("tool.cpubuild", {"a\nb": 1}), PATH)
    with pytest.raises(SettingsError, match=r"isa"):
        layer_options(pyproject={"isa": ["avx512\n"]}, environ={}, cli={}, project=ROOT, cwd=ROOT)


@pytest.mark.parametrize(("data", "where"), [
    ({"build-system": 5}, "[build-system]"),
    ({"build-system": {"requires": "cpubuild"}}, "[build-system] requires"),
    ({"build-system": {"build-backend": 1}}, "[build-system] build-backend"),
    ({"project": {"name": "dotlib", "dynamic": "version"}}, "[project] dynamic"),
    ({"project": {"name": "dotlib", "version": "1", "dependencies": "numpy"}}, "[project] dependencies"),
    ({"project": {"name": "dot lib", "version": "1"}}, "[project] name"),
    ({"project": {"name": "dotlib\n", "version": "1"}}, "[project] name"),
    ({"project": {"name": "dotlib", "version": "1\n"}}, "[project] version"),
    ({"project": 5}, "[project]"),
])
def test_standard_fields_are_type_checked(data: dict[str, Any], where: str) -> None:
    base = {"project": {"name": "dotlib", "version": "1.0"}, "tool": {"cpubuild": {}}}
    with pytest.raises(SettingsError) as info:
        parse_config({**base, **data}, PATH)
    assert info.value.where == where


def test_layers_and_model_defaults_agree() -> None:
    options = layer_options(pyproject={"jobs": 2, "isa": "avx2, amx"}, environ={"CPUBUILD_CLEAN": "yes"},
                            cli={"frontend": "uv"}, project=ROOT, cwd=ROOT)
    assert (options.jobs, options.isa, options.clean, options.frontend) == (2, ("avx2", "amx"), True, "uv")


def test_config_settings_from_every_layer() -> None:
    def layered(**kw: Any) -> tuple[str, ...]:
        args: dict[str, Any] = {"pyproject": {}, "environ": {}, "cli": {}, **kw}
        return tuple(layer_options(project=ROOT, cwd=ROOT, **args).config_settings)

    assert layered(pyproject={"config-settings": ["cmake.build-type=Debug"]}) == ("cmake.build-type=Debug",)
    assert layered(environ={"CPUBUILD_CONFIG_SETTINGS": "a=1, b=2"}) == ("a=1", "b=2")
    assert layered(environ={"CPUBUILD_CONFIG_SETTINGS": "a=1"}, cli={"config_settings": ("c=3",)}) == ("c=3",)
    with pytest.raises(SettingsError, match="command line: option --config-setting: 'nokey'"):
        layered(cli={"config_settings": ("nokey",)})


def test_one_comma_list_splitter() -> None:
    from cpubuild.settings import split_list

    assert split_list("a, b,,c ") == ("a", "b", "c")
    assert split_list(["a,b", " ", "c"]) == ("a", "b", "c")
    assert split_list("") == ()


def test_isa_names_keep_any_case_as_before() -> None:
    """The plan lower-cases them (split_isa_args); the model only refuses what is no name."""
    assert layer_options(pyproject={}, environ={}, cli={"isa": ("AVX2,amx;neon",)}, project=ROOT, cwd=ROOT).isa == ("AVX2", "amx;neon")
    with pytest.raises(SettingsError, match="option --isa"):
        layer_options(pyproject={}, environ={}, cli={"isa": ("avx2 rm",)}, project=ROOT, cwd=ROOT)


def test_test_and_bench_layer_with_their_own_variables() -> None:
    from cpubuild.settings import BenchSettings, EmulatedTestSettings

    def test_table(**kw: Any) -> Any:
        return layer(EmulatedTestSettings, pyproject_path=PATH, table_name="tool.cpubuild.test", project=ROOT, cwd=ROOT,
                     **kw)

    opts = test_table(pyproject={"cpu": "Haswell", "checks": False}, cli={"expect": "auto"},
                      environ={"CPUBUILD_TEST_CPU": "SandyBridge", "CPUBUILD_ARCH": "aarch64"})  # wheel's variable
    assert (opts.arch, opts.cpu, opts.checks, opts.expect) == (None, "SandyBridge", False, "auto")
    assert [f.env for f in fields_of(EmulatedTestSettings)][:2] == ["CPUBUILD_TEST_ARCH", "CPUBUILD_TEST_CPU"]

    def bench_table(**kw: Any) -> Any:
        return layer(BenchSettings, pyproject_path=PATH, table_name="tool.cpubuild.bench", project=ROOT, cwd=ROOT, **kw)

    opts = bench_table(pyproject={"variants": "avx2, avx512"}, environ={"CPUBUILD_BENCH_ROOFLINE": "off"},
                       cli={"variants": ("avx2",)})
    assert (opts.variants, opts.roofline) == (("avx2",), False)
    with pytest.raises(SettingsError, match="command line: option --variants: must be a non-empty list"):
        bench_table(pyproject={}, environ={}, cli={"variants": ("",)})


def test_test_needs_arch_and_cpu_from_some_layer(tmp_path: Path) -> None:
    from cpubuild.emulate.testrun import layer_test_options
    from cpubuild.errors import UsageError

    with pytest.raises(UsageError, match=r"--cpu is required \(or \[tool.cpubuild.test\] cpu, CPUBUILD_TEST_CPU\)"):
        layer_test_options(project_dir=None, wheel=tmp_path / "x.whl", cli={"arch": "x86_64"}, environ={}, cwd=tmp_path)
    opts, project = layer_test_options(project_dir=None, wheel=tmp_path / "x.whl", cli={"arch": "x86_64"},
                                       environ={"CPUBUILD_TEST_CPU": "Haswell"}, cwd=tmp_path)
    assert (opts.arch, opts.cpu, project) == ("x86_64", "Haswell", None)
