"""`cpubuild publish WHEEL... --to DEST --commit SHA [--channel nightly|release] [--variant cpu]`"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..index import open_storage
from ..index.names import resolve_commit
from ..index.publish import publish
from ..index.wheelcheck import limits_from
from ..index.wheelfile import read_wheel


@click.command("publish")
@click.argument("wheels", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--to", "dest", required=True, metavar="DEST", help="Index root: a directory or s3://bucket/prefix.")
@click.option("--commit", metavar="SHA", help="Full git commit SHA the wheels were built from (or a git revision here).")
@click.option("--channel", type=click.Choice(["nightly", "release"]), help="Also move nightly/ or add to <version>/.")
@click.option("--variant", default="cpu", show_default=True, help="Index tree name below the commit (cpu, ...).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--no-audit", is_flag=True, help="Skip the instruction audit of each wheel (docs/audit.md).")
@click.option("--max-wheel-size", metavar="SIZE", help="Refuse larger wheel files (default 2GiB).")
@click.option("--max-member-size", metavar="SIZE", help="Refuse archive members that inflate past this (default 2GiB).")
@click.option("--max-metadata-size", metavar="SIZE", help="Refuse a larger .dist-info/METADATA (default 1MiB).")
def command(wheels: tuple[Path, ...], dest: str, commit: str | None, channel: str | None, variant: str, as_json: bool, quiet: bool,
            no_audit: bool, max_wheel_size: str | None, max_member_size: str | None, max_metadata_size: str | None) -> None:
    """Publish wheels into a PEP 503/691 index keyed by commit.

    Every wheel is stored once under DEST/<commit>/ with its .metadata file;
    pages are written under DEST/<commit>/<variant>/, DEST/nightly/<variant>/
    (--channel nightly) and DEST/<version>/<variant>/ (--channel release).
    Validates everything before writing (every member's CRC, RECORD, size
    caps, core metadata, name and tags): a bad wheel leaves the index as it was.
    """
    sha = resolve_commit(commit)
    limits = limits_from(max_wheel_size, max_member_size, max_metadata_size)
    infos = [read_wheel(path, limits) for path in wheels]
    if not no_audit:  # audited here, from each wheel's own manifest: no record to trust or forge
        from ..audit.gate import require_clean

        for path in wheels:
            require_clean(path)
    storage = open_storage(dest)
    report = publish(storage, infos, commit=sha, variant=variant, channel=channel)  # type: ignore[arg-type]
    if as_json:
        click.echo(
            json.dumps(
                {
                    "index": storage.url,
                    "commit": report.commit,
                    "variant": report.variant,
                    "stored": list(report.stored),
                    "already_present": list(report.present),
                    "files": [
                        {"filename": w.filename, "sha256": w.sha256, "size": w.size, "path": f"{sha}/{w.filename}"} for w in infos
                    ],
                    "pages": [{"page": p.page + "/", "changed": p.changed, "note": p.note} for p in report.pages],
                },
                indent=1,
            )
        )
        return
    if quiet:
        return
    for name in report.stored:
        click.echo(f"stored   {sha}/{name}")
    for name in report.present:
        click.echo(f"present  {sha}/{name} (identical, nothing to do)")
    for page in report.pages:
        state = "updated " if page.changed else "current "
        click.echo(f"{state} {page.page}/" + (f"  ({page.note})" if page.note else ""))
    click.echo(f"index: {storage.url}/{sha}/{variant}/")
