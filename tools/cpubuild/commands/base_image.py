"""`cpubuild base-image [--platform P]`: a Debian bookworm base image from debootstrap.

No registry needed: the rootfs is made by debootstrap (cached under the cpubuild
cache, see cpubuild.rootfs), trimmed, and built `FROM scratch` with --platform
so the image carries the right architecture. `cpubuild image` uses it by
default and builds it on demand; this command makes or refreshes it up front.
It needs no project: the platforms are cpubuild's (hardware data). The image ID
of each base is recorded for the builds that pin it (cpubuild.docker.pin).
"""

from __future__ import annotations

import json

import click
from rich.console import Console

from ..docker.platforms import parse_platforms
from ..hardware import hardware


@click.command("base-image")
@click.option("--platform", "platforms", multiple=True, help="linux/amd64, linux/arm64, linux/s390x (comma-separated or repeated); default: this host's.")
@click.option("--force", is_flag=True, help="Rebuild the image even when the local one is current.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
@click.option("-q", "--quiet", count=True, help="No progress and no summary (errors still print).")
@click.option("-v", "--verbose", count=True, help="More output (-v: the whole build log).")
def command(platforms: tuple[str, ...], force: bool, as_json: bool, quiet: int, verbose: int) -> None:
    """Build cpubuild/debian:bookworm-<arch> from debootstrap (python3 + tcmalloc)."""
    from ..docker.base import ensure_base_image
    from ..docker.engine import Engine
    from ..docker.progress import ConsoleProgress

    console = Console(stderr=True, quiet=bool(quiet))
    arches = parse_platforms(hardware().arches, platforms)
    engine = Engine.connect()
    results = []
    for arch in arches:
        progress = ConsoleProgress(console, verbosity=-1 if quiet else min(verbose, 1), prefix=f"{arch.debian_arch} ")
        with progress.live(f"base image for {arch.docker_platform}"):
            image = ensure_base_image(engine, arch, force=force, listener=progress, log=console.print)
        results.append(image)
        if not as_json and not quiet:
            state = f"built in {image.seconds:.1f} s" if image.built else "current, reused"
            console.print(f"{image.tag} ({image.platform}): {image.size / 1e6:.0f} MB, {state}, {image.image_id}", highlight=False)
    if as_json:
        click.echo(
            json.dumps(
                {"images": [{"tag": r.tag, "platform": r.platform, "id": r.image_id, "built": r.built, "seconds": round(r.seconds, 2), "size": r.size} for r in results]},
                indent=2,
            )
        )
