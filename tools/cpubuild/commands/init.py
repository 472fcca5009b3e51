"""`cpubuild init DIR --name NAME [--template minimal|dot|torch] [--arch x86_64,aarch64] [--force]`:
a new project that works as written.

Writes a project from a template shipped in cpubuild/templates/<template>:
pyproject.toml ([tool.cpubuild], the cpubuild version provider), isa_matrix.toml
(variants of the arches asked for), CMakeLists.txt (cpubuild's CMake package),
kernels with one code path per variant, the Python package (`python -m NAME`,
selftest), a pytest file, a benchmark, a README and a .gitignore. `minimal`: one C
function behind a ctypes binding (replace two files to wrap your own). `dot` (the
default): float32 and int8 dot products with a code path per variant. `torch`:
vLLM-style ops (rms_norm, silu_and_mul) as a torch C++ extension, one per
variant, loaded through torch.ops. `--kind ctypes|torch` (older spelling) means
`--template dot|torch`.

NAME is the distribution name; the import package is NAME with '-' turned
into '_', the environment prefix (PREFIX_ISA) is the package upper-cased.
Everything is validated before anything is written: bad input exits 2 and
leaves DIR as it was.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..contract import KINDS
from ..licenses import DEFAULT as DEFAULT_LICENSE
from ..runtime.select import env_names
from ..scaffold import (
    TEMPLATE_ARCHES,
    check_target,
    parse_arches,
    project_files,
    project_names,
    template_for,
    write_files,
)
from ..templates import DEFAULT_TEMPLATE, TEMPLATES


@click.command(name="init")
@click.argument("directory", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--name", required=True, help="Distribution name; the import package is NAME with '-' -> '_'.")
@click.option("--template", type=click.Choice(tuple(TEMPLATES)), default=None,
              help=f"minimal: one C function behind a ctypes binding; dot: dot products with a code path per "
                   f"variant; torch: torch.ops extensions (needs torch to build). Default: {DEFAULT_TEMPLATE}.")
@click.option("--kind", type=click.Choice(KINDS), default=None,
              help="ctypes (= --template dot) or torch (= --template torch).")
@click.option("--arch", "arches", multiple=True, metavar="ARCH[,ARCH]",
              help=f"Arches to write variants for (default: {','.join(TEMPLATE_ARCHES)}).")
@click.option("--license", "license_id", default=DEFAULT_LICENSE, show_default=True, metavar="SPDX",
              help="SPDX licence expression for pyproject.toml; Apache-2.0 and MIT also get their text as LICENSE.")
@click.option("--force", is_flag=True, help="Write into a non-empty DIR (replacing files of the same names).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
def command(directory: Path, name: str, template: str | None, kind: str | None, arches: tuple[str, ...],
            license_id: str, force: bool, quiet: bool) -> None:
    """Create a new project in DIR: kernels, ISA variants, Python package, selftest, tests, README.

    The project builds as written: `cpubuild wheel --project DIR`, then
    install the wheel and run `pytest` in DIR (see its README.md).
    """
    names = project_names(name)
    chosen = parse_arches(arches or (",".join(TEMPLATE_ARCHES),))
    template = template_for(template, kind)
    kind = TEMPLATES[template][0]
    files = project_files(names, chosen, template, license_id)
    check_target(directory, files, force=force)
    write_files(directory, files)
    if quiet:
        return
    for rel in files:
        click.echo(f"wrote {directory / rel}")
    click.echo(f"\n{names.dist}: {kind} project ({template} template), package {names.package}, variants for {', '.join(chosen)}, "
               f"{env_names(names.prefix)[0]} forces a variant. Next:")
    click.echo(f"  cpubuild wheel --project {directory} --install python3" + ("    # against this Python's torch, or --torch X.Y.Z" if kind == "torch" else ""))
    click.echo(f"  python3 -m pip install pytest && (cd {directory} && python3 -m pytest)")
