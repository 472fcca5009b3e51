"""Credentials in index URLs: used (from the URL or ~/.netrc) by
`cpubuild develop --precompiled`'s index client, never printed. Loopback only."""

from __future__ import annotations

import base64
import contextlib
import threading
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path

import pytest
from cpubuild.index.client import IndexReadError, fetch, project_files, redact
from cpubuild.index.server import IndexRequestHandler, make_server
from cpubuild.index.wheelfile import write_wheel
from hostile import cli

COMMIT = "8" * 40
SECRET = "s3cr3t-t0ken"


@contextlib.contextmanager
def auth_server(root: Path) -> Iterator[int]:
    """`cpubuild serve`'s handler behind HTTP Basic auth (user: relp, password: SECRET)."""
    server = make_server(root, "127.0.0.1", 0, workers=4, idle_timeout=2.0)
    expected = "Basic " + base64.b64encode(f"relp:{SECRET}".encode()).decode()
    base = server.RequestHandlerClass

    class Guarded(base):  # type: ignore[valid-type,misc]
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != expected:
                self._plain(HTTPStatus.UNAUTHORIZED, headers={"WWW-Authenticate": 'Basic realm="index"'})
                return
            super().do_GET()

    assert issubclass(Guarded, IndexRequestHandler)
    server.RequestHandlerClass = Guarded
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def index(tmp_path: Path) -> Path:
    root = tmp_path / "index"
    built = write_wheel(tmp_path, name="relp", version="1.0", files={"relp/__init__.py": b""})
    assert cli("publish", str(built), "--to", str(root), "--commit", COMMIT).returncode == 0
    return root


def test_redact() -> None:
    assert redact(f"see http://relp:{SECRET}@h:1/x and https://{SECRET}@h/y") == "see http://relp:***@h:1/x and https://***@h/y"
    assert redact("http://h/x?user=a@b") == "http://h/x?user=a@b"


def test_credentials_in_the_url_and_in_netrc_work(index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with auth_server(index) as port:
        files = project_files(f"http://relp:{SECRET}@127.0.0.1:{port}/{COMMIT}/cpu/", "relp")
        assert files is not None and [f.filename for f in files] == ["relp-1.0-py3-none-any.whl"]
        got = fetch(files[0].url)
        assert got is not None and got[0].startswith(b"PK")
        netrc = tmp_path / "netrc"
        netrc.write_text(f"machine 127.0.0.1 login relp password {SECRET}\n")
        netrc.chmod(0o600)
        monkeypatch.setenv("NETRC", str(netrc))
        files = project_files(f"http://127.0.0.1:{port}/{COMMIT}/cpu/", "relp")
        assert files is not None and len(files) == 1


def test_a_refused_password_is_not_printed(index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with auth_server(index) as port, pytest.raises(IndexReadError) as caught:
        project_files(f"http://relp:wrong-{SECRET}@127.0.0.1:{port}/{COMMIT}/cpu/", "relp")
    assert "HTTP 401" in caught.value.message and "relp:***@" in caught.value.message
    assert SECRET not in caught.value.message


@pytest.mark.parametrize("how", ["refused", "unreachable", "env"])
def test_develop_never_prints_the_token(how: str, index: Path, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    assert cli("init", str(project), "--name", "relp").returncode == 0
    with auth_server(index) as port:
        live = f"http://relp:wrong-{SECRET}@127.0.0.1:{port}/"
        url = {"refused": live, "unreachable": f"http://relp:{SECRET}@127.0.0.1:1/", "env": live}[how]
        args = ("develop", "--precompiled", "--commit", COMMIT) + (() if how == "env" else ("--index", url))
        out = cli(*args, cwd=project, env={"CPUBUILD_INDEX_URL": url, "NETRC": str(tmp_path / "none")})
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert SECRET not in out.stdout + out.stderr
    assert "relp:***@127.0.0.1" in out.stderr, out.stderr
