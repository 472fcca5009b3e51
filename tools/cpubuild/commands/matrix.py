"""`cpubuild matrix`: the project's validated ISA matrix, what this host can build and what it can run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .. import hostprobe
from ..errors import CpubuildError
from ..matrix import Matrix
from ..platforms import Host, select_platform
from ..project import find_project
from ..toolchain import compilers
from ..wheelbuild.report import dump_json


def arch_report(matrix: Matrix, arch: str, host: Host, *, build_check: bool = True) -> dict[str, Any]:
    """One arch: its platform, compiler, and per variant buildable / runnable."""
    info = matrix.arches[arch]
    variants = matrix.variants_for(arch)
    out: dict[str, Any] = {"manylinux": info.manylinux, "macos": info.macos, "platform": None, "compiler": None, "compiler_error": None}
    probes: dict[str, compilers.FlagProbe] = {}
    try:
        platform = select_platform(info, host)
        out["platform"] = platform.name
        if build_check:
            toolchain = platform.toolchain(info, os.environ)
            out["compiler"] = toolchain.cxx.display
            probes = {p.variant: p for p in compilers.probe_variants(toolchain.cxx, variants)}
    except CpubuildError as exc:
        out["compiler_error"] = exc.message
    features = hostprobe.host_features(arch, matrix.features.get(arch, {}))
    runs_here = arch == host.arch and not features.source.startswith("unavailable")
    rows = []
    for v in variants:
        probe = probes.get(v.name)
        missing = [f for f in v.requires if f not in features.found]
        rows.append({
            "name": v.name,
            "priority": v.priority,
            "requires": list(v.requires),
            "description": v.description,
            "flags": {family: list(flags) for family, flags in v.flags.items()},
            "buildable": probe.ok if probe else None,
            "build_log": (probe.log or None) if probe else None,
            "runnable": (not missing) if runs_here else None,
            "missing": missing if runs_here else [],
        })
    out["variants"] = rows
    out["feature_source"] = features.source
    return out


def matrix_report(matrix: Matrix, host: Host, *, build_check: bool = True,
                  project_facts: dict[str, Any] | None = None) -> dict[str, Any]:
    project_facts = project_facts or {}
    features = hostprobe.host_features(host.arch, matrix.features.get(host.arch, {}))
    return {
        "matrix": matrix.path,
        "project": {"package": project_facts.get("package"), "env_prefix": project_facts.get("env_prefix")},
        "host": {"os": host.os, "arch": host.arch, "features": sorted(features.found), "feature_source": features.source},
        "arches": {arch: arch_report(matrix, arch, host, build_check=build_check) for arch in matrix.arches},
    }


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
