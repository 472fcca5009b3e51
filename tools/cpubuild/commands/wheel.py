"""`cpubuild wheel`: one repaired, reproducible wheel for a set of ISA variants
(the work is cpubuild.wheelbuild.build; the options are fields of settings.WheelSettings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import CpubuildError, UsageError
from ..project import find_project
from ..settings import WheelSettings
from ..settings.clickopts import given, settings_options
from ..wheelbuild.build import build_wheel
from ..wheelbuild.install import install_wheel
from ..wheelbuild.report import dump_json, render_summary


@click.command(name="wheel")
@settings_options(WheelSettings)
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
@click.option("--install", "install_into", is_flag=False, flag_value="", default=None, metavar="[PYTHON]",
              help="Install the built wheel into PYTHON (default: the Python running cpubuild), replacing an installed copy.")
@click.option("-q", "--quiet", is_flag=True, help="No progress; print only the wheel path.")
@click.option("-v", "--verbose", is_flag=True, help="Stream the full build log.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
def command(project_dir: Path | None, install_into: str | None, quiet: bool, verbose: bool, as_json: bool, **options: Any) -> None:
    """Build one repaired, reproducible wheel holding a set of ISA variants.

    Options come from, in rising precedence: pyproject.toml [tool.cpubuild.wheel],
    CPUBUILD_* environment variables, this command line. See docs/wheels.md.
    """
    if quiet and verbose:
        raise UsageError("-q and -v exclude each other")
    try:
        summary = build_wheel(find_project(project_dir), cli=given(WheelSettings, options), quiet=quiet, verbose=verbose)
    except CpubuildError as exc:
        if as_json:
            click.echo(dump_json({"ok": False, "error": exc.message, "detail": exc.detail, "exit_code": exc.exit_code}))
        raise
    if install_into is not None:
        summary["installed_into"] = install_wheel(Path(summary["wheel"]["path"]), install_into or None)
    if as_json:
        click.echo(dump_json(summary))
    elif quiet:
        for extra in (summary.get("variant_wheels") or {}).get("wheels", []):
            click.echo(extra["path"])
        click.echo(summary["wheel"]["path"])  # last line: `pip install "$(cpubuild wheel -q | tail -n1)"`
    else:
        click.echo(render_summary(summary))
        extras = summary.get("variant_wheels")
        if extras:
            for extra in extras["wheels"]:
                level = f"{extras['namespace']} level {extra['level']}" if extra["level"] else "no level detected"
                click.echo(f"variant wheel {extra['label']:<14} ({level}): {', '.join(extra['variants'])}")
            click.echo(f"variants.json: {extras['variants_json']}")
        if "installed_into" in summary:
            click.echo(f"installed into {summary['installed_into']}")
        click.echo(summary["wheel"]["path"])  # last line, for scripts: pip install "$(cpubuild wheel | tail -n1)"
