"""`cpubuild image`: per-ISA, multi-arch container images of a project (the work is
cpubuild.docker.images; docs/images.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from ..docker import plan
from ..docker.images import make_images, sync_dockerfile_of
from ..project import find_project


@click.command("image")
@click.option("--isa", "isa", multiple=True, help="Variants (repeatable or comma-separated); default: all of each platform.")
@click.option("--platform", "platforms", multiple=True, help="linux/amd64, linux/arm64, linux/s390x (comma-separated or repeated); default: this host's.")
@click.option("--target", type=click.Choice(plan.TARGETS), default="runtime", show_default=True, help="Dockerfile stage to build.")
@click.option("--tag", default=None, help="Image tag (with several platforms or ISA sets, -<arch> is appended); default <project>:<target>-<arch>[-<isa>].")
@click.option("--base", default=None, help="A LOCAL base image (Debian bookworm): NAME[:TAG], NAME@sha256:... or an image ID; default cpubuild/debian:bookworm-<arch>, built by debootstrap when missing. Builds pin it by digest.")
@click.option("--wheel", "wheels", multiple=True, type=click.Path(path_type=Path), help="Use this wheel instead of compiling (one per platform; repeatable).")
@click.option("--each-variant", is_flag=True, help="Also one image per single variant (baseline + it), like per-ISA images.")
@click.option("--bake", "bake_file", type=click.Path(path_type=Path), default=None, help="Write a buildx bake file (JSON) for this matrix instead of building.")
@click.option("--output", type=click.Path(path_type=Path), default=None, help="With --target build: copy the built wheel into this directory.")
@click.option("--host-ca/--no-host-ca", default=True, show_default=True, help="Trust the host's local CAs (/usr/local/share/ca-certificates) in the build stage, for TLS-inspecting proxies in front of PyPI.")
@click.option("--torch", "torch", default=None, metavar="X.Y.Z",
              help="Torch projects: the torch release to build against and install (default: this Python's; "
                   "a given --wheel brings its own).")
@click.option("--no-smoke", is_flag=True, help="Skip running `python3 -m <package> --json` in the built image.")
@click.option("--no-cache", is_flag=True, help="Build without the layer cache.")
@click.option("--sync-dockerfile", is_flag=True, help="Refresh docker/Dockerfile's CPUBUILD_CPU_* args from the matrix (or write cpubuild's template there) and exit.")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
@click.option("-q", "--quiet", count=True, help="No progress; print only the built tags (errors still print).")
@click.option("-v", "--verbose", count=True, help="More output (-v: the whole build log).")
def command(
    isa: tuple[str, ...],
    platforms: tuple[str, ...],
    target: str,
    tag: str | None,
    base: str | None,
    wheels: tuple[Path, ...],
    each_variant: bool,
    bake_file: Path | None,
    output: Path | None,
    host_ca: bool,
    torch: str | None,
    no_smoke: bool,
    no_cache: bool,
    sync_dockerfile: bool,
    project_dir: Path | None,
    as_json: bool,
    quiet: int,
    verbose: int,
) -> None:
    """Build per-ISA, multi-arch container images of the project."""
    console = Console(stderr=True, quiet=bool(quiet))
    if sync_dockerfile:
        sync_dockerfile_of(find_project(project_dir), console)
        return
    made = make_images(project_dir=project_dir, isa=isa, platforms=platforms, target=target, tag=tag, base=base,
                       wheels=wheels, each_variant=each_variant, bake_file=bake_file, output=output, host_ca=host_ca,
                       torch=torch, smoke=not no_smoke, no_cache=no_cache, console=console,
                       verbosity=-1 if quiet else min(verbose, 1))
    if made.bake_document is not None:
        if as_json:
            click.echo(json.dumps(made.bake_document, indent=2, sort_keys=True))
        else:
            wheel_targets = len(made.bake_document["target"]) - made.image_targets
            console.print(f"wrote {bake_file}: {made.image_targets} image targets, {wheel_targets} wheel targets")
            console.print(f"build them with: docker buildx bake -f {bake_file}   (wheels: docker buildx bake -f {bake_file} wheels)")
        return
    if as_json:
        click.echo(json.dumps({"images": [b.to_json() for b in made.built]}, indent=2))
        return
    if quiet:
        for b in made.built:
            click.echo(b.spec.tag)
        return
    for b in made.built:
        picked = f", selects {b.selected}" if b.selected else ""
        console.print(
            f"[green]built[/green] {b.spec.tag} ({b.spec.platform}, ISA {b.spec.label}): {b.size / 1e6:.0f} MB, "
            f"{b.seconds:.1f} s, {b.cached_steps}/{b.steps} steps cached{picked}",
            highlight=False,
        )
