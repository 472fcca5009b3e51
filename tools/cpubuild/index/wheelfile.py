"""Reading the facts an index needs out of a wheel, and writing small wheels
(editable installs, synthetic wheels for tests and benchmarks, retagging).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from ..variantsjson import VARIANT_JSON
from .names import IndexInputError, WheelName, parse_wheel_name
from .wheelcheck import DEFAULT_LIMITS, WheelCheckError, WheelLimits, check_wheel

# Fixed timestamp for archive entries: the same input gives the same bytes.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True, kw_only=True)
class WheelInfo:
    """One wheel about to be published."""

    name: WheelName
    display_name: str  # the Name field of its metadata
    data: bytes
    sha256: str
    metadata: bytes  # the .dist-info/METADATA file, served as <wheel>.metadata (PEP 658)
    metadata_sha256: str
    requires_python: str | None
    variant: dict[str, Any] | None = None  # a variant wheel's .dist-info/variant.json (PEP 825)

    @property
    def filename(self) -> str:
        return self.name.filename

    @property
    def size(self) -> int:
        return len(self.data)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def metadata_fields(metadata: bytes) -> dict[str, str]:
    """The header fields of a core metadata file (RFC 822 style: up to the
    first blank line, continuation lines folded); the first of a repeated
    field wins. Parsed by hand: the email package costs more to import than
    a whole publish takes."""
    fields: dict[str, str] = {}
    last: str | None = None
    for line in metadata.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            break
        if line[0] in " \t" and last is not None:
            if last in fields:
                fields[last] += " " + line.strip()
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise IndexInputError(f"METADATA line {line[:60]!r} is not a 'Field: value' header")
        last = name.strip()
        fields.setdefault(last, value.strip())
    return fields


def _dist_info_dir(names: Iterable[str], wheel: WheelName) -> str:
    """The wheel's single top-level .dist-info directory for its project."""
    dirs = {n.split("/", 1)[0] for n in names if "/" in n and n.split("/", 1)[0].endswith(".dist-info")}
    mine = [d for d in dirs if canonicalize_name(d[: -len(".dist-info")].rsplit("-", 1)[0]) == wheel.project]
    if len(mine) != 1:
        raise IndexInputError(
            f"{wheel.filename}: expected one {wheel.project}-*.dist-info directory in the archive, found {sorted(dirs) or 'none'}"
        )
    return mine[0]


def read_wheel_bytes(filename: str, data: bytes, limits: WheelLimits = DEFAULT_LIMITS) -> WheelInfo:
    """Validates a wheel's name and whole archive (see wheelcheck) and extracts its core metadata."""
    wheel = parse_wheel_name(filename)
    if len(data) > limits.archive:
        raise WheelCheckError(f"{filename}: archive: is {len(data)} bytes, over the {limits.archive}-byte cap")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError):
        raise IndexInputError(f"{filename}: not a wheel (not a zip archive)") from None
    with archive:
        names = archive.namelist()
        for member in names:
            parts = member.split("/")
            if member.startswith("/") or ".." in parts or "\\" in member:
                raise IndexInputError(f"{filename}: archive member {member!r} escapes the install directory")
        dist_info = _dist_info_dir(names, wheel)
        for required in ("METADATA", "WHEEL", "RECORD"):
            if f"{dist_info}/{required}" not in names:
                raise IndexInputError(f"{filename}: {dist_info}/{required} is missing")
    checked = check_wheel(filename, data, wheel, dist_info, limits)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        member = f"{dist_info}/{VARIANT_JSON}"
        variant = _variant_json(filename, wheel, archive, member in names, member)
    return WheelInfo(
        name=wheel,
        display_name=checked.name,
        data=data,
        sha256=sha256_hex(data),
        metadata=checked.metadata,
        metadata_sha256=sha256_hex(checked.metadata),
        requires_python=checked.requires_python,
        variant=variant,
    )


def _variant_json(filename: str, wheel: WheelName, archive: zipfile.ZipFile, present: bool, member: str) -> dict[str, Any] | None:
    """A variant wheel's variant.json, checked against its file name's label; None for other wheels."""
    if wheel.label is None:
        if present:
            raise IndexInputError(f"{filename}: holds {member} but its name has no variant label")
        return None
    if not present:
        raise IndexInputError(f"{filename}: a variant wheel (label {wheel.label!r}) without {member}")
    try:
        document = json.loads(archive.read(member))
        labels = list(document["variants"])
    except (ValueError, KeyError, TypeError) as exc:
        raise IndexInputError(f"{filename}: {member} is not a variant description: {exc}") from None
    if labels != [wheel.label]:
        raise IndexInputError(f"{filename}: {member} describes {labels}, the file name says {wheel.label!r}")
    return dict(document)


def read_wheel(path: Path, limits: WheelLimits = DEFAULT_LIMITS) -> WheelInfo:
    if not path.is_file():
        raise IndexInputError(f"{path}: no such file")
    wheel = parse_wheel_name(path.name)  # reject a bad name before reading the bytes
    size = path.stat().st_size
    if size > limits.archive:  # before reading it into memory
        raise WheelCheckError(f"{wheel.filename}: archive: is {size} bytes, over the {limits.archive}-byte cap")
    return read_wheel_bytes(wheel.filename, path.read_bytes(), limits)


# ------------------------------------------------------------------ writing


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def write_wheel(
    out_dir: Path,
    *,
    name: str,
    version: str,
    files: Mapping[str, bytes],
    tag: str = "py3-none-any",
    requires_python: str | None = ">=3.10",
    extra_metadata: str = "",
) -> Path:
    """Writes a valid wheel (METADATA, WHEEL, RECORD with hashes); returns its path."""
    dist = f"{canonicalize_name(name).replace('-', '_')}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    if requires_python:
        metadata += f"Requires-Python: {requires_python}\n"
    metadata += extra_metadata
    purelib = "true" if tag.endswith("-any") else "false"
    wheel_file = f"Wheel-Version: 1.0\nGenerator: cpubuild\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n"
    members = dict(files)
    members[f"{dist}.dist-info/METADATA"] = metadata.encode()
    members[f"{dist}.dist-info/WHEEL"] = wheel_file.encode()
    return _write_archive(out_dir / f"{dist}-{tag}.whl", f"{dist}.dist-info", members)


def _write_archive(path: Path, dist_info: str, members: Mapping[str, bytes], modes: Mapping[str, int] | None = None) -> Path:
    record_name = f"{dist_info}/RECORD"
    rows = [f"{n},{_record_hash(d)},{len(d)}" for n, d in sorted(members.items())]
    rows.append(f"{record_name},,")
    entries = dict(members)
    entries[record_name] = ("\n".join(rows) + "\n").encode()
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        # .dist-info last, as the wheel spec recommends
        for member in sorted(entries, key=lambda n: (n.startswith(dist_info), n)):
            info = zipfile.ZipInfo(member, date_time=ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = ((modes or {}).get(member, 0o644) | 0o100000) << 16
            archive.writestr(info, entries[member])
    os.replace(tmp, path)
    return path


def retag_wheel(src: Path, out_dir: Path, version: str) -> Path:
    """A copy of a wheel under another version: dist-info renamed, METADATA
    and RECORD rewritten; every other member (and its mode) kept as is."""
    wheel = parse_wheel_name(src.name)
    with zipfile.ZipFile(src) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()}
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in archive.infolist()}
    old_dist = _dist_info_dir(members, wheel)
    new_dist = f"{old_dist[: -len('.dist-info')].rsplit('-', 1)[0]}-{version}.dist-info"
    out: dict[str, bytes] = {}
    out_modes: dict[str, int] = {}
    for member, data in members.items():
        if member == f"{old_dist}/RECORD":
            continue
        if member == f"{old_dist}/METADATA":
            data = re.sub(rb"(?m)^Version: .*$", f"Version: {version}".encode(), data, count=1)
        new_name = new_dist + member[len(old_dist):] if member.startswith(old_dist + "/") else member
        out[new_name] = data
        out_modes[new_name] = modes.get(member, 0o644) or 0o644
    stem = src.name[: -len(".whl")].split("-")
    stem[1] = version.replace("-", "_")
    return _write_archive(out_dir / ("-".join(stem) + ".whl"), new_dist, out, out_modes)
