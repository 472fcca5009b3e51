"""Real installers against a real index: two commits of a real cpukern wheel
published with `cpubuild publish`, served by nginx, by `cpubuild serve` and
as file:// URLs, installed with uv and pip into fresh venvs."""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cpubuild.index.storage import LocalStorage
from cpubuild.index.verify import verify_tree
from cpubuild.index.wheelfile import retag_wheel
from cpubuild.matrix import load_matrix
from test_index_publish import cli
from testsupport import CPUKERN_MATRIX, REPO, require, require_tool, run

pytestmark = pytest.mark.slow

COMMIT_A = "a1" * 20
COMMIT_B = "b2" * 20
UV_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


def cache_dir(name: str, fallback: Path) -> Path:
    """A cache outside the repository that survives between runs, if writable."""
    base = Path(os.environ.get("CPUBUILD_CACHE", "/var/cache/cpubuild"))
    try:
        (base / name).mkdir(parents=True, exist_ok=True)
        return base / name
    except OSError:
        return fallback


@pytest.fixture(scope="session")
def real_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real cpukern wheel for this host, built through pip with
    scikit-build-core; the baseline and the next variant only, to keep it
    quick (the index does not care how many libraries a wheel holds; develop
    --precompiled must extract every one)."""
    require_tool("cmake")
    require(shutil.which("c++") is not None or shutil.which("g++") is not None, "no C++ compiler")
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    variants = load_matrix(CPUKERN_MATRIX).variants_for(arch)
    out = tmp_path_factory.mktemp("real-wheel")
    build = cache_dir("build-index-tests", out / "build")
    env = dict(os.environ, CPUKERN_ISA_BUILD=",".join(v.name for v in variants[:2]))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-C", f"build-dir={build}", "-w", str(out), str(REPO)]
    if shutil.which("ccache"):
        env["CCACHE_DIR"] = str(cache_dir("ccache", out / "ccache"))
        cmd += ["-C", "cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache", "-C", "cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache"]
    run(cmd, env=env, timeout=1800)
    (wheel,) = out.glob("cpukern-*.whl")
    return wheel


@dataclass(frozen=True)
class Published:
    root: Path
    wheel_a: Path
    wheel_b: Path
    empty: Path  # an empty simple index: stands in for PyPI, so nothing leaves this host


@pytest.fixture(scope="module")
def published(real_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Published:
    tmp = tmp_path_factory.mktemp("published")
    wheel_a = retag_wheel(real_wheel, tmp, "0.1.0.dev1+ga1a1a1a.cpu")
    wheel_b = retag_wheel(real_wheel, tmp, "0.1.0.dev2+gb2b2b2b.cpu")
    root = tmp / "index"
    for wheel, commit in ((wheel_a, COMMIT_A), (wheel_b, COMMIT_B)):
        out = cli("publish", str(wheel), "--to", str(root), "--commit", commit, "--channel", "nightly")
        assert out.returncode == 0, out.stderr
    for tree in (f"{COMMIT_A}/cpu", f"{COMMIT_B}/cpu", "nightly/cpu"):
        report = verify_tree(LocalStorage(root), tree)
        assert report.problems == [], report.problems
    (tmp / "empty").mkdir()
    return Published(root=root, wheel_a=wheel_a, wheel_b=wheel_b, empty=tmp / "empty")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    for _ in range(200):
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}: {log.read_text() if log.exists() else ''}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{url} did not come up")


@dataclass(frozen=True)
class Server:
    kind: str
    base: str  # URL of the index root, ending in /
    log: Path | None


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, published: Published, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    kind = request.param
    tmp = tmp_path_factory.mktemp(kind)
    if kind == "file":
        yield Server(kind=kind, base=published.root.as_uri() + "/", log=None)
        return
    port = free_port()
    log = tmp / "server.log"
    if kind == "cpubuild-serve":
        env = dict(os.environ, PYTHONPATH=str(REPO / "tools"))
        cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])",
               "serve", str(published.root), "--port", str(port), "-v"]
    else:
        require_tool("nginx")
        block = cli("serve", str(published.root), "--port", str(port), "--print-nginx-config").stdout
        user = "user root;\n" if os.geteuid() == 0 else ""
        temps = "".join(f"    {t}_temp_path {tmp}/{t};\n" for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf = tmp / "nginx.conf"
        conf.write_text(
            f"{user}worker_processes 1;\npid {tmp}/nginx.pid;\nerror_log {log} warn;\nevents {{ worker_connections 64; }}\n"
            f"http {{\n    include /etc/nginx/mime.types;\n    default_type application/octet-stream;\n"
            f"    access_log {tmp}/access.log;\n{temps}{block}}}\n"
        )
        env = dict(os.environ)
        cmd = ["nginx", "-p", str(tmp), "-e", str(log), "-c", str(conf), "-g", "daemon off;"]
    with log.open("ab") as sink:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=sink, env=env)
    try:
        wait_for(f"http://127.0.0.1:{port}/{COMMIT_A}/cpu/", proc, log)
        yield Server(kind=kind, base=f"http://127.0.0.1:{port}/", log=tmp / "access.log" if kind == "nginx" else log)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL_ENV"))}
    env.update(UV_CACHE_DIR=str(tmp / "uv-cache"), PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", UV_NO_CONFIG="1", UV_PYTHON_DOWNLOADS="never")
    return env


def fresh_venv(tmp: Path, env: dict[str, str], with_pip: bool) -> Path:
    uv = [sys.executable, "-m", "uv"]
    run([*uv, "venv", "-q", "--python", sys.executable, str(tmp / "venv")], env=env, cwd=tmp)
    python = tmp / "venv" / "bin" / "python"
    if with_pip:  # pip from the interpreter's own bundled wheel: no download
        bundled = sorted((Path(sysconfig.get_paths()["stdlib"]) / "ensurepip" / "_bundled").glob("pip-*.whl"))
        require(bool(bundled), "this Python has no bundled pip wheel (ensurepip)")
        run([*uv, "pip", "install", "-q", "--python", str(python), "--offline", str(bundled[-1])], env=env, cwd=tmp)
    return python


def wheel_url(server: Server, commit: str, wheel: Path) -> str:
    from cpubuild.index.names import href

    return f"{server.base}{commit}/{href(wheel.name)}"


# uv everywhere; pip (slow to start) once per way of installing: with
# --extra-index-url through nginx, by direct URL through `cpubuild serve`.
# file:// reads the HTML pages (no content negotiation there).
INSTALLS = [
    *[("cpubuild-serve", "uv", how) for how in ("commit", "nightly", "direct")],
    ("cpubuild-serve", "pip", "direct"),
    *[("nginx", "uv", how) for how in ("commit", "nightly", "direct")],
    ("nginx", "pip", "commit"),
    ("file", "uv", "commit"),
]


@pytest.mark.parametrize(("server", "client", "how"), INSTALLS, ids=["-".join(c) for c in INSTALLS], indirect=["server"])
def test_install(server: Server, published: Published, client: str, how: str, tmp_path: Path) -> None:
    require(sys.platform.startswith("linux"), "the real wheel is built for Linux")
    env = clean_env(tmp_path)
    python = fresh_venv(tmp_path, env, with_pip=client == "pip")
    empty = published.empty.as_uri() + "/"
    if how == "commit":
        expected, target = published.wheel_a, ["cpukern", "--extra-index-url", f"{server.base}{COMMIT_A}/cpu/"]
    elif how == "nightly":
        expected, target = published.wheel_b, ["cpukern", "--extra-index-url", f"{server.base}nightly/cpu/", "--index-strategy", "first-index"]
    else:
        expected, target = published.wheel_a, [wheel_url(server, COMMIT_A, published.wheel_a)]
    if client == "uv":
        cmd = [sys.executable, "-m", "uv", "pip", "install", "--python", str(python), "--index-url", empty, *target]
    else:
        cmd = [str(python), "-m", "pip", "install", "--index-url", empty, *target]
    run(cmd, env=env, cwd=tmp_path, timeout=600)
    version = run([str(python), "-c", "import importlib.metadata as m; print(m.version('cpukern'))"], cwd=tmp_path).stdout.strip()
    assert version == expected.name.split("-")[1]
    # the installed wheel really works: the dispatcher loads a variant
    run([str(python), "-m", "cpukern"], cwd=tmp_path)
    if server.kind == "cpubuild-serve" and client == "uv" and how != "direct":
        assert f"{expected.name.replace('+', '%2B')}.metadata" in server.log.read_text()  # type: ignore[union-attr]


@pytest.mark.parametrize("server", ["cpubuild-serve", "nginx"], indirect=True)
def test_pages_and_negotiation_over_http(server: Server, published: Published) -> None:
    page = f"{server.base}nightly/cpu/cpukern/"
    with urllib.request.urlopen(page) as r:  # no Accept: HTML, as for a browser
        assert r.headers["Content-Type"].startswith("text/html")
        assert b'data-core-metadata="sha256=' in r.read()
    with urllib.request.urlopen(urllib.request.Request(page, headers={"Accept": UV_ACCEPT})) as r:
        assert r.headers["Content-Type"] == "application/vnd.pypi.simple.v1+json"
        assert "Accept" in r.headers.get("Vary", "")
    # PEP 691's `latest` meta-version (nginx answers HTML as text/html)
    for meta, wanted in (("latest+json", ("application/vnd.pypi.simple.v1+json",)),
                         ("latest+html", ("application/vnd.pypi.simple.v1+html", "text/html"))):
        with urllib.request.urlopen(urllib.request.Request(page, headers={"Accept": f"application/vnd.pypi.simple.{meta}"})) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith(wanted)
            body = r.read()
            assert body.lstrip().startswith(b"{" if meta.endswith("json") else b"<!DOCTYPE html>")
    url = wheel_url(server, COMMIT_B, published.wheel_b)
    data = published.wheel_b.read_bytes()
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": "bytes=-22"})) as r:  # zip end record
        assert r.status == 206
        assert r.read() == data[-22:]
        assert r.headers["Content-Range"] == f"bytes {len(data) - 22}-{len(data) - 1}/{len(data)}"
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD")) as r:
        assert int(r.headers["Content-Length"]) == len(data)
    for hidden in (f"{COMMIT_A}/cpu/.cpubuild.lock", f"{COMMIT_A}/cpu/cpukern/.cpubuild.lock"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(server.base + hidden)
        assert err.value.code in (403, 404)


# ------------------------------------------------------------------ cpubuild develop --precompiled

SHIMMED = ("cmake", "ninja", "make", "cc", "c++", "gcc", "g++", "clang", "clang++")


@pytest.fixture()
def contributor_clone(tmp_path: Path) -> tuple[Path, str]:
    """A clone with a Python-only change on a branch off main: what a
    contributor has. Returns the clone and its merge-base with main."""
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)])
    base = run(["git", "rev-parse", "HEAD"], cwd=clone).stdout.strip()
    run(["git", "update-ref", "refs/remotes/origin/main", base], cwd=clone)
    run(["git", "checkout", "-q", "-b", "python-only-change"], cwd=clone)
    init = clone / "python" / "cpukern" / "__init__.py"
    init.write_text(init.read_text() + "\nCONTRIBUTOR_EDIT = 1\n")
    run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-am", "python change"], cwd=clone)
    return clone, base


def no_compiler_path(tmp: Path) -> str:
    """PATH where every build tool is a shim that records the call and fails."""
    shims = tmp / "shims"
    shims.mkdir()
    for name in SHIMMED:
        shim = shims / name
        shim.write_text(f"#!/bin/sh\necho {name} >> {shims}/called\nexit 1\n")
        shim.chmod(0o755)
    return f"{shims}:{os.environ['PATH']}"


def test_develop_precompiled_never_compiles(contributor_clone: tuple[Path, str], real_wheel: Path, tmp_path: Path) -> None:
    clone, base = contributor_clone
    root = tmp_path / "index"
    nightly = retag_wheel(real_wheel, tmp_path, "0.1.0.dev9+gb2b2b2b.cpu")
    assert cli("publish", str(real_wheel), "--to", str(root), "--commit", base).returncode == 0
    assert cli("publish", str(nightly), "--to", str(root), "--commit", COMMIT_B, "--channel", "nightly").returncode == 0
    env = clean_env(tmp_path)
    python = fresh_venv(tmp_path, env, with_pip=False)
    env.update(PATH=no_compiler_path(tmp_path), PYTHONPATH=str(REPO / "tools"))
    develop = [sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])", "develop", "--precompiled"]

    out = run([*develop, "--index", str(root), "--python", str(python)], cwd=clone, env=env)
    assert f"merge-base of HEAD and origin/main: {base}" in out.stdout
    assert real_wheel.name in out.stdout
    assert not (tmp_path / "shims" / "called").exists(), (tmp_path / "shims" / "called").read_text()
    where = run([str(python), "-c", "import cpukern; print(cpukern.__file__, cpukern.CONTRIBUTOR_EDIT)"], cwd=tmp_path)
    assert where.stdout.split() == [str(clone / "python" / "cpukern" / "__init__.py"), "1"]
    run([str(python), "-m", "cpukern"], cwd=tmp_path)  # the extracted libraries load
    # every variant library of the wheel, not only one (vLLM #54478: its precompiled install
    # extracts only _C, so a CPU without AMX fails at engine start)
    with zipfile.ZipFile(real_wheel) as archive:
        libraries = {Path(n).name for n in archive.namelist() if re.fullmatch(r"cpukern/_cpukern_\w+\.so", n)}
    assert len(libraries) > 2 and libraries <= {p.name for p in (clone / "python" / "cpukern").iterdir()}, libraries
    # edits show up without reinstalling; the extracted libraries are git-ignored
    (clone / "python" / "cpukern" / "__init__.py").write_text((clone / "python" / "cpukern" / "__init__.py").read_text() + "LATER = 2\n")
    assert run([str(python), "-c", "import cpukern; print(cpukern.LATER)"], cwd=tmp_path).stdout.strip() == "2"
    assert run(["git", "status", "--porcelain"], cwd=clone).stdout.split() == ["M", "python/cpukern/__init__.py"]

    # the merge-base was never published: the newest nightly it is
    bare = tmp_path / "nightly-only"
    assert cli("publish", str(nightly), "--to", str(bare), "--commit", COMMIT_B, "--channel", "nightly").returncode == 0
    out = run([*develop, "--index", str(bare), "--python", str(python)], cwd=clone, env=env)
    assert "newest nightly: nightly" in out.stdout and nightly.name in out.stdout

    # nothing published at all: a clear error, python/ untouched
    before = sorted(p.name for p in (clone / "python" / "cpukern").iterdir())
    (tmp_path / "empty-index").mkdir()
    out = run([*develop, "--index", str(tmp_path / "empty-index"), "--python", str(python)], cwd=clone, env=env, check=False)
    assert out.returncode == 1
    assert "no published cpukern wheel" in out.stderr and "Traceback" not in out.stderr
    assert sorted(p.name for p in (clone / "python" / "cpukern").iterdir()) == before
