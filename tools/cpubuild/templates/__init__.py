"""Project templates for `cpubuild init`, shipped as package data.

A template is a directory (``minimal/``, ``dot/``, ``torch/``) of ``*.tmpl``
files plus a ``files.toml`` that says where each one goes in the new project and
for which arches it is written (``other/NAME.tmpl`` borrows another template's
file). Rendering is a tiny substitution, no template
engine: ``{{key}}`` is replaced by a value, and lines between
``{{#flag}}`` and ``{{/flag}}`` (each marker alone on its line) are kept only
when the flag is set (e.g. ``{{#aarch64}}``). An unknown key or an unclosed
section is a bug in the template and raises TemplateError.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
SECTION = re.compile(r"^\s*\{\{([#/])([A-Za-z_][A-Za-z0-9_]*)\}\}\s*$")
MANIFEST = "files.toml"
SUFFIX = ".tmpl"


# `cpubuild init --template NAME`: the project kind each template writes, and its description.
TEMPLATES = {
    "minimal": ("ctypes", "one C function with one library per CPU ISA variant"),
    "dot": ("ctypes", "float32 and int8 dot products with one library per CPU ISA variant"),
    "torch": ("torch", "vLLM-style CPU ops (rms_norm, silu_and_mul) as torch.ops, one extension per CPU ISA variant"),
}
DEFAULT_TEMPLATE = "dot"


class TemplateError(ValueError):
    """A template that cannot be rendered (a cpubuild bug, not a user mistake)."""


@dataclass(frozen=True, kw_only=True)
class TemplateFile:
    source: str  # file name inside the template directory
    path: str  # where it goes in the project (may hold {{placeholders}})
    when: str | None = None  # a flag that must be set for the file to be written


def render(text: str, values: Mapping[str, str], flags: Mapping[str, bool]) -> str:
    """Substitutes ``{{key}}`` and keeps or drops ``{{#flag}}`` ... ``{{/flag}}`` sections."""
    out: list[str] = []
    stack: list[tuple[str, bool]] = []
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        marker = SECTION.match(line)
        if marker:
            kind, name = marker.groups()
            if name not in flags:
                raise TemplateError(f"line {number}: unknown section {name!r} (known: {', '.join(sorted(flags))})")
            if kind == "#":
                stack.append((name, flags[name]))
            elif not stack or stack[-1][0] != name:
                raise TemplateError(f"line {number}: {{{{/{name}}}}} closes no open {{{{#{name}}}}}")
            else:
                stack.pop()
            continue
        if all(keep for _, keep in stack):
            out.append(line)
    if stack:
        raise TemplateError(f"section {stack[-1][0]!r} is never closed")

    def substitute(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise TemplateError(f"unknown placeholder {{{{{key}}}}} (known: {', '.join(sorted(values))})")
        return values[key]

    return PLACEHOLDER.sub(substitute, "".join(out))


def template_files(kind: str) -> list[TemplateFile]:
    """The files of one template, in the order files.toml lists them."""
    data = tomllib.loads(read_template(kind, MANIFEST))
    files: list[TemplateFile] = []
    for entry in data.get("file", []):
        source, path, when = entry.get("template"), entry.get("path"), entry.get("when")
        if not isinstance(source, str) or not source.endswith(SUFFIX) or not isinstance(path, str):
            raise TemplateError(f"{kind}/{MANIFEST}: every [[file]] needs template = '*{SUFFIX}' and path")
        if when is not None and not isinstance(when, str):
            raise TemplateError(f"{kind}/{MANIFEST}: {source}: `when` must be a flag name")
        files.append(TemplateFile(source=source, path=path, when=when))
    return files


def read_template(kind: str, name: str) -> str:
    """`name` of template `kind`, or of another template when it is `other/NAME`."""
    owner, _, base = name.rpartition("/")
    return resources.files(__name__).joinpath(owner or kind).joinpath(base).read_text(encoding="utf-8")


def source_of(kind: str, path: str) -> str:
    """The template text that becomes `path` (a path without placeholders) in a project of `kind`."""
    for item in template_files(kind):
        if item.path == path:
            return read_template(kind, item.source)
    raise TemplateError(f"{kind}/{MANIFEST}: no [[file]] writes {path}")


def render_project(kind: str, values: Mapping[str, str], flags: Mapping[str, bool]) -> dict[str, str]:
    """Relative path -> text of every file a new project of `kind` gets."""
    rendered: dict[str, str] = {}
    for item in template_files(kind):
        if item.when is not None:
            if item.when not in flags:
                raise TemplateError(f"{kind}/{MANIFEST}: {item.source}: unknown flag {item.when!r}")
            if not flags[item.when]:
                continue
        try:
            path = render(item.path, values, flags)
            text = render(read_template(kind, item.source), values, flags)
        except TemplateError as exc:
            raise TemplateError(f"{kind}/{item.source}: {exc}") from None
        rendered[path] = text
    return rendered
