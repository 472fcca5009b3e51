"""`cpubuild test --arch ARCH --cpu MODEL [WHEEL]`: run a wheel under an emulated CPU
(the engine is cpubuild.emulate.testrun; docs/cross.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..emulate.testrun import Outcome, run_test
from ..errors import EmulatedTestError, UsageError


@click.command(name="test")
@click.option("--arch", "arch_name", required=True, help="Target arch (x86_64, aarch64, s390x or an alias).")
@click.option("--cpu", required=True, help="qemu-user CPU model, e.g. cortex-a53, neoverse-n1, max, 'max,vxeh=off', Haswell; "
              "or bochs:MODEL (x86_64: bochs:tigerlake, bochs:corei7_icelake_u, bochs:corei7_skylake_x) for Bochs 2.7 full-system runs; "
              "bochs:sapphire_rapids runs the project's GEMM C ABI ([tool.cpubuild.baremetal]) bare metal under Bochs 3.0 (docs/amx.md).")
@click.argument("wheel", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force-variant", "forced", default=None, metavar="NAME",
              help="Force a variant (<PREFIX>_ISA) inside the emulated run.")
@click.option("--isa", "forced_isa", default=None, hidden=True, help="Deprecated spelling of --force-variant.")
@click.option("--expect", default=None, help="Fail unless the dispatcher selects this variant; 'auto': the best one the "
              "CPU model runs, by cpubuild's hardware data.")
@click.option("--no-checks", is_flag=True, help="Only the selection report, not the project's selftest.")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project whose newest wheel to test when WHEEL is not given (default: the nearest one above the working directory).")
@click.option("--wheelhouse", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where to look for that wheel (default: <project>/wheelhouse).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(
    arch_name: str,
    cpu: str,
    wheel: Path | None,
    forced: str | None,
    forced_isa: str | None,
    expect: str | None,
    no_checks: bool,
    project_dir: Path | None,
    wheelhouse: Path | None,
    as_json: bool,
) -> None:
    """Install a wheel in a target-arch Python and test it under a QEMU CPU model."""
    if forced_isa is not None:  # `wheel --isa` builds variants; here the flag forced one: renamed, kept one release
        if forced is not None and forced != forced_isa:
            raise UsageError(f"--isa {forced_isa} and --force-variant {forced} disagree")
        click.echo("warning: `cpubuild test --isa` is deprecated; use --force-variant (same meaning)", err=True)
        forced = forced_isa
    outcome = run_test(arch_name=arch_name, cpu=cpu, wheel=wheel, forced=forced, expect=expect, checks=not no_checks,
                       project_dir=project_dir, wheelhouse=wheelhouse, say=(lambda line: None) if as_json else click.echo)
    _finish(outcome, as_json, outcome.arch, cpu)


def _finish(outcome: Outcome, as_json: bool, arch: str, cpu: str) -> None:
    if as_json:
        click.echo(json.dumps(outcome.to_json(), indent=1))
    else:
        for problem in outcome.problems:
            click.secho(f"FAIL: {problem}", fg="red", err=True)
        click.secho(f"result: {'PASS' if outcome.ok else 'FAIL'} ({outcome.seconds:.1f} s)", fg="green" if outcome.ok else "red")
    if not outcome.ok:
        raise EmulatedTestError(f"{arch} under -cpu {cpu}: {len(outcome.problems)} problem(s)")
