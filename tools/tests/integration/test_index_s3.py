"""`cpubuild publish --to s3://...` against an S3 API server on loopback
(moto's, run single-threaded so that each request, conditional writes
included, is atomic as on S3): the same listing checks as for directories,
concurrent publishers and a refused name clash."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cpubuild.index.s3 import S3Storage
from cpubuild.index.verify import verify_tree
from test_index_publish import COMMIT_A, COMMIT_B, cli, start_worker, synthetic_wheels, wheel
from testsupport import require

pytestmark = pytest.mark.slow

BUCKET = "cpubuild-index"
PREFIX = "wheels"
SERVER = """
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=False)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    try:
        import boto3
        import moto.moto_server.werkzeug_app  # noqa: F401
    except ImportError as exc:
        require(False, f"boto3 and moto[server] are needed: {exc}")
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    settings = {
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)  # for this process and the publishers it starts
    try:
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        proc.terminate()
        proc.wait(timeout=30)


def objects(client: Any) -> dict[str, str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def listed(client: Any, prefix: str, tree: str) -> dict[str, str]:
    report = verify_tree(S3Storage(BUCKET, prefix, client), tree)
    assert report.problems == [], report.problems
    assert report.html_files == report.files
    return report.files


def test_publish_two_commits_to_s3(s3: Any, tmp_path: Path) -> None:
    dest = f"s3://{BUCKET}/{PREFIX}"
    a = wheel(tmp_path / "a", "0.1.0.dev1+g111.cpu", "py3-none-manylinux_2_28_x86_64")
    b = wheel(tmp_path / "b", "0.1.0.dev2+g222.cpu", "py3-none-manylinux_2_28_x86_64")
    for path, commit in ((a, COMMIT_A), (b, COMMIT_B)):
        out = cli("publish", str(path), "--to", dest, "--commit", commit, "--channel", "nightly")
        assert out.returncode == 0, out.stderr
    assert listed(s3, PREFIX, f"{COMMIT_A}/cpu") == {a.name: hashlib.sha256(a.read_bytes()).hexdigest()}
    assert set(listed(s3, PREFIX, f"{COMMIT_B}/cpu")) == {b.name}
    assert set(listed(s3, PREFIX, "nightly/cpu")) == {b.name}
    head = s3.head_object(Bucket=BUCKET, Key=f"{PREFIX}/nightly/cpu/cpukern/index.json")
    assert head["ContentType"] == "application/vnd.pypi.simple.v1+json"

    # re-publishing is a no-op; a different file under a published name is refused
    before = objects(s3)
    assert cli("publish", str(a), "--to", dest, "--commit", COMMIT_A).returncode == 0
    clash = wheel(tmp_path / "clash", "0.1.0.dev1+g111.cpu", "py3-none-manylinux_2_28_x86_64", payload=b"other")
    out = cli("publish", str(clash), "--to", dest, "--commit", COMMIT_A)
    assert out.returncode == 2 and "different content" in out.stderr
    assert objects(s3) == before


def test_concurrent_publishers_on_s3(s3: Any, tmp_path: Path) -> None:
    sets = [synthetic_wheels(tmp_path, w, 3) for w in range(4)]
    workers = [start_worker(f"s3://{BUCKET}/race", COMMIT_A, s) for s in sets]
    for proc in workers:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    expected = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for s in sets for p in s}
    assert listed(s3, "race", f"{COMMIT_A}/cpu") == expected
    assert listed(s3, "race", "nightly/cpu") == expected
