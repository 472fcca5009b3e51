"""`cpubuild audit WHEEL|DIR|LIB ...`: which CPU features each library's
instructions need, checked against the wheel's manifest (docs/audit.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..audit import audit_target, render_json, render_text


@click.command("audit")
@click.argument("targets", nargs=-1, required=True, type=click.Path(dir_okay=True, file_okay=True))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per target (a list for several).")
@click.option("--symbols", "symbol_dirs", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A directory with unstripped copies of the libraries (e.g. the build tree): names static functions.")
def command(targets: tuple[str, ...], as_json: bool, symbol_dirs: tuple[Path, ...]) -> None:
    """Prove that every library needs only what its dispatcher checks.

    With a cpubuild manifest: each variant library may use its variant's
    `requires` plus the arch baseline, the probe and every other library only
    the baseline; a violation names library, function, address, instruction
    and feature, and exits 1. Without one: the highest feature per library
    and per function.
    """
    results = [audit_target(t, symbol_dirs=symbol_dirs) for t in targets]
    if as_json:
        docs = [render_json(r) for r in results]
        click.echo(json.dumps(docs[0] if len(docs) == 1 else docs, indent=2))
    else:
        click.echo("\n\n".join(render_text(r) for r in results))
    if not all(r.ok for r in results):
        sys.exit(1)
