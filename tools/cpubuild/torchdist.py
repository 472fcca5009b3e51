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
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from . import elfdynamic
from .cache import cache_dir
from .errors import UsageError
from .hardware import Arch
from .progress import locked, step

# What of a torch wheel a build needs.
# torch.libs/: what auditwheel grafted into torch's wheel (aarch64's libgomp, OpenBLAS, ACL)
BUILD_MEMBERS = ("torch/include/", "torch/lib/", "torch/version.py", "torch.libs/")
UNPACKED_MARK = ".unpacked-2"  # written last; trees without it (older layouts: no torch.libs/) are redone
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
_VERSION = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*["']([^"']+)["']""", re.MULTILINE)


RELEASE = re.compile(r"\d+\.\d+(\.\d+)?")


def release(version: str) -> str:
    """2.13.0+cpu -> 2.13.0 (what pip is asked for)."""
    return version.split("+", 1)[0]


def minor(version: str) -> str:
    """2.13.0+cpu -> 2.13 (torch's C++ ABI holds within a minor)."""
    return ".".join(release(version).split(".")[:2])


def check_release(version: str) -> str:
    """A torch release as --torch takes it (2.13.0, 2.13), else a usage error."""
    if not RELEASE.fullmatch(version):
        raise UsageError(f"--torch {version!r}: give a torch release such as 2.13.0")
    return version


@dataclass(frozen=True, kw_only=True)
class TorchBuild:
    version: str  # e.g. 2.13.0+cpu
    directory: Path  # the torch package: include/, lib/
    cxx11_abi: int
    origin: str  # how it was found, for the report
    manylinux: str | None = None  # torch's own platform tag (manylinux_2_28_x86_64): a ceiling for our wheels

    @property
    def public(self) -> str:
        return release(self.version)

    @property
    def minor(self) -> str:
        return minor(self.version)

    @property
    def label(self) -> str:
        """The local-version segment of wheels built against it: pt213 for torch 2.13."""
        return "pt" + self.minor.replace(".", "")

    def policy_ceiling(self, aimed: str) -> str:
        """The lower of the matrix's policy and torch's own: a wheel that loads
        libtorch cannot run anywhere torch itself does not."""
        if self.manylinux is None or _glibc(self.manylinux) >= _glibc(aimed):
            return aimed
        return aimed[: len("manylinux_")] + "_".join(map(str, _glibc(self.manylinux))) + aimed[aimed.index("_", len("manylinux_X_Y")):]

    @property
    def library_dirs(self) -> tuple[Path, ...]:
        """Where torch's shared libraries are: the repair step resolves them there, never on the host."""
        return tuple(d for d in (self.directory / "lib", self.directory.parent / "torch.libs") if d.is_dir())

    @property
    def libraries(self) -> tuple[str, ...]:
        """torch's shared libraries: a wheel loads them from torch, never carries them (auditwheel --exclude)."""
        # torch.libs/: what auditwheel grafted into torch's own wheel (hashed names, libgomp-<hash>.so.1 on some arches)
        found = [*(self.directory / "lib").glob("*.so*"), *(self.directory.parent / "torch.libs").glob("*.so*")]
        return tuple(sorted({p.name for p in found if p.is_file()}))


def _glibc(tag: str) -> tuple[int, int]:
    match = re.match(r"manylinux_(\d+)_(\d+)_", tag)
    return (int(match.group(1)), int(match.group(2))) if match else (999, 0)


def _wheel_policy(tags: str) -> str | None:
    """The manylinux_X_Y_arch tag among a wheel's platform tags (dots separate several)."""
    return next((t for t in re.split(r"[.\s]", tags) if re.fullmatch(r"manylinux_\d+_\d+_\w+", t)), None)


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
    path = directory / "lib" / "libc10.so"
    return 1 if any("__cxx11" in n for n in _elf(elfdynamic.dynamic_symbols, path)) else 0


_OPENMP = re.compile(r"^lib(gomp|iomp5|omp)\b")


def needed(path: Path) -> list[str]:
    """The DT_NEEDED sonames of a shared library."""
    return _elf(elfdynamic.needed, path)


def _elf(read: Callable[[Path], list[str]], path: Path) -> list[str]:
    # standard library only (elfdynamic.py): the CMake package runs this in isolated builds
    try:
        return read(path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc}): not a torch installation") from None
    except elfdynamic.ElfFormatError as exc:
        raise UsageError(f"{path}: {exc}: not a torch installation") from None


def openmp_runtime(directory: Path) -> Path | None:
    """The OpenMP runtime libtorch_cpu loads (torch's own copy, in lib/ or the
    wheel's torch.libs/): variants link this file, so the process maps one runtime."""
    for soname in needed(directory / "lib" / "libtorch_cpu.so"):
        if _OPENMP.match(soname):
            for where in (directory / "lib", directory.parent / "torch.libs"):
                if (where / soname).is_file():
                    return where / soname
            # variants built without OpenMP would run every pragma on one thread
            raise UsageError(f"{directory}: libtorch_cpu.so needs {soname}, which is in neither lib/ nor "
                             "../torch.libs/ (an incomplete torch tree: remove it to have it unpacked again)")
    return None


def installed_version() -> str | None:
    """The version of this Python's torch (2.13.0+cpu), None without one."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def same_release(version: str, requested: str) -> bool:
    """2.13.0+cpu is the 2.13.0 asked for; 2.13 asks for 2.13.0."""
    def parts(v: str) -> tuple[int, ...]:
        numbers = [int(x) for x in re.findall(r"\d+", release(v))[:3]]
        return tuple(numbers + [0] * (3 - len(numbers)))
    return parts(version) == parts(requested)


def installed(requested: str | None = None) -> TorchBuild:
    """The torch of this Python (without importing it); `requested` only words the error."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        want = f"torch=={requested}" if requested else "torch"
        raise UsageError(f"this is a torch project ([tool.cpubuild] kind = torch), but {sys.executable} has no torch: "
                         f"pip install '{want}' there, or pass --torch X.Y.Z to build against that release's wheel, downloaded")
    directory = Path(spec.origin).parent
    dist = metadata.distribution("torch")
    wheel_tags = " ".join(line.split(":", 1)[1].strip().split("-")[-1] for line in (dist.read_text("WHEEL") or "").splitlines()
                          if line.startswith("Tag:"))
    return TorchBuild(version=dist.version, directory=directory, cxx11_abi=cxx11_abi(directory), origin=f"installed ({directory})",
                      manylinux=_wheel_policy(wheel_tags))


def released_versions() -> list[str]:
    """torch's versions on the configured package index, newest first ([] when it cannot be asked)."""
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch", "--disable-pip-version-check"],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return []
    line = next((row for row in proc.stdout.splitlines() if row.startswith("Available versions:")), "")
    return [v.strip() for v in line.split(":", 1)[1].split(",")] if line else []


def _pip_download(requirement: str, platform: str, python: str, dest: Path) -> subprocess.CompletedProcess[str]:
    """One wheel, no dependencies (pip evaluates dependency markers for this host,
    not for --platform: fetch_with_dependencies walks them itself)."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps", "--only-binary", ":all:",
           "--platform", platform, "--python-version", python, "--implementation", "cp", "-d", str(dest), requirement]
    with step(f"pip download {requirement} ({platform}, CPython {python})"):
        return subprocess.run(cmd, capture_output=True, text=True, timeout=3600)


def _download(version: str, platform: str, python: str = PYTHON) -> Path:
    """torch `version`'s wheel for `platform` and CPython `python` (X.Y), cached."""
    folder = cache_dir() / "torch-wheels"
    folder.mkdir(parents=True, exist_ok=True)
    pattern = f"torch-{version}*-cp{python.replace('.', '')}-*{platform.split('_', 3)[-1]}.whl"
    found = sorted(folder.glob(pattern))
    if found:
        return found[-1]
    with tempfile.TemporaryDirectory(prefix="cpubuild-torch-", dir=folder) as tmp:
        proc = _pip_download(f"torch=={version}", platform, python, Path(tmp))
        wheels = sorted(Path(tmp).glob("torch-*.whl"))
        if proc.returncode != 0 or not wheels:
            known = released_versions()
            if known and version not in known:
                raise UsageError(f"--torch {version}: no such torch release on the package index (newest: {', '.join(known[:5])})")
            errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
            last = next((line for line in reversed(proc.stderr.splitlines()) if line.strip()), "no wheel")
            why = next((e for e in errors if "Could not find" in e or "No matching" in e), errors[0] if errors else last)
            raise UsageError(f"--torch {version}: no torch {version} wheel for {platform} and "
                             f"CPython {python} on the package index ({why})")
        target = folder / wheels[0].name
        shutil.move(str(wheels[0]), target)
        return target


def release_wheel(version: str, platform: str, python: str = PYTHON) -> Path:
    """torch `version`'s own wheel for `platform` and CPython `python` (cached under cpubuild's cache)."""
    return _download(version, platform, python)


def target_environment(platform: str, python: str) -> dict[str, str]:
    """PEP 508 marker values of a Linux CPython `python` on `platform` (manylinux_2_28_aarch64)."""
    machine = platform.split("_", 3)[-1]
    return {"implementation_name": "cpython", "platform_python_implementation": "CPython", "os_name": "posix",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": machine,
            "python_version": python, "python_full_version": f"{python}.0", "implementation_version": f"{python}.0",
            "platform_release": "", "platform_version": "", "extra": ""}


GPU_PACKAGES = ("nvidia-", "cuda-", "triton")


def missing_dependency(version: str, platform: str, requirement: str, why: str) -> str:
    """One line for a torch dependency that cannot be fetched; a GPU one names the cause and the fix."""
    if not requirement.lower().startswith(GPU_PACKAGES):
        return f"torch {version} for {platform}: cannot fetch its dependency {requirement!r}: {why}"
    return (f"torch {version} for {platform} is a GPU build (it requires {requirement.split(';')[0].strip()}, which "
            f"cannot be fetched here: {why}); test against a CPU build instead: --torch 2.9.1 is the last release "
            "whose aarch64 wheel on PyPI is one, or install torch from https://download.pytorch.org/whl/cpu")


def fetch_with_dependencies(version: str, platform: str, python: str, dest: Path) -> list[Path]:
    """torch `version` and everything it requires on that platform and Python, as
    wheels in `dest` (torch's own from the cache). Markers are evaluated for the
    target. Since torch 2.10 the package index's aarch64 torch is a CUDA build
    whose CUDA packages apply on aarch64 too (vLLM #43115): one that cannot be
    fetched is refused with that cause and the fix."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    environment = target_environment(platform, python)
    dest.mkdir(parents=True, exist_ok=True)
    torch_wheel = _download(version, platform, python)
    shutil.copy2(torch_wheel, dest / torch_wheel.name)
    done = {"torch"}
    queue = [dest / torch_wheel.name]
    while queue:
        wheel = queue.pop()
        for text in requires_dist(wheel):
            req = Requirement(text)
            name = canonicalize_name(req.name)
            if name in done or (req.marker is not None and not req.marker.evaluate(environment)):
                continue
            done.add(name)
            before = set(dest.glob("*.whl"))
            proc = _pip_download(f"{req.name}{req.specifier}", platform, python, dest)
            got = sorted(set(dest.glob("*.whl")) - before)
            if proc.returncode != 0 or not got:
                why = next((line for line in proc.stderr.splitlines() if line.startswith("ERROR")), proc.stderr[-300:])
                raise UsageError(missing_dependency(version, platform, text, why))
            queue += got
    return sorted(dest.glob("*.whl"))


def requires_dist(wheel: Path) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        meta = next((n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
        text = archive.read(meta).decode("utf-8") if meta else ""
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def unpacked(wheel: Path, root: Path) -> Path:
    """The build members of torch `wheel` (include/, lib/, version.py, ../torch.libs/),
    unpacked once under `root`: its `torch` directory. One process unpacks (a lock per
    wheel); a tree without the mark (cut short, or an older layout) is replaced whole,
    and a tree with it is never touched again (other builds may be reading it)."""
    directory = root / wheel.name.removesuffix(".whl") / "torch"
    mark = directory.parent / UNPACKED_MARK
    if mark.is_file():
        return directory
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / f".{wheel.name}.lock", f"unpacking {wheel.name}"):
        if mark.is_file():  # another process unpacked it while this one waited
            return directory
        tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root))
        try:
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    if name.startswith(BUILD_MEMBERS) and not name.endswith("/"):
                        archive.extract(name, tmp)
            directory.parent.mkdir(parents=True, exist_ok=True)
            for part in ("torch", "torch.libs"):
                shutil.rmtree(directory.parent / part, ignore_errors=True)
                if (tmp / part).is_dir():
                    (tmp / part).rename(directory.parent / part)
            mark.write_text(wheel.name + "\n")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return directory


def downloaded(version: str, arch: Arch) -> TorchBuild:
    """torch `version` for another arch: its wheel for the arch's manylinux policy, unpacked once."""
    wheel = _download(check_release(version), arch.manylinux)
    directory = unpacked(wheel, cache_dir() / "torch")
    return TorchBuild(version=read_version(directory), directory=directory, cxx11_abi=cxx11_abi(directory),
                      origin=f"downloaded ({wheel.name})", manylinux=_wheel_policy(wheel.name.removesuffix(".whl").split("-")[-1]))


def build_env_pins(torch: TorchBuild | None) -> tuple[str, ...]:
    """What an isolated build environment's `torch` requirement is pinned to. CMake
    builds against `torch` (CPUBUILD_TORCH_DIR) and the provider pins its minor, so the
    environment's own torch only has to install: this Python's exact torch when it has
    one (a cached or local wheel), else the release built against."""
    if torch is None:
        return ()
    here = installed_version()
    return (f"torch=={here or torch.public}",)


def _main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("abi", "version", "openmp"):
        print("usage: python -m cpubuild.torchdist abi|version|openmp TORCH_DIR", file=sys.stderr)
        return 2
    try:
        if argv[0] == "openmp":
            print(openmp_runtime(Path(argv[1])) or "")
        else:
            print(cxx11_abi(Path(argv[1])) if argv[0] == "abi" else read_version(Path(argv[1])))
    except UsageError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
