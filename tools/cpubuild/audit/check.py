"""What a wheel, a directory or a library may contain, from its own manifest,
and the audit of every ELF file in it against that."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import UsageError
from .elf import ElfImage, NotAuditableError, is_elf, read_elf
from .features import tables
from .scan import Allow, LibraryScan, scan_library

MANIFEST_NAME = "_manifest.json"
RECORD_NAME = "_audit_functions.json"  # written by `cpubuild wheel` when the project's allow list matched (record.py)


class AuditInputError(UsageError):
    """An audit target that does not exist or cannot be read."""


class AuditAllowError(UsageError):
    """A manifest's audit.allow list is malformed."""


@dataclass(frozen=True, kw_only=True)
class Role:
    """What one library is to the dispatcher, and so what it may use."""

    kind: str  # "variant", "probe", "other" (not dispatched: arch baseline), "unmanaged" (no manifest)
    variant: str | None = None
    requires: tuple[str, ...] = ()
    defining: tuple[str, ...] = ()  # the features this variant adds over the lower ones


@dataclass(kw_only=True)
class LibraryAudit:
    role: Role
    scan: LibraryScan
    image: ElfImage
    allowed: tuple[str, ...] | None
    warnings: list[str] = field(default_factory=list)

    @property
    def highest(self) -> str | None:
        """The highest feature of hardware.toml an instruction really needs (None: baseline only)."""
        t = tables(self.scan.arch)
        known = [f for f in self.scan.by_feature if f in t.order]
        return max(known, key=t.rank) if known else None

    @property
    def other_features(self) -> list[str]:
        """Needed features the hardware data does not list (aes, atomics, ...)."""
        t = tables(self.scan.arch)
        return sorted(f for f in self.scan.by_feature if f not in t.order)


@dataclass(kw_only=True)
class AuditResult:
    target: str
    manifest: bool
    libraries: list[LibraryAudit]

    @property
    def violations(self) -> int:
        return sum(lib.scan.violation_count for lib in self.libraries)

    @property
    def text_bytes(self) -> int:
        return sum(lib.scan.text_bytes for lib in self.libraries)

    @property
    def ok(self) -> bool:
        return self.violations == 0


def _members(target: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every file: a wheel's members, a directory's files, or one file."""
    if target.is_dir():
        for root, _dirs, files in os.walk(target):
            for file in sorted(files):
                path = Path(root, file)
                if path.is_file() and not path.is_symlink():
                    yield str(path.relative_to(target)), path.read_bytes()
    elif zipfile.is_zipfile(target):
        with zipfile.ZipFile(target) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    yield info.filename, zf.read(info)
    else:
        yield target.name, target.read_bytes()


def parse_allow(raw: Any, where: str) -> tuple[Allow, ...]:
    """The audit.allow list: [{symbol, reason}], both non-empty strings."""
    if not isinstance(raw, list):
        raise AuditAllowError(f"{where}: field 'audit.allow' must be a list of {{symbol, reason}} tables")
    out = []
    for number, entry in enumerate(raw, 1):
        if not isinstance(entry, dict) or set(entry) != {"symbol", "reason"} or not all(
                isinstance(entry[k], str) and entry[k].strip() for k in ("symbol", "reason")):
            raise AuditAllowError(f"{where}: field 'audit.allow' entry #{number} needs exactly a non-empty "
                                  f"'symbol' and a non-empty 'reason'")
        out.append(Allow(symbol=entry["symbol"], reason=entry["reason"]))
    return tuple(out)


def _roles(manifests: dict[str, dict[str, Any]]) -> tuple[dict[str, Role], tuple[Allow, ...]]:
    """Library path -> role, from every manifest (keyed by the manifest's directory)."""
    roles: dict[str, Role] = {}
    allow: list[Allow] = []
    for directory, manifest in manifests.items():
        variants = sorted(manifest.get("variants", []), key=lambda v: v.get("priority", 0))
        for index, v in enumerate(variants):
            lower = set().union(*(set(w.get("requires", [])) for w in variants[:index]))
            requires = tuple(v.get("requires", []))
            roles[str(PurePosixPath(directory, v["library"]))] = Role(
                kind="variant", variant=v["name"], requires=requires,
                defining=tuple(r for r in requires if r not in lower))
        if manifest.get("probe"):
            roles[str(PurePosixPath(directory, manifest["probe"]))] = Role(kind="probe")
        allow.extend(parse_allow(manifest.get("audit", {}).get("allow", []), f"{directory}/{MANIFEST_NAME}"))
    return roles, tuple(allow)


def _allowed(role: Role, arch: str) -> frozenset[str] | None:
    t = tables(arch)
    if role.kind == "unmanaged":
        return None
    if role.kind == "variant":
        return t.allowed(role.requires)
    if role.kind == "probe":
        return t.allowed(()) | frozenset(t.probe.values())
    return t.allowed(())


def _named(image: ElfImage, symbol_dirs: tuple[Path, ...]) -> ElfImage:
    """A stripped library named by an unstripped copy of the same code (a build tree)."""
    for directory in symbol_dirs:
        for candidate in sorted(directory.rglob(PurePosixPath(image.name).name))[:8]:
            try:
                named = image.with_symbols_of(read_elf(str(candidate), candidate.read_bytes()))
            except (OSError, NotAuditableError):
                continue
            if named is not None:
                return named
    return image


def audit_target(target: Path | str, *, extra_allow: tuple[Allow, ...] = (), allow_empty: bool = False,
                 symbol_dirs: tuple[Path, ...] = ()) -> AuditResult:
    """Audit one wheel, directory or ELF file against its manifest (if any).
    `symbol_dirs`: where unstripped copies of its libraries may be (function names)."""
    target = Path(target)
    if not target.exists():
        raise AuditInputError(f"{target}: no such file or directory")
    manifests: dict[str, dict[str, Any]] = {}
    recorded: dict[str, Any] = {}
    digests: dict[str, str] = {}
    images: list[ElfImage] = []
    try:
        for name, data in _members(target):
            if PurePosixPath(name).name == RECORD_NAME:
                try:
                    recorded.update(json.loads(data).get("libraries", {}))
                except (ValueError, AttributeError):
                    continue
            elif PurePosixPath(name).name == MANIFEST_NAME:
                try:
                    manifest = json.loads(data)
                except ValueError:
                    continue
                if isinstance(manifest, dict) and "variants" in manifest:
                    manifests[str(PurePosixPath(name).parent)] = manifest
            elif is_elf(data):
                try:
                    images.append(read_elf(name, data))
                    digests[name] = hashlib.sha256(data).hexdigest()
                except NotAuditableError:
                    if not target.is_file() or zipfile.is_zipfile(target):
                        continue  # e.g. a 32-bit helper inside a wheel: not dispatched code
                    raise
    except OSError as exc:
        raise AuditInputError(f"{target}: cannot be read ({exc.strerror or exc})") from None
    except zipfile.BadZipFile as exc:
        raise AuditInputError(f"{target}: not a readable wheel ({exc})") from None
    if not images and not allow_empty:
        raise AuditInputError(f"{target}: holds no ELF library of {', '.join(('x86_64', 'aarch64', 's390x'))}")
    roles, allow = _roles(manifests)
    libraries = []
    for image in images:
        image = _named(image, symbol_dirs)
        entry = recorded.get(image.name)
        if isinstance(entry, dict) and entry.get("sha256") == digests.get(image.name):  # the very library the build named
            image = image.with_functions({n: (int(r[0]), int(r[1])) for n, r in entry.get("functions", {}).items()})
        role = roles.get(image.name, Role(kind="other" if manifests else "unmanaged"))
        allowed = _allowed(role, image.arch)
        toolchain = tuple(Allow(symbol=p, reason=f"guarded by the toolchain: {r}")
                          for p, r in tables(image.arch).guarded.items())
        scan = scan_library(image, allowed, allow + extra_allow + toolchain)
        lib = LibraryAudit(role=role, scan=scan, image=image, allowed=tuple(sorted(allowed, key=tables(image.arch).rank)) if allowed is not None else None)
        if role.kind == "variant" and role.defining and not set(role.defining) & set(scan.by_feature):
            lib.warnings.append(f"variant {role.variant!r} never uses an instruction of its own features "
                                f"({', '.join(role.defining)}): its flags did nothing")
        libraries.append(lib)
    order = {"probe": 0, "variant": 1, "other": 2, "unmanaged": 3}
    libraries.sort(key=lambda lib: (order[lib.role.kind], lib.scan.name))
    return AuditResult(target=str(target), manifest=bool(manifests), libraries=libraries)
