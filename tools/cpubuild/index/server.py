"""A static index server: the index directory as published, with PEP 691
content negotiation for directories, HTTP Range requests, HEAD, ETags.

Built for air-gapped hosts and tests; a production index is any static web
server (docs/index.md shows the nginx equivalent).
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote, unquote, urlsplit

from .pages import JSON_CONTENT_TYPE

HTML_V1 = "application/vnd.pypi.simple.v1+html"
# (media type offered, file in a directory)
OFFERS = ((JSON_CONTENT_TYPE, "index.json"), (HTML_V1, "index.html"), ("text/html", "index.html"))
RANGE = re.compile(r"^bytes=(\d{0,18})-(\d{0,18})$")  # 18 digits: past any file size, short of int() limits
LATEST = re.compile(r"(?<=^application/vnd\.pypi\.simple)\.latest\+")
CHUNK = 1 << 20
MAX_PATH = 2048  # characters of the request path, as nginx's default large header buffer roughly allows
MAX_COMPONENT = 255  # a file name on every file system the index lives on
MAX_DEPTH = 32  # an index is five levels deep
WORKERS = 32
BUSY = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
IDLE_TIMEOUT_S = 30.0


class BadRequest(Exception):
    """A request the server cannot parse: answered with its status, never a dropped connection."""

    def __init__(self, status: HTTPStatus) -> None:
        super().__init__(status.phrase)
        self.status = status


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
    follow_symlinks: ClassVar[bool] = False  # links whose target stays inside the root
    timeout = IDLE_TIMEOUT_S  # a connection idle this long (half-open included) is closed

    def log_message(self, format: str, *args: object) -> None:
        if self.verbose:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        try:
            self._serve(body=body)
        except BadRequest as exc:
            self._plain(exc.status, body=body, headers={"Connection": "close"})
            self.close_connection = True
        except (ValueError, UnicodeError, OverflowError):
            self._plain(HTTPStatus.BAD_REQUEST, body=body, headers={"Connection": "close"})
            self.close_connection = True

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
        whether the URL names a directory. Unparsable requests raise BadRequest."""
        raw = urlsplit(self.path).path
        if len(self.path) > MAX_PATH:
            raise BadRequest(HTTPStatus.REQUEST_URI_TOO_LONG)
        try:
            parts = [unquote(p, errors="strict") for p in raw.split("/")]
        except UnicodeDecodeError:
            raise BadRequest(HTTPStatus.BAD_REQUEST) from None
        inner = [p for p in parts[1:-1]] + ([parts[-1]] if parts[-1] else [])
        if len(inner) > MAX_DEPTH or any(len(p.encode()) > MAX_COMPONENT for p in inner):
            raise BadRequest(HTTPStatus.REQUEST_URI_TOO_LONG)
        for part in inner:
            # hidden names (locks, temp files), traversal and separators are never served
            if not part or part.startswith(".") or "/" in part or "\\" in part or "\x00" in part:
                return None, False
        path = self.root.joinpath(*inner)
        return (path if self._inside(path) else None), raw.endswith("/")

    def _inside(self, path: Path) -> bool:
        """The path resolves inside the root; without follow_symlinks, no component is a link."""
        resolved = Path(os.path.realpath(path))
        if resolved != self.root and self.root not in resolved.parents:
            return False
        return self.follow_symlinks or resolved == path

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
            if not self._inside(path):
                self._plain(HTTPStatus.NOT_FOUND, body=body)
                return
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
            flags = os.O_RDONLY | os.O_CLOEXEC | (0 if self.follow_symlinks else os.O_NOFOLLOW)
            handle = os.fdopen(os.open(path, flags), "rb")
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


class BoundedHTTPServer(ThreadingHTTPServer):
    """A fixed pool of worker threads: connections beyond the pool wait in a
    bounded queue, and those beyond the queue are closed at once, so a flood
    of idle or half-open connections cannot pile up threads."""

    daemon_threads = True
    request_queue_size = 128  # listen backlog (nginx: 511); 5 would drop SYNs under a burst

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *, workers: int = WORKERS,
                 backlog: int | None = None) -> None:
        super().__init__(address, handler)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cpubuild-serve")
        self.slots = threading.BoundedSemaphore(workers + (backlog if backlog is not None else 4 * workers))

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            # over capacity: a 503 (written without blocking) and close, never a queue without bound
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(BUSY)
            self.shutdown_request(request)
            return
        self.pool.submit(self._work, request, client_address)

    def _work(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that vanished mid-answer is not the server's problem; no traceback on stderr

    def server_close(self) -> None:
        super().server_close()
        self.pool.shutdown(wait=False, cancel_futures=True)


def make_server(root: Path, host: str = "127.0.0.1", port: int = 8000, *, verbose: bool = False,
                follow_symlinks: bool = False, workers: int = WORKERS, idle_timeout: float = IDLE_TIMEOUT_S) -> BoundedHTTPServer:
    handler = type("BoundIndexRequestHandler", (IndexRequestHandler,), {
        "root": root.resolve(), "verbose": verbose, "follow_symlinks": follow_symlinks, "timeout": idle_timeout})
    return BoundedHTTPServer((host, port), handler, workers=workers)


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
