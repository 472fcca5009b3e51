"""The dynamic-linking facts of an ELF shared library - its DT_NEEDED sonames and
its dynamic symbols' names - read with the standard library only.

A torch project's build runs this (torchdist.py, called by the CMake package
inside isolated builds, where cpubuild-core is installed without the CLI's
dependencies): it reads libtorch's C++ ABI and OpenMP runtime. ELF32 and ELF64,
either byte order (s390x is big-endian). Only the section headers and the
sections named there are read: libtorch_cpu.so is hundreds of MB.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

SHT_DYNAMIC, SHT_DYNSYM = 6, 11
DT_NULL, DT_NEEDED = 0, 1


class ElfFormatError(ValueError):
    """Not an ELF file, or one whose headers point outside it."""


@dataclass(frozen=True, kw_only=True)
class _Section:
    kind: int
    offset: int
    size: int
    link: int


@dataclass(frozen=True, kw_only=True)
class _Layout:
    order: str  # "<" or ">"
    wide: bool  # ELF64

    @property
    def word(self) -> str:
        return "Q" if self.wide else "I"


def _read(f: BinaryIO, offset: int, size: int) -> bytes:
    if offset < 0 or size < 0 or offset + size > os.fstat(f.fileno()).st_size:  # checked first: a hostile header
        raise ElfFormatError(f"truncated: {size} bytes at offset {offset} are not all there")  # could ask for 2^64
    f.seek(offset)
    return f.read(size)


def _layout_and_sections(f: BinaryIO) -> tuple[_Layout, list[_Section]]:
    ident = _read(f, 0, 16)
    if ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise ElfFormatError("not an ELF file")
    layout = _Layout(order="<" if ident[5] == 1 else ">", wide=ident[4] == 2)
    w = layout.word
    # e_shoff, then (after e_flags, e_ehsize, e_phentsize, e_phnum) e_shentsize, e_shnum
    header = f"{layout.order}HHI{w}{w}{w}IHHHHHH"
    fields = struct.unpack(header, _read(f, 16, struct.calcsize(header)))
    shoff, shentsize, shnum = fields[5], fields[10], fields[11]
    entry = f"{layout.order}II{w}{w}{w}{w}II{w}{w}"  # name type flags addr offset size link info align entsize
    if shoff == 0:
        return layout, []
    if shentsize < struct.calcsize(entry):
        raise ElfFormatError(f"section header entries of {shentsize} bytes")
    if shnum == 0:  # extended numbering (0xff00 sections or more): the count is section 0's sh_size
        shnum = struct.unpack_from(entry, _read(f, shoff, shentsize))[5]
    table = _read(f, shoff, shentsize * shnum)
    sections = []
    for i in range(shnum):
        _, kind, _, _, offset, size, link, _, _, _ = struct.unpack_from(entry, table, i * shentsize)
        sections.append(_Section(kind=kind, offset=offset, size=size, link=link))
    return layout, sections


def _strings(f: BinaryIO, sections: list[_Section], index: int) -> bytes:
    if not 0 <= index < len(sections):
        raise ElfFormatError(f"string table {index} is not a section")
    return _read(f, sections[index].offset, sections[index].size)


def _name(strings: bytes, offset: int) -> str:
    end = strings.find(b"\0", offset)
    return strings[offset:end if end >= 0 else len(strings)].decode("utf-8", "replace")


def _sections(path: Path, kind: int) -> Iterator[tuple[_Layout, bytes, bytes]]:
    """(layout, string table, content) of each section of this type."""
    with path.open("rb") as f:
        layout, sections = _layout_and_sections(f)
        for section in (s for s in sections if s.kind == kind):
            yield layout, _strings(f, sections, section.link), _read(f, section.offset, section.size)


def needed(path: Path) -> list[str]:
    """The DT_NEEDED sonames, in order."""
    out: list[str] = []
    for layout, strings, data in _sections(path, SHT_DYNAMIC):
        entry = f"{layout.order}{'q' if layout.wide else 'i'}{layout.word}"
        for tag, value in struct.iter_unpack(entry, data[:len(data) - len(data) % struct.calcsize(entry)]):
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                out.append(_name(strings, value))
    return out


def dynamic_symbols(path: Path) -> list[str]:
    """The names in the dynamic symbol table (.dynsym), defined and imported."""
    out: list[str] = []
    for layout, strings, data in _sections(path, SHT_DYNSYM):
        size = 24 if layout.wide else 16  # Elf64_Sym / Elf32_Sym; st_name leads in both
        out += [_name(strings, name) for (name,) in
                (struct.unpack_from(f"{layout.order}I", data, offset) for offset in range(0, len(data) - size + 1, size))]
    return out
