"""A real PyPI-compatible index for tests: pypiserver from the package registry,
on a free loopback port, accepting `twine upload` without credentials."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testsupport import require


@dataclass(frozen=True, kw_only=True)
class PypiServer:
    url: str  # the upload URL (twine --repository-url)
    root: Path  # where it stores packages

    @property
    def simple(self) -> str:
        return f"{self.url}simple/"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str, proc: subprocess.Popen[bytes], log: Path, *, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"no answer from {url} in {seconds:.0f} s: {log.read_text(errors='replace')[-2000:]}")


@contextmanager
def pypiserver(root: Path) -> Iterator[PypiServer]:
    require(subprocess.run([sys.executable, "-m", "pypiserver", "--version"], capture_output=True).returncode == 0,
            "pypiserver is not installed (run scripts/setup.sh)")
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = root.parent / f"pypiserver-{port}.log"
    with log.open("wb") as sink:
        # -a . -P .: no authentication for uploads (a loopback test server)
        proc = subprocess.Popen([sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(port),
                                 "-a", ".", "-P", ".", str(root)], stdout=sink, stderr=sink)
    try:
        server = PypiServer(url=f"http://127.0.0.1:{port}/", root=root)
        wait_for(server.simple, proc, log)
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def twine_upload(server: PypiServer, files: list[Path]) -> None:
    proc = subprocess.run([sys.executable, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar",
                           "--repository-url", server.url, "-u", "test", "-p", "test", *map(str, files)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
