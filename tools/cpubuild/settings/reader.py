"""Reading settings: TOML tables, CPUBUILD_* variables and options, each value
checked against its field (full-string patterns, no coercion, no unknown keys).

Every refusal is one SettingsError naming the source (file, `environment` or
`command line`), the key and the problem.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import SettingsError
from .model import ENV_PREFIX

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
# annotation text -> kind of value
KINDS = {"str": "str", "str | None": "str", "int": "int", "int | None": "int", "bool": "bool",
         "tuple[str, ...]": "strs", "Path": "path", "Path | None": "path",
         "tuple[dict[str, str], ...]": "records"}


@dataclass(frozen=True, kw_only=True)
class Field:
    """One setting, as the readers and generators see it."""

    name: str  # the dataclass field
    kind: str  # str, int, bool, strs, path, table, records (a list of tables of strings)
    default: Any
    meta: Mapping[str, Any]
    env_prefix: str = ENV_PREFIX  # the table's: CPUBUILD_ (wheel), CPUBUILD_TEST_, CPUBUILD_BENCH_

    @property
    def key(self) -> str:
        return self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return self.env_prefix + self.name.upper()

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(self.meta.get("flags") or ()) or (f"--{self.key}",)

    @property
    def help(self) -> str:
        return str(self.meta.get("help", ""))


def fields_of(cls: type) -> tuple[Field, ...]:
    out = []
    prefix = str(getattr(cls, "env_prefix", ENV_PREFIX))
    for f in dataclasses.fields(cls):
        if "table" in f.metadata:
            out.append(Field(name=f.name, kind="table", default=None, meta=f.metadata))
            continue
        kind = KINDS[str(f.type)]
        out.append(Field(name=f.name, kind=kind, default=f.default, meta=f.metadata, env_prefix=prefix))
    return tuple(out)


def split_list(values: str | Iterable[str]) -> tuple[str, ...]:
    """The one comma-list splitter of cpubuild's options and settings: 'a, b,,c' or
    ('a,b', 'c') -> ('a', 'b', 'c'), blanks dropped, order kept."""
    texts = (values,) if isinstance(values, str) else tuple(values)
    return tuple(part.strip() for text in texts for part in text.split(",") if part.strip())


def _problem(field: Field, value: Any, generic: str) -> str:
    custom = field.meta.get("problem")
    return str(custom).format(value=value) if custom else generic


def _check_string(field: Field, value: Any, fail: Any) -> str:
    if not isinstance(value, str):
        raise fail(_problem(field, value, f"must be a string, got {value!r}"))
    if CONTROL.search(value):
        raise fail(_problem(field, value, f"{value!r} holds a control character (a newline?)"))
    if field.meta.get("nonempty") and not value.strip():
        raise fail(_problem(field, value, "must be a non-empty string"))
    choices = field.meta.get("choices")
    if choices and value not in choices:
        raise fail(f"unknown {field.key} {value!r} (known: {', '.join(choices)})")
    pattern = field.meta.get("pattern")
    if pattern and not re.fullmatch(pattern, value):
        raise fail(_problem(field, value, f"{value!r} does not match {pattern}"))
    return value


def check_value(field: Field, value: Any, fail: Any, *, base: Path | None = None) -> Any:
    """A typed value (TOML, or an option already parsed) -> the field's value, or fail(problem)."""
    kind = field.kind
    if kind == "str":
        return _check_string(field, value, fail)
    if kind == "path":
        if isinstance(value, Path):
            value = str(value)
        text = _check_string(field, value, fail)
        path = Path(text).expanduser()
        return path if path.is_absolute() or base is None else base / path
    if kind == "bool":
        if not isinstance(value, bool):
            raise fail(_problem(field, value, f"must be true or false, got {value!r}"))
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(_problem(field, value, f"must be an integer, got {value!r}"))
        minimum = field.meta.get("minimum")
        if minimum is not None and value < minimum:
            raise fail(_problem(field, value, f"must be at least {minimum}, got {value!r}"))
        return value
    if kind == "strs":
        if isinstance(value, str) and field.meta.get("comma_list"):
            value = split_list(value)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            what = "a list of strings" + (" or a comma-separated string" if field.meta.get("comma_list") else "")
            raise fail(_problem(field, value, f"must be {what}, got {value!r}"))
        if field.meta.get("nonempty") and (not value or not all(v.strip() for v in value)):
            raise fail(_problem(field, value, "must be a non-empty list of strings"))
        item = dataclasses.replace(field, kind="str", meta={**field.meta, "nonempty": False})
        return tuple(_check_string(item, v, fail) for v in value)
    if kind == "records":
        keys, required = tuple(field.meta.get("record_keys") or ()), tuple(field.meta.get("record_required") or ())
        shape = "{" + ", ".join(f"{k} = \"...\"" for k in keys) + "}"
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, dict) for v in value):
            raise fail(_problem(field, value, f"must be a list of tables {shape}, got {value!r}"))
        records = []
        for index, record in enumerate(value, 1):
            unknown = [k for k in record if k not in keys]
            if unknown:
                raise fail(f"entry {index}: unknown key {shown_key(str(unknown[0]))} (known: {', '.join(keys)})")
            for key in required:
                if key not in record:
                    raise fail(f"entry {index}: `{key}` is required")
            item = dataclasses.replace(field, kind="str", meta={"nonempty": True})
            records.append({k: _check_string(item, v, lambda p, k=k, i=index: fail(f"entry {i}: {k} {p}"))
                            for k, v in record.items()})
        return tuple(records)
    raise AssertionError(kind)  # pragma: no cover


def from_text(field: Field, text: str, fail: Any) -> Any:
    """An environment string -> the typed value check_value takes."""
    if field.kind == "int":
        if not re.fullmatch(r"[0-9]+", text):
            raise fail(_problem(field, text, f"must be an integer, got {text!r}"))
        return int(text)
    if field.kind == "bool":
        if text.lower() in TRUE:
            return True
        if text.lower() in FALSE:
            return False
        raise fail(f"must be true or false, got {text!r}")
    if field.kind == "strs":
        return split_list(text)
    return text


def shown_key(key: str) -> str:
    """A key as messages print it: as written when plain, else quoted (one line, whatever it holds)."""
    return key if re.fullmatch(r"[A-Za-z0-9_.-]+", key) else repr(key)


def read_table(cls: type, raw: Any, path: Path | str, name: str, *, base: Path | None = None) -> Any:
    """A TOML table -> the settings dataclass `cls` (sub-tables too). `name`: 'tool.cpubuild...'."""
    if not isinstance(raw, dict):
        raise SettingsError(path, f"[{name}]", "must be a table")
    fields = {f.key: f for f in fields_of(cls)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        field = fields.get(key)
        if field is None:
            raise SettingsError(path, f"[{name}] {shown_key(key)}", f"unknown key (known: {', '.join(fields)})")
        if field.kind == "table":
            values[field.name] = read_table(field.meta["table"], value, path, f"{name}.{key}", base=base)
            continue

        def fail(problem: str, where: str = f"[{name}] {key}") -> SettingsError:
            return SettingsError(path, where, problem)

        values[field.name] = check_value(field, value, fail, base=base)
    return cls(**values)


def layer(
    cls: type,
    *,
    pyproject: Mapping[str, Any],
    pyproject_path: Path | str,
    table_name: str,
    environ: Mapping[str, str],
    cli: Mapping[str, Any],
    project: Path,
    cwd: Path,
) -> Any:
    """Defaults < pyproject < CPUBUILD_* environment < command line. `cli` maps field
    names to given values (None or () = not given). Paths are relative to where
    they were written (the project for pyproject, the working directory else)."""
    base = read_table(cls, dict(pyproject), pyproject_path, table_name, base=project)
    values: dict[str, Any] = {}
    for field in fields_of(cls):
        text = environ.get(field.env, "").strip()
        if not text:
            continue

        def env_fail(problem: str, env: str = field.env, shown: str = text) -> SettingsError:
            return SettingsError("environment", f"{env}={shown!r}", problem)

        values[field.name] = check_value(field, from_text(field, text, env_fail), env_fail, base=cwd)
    by_name = {f.name: f for f in fields_of(cls)}
    for name, value in cli.items():
        if value is None or value == ():
            continue
        field = by_name[name]

        def cli_fail(problem: str, flag: str = field.flags[-1]) -> SettingsError:
            return SettingsError("command line", f"option {flag}", problem)

        if field.kind == "strs" and isinstance(value, (list, tuple)):
            value = tuple(item for v in value for item in (split_list(v) if isinstance(v, str) and
                                                           field.meta.get("comma_list") else (v,)))
        values[name] = check_value(field, value, cli_fail, base=cwd)
    return dataclasses.replace(base, **values)
