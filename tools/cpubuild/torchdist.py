"""The torch a torch project ([tool.cpubuild] kind = torch) is built against.

Natively: the torch installed in the build's Python (its headers and
libraries; the wheel then pins that torch minor). For another arch: the
torch wheel of that version for the target platform, fetched with
`pip download --platform ... --only-binary :all:` and unpacked (headers,
libraries, version) under cpubuild's cache, once. The C++ ABI flag libtorch
was built with comes from libc10.so itself (std::__cxx11 symbols or not), so
it is right for a downloaded torch too.

`python -m cpubuild.torchdist abi|version TORCH_DIR` answers the CMake package.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .errors import UsageError
from .hardware import Arch
from .wheelbuild.cache import cache_dir

# What of a torch wheel a build needs.
BUILD_MEMBERS = ("torch/include/", "torch/lib/", "torch/version.py")
_VERSION = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", re.MULTILINE)


@dataclass(frozen=True, kw_only=True)
class TorchBuild:
    version: str  # e.g. 2.13.0+cpu
    directory: Path  # the torch package: include/, lib/
    cxx11_abi: int
    origin: str  # how it was found, for the report

    @property
    def public(self) -> str:
        return self.version.split("+", 1)[0]

    @property
    def minor(self) -> str:
        major, minor = self.public.split(".")[:2]
        return f"{major}.{minor}"

    @property
    def label(self) -> str:
        """The local-version segment of wheels built against it: pt213 for torch 2.13."""
        return "pt" + self.minor.replace(".", "")

    @property
    def libraries(self) -> tuple[str, ...]:
        """torch's shared libraries: a wheel loads them from torch, never carries them (auditwheel --exclude)."""
        return tuple(sorted(p.name for p in (self.directory / "lib").glob("*.so*") if p.is_file()))


def read_version(directory: Path) -> str:
    try:
        match = _VERSION.search((directory / "version.py").read_text(encoding="utf-8"))
    except OSError:
        match = None
    if match is None:
        raise UsageError(f"{directory}: no torch/version.py with __version__: not a torch installation")
    return match.group(1)


def cxx11_abi(directory: Path) -> int:
    """1 when libtorch uses the C++11 std::string ABI (libc10.so imports std::__cxx11 symbols)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    path = directory / "lib" / "libc10.so"
    try:
        with path.open("rb") as f:
            dynsym = ELFFile(f).get_section_by_name(".dynsym")
            names = [s.name for s in dynsym.iter_symbols()] if isinstance(dynsym, SymbolTableSection) else []
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc}): not a torch installation") from None
    return 1 if any("__cxx11" in n for n in names) else 0


def installed(requested: str | None) -> TorchBuild:
    """The torch of this Python (without importing it); `requested` must be its version."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        want = f"torch=={requested}" if requested else "torch"
        raise UsageError(f"this is a torch project ([tool.cpubuild] kind = torch), but {sys.executable} has no torch: "
                         f"pip install '{want}' there (cpubuild builds against the torch of its environment)")
    directory = Path(spec.origin).parent
    version = metadata.version("torch")
    if requested is not None and version.split("+", 1)[0] != requested.split("+", 1)[0]:
        known = released_versions()
        if known and requested.split("+", 1)[0] not in known:
            raise UsageError(f"--torch {requested}: no such torch release on the package index (newest: {', '.join(known[:5])})")
        raise UsageError(f"--torch {requested}: {sys.executable} has torch {version}; install torch=={requested} there "
                         "to build against it (native builds use the environment's torch)")
    return TorchBuild(version=version, directory=directory, cxx11_abi=cxx11_abi(directory), origin=f"installed ({directory})")


def released_versions() -> list[str]:
    """torch's versions on the configured package index, newest first ([] when it cannot be asked)."""
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch", "--disable-pip-version-check"],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return []
    line = next((row for row in proc.stdout.splitlines() if row.startswith("Available versions:")), "")
    return [v.strip() for v in line.split(":", 1)[1].split(",")] if line else []


def _download(version: str, platform: str) -> Path:
    folder = cache_dir() / "torch-wheels"
    folder.mkdir(parents=True, exist_ok=True)
    pattern = f"torch-{version}*-cp{sys.version_info[0]}{sys.version_info[1]}-*{platform.split('_', 3)[-1]}.whl"
    found = sorted(folder.glob(pattern))
    if found:
        return found[-1]
    with tempfile.TemporaryDirectory(prefix="cpubuild-torch-", dir=folder) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps", "--only-binary", ":all:",
               "--platform", platform, "--python-version", f"{sys.version_info[0]}.{sys.version_info[1]}",
               "--implementation", "cp", "-d", tmp, f"torch=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        wheels = sorted(Path(tmp).glob("torch-*.whl"))
        if proc.returncode != 0 or not wheels:
            errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
            why = next((e for e in errors if "Could not find" in e or "No matching" in e), errors[0] if errors else "no wheel")
            raise UsageError(f"--torch {version}: no torch {version} wheel for {platform} on the package index ({why})")
        target = folder / wheels[0].name
        shutil.move(str(wheels[0]), target)
        return target


def downloaded(version: str, arch: Arch) -> TorchBuild:
    """torch `version` for another arch: its wheel for the arch's manylinux policy, unpacked once."""
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", version):
        raise UsageError(f"--torch {version!r}: give a torch release such as 2.13.0")
    wheel = _download(version, arch.manylinux)
    directory = cache_dir() / "torch" / wheel.name.removesuffix(".whl") / "torch"
    if not (directory / "version.py").is_file():
        (cache_dir() / "torch").mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache_dir() / "torch"))
        try:
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    if name.startswith(BUILD_MEMBERS) and not name.endswith("/"):
                        archive.extract(name, tmp)
            directory.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(directory, ignore_errors=True)
            (tmp / "torch").rename(directory)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return TorchBuild(version=read_version(directory), directory=directory, cxx11_abi=cxx11_abi(directory),
                      origin=f"downloaded ({wheel.name})")


def _main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("abi", "version"):
        print("usage: python -m cpubuild.torchdist abi|version TORCH_DIR", file=sys.stderr)
        return 2
    try:
        print(cxx11_abi(Path(argv[1])) if argv[0] == "abi" else read_version(Path(argv[1])))
    except UsageError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
