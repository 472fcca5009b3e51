"""The CPU torch an image of a torch project installs ([tool.cpubuild] kind = torch).

`cpubuild image` fetches, on the host, the torch release the project's wheel is
built against for the image's platform and Python (Debian bookworm: CPython
3.11), with every dependency torch declares there (PEP 508 markers evaluated
for the target: torchdist.fetch_with_dependencies), and sends those wheels in
the build context (`.cpubuild/torch/`). The Dockerfile unpacks them without pip,
like the project's own wheel. A set is fetched once and kept under cpubuild's
cache (``torch-image/<torch wheel>/``: the dependencies, plus a stamp; torch's
own wheel stays where torchdist caches it), so a rebuild reads the same files
and hits Docker's layer cache.

A torch release whose wheel for the platform is a CUDA build (PyPI's x86_64
torch) is refused before its multi-GB CUDA dependencies are fetched: pip must
be pointed at a CPU build (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import zipfile
from pathlib import Path

from .. import torchdist
from ..cache import cache_dir
from ..emulate.rootfs import DEFAULT_SUITE, Log
from ..errors import UsageError
from ..hardware import Arch
from ..progress import locked

SUITE_PYTHON = {"bookworm": "3.11"}  # the python3 of the Debian suite images are based on
STAMP = "set.json"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Requirements only a CUDA build of torch declares.
CUDA_REQUIREMENTS = ("nvidia-", "cuda-", "triton")


def image_python(suite: str = DEFAULT_SUITE) -> str:
    """X.Y of the python3 in images of this Debian suite."""
    try:
        return SUITE_PYTHON[suite]
    except KeyError:
        raise UsageError(f"no known python3 version for Debian {suite}: images of torch projects need one") from None


def cuda_reason(wheel: Path, platform: str, python: str) -> str | None:
    """Why this torch wheel is a CUDA build (None: a CPU build): the CUDA packages it
    requires on `platform`, or its libtorch_cuda."""
    from packaging.requirements import Requirement

    environment = torchdist.target_environment(platform, python)
    wanted = []
    for text in torchdist.requires_dist(wheel):
        req = Requirement(text)
        if req.name.lower().startswith(CUDA_REQUIREMENTS) and (req.marker is None or req.marker.evaluate(environment)):
            wanted.append(req.name)
    if wanted:
        return f"it requires {', '.join(wanted[:4])}{', ...' if len(wanted) > 4 else ''}"
    with zipfile.ZipFile(wheel) as archive:
        if any(name.startswith("torch/lib/libtorch_cuda") for name in archive.namelist()):
            return "it holds libtorch_cuda"
    return None


def torch_wheels(version: str, arch: Arch, python: str, *, log: Log = print) -> list[Path]:
    """torch `version` for `arch`'s platform and CPython `python`, and its dependencies there:
    wheel files, torch's first. Fetched once (under a lock), then read from the cache."""
    platform = arch.manylinux
    wanted = torchdist.release(version)
    torch_wheel = torchdist.release_wheel(wanted, platform, python)
    why = cuda_reason(torch_wheel, platform, python)
    if why is not None:
        raise UsageError(
            f"torch {wanted} for {platform} from the package index is a CUDA build ({why}); "
            "an image of a torch project gets a CPU torch",
            detail=f"fix: point pip at a CPU build of torch, e.g. export PIP_EXTRA_INDEX_URL={CPU_INDEX}, "
                   f"and remove the cached CUDA wheel: rm {torch_wheel}",
        )
    folder = cache_dir() / "torch-image" / torch_wheel.name.removesuffix(".whl")
    stamp = folder / STAMP
    if not stamp.is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with locked(folder.parent / f"{folder.name}.lock", f"torch {wanted}'s dependencies for {platform}"):
            if not stamp.is_file():
                log(f"torch {wanted} for {platform} / CPython {python}: fetching its dependencies (once)")
                with tempfile.TemporaryDirectory(prefix=".fetch-", dir=folder.parent) as tmp:
                    fetched = Path(tmp) / "wheels"
                    torchdist.fetch_with_dependencies(wanted, platform, python, fetched)
                    (fetched / torch_wheel.name).unlink()  # torch's own stays in torchdist's cache
                    names = sorted(w.name for w in fetched.glob("*.whl"))
                    (fetched / STAMP).write_text(json.dumps({"torch": torch_wheel.name, "platform": platform,
                                                             "python": python, "dependencies": names}, indent=1) + "\n")
                    shutil.rmtree(folder, ignore_errors=True)
                    fetched.rename(folder)
    names = json.loads(stamp.read_text())["dependencies"]
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise UsageError(f"{folder}: cached wheels are missing ({', '.join(missing)})", detail=f"fix: rm -r {folder}")
    return [torch_wheel, *(folder / n for n in names)]
