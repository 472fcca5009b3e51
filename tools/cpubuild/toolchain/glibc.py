"""Keep the manylinux floor down on a new-glibc build host.

Linking on Debian 12 (glibc 2.36, gcc 12) binds symbols to their newest
version even when an older, compatible one exists: glibc 2.34 moved
``pthread_once`` & co. into libc under ``GLIBC_2.34`` (same code, new
version), libm 2.29 re-versioned ``exp``/``log``/``pow``, and libstdc++ 12
re-versioned ``condition_variable::wait`` as ``GLIBCXX_3.4.30``. Any one of
them lifts the wheel to manylinux_2_34 or 2_35.

This module reads the target's own libraries (the ones the toolchain links
against) and the policy's symbol-version ceilings from auditwheel's policy
table, and writes a header of ``.symver`` directives binding every symbol whose
default version is above the ceiling to the newest version at or below it -
exactly the version a build on a manylinux_2_28 system would have bound (or,
for a few C++20 symbols with no older version, an older symbol of another
name that does the same: EQUIVALENTS). The
build force-includes it (CMake ``CPUBUILD_SYMVER_HEADER``; the file lives in
cpubuild's cache directory under a content-addressed name). Symbols without such
an older version are left alone: auditwheel then reports the higher floor and
`cpubuild wheel` names the symbol.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .. import cache

# The shared libraries a C/C++ module links against that manylinux policies version.
LINKED_LIBRARIES = ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1")
CACHE_FILE = "glibc-symver.json"
_TAG = re.compile(r"^(manylinux_\d+_\d+)_(\w+)$")
_VERSION = re.compile(r"^([A-Z]+(?:_[A-Z]+)*)_(\d+(?:\.\d+)*)$")


@dataclass(frozen=True, kw_only=True)
class Directive:
    symbol: str
    version: str  # e.g. GLIBC_2.2.5
    default: str  # the version the linker would bind without the directive
    target: str = ""  # bind to this other symbol of the same behaviour ("": the symbol itself)

    @property
    def bound(self) -> str:
        return self.target or self.symbol


def _stringstream_str_pairs() -> dict[str, str]:
    """C++20's `str() const&` of the string streams (GLIBCXX_3.4.29, GCC 11) -> the
    C++11 ABI's `str() const` (GLIBCXX_3.4.21): the same copy of the buffer, under
    another name. Any C++20 unit that builds a message with an ostringstream
    (torch's c10::str, TORCH_CHECK with a string argument) references the new one."""
    pairs = {}
    for cls in ("basic_stringbuf", "basic_ostringstream", "basic_istringstream", "basic_stringstream"):
        for char in ("c", "w"):
            tail = f"{len(cls)}{cls}I{char}St11char_traitsI{char}ESaI{char}EE3strEv"
            pairs[f"_ZNKRSt7__cxx11{tail}"] = f"_ZNKSt7__cxx11{tail}"
    return pairs


# Symbols newer than a policy that have an older equivalent of another name.
EQUIVALENTS = _stringstream_str_pairs()


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def split_version(name: str) -> tuple[str, tuple[int, ...]] | None:
    """'GLIBC_2.34' -> ('GLIBC', (2, 34)); None for names like 'libc.so.6'."""
    match = _VERSION.match(name)
    return (match.group(1), _key(match.group(2))) if match else None


def policy_ceilings(tag: str) -> dict[str, tuple[int, ...]]:
    """Highest allowed version per prefix (GLIBC, GLIBCXX, CXXABI, GCC ...) for a manylinux tag."""
    match = _TAG.match(tag)
    if match is None:
        raise ValueError(f"not a manylinux platform tag: {tag!r}")
    name, arch = match.groups()
    table = json.loads(resources.files("auditwheel.policy").joinpath("manylinux-policy.json").read_text(encoding="utf-8"))
    for policy in table:
        if policy["name"] == name:
            per_prefix: Mapping[str, Sequence[str]] = policy["symbol_versions"].get(arch, {})
            ceilings: dict[str, tuple[int, ...]] = {}
            for prefix, versions in per_prefix.items():
                numeric = [_key(v) for v in versions if re.fullmatch(r"\d+(?:\.\d+)*", v)]  # skip CXXABI_TM_1 & co.
                if numeric:
                    ceilings[prefix] = max(numeric)
            return ceilings
    raise ValueError(f"auditwheel knows no policy {name!r}")


def _above_ceiling(versions: Iterable[tuple[str, bool]],
                   ceilings: Mapping[str, tuple[int, ...]]) -> tuple[str, str, tuple[int, ...]] | None:
    """(default version, its prefix, the prefix's ceiling) when the default is above it; else None."""
    default = next((v for v, hidden in versions if not hidden), None)
    parsed = split_version(default) if default else None
    if default is None or parsed is None or parsed[0] not in ceilings or parsed[1] <= ceilings[parsed[0]]:
        return None
    return default, parsed[0], ceilings[parsed[0]]


def _newest_allowed(versions: Iterable[tuple[str, bool]], prefix: str, ceiling: tuple[int, ...]) -> str | None:
    allowed = [(p[1], v) for v, _ in versions if (p := split_version(v)) and p[0] == prefix and p[1] <= ceiling]
    return max(allowed)[1] if allowed else None


def choose(versions: Iterable[tuple[str, bool]], ceilings: Mapping[str, tuple[int, ...]]) -> tuple[str, str] | None:
    """Pure rule for one symbol: (version to bind, default) or None to leave it alone.

    `versions`: (version name, hidden) pairs of one defined symbol; the
    non-hidden one is the linker's default."""
    pairs = list(versions)
    above = _above_ceiling(pairs, ceilings)
    if above is None:
        return None
    default, prefix, ceiling = above
    older = _newest_allowed([(v, hidden) for v, hidden in pairs if hidden], prefix, ceiling)
    return (older, default) if older else None


def choose_equivalent(symbol: str, versions: Mapping[str, Sequence[tuple[str, bool]]],
                      ceilings: Mapping[str, tuple[int, ...]]) -> Directive | None:
    """Pure rule: a symbol above the ceilings, with no allowed version of its own, bound
    to the newest allowed version of its EQUIVALENTS entry; None when there is none."""
    target = EQUIVALENTS.get(symbol)
    own = versions.get(symbol, ())
    if target is None or choose(own, ceilings) is not None:
        return None  # not listed, or an older version of its own name serves
    above = _above_ceiling(own, ceilings)
    if above is None:
        return None
    default, prefix, ceiling = above
    version = _newest_allowed(versions.get(target, ()), prefix, ceiling)
    return Directive(symbol=symbol, version=version, default=default, target=target) if version else None


def read_versions(path: Path) -> dict[str, list[tuple[str, bool]]]:
    """Defined dynamic symbols of a shared library -> [(version, hidden)]."""
    from elftools.elf.elffile import ELFFile  # auditwheel's dependency: present wherever repair runs

    symbols: dict[str, list[tuple[str, bool]]] = {}
    with path.open("rb") as f:
        elf = ELFFile(f)
        dynsym: Any = elf.get_section_by_name(".dynsym")
        versym: Any = elf.get_section_by_name(".gnu.version")
        verdef: Any = elf.get_section_by_name(".gnu.version_d")
        if dynsym is None or versym is None or verdef is None:
            return symbols
        names = {int(vd["vd_ndx"]): next(aux).name for vd, aux in verdef.iter_versions()}
        for index, sym in enumerate(dynsym.iter_symbols()):
            if sym["st_shndx"] == "SHN_UNDEF" or not sym.name:
                continue
            ndx = versym.get_symbol(index).entry["ndx"]
            if not isinstance(ndx, int):
                continue  # VER_NDX_LOCAL / VER_NDX_GLOBAL: unversioned
            version = names.get(ndx & 0x7FFF)
            if version is not None and split_version(version) is not None:
                symbols.setdefault(sym.name, []).append((version, bool(ndx & 0x8000)))
    return symbols


def library_paths(compiler: Sequence[str]) -> list[Path]:
    """The target libraries the toolchain links against (works for cross compilers)."""
    found = []
    for soname in LINKED_LIBRARIES:
        out = subprocess.run([*compiler, f"-print-file-name={soname}"], capture_output=True, text=True, timeout=60).stdout.strip()
        path = Path(out)
        if path.is_absolute() and path.is_file():
            found.append(path.resolve())
    return found


def directives(compiler: Sequence[str], tag: str) -> list[Directive]:
    libs = library_paths(compiler)
    key = cache.digest("equivalents-1", tag, *(cache.file_key(p) for p in libs))
    known = cache.load(CACHE_FILE)
    hit = known.get(key)
    if isinstance(hit, list):
        return [Directive(symbol=d[0], version=d[1], default=d[2], target=d[3]) for d in hit]
    ceilings = policy_ceilings(tag)
    result: dict[str, Directive] = {}
    for lib in libs:
        table = read_versions(lib)
        for symbol, versions in table.items():
            picked = choose(versions, ceilings)
            if picked is not None:
                result[symbol] = Directive(symbol=symbol, version=picked[0], default=picked[1])
            elif (alias := choose_equivalent(symbol, table, ceilings)) is not None:
                result[symbol] = alias
    ordered = [result[s] for s in sorted(result)]
    known[key] = [[d.symbol, d.version, d.default, d.target] for d in ordered]
    cache.store(CACHE_FILE, known)
    return ordered


# libstdc++ (GCC >= 11) reads glibc 2.32's __libc_single_threaded wherever
# <sys/single_threaded.h> exists (reference counts in shared_ptr, torch's
# intrusive_ptr, ...). The variable has no older version to bind to, so below a
# 2.32 policy it is renamed to a hidden stand-in that always says "threads may
# run": libstdc++ then always uses atomic counts, as it does on older glibc.
SINGLE_THREADED_SINCE = (2, 32)
SINGLE_THREADED_STANDIN = [
    "#define __libc_single_threaded cpubuild_libc_single_threaded",
    "#ifdef __cplusplus",
    'extern "C" {  /* braces: a one-line linkage spec on a definition draws a warning per unit */',
    "#endif",
    '__attribute__((weak, visibility("hidden"))) char cpubuild_libc_single_threaded = 0;',
    "#ifdef __cplusplus",
    "}",
    "#endif",
]


def render_header(found: Sequence[Directive], tag: str) -> str:
    lines = [
        f"/* Generated by cpubuild (tools/cpubuild/toolchain/glibc.py) for {tag}: binds symbols",
        "   whose default version is newer than the policy allows to the newest allowed",
        "   version of the same symbol (or of an equivalent one). Force-included into every",
        "   translation unit. */",
        "#if defined(__linux__) && !defined(CPUBUILD_NO_SYMVER)",
    ]
    lines += [f'__asm__(".symver {d.symbol},{d.bound}@{d.version}"); /* default {d.default} */' for d in found]
    ceiling = policy_ceilings(tag).get("GLIBC", (0,))
    if ceiling < SINGLE_THREADED_SINCE:
        lines += SINGLE_THREADED_STANDIN
    lines.append("#endif")
    return "\n".join(lines) + "\n"


def write_header(compiler: Sequence[str], tag: str, directory: Path) -> tuple[Path, int]:
    """Writes the header into `directory` under a content-addressed name; returns (path, directive count).

    The name depends only on the content, so every build directory of every
    ISA set includes the very same path: compile commands stay identical
    across build directories (ccache hits when switching sets) and an
    unchanged header never triggers a rebuild."""
    found = directives(compiler, tag)
    text = render_header(found, tag)
    dest = directory / f"symver-{tag}-{cache.digest(text)[:16]}.h"
    if not dest.is_file() or dest.read_text(encoding="utf-8") != text:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, dest)
    return dest, len(found)
