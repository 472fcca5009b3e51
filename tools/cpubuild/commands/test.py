"""`cpubuild test --arch ARCH --cpu MODEL [WHEEL]`: run a wheel under an emulated CPU
(the engine is cpubuild.emulate.testrun; the options are fields of
settings.EmulatedTestSettings; docs/cross.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from ..emulate.testrun import Outcome, layer_test_options, run_test
from ..errors import EmulatedTestError, UsageError
from ..settings import EmulatedTestSettings
from ..settings.clickopts import given, settings_options


@click.command(name="test")
@click.argument("wheel", required=False, type=click.Path(dir_okay=False, path_type=Path))
@settings_options(EmulatedTestSettings)
@click.option("--isa", "forced_isa", default=None, hidden=True, help="Deprecated spelling of --force-variant.")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project whose newest wheel to test when WHEEL is not given (default: the nearest one above the working directory).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(wheel: Path | None, forced_isa: str | None, project_dir: Path | None, as_json: bool, **settings: Any) -> None:
    """Install a wheel in a target-arch Python and test it under a QEMU CPU model.

    Options come from, in rising precedence: pyproject.toml [tool.cpubuild.test],
    CPUBUILD_TEST_* environment variables, this command line. See docs/cross.md.
    """
    cli = given(EmulatedTestSettings, settings)
    if forced_isa is not None:  # `wheel --isa` builds variants; here the flag forced one: renamed, kept one release
        forced = cli["force_variant"]
        if forced is not None and forced != forced_isa:
            raise UsageError(f"--isa {forced_isa} and --force-variant {forced} disagree")
        click.echo("warning: `cpubuild test --isa` is deprecated; use --force-variant (same meaning)", err=True)
        cli["force_variant"] = forced_isa
    options, project = layer_test_options(project_dir=project_dir, wheel=wheel, cli=cli, environ=os.environ, cwd=Path.cwd())
    outcome = run_test(options, wheel=wheel, project=project, say=(lambda line: None) if as_json else click.echo)
    _finish(outcome, as_json, outcome.arch, str(options.cpu))


def _finish(outcome: Outcome, as_json: bool, arch: str, cpu: str) -> None:
    if as_json:
        click.echo(json.dumps(outcome.to_json(), indent=1))
    else:
        for problem in outcome.problems:
            click.secho(f"FAIL: {problem}", fg="red", err=True)
        click.secho(f"result: {'PASS' if outcome.ok else 'FAIL'} ({outcome.seconds:.1f} s)", fg="green" if outcome.ok else "red")
    if not outcome.ok:
        raise EmulatedTestError(f"{arch} under -cpu {cpu}: {len(outcome.problems)} problem(s)")
