"""`cpubuild matrix`: the project's validated ISA matrix, what this host can build and what it can run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..doctor.matrixreport import matrix_report
from ..platforms import Host
from ..project import find_project
from ..wheelbuild.report import dump_json


def _mark(value: bool | None, no: str = "no") -> str:
    return "-" if value is None else ("[green]yes[/]" if value else f"[red]{no}[/]")


def render(report: dict[str, Any], console: Console) -> None:
    host = report["host"]
    console.print(f"[bold]{report['matrix']}[/]: valid")
    console.print(f"host: {host['os']} {host['arch']}; CPU features ({host['feature_source']}): {' '.join(host['features']) or '-'}")
    for arch, info in report["arches"].items():
        where = info["platform"] or "no build platform on this host"
        compiler = info["compiler"] or info["compiler_error"] or "-"
        console.print(f"\n[bold]{arch}[/]  ({info['manylinux']})  platform: {where}; compiler: {compiler}")
        table = Table(show_edge=False, pad_edge=False, box=None)
        for col in ("variant", "prio", "requires", "build", "run here"):
            table.add_column(col)
        for v in info["variants"]:
            lacks = " ".join(v["missing"][:2]) + (f" +{len(v['missing']) - 2}" if len(v["missing"]) > 2 else "")
            run = _mark(v["runnable"], f"no (lacks {lacks})")
            table.add_row(v["name"], str(v["priority"]), " ".join(v["requires"]) or "(baseline)", _mark(v["buildable"]), run)
        console.print(table)


@click.command(name="matrix")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--no-build-check", is_flag=True, help="Skip compiling the per-variant flag probes.")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
def command(as_json: bool, no_build_check: bool, project_dir: Path | None) -> None:
    """Show the validated ISA matrix, which variants this host's compilers can
    build (a tiny compile per variant's flags, cached) and which its CPU can run."""
    project = find_project(project_dir)
    matrix = project.load_matrix()
    report = matrix_report(matrix, Host.current(), build_check=not no_build_check,
                           project_facts=project.config.runtime_facts())
    if as_json:
        click.echo(dump_json(report))
    else:
        console = Console(highlight=False)
        render(report, console if console.is_terminal else Console(highlight=False, width=160))
