"""A small reader of Dockerfile instructions: stages and declared build args.

Enough to check a bake file or a build request against docker/Dockerfile
(targets that exist, args that are declared) without a BuildKit parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[3] / "docker" / "Dockerfile"
_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Instruction:
    keyword: str
    arguments: str
    line: int


def instructions(text: str) -> list[Instruction]:
    """Logical instructions: comments dropped, backslash continuations joined."""
    out: list[Instruction] = []
    pending = ""
    first_line = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continuation are skipped by Docker too
        if not pending:
            first_line = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical = (pending + stripped).strip()
        pending = ""
        keyword, _, arguments = logical.partition(" ")
        out.append(Instruction(keyword=keyword.upper(), arguments=arguments.strip(), line=first_line))
    return out


def stages(text: str) -> list[str]:
    """Stage names in order (an unnamed stage is its index as a string)."""
    names: list[str] = []
    for ins in instructions(text):
        if ins.keyword == "FROM":
            match = _FROM.match(f"FROM {ins.arguments}")
            names.append(match.group(2) if match and match.group(2) else str(len(names)))
    return names


def declared_args(text: str) -> set[str]:
    """Every build arg an ARG instruction declares (global or in a stage)."""
    names = set()
    for ins in instructions(text):
        if ins.keyword == "ARG":
            for item in ins.arguments.split():
                names.add(item.split("=", 1)[0])
    return names
