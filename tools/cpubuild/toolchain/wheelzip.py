"""Deterministic wheel archives, and what a wheel holds.

auditwheel rewrites the archive it repairs; `normalize` then re-zips it so the
bytes depend only on the contents: entries sorted (``.dist-info`` last, RECORD
at the very end), one timestamp (SOURCE_DATE_EPOCH), permissions reduced to
0644/0755, one compression level.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import tempfile
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.utils import parse_wheel_filename

COMPRESSION_LEVEL = 9
MANIFEST_NAME = "_manifest.json"


def entry_order(name: str) -> tuple[int, str]:
    """Package files first, then .dist-info with RECORD last (as the wheel spec recommends)."""
    top = name.split("/", 1)[0]
    if top.endswith(".dist-info"):
        return (2, "") if name.endswith("/RECORD") else (1, name)
    return (0, name)


def zip_time(epoch: int) -> tuple[int, int, int, int, int, int]:
    t = time.gmtime(max(epoch, 315532800))
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)


def normalize(wheel: Path, epoch: int) -> None:
    """Re-zips `wheel` in place, deterministically (atomic replace)."""
    with zipfile.ZipFile(wheel) as src:
        entries = [(i.filename, (i.external_attr >> 16) & 0o777, src.read(i)) for i in src.infolist() if not i.is_dir()]
    write_wheel(wheel, entries, epoch)


def write_wheel(path: Path, entries: list[tuple[str, int, bytes]], epoch: int) -> None:
    """Writes (name, mode, data) entries as a wheel whose bytes depend only on them (atomic
    replace): sorted, one timestamp, modes reduced to 0644/0755, one compression level."""
    stamp = zip_time(epoch)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESSION_LEVEL) as dst:
            for name, mode, data in sorted(entries, key=lambda e: entry_order(e[0])):
                out = zipfile.ZipInfo(name, date_time=stamp)
                out.external_attr = (0o100000 | (0o755 if mode & 0o111 else 0o644)) << 16
                out.create_system = 3
                out.compress_type = zipfile.ZIP_DEFLATED
                dst.writestr(out, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=COMPRESSION_LEVEL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def metadata_with_version(text: str, version: str) -> str:
    """METADATA with its Version header replaced; the description (after the
    first blank line) is left alone, whatever lines it holds."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if not line.strip():
            break  # end of the headers
        if line.startswith("Version:"):
            lines[i] = f"Version: {version}\n"
            break
    return "".join(lines)


def set_version(wheel: Path, version: str) -> Path:
    """The same wheel under another version: file name, .dist-info / .data
    directories, METADATA's Version and a recomputed RECORD. Returns the new
    path (the old file is removed); `normalize` re-zips it deterministically."""
    stem = wheel.name[: -len(".whl")]
    dist, old, rest = stem.split("-", 2)
    with zipfile.ZipFile(wheel) as src:
        entries = [(info.filename, info.external_attr, src.read(info)) for info in src.infolist() if not info.is_dir()]
    renamed: list[tuple[str, int, bytes]] = []
    for name, attr, data in entries:
        top, _, tail = name.partition("/")
        if top in (f"{dist}-{old}.dist-info", f"{dist}-{old}.data"):
            name = f"{dist}-{version}{top[len(dist) + 1 + len(old):]}/{tail}"
            if tail == "METADATA":
                data = metadata_with_version(data.decode("utf-8"), version).encode("utf-8")
        renamed.append((name, attr, data))
    record = f"{dist}-{version}.dist-info/RECORD"
    renamed = [e for e in renamed if e[0] != record]
    renamed.append((record, 0o644 << 16, record_file(((name, data) for name, _, data in renamed), record)))
    target = wheel.with_name(f"{dist}-{version}-{rest}.whl")
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for name, attr, data in renamed:
            info = zipfile.ZipInfo(name)
            info.external_attr = attr
            dst.writestr(info, data)
    if target != wheel:
        wheel.unlink()
    return target


def record_file(members: Iterable[tuple[str, bytes]], record: str) -> bytes:
    """RECORD's content for these (name, data) members in archive order (so that it
    depends only on the contents, whatever order a tool wrote them in), RECORD itself last."""
    rows = [f"{name},{record_hash(data)},{len(data)}"
            for name, data in sorted(members, key=lambda member: entry_order(member[0])) if name != record]
    return ("\n".join([*rows, f"{record},,"]) + "\n").encode()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True, kw_only=True)
class WheelContents:
    path: Path
    name: str
    version: str
    tags: tuple[str, ...]  # e.g. ("py3-none-manylinux_2_24_x86_64",)
    platforms: tuple[str, ...]
    files: tuple[str, ...]
    manifest: dict[str, Any] | None
    manifest_dir: str | None

    @property
    def built_variants(self) -> tuple[str, ...]:
        if not self.manifest:
            return ()
        return tuple(v["name"] for v in self.manifest["variants"] if v.get("built", True))

    @property
    def variant_libraries(self) -> dict[str, str]:
        """Variant -> library path inside the wheel, for the libraries really present."""
        if not self.manifest or self.manifest_dir is None:
            return {}
        present = set(self.files)
        out = {}
        for v in self.manifest["variants"]:
            lib = str(PurePosixPath(self.manifest_dir) / v["library"])
            if lib in present:
                out[v["name"]] = lib
        return out


def inspect(path: Path) -> WheelContents:
    name, version, _build, tags = parse_wheel_filename(path.name)
    with zipfile.ZipFile(path) as z:
        files = tuple(i.filename for i in z.infolist() if not i.is_dir())
        manifest = None
        manifest_dir = None
        for f in files:
            p = PurePosixPath(f)
            if p.name == MANIFEST_NAME and len(p.parts) == 2:
                manifest = json.loads(z.read(f))
                manifest_dir = str(p.parent)
                break
    return WheelContents(
        path=path,
        name=str(name),
        version=str(version),
        tags=tuple(sorted(str(t) for t in tags)),
        platforms=tuple(sorted({t.platform for t in tags})),
        files=files,
        manifest=manifest,
        manifest_dir=manifest_dir,
    )


def record_problems(path: Path) -> list[str]:
    """Entries whose content does not match RECORD's hash/size (empty: consistent)."""
    problems = []
    with zipfile.ZipFile(path) as z:
        names = [i.filename for i in z.infolist() if not i.is_dir()]
        record_name = next((n for n in names if n.endswith(".dist-info/RECORD")), None)
        if record_name is None:
            return ["no RECORD"]
        listed = {}
        for row in csv.reader(io.StringIO(z.read(record_name).decode())):
            if row and row[0] != record_name:
                listed[row[0]] = row[1] if len(row) > 1 else ""
        for n in names:
            if n == record_name:
                continue
            if n not in listed:
                problems.append(f"{n}: not in RECORD")
                continue
            algo, _, want = listed[n].partition("=")
            data = z.read(n)
            got = base64.urlsafe_b64encode(hashlib.new(algo or "sha256", data).digest()).rstrip(b"=").decode()
            if got != want:
                problems.append(f"{n}: hash differs from RECORD")
    return problems
