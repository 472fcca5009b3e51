"""The build stage's Python packages as a hashed requirements set.

`cpubuild image` resolves on the host what a compiling build stage installs:
the wheels of the running cpubuild (cpubuild-core and cpubuild, by their
sha256), cpubuild's dependencies and the project's other build requirements,
pinned with every file's hash by
`uv pip compile --generate-hashes --universal` for the base's python3. The
build stage runs `pip install --require-hashes --no-deps -r` on it, so a file
whose bytes differ from its hash stops the build. The resolution is cached
under cpubuild's cache by its input (delete the file to resolve again). Torch
itself is left out for torch projects (the image brings its own, fetched on the
host), but its requirements are in: the build venv's own packages (an old
setuptools) shadow the copies next to torch, and the build checks them.
"""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from collections.abc import Sequence
from email.parser import Parser
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement

from ..cache import cache_dir
from ..errors import DockerError
from ..selfwheel import CLI, CORE
from ..wheelbuild.install import uv_command
from .requirements import requirements

FILE_NAME = "requirements.txt"  # in the context's .cpubuild/tool/, copied to /cpubuild/ in the build stage
STAGE_DIR = PurePosixPath("/cpubuild")  # where the build stage has the tool folder
LEFT_OUT = frozenset({CLI, CORE, "torch"})  # installed from the context, not from an index
CUDA = ("nvidia-", "triton")  # never in a CPU image (cpubuild refuses CUDA torch builds before this)


class HashedRequirementsError(DockerError):
    """The build stage's requirements cannot be resolved with hashes."""


def tool_dependencies(wheel: Path) -> list[str]:
    """The Requires-Dist of a wheel, without those only an extra asks for."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        metadata = Parser().parsestr(archive.read(name).decode("utf-8"))
    out = []
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.marker is None or "extra" not in str(requirement.marker):
            out.append(str(requirement))
    return out


def torch_requirements(wheels: Sequence[Path]) -> list[str]:
    """The requirements of the torch wheel among `wheels` (none when there is none)."""
    out = []
    for wheel in wheels:
        if wheel.name.startswith("torch-"):
            out += [r for r in tool_dependencies(wheel) if not Requirement(r).name.lower().startswith(CUDA)]
    return out


def resolver_input(project: Path, tool_wheels: Sequence[Path], also: Sequence[str] = ()) -> list[str]:
    """What the set is resolved from: cpubuild's dependencies, the project's build requirements
    and `also` (torch's)."""
    wanted: list[str] = []
    for line in [*(r for w in tool_wheels for r in tool_dependencies(w)), *requirements(project), *also]:
        try:
            name = Requirement(line).name.lower()
        except InvalidRequirement:
            raise HashedRequirementsError(f"{project / 'pyproject.toml'}: build-system.requires {line!r} is not a PEP 508 requirement") from None
        if name not in LEFT_OUT and line not in wanted:
            wanted.append(line)
    return wanted


def _resolve(lines: list[str], python: str) -> str:
    uv = uv_command()
    if uv is None:
        raise HashedRequirementsError("uv is needed to resolve the image's build requirements with hashes",
                                      detail="fix: pip install uv")
    cmd = [*uv, "pip", "compile", "-", "--generate-hashes", "--universal", "--python-version", python,
           "--no-header", "--no-annotate", "--quiet"]
    proc = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise HashedRequirementsError("resolving the image's build requirements with hashes failed (uv pip compile)",
                                      detail=proc.stderr[-3000:])
    return proc.stdout


def hashed_requirements(project: Path, tool_wheels: Sequence[Path], *, python: str, also: Sequence[str] = ()) -> str:
    """The requirements file the build stage installs with --require-hashes."""
    lines = resolver_input(project, tool_wheels, also)
    key = hashlib.sha256("\n".join([python, *lines]).encode()).hexdigest()[:16]
    cached = cache_dir() / "image-requirements" / f"{key}.txt"
    if cached.is_file():
        resolved = cached.read_text(encoding="utf-8")
    else:
        resolved = _resolve(lines, python)
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f".{cached.name}.tmp")
        tmp.write_text(resolved, encoding="utf-8")
        tmp.replace(cached)
    own = "".join(f"{_dist_name(w)} @ file://{STAGE_DIR / w.name} --hash=sha256:{hashlib.sha256(w.read_bytes()).hexdigest()}\n"
                  for w in tool_wheels)
    return own + resolved


def _dist_name(wheel: Path) -> str:
    return wheel.name.split("-", 1)[0].replace("_", "-")
