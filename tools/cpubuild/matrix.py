"""Typed loader and validator of a project's ``isa_matrix.toml`` (schema 2).

The matrix names variants: the CPU features each one requires (names from
cpubuild's hardware data, which says how to detect them) and the compiler
flags it is built with. Variants may build on each other (``extends``), so a
ladder states each step once. Arch facts (triplets, Debian/QEMU/Docker names,
the manylinux policy) come from the hardware data; a project's optional
``[arch.NAME]`` table only narrows or overrides them.

Standard library only, and runnable as ``python -m cpubuild.matrix``: the
shipped CMake package calls it inside isolated builds for the variants and
flags of one arch (``cmake``) and to write the runtime manifest the
dispatcher reads (``manifest``). Nothing else lists ISAs or flags.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import __version__
from .contract import ContractError, LocatedError, ProjectConfig, load_config
from .hardware import COMPILER_FAMILIES, OPERATING_SYSTEMS, Arch, Feature, Hardware, hardware
from .pylimited import project_limited_api

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

SCHEMA = 2
MANIFEST_SCHEMA = 2
# -march=native and friends tune a wheel to the build machine (vLLM's s390x
# build does this): such a wheel SIGILLs elsewhere.
NATIVE_FLAG = re.compile(r"^-m(arch|cpu|tune)=native(\+.*)?$")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*\Z")  # \Z: no trailing newline
# Names the build and the CLI use for other things.
RESERVED_NAMES = ("all", "native", "probe", "common")
# a compile definition: NAME or NAME=VALUE
DEFINITION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(=.*)?$")
# a library linked by name (-l<name>): numa, gomp, stdc++fs
LIBRARY_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
PRIORITY_STEP = 10  # a variant that extends another and names no priority: the parent's + this
DOCS = "docs/project.md"


class MatrixError(LocatedError):
    """A problem in the matrix file, located by file, item and field."""


@dataclass(frozen=True, kw_only=True)
class OptionalFlag:
    """A flag the variant gets only where the compiler accepts it (probed once
    per compiler at configure time), with the definition that tells the code."""

    flag: str
    define: str | None = None


@dataclass(frozen=True, kw_only=True)
class Variant:
    name: str
    arch: str
    priority: int
    requires: tuple[str, ...]  # with everything the named features imply
    description: str
    compilers: tuple[str, ...]
    flags: dict[str, tuple[str, ...]] = field(hash=False, compare=True)
    extends: str | None = None
    install_level: str | None = None  # the level of its variant wheel, when the matrix names one (installlevels.py)
    # build inputs of this variant only (with its parents'), on top of the cpubuild_add_variants() call's
    sources: tuple[str, ...] = ()  # relative to the call's VARIANT_SOURCE_DIR (default: the project directory)
    compile_definitions: tuple[str, ...] = ()
    compile_options: tuple[str, ...] = ()
    link_libraries: tuple[str, ...] = ()
    optional_flags: tuple[OptionalFlag, ...] = ()
    floor: bool = False  # the arch's declared lowest variant ([arch.X] floor): no kernel below it

    @property
    def is_baseline(self) -> bool:
        """The arch's lowest variant, always built: runs on every CPU of the arch,
        or on every CPU the project supports when the arch declares a floor."""
        return not self.requires or self.floor

    def flags_for(self, family: str) -> tuple[str, ...]:
        if family not in self.flags:
            raise KeyError(f"variant {self.name!r} ({self.arch}) has no flags for {family}")
        return self.flags[family]


@dataclass(frozen=True, kw_only=True)
class Matrix:
    path: str
    arches: dict[str, Arch] = field(hash=False)
    features: dict[str, dict[str, Feature]] = field(hash=False)  # hardware facts of this project's arches
    variants: tuple[Variant, ...]
    audit_allow: tuple[tuple[str, str], ...] = ()  # (symbol, reason): code the project guards itself (docs/audit.md)

    def floor(self, arch: str) -> Variant | None:
        """The declared lowest variant of an arch that has no baseline variant."""
        return next((v for v in self.variants_for(arch) if v.floor), None)

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

    def best_for(self, arch: str, features: set[str] | frozenset[str]) -> Variant:
        """The highest-priority variant a CPU with `features` runs."""
        runnable = [v for v in self.variants_for(arch) if set(v.requires) <= features]
        return runnable[-1] if runnable else self.baseline(arch)  # below a floor: the floor (it will not run)

    def manifest(
        self, arch: str, built: list[str], library_pattern: str, *, probe: str, project: dict[str, Any],
        optional_flags: dict[str, dict[str, bool]] | None = None,
    ) -> dict[str, Any]:
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
                # which of its optional flags the build's compiler accepted
                **({"optional_flags": optional_flags[v.name]} if optional_flags and v.name in optional_flags else {}),
            }
            for v in self.variants_for(arch)
        ]
        floor = self.floor(arch)
        return {
            "schema": MANIFEST_SCHEMA,
            "cpubuild": __version__,
            **project,
            "arch": arch,
            "probe": probe,
            **({"floor": floor.name} if floor else {}),
            "features": {n: f.detection() for n, f in self.features.get(arch, {}).items()},
            "variants": variants,
            **({"audit": {"allow": [{"symbol": s, "reason": r} for s, r in self.audit_allow]}} if self.audit_allow else {}),
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


def _parse_arch(path: Path, name: str, table: Any, hw: Hardware) -> Arch:
    r = _Reader(path, f"arch {name!r}", table)
    canonical = hw.canonical_arch(name)
    if canonical is None:
        r.fail(None, f"unknown arch (cpubuild knows: {', '.join(hw.arches)})")
    if canonical != name:
        r.fail(None, f"write the arch as {canonical!r} ({name!r} is an alias)")
    facts = hw.arches[name]
    r.only(("os", "manylinux", "macos", "floor"))
    if "floor" in r.table:
        floor = r.get("floor", str)
        if not NAME_PATTERN.match(floor):
            r.fail("floor", f"{floor!r} is not a variant name")
    os_list = r.strings("os", ["linux"], choices=OPERATING_SYSTEMS)
    for os_name in os_list:
        if os_name not in facts.os:
            r.fail("os", f"cpubuild builds {name} for {', '.join(facts.os)} only, not {os_name!r}")
    if not os_list:
        r.fail("os", "must name at least one operating system")
    manylinux = r.get("manylinux", str, facts.manylinux)
    if not re.fullmatch(rf"manylinux_\d+_\d+_{name}", manylinux):
        r.fail("manylinux", f"must be a manylinux_X_Y_{name} tag, got {manylinux!r}")
    if "macos" in r.table and "darwin" not in os_list:
        r.fail("macos", f"applies to macOS wheels only: add \"darwin\" to os = {json.dumps(list(os_list))}")
    macos = r.get("macos", str, facts.macos)
    if "darwin" in os_list and not re.fullmatch(r"macosx_\d+_\d+_(arm64|x86_64|universal2)", str(macos)):
        r.fail("macos", f"must be a macOS platform tag such as {facts.macos or 'macosx_11_0_arm64'}, got {macos!r}")
    families = tuple(f for f in facts.compilers if f != "apple-clang" or "darwin" in os_list)
    # the arch as this project builds it: the hardware facts, narrowed
    return replace(facts, compilers=families, os=os_list, manylinux=manylinux, macos=macos if "darwin" in os_list else None)


def _default_arch(name: str, hw: Hardware) -> Arch:
    return _parse_arch(Path("-"), name, {}, hw)


@dataclass(frozen=True, kw_only=True)
class _RawVariant:
    index: int
    name: str
    reader: _Reader


def _merge_flags(parent: tuple[str, ...], child: tuple[str, ...]) -> tuple[str, ...]:
    """Parent's flags, then the child's; a child `-X=value` replaces the parent's `-X=...`."""
    keys = {f.split("=", 1)[0] for f in child if "=" in f}
    kept = [f for f in parent if f not in child and ("=" not in f or f.split("=", 1)[0] not in keys)]
    return (*kept, *child)


def _read_flags(r: _Reader, families: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """`flags = [...]` (every family) or `flags = { default = [...], apple-clang = [...] }`."""
    raw = r.get("flags", (list, dict), None)
    if raw is None:
        return {}
    table = {"default": raw} if isinstance(raw, list) else raw
    allowed = ("default", *COMPILER_FAMILIES)
    out: dict[str, tuple[str, ...]] = {}
    for family, value in table.items():
        key = "flags" if isinstance(raw, list) else f"flags.{family}"
        if family not in allowed:
            r.fail("flags", f"unknown compiler family {family!r} (allowed: {', '.join(allowed)})")
        if not isinstance(value, list) or not all(isinstance(f, str) and f for f in value):
            r.fail(key, f"must be a list of non-empty strings, got {value!r}")
        for flag in value:
            if any(c.isspace() or not c.isprintable() for c in flag):
                r.fail(key, f"{flag!r} holds whitespace or a control character; give one flag per string")
            if NATIVE_FLAG.match(flag):
                r.fail(key, f"{flag} tunes the wheel to the build machine; name the ISA explicitly")
        if family != "default" and family not in families:
            r.fail("flags", f"gives flags for {family!r}, which the variant does not build with (compilers: {', '.join(families)})")
        out[family] = tuple(value)
    default = out.pop("default", None)
    if default is not None:
        for family in families:
            out.setdefault(family, default)
    return out


BUILD_INPUT_KEYS = ("sources", "compile-definitions", "compile-options", "link-libraries", "optional-flags")


def _with_parent(parent: tuple[Any, ...], own: tuple[Any, ...]) -> tuple[Any, ...]:
    return (*parent, *(item for item in own if item not in parent))


def _read_build_inputs(r: _Reader, parent: Variant | None) -> dict[str, Any]:
    """A variant's own sources, definitions, options, libraries and optional flags, after its parent's."""
    sources = r.strings("sources", ())
    for src in sources:
        if not src.strip() or src.startswith("/") or "\\" in src or "$" in src:
            r.fail("sources", f"{src!r} must be a path relative to the cpubuild_add_variants() call's VARIANT_SOURCE_DIR "
                              f"(default: the project directory), written with '/'")
    definitions = r.strings("compile-definitions", ())
    for d in definitions:
        if not DEFINITION.match(d):
            r.fail("compile-definitions", f"{d!r} is not NAME or NAME=VALUE (no -D)")
    options = r.strings("compile-options", ())
    for opt in options:
        if not opt.strip():
            r.fail("compile-options", "has an empty option")
        if NATIVE_FLAG.match(opt):
            r.fail("compile-options", f"{opt} tunes the wheel to the build machine; name the ISA explicitly")
    libraries = r.strings("link-libraries", ())
    for lib in libraries:
        if not LIBRARY_NAME.match(lib):
            r.fail("link-libraries", f"{lib!r} is not a library name (write 'numa' for -lnuma; targets and paths belong "
                                     f"in the cpubuild_add_variants() call's LINK_LIBRARIES)")
    optional: list[OptionalFlag] = []
    for index, item in enumerate(r.get("optional-flags", list, [])):
        key = f"optional-flags[{index}]"
        if not isinstance(item, dict):
            r.fail(key, f"must be a table {{flag = \"-m...\", define = \"NAME\"}}, got {item!r}")
        unknown = sorted(set(item) - {"flag", "define"})
        if unknown:
            r.fail(key, f"unknown key {unknown[0]!r} (allowed: flag, define)")
        flag, define = item.get("flag"), item.get("define")
        if not isinstance(flag, str) or not flag.startswith("-") or " " in flag:
            r.fail(key, f"'flag' must be one compiler flag such as \"-mamx-fp8\", got {flag!r}")
        if NATIVE_FLAG.match(str(flag)):
            r.fail(key, f"{flag} tunes the wheel to the build machine; name the ISA explicitly")
        if define is not None and (not isinstance(define, str) or not DEFINITION.match(define)):
            r.fail(key, f"'define' must be NAME or NAME=VALUE, got {define!r}")
        if any(o.flag == flag for o in optional):
            r.fail("optional-flags", f"names {flag} twice")
        optional.append(OptionalFlag(flag=str(flag), define=define))
    inherited = parent or Variant(name="", arch="", priority=0, requires=(), description="", compilers=(), flags={})
    own_flags = {o.flag for o in optional}
    return {
        "sources": _with_parent(inherited.sources, sources),
        "compile_definitions": _with_parent(inherited.compile_definitions, definitions),
        "compile_options": _with_parent(inherited.compile_options, options),
        "link_libraries": _with_parent(inherited.link_libraries, libraries),
        # a child's entry for a flag replaces the parent's (its define may differ)
        "optional_flags": (*(o for o in inherited.optional_flags if o.flag not in own_flags), *optional),
    }


def _parse_variants(path: Path, raw_list: list[Any], arches: dict[str, Arch], hw: Hardware) -> tuple[Variant, ...]:
    raws: list[_RawVariant] = []
    for index, table in enumerate(raw_list):
        label = table.get("name", f"#{index + 1}") if isinstance(table, dict) else f"#{index + 1}"
        r = _Reader(path, f"variant {label!r}", table)
        r.only(("name", "arch", "extends", "priority", "requires", "description", "compilers", "flags", "install-level",
                *BUILD_INPUT_KEYS))
        name = r.get("name", str)
        if not NAME_PATTERN.fullmatch(name):
            r.fail("name", f"{name!r} must be lower case letters, digits and '_' (it is part of a file name)")
        if name in RESERVED_NAMES:
            r.fail("name", f"{name!r} is reserved (reserved: {', '.join(RESERVED_NAMES)})")
        raws.append(_RawVariant(index=index, name=name, reader=r))
    done: dict[int, Variant] = {}

    def resolve(raw: _RawVariant, chain: tuple[_RawVariant, ...]) -> Variant:
        if raw.index in done:
            return done[raw.index]
        r = raw.reader
        parent: Variant | None = None
        extends = r.get("extends", str, None)
        if extends is not None:
            arch_hint = r.table.get("arch")
            if isinstance(arch_hint, str):  # an alias is reported below, with the arch field
                arch_hint = hw.canonical_arch(arch_hint) or arch_hint
            path = (*chain, raw)
            named = [p for p in raws if p.name == extends]
            # a variant on the path is being resolved: extending it again closes a cycle
            looping = [p for p in named if any(p.index == q.index for q in path)]
            resolved = [resolve(p, path) for p in named if p not in looping]
            matching = [p for p in resolved if arch_hint is None or p.arch == arch_hint]
            if not matching and looping:
                r.fail("extends", f"forms a cycle: {' -> '.join((*(q.name for q in path), extends))}")
            if not matching and resolved:
                owners = ", ".join(sorted({p.arch for p in resolved}))
                r.fail("extends", f"{extends!r} is a {owners} variant, this one is {arch_hint}; a variant extends one of its own arch")
            if not matching:
                r.fail("extends", f"no variant {extends!r} to extend" + (f" for {arch_hint}" if arch_hint else ""))
            if len(matching) > 1:
                r.fail("extends", f"{extends!r} names variants of several arches; add arch = \"...\"")
            parent = matching[0]
        arch_name = r.get("arch", str, parent.arch if parent else ...)
        if arch_name not in arches:
            canonical = hw.canonical_arch(arch_name)
            if canonical is None:
                r.fail("arch", f"unknown arch {arch_name!r} (cpubuild knows: {', '.join(hw.arches)})")
            elif canonical != arch_name:
                r.fail("arch", f"write the arch as {canonical!r} ({arch_name!r} is an alias)")
            arches[arch_name] = _default_arch(arch_name, hw)
        if parent is not None and parent.arch != arch_name:
            r.fail("extends", f"{extends!r} is a {parent.arch} variant, this one is {arch_name}")
        r.where = f"variant {raw.name!r} ({arch_name})"
        arch = arches[arch_name]
        known = hw.features[arch_name]
        own = r.strings("requires", ())
        for feat in own:
            if feat not in known:
                r.fail("requires", f"unknown feature {feat!r} for {arch_name} (known: {', '.join(known)}); see {DOCS}")
        requires = hw.closure(arch_name, (*(parent.requires if parent else ()), *own))
        priority = r.get("priority", int, parent.priority + PRIORITY_STEP if parent else ...)
        default_families = parent.compilers if parent else arch.compilers
        compilers = r.strings("compilers", list(default_families), choices=COMPILER_FAMILIES)
        for family in compilers:
            if family not in arch.compilers:
                why = " (add os = [\"linux\", \"darwin\"] to [arch.aarch64])" if family == "apple-clang" else ""
                r.fail("compilers", f"{family!r} is not a compiler family this project builds {arch_name} with{why}")
        flags = _read_flags(r, compilers)
        if parent is not None:
            flags = {f: _merge_flags(parent.flags.get(f, ()), flags.get(f, ())) for f in compilers}
        for family in compilers:
            if not flags.get(family):
                r.fail("flags", f"no flags for compiler family {family!r}, which the variant builds with")
        install_level = r.get("install-level", str, None)
        if install_level is not None:
            from .installlevels import install_levels

            scheme = install_levels().get(arch_name)
            if scheme is None:
                r.fail("install-level", f"installers detect no CPU levels for {arch_name} (levels exist for: "
                                        f"{', '.join(install_levels())})")
            elif install_level not in scheme.values:
                r.fail("install-level", f"unknown {arch_name} level {install_level!r} (known: {', '.join(scheme.values)})")
        inputs = _read_build_inputs(r, parent)
        variant = Variant(
            name=raw.name,
            arch=arch_name,
            priority=priority,
            requires=requires,
            description=r.get("description", str, parent.description if parent else ""),
            compilers=compilers,
            flags={f: flags[f] for f in compilers},
            extends=parent.name if parent else None,
            install_level=install_level,
            **inputs,
        )
        done[raw.index] = variant
        return variant

    return tuple(resolve(raw, ()) for raw in raws)


def parse_matrix(data: Any, path: Path | str = "isa_matrix.toml", *, hw: Hardware | None = None) -> Matrix:
    """Validate already-parsed TOML data (kept separate for unit tests)."""
    path = Path(path)
    hw = hw or hardware()
    top = _Reader(path, "top level", data)
    top.only(("schema", "arch", "variant", "audit"))
    schema = top.get("schema", int)
    if schema == 1:
        top.fail("schema", f"schema 1 restated hardware facts ([features], arch triplets); cpubuild now ships them: "
                           f"drop [features.*] and the [arch.*] fields, set schema = 2 (see {DOCS})")
    if schema != SCHEMA:
        top.fail("schema", f"unsupported schema {schema!r} (this cpubuild reads {SCHEMA})")
    arches = {name: _parse_arch(path, name, t, hw) for name, t in top.get("arch", dict, {}).items()}
    if isinstance(top.table.get("variant"), dict):
        top.fail("variant", "must be an array of tables: write each variant as [[variant]], not [variant]")
    raw_variants = top.get("variant", list)
    if not raw_variants:
        top.fail("variant", "declares no variant")
    variants = _parse_variants(path, raw_variants, arches, hw)
    variants = _mark_floors(path, top.get("arch", dict, {}), variants)
    arches = {name: arches[name] for name in hw.arches if name in arches}  # the hardware data's order
    _check_across(path, arches, variants)
    features = {name: hw.features[name] for name in arches}
    return Matrix(path=str(path), arches=arches, features=features, variants=variants,
                  audit_allow=_parse_audit(path, top.get("audit", dict, {})))


def _parse_audit(path: Path, table: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """[audit] allow = [{symbol, reason}]: functions the project dispatches itself."""
    r = _Reader(path, "table 'audit'", table)
    r.only(("allow",))
    entries = []
    for number, raw in enumerate(r.get("allow", list, []), 1):
        entry = _Reader(path, f"audit.allow entry #{number}", raw)
        entry.only(("symbol", "reason"))
        symbol, reason = entry.get("symbol", str).strip(), entry.get("reason", str).strip()
        if not symbol or not reason:
            entry.fail("symbol" if not symbol else "reason", "must not be empty")
        entries.append((symbol, reason))
    return tuple(entries)


def _mark_floors(path: Path, arch_tables: dict[str, Any], variants: tuple[Variant, ...]) -> tuple[Variant, ...]:
    """`[arch.X] floor = "avx2"`: that variant is the arch's lowest and no variant runs below it."""
    out = list(variants)
    for arch, table in arch_tables.items():
        floor = table.get("floor") if isinstance(table, dict) else None
        if floor is None:
            continue
        where = f"arch {arch!r}, field 'floor'"
        mine = [i for i, v in enumerate(out) if v.arch == arch]
        named = [i for i in mine if out[i].name == floor]
        if not named:
            raise MatrixError(path, where, f"no {arch} variant {floor!r} (known: {', '.join(out[i].name for i in mine)})")
        everywhere = [out[i].name for i in mine if not out[i].requires]
        if everywhere:
            raise MatrixError(path, where, f"{everywhere[0]!r} has an empty 'requires' (it runs on every {arch} CPU), so "
                                           f"there is nothing below {floor!r}: drop the floor, or drop {everywhere[0]!r}")
        if not out[named[0]].requires:  # pragma: no cover - caught above
            raise MatrixError(path, where, f"{floor!r} requires nothing")
        out[named[0]] = replace(out[named[0]], floor=True)
    return tuple(out)


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
        if len(baselines) == 1:  # every compiler a variant is built with must build the baseline too
            base = next(v for v in mine if v.is_baseline)
            for v in mine:
                lacking = [f for f in v.compilers if f not in base.compilers]
                if lacking:
                    raise MatrixError(path, f"variant {base.name!r} ({arch}), field 'compilers'",
                                      f"the baseline must build with every compiler family its arch's variants use; "
                                      f"{v.name!r} builds with {', '.join(lacking)}")
        if not baselines:
            raise MatrixError(path, f"arch {arch!r}", "has no baseline: exactly one variant needs an empty 'requires' (it runs on "
                                                      "every CPU of the arch), or name the lowest variant with "
                                                      f"[arch.{arch}] floor = \"<variant>\" to ship no kernel below it")
        if len(baselines) > 1:
            raise MatrixError(path, f"arch {arch!r}", f"has {len(baselines)} baselines ({', '.join(map(repr, baselines))}): exactly one variant may have an empty 'requires'")
        if not mine[0].is_baseline:
            base = next(v for v in mine if v.is_baseline)
            raise MatrixError(
                path,
                f"variant {base.name!r} ({arch}), field 'priority'",
                f"the baseline must have the lowest priority, but {mine[0].name!r} has {mine[0].priority} < {base.priority}",
            )
        labels: dict[str, str] = {}
        for v in mine:  # wheel labels drop '_' (PEP 440 local segments): names must stay apart
            other_name = labels.setdefault(v.name.replace("_", ""), v.name)
            if other_name != v.name:
                raise MatrixError(path, f"variant {v.name!r} ({arch}), field 'name'",
                                  f"{other_name!r} and {v.name!r} share the wheel label {v.name.replace('_', '')!r}; rename one")


def load_matrix(path: Path | str) -> Matrix:
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


def _cmake_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def cmake_variables(matrix: Matrix, config: ProjectConfig, arch: str, family: str) -> str:
    """A CMake script that sets the project facts and the variants of `arch` with their flags for `family`."""
    usable = [v for v in matrix.variants_for(arch) if family in v.flags]
    lines = [
        f"# generated by cpubuild {__version__} from {matrix.path} - do not edit",
        f"set(CPUBUILD_PACKAGE {_cmake_string(config.package)})",
        f"set(CPUBUILD_ENV_PREFIX {_cmake_string(config.env_prefix)})",
        f"set(CPUBUILD_KIND {_cmake_string(config.kind)})",
        f"set(CPUBUILD_ARCH {_cmake_string(arch)})",
        f"set(CPUBUILD_ALL_VARIANTS {_cmake_string(_cmake_list([v.name for v in matrix.variants_for(arch)]))})",
        f"set(CPUBUILD_VARIANTS {_cmake_string(_cmake_list([v.name for v in usable]))})",
        f"set(CPUBUILD_BASELINE_VARIANT {_cmake_string(matrix.baseline(arch).name)})",
        f"set(CPUBUILD_MATRIX_FILE {_cmake_string(matrix.path)})",
        # abi3 modules (cpubuild_add_variants PYTHON_MODULE): the project's requires-python floor
        f"set(CPUBUILD_PYTHON_LIMITED_API {_cmake_string(project_limited_api(config.pyproject) or '')})",
    ]
    base = matrix.baseline(arch)
    # the probe runs before any check: it gets the arch's lowest ISA, never a floor's flags
    probe = base.flags.get(family, ()) if not base.floor else (() if family == "apple-clang" else matrix.arches[arch].probe_flags)
    lines.append(f"set(CPUBUILD_PROBE_FLAGS {_cmake_string(_cmake_list(probe))})")
    lines.append(f"set(CPUBUILD_FLOOR {_cmake_string(base.name if base.floor else '')})")
    for v in usable:
        lines.append(f"set(CPUBUILD_VARIANT_{v.name}_FLAGS {_cmake_string(_cmake_list(v.flags[family]))})")
        lines.append(f"set(CPUBUILD_VARIANT_{v.name}_PRIORITY {v.priority})")
        for key, items in (("SOURCES", v.sources), ("DEFINITIONS", v.compile_definitions),
                           ("OPTIONS", v.compile_options), ("LIBRARIES", v.link_libraries)):
            lines.append(f"set(CPUBUILD_VARIANT_{v.name}_{key} {_cmake_string(_cmake_list(items))})")
        lines.append(f"set(CPUBUILD_VARIANT_{v.name}_OPTIONAL_COUNT {len(v.optional_flags)})")
        for i, opt in enumerate(v.optional_flags):
            lines.append(f"set(CPUBUILD_VARIANT_{v.name}_OPTIONAL_{i}_FLAG {_cmake_string(opt.flag)})")
            lines.append(f"set(CPUBUILD_VARIANT_{v.name}_OPTIONAL_{i}_DEFINE {_cmake_string(opt.define or '')})")
    return "\n".join(lines) + "\n"


def _write_if_changed(out: Path, text: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists() or out.read_text(encoding="utf-8") != text:  # keep mtimes stable for rebuilds
        out.write_text(text, encoding="utf-8")


def _optional_results(items: list[str]) -> dict[str, dict[str, bool]]:
    """`variant:1:-mamx-fp8` entries (from the CMake probe) -> {variant: {flag: accepted}}."""
    out: dict[str, dict[str, bool]] = {}
    for item in items:
        variant, accepted, flag = item.split(":", 2)
        out.setdefault(variant, {})[flag] = accepted == "1"
    return out


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cpubuild.matrix", description=__doc__)
    parser.add_argument("--project", required=True, help="the project directory (pyproject.toml with [tool.cpubuild])")
    sub = parser.add_subparsers(dest="command", required=True)
    p_cmake = sub.add_parser("cmake", help="write the CMake variables of one arch and compiler family")
    p_cmake.add_argument("--arch", required=True, help="arch name or alias (e.g. CMAKE_SYSTEM_PROCESSOR)")
    p_cmake.add_argument("--compiler", required=True, choices=COMPILER_FAMILIES)
    p_cmake.add_argument("--out", required=True)
    p_man = sub.add_parser("manifest", help="write the runtime manifest of the built variants")
    p_man.add_argument("--arch", required=True)
    p_man.add_argument("--variants", required=True, help="';'- or ','-separated built variants")
    p_man.add_argument("--library", required=True, help="library file name with {variant}")
    p_man.add_argument("--probe", required=True, help="the probe library's file name")
    p_man.add_argument("--torch", default="", help="torch projects: the torch version the libraries are built against")
    p_man.add_argument("--optional-flag", action="append", default=[], metavar="VARIANT:0|1:FLAG",
                       help="an optional flag of a built variant and whether the compiler accepted it")
    p_man.add_argument("--out", required=True)
    sub.add_parser("check", help="validate the project's matrix")
    args = parser.parse_args(argv)
    try:
        config = load_config(Path(args.project))
        matrix = load_matrix(config.matrix)
        arch = ""
        if args.command in ("cmake", "manifest"):
            arch = hardware().canonical_arch(args.arch) or args.arch
            if arch not in matrix.arches:
                raise MatrixError(matrix.path, "arch", f"no variants for {args.arch!r} (this project builds: {', '.join(matrix.arches)})")
        if args.command == "cmake" and args.compiler not in matrix.baseline(arch).compilers:
            # without the baseline a build would hold no variant every CPU runs
            base = matrix.baseline(arch)
            raise MatrixError(matrix.path, f"arch {arch!r}", f"is not built with {args.compiler}: its baseline {base.name!r} "
                                                             f"builds with {', '.join(base.compilers)}")
        if args.command == "manifest":
            known = [v.name for v in matrix.variants_for(arch)]
            unknown = [v for v in re.split(r"[;,]", args.variants) if v and v not in known]
            if unknown:
                raise MatrixError(matrix.path, f"arch {arch!r}", f"--variants names {', '.join(map(repr, unknown))}, not variants of {arch} (known: {', '.join(known)})")
            if "{variant}" not in args.library or re.search(r"\{(?!variant\})|(?<!\{variant)\}", args.library):
                raise MatrixError(matrix.path, "manifest", f"--library {args.library!r} must name each variant's file with {{variant}} (and no other braces)")
    except (ContractError, MatrixError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.command == "cmake":
        _write_if_changed(Path(args.out), cmake_variables(matrix, config, arch, args.compiler))
    elif args.command == "manifest":
        built = [v for v in re.split(r"[;,]", args.variants) if v]
        facts = {**config.runtime_facts(), **({"torch": args.torch} if args.torch else {})}
        data = matrix.manifest(arch, built, args.library, probe=args.probe, project=facts,
                               optional_flags=_optional_results(args.optional_flag))
        _write_if_changed(Path(args.out), json.dumps(data, indent=1) + "\n")  # deterministic: built in a fixed order
    else:
        print(f"{matrix.path}: ok ({len(matrix.variants)} variants)")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
