"""`cpubuild serve DIR [--port N] [--host ADDR]`"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import click

from ..errors import UsageError


@click.command("serve")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind; loopback unless you say otherwise.")
@click.option("-v", "--verbose", is_flag=True, help="Log every request to stderr.")
@click.option("--print-nginx-config", is_flag=True, help="Print an equivalent nginx server block instead of serving.")
@click.option("--follow-symlinks", is_flag=True, help="Serve links whose target stays inside DIRECTORY (default: refuse every link).")
@click.option("--workers", default=32, show_default=True, type=click.IntRange(1, 1024), help="Worker threads (connections served at once).")
@click.option("--idle-timeout", default=30.0, show_default=True, type=click.FloatRange(0.1, 3600), help="Seconds before an idle connection is closed.")
def command(directory: Path, port: int, host: str, verbose: bool, print_nginx_config: bool, follow_symlinks: bool,
            workers: int, idle_timeout: float) -> None:
    """Serve an index directory over HTTP.

    Directories answer with index.html, or with index.json as
    application/vnd.pypi.simple.v1+json when the Accept header asks for it
    (PEP 691); files support HEAD and Range requests. Stop with Ctrl-C.
    """
    from ..index.server import make_server, nginx_server_block

    if print_nginx_config:
        click.echo(nginx_server_block(directory.resolve(), host, port), nl=False)
        return

    try:
        server = make_server(directory, host, port, verbose=verbose, follow_symlinks=follow_symlinks,
                             workers=workers, idle_timeout=idle_timeout)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
    try:
        loopback = ipaddress.ip_address(bound_host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        click.secho(f"warning: serving on {bound_host}, reachable from other hosts", fg="yellow", err=True)
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    click.echo(f"serving {directory.resolve()} at http://{shown}:{bound_port}/", err=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
