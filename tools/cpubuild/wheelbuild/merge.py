"""`cpubuild merge`: partial wheels built on several runners -> the one wheel a
single `cpubuild wheel` with all their variants would have made, byte for byte.

A partial is an ordinary `cpubuild wheel --partial --isa X` wheel: the
baseline, the probe, the runtime and its own variants, repaired and labelled
with its ISA set (an arch with a floor instead of a baseline: one partial holds
the floor). Variant libraries do not depend on which other variants share the build,
so the merge only has to redo what does: the ISA-set label (file name,
.dist-info, METADATA, and text files holding the version such as a generated
``_version.py``), the manifest's ``built`` flags, the SBOM (rebuilt from the
partials' SBOMs through the same function the build uses), the audit record,
RECORD, and the platform tag (the highest manylinux policy of the partials:
what one repair of every library gives). Anything else that differs between
partials means they are not parts of one build, and the merge refuses, naming
the field. Nothing is written unless the merged wheel is complete.
"""

from __future__ import annotations

import json
import re
import shlex
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.version import InvalidVersion, Version

from .. import __version__
from ..audit.check import RECORD_NAME
from ..errors import CpubuildError, UsageError
from ..toolchain import wheelzip
from . import sbom
from .plan import CPU_LABEL, label_extras

MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_")
LIBRARY_SUFFIXES = (".so", ".dylib", ".dll", ".pyd")


class MergeError(UsageError):
    """Partial wheels that are not parts of one build (or not partial wheels at all)."""


@dataclass(frozen=True, kw_only=True)
class Partial:
    path: Path
    contents: wheelzip.WheelContents
    members: dict[str, tuple[int, bytes]]  # name -> (mode, data), .dist-info excluded
    dist_info: dict[str, bytes]  # path below the .dist-info directory -> data
    manifest: dict[str, Any]
    manifest_path: str
    bom: dict[str, Any]
    epoch: int

    @property
    def built(self) -> tuple[str, ...]:
        return self.contents.built_variants

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(v["name"] for v in self.manifest["variants"])  # baseline first (matrix order)

    @property
    def label_extras(self) -> tuple[str, ...]:
        return label_extras(self.order, self.built)

    @property
    def source_version(self) -> str:
        """The version without this partial's ISA-set extras (kept: `cpu` and a torch's segment)."""
        local = self.contents.version.split("+", 1)[1].split(".") if "+" in self.contents.version else []
        extras = list(self.label_extras)
        if local[len(local) - len(extras):] != extras or CPU_LABEL not in local[: len(local) - len(extras)]:
            raise MergeError(f"{self.path.name}: its version {self.contents.version!r} does not end in the ISA-set "
                             f"label of its variants ({'.'.join([CPU_LABEL, *extras])}): not a cpubuild wheel")
        return self.contents.version[: len(self.contents.version) - len(".".join(extras)) - (1 if extras else 0)]


def _read(path: Path) -> Partial:
    try:
        contents = wheelzip.inspect(path)
        with zipfile.ZipFile(path) as z:
            entries = {i.filename: ((i.external_attr >> 16) & 0o777, z.read(i)) for i in z.infolist() if not i.is_dir()}
    except (OSError, zipfile.BadZipFile, ValueError, KeyError) as exc:
        raise MergeError(f"{path}: not a readable wheel ({exc})") from None
    if contents.manifest is None or contents.manifest_dir is None:
        raise MergeError(f"{path.name}: holds no {wheelzip.MANIFEST_NAME}: not a cpubuild wheel")
    problems = wheelzip.record_problems(path)
    if problems:
        raise MergeError(f"{path.name}: RECORD does not match the archive ({problems[0]})")
    tops = {n.split("/", 1)[0] for n in entries}
    dist_info_dir = next((t for t in sorted(tops) if t.endswith(".dist-info")), "")
    dist_info = {n[len(dist_info_dir) + 1:]: d for n, (_m, d) in entries.items() if n.startswith(dist_info_dir + "/")}
    members = {n: e for n, e in entries.items() if not n.startswith(dist_info_dir + "/")}
    bom_name = bom_member(contents.name)
    if bom_name not in dist_info:
        raise MergeError(f"{path.name}: holds no SBOM ({dist_info_dir}/{bom_name}): not a cpubuild wheel, or an older one's")
    bom = json.loads(dist_info[bom_name])
    epoch = int(datetime.fromisoformat(bom["metadata"]["timestamp"]).timestamp())
    manifest_path = str(PurePosixPath(contents.manifest_dir) / wheelzip.MANIFEST_NAME)
    return Partial(path=path, contents=contents, members=members, dist_info=dist_info, manifest=contents.manifest,
                   manifest_path=manifest_path, bom=bom, epoch=epoch)


def bom_member(dist: str) -> str:
    """The SBOM's path below .dist-info/."""
    return sbom.sbom_path("", dist).lstrip("/")


def _metadata_sans_version(p: Partial) -> dict[str, bytes]:
    """The .dist-info files every partial must share (the version, RECORD, WHEEL's tags and the SBOM aside)."""
    skip = {"RECORD", "WHEEL", bom_member(p.contents.name)}
    info = {n: d for n, d in p.dist_info.items() if n not in skip}
    if "METADATA" in info:
        info["METADATA"] = wheelzip.metadata_with_version(info["METADATA"].decode("utf-8", "replace"), "").encode()
    return info


def _same(partials: Sequence[Partial], what: str, value: Any) -> None:
    """Every partial gives `value(p)` the same answer, else a refusal naming the field and two wheels."""
    first = value(partials[0])
    for p in partials[1:]:
        if value(p) != first:
            raise MergeError(f"{partials[0].path.name} and {p.path.name} differ in {what} "
                             f"({_short(first)} vs {_short(value(p))}): not parts of one build")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _policy(platform: str) -> tuple[int, int]:
    match = MANYLINUX.match(platform)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _variant_components(bom: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["bom-ref"].removeprefix("variant:"): c for c in bom.get("components", [])
            if str(c.get("bom-ref", "")).startswith("variant:")}


def _props(component: dict[str, Any]) -> dict[str, str]:
    return {p["name"].removeprefix("cpubuild:"): p["value"] for p in component.get("properties", [])}


def _recipe(component: dict[str, Any]) -> dict[str, Any]:
    """An SBOM variant component without what follows from the bytes and the label: how it was built."""
    return {k: v for k, v in component.items() if k not in ("version", "hashes")}


def _manifest_without_built(manifest: dict[str, Any]) -> dict[str, Any]:
    variants = [{k: v for k, v in entry.items() if k not in ("built", "optional_flags")} for entry in manifest["variants"]]
    return {**manifest, "variants": variants}


def _relabel_text(name: str, data: bytes, old: str, new: str) -> bytes:
    """A member with the partial's version in it: text gets the merged one, a library is refused."""
    needle = old.encode()
    if needle not in data:
        return data
    if name.endswith(LIBRARY_SUFFIXES) or b"\0" in data:
        raise MergeError(f"{name} embeds the version {old!r}: a library built with its wheel's version cannot be "
                         "merged (keep the version out of compiled code, e.g. in a generated Python file)")
    return data.replace(needle, new.encode())


def merged_sbom(partials: Sequence[Partial], *, version: str, variants: dict[str, Partial]) -> bytes:
    """The SBOM a single build of every variant writes: sbom.make_bom over the union of the partials' inputs."""
    sources: dict[str, str] = {}
    for p in partials:
        for c in p.bom.get("components", []):
            if c.get("type") == "file":
                digest = c["hashes"][0]["content"]
                if sources.setdefault(c["name"], digest) != digest:
                    raise MergeError(f"{c['name']} has different contents in {p.path.name} than in another partial: "
                                     "not built from one commit")
    builds: list[sbom.VariantBuild] = []
    compiler = torch = None
    for name, p in sorted(variants.items()):
        component = _variant_components(p.bom)[name]
        props = _props(component)
        compiler, torch = props["compiler"], props.get("torch")
        depends: list[str] = next((d.get("dependsOn", []) for d in p.bom.get("dependencies", []) if d["ref"] == f"variant:{name}"), [])
        library = component["name"]
        builds.append(sbom.VariantBuild(
            name=name, library=library, data=p.members[library][1], matrix_entry=json.loads(props["matrix-entry"]),
            flags=tuple(shlex.split(props["flags"])),
            sources=tuple(sorted(r.removeprefix("file:") for r in depends if r.startswith("file:"))),
        ))
    root = partials[0].bom["metadata"]["component"]
    spec = sbom.SbomInput(dist=root["name"], version=version, arch=_props(root)["arch"], compiler=str(compiler),
                          source_date_epoch=partials[0].epoch, variants=tuple(builds), source_hashes=sources, torch=torch)
    return sbom.make_bom(spec)


def _audit_record(partials: Sequence[Partial], name: str) -> bytes | None:
    libraries: dict[str, Any] = {}
    for p in partials:
        if name in p.members:
            libraries.update(json.loads(p.members[name][1])["libraries"])
    if not libraries:
        return None
    return (json.dumps({"schema": 1, "libraries": libraries}, indent=1, sort_keys=True) + "\n").encode()


def check_partials(partials: Sequence[Partial]) -> dict[str, Partial]:
    """Refuses partials that are not parts of one build; returns variant -> the partial holding it."""
    if len(partials) < 2:
        raise MergeError("merge needs at least two partial wheels")
    names = [p.path.name for p in partials]
    if len(set(names)) != len(names):
        raise MergeError(f"{next(n for n in names if names.count(n) > 1)} is given twice")
    for p in partials:
        if p.manifest.get("cpubuild") != __version__:
            raise MergeError(f"{p.path.name} was built by cpubuild {p.manifest.get('cpubuild')}; this is cpubuild "
                             f"{__version__} (merge with the cpubuild that built the partials)")
        baseline = p.order[0]
        if "floor" not in p.manifest and (baseline not in p.built or baseline not in p.contents.variant_libraries):
            raise MergeError(f"{p.path.name} lacks the baseline variant {baseline!r}: not a complete partial wheel")
    _same(partials, "project", lambda p: p.contents.name)
    _same(partials, "source version (commit)", lambda p: p.source_version)
    _same(partials, "SOURCE_DATE_EPOCH", lambda p: p.epoch)
    _same(partials, "manifest", lambda p: _manifest_without_built(p.manifest))
    _same(partials, "Python/ABI tags", lambda p: sorted({t.rsplit("-", 1)[0] for t in p.contents.tags}))
    _same(partials, "compiler", lambda p: sorted({_props(c).get("compiler", "") for c in _variant_components(p.bom).values()}))
    _same(partials, ".dist-info files", lambda p: {n: d.decode("utf-8", "replace") for n, d in _metadata_sans_version(p).items()})
    if not all(MANYLINUX.match(t) for p in partials for t in p.contents.platforms):
        _same(partials, "platform tags", lambda p: p.contents.platforms)  # only manylinux policies are ordered
    holder: dict[str, Partial] = {}
    for p in partials:
        components = _variant_components(p.bom)
        for name in p.built:
            first = holder.setdefault(name, p)
            if first is p:
                continue
            lib = p.contents.variant_libraries[name]
            if _recipe(_variant_components(first.bom)[name]) != _recipe(components[name]):
                raise MergeError(f"variant {name!r} was built with a different compiler, flags or sources for "
                                 f"{first.path.name} than for {p.path.name} (their SBOMs): not parts of one build")
            if first.members.get(lib) != p.members.get(lib):
                raise MergeError(f"variant {name!r} has different bytes in {first.path.name} and {p.path.name} "
                                 f"({lib}) from the same compiler, flags and sources: is the build reproducible?")
    floor = partials[0].manifest.get("floor")
    if floor is not None and floor not in holder:  # a floor is built by one partial (cpubuild wheel --partial)
        raise MergeError(f"no partial holds the floor variant {floor!r} (the arch's lowest): build it into one of them "
                         f"(cpubuild wheel --partial --isa {floor},...)")
    return holder


@dataclass(frozen=True, kw_only=True)
class Merged:
    wheel: Path
    arch: str
    variants: tuple[str, ...]
    source_date_epoch: int


def merge(paths: Sequence[Path], out_dir: Path) -> Merged:
    """Writes the merged wheel into `out_dir` (atomically)."""
    partials = [_read(Path(p)) for p in paths]
    holder = check_partials(partials)
    first = partials[0]
    order = first.order
    built = [n for n in order if n in holder]
    extras = label_extras(order, built)
    version = first.source_version + "".join(f".{segment}" for segment in extras)
    try:
        Version(version)
    except InvalidVersion:
        raise MergeError(f"the merged version {version!r} is not a valid version") from None
    target = max(partials, key=lambda p: max(_policy(t) for t in p.contents.platforms))

    members: dict[str, tuple[int, bytes]] = {}
    audit_record = str(PurePosixPath(first.manifest_path).with_name(RECORD_NAME))
    for p in partials:
        for name, (mode, data) in p.members.items():
            if name in (p.manifest_path, audit_record):
                continue
            data = _relabel_text(name, data, p.contents.version, version)
            if name in members and members[name][1] != data:
                raise MergeError(f"{name} differs between {first.path.name} and {p.path.name}: not parts of one build")
            members[name] = (mode, data)
    def entry(variant: dict[str, Any]) -> dict[str, Any]:
        """A variant's manifest entry from the partial that built it (built flag, optional-flag results)."""
        source = holder.get(variant["name"])
        return variant if source is None else next(e for e in source.manifest["variants"] if e["name"] == variant["name"])

    manifest = {**first.manifest, "variants": [entry(v) for v in first.manifest["variants"]]}
    members[first.manifest_path] = (0o644, (json.dumps(manifest, indent=1) + "\n").encode())
    record_data = _audit_record(partials, audit_record)
    if record_data is not None:
        members[audit_record] = (0o644, record_data)

    dist = first.path.name.split("-", 1)[0]
    dist_info = f"{dist}-{version}.dist-info"
    info = dict(target.dist_info)
    info["METADATA"] = wheelzip.metadata_with_version(info["METADATA"].decode("utf-8"), version).encode("utf-8")
    info[bom_member(first.contents.name)] = merged_sbom(partials, version=version, variants=holder)
    info.pop("RECORD", None)
    entries = [(n, m, d) for n, (m, d) in members.items()] + [(f"{dist_info}/{n}", 0o644, d) for n, d in info.items()]
    record = f"{dist_info}/RECORD"
    entries.append((record, 0o644, wheelzip.record_file(((n, d) for n, _m, d in entries), record)))
    tag = target.path.name[: -len(".whl")].split("-", 2)[2]
    name = f"{dist}-{version}-{tag}.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    if any((out_dir / name).resolve() == p.path.resolve() for p in partials):
        raise MergeError(f"{out_dir / name} is one of the partials: choose another --out")
    wheelzip.write_wheel(out_dir / name, entries, first.epoch)
    return Merged(wheel=out_dir / name, arch=str(first.manifest["arch"]), variants=tuple(built), source_date_epoch=first.epoch)


def merge_or_fail(paths: Iterable[Path], out_dir: Path) -> Merged:
    """merge(), with a file system failure as one line (nothing is left in out_dir: write_wheel is atomic)."""
    try:
        return merge(list(paths), out_dir)
    except CpubuildError:
        raise
    except OSError as exc:
        raise MergeError(f"{exc.filename or out_dir}: {exc.strerror or exc}") from None
