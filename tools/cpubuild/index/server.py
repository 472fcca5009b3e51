"""A static index server: the index directory as published, with PEP 691
content negotiation for directories, HTTP Range requests, HEAD, ETags.

Built for air-gapped hosts and tests; a production index is any static web
server (docs/index.md shows the nginx equivalent).
"""

from __future__ import annotations

import email.utils
import os
import re
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import quote, unquote, urlsplit

from .pages import JSON_CONTENT_TYPE

HTML_V1 = "application/vnd.pypi.simple.v1+html"
# (media type offered, file in a directory)
OFFERS = ((JSON_CONTENT_TYPE, "index.json"), (HTML_V1, "index.html"), ("text/html", "index.html"))
RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
LATEST = re.compile(r"(?<=^application/vnd\.pypi\.simple)\.latest\+")
CHUNK = 1 << 20


def negotiate(accept: str | None, available: set[str]) -> str | None:
    """The offered media type the Accept header prefers among the files
    available; HTML when the client states no preference; None when every
    available type is refused (q=0)."""
    offers = [(t, f) for t, f in OFFERS if f in available]
    if not offers:
        return None
    if not accept or not accept.strip():
        return next((t for t, _ in offers if t == "text/html"), offers[0][0])
    ranges: list[tuple[str, float]] = []
    for part in accept.split(","):
        fields = [p.strip() for p in part.split(";")]
        q = 1.0
        for param in fields[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = max(0.0, min(1.0, float(value)))
                except ValueError:
                    q = 0.0
        if fields[0]:
            # PEP 691: `latest` names the newest version the server has (v1 here)
            ranges.append((LATEST.sub(".v1+", fields[0].lower()), q))
    best: tuple[float, int, int] | None = None
    chosen = None
    for offer, _ in offers:
        major = offer.split("/")[0]
        matches = (
            [(q, 2) for r, q in ranges if r == offer]
            or [(q, 1) for r, q in ranges if r == f"{major}/*"]
            or [(q, 0) for r, q in ranges if r == "*/*"]
        )
        if not matches:
            continue
        q, specificity = matches[0]
        # ties: a named type beats a wildcard; among named types JSON wins,
        # among wildcards (curl's */*) plain HTML does
        order = (JSON_CONTENT_TYPE, HTML_V1, "text/html")
        preference = order[::-1].index(offer) if specificity else order.index(offer)
        rank = (q, specificity, preference)
        if q > 0 and (best is None or rank > best):
            best, chosen = rank, offer
    return chosen


def content_type(path: Path) -> str:
    if path.name == "index.json":
        return JSON_CONTENT_TYPE
    if path.suffix == ".html":
        return "text/html; charset=utf-8"
    if path.suffix == ".metadata":
        return "text/plain; charset=utf-8"
    if path.suffix == ".json":
        return "application/json"
    return "application/octet-stream"


class IndexRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: installers make many small requests
    server_version = "cpubuild-serve"
    root: ClassVar[Path]
    verbose: ClassVar[bool] = False

    def log_message(self, format: str, *args: object) -> None:
        if self.verbose:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _plain(self, status: HTTPStatus, text: str = "", headers: dict[str, str] | None = None, body: bool = True) -> None:
        data = (text or f"{status.value} {status.phrase}\n").encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _resolve(self) -> tuple[Path | None, bool]:
        """The file system path of the request (None: not servable) and
        whether the URL names a directory."""
        raw = urlsplit(self.path).path
        parts = [unquote(p) for p in raw.split("/")]
        inner = [p for p in parts[1:-1]] + ([parts[-1]] if parts[-1] else [])
        for part in inner:
            # hidden names (locks, temp files), traversal and separators are never served
            if not part or part.startswith(".") or "/" in part or "\\" in part or "\x00" in part:
                return None, False
        return self.root.joinpath(*inner), raw.endswith("/")

    def _serve(self, body: bool) -> None:
        path, slash = self._resolve()
        if path is None or not path.exists():
            self._plain(HTTPStatus.NOT_FOUND, body=body)
            return
        vary = False
        if path.is_dir():
            if not slash:
                location = quote(urlsplit(self.path).path + "/")
                self._plain(HTTPStatus.MOVED_PERMANENTLY, headers={"Location": location}, body=body)
                return
            available = {name for _, name in OFFERS if (path / name).is_file()}
            chosen = negotiate(self.headers.get("Accept"), available)
            if chosen is None:
                status = HTTPStatus.NOT_ACCEPTABLE if available else HTTPStatus.NOT_FOUND
                self._plain(status, body=body)
                return
            path = path / dict(OFFERS)[chosen]
            ctype = chosen if chosen != "text/html" else "text/html; charset=utf-8"
            vary = True
        elif path.is_file():
            ctype = content_type(path)
        else:
            self._plain(HTTPStatus.NOT_FOUND, body=body)
            return
        self._send_file(path, ctype, vary=vary, body=body)

    def _send_file(self, path: Path, ctype: str, *, vary: bool, body: bool) -> None:
        try:
            handle = path.open("rb")
        except OSError:
            self._plain(HTTPStatus.NOT_FOUND, body=body)
            return
        with handle:
            stat = os.fstat(handle.fileno())
            size = stat.st_size
            etag = f'"{stat.st_mtime_ns:x}-{size:x}"'
            headers = {
                "Content-Type": ctype,
                "Accept-Ranges": "bytes",
                "ETag": etag,
                "Last-Modified": email.utils.formatdate(stat.st_mtime, usegmt=True),
                # wheels and .metadata under a commit never change; pages do
                "Cache-Control": "max-age=0, must-revalidate" if vary or ctype.startswith("text/html") or path.suffix == ".json"
                else "public, max-age=31536000, immutable",
            }
            if vary:
                headers["Vary"] = "Accept"
            if etag in [t.strip() for t in self.headers.get("If-None-Match", "").split(",")]:
                self.send_response(HTTPStatus.NOT_MODIFIED)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end, status = 0, size - 1, HTTPStatus.OK
            wanted = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            if wanted and (if_range is None or if_range.strip() == etag):
                span = _parse_range(wanted, size)
                if span is None:
                    self._plain(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, headers={"Content-Range": f"bytes */{size}"}, body=body)
                    return
                if span != (0, size - 1) or wanted.strip() != "bytes=0-":
                    start, end = span
                    status = HTTPStatus.PARTIAL_CONTENT
                    headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            length = max(0, end - start + 1)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if not body:
                return
            handle.seek(start)
            left = length
            while left > 0:
                chunk = handle.read(min(CHUNK, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """One byte range (first, last), clipped to the file; None when it is
    not satisfiable. A multi-range request is answered with its first range."""
    first = header.split(",")[0].strip()
    if not first.startswith("bytes="):
        return None
    match = RANGE.match(first)
    if not match or (not match.group(1) and not match.group(2)):
        return None
    lo, hi = match.group(1), match.group(2)
    if not lo:  # suffix: the last N bytes
        n = int(hi)
        if n == 0 or size == 0:
            return None
        return max(0, size - n), size - 1
    start = int(lo)
    end = min(int(hi), size - 1) if hi else size - 1
    if start >= size or end < start:
        return None
    return start, end


def make_server(root: Path, host: str = "127.0.0.1", port: int = 8000, *, verbose: bool = False) -> ThreadingHTTPServer:
    handler = type("BoundIndexRequestHandler", (IndexRequestHandler,), {"root": root.resolve(), "verbose": verbose})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def nginx_server_block(root: Path, host: str = "127.0.0.1", port: int = 8000) -> str:
    """The same index served by nginx: index.html by default, index.json for
    clients that ask for PEP 691 JSON (a plain regex on Accept: q-values are
    not weighed), hidden lock and temp files refused. Goes in an http {} block."""
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"""# cpubuild index at {root} (generated by `cpubuild serve --print-nginx-config`)
map $http_accept $cpubuild_simple_index {{
    default index.html;
    "~*application/vnd\\.pypi\\.simple\\.(v1|latest)\\+json" index.json;
}}
server {{
    listen {listen};
    root {root};
    location ~ /\\. {{ return 404; }}
    location / {{
        index $cpubuild_simple_index;
        add_header Vary Accept;
    }}
    location ~ /index\\.json$ {{
        types {{ }}
        default_type {JSON_CONTENT_TYPE};
        add_header Vary Accept;
        add_header Cache-Control "max-age=0, must-revalidate";
    }}
    location ~ /index\\.html$ {{
        add_header Vary Accept;
        add_header Cache-Control "max-age=0, must-revalidate";
    }}
}}
"""
