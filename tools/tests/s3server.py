"""A real S3-compatible server for tests: moto's, on loopback, in its own process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from testsupport import require

SERVER = """
import sys
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
server = make_server("127.0.0.1", 0, DomainDispatcherApplication(create_backend_app), threaded=sys.argv[1] == "threaded")
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@contextmanager
def moto_s3(*, threaded: bool, secret: str = "testing") -> Iterator[dict[str, str]]:
    """Yields the AWS_* environment that points boto3, cpubuild and sccache at the server (no
    other credential source is read). Single-threaded, each request is atomic (conditional writes)."""
    try:
        import moto.moto_server.werkzeug_app  # noqa: F401
    except ImportError as exc:
        require(False, f"moto[server] is needed: {exc}")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, "threaded" if threaded else "serial"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    try:
        port = int(proc.stdout.readline())
        yield {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
               "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
