"""`cpubuild merge PARTIAL... --out DIR`: partial wheels from several runners ->
the wheel one `cpubuild wheel` with all their variants makes (docs/scale-out.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..wheelbuild.merge import merge_or_fail


@click.command("merge")
@click.argument("partials", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("wheelhouse"),
              show_default=True, help="Directory for the merged wheel.")
@click.option("--variant-wheels", is_flag=True,
              help="Also derive PEP 825 variant wheels from the merged wheel (reads the project's isa_matrix.toml).")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory, for --variant-wheels (default: the nearest one above the working directory).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
def command(partials: tuple[Path, ...], out_dir: Path, variant_wheels: bool, project_dir: Path | None, as_json: bool) -> None:
    """Merge partial wheels (`cpubuild wheel --partial --isa X` on several runners) into one.

    They must come from one commit, project, compiler and cpubuild, each with
    the baseline (an arch with a floor: one of them with the floor); the result
    is byte-identical to a single build of the union of their variants.
    Refusals name the differing field; nothing is written.
    """
    merged = merge_or_fail(partials, out_dir)
    summary: dict[str, object] = {"wheel": str(merged.wheel), "arch": merged.arch, "variants": list(merged.variants),
                                  "partials": [str(p) for p in partials]}
    if variant_wheels:
        from ..project import find_project
        from ..wheelbuild.variantwheels import make_variant_wheels

        matrix = find_project(project_dir).load_matrix()
        summary["variant_wheels"] = make_variant_wheels(merged.wheel, matrix, merged.arch, merged.source_date_epoch)
    click.echo(json.dumps(summary, indent=1) if as_json else str(merged.wheel))
