"""What is derived from the settings model as text: the JSON schema of
``[tool.cpubuild]`` (shipped as schema.json) and the docs' option tables.
A test checks the committed copies equal these."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .model import CpubuildSettings
from .reader import Field, fields_of

SCHEMA_FILE = Path(__file__).with_name("schema.json")
# docs file (relative to the repository) -> the tables it shows, each between markers
DOC_TABLES = {"docs/wheels.md": ("tool.cpubuild.wheel",),
              "docs/cross.md": ("tool.cpubuild.test",),
              "docs/project.md": ("tool.cpubuild", "tool.cpubuild.bench", "tool.cpubuild.ci"),
              "docs/amx.md": ("tool.cpubuild.baremetal",)}
BEGIN = "<!-- generated from cpubuild.settings: {name} (python -m cpubuild.settings --docs) -->"
END = "<!-- end of generated table -->"


def _default(field: Field) -> Any:
    value = field.default
    if isinstance(value, Path):
        return str(value)
    return list(value) if isinstance(value, tuple) else value


def _property(field: Field) -> dict[str, Any]:
    if field.kind == "table":
        return table_schema(field.meta["table"], field.help)
    if field.kind == "records":
        keys = tuple(field.meta.get("record_keys") or ())
        item = {"type": "object", "additionalProperties": False,
                "properties": {k: {"type": "string", "minLength": 1} for k in keys},
                "required": list(field.meta.get("record_required") or ())}
        return {"description": field.help, "type": "array", "items": item}
    string: dict[str, Any] = {"type": "string"}
    if field.meta.get("choices"):
        string["enum"] = list(field.meta["choices"])
    if field.meta.get("pattern"):
        string["pattern"] = f"^(?:{field.meta['pattern']})$"
    elif field.meta.get("nonempty"):
        string["minLength"] = 1
    prop: dict[str, Any]
    if field.kind in ("str", "path"):
        prop = string
    elif field.kind == "int":
        prop = {"type": "integer"}
        if field.meta.get("minimum") is not None:
            prop["minimum"] = field.meta["minimum"]
    elif field.kind == "bool":
        prop = {"type": "boolean"}
    else:
        prop = {"type": "array", "items": string}
        if field.meta.get("nonempty"):
            prop["minItems"] = 1
        if field.meta.get("comma_list"):
            prop = {"oneOf": [prop, {"type": "string"}]}
    prop = {"description": field.help, **prop}
    if field.default is not None and field.default != ():
        prop["default"] = _default(field)
    return prop


def table_schema(cls: type, description: str | None = None) -> dict[str, Any]:
    return {"type": "object", "description": description or (cls.__doc__ or "").strip(),
            "additionalProperties": False, "properties": {f.key: _property(f) for f in fields_of(cls)}}


def schema() -> dict[str, Any]:
    """JSON schema (draft 2020-12) of [tool.cpubuild], for editors and validate-pyproject-style tools."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "cpubuild-settings.schema.json",
            "title": "[tool.cpubuild]", **table_schema(CpubuildSettings)}


def schema_text() -> str:
    return json.dumps(schema(), indent=2) + "\n"


def _default_text(field: Field) -> str:
    if field.meta.get("default_text"):
        return str(field.meta["default_text"])
    if field.kind == "bool":
        return "on" if field.default else "off"
    if field.default is None or field.default == ():
        return "-"
    return f"`{_default(field)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def _option_text(field: Field) -> str:
    flags = "/".join(field.flags)
    if field.kind == "bool":
        return f"`{flags}/--no-{field.flags[-1][2:]}`" if field.default else f"`{flags}`"
    if field.meta.get("choices"):
        return f"`{flags} {'|'.join(field.meta['choices'])}`"
    metavar = field.meta.get("metavar") or field.name.upper()
    return f"`{flags} {metavar}`" + (" (repeatable)" if field.kind == "strs" else "")


def _type_text(field: Field) -> str:
    if field.kind == "strs":
        return "list of strings" + (" or comma list" if field.meta.get("comma_list") else "")
    return {"str": "string", "path": "path", "int": "integer", "bool": "boolean", "table": "table",
            "records": "list of tables"}[field.kind]


def docs_table(name: str) -> str:
    """The markdown table of one settings table."""
    cls = {"tool.cpubuild": CpubuildSettings, **{f"tool.cpubuild.{f.key}": f.meta["table"]
                                                 for f in fields_of(CpubuildSettings) if f.kind == "table"}}[name]
    fields = fields_of(cls)
    if getattr(cls, "layered", False):
        rows = [f"| option | environment | `[{name}]` | default | what |", "|---|---|---|---|---|"]
        rows += [f"| {_cell(_option_text(f))} | `{f.env}` | `{f.key}` ({_type_text(f)}) | {_cell(_default_text(f))} "
                 f"| {_cell(f.help)} |" for f in fields]
    else:
        rows = [f"| `[{name}]` key | type | default | what |", "|---|---|---|---|"]
        rows += [f"| `{f.key}` | {_type_text(f)} | {_cell(_default_text(f))} | {_cell(f.help)} |" for f in fields]
    return "\n".join(rows) + "\n"


def render_docs(text: str, names: tuple[str, ...]) -> str:
    """`text` with each table between its markers replaced by the generated one."""
    for name in names:
        begin = BEGIN.format(name=name)
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(END), re.DOTALL)
        if not pattern.search(text):
            raise ValueError(f"no generated-table markers for {name}: {begin}")
        replacement = f"{begin}\n{docs_table(name)}{END}"
        text = pattern.sub(lambda _m: replacement, text)  # noqa: B023 - used at once
    return text
