"""`cpubuild ci [--check] [--lint]`: a project's release pipeline, rendered.

ci/release.yml (a GitHub Actions workflow; copy it to .github/workflows/) is
generated from the project's matrix (its arches; their cross toolchains from
cpubuild's hardware data) and the emulated CPU models each arch's wheel is
tested under: by default derived from the hardware data's qemu models (one
per variant the models can tell apart), or listed in ci/emulation.toml.
Jobs: build a wheel per arch, test each under its CPU models with `cpubuild
test`, publish to the index keyed by commit (nightly on main, a release on v*
tags), then install the published wheel from the index with uv and run its
report. `--check` fails when ci/ is stale. [tool.cpubuild.ci] `cpubuild`
says how the jobs install cpubuild (a pip requirement or a path).
"""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import MatrixFileError
from ..matrix import MatrixError, load_matrix
from ..project import find_project
from ..supplychain import pin_actions as pin_workflow
from ..workflow.files import check_fresh, lint, lint_rendered, write_rendered
from ..workflow.render import pipeline_of, render_all


@click.command("ci")
@click.option("--check", is_flag=True, help="Fail (exit 1) when ci/ differs from what the matrix renders.")
@click.option("--lint", "run_lint", is_flag=True, help="Also run actionlint on the rendered workflow.")
@click.option("--dir", "ci_dir", type=click.Path(path_type=Path, file_okay=False), default=None, help="Default: <project>/ci.")
@click.option("--matrix", "matrix_path", type=click.Path(path_type=Path, dir_okay=False), default=None, help="Default: the project's matrix.")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
@click.option("--pin-actions", is_flag=True, help="Pin every action to a commit SHA (cpubuild's table), the release in a comment.")
def command(check: bool, run_lint: bool, ci_dir: Path | None, matrix_path: Path | None, project_dir: Path | None,
            pin_actions: bool) -> None:
    """Render the project's release pipeline from its ISA matrix into ci/."""
    project = find_project(project_dir)
    ci_dir = ci_dir or project.root / "ci"
    try:
        matrix = load_matrix(matrix_path) if matrix_path else project.load_matrix()
    except MatrixError as exc:
        raise MatrixFileError(str(exc)) from None
    rendered = render_all(matrix, ci_dir, pipeline_of(project))
    if pin_actions:
        rendered = {name: pin_workflow(text) for name, text in rendered.items()}
    if check:
        check_fresh(rendered, ci_dir)
        if run_lint:
            lint([ci_dir / name for name in rendered])
        click.echo(f"ci/ is up to date ({', '.join(rendered)})")
        return
    if run_lint:
        lint_rendered(rendered)
    for path, written in write_rendered(rendered, ci_dir):
        click.echo(f"{'wrote' if written else 'unchanged'} {path}")
