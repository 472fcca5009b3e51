"""`[tool.cpubuild] repair-exclude`: shared libraries the wheel must not carry
(the repair step leaves them out) and the requirement that provides each, which
becomes a Requires-Dist of the wheel. Standard library only (the version
provider reads it inside isolated builds).

    [tool.cpubuild]
    repair-exclude = [
      { library = "libnuma.so.1" },                                 # the system provides it
      { library = "libiomp5.so", requires = "intel-openmp>=2024" },  # a package provides (and loads) it
    ]

A torch project's libraries of torch (libtorch_cpu, libc10, torch's libgomp)
are excluded without being listed: the torch pin provides them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SONAME = re.compile(r"^lib[A-Za-z0-9_.+-]*\.so(\.[0-9]+)*$")
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")  # the distribution name a PEP 508 string starts with
KEY = "repair-exclude"


@dataclass(frozen=True, kw_only=True)
class RepairExclude:
    library: str  # the soname the wheel's libraries need and must not carry
    requires: str | None = None  # the Requires-Dist that provides it (None: the system)


def requirement_name(requirement: str) -> str:
    match = REQUIREMENT.match(requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else ""


def parse_repair_exclude(raw: Any, static_dependencies: list[str] | None) -> tuple[tuple[RepairExclude, ...], str | None]:
    """The validated entries, or a problem (one line) to report at `[tool.cpubuild] repair-exclude`.
    `static_dependencies`: [project] dependencies when not dynamic - each `requires` must be among them."""
    if raw is None:
        return (), None
    if not isinstance(raw, list):
        return (), "must be a list of tables {library = \"libX.so.N\", requires = \"dist>=V\"}"
    entries: list[RepairExclude] = []
    for index, item in enumerate(raw):
        where = f"entry {index + 1}"
        if not isinstance(item, dict) or set(item) - {"library", "requires"}:
            return (), f"{where}: must be a table with `library` and optional `requires`, got {item!r}"
        library, requires = item.get("library"), item.get("requires")
        if not isinstance(library, str) or not SONAME.match(library):
            return (), f"{where}: library {library!r} must be a shared library's soname such as \"libnuma.so.1\""
        if requires is not None and (not isinstance(requires, str) or not requirement_name(requires)):
            return (), f"{where}: requires {requires!r} must be a requirement such as \"intel-openmp>=2024\""
        if any(e.library == library for e in entries):
            return (), f"{where}: {library} is listed twice"
        if requires and static_dependencies is not None and requirement_name(requires) not in {
                requirement_name(d) for d in static_dependencies}:
            return (), (f"{where}: {library} is provided by {requires!r}, which [project] dependencies lacks "
                        f"(add it there, or make dependencies dynamic so cpubuild's provider adds it)")
        entries.append(RepairExclude(library=library, requires=requires))
    return tuple(entries), None


def project_requirements(pyproject: Path) -> list[str]:
    """The `requires` of every entry, for the version provider's dynamic dependencies."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 only
        import tomli as tomllib
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    raw = data.get("tool", {}).get("cpubuild", {}).get(KEY, [])
    return [str(e["requires"]) for e in raw if isinstance(e, dict) and isinstance(e.get("requires"), str)] if isinstance(raw, list) else []
