"""The build plan: which variants, which name, which settings - computed, never run.

Everything here is pure (no subprocess, no file system) so unit tests can walk
the whole matrix -> plan path, cibuildwheel style.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..cmake import CMAKE_DIR
from ..errors import UnknownISAError, UsageError
from ..hardware import Arch, hardware
from ..matrix import Matrix, Variant
from ..runtime.select import lacking
from ..settings import split_list
from ..toolchain.sharedcache import SharedCache
from ..torchdist import TorchBuild
from .version import SourceVersion

ALL = "all"
NATIVE = "native"
BASELINE = "baseline"  # on every arch: that arch's baseline variant, whatever its name
CPU_LABEL = "cpu"
ENV_BUILD_VERSION = "CPUBUILD_BUILD_VERSION"  # read by cpubuild.version_provider


@dataclass(frozen=True, kw_only=True)
class IsaSet:
    """The variants one wheel carries (baseline first, then by priority)."""

    arch: str
    variants: tuple[str, ...]
    complete: bool  # every variant of the arch
    label: tuple[str, ...]  # local-version segments: ("cpu",) or ("cpu", "avx512")
    without_floor: bool = False  # a --partial build leaving the arch's floor to another partial

    @property
    def label_text(self) -> str:
        return ".".join(self.label)

    @property
    def cmake_list(self) -> str:
        return ",".join(self.variants)


def split_isa_args(values: Iterable[str]) -> list[str]:
    """`--isa a,b --isa c` -> [a, b, c] (order kept, blanks dropped, lower-cased)."""
    names: list[str] = []
    for item in split_list(value.replace(";", ",") for value in values):  # ';': a CMake list
        if item.lower() not in names:
            names.append(item.lower())
    return names


def label_segment(variant: str) -> str:
    """A variant name as a PEP 440 local-version segment ('neon_bf16' -> 'neonbf16').

    Local segments are letters and digits only: '_' would be normalised into a
    segment separator, so it is dropped (uniqueness is checked per arch)."""
    return variant.replace("_", "")


def check_labels_unique(matrix: Matrix, arch: str) -> None:
    seen: dict[str, str] = {}
    for v in matrix.variants_for(arch):
        seg = label_segment(v.name)
        if seg in seen:
            raise UsageError(f"variants {seen[seg]!r} and {v.name!r} ({arch}) would share the wheel label segment {seg!r}; rename one in {matrix.path}")
        seen[seg] = v.name


def label_extras(order: Sequence[str], chosen: Iterable[str]) -> tuple[str, ...]:
    """The ISA-set label's segments after `cpu`: none for every variant of `order`
    (the arch's variants, baseline first), else the chosen non-baseline ones, or the baseline alone."""
    wanted = set(chosen)
    if wanted >= set(order):
        return ()
    extras = [label_segment(n) for n in order[1:] if n in wanted]
    return tuple(extras or [label_segment(order[0])])


def isa_label(matrix: Matrix, arch: str, variants: Iterable[str]) -> tuple[str, ...]:
    """`cpu` for every variant; else `cpu` + the non-baseline variants, or the baseline alone."""
    return (CPU_LABEL, *label_extras([v.name for v in matrix.variants_for(arch)], variants))


def _arch_of(matrix: Matrix, name: str) -> list[str]:
    return sorted({v.arch for v in matrix.variants if v.name == name})


def resolve_isa_set(
    matrix: Matrix,
    arch: str,
    requested: Iterable[str],
    *,
    native: Callable[[], str] | None = None,
    partial: bool = False,
) -> IsaSet:
    """Validates and expands `--isa` values for `arch`.

    `native` returns the best variant this host runs; None when the target is
    not the host (then `native` is a usage error). The baseline is always added;
    a floor too, except in a `partial` build (one partial of the merge holds it:
    a floor is a full variant, not a small fallback every partial can carry).
    """
    arch = hardware().resolve_arch(arch, matrix.arches, offered_by="isa_matrix.toml declares")
    check_labels_unique(matrix, arch)
    ordered = matrix.variants_for(arch)
    known = [v.name for v in ordered]
    names = split_isa_args(requested) or [ALL]
    lowest = matrix.baseline(arch)
    wanted: set[str] = set() if partial and lowest.floor else {lowest.name}
    for name in names:
        if name == ALL:
            wanted.update(known)
        elif name == NATIVE:
            if native is None:
                raise UsageError(f"--isa native means the best variant this host runs; it cannot be used for --arch {arch} on this host")
            wanted.add(native())
        elif name in known:
            wanted.add(name)
        elif name == BASELINE:
            wanted.add(lowest.name)
        else:
            others = _arch_of(matrix, name)
            if others:
                raise UnknownISAError(
                    f"ISA {name!r} is a variant of {', '.join(others)}, not of {arch} (use --arch {others[0]}, or one of: {', '.join(known)})"
                )
            raise UnknownISAError(f"unknown ISA {name!r} for {arch} (known: {', '.join(known)}, {ALL}, {NATIVE})")
    variants = tuple(n for n in known if n in wanted)
    return IsaSet(arch=arch, variants=variants, complete=len(variants) == len(known), label=isa_label(matrix, arch, variants),
                  without_floor=lowest.name not in wanted)


def best_runnable(matrix: Matrix, arch: str, host_features: Iterable[str]) -> Variant:
    """The highest-priority variant whose required features the host has."""
    have = set(host_features)
    runnable = [v for v in matrix.variants_for(arch) if not lacking(v.requires, have)]
    return runnable[-1] if runnable else matrix.baseline(arch)


@dataclass(frozen=True, kw_only=True)
class BuildPlan:
    """Everything one `cpubuild wheel` run will do, decided before it starts."""

    project: Path
    arch: str
    target: Arch = field(hash=False)  # the arch's facts as this project builds it
    platform: str
    isa: IsaSet
    version: str
    relabel: bool  # static [project] version: the wheel is renamed to `version` after the build
    torch: TorchBuild | None = field(default=None, hash=False)  # torch projects: the torch built against
    source_version: str
    version_origin: str
    source_date_epoch: int
    build_dir: Path
    out_dir: Path
    manylinux: str  # the manylinux tag the matrix aims at: the ceiling of the repair
    frontend: str
    isolated: bool
    jobs: int
    ccache: str | None  # path of ccache, or None
    shared_cache: SharedCache | None = field(default=None, hash=False)  # --cache s3://...: sccache instead of ccache
    repair: bool
    clean: bool
    config_settings: Mapping[str, str] = field(hash=False)
    extra_settings: Mapping[str, str] = field(hash=False, default_factory=dict)  # the user's (-C), within the above
    env: Mapping[str, str] = field(hash=False)

    @property
    def variants(self) -> tuple[str, ...]:
        return self.isa.variants


def build_dir_for(build_root: Path, arch: str, isa: IsaSet) -> Path:
    """One build directory per (arch, ISA set, torch): switching never reconfigures another's."""
    return build_root / f"{arch}-{isa.label_text}{'-partial' if isa.without_floor else ''}"


def with_torch(isa: IsaSet, torch: TorchBuild | None) -> IsaSet:
    """A torch project's label names the torch minor too: cpu.pt213[.avx512], so wheels
    of one source for several torch versions never share a name."""
    if torch is None:
        return isa
    return replace(isa, label=(isa.label[0], torch.label, *isa.label[1:]))


def torch_settings(torch: TorchBuild) -> dict[str, str]:
    """What CMake and the version provider get to build against `torch`."""
    return {
        "cmake.define.CPUBUILD_TORCH_DIR": str(torch.directory),
        "cmake.define.CPUBUILD_TORCH_CXX11_ABI": str(torch.cxx11_abi),
    }


OWN_SETTINGS = ("build-dir", "wheel.reproducible")  # never the user's: they decide what is built and its bytes


def config_settings(*, isa: IsaSet, build_dir: Path, ccache: str | None, verbose: bool) -> dict[str, str]:
    """The PEP 517 config-settings scikit-build-core gets for one ISA set."""
    settings = {
        "build-dir": str(build_dir),
        "cmake.build-type": "Release",
        "cmake.define.CPUBUILD_ARCH": isa.arch,
        # An explicit list: CMake then fails (instead of skipping) when the
        # compiler cannot build a variant that was asked for.
        "cmake.define.CPUBUILD_ISA": isa.cmake_list,
        "cmake.define.CPUBUILD_PARTIAL": "ON" if isa.without_floor else "OFF",  # the floor only if the list names it
        "wheel.reproducible": "true",
        "build.verbose": "true" if verbose else "false",
        # the SBOM's per-variant flags and sources (sbom.py)
        "cmake.define.CMAKE_EXPORT_COMPILE_COMMANDS": "ON",
        # this cpubuild's CMake package: find_package caches the one it found in a
        # reused build directory, which may be another installation's
        "cmake.define.cpubuild_DIR": str(CMAKE_DIR),
    }
    # Explicit even when off: a reused build directory keeps what an earlier build cached
    # (a shared-cache build's launcher and path tokens must not leak into a local one).
    settings["cmake.define.CMAKE_C_COMPILER_LAUNCHER"] = ccache or ""
    settings["cmake.define.CMAKE_CXX_COMPILER_LAUNCHER"] = ccache or ""
    settings["cmake.define.CPUBUILD_PATH_TOKENS"] = "OFF"
    return settings


def build_env(
    *, version: str, source_date_epoch: int, jobs: int, ccache: str | None = None, build_root: Path | None = None,
    inherited_ignore: str = "",
) -> dict[str, str]:
    env = {
        ENV_BUILD_VERSION: version,
        "SOURCE_DATE_EPOCH": str(source_date_epoch),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs),
        # Locale-independent compiler messages in the log tail we show.
        "LC_ALL": "C",
    }
    if ccache and build_root is not None and " " not in str(build_root):
        # The build directory enters compile commands only through
        # -ffile-prefix-map=<build dir>=build, which maps it away: the objects
        # do not depend on it, so it is left out of ccache's hash and every
        # ISA set's build directory shares compiled objects.
        env["CCACHE_IGNOREOPTIONS"] = " ".join(filter(None, [inherited_ignore, f"-ffile-prefix-map={build_root}/*"]))
        # Each variant's unity file lives in its build directory: with the
        # build root as ccache's base_dir its path hashes relative to the
        # working directory (CMakeFiles/.../Unity/unity_0_cxx.cxx), the same
        # in every build directory.
        env["CCACHE_BASEDIR"] = str(build_root)
    return env


def make_plan(
    *,
    matrix: Matrix,
    project: Path,
    isa: IsaSet,
    platform: str,
    source: SourceVersion,
    build_root: Path,
    out_dir: Path,
    frontend: str,
    isolated: bool,
    jobs: int,
    ccache: str | None,
    repair: bool,
    clean: bool,
    verbose: bool = False,
    extra_settings: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    inherited_ccache_ignore: str = "",
    relabel: bool = False,
    torch: TorchBuild | None = None,
    shared_cache: SharedCache | None = None,
) -> BuildPlan:
    arch = matrix.arches[isa.arch]
    isa = with_torch(isa, torch)
    build_dir = build_dir_for(build_root, isa.arch, isa)
    if shared_cache:  # other compilers (the wrappers) for CMake: a directory of their own, never a reconfigure
        build_dir = build_dir.with_name(f"{build_dir.name}-sccache")
    version = source.with_label(isa.label)
    settings = config_settings(isa=isa, build_dir=build_dir, ccache=ccache, verbose=verbose)
    for key in extra_settings or {}:
        if key in OWN_SETTINGS or key.startswith("cmake.define.CPUBUILD_"):
            raise UsageError(f"option -C {key}: cpubuild sets this config-setting itself (for the variants being built)")
    settings.update(extra_settings or {})
    env = build_env(version=version, source_date_epoch=source.source_date_epoch, jobs=jobs, ccache=ccache,
                    build_root=build_root, inherited_ignore=inherited_ccache_ignore)
    env.update(extra_env or {})
    if torch is not None:
        settings.update(torch_settings(torch))
        env["CPUBUILD_TORCH_VERSION"] = torch.version  # the version provider's pin
    return BuildPlan(
        project=project,
        arch=isa.arch,
        target=arch,
        platform=platform,
        relabel=relabel,
        torch=torch,
        isa=isa,
        version=version,
        source_version=source.text,
        version_origin=source.origin,
        source_date_epoch=source.source_date_epoch,
        build_dir=build_dir,
        out_dir=out_dir,
        manylinux=torch.policy_ceiling(arch.manylinux) if torch else arch.manylinux,
        frontend=frontend,
        isolated=isolated,
        jobs=jobs,
        ccache=ccache,
        shared_cache=shared_cache,
        repair=repair,
        clean=clean,
        config_settings=settings,
        extra_settings=dict(extra_settings or {}),
        env=env,
    )
