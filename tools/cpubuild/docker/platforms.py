"""Docker platforms and wheels, mapped to cpubuild's arches (hardware data)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from ..errors import UsageError
from ..hardware import Arch
from ..hardware import host_arch as _host_arch
from ..settings import split_list


def host_arch(arches: Mapping[str, Arch]) -> Arch:
    machine = _host_arch()
    if machine not in arches:
        raise UsageError(f"this host's arch {machine!r} is not one the project builds ({', '.join(arches)})")
    return arches[machine]


def parse_platforms(arches: Mapping[str, Arch], values: Iterable[str]) -> list[Arch]:
    """`linux/amd64,linux/arm64` -> arches, in the order given, each once.
    No value: the host's platform."""
    names = split_list(values)
    if not names:
        return [host_arch(arches)]
    by_platform = {a.docker_platform: a for a in arches.values()}
    out: list[Arch] = []
    for name in names:
        arch = by_platform.get(name)
        if arch is None:
            raise UsageError(f"unknown platform {name!r} (known: {', '.join(by_platform)})")
        if arch not in out:
            out.append(arch)
    return out


def wheel_arch(arches: Mapping[str, Arch], wheel: Path) -> Arch:
    """The arch a wheel's platform tag names (`..._x86_64.whl` -> x86_64)."""
    try:
        _, _, _, tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise UsageError(f"{wheel}: not a wheel file name ({exc})") from None
    found = {a.name for tag in tags for a in arches.values() if tag.platform.endswith("_" + a.name)}
    if len(found) != 1:
        raise UsageError(f"{wheel.name}: its platform tag names no single arch of the project ({', '.join(arches)})")
    return arches[found.pop()]
