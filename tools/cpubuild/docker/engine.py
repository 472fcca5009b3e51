"""Driving the Docker engine through the docker SDK (classic builder, no BuildKit).

Everything runs with host networking: builds and containers reach Debian's
archive and PyPI through the host, never through a bridge NAT. Nothing here
pulls: base images are checked locally before a build uses them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from ..errors import DockerError
from .buildlog import BuildLog, Listener

NETWORK = "host"
START_FIX = (
    "start it with one of:\n"
    "  sudo dockerd >/var/log/dockerd.log 2>&1 &     (no init system)\n"
    "  sudo systemctl start docker\n"
    "  (not installed: apt-get install -y docker.io)"
)


class DockerUnavailableError(DockerError):
    """The daemon cannot be reached (not running, wrong DOCKER_HOST, no permission)."""


class ImageBuildError(DockerError):
    """A step of an image build failed."""


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    tag: str
    image_id: str
    seconds: float
    steps: int
    cached_steps: int
    rebuilt: tuple[str, ...]  # labels of the steps that ran (not from the cache)


@dataclass(frozen=True, kw_only=True)
class RunResult:
    exit_code: int
    stdout: str
    stderr: str


def sdk() -> Any:
    """The docker SDK, imported on first use (typed Any: it ships no stubs, and a
    `docker/` folder of Dockerfiles at the repository root would shadow it for mypy)."""
    try:
        return importlib.import_module("docker")
    except ImportError:
        raise DockerError(
            "the docker SDK for Python is not installed", detail="fix: pip install 'cpubuild[docker]'   (or: pip install docker)"
        ) from None


def _why(exc: BaseException) -> str:
    """A short reason for a failed connection, instead of urllib3's nested repr."""
    text = str(exc)
    if "No such file or directory" in text or "FileNotFoundError" in text:
        return "no daemon socket there (the daemon is not running)"
    if "Connection refused" in text:
        return "connection refused (the daemon is not running)"
    if "Permission denied" in text:
        return "permission denied (run as root or join the docker group)"
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:300]


def _daemon_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


class Engine:
    """A connected Docker daemon."""

    def __init__(self, client: Any) -> None:
        self.client = client  # docker.DockerClient
        self.api = client.api

    @classmethod
    def connect(cls, timeout: float = 30) -> Engine:
        docker = sdk()
        address = _daemon_address()
        try:
            client = docker.from_env(timeout=int(timeout))
            client.ping()
        except (docker.errors.DockerException, OSError) as exc:
            raise DockerUnavailableError(f"cannot reach the Docker daemon at {address}: {_why(exc)}", detail=START_FIX) from None
        return cls(client)

    # ------------------------------------------------------------------ images

    def image(self, ref: str) -> dict[str, Any] | None:
        """`docker image inspect` of a local image; None when absent."""
        try:
            data: dict[str, Any] = self.api.inspect_image(ref)
        except sdk().errors.NotFound:
            return None
        return data

    def image_platform(self, ref: str) -> str | None:
        data = self.image(ref)
        if data is None:
            return None
        return f"{data.get('Os', 'linux')}/{data.get('Architecture', '?')}"

    def image_size(self, ref: str) -> int:
        data = self.image(ref)
        return int(data["Size"]) if data else 0

    def remove_image(self, ref: str) -> None:
        with contextlib.suppress(sdk().errors.NotFound):
            self.api.remove_image(ref, force=True, noprune=False)

    # ------------------------------------------------------------------ build

    def build(
        self,
        *,
        context: IO[bytes],
        dockerfile: str,
        tag: str,
        platform: str,
        target: str | None = None,
        buildargs: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        listener: Listener | None = None,
        log_file: Path | None = None,
        nocache: bool = False,
        what: str = "image",
    ) -> BuildResult:
        """Builds from an uncompressed tar context, streaming the log."""
        APIError = sdk().errors.APIError
        start = time.monotonic()
        sink_handle = None
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            sink_handle = open(log_file, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        log = BuildLog(listener, sink=(lambda line: print(line, file=sink_handle)) if sink_handle else None)
        try:
            stream = self.api.build(
                fileobj=context,
                custom_context=True,
                dockerfile=dockerfile,
                tag=tag,
                target=target,
                platform=platform,
                buildargs=dict(buildargs or {}),
                labels=dict(labels or {}),
                network_mode=NETWORK,
                rm=True,
                forcerm=True,
                pull=False,
                nocache=nocache,
                decode=True,
            )
            for chunk in stream:
                log.feed(chunk)
                if log.failure is not None:
                    break
        except APIError as exc:
            raise ImageBuildError(f"the daemon refused to build {what} {tag} for {platform}: {exc.explanation or exc}") from None
        finally:
            log.finish()
            if sink_handle is not None:
                sink_handle.close()
        failure = log.failure
        if failure is not None:
            step = failure.step if failure.step is None or len(failure.step) <= 110 else failure.step[:107] + "..."
            where = f"stage {failure.stage!r}, {step}" if failure.stage else "before the first step"
            exited = re.match(r"^The command .* returned a non-zero code: (\d+)$", failure.message, re.DOTALL)
            message = f"the step exited with code {exited.group(1)}" if exited else failure.message
            detail = (failure.tail + "\n" if failure.tail else "") + f"-> {message}"
            if log_file is not None:
                detail += f"\nfull log: {log_file}"
            raise ImageBuildError(f"building {what} {tag} ({platform}) failed in {where}", detail=detail)
        if log.image_id is None:
            raise ImageBuildError(f"building {what} {tag} ({platform}) ended without an image id")
        return BuildResult(
            tag=tag,
            image_id=log.image_id,
            seconds=time.monotonic() - start,
            steps=len(log.steps),
            cached_steps=log.cached_steps,
            rebuilt=tuple(log.rebuilt),
        )

    def copy_out(self, image: str, path: str, dest: Path, *, suffix: str = "") -> list[Path]:
        """Copies the files under `path` of an image (ending in `suffix`) into `dest`."""
        APIError = sdk().errors.APIError

        container = self.api.create_container(image, command=["true"], network_disabled=True)
        copied: list[Path] = []
        try:
            stream, _ = self.api.get_archive(container["Id"], path)
            with tempfile.TemporaryFile() as handle:
                for chunk in stream:
                    handle.write(chunk)
                handle.seek(0)
                with tarfile.open(fileobj=handle) as tar:
                    for member in tar.getmembers():
                        name = PurePosixPath(member.name).name
                        if not member.isfile() or not name.endswith(suffix):
                            continue
                        source = tar.extractfile(member)
                        if source is None:
                            continue
                        dest.mkdir(parents=True, exist_ok=True)
                        (dest / name).write_bytes(source.read())
                        copied.append(dest / name)
        except APIError as exc:
            raise DockerError(f"cannot copy {path} out of {image}: {exc.explanation or exc}") from None
        finally:
            self.api.remove_container(container["Id"], force=True)
        return copied

    # ------------------------------------------------------------------ run

    def run(
        self,
        image: str,
        command: Sequence[str] | None = None,
        *,
        environment: Mapping[str, str] | None = None,
        platform: str | None = None,
        user: str | None = None,
        entrypoint: Sequence[str] | None = None,
        timeout: float = 600,
    ) -> RunResult:
        """Runs a container to completion (host network), returns its output."""
        from requests.exceptions import ConnectionError as RequestsConnectionError

        APIError = sdk().errors.APIError

        try:
            container = self.client.containers.create(
                image,
                command=list(command) if command is not None else None,
                environment=dict(environment or {}),
                network_mode=NETWORK,
                platform=platform,
                user=user,
                entrypoint=list(entrypoint) if entrypoint is not None else None,
            )
        except APIError as exc:
            raise DockerError(f"cannot create a container of {image}: {exc.explanation or exc}") from None
        try:
            container.start()
            try:
                status = container.wait(timeout=timeout)
            except RequestsConnectionError:
                raise DockerError(f"{image} ran past {timeout:.0f} s: {' '.join(command or [])}") from None
            stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
            stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        except APIError as exc:
            raise DockerError(f"running {image} failed: {exc.explanation or exc}") from None
        finally:
            with contextlib.suppress(APIError):
                container.remove(force=True)
        return RunResult(exit_code=int(status.get("StatusCode", -1)), stdout=stdout, stderr=stderr)
