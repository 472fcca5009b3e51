"""`cpubuild image` / `base-image` bad input and bake files through the real CLI.
Nothing here needs a running daemon: input is checked before Docker is touched,
and a dead DOCKER_HOST must give one clear message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cpubuild.docker import bake
from cpubuild.matrix import load_matrix
from testsupport import CPUKERN_MATRIX, REPO

DEAD_SOCKET = "unix:///nonexistent/cpubuild-test-docker.sock"


def cpubuild(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", *args]
    environment = dict(os.environ, PYTHONPATH=str(REPO / "tools"), DOCKER_HOST=DEAD_SOCKET, **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd, env=environment)


def clean_failure(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert proc.returncode == code, f"exit {proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("error: ")
    for word in words:
        assert word in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--platform", "linux/ppc64le"), ["unknown platform 'linux/ppc64le'", "linux/amd64, linux/arm64, linux/s390x"]),
        (("--platform", "linux/amd64", "--isa", "neon_bf16"), ["ISA 'neon_bf16' is a variant of linux/arm64, not of linux/amd64"]),
        (("--platform", "linux/arm64", "--isa", "avx512"), ["ISA 'avx512' is a variant of linux/amd64, not of linux/arm64"]),
        (("--platform", "linux/amd64,linux/arm64", "--isa", "avx2"), ["no --isa names a variant of linux/arm64"]),
        (("--isa", "avx9000"), ["unknown ISA 'avx9000'"]),
        (("--target", "runtime", "--output", "/tmp/x"), ["--output copies the wheel of the build stage"]),
        (("--wheel", "/nonexistent/cpukern-0.1.0-py3-none-linux_x86_64.whl"), ["no such file"]),
    ],
)
def test_bad_input_is_a_usage_error_before_docker_is_touched(args: tuple[str, ...], words: list[str]) -> None:
    # DOCKER_HOST points at nothing: reaching the daemon check would be exit 1, not 2
    clean_failure(cpubuild("image", *args), 2, *words)


def test_several_wheels_for_one_platform_that_are_not_partials_are_refused(tmp_path: Path) -> None:
    """Several --wheel for one platform are merged as partial wheels (docs/scale-out.md);
    wheels that are not parts of one build are refused in one line, before Docker."""
    wheels = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        wheel = tmp_path / folder / "cpukern-0.1.0-py3-none-linux_x86_64.whl"
        wheel.write_bytes(b"not a zip")
        wheels += ["--wheel", str(wheel)]
    proc = cpubuild("image", "--no-smoke", *wheels)
    clean_failure(proc, 2, "2 wheels for linux/amd64 are merged as partial wheels of one build, but:")
    assert proc.stderr.count("\n") == 1


def test_bad_platform_for_base_image() -> None:
    clean_failure(cpubuild("base-image", "--platform", "windows/amd64"), 2, "unknown platform 'windows/amd64'")


@pytest.mark.parametrize("command", [("image", "--no-smoke"), ("base-image",)])
def test_a_daemon_that_is_not_running_gives_one_message_with_the_fix(command: tuple[str, ...]) -> None:
    proc = cpubuild(*command)
    clean_failure(proc, 1, f"cannot reach the Docker daemon at {DEAD_SOCKET}", "(the daemon is not running)")
    assert "sudo dockerd" in proc.stderr and "systemctl start docker" in proc.stderr and "apt-get install -y docker.io" in proc.stderr
    assert proc.stderr.count("error:") == 1


def test_bake_file_for_the_whole_matrix(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "bake.json"
    proc = cpubuild("image", "--bake", str(out), "--platform", "linux/amd64,linux/arm64,linux/s390x", "--each-variant")
    assert proc.returncode == 0, proc.stderr
    document = json.loads(out.read_text())
    assert bake.validate(document, (REPO / "docker" / "Dockerfile").read_text()) == []
    matrix = load_matrix(CPUKERN_MATRIX)
    images = [t for t in document["target"].values() if t["target"] == "runtime"]
    # per platform: the `all` image, the baseline alone, and baseline + each other variant,
    # except a set that already holds every variant (s390x: baseline + vxe is `all`)
    expected = 0
    for arch in matrix.arches:
        k = len(matrix.variants_for(arch))
        singles = [1] + [2] * (k - 1)
        expected += 1 + sum(1 for size in singles if size < k)
    assert len(images) == expected
    assert {t["platforms"][0] for t in images} == {a.docker_platform for a in matrix.arches.values()}
    assert not list(tmp_path.glob("sub/*.tmp"))  # written atomically


def test_sync_dockerfile_reports_in_sync() -> None:
    proc = cpubuild("image", "--sync-dockerfile")
    assert proc.returncode == 0, proc.stderr
    assert "already in sync" in proc.stderr
