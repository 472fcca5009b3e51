"""The whole-archive check a wheel passes before it may enter an index: every
member's CRC (read in full, in bounded memory), RECORD hashes and sizes, size
caps, core metadata validated by `packaging`, a normalised file name and tags
that agree with the archive. A name once published can never take other
bytes, so anything pip would later choke on is refused here.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import zipfile
import zlib
from dataclasses import dataclass

from packaging.metadata import ExceptionGroup, InvalidMetadata, Metadata, RawMetadata, parse_email
from packaging.utils import canonicalize_name

from .names import IndexInputError, WheelName

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
READ_CHUNK = 1 << 16
SIZE_SUFFIX = re.compile(r"^\s*(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$", re.IGNORECASE)
# Members whose hash RECORD cannot hold: itself and its signatures (binary distribution format).
UNHASHED = ("RECORD", "RECORD.jws", "RECORD.p7s")
NATIVE = re.compile(r"\.(so(\.\d+)*|pyd|dylib|dll)$")
ALLOWED_COMPRESSION = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
MAX_REQUIRES_PYTHON = 256  # characters; a real one is a few dozen, and every page repeats it
# ELF e_machine of the architectures a platform tag can name
ELF_MACHINE = {"x86_64": 62, "amd64": 62, "i686": 3, "i386": 3, "aarch64": 183, "arm64": 183, "s390x": 22,
               "ppc64le": 21, "ppc64": 21, "riscv64": 243, "armv7l": 40}


class WheelCheckError(IndexInputError):
    """A wheel whose archive, RECORD or metadata does not verify."""


@dataclass(frozen=True, kw_only=True)
class WheelLimits:
    """Size caps (bytes). Defaults hold any real wheel of this field and stop a
    decompression bomb long before it costs memory."""

    archive: int = 2 * GIB
    member: int = 2 * GIB  # uncompressed size of one member
    metadata: int = 1 * MIB  # the .dist-info/METADATA served as <wheel>.metadata
    total: int = 8 * GIB  # uncompressed size of all members together


DEFAULT_LIMITS = WheelLimits()


def parse_size(text: str, *, what: str) -> int:
    """'1MiB', '500k', '2g', '123' (bytes) -> bytes; binary units."""
    match = SIZE_SUFFIX.match(text)
    if not match:
        raise IndexInputError(f"{what} {text!r} is not a size (e.g. 1MiB, 500k, 2g)")
    unit = (match.group(2) or "b").lower()[:1]
    return int(match.group(1)) * {"b": 1, "k": KIB, "m": MIB, "g": GIB}[unit]


def limits_from(archive: str | None, member: str | None, metadata: str | None) -> WheelLimits:
    """Caps given on the command line (None: the default)."""
    d = DEFAULT_LIMITS
    return WheelLimits(
        archive=parse_size(archive, what="--max-wheel-size") if archive else d.archive,
        member=parse_size(member, what="--max-member-size") if member else d.member,
        metadata=parse_size(metadata, what="--max-metadata-size") if metadata else d.metadata,
        total=d.total,
    )


@dataclass(frozen=True, kw_only=True)
class CheckedWheel:
    metadata: bytes
    name: str  # the metadata's Name, as written
    requires_python: str | None


def _refuse(filename: str, where: str, problem: str) -> WheelCheckError:
    return WheelCheckError(f"{filename}: {where}: {problem}")


def _read_member(filename: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int,
                 keep: bool) -> tuple[str, int, bytes]:
    """Reads one member in full (zipfile checks its CRC at the end): its RECORD
    hash, its size, and its bytes when `keep`. Memory stays at one chunk."""
    digest = hashlib.sha256()
    size = 0
    kept = io.BytesIO() if keep else None
    try:
        with archive.open(info) as stream:
            while chunk := stream.read(READ_CHUNK):
                size += len(chunk)
                if size > cap:
                    raise _refuse(filename, info.filename, f"inflates past the {cap}-byte cap")
                digest.update(chunk)
                if kept is not None:
                    kept.write(chunk)
    except WheelCheckError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError, RuntimeError) as exc:
        raise _refuse(filename, info.filename, f"does not read back ({_reason(exc)})") from None
    if size != info.file_size:
        raise _refuse(filename, info.filename, f"holds {size} bytes, its header says {info.file_size}")
    encoded = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    return f"sha256={encoded}", size, kept.getvalue() if kept is not None else b""


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]


def _record_rows(filename: str, record_name: str, data: bytes) -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    try:
        text = data.decode("utf-8")
        for row in csv.reader(io.StringIO(text)):
            if not row:
                continue
            if len(row) != 3:
                raise _refuse(filename, record_name, f"row {','.join(row)[:80]!r} does not have 3 fields")
            path, digest, size = row
            if path in rows:
                raise _refuse(filename, record_name, f"lists {path!r} twice")
            rows[path] = (digest, size)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise _refuse(filename, record_name, f"is not a UTF-8 CSV file ({_reason(exc)})") from None
    return rows


def _check_metadata(filename: str, member: str, data: bytes, wheel: WheelName) -> CheckedWheel:
    try:
        raw, unparsed = parse_email(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _refuse(filename, member, f"is not a core metadata file ({_reason(exc)})") from None
    for field in ("metadata_version", "name", "version"):
        if field not in raw:
            label = {"metadata_version": "Metadata-Version", "name": "Name", "version": "Version"}[field]
            bad = [k for k in unparsed if k.lower() == label.lower()]
            problem = "has an unreadable value" if bad else "is missing"
            raise _refuse(filename, f"{member} {label}", problem)
    requires = raw.get("requires_python")
    if requires is not None and len(requires) > MAX_REQUIRES_PYTHON:
        raise _refuse(filename, f"{member} Requires-Python", f"is {len(requires)} characters long (cap {MAX_REQUIRES_PYTHON})")
    # Validate the fields an index publishes; others are the installer's business.
    core: RawMetadata = {}
    for key in ("metadata_version", "name", "version", "requires_python"):
        if key in raw:
            core[key] = raw[key]
    try:
        meta = Metadata.from_raw(core, validate=True)
    except ExceptionGroup as group:
        first = group.exceptions[0]
        field = str(getattr(first, "field", "?")).replace("-", "_")
        label = {"metadata_version": "Metadata-Version", "name": "Name", "version": "Version",
                 "requires_python": "Requires-Python"}.get(field, field)
        problem = str(first).splitlines()[0] if isinstance(first, InvalidMetadata) else _reason(first)
        raise _refuse(filename, f"{member} {label}", problem[:160]) from None
    if canonicalize_name(meta.name) != wheel.project or meta.version != wheel.version:
        raise _refuse(filename, member, f"the file name says {wheel.project} {wheel.version}, its METADATA says {meta.name} {meta.version}")
    return CheckedWheel(metadata=data, name=raw["name"], requires_python=str(meta.requires_python) if requires else None)


def _check_file_name(filename: str, wheel: WheelName) -> None:
    dist, version = filename.split("-")[:2]
    normal = wheel.project.replace("-", "_")
    if dist != normal:
        raise _refuse(filename, "file name", f"project part {dist!r} is not normalised (expected {normal!r})")
    if version != str(wheel.version).replace("-", "_"):
        raise _refuse(filename, "file name", f"version part {version!r} is not normalised (expected {wheel.version})")


def _check_tags(filename: str, wheel: WheelName, wheel_file: str, natives: dict[str, bytes]) -> None:
    listed = {line.split(":", 1)[1].strip() for line in wheel_file.splitlines() if line.lower().startswith("tag:")}
    named = {str(t) for t in wheel.tags}
    if listed and listed != named:
        raise _refuse(filename, "WHEEL Tag", f"lists {', '.join(sorted(listed))}, the file name says {', '.join(sorted(named))}")
    platforms = {t.platform for t in wheel.tags}
    if natives and platforms == {"any"}:
        raise _refuse(filename, sorted(natives)[0], "is a native library in a wheel tagged for any platform")
    arches = {arch for p in platforms for arch in ELF_MACHINE if p.endswith(arch)}
    wanted = {ELF_MACHINE[a] for a in arches}
    for member, head in sorted(natives.items()):
        if len(head) >= 20 and head[:4] == b"\x7fELF" and wanted:
            machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
            if machine not in wanted:
                raise _refuse(filename, member, f"is an ELF file for machine {machine}, the platform tag says {', '.join(sorted(platforms))}")


def check_wheel(filename: str, data: bytes, wheel: WheelName, dist_info: str,
                limits: WheelLimits = DEFAULT_LIMITS) -> CheckedWheel:
    """Verifies the whole archive; returns its core metadata. Raises
    WheelCheckError naming the wheel, the member or field, and the problem."""
    if len(data) > limits.archive:
        raise _refuse(filename, "archive", f"is {len(data)} bytes, over the {limits.archive}-byte cap")
    _check_file_name(filename, wheel)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise _refuse(filename, "archive", f"is not a readable zip file ({_reason(exc)})") from None
    metadata_name = f"{dist_info}/METADATA"
    record_name = f"{dist_info}/RECORD"
    with archive:
        infos = archive.infolist()
        seen: set[str] = set()
        declared = 0
        for info in infos:
            if info.filename in seen:
                raise _refuse(filename, info.filename, "appears twice in the archive")
            seen.add(info.filename)
            if info.flag_bits & 0x1:
                raise _refuse(filename, info.filename, "is encrypted")
            if info.compress_type not in ALLOWED_COMPRESSION:
                raise _refuse(filename, info.filename, f"uses compression method {info.compress_type} (wheels use stored or deflate)")
            cap = limits.metadata if info.filename == metadata_name else limits.member
            if info.file_size > cap:
                raise _refuse(filename, info.filename, f"claims {info.file_size} bytes, over the {cap}-byte cap")
            declared += info.file_size
        if declared > limits.total:
            raise _refuse(filename, "archive", f"members claim {declared} bytes in all, over the {limits.total}-byte cap")
        hashes: dict[str, tuple[str, int]] = {}
        kept: dict[str, bytes] = {}
        natives: dict[str, bytes] = {}
        for info in infos:
            if info.is_dir():
                continue
            cap = limits.metadata if info.filename == metadata_name else limits.member
            keep = info.filename in (metadata_name, record_name, f"{dist_info}/WHEEL")
            digest, size, body = _read_member(filename, archive, info, cap, keep)
            hashes[info.filename] = (digest, size)
            if keep:
                kept[info.filename] = body
            if NATIVE.search(info.filename):
                with archive.open(info) as stream:
                    natives[info.filename] = stream.read(20)
    rows = _record_rows(filename, record_name, kept[record_name])
    for member, (digest, size) in hashes.items():
        if member.rsplit("/", 1)[-1] in UNHASHED and member.startswith(dist_info + "/"):
            continue
        row = rows.get(member)
        if row is None:
            raise _refuse(filename, member, f"is not listed in {record_name}")
        if row[0] != digest:
            raise _refuse(filename, member, f"hash {digest} differs from {record_name}'s {row[0] or '(none)'}")
        if row[1] != str(size):
            raise _refuse(filename, member, f"is {size} bytes, {record_name} says {row[1] or '(none)'}")
    for member in rows:
        if member not in hashes and not member.endswith("/"):
            raise _refuse(filename, record_name, f"lists {member!r}, which is not in the archive")
    try:
        wheel_file = kept[f"{dist_info}/WHEEL"].decode("utf-8")
    except UnicodeDecodeError:
        raise _refuse(filename, f"{dist_info}/WHEEL", "is not UTF-8") from None
    _check_tags(filename, wheel, wheel_file, natives)
    return _check_metadata(filename, metadata_name, kept[metadata_name], wheel)
