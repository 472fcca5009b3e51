"""`cpubuild serve` against hostile requests, loopback only and bounded in
count and time: links out of the root (/etc included), absurd paths, Range
values and encodings get a 4xx (never a dropped connection or a traceback),
and a flood of half-open connections cannot pile up threads."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cpubuild.index.server import BoundedHTTPServer, make_server
from hostile import tree_hash

WORKERS = 8


@contextlib.contextmanager
def serving(root: Path, **options: object) -> Iterator[BoundedHTTPServer]:
    server = make_server(root, "127.0.0.1", 0, workers=WORKERS, idle_timeout=1.0, **options)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def raw(server: BoundedHTTPServer, request: bytes, timeout: float = 10) -> tuple[int, bytes]:
    """Sends request bytes, returns (status, whole response)."""
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data and b"Connection: close" not in data and len(data) > 200:
                break
    assert data.startswith(b"HTTP/1."), data[:200]
    return int(data.split(b" ", 2)[1]), data


def get(server: BoundedHTTPServer, target: str, *headers: str) -> tuple[int, bytes]:
    head = "".join(f"{h}\r\n" for h in headers)
    return raw(server, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{head}\r\n".encode("latin-1"))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    index = tmp_path / "index"
    (index / "commit" / "cpu").mkdir(parents=True)
    (index / "commit" / "cpu" / "index.html").write_text("<html>page</html>\n")
    (index / "commit" / "w.whl").write_bytes(b"0123456789" * 100)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (index / "etc_link").symlink_to("/etc", target_is_directory=True)
    (index / "out_link").symlink_to(outside, target_is_directory=True)
    (index / "secret.txt").symlink_to(outside / "secret.txt")
    (index / "inner_link").symlink_to(index / "commit", target_is_directory=True)
    return index


CASES = {  # request target, extra header -> status
    "etc-link": ("/etc_link/passwd", "", 404),
    "etc-link-dir": ("/etc_link/", "", 404),
    "outside-dir-link": ("/out_link/secret.txt", "", 404),
    "outside-file-link": ("/secret.txt", "", 404),
    "inner-link-not-followed": ("/inner_link/w.whl", "", 404),
    "dotdot-encoded": ("/commit/%2e%2e/%2e%2e/etc/passwd", "", 404),
    "slash-encoded": ("/commit%2f..%2f..%2fetc/passwd", "", 404),
    "nul": ("/commit/w.whl%00", "", 404),
    "long-component": ("/" + "a" * 300, "", 414),
    "deep-path": ("/" + "a/" * 3000, "", 414),
    "bad-encoding": ("/commit/%ff%fe", "", 400),
    "range-5000-digits": ("/commit/w.whl", "Range: bytes=" + "9" * 5000 + "-", 416),
    "range-both-5000": ("/commit/w.whl", "Range: bytes=1-" + "9" * 5000, 416),
    "range-garbage": ("/commit/w.whl", "Range: bytes=a-b", 416),
    "range-negative": ("/commit/w.whl", "Range: bytes=--5", 416),
    "good-range": ("/commit/w.whl", "Range: bytes=0-9", 206),
    "good-file": ("/commit/w.whl", "", 200),
    "good-page": ("/commit/cpu/", "", 200),
}


def test_hostile_requests_get_a_4xx_and_nothing_leaks(root: Path, capfd: pytest.CaptureFixture[str]) -> None:
    before = tree_hash(root)
    with serving(root) as server:
        for case, (target, header, status) in CASES.items():
            got, response = get(server, target, *([header] if header else []))
            assert got == status, (case, response[:300])
            assert b"secret" not in response and b"root:" not in response, case
        # http.server's own limits answer too: a 70000-byte request line, 200 headers
        assert raw(server, b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n")[0] == 414
        many = "".join(f"X-{i}: y\r\n" for i in range(200))
        assert raw(server, f"GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n".encode())[0] == 431
    assert "Traceback" not in capfd.readouterr().err
    assert tree_hash(root) == before


def test_follow_symlinks_serves_links_inside_the_root_only(root: Path) -> None:
    with serving(root, follow_symlinks=True) as server:
        assert get(server, "/inner_link/w.whl")[0] == 200
        assert get(server, "/etc_link/passwd")[0] == 404
        assert get(server, "/secret.txt")[0] == 404


def test_half_open_connections_do_not_pile_up_threads(root: Path) -> None:
    """400 connections that never send a byte: the pool stays at its size, the
    excess is closed, idle ones time out, and a real request is answered.
    Over capacity (the pool and its queue: 5 x WORKERS) is checked right after
    it fills: opening all 400 on a loaded host once took longer than the 1 s
    idle timeout, and the request then found a free slot (200, not 503)."""
    baseline = threading.active_count()
    with serving(root) as server:
        socks = []
        try:
            for _ in range(6 * WORKERS):
                socks.append(socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5))
            time.sleep(0.2)
            assert get(server, "/commit/w.whl")[0] == 503  # over capacity: told so, not dropped
            for _ in range(400 - 6 * WORKERS):
                socks.append(socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5))
            time.sleep(0.5)
            assert threading.active_count() <= baseline + 1 + WORKERS  # serve_forever's thread and the pool
            deadline = time.monotonic() + 20
            status = 0
            while time.monotonic() < deadline:  # idle connections time out after 1 s, then the pool is free
                with contextlib.suppress(OSError, AssertionError):
                    status = get(server, "/commit/w.whl")[0]
                if status == 200:
                    break
                time.sleep(0.2)
            assert status == 200
            assert threading.active_count() <= baseline + 1 + WORKERS
        finally:
            for sock in socks:
                sock.close()
