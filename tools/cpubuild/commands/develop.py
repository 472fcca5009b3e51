"""`cpubuild develop --precompiled [--index URL] [--commit SHA]`: an editable
install of the project's package with the build products of its published
wheel (the work is cpubuild.index.develop; nothing compiles)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import UsageError
from ..index.develop import INDEX_ENV, develop_precompiled
from ..index.precompiled import LIBRARY


@click.command("develop")
@click.option("--precompiled", is_flag=True, help="Take the compiled libraries from the published wheel; never compile.")
@click.option("--index", "index_url", envvar=INDEX_ENV, metavar="URL", help=f"Index root (URL or directory); default ${INDEX_ENV}.")
@click.option("--commit", metavar="SHA", help="Use this commit's wheel (default: the merge-base with main, then nightly).")
@click.option("--variant", default="cpu", show_default=True, help="Index tree name (cpu, ...).")
@click.option("--python", "python", default=sys.executable, show_default="this interpreter", help="Interpreter to install into.")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
@click.option("--force", is_flag=True, help="Overwrite files in the way that an earlier develop did not put there.")
def command(precompiled: bool, index_url: str | None, commit: str | None, variant: str, python: str, project_dir: Path | None,
            force: bool) -> None:
    """Editable install of the project's package with precompiled variant libraries."""
    if not precompiled:
        raise UsageError("only --precompiled is supported here; for a full editable build run: pip install --no-build-isolation -e .")
    if not index_url:
        raise UsageError(f"no index: pass --index URL (or set {INDEX_ENV}), e.g. the root `cpubuild publish --to` wrote")
    done = develop_precompiled(project_dir, index_url=index_url, commit=commit, variant=variant, python=python, force=force)
    click.echo(f"{done.candidate.why}: {done.candidate.tree}")
    click.echo(f"wheel:    {done.wheel}")
    click.echo(f"libs:     {', '.join(m.split('/')[-1] for m in done.members if LIBRARY.search(m))}")
    click.echo(f"variants: {', '.join(done.variants)}")
    click.echo(f"editable: {python} imports {done.imports_from}")
