"""Typed loader and validator of ``isa_matrix.toml``, the single source of truth.

Standard library only, and runnable as a script: CMake calls it inside an
isolated scikit-build-core build to get the variants and flags of one arch
(``cmake`` sub-command) and to write the runtime manifest the dispatcher reads
(``manifest`` sub-command). Nothing else in the repository lists ISAs or flags.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

COMPILER_FAMILIES = ("gcc", "clang", "apple-clang")
OPERATING_SYSTEMS = ("linux", "darwin")
CPUID_REGISTERS = ("eax", "ebx", "ecx", "edx")
PERMISSIONS = ("xtiledata",)
# -march=native and friends tune a wheel to the build machine (vLLM's s390x
# build does this): such a wheel SIGILLs elsewhere.
NATIVE_FLAG = re.compile(r"^-m(arch|cpu|tune)=native(\+.*)?$")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
DEFAULT_MATRIX = Path(__file__).resolve().parents[2] / "isa_matrix.toml"


class MatrixError(ValueError):
    """A problem in the matrix file, located by file, item and field."""

    def __init__(self, path: Path | str, where: str, problem: str) -> None:
        self.path = str(path)
        self.where = where
        self.problem = problem
        super().__init__(f"{self.path}: {where}: {problem}")


@dataclass(frozen=True, kw_only=True)
class Arch:
    name: str
    compilers: tuple[str, ...]
    os: tuple[str, ...]
    triplet: str
    manylinux: str
    docker_platform: str
    qemu: str
    debian_arch: str
    macos: str | None = None


@dataclass(frozen=True, kw_only=True)
class Feature:
    """How the probe detects one CPU feature (see the matrix's comments)."""

    name: str
    arch: str
    cpuid: tuple[int, int, str, int] | None = None
    xcr0: int = 0
    permission: str | None = None
    hwcap: int | None = None
    hwcap2: int | None = None
    sysctl: str | None = None

    def to_json(self) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if self.cpuid is not None:
            spec["cpuid"] = list(self.cpuid)
        for key in ("xcr0", "permission", "hwcap", "hwcap2", "sysctl"):
            value = getattr(self, key)
            if value not in (None, 0):
                spec[key] = value
        return spec


@dataclass(frozen=True, kw_only=True)
class Variant:
    name: str
    arch: str
    priority: int
    requires: tuple[str, ...]
    description: str
    compilers: tuple[str, ...]
    flags: dict[str, tuple[str, ...]] = field(hash=False, compare=True)

    @property
    def is_baseline(self) -> bool:
        return not self.requires

    def flags_for(self, family: str) -> tuple[str, ...]:
        if family not in self.flags:
            raise KeyError(f"variant {self.name!r} ({self.arch}) has no flags for {family}")
        return self.flags[family]


@dataclass(frozen=True, kw_only=True)
class Matrix:
    path: str
    arches: dict[str, Arch] = field(hash=False)
    features: dict[str, dict[str, Feature]] = field(hash=False)
    variants: tuple[Variant, ...]

    def variants_for(self, arch: str) -> list[Variant]:
        """Variants of one arch, lowest priority (the baseline) first."""
        return sorted((v for v in self.variants if v.arch == arch), key=lambda v: v.priority)

    def variant(self, arch: str, name: str) -> Variant:
        for v in self.variants:
            if v.arch == arch and v.name == name:
                return v
        known = ", ".join(v.name for v in self.variants_for(arch))
        raise KeyError(f"no variant {name!r} for {arch} (known: {known})")

    def baseline(self, arch: str) -> Variant:
        return next(v for v in self.variants_for(arch) if v.is_baseline)

    def manifest(self, arch: str, built: list[str], library_pattern: str) -> dict[str, Any]:
        """The runtime manifest: what the dispatcher needs and nothing else."""
        # Every variant of the arch is listed, built or not, so the dispatcher
        # can tell "not built into this package" from "not a variant at all".
        variants = [
            {
                "name": v.name,
                "priority": v.priority,
                "requires": list(v.requires),
                "description": v.description,
                "built": v.name in built,
                "library": library_pattern.format(variant=v.name),
            }
            for v in self.variants_for(arch)
        ]
        return {
            "schema": 1,
            "arch": arch,
            "features": {n: f.to_json() for n, f in self.features.get(arch, {}).items()},
            "variants": variants,
        }


# ------------------------------------------------------------------ parsing


class _Reader:
    """Checks one TOML table, raising MatrixError that names where it is."""

    def __init__(self, path: Path, where: str, table: Any) -> None:
        self.path = path
        self.where = where
        if not isinstance(table, dict):
            self.fail(None, f"must be a table, got {type(table).__name__}")
        self.table: dict[str, Any] = table

    def fail(self, key: str | None, problem: str) -> None:
        where = self.where if key is None else f"{self.where}, field {key!r}"
        raise MatrixError(self.path, where, problem)

    def only(self, allowed: tuple[str, ...]) -> None:
        for key in self.table:
            if key not in allowed:
                self.fail(key, f"unknown key (allowed: {', '.join(allowed)})")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.table:
            if default is ...:
                self.fail(key, "is required")
            return default
        value = self.table[key]
        # bool is an int subclass: a priority of `true` is a mistake
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            self.fail(key, f"must be {_kind_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            self.fail(key, f"must be {_kind_name(kind)}, got {type(value).__name__}")
        return value

    def strings(self, key: str, default: Any = ..., *, choices: tuple[str, ...] | None = None) -> tuple[str, ...]:
        value = self.get(key, list, default)
        for item in value:
            if not isinstance(item, str):
                self.fail(key, f"must be a list of strings, has {item!r}")
            if choices is not None and item not in choices:
                self.fail(key, f"unknown value {item!r} (allowed: {', '.join(choices)})")
        if len(set(value)) != len(value):
            self.fail(key, "has duplicate entries")
        return tuple(value)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", list: "a list", dict: "a table", bool: "a boolean"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _parse_arch(path: Path, name: str, table: Any) -> Arch:
    r = _Reader(path, f"arch {name!r}", table)
    r.only(("compilers", "os", "triplet", "manylinux", "macos", "docker_platform", "qemu", "debian_arch"))
    compilers = r.strings("compilers", choices=COMPILER_FAMILIES)
    os_list = r.strings("os", choices=OPERATING_SYSTEMS)
    if not compilers:
        r.fail("compilers", "must name at least one compiler family")
    macos = r.get("macos", str, None)
    if "darwin" in os_list and macos is None:
        r.fail("macos", "is required when os includes 'darwin'")
    return Arch(
        name=name,
        compilers=compilers,
        os=os_list,
        triplet=r.get("triplet", str),
        manylinux=r.get("manylinux", str),
        docker_platform=r.get("docker_platform", str),
        qemu=r.get("qemu", str),
        debian_arch=r.get("debian_arch", str),
        macos=macos,
    )


def _parse_feature(path: Path, arch: str, os_list: tuple[str, ...], name: str, table: Any) -> Feature:
    r = _Reader(path, f"feature {name!r} ({arch})", table)
    r.only(("cpuid", "xcr0", "permission", "hwcap", "hwcap2", "sysctl"))
    if not NAME_PATTERN.match(name):
        r.fail(None, "feature names are lower case letters, digits and '_'")
    cpuid = None
    if "cpuid" in r.table:
        raw = r.get("cpuid", list)
        ok = (
            len(raw) == 4
            and all(isinstance(x, int) and not isinstance(x, bool) for x in (raw[0], raw[1], raw[3]))
            and raw[2] in CPUID_REGISTERS
            and 0 <= raw[3] < 32
        )
        if not ok:
            r.fail("cpuid", f"must be [leaf, subleaf, register ({'/'.join(CPUID_REGISTERS)}), bit 0-31], got {raw!r}")
        if not (0 <= raw[0] <= 0xFFFFFFFF and 0 <= raw[1] <= 0xFFFFFFFF):
            r.fail("cpuid", f"leaf and subleaf must be 32-bit unsigned numbers, got {raw[0]!r}, {raw[1]!r}")
        cpuid = (raw[0], raw[1], raw[2], raw[3])
    x86_only = ("cpuid", "xcr0", "permission")
    other_only = ("hwcap", "hwcap2", "sysctl")
    for key in other_only if arch == "x86_64" else x86_only:
        if key in r.table:
            r.fail(key, f"does not apply to {arch} features (x86_64 uses {', '.join(x86_only)}; others {', '.join(other_only)})")
    for key in ("hwcap", "hwcap2"):
        if key in r.table and not 0 <= r.get(key, int) < 64:
            r.fail(key, f"must be a bit number 0-63, got {r.table[key]}")
    if "xcr0" in r.table and not 0 < r.get("xcr0", int) < 2**64:
        r.fail("xcr0", f"must be a non-zero 64-bit mask of XCR0 state bits, got {r.table['xcr0']}")
    permission = r.get("permission", str, None)
    if permission is not None and permission not in PERMISSIONS:
        r.fail("permission", f"unknown permission {permission!r} (allowed: {', '.join(PERMISSIONS)})")
    sysctl = r.get("sysctl", str, None)
    if sysctl is not None and "darwin" not in os_list:
        r.fail("sysctl", f"arch {arch} does not list 'darwin' in its os, so a sysctl is never read")
    feature = Feature(
        name=name,
        arch=arch,
        cpuid=cpuid,
        xcr0=r.get("xcr0", int, 0),
        permission=permission,
        hwcap=r.get("hwcap", int, None),
        hwcap2=r.get("hwcap2", int, None),
        sysctl=sysctl,
    )
    if arch == "x86_64" and cpuid is None:
        r.fail("cpuid", "is required for x86_64 features")
    if arch != "x86_64" and cpuid is not None:
        r.fail("cpuid", f"is for x86_64 only, not {arch}")
    if arch != "x86_64" and feature.hwcap is None and feature.hwcap2 is None and feature.sysctl is None:
        r.fail(None, "needs hwcap, hwcap2 or sysctl to be detectable")
    return feature


def _parse_variant(path: Path, index: int, table: Any, arches: dict[str, Arch], features: dict[str, dict[str, Feature]]) -> Variant:
    label = table.get("name", f"#{index + 1}") if isinstance(table, dict) else f"#{index + 1}"
    r = _Reader(path, f"variant {label!r}", table)
    r.only(("name", "arch", "priority", "requires", "description", "compilers", "flags"))
    name = r.get("name", str)
    if not NAME_PATTERN.match(name):
        r.fail("name", f"{name!r} must be lower case letters, digits and '_' (it is part of a file name)")
    arch_name = r.get("arch", str)
    if arch_name not in arches:
        r.fail("arch", f"unknown arch {arch_name!r} (declared: {', '.join(arches)})")
    r.where = f"variant {name!r} ({arch_name})"
    arch = arches[arch_name]
    priority = r.get("priority", int)
    known = features.get(arch_name, {})
    requires = r.strings("requires")
    for feat in requires:
        if feat not in known:
            r.fail("requires", f"unknown feature {feat!r} for {arch_name} (known: {', '.join(known)})")
    compilers = r.strings("compilers", list(arch.compilers), choices=COMPILER_FAMILIES)
    for family in compilers:
        if family not in arch.compilers:
            r.fail("compilers", f"{family!r} is not a compiler family of arch {arch_name}")
    flags_table = r.get("flags", dict)
    flags: dict[str, tuple[str, ...]] = {}
    for family, value in flags_table.items():
        if family not in COMPILER_FAMILIES:
            r.fail("flags", f"unknown compiler family {family!r} (allowed: {', '.join(COMPILER_FAMILIES)})")
        if family not in compilers:
            r.fail("flags", f"gives flags for {family!r}, which the variant does not claim (compilers: {', '.join(compilers)})")
        if not isinstance(value, list) or not value or not all(isinstance(f, str) and f for f in value):
            r.fail(f"flags.{family}", f"must be a non-empty list of non-empty strings, got {value!r}")
        for flag in value:
            if NATIVE_FLAG.match(flag):
                r.fail(f"flags.{family}", f"{flag} tunes the wheel to the build machine; name the ISA explicitly")
        flags[family] = tuple(value)
    for family in compilers:
        if family not in flags:
            r.fail("flags", f"no flags for compiler family {family!r}, which the variant claims")
    return Variant(
        name=name,
        arch=arch_name,
        priority=priority,
        requires=requires,
        description=r.get("description", str, ""),
        compilers=compilers,
        flags=flags,
    )


def parse_matrix(data: Any, path: Path | str = "isa_matrix.toml") -> Matrix:
    """Validate already-parsed TOML data (kept separate for unit tests)."""
    path = Path(path)
    top = _Reader(path, "top level", data)
    top.only(("schema", "arch", "features", "variant"))
    if top.get("schema", int) != 1:
        top.fail("schema", f"unsupported schema {data['schema']!r} (this loader reads 1)")
    arches = {name: _parse_arch(path, name, t) for name, t in top.get("arch", dict).items()}
    if not arches:
        top.fail("arch", "declares no arch")
    features: dict[str, dict[str, Feature]] = {}
    for arch_name, table in top.get("features", dict).items():
        if arch_name not in arches:
            top.fail("features", f"features for undeclared arch {arch_name!r}")
        r = _Reader(path, f"features.{arch_name}", table)
        features[arch_name] = {
            n: _parse_feature(path, arch_name, arches[arch_name].os, n, t) for n, t in r.table.items()
        }
    if isinstance(top.table.get("variant"), dict):
        top.fail("variant", "must be an array of tables: write each variant as [[variant]], not [variant]")
    raw_variants = top.get("variant", list)
    variants = tuple(_parse_variant(path, i, t, arches, features) for i, t in enumerate(raw_variants))
    _check_across(path, arches, variants)
    return Matrix(path=str(path), arches=arches, features=features, variants=variants)


def _check_across(path: Path, arches: dict[str, Arch], variants: tuple[Variant, ...]) -> None:
    seen: dict[tuple[str, str], int] = {}
    priorities: dict[tuple[str, int], str] = {}
    for index, v in enumerate(variants):
        where = f"variant {v.name!r} ({v.arch}), field"
        first = seen.setdefault((v.arch, v.name), index)
        if first != index:
            raise MatrixError(path, f"{where} 'name'", f"duplicate variant name for this arch ([[variant]] entries #{first + 1} and #{index + 1})")
        other = priorities.setdefault((v.arch, v.priority), v.name)
        if other != v.name:
            raise MatrixError(path, f"{where} 'priority'", f"{v.priority} is already used by {other!r}; priorities must differ within an arch")
    for arch in arches:
        mine = sorted((v for v in variants if v.arch == arch), key=lambda v: v.priority)
        if not mine:
            raise MatrixError(path, f"arch {arch!r}", "has no variants")
        baselines = [v.name for v in mine if v.is_baseline]
        if not baselines:
            raise MatrixError(path, f"arch {arch!r}", "has no baseline: exactly one variant needs an empty 'requires' (it runs on every CPU of the arch)")
        if len(baselines) > 1:
            raise MatrixError(path, f"arch {arch!r}", f"has {len(baselines)} baselines ({', '.join(map(repr, baselines))}): exactly one variant may have an empty 'requires'")
        if not mine[0].is_baseline:
            base = next(v for v in mine if v.is_baseline)
            raise MatrixError(
                path,
                f"variant {base.name!r} ({arch}), field 'priority'",
                f"the baseline must have the lowest priority, but {mine[0].name!r} has {mine[0].priority} < {base.priority}",
            )


def load_matrix(path: Path | str = DEFAULT_MATRIX) -> Matrix:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MatrixError(path, "file", f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise MatrixError(path, "file", f"is not UTF-8 text (byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(path, "syntax", str(exc)) from None
    return parse_matrix(data, path)


# ------------------------------------------------------------- CMake bridge


def _cmake_list(items: tuple[str, ...] | list[str]) -> str:
    return ";".join(i.replace(";", "\\;") for i in items)


def cmake_variables(matrix: Matrix, arch: str, family: str) -> str:
    """A CMake script that sets the variants of `arch` and their flags for `family`."""
    lines = [f"# generated from {matrix.path} - do not edit", f'set(CPUKERN_ALL_VARIANTS "{_cmake_list([v.name for v in matrix.variants_for(arch)])}")']
    usable = []
    for v in matrix.variants_for(arch):
        if family in v.flags:
            usable.append(v.name)
            lines.append(f'set(CPUKERN_VARIANT_{v.name}_FLAGS "{_cmake_list(v.flags[family])}")')
            lines.append(f'set(CPUKERN_VARIANT_{v.name}_PRIORITY {v.priority})')
    lines.insert(2, f'set(CPUKERN_VARIANTS "{_cmake_list(usable)}")')
    lines.insert(3, f'set(CPUKERN_BASELINE_VARIANT "{matrix.baseline(arch).name}")')
    return "\n".join(lines) + "\n"


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--matrix", default=str(DEFAULT_MATRIX))
    sub = parser.add_subparsers(dest="command", required=True)
    p_cmake = sub.add_parser("cmake", help="write the CMake variables of one arch and compiler family")
    p_cmake.add_argument("--arch", required=True)
    p_cmake.add_argument("--compiler", required=True, choices=COMPILER_FAMILIES)
    p_cmake.add_argument("--out", required=True)
    p_man = sub.add_parser("manifest", help="write the runtime manifest of the built variants")
    p_man.add_argument("--arch", required=True)
    p_man.add_argument("--variants", required=True, help="';'- or ','-separated built variants")
    p_man.add_argument("--library", required=True, help="library file name with {variant}")
    p_man.add_argument("--out", required=True)
    sub.add_parser("check", help="validate the matrix")
    args = parser.parse_args(argv)
    try:
        matrix = load_matrix(args.matrix)
        if args.command in ("cmake", "manifest") and args.arch not in matrix.arches:
            raise MatrixError(args.matrix, "arch", f"no arch {args.arch!r} (declared: {', '.join(matrix.arches)})")
    except MatrixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.command == "cmake":
        text = cmake_variables(matrix, args.arch, args.compiler)
    elif args.command == "manifest":
        built = [v for v in re.split(r"[;,]", args.variants) if v]
        text = json.dumps(matrix.manifest(args.arch, built, args.library), indent=1, sort_keys=True) + "\n"
    else:
        print(f"{matrix.path}: ok ({len(matrix.variants)} variants)")
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists() or out.read_text() != text:  # keep mtimes stable for rebuilds
        out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
