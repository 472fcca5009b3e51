"""PEP 825 variant wheels made from the fat wheel (`cpubuild wheel --variant-wheels`).

The fat wheel (every variant, no label) stays what pip and uv without preview
install. Next to it: one variant wheel per install-time CPU level the built
variants map to (installlevels.py), holding the baseline plus the variants of
that level and below, and a `null` variant holding everything (what a
variant-aware installer takes when it detects no level). Each is the fat
wheel's repaired archive with the other variants' libraries left out, their
manifest entries marked unbuilt, and `.dist-info/variant.json` added; then
re-zipped deterministically. The wheelhouse also gets the
`{name}-{version}-variants.json` index file (merged with one already there).

variant.json follows PEP 825's schema plus the `providers` table uv 0.13 needs
to act on a namespace (it names the installer's built-in provider).
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import UsageError
from ..installlevels import LevelScheme, install_levels
from ..matrix import Matrix
from ..toolchain import wheelzip
from ..variantsjson import NULL_LABEL, VARIANT_JSON, document, dump, index_file_name, merge_variant_documents


@dataclass(frozen=True, kw_only=True)
class LevelWheel:
    label: str
    level: str | None  # None: the null variant
    variants: tuple[str, ...]  # the variants whose libraries it holds


def plan_level_wheels(matrix: Matrix, arch: str, built: tuple[str, ...]) -> tuple[LevelScheme, list[LevelWheel]]:
    """The variant wheels of a build holding `built` variants (baseline first)."""
    scheme = install_levels().get(arch)
    if scheme is None:
        raise UsageError(f"--variant-wheels: installers detect no CPU levels for {arch} "
                         f"(levels exist for {', '.join(install_levels())}); the fat wheel serves {arch}")
    placed = {}
    for variant in matrix.variants_for(arch):
        if variant.name in built:
            placed[variant.name] = variant.install_level or scheme.place(variant.requires)
    baseline = matrix.baseline(arch).name
    wheels = []
    for value in sorted(set(placed.values()), key=scheme.rank):
        members = tuple(v for v in built if v == baseline or scheme.rank(placed[v]) <= scheme.rank(value))
        wheels.append(LevelWheel(label=scheme.label(value), level=value, variants=members))
    wheels.append(LevelWheel(label=NULL_LABEL, level=None, variants=built))
    return scheme, wheels


def variant_document(scheme: LevelScheme, labels: dict[str, str | None]) -> dict[str, Any]:
    """A variant.json (one label) or the index's variants.json (every label): label -> level or None (null)."""
    return document(namespace=scheme.namespace, feature=scheme.feature, provider=scheme.provider, labels=labels)


def _derive(fat: Path, fat_entries: list[tuple[str, int, bytes]], contents: wheelzip.WheelContents, plan: LevelWheel,
            document: dict[str, Any], epoch: int) -> Path:
    """The level wheel `plan` from the fat wheel's entries (name, mode, data), written deterministically."""
    assert contents.manifest is not None and contents.manifest_dir is not None
    dropped = {lib for name, lib in contents.variant_libraries.items() if name not in plan.variants}
    manifest = json.loads(json.dumps(contents.manifest))
    for entry in manifest["variants"]:
        if entry["name"] not in plan.variants:
            entry["built"] = False
    manifest["install_variant"] = {"label": plan.label, "properties": document["variants"][plan.label]}
    manifest_name = str(PurePosixPath(contents.manifest_dir) / wheelzip.MANIFEST_NAME)
    dist_info = next(name.split("/")[0] for name, _, _ in fat_entries if name.endswith(".dist-info/RECORD"))
    record = f"{dist_info}/RECORD"
    entries = [(name, mode, (json.dumps(manifest, indent=1) + "\n").encode() if name == manifest_name else data)
               for name, mode, data in fat_entries if name not in dropped and name != record]
    entries.append((f"{dist_info}/{VARIANT_JSON}", 0o644, dump(document)))
    entries.append((record, 0o644, wheelzip.record_file(((name, data) for name, _, data in entries), record)))
    target = fat.parent / f"{fat.name[: -len('.whl')]}-{plan.label}.whl"
    wheelzip.write_wheel(target, entries, epoch)
    return target


def make_variant_wheels(fat: Path, matrix: Matrix, arch: str, epoch: int) -> dict[str, Any]:
    """The variant wheels of a built fat wheel, next to it, and the wheelhouse's variants.json."""
    contents = wheelzip.inspect(fat)
    if contents.manifest is None or contents.manifest_dir is None:
        raise UsageError(f"{fat.name} has no cpubuild manifest")
    scheme, plans = plan_level_wheels(matrix, arch, contents.built_variants)
    with zipfile.ZipFile(fat) as archive:  # read once, for every level wheel
        fat_entries = [(i.filename, (i.external_attr >> 16) & 0o777, archive.read(i)) for i in archive.infolist() if not i.is_dir()]
    wheels = []
    for plan in plans:
        document = variant_document(scheme, {plan.label: plan.level})
        path = _derive(fat, fat_entries, contents, plan, document, epoch)
        wheels.append({"label": plan.label, "level": plan.level, "variants": list(plan.variants), "path": str(path),
                       "filename": path.name, "sha256": wheelzip.sha256_file(path), "size": path.stat().st_size})
    index_path = fat.parent / index_file_name(fat.name)
    new = variant_document(scheme, {p.label: p.level for p in plans})
    old = json.loads(index_path.read_text(encoding="utf-8")) if index_path.is_file() else None
    merged = merge_variant_documents(old, new, where=str(index_path))
    tmp = index_path.with_name(f".{index_path.name}.tmp{os.getpid()}")
    tmp.write_bytes(dump(merged))
    os.replace(tmp, index_path)
    return {"namespace": scheme.namespace, "wheels": wheels, "variants_json": str(index_path)}
