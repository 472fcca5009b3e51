"""What `cpubuild image` builds: one image per (platform, ISA set), planned
without touching Docker (unit-tested like a cibuildwheel build plan)."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import UnknownISAError, UsageError
from ..hardware import Arch
from ..matrix import Matrix
from ..settings import split_list
from . import isa_args
from .context import WHEEL_DIR

TARGETS = ("build", "runtime", "test")


@dataclass(frozen=True, kw_only=True)
class ImageSpec:
    arch: Arch
    isas: tuple[str, ...] | None  # None: every variant of the arch
    target: str
    tag: str
    base: str
    wheel: Path | None  # build-context wheel; None: compile in the build stage
    merged_from: tuple[Path, ...] = ()  # the partial wheels `wheel` was merged from on the host

    @property
    def platform(self) -> str:
        return self.arch.docker_platform

    @property
    def label(self) -> str:
        return isa_label(self.isas)

    def build_args(self, matrix: Matrix, *, wheel_dir: str = str(WHEEL_DIR), torch_dir: str | None = None) -> dict[str, str]:
        args = isa_args.build_args(matrix, self.arch.name, self.isas)
        args["CPUBUILD_BASE"] = self.base
        args["CPUBUILD_WHEEL_SOURCE"] = "context" if self.wheel is not None else "compile"
        args["CPUBUILD_WHEEL_DIR"] = wheel_dir
        if torch_dir is not None:  # torch projects in a bake file: one folder per platform and torch
            args["CPUBUILD_TORCH_DIR"] = torch_dir
        return args


def isa_label(isas: Sequence[str] | None) -> str:
    """`all`, or the variants beyond the baseline joined by '-' (`avx2-avx512`)."""
    if isas is None:
        return "all"
    extra = [name for name in isas[1:]]
    return "-".join(extra) if extra else isas[0]


def resolve_isas(matrix: Matrix, arches: Sequence[Arch], values: Iterable[str]) -> dict[str, tuple[str, ...] | None]:
    """The ISA set of each arch. Every name must be a variant of one of the
    platforms; each platform gets its own names plus its baseline."""
    names = split_list(values)
    if not names or names == ("all",):
        return {a.name: None for a in arches}
    if "all" in names:
        raise UsageError("--isa all cannot be combined with other ISA names")
    chosen: dict[str, list[str]] = {a.name: [] for a in arches}
    for name in names:
        owners = [a for a in arches if any(v.name == name for v in matrix.variants_for(a.name))]
        if not owners:
            elsewhere = sorted({v.arch for v in matrix.variants if v.name == name})
            platforms = ", ".join(a.docker_platform for a in arches)
            known = "; ".join(f"{a.docker_platform}: {', '.join(v.name for v in matrix.variants_for(a.name))}" for a in arches)
            if elsewhere:
                other = ", ".join(matrix.arches[e].docker_platform for e in elsewhere)
                raise UnknownISAError(f"ISA {name!r} is a variant of {other}, not of {platforms} ({known})")
            raise UnknownISAError(f"unknown ISA {name!r} ({known})")
        for arch in owners:
            chosen[arch.name].append(name)
    out: dict[str, tuple[str, ...] | None] = {}
    for arch in arches:
        if not chosen[arch.name]:
            raise UnknownISAError(f"no --isa names a variant of {arch.docker_platform}; give one of its variants or 'all'")
        variants = matrix.variants_for(arch.name)
        wanted = set(chosen[arch.name]) | {matrix.baseline(arch.name).name}
        ordered = tuple(v.name for v in variants if v.name in wanted)
        out[arch.name] = None if len(ordered) == len(variants) else ordered
    return out


def image_tag(tag: str | None, *, repository: str, target: str, arch: Arch, isas: Sequence[str] | None,
              several: bool) -> str:
    """--tag as given for one platform; with several, `-<debian arch>` is appended
    (a local image store holds one platform per tag). Default:
    <repository>:<target>-<debian arch>[-<isa label>], the repository being the
    project's distribution name."""
    if tag is None:
        suffix = "" if isas is None else f"-{isa_label(isas)}"
        return f"{repository}:{target}-{arch.debian_arch}{suffix}"
    if not several:
        return tag
    name, sep, version = tag.rpartition(":")
    if not sep or "/" in version:  # no tag part (a registry port is not one)
        return f"{tag}:{arch.debian_arch}"
    return f"{name}:{version}-{arch.debian_arch}"


def _manifest(wheel: Path) -> tuple[dict[str, Any], PurePosixPath, set[str]]:
    """The wheel's cpubuild manifest, the folder it is in, and every member's name."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            manifest_name = next((n for n in names if PurePosixPath(n).name == "_manifest.json"), None)
            if manifest_name is None:
                raise UsageError(f"{wheel.name} holds no cpubuild manifest (<package>/_manifest.json): not built by cpubuild")
            manifest = json.loads(archive.read(manifest_name))
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise UsageError(f"{wheel} is not a readable wheel: {exc}") from None
    if not isinstance(manifest, dict):
        raise UsageError(f"{wheel.name}: its manifest is not a JSON object")
    return manifest, PurePosixPath(manifest_name).parent, names


def wheel_variants(wheel: Path) -> tuple[str, tuple[str, ...]]:
    """(arch, variants whose library is inside) read from the wheel's manifest."""
    manifest, folder, names = _manifest(wheel)
    present = tuple(v["name"] for v in manifest.get("variants", []) if str(folder / v["library"]) in names)
    return str(manifest.get("arch", "")), present


def wheel_torch(wheel: Path) -> str | None:
    """The torch a torch extension's wheel was built against (its manifest's `torch`, 2.13.0+cpu); None for other wheels."""
    manifest, _, _ = _manifest(wheel)
    torch = manifest.get("torch")
    if manifest.get("kind") == "torch" and not torch:
        raise UsageError(f"{wheel.name} is a torch extension whose manifest names no torch version: rebuild it with this cpubuild")
    return str(torch) if torch else None


def check_wheel(matrix: Matrix, arch: Arch, wheel: Path, isas: tuple[str, ...] | None, explicit: bool) -> tuple[str, ...] | None:
    """The ISA set of a given wheel, checked against its arch and --isa."""
    wheel_arch, present = wheel_variants(wheel)
    if wheel_arch != arch.name:
        raise UsageError(f"{wheel.name}: its manifest is for {wheel_arch or 'no arch'}, not {arch.name}")
    all_names = tuple(v.name for v in matrix.variants_for(arch.name))
    found = None if set(present) == set(all_names) else tuple(n for n in all_names if n in present)
    if explicit and found != isas:
        raise UsageError(
            f"{wheel.name} holds {isa_label(found)} ({', '.join(present)}), but --isa asks for {isa_label(isas)} on {arch.docker_platform}"
        )
    return found
