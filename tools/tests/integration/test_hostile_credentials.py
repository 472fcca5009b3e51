"""Credentials in index URLs: used (from the URL or ~/.netrc) by
`cpubuild develop --precompiled`'s index client, never printed. Loopback only."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from cpubuild.index.client import IndexReadError, fetch, project_files, redact
from cpubuild.index.server import IndexRequestHandler, make_server
from cpubuild.index.wheelfile import write_wheel
from hostile import assert_one_line, cli

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


def test_pip_index_settings_lend_their_credentials_to_the_same_host(index: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with auth_server(index) as port:
        for name, value in (("PIP_EXTRA_INDEX_URL", f"https://pypi.org/simple http://relp:{SECRET}@127.0.0.1:{port}/simple/"),
                            ("PIP_INDEX_URL", f"http://relp:{SECRET}@127.0.0.1:{port}/"),
                            ("UV_INDEX", f"private=http://relp:{SECRET}@127.0.0.1:{port}/simple/")):
            with monkeypatch.context() as env:
                env.setenv(name, value)
                files = project_files(f"http://127.0.0.1:{port}/{COMMIT}/cpu/", "relp")
                assert files is not None and len(files) == 1, name
        # another port of the same host gets nothing
        monkeypatch.setenv("PIP_INDEX_URL", f"http://relp:{SECRET}@127.0.0.1:1/")
        with pytest.raises(IndexReadError) as caught:
            project_files(f"http://127.0.0.1:{port}/{COMMIT}/cpu/", "relp")
        assert "HTTP 401" in caught.value.message and SECRET not in caught.value.message


def test_develop_reads_pip_index_credentials_and_never_prints_them(index: Path, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    assert cli("init", str(project), "--name", "relp").returncode == 0
    with auth_server(index) as port:
        out = cli("develop", "--precompiled", "--commit", COMMIT, "--index", f"http://127.0.0.1:{port}/", cwd=project,
                  env={"PIP_INDEX_URL": f"http://relp:wrong-{SECRET}@127.0.0.1:{port}/", "NETRC": str(tmp_path / "none")})
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "HTTP 401" in out.stderr and SECRET not in out.stdout + out.stderr


def _workflow(project: Path) -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    data: dict[str, Any] = yaml.safe_load((project / "ci" / "release.yml").read_text())
    return data


def test_the_workflow_takes_index_credentials_from_a_secret_through_the_environment(index: Path, tmp_path: Path) -> None:
    """Rendered with credentialed index URLs all around (the user's shell): none reaches the
    workflow; its install step reads the index from a secret through its environment, and
    that step, run as written against an index behind Basic auth, installs and never prints it."""
    project = tmp_path / "relp"
    assert cli("init", str(project), "--name", "relp").returncode == 0
    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text()
                                            + '\n[tool.cpubuild.ci]\ncpubuild = "cpubuild==0.2.0"\n')
    credentialed = {k: f"http://relp:{SECRET}@127.0.0.1:8/" for k in ("CPUBUILD_INDEX_URL", "PIP_INDEX_URL", "UV_INDEX_URL")}
    out = cli("ci", "--project", str(project), env=credentialed)
    assert out.returncode == 0, out.stderr
    text = (project / "ci" / "release.yml").read_text()
    assert SECRET not in text and "relp:" not in text
    (step,) = [s for s in _workflow(project)["jobs"]["verify"]["steps"] if "run" in s]
    assert step["env"]["INDEX_AUTH_URL"] == "${{ secrets.CPUBUILD_INDEX_AUTH_URL }}"
    assert "${INDEX_AUTH_URL:-$INDEX_URL}" in step["run"] and "export UV_EXTRA_INDEX_URL=" in step["run"]
    assert "--extra-index-url" not in step["run"]  # not in any command line
    # the step as written, against the index behind Basic auth (a wheel that reports like a project's)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    built = write_wheel(wheels, name="relp", version="2.0", files={"relp/__init__.py": b"",
                        "relp/__main__.py": b"import json\nprint(json.dumps({'relp': 'ok'}))\n"})
    commit = "9" * 40
    assert cli("publish", str(built), "--to", str(index), "--commit", commit).returncode == 0
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    with auth_server(index) as port:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHONPATH"))}
        env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", GITHUB_SHA=commit, NETRC=str(tmp_path / "none"),
                   INDEX_URL=f"http://127.0.0.1:{port}", INDEX_AUTH_URL=f"http://relp:{SECRET}@127.0.0.1:{port}")
        ran = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step["run"]], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert json.loads(ran.stdout.strip().splitlines()[-1]) == {"relp": "ok"}
    assert SECRET not in ran.stdout + ran.stderr


def test_a_cpubuild_url_with_credentials_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "relp"
    assert cli("init", str(project), "--name", "relp").returncode == 0
    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text() + "\n[tool.cpubuild.ci]\n"
                                            f'cpubuild = "cpubuild @ https://ci:{SECRET}@files.example/cpubuild-0.2.0-py3-none-any.whl"\n')
    out = cli("ci", "--project", str(project))
    line = assert_one_line(out, 2, "[tool.cpubuild.ci] cpubuild", "credentials")
    assert SECRET not in out.stdout + out.stderr and not (project / "ci").exists(), line
