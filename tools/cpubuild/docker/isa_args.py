"""The Dockerfile's per-variant build args, derived from the project's isa_matrix.toml.

Seed style: one ``CPUBUILD_CPU_<VARIANT>=true|false`` build arg per optional
variant (baselines are in every wheel, so they get none). The ARG lines live in
a generated block of the Dockerfile; `render_block` makes it, `check_block`
tells when the file drifted from the matrix and `sync_block` rewrites it.

Inside the build stage, `python -m cpubuild.docker.isa_args --project DIR`
turns the args found in the environment back into the ``--isa`` list of
``cpubuild wheel``. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..contract import ContractError, load_config
from ..hardware import host_arch
from ..matrix import Matrix, MatrixError, Variant, load_matrix

ARG_PREFIX = "CPUBUILD_CPU_"
BEGIN = "# BEGIN cpubuild isa-args"
END = "# END cpubuild isa-args"
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


class IsaArgsError(ValueError):
    """A build arg that cannot be turned into an ISA set."""


def arg_name(variant: str) -> str:
    return ARG_PREFIX + variant.upper()


def optional_variants(matrix: Matrix) -> list[Variant]:
    """Non-baseline variants of every arch, each name once, in matrix order."""
    seen: set[str] = set()
    out: list[Variant] = []
    for v in matrix.variants:
        if not v.is_baseline and v.name not in seen:
            seen.add(v.name)
            out.append(v)
    return out


def render_block(matrix: Matrix) -> str:
    """The generated ARG lines (between and including the markers)."""
    lines = [
        f"{BEGIN} - generated from the project's isa_matrix.toml by `cpubuild image --sync-dockerfile`; do not edit",
        "# One arg per optional variant: true = build it, false = leave it out; with none set to",
        "# true, every variant of the platform not set to false is built. The baseline always is.",
    ]
    for v in optional_variants(matrix):
        lines.append(f"# {v.arch}: {v.description}")
        lines.append(f"ARG {arg_name(v.name)}=")
    lines.append(END)
    return "\n".join(lines) + "\n"


def _block_span(text: str) -> tuple[int, int]:
    start = text.find(BEGIN)
    end = text.find(END)
    if start < 0 or end < start or text.count(BEGIN) != 1 or text.count(END) != 1:
        raise IsaArgsError(f"the Dockerfile needs exactly one '{BEGIN}' ... '{END}' block")
    stop = text.find("\n", end)
    return start, len(text) if stop < 0 else stop + 1


def check_block(text: str, matrix: Matrix) -> bool:
    """True when the Dockerfile's generated block matches the matrix."""
    start, stop = _block_span(text)
    return text[start:stop] == render_block(matrix)


def sync_block(text: str, matrix: Matrix) -> str:
    start, stop = _block_span(text)
    return text[:start] + render_block(matrix) + text[stop:]


def build_args(matrix: Matrix, arch: str, isas: Iterable[str] | None) -> dict[str, str]:
    """Build args that select `isas` (None: every variant) for `arch`.

    Every optional variant of the arch is set explicitly, so the image's
    ISA set never depends on the Dockerfile's defaults."""
    wanted = None if isas is None else set(isas)
    args: dict[str, str] = {}
    for v in matrix.variants_for(arch):
        if not v.is_baseline:
            args[arg_name(v.name)] = "true" if wanted is None or v.name in wanted else "false"
    return args


def _parse_bool(name: str, value: str) -> bool | None:
    word = value.strip().lower()
    if not word:
        return None
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise IsaArgsError(f"{name}={value!r}: use true or false")


def isas_from_env(matrix: Matrix, arch: str, env: Mapping[str, str]) -> list[str] | None:
    """The ISA set the build args in `env` ask for; None means every variant."""
    if arch not in matrix.arches:
        raise IsaArgsError(f"no arch {arch!r} in the matrix (declared: {', '.join(matrix.arches)})")
    mine = [v for v in matrix.variants_for(arch) if not v.is_baseline]
    mine_names = {v.name for v in mine}
    chosen: list[str] = []
    dropped: set[str] = set()
    for v in optional_variants(matrix):
        name = arg_name(v.name)
        flag = _parse_bool(name, env.get(name, ""))
        if flag is None:
            continue
        if v.name not in mine_names:
            if flag:
                raise IsaArgsError(f"{name}=true names the {v.arch} variant {v.name!r}; this build is for {arch}")
            continue
        if flag:
            chosen.append(v.name)
        else:
            dropped.add(v.name)
    if not chosen:
        chosen = [v.name for v in mine if v.name not in dropped]
    if len(chosen) == len(mine):
        return None
    return [matrix.baseline(arch).name, *[v.name for v in mine if v.name in chosen]]


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the --isa list the CPUBUILD_CPU_* build args select.")
    parser.add_argument("--project", required=True, help="the project directory (its pyproject.toml names the matrix)")
    parser.add_argument("--arch", default=host_arch())
    args = parser.parse_args(argv)
    try:
        matrix = load_matrix(load_config(Path(args.project)).matrix)
        isas = isas_from_env(matrix, args.arch, os.environ)
    except (ContractError, MatrixError, IsaArgsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("all" if isas is None else ",".join(isas))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
