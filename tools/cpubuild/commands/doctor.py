"""`cpubuild doctor`: does the project follow the contract, and is this host
ready to build, cross-build, emulate and containerise it?

Every missing piece is printed with the command that fixes it. Exit status 1
when the project breaks the contract or something the native wheel build
needs is missing, else 0.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from ..doctor.checks import run_checks
from ..platforms import Host
from ..project import find_project
from ..wheelbuild.report import dump_json


@click.command(name="doctor")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
def command(as_json: bool, project_dir: Path | None) -> None:
    """Check the project's layout against the contract, the host CPU, compilers and
    cross compilers, cmake/ninja, ccache, auditwheel/patchelf, the Docker daemon and
    QEMU binfmt; print a fix for each gap."""
    project = find_project(project_dir)
    host = Host.current()
    checks = run_checks(project, host)
    failed_required = [c for c in checks if c.required and not c.ok]
    if as_json:
        click.echo(dump_json({"host": {"os": host.os, "arch": host.arch}, "ok": not failed_required,
                              "checks": [c.to_json() for c in checks]}))
    else:
        console = Console(highlight=False, soft_wrap=True)
        section = None
        for c in checks:
            if c.section != section:
                section = c.section
                console.print(f"\n[bold]{section}[/]")
            mark = "[green]ok[/]  " if c.ok else ("[red]MISSING[/]" if c.required else "[yellow]missing[/]")
            console.print(f"  {mark} {escape(c.name)}: {escape(c.detail)}")
            if c.fix:
                console.print(f"          fix: {escape(c.fix)}")
        console.print("\n" + (f"[green]ready to build {project.config.dist_name} wheels for this host[/]" if not failed_required
                              else f"[red]{len(failed_required)} required piece(s) missing[/]"))
    if failed_required:
        raise click.exceptions.Exit(1)
