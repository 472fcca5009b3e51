"""Block-style YAML out, deterministic (the order given is the order written):
the workflow needs dicts, lists, scalars and literal blocks, nothing more."""

from __future__ import annotations

import json
import re
from typing import Any

_PLAIN = re.compile(r"^[A-Za-z0-9_./${}() '|&=!*<>@,:\[\]+-]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~", ""}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    plain = (
        _PLAIN.match(text)
        and text.lower() not in _RESERVED
        and not re.match(r"^[-+]?[0-9.]", text)
        and not text.startswith(("-", "*", "!", "&", "|", ">", "'", "{", "[", " ", "@", ",", ":"))
        and not text.endswith(" ")
        and ": " not in text
        and not text.endswith(":")
        and " #" not in text
    )
    return text if plain else json.dumps(text)


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML for dicts, lists and scalars; multi-line strings as
    literal blocks. Deterministic: the order given is the order written."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            lines.append(_entry(f"{pad}{_key(str(key))}:", item, indent))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item:
                first = to_yaml(item, indent + 2)
                lines.append(f"{pad}- {first[indent + 2:]}".rstrip("\n"))
            else:
                lines.append(_entry(f"{pad}-", item, indent))
    else:
        lines.append(pad + _scalar(value))
    return "\n".join(lines) + "\n"


def _entry(head: str, item: Any, indent: int) -> str:
    if isinstance(item, dict):
        return f"{head} {{}}" if not item else f"{head}\n{to_yaml(item, indent + 2).rstrip(chr(10))}"
    if isinstance(item, list):
        return f"{head} []" if not item else f"{head}\n{to_yaml(item, indent + 2).rstrip(chr(10))}"
    if isinstance(item, str) and "\n" in item:
        body = item[:-1] if item.endswith("\n") else item
        block = "\n".join((" " * (indent + 2) + line) if line else "" for line in body.split("\n"))
        return f"{head} |{'' if item.endswith(chr(10)) else '-'}\n{block}"
    return f"{head} {_scalar(item)}"
