"""The project's Dockerfile: rendered from cpubuild's template, and read back.

`render` fills cpubuild's template (Dockerfile.in next to this file) for a
project: its package, selftest and the matrix's isa-args block. A project may
keep its own copy in docker/Dockerfile (`cpubuild image --sync-dockerfile`
writes it; cpubuild then keeps only the isa-args block in sync). The reader
(stages, declared build args) checks a bake file or a build request against
the Dockerfile without a BuildKit parser.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..contract import ProjectConfig
from ..matrix import Matrix
from .isa_args import render_block

TEMPLATE = Path(__file__).with_name("Dockerfile.in")
PROJECT_DOCKERFILE = "docker/Dockerfile"  # a project's own copy, relative to its root
GENERATED_DOCKERFILE = ".cpubuild/Dockerfile"  # where a rendered one goes in the build context
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


BASE_ARG = re.compile(r"^ARG CPUBUILD_BASE=\S*$", re.MULTILINE)


def with_base(text: str, base: str) -> str:
    """The Dockerfile with `base` (a pinned reference) as CPUBUILD_BASE's default."""
    return BASE_ARG.sub(lambda _: f"ARG CPUBUILD_BASE={base}", text, count=1)


def render(config: ProjectConfig, matrix: Matrix) -> str:
    """cpubuild's Dockerfile template for one project."""
    selftest = f" && python3 -m {shlex.join([config.selftest.target, *config.selftest.args])}" if config.selftest else ""
    text = TEMPLATE.read_text(encoding="utf-8")
    for token, value in (
        ("@ISA_ARGS@", render_block(matrix).rstrip("\n")),
        ("@DIST@", config.dist_name),
        ("@PACKAGE@", config.package),
        ("@USER@", config.package.lower().replace("_", "-")),
        ("@SELFTEST@", selftest),
    ):
        text = text.replace(token, value)
    return text
