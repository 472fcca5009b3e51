"""PEP 770 SBOM for every wheel: ``<dist-info>/sboms/<name>.cdx.json`` (CycloneDX 1.6).

One component per variant library: its SHA-256, the compiler and version, the
full compile flags of its translation units (from CMake's compile_commands.json;
absolute paths written as ``{project}``, ``{build}``, ``{cpubuild}`` and
``{cache}``), the matrix entry, and the source files it is compiled from (each
a ``file`` component with its SHA-256, named relative to the project);
torch projects add the torch they were built against. Byte-identical on
rebuild: the timestamp is SOURCE_DATE_EPOCH, the serial number a UUID derived
from the content, components and properties sorted.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import uuid
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from .. import __version__
from ..cache import cache_dir
from ..matrix import Matrix
from ..toolchain import wheelzip

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # cpubuild's own files (its CMake package, runtime)
NAMESPACE = uuid.UUID("6f1c2a52-3b0e-5d0c-9a51-7c1f0b8e2d40")  # serial numbers: uuid5(NAMESPACE, content hash)
UNITY_INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)
DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ"}  # per-object outputs, not flags


@dataclass(frozen=True, kw_only=True)
class VariantBuild:
    name: str
    library: str  # path inside the wheel
    data: bytes
    matrix_entry: dict[str, Any]
    flags: tuple[str, ...]  # every flag of its compile commands (empty: not known)
    sources: tuple[str, ...]  # relative to the project (or build/...)


@dataclass(frozen=True, kw_only=True)
class SbomInput:
    dist: str
    version: str
    arch: str
    compiler: str  # e.g. "/usr/bin/g++ (gcc 12.2.0, x86_64-linux-gnu)"
    source_date_epoch: int
    variants: tuple[VariantBuild, ...]
    source_hashes: Mapping[str, str]  # relative path -> sha256 hex
    torch: str | None = None


def sbom_path(dist_info: str, dist: str) -> str:
    return f"{dist_info}/sboms/{dist}.cdx.json"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def relative(text: str, roots: Mapping[str, str]) -> str:
    """Absolute paths in a flag or path, mapped to stable names (longest root first)."""
    for root, name in sorted(roots.items(), key=lambda item: -len(item[0])):
        text = text.replace(root.rstrip("/") + "/", name + "/").replace(root.rstrip("/"), name)
    return text


def compile_flags(entry: Mapping[str, Any], roots: Mapping[str, str]) -> list[str]:
    """The flags of one compile_commands.json entry: no compiler, source, output or depfile."""
    argv = list(entry["arguments"]) if "arguments" in entry else shlex.split(str(entry["command"]))
    source = str(entry.get("file", ""))
    flags: list[str] = []
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
            continue
        if arg in DROP_WITH_VALUE:
            skip = True
            continue
        if arg in ("-c", "-MD", "-MMD", source) or arg.endswith(".o"):
            continue
        flags.append(relative(arg, roots))
    return flags


def variant_compiles(build_dir: Path, project: Path, target: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(flags in first-seen order, sources) of CMake target `target` and its shared objects target."""
    path = build_dir / "compile_commands.json"
    if not path.is_file():
        return (), ()
    roots = path_roots(project, build_dir)
    common = target.rsplit("_", 1)[0] + "_common"  # <name>_common: objects every variant links
    flags: dict[str, None] = {}
    sources: set[str] = set()
    for entry in json.loads(path.read_text(encoding="utf-8")):
        output = str(entry.get("output", "")) or " ".join(entry.get("arguments", [])) or str(entry.get("command", ""))
        if f"CMakeFiles/{target}.dir/" not in output and f"CMakeFiles/{common}.dir/" not in output:
            continue
        flags.update(dict.fromkeys(compile_flags(entry, roots)))
        file = Path(entry["file"])
        file = file if file.is_absolute() else Path(entry["directory"]) / file
        sources.add(relative(str(file.resolve()), roots).removeprefix("{project}/"))
        if "/Unity/unity_" in file.as_posix() and file.is_file():  # CMake unity sources: the files they include
            for included in UNITY_INCLUDE.findall(file.read_text(encoding="utf-8", errors="replace")):
                sources.add(relative(str(Path(included).resolve()), roots).removeprefix("{project}/"))
    return tuple(flags), tuple(sorted(sources))


def path_roots(project: Path, build_dir: Path) -> dict[str, str]:
    """Absolute directories -> the names the SBOM gives them (stable across checkouts and build directories)."""
    return {str(project.resolve()): "{project}", str(build_dir.resolve()): "{build}", str(PACKAGE_DIR): "{cpubuild}",
            str(cache_dir().resolve()): "{cache}"}


def hash_sources(paths: Iterable[str], project: Path, build_dir: Path) -> dict[str, str]:
    """SHA-256 per source; generated files (in the build directory) hashed with their absolute paths mapped."""
    roots = path_roots(project, build_dir)
    hashes: dict[str, str] = {}
    for rel in sorted(set(paths)):
        base, _, tail = rel.partition("/")
        real = (build_dir / tail) if base == "{build}" else (project / rel)
        if not real.is_file():
            continue
        data = real.read_bytes()
        if base == "{build}":
            data = relative(data.decode("utf-8", "surrogateescape"), roots).encode("utf-8", "surrogateescape")
        hashes[rel] = _sha256(data)
    return hashes


def _props(values: Mapping[str, str]) -> list[Property]:
    return [Property(name=f"cpubuild:{key}", value=value) for key, value in sorted(values.items())]


def make_bom(spec: SbomInput) -> bytes:
    """The SBOM's bytes (sorted keys, 1-space indent, trailing newline): a function of `spec` only."""
    purl = PackageURL(type="pypi", name=spec.dist, version=spec.version)
    root = Component(name=spec.dist, version=spec.version, type=ComponentType.LIBRARY, bom_ref=f"pkg:{spec.dist}",
                     purl=purl, properties=_props({"arch": spec.arch}))
    files = {rel: Component(name=rel, type=ComponentType.FILE, bom_ref=f"file:{rel}",
                            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=digest)])
             for rel, digest in sorted(spec.source_hashes.items())}
    components: list[Component] = list(files.values())
    torch = None
    if spec.torch:
        torch = Component(name="torch", version=spec.torch, type=ComponentType.FRAMEWORK, bom_ref="pkg:torch",
                          purl=PackageURL(type="pypi", name="torch", version=spec.torch))
        components.append(torch)
    bom = Bom()
    for v in spec.variants:
        lib = Component(
            name=v.library, version=spec.version, type=ComponentType.LIBRARY, bom_ref=f"variant:{v.name}",
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=_sha256(v.data))],
            description=str(v.matrix_entry.get("description") or f"variant {v.name}"),
            properties=_props({
                "variant": v.name,
                "arch": spec.arch,
                "compiler": spec.compiler,
                "flags": " ".join(shlex.quote(f) for f in v.flags),
                "matrix-entry": json.dumps(v.matrix_entry, sort_keys=True),
                **({"torch": spec.torch} if spec.torch else {}),
            }),
        )
        components.append(lib)
        bom.register_dependency(root, [lib])
        bom.register_dependency(lib, [files[s] for s in v.sources if s in files] + ([torch] if torch else []))
    bom.components.update(components)
    bom.metadata = BomMetaData(
        component=root,
        timestamp=datetime.fromtimestamp(spec.source_date_epoch, tz=timezone.utc),
        tools=ToolRepository(components=[Component(name="cpubuild", version=__version__, type=ComponentType.APPLICATION)]),
    )
    bom.serial_number = uuid.UUID(int=0)  # placeholder: the real one is derived from everything else
    body = _canonical(bom)
    bom.serial_number = uuid.uuid5(NAMESPACE, _sha256(body))
    return _canonical(bom)


def _canonical(bom: Bom) -> bytes:
    data = json.loads(JsonV1Dot6(bom).output_as_string())
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def add_to_wheel(wheel: Path, *, project: Path, build_dir: Path, arch: str, compiler: str, source_date_epoch: int,
                 matrix_entries: Mapping[str, dict[str, Any]], torch: str | None) -> str:
    """Writes the SBOM into `wheel` (RECORD updated; `normalize` re-zips it afterwards); returns its path inside."""
    contents = wheelzip.inspect(wheel)
    with zipfile.ZipFile(wheel) as z:
        entries = [(i.filename, (i.external_attr >> 16) & 0o777, z.read(i)) for i in z.infolist() if not i.is_dir()]
    data = {name: blob for name, _, blob in entries}
    variants: list[VariantBuild] = []
    all_sources: list[str] = []
    for name, lib in sorted(contents.variant_libraries.items()):
        target = PurePosixPath(lib).name.removeprefix("_").rsplit(".", 1)[0].split(".")[0]
        flags, sources = variant_compiles(build_dir, project, target)
        all_sources += sources
        variants.append(VariantBuild(name=name, library=lib, data=data[lib], matrix_entry=matrix_entries.get(name, {}),
                                     flags=flags, sources=sources))
    dist_info = next(n.split("/", 1)[0] for n in data if n.split("/", 1)[0].endswith(".dist-info"))
    spec = SbomInput(dist=contents.name, version=contents.version, arch=arch, compiler=compiler,
                     source_date_epoch=source_date_epoch, variants=tuple(variants),
                     source_hashes=hash_sources(all_sources, project, build_dir), torch=torch)
    path = sbom_path(dist_info, contents.name)
    record = f"{dist_info}/RECORD"
    kept = [e for e in entries if e[0] not in (path, record)] + [(path, 0o644, make_bom(spec))]
    kept.append((record, 0o644, wheelzip.record_file(((n, b) for n, _, b in kept), record)))
    wheelzip.write_wheel(wheel, kept, source_date_epoch)
    return path


def matrix_entries(matrix: Matrix, arch: str) -> dict[str, dict[str, Any]]:
    """Each variant's isa_matrix.toml entry as the matrix resolved it (flags per compiler family)."""
    return {v.name: {"name": v.name, "arch": v.arch, "priority": v.priority, "requires": list(v.requires),
                     "flags": {family: list(flags) for family, flags in sorted(v.flags.items())},
                     "description": v.description}
            for v in matrix.variants_for(arch)}
