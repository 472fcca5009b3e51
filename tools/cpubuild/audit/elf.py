"""The parts of an ELF file the audit reads, through pyelftools: its arch,
executable sections and function symbols (for naming an address)."""

from __future__ import annotations

import bisect
import io
from dataclasses import dataclass, field

from ..errors import UsageError

MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64", "EM_S390": "s390x"}
ELF_MAGIC = b"\x7fELF"


class NotAuditableError(UsageError):
    """A file is not an ELF object of an arch the audit knows."""


@dataclass(frozen=True, kw_only=True)
class Section:
    name: str
    address: int
    data: bytes


@dataclass(frozen=True, kw_only=True)
class ElfImage:
    name: str  # as the report shows it (path inside a wheel, or on disk)
    arch: str
    sections: tuple[Section, ...]
    symbol_addresses: list[int] = field(hash=False)  # sorted
    symbol_names: list[str] = field(hash=False)

    @property
    def text_bytes(self) -> int:
        return sum(len(s.data) for s in self.sections)

    def with_symbols_of(self, other: ElfImage) -> ElfImage | None:
        """This image named by `other`'s symbols (an unstripped copy of the same
        code: every executable section identical), or None when the code differs."""
        mine = [(s.name, s.address, s.data) for s in self.sections]
        if mine != [(s.name, s.address, s.data) for s in other.sections] or len(other.symbol_names) <= len(self.symbol_names):
            return None
        return ElfImage(name=self.name, arch=self.arch, sections=self.sections,
                        symbol_addresses=other.symbol_addresses, symbol_names=other.symbol_names)

    def function_ranges(self, names: set[str]) -> dict[str, tuple[int, int]]:
        """[start, end) of the named functions (end: the next symbol, or the end of its section)."""
        ends = [*self.symbol_addresses[1:], max((s.address + len(s.data) for s in self.sections), default=0)]
        return {n: (a, e) for a, e, n in zip(self.symbol_addresses, ends, self.symbol_names, strict=True) if n in names}

    def with_functions(self, ranges: dict[str, tuple[int, int]]) -> ElfImage:
        """This image with recorded function ranges added to its symbols (a stripped
        library whose build recorded where its guarded functions are)."""
        symbols = dict(zip(self.symbol_addresses, self.symbol_names, strict=True))
        for name, (start, end) in ranges.items():
            symbols.setdefault(end, f"(after {name})")
            symbols[start] = name
        addresses = sorted(symbols)
        return ElfImage(name=self.name, arch=self.arch, sections=self.sections,
                        symbol_addresses=addresses, symbol_names=[symbols[a] for a in addresses])

    def function_at(self, address: int) -> str:
        """The nearest function symbol at or before `address` ('?' when none)."""
        index = bisect.bisect_right(self.symbol_addresses, address) - 1
        return self.symbol_names[index] if index >= 0 else "?"


def is_elf(data: bytes) -> bool:
    return data[:4] == ELF_MAGIC


def read_elf(name: str, data: bytes) -> ElfImage:
    from elftools.common.exceptions import ELFError
    from elftools.elf.constants import SH_FLAGS
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        elf = ELFFile(io.BytesIO(data))
        machine = elf["e_machine"]
        if machine not in MACHINES:
            raise NotAuditableError(f"{name}: ELF for {machine}, not an arch the audit knows ({', '.join(MACHINES.values())})")
        sections = tuple(
            Section(name=s.name, address=s["sh_addr"], data=s.data())
            for s in elf.iter_sections()
            if s["sh_type"] == "SHT_PROGBITS" and s["sh_flags"] & SH_FLAGS.SHF_EXECINSTR and s["sh_size"]
        )
        symbols: dict[int, str] = {}
        for table_name in (".dynsym", ".symtab"):  # .symtab (when kept) names local functions too
            table = elf.get_section_by_name(table_name)
            if not isinstance(table, SymbolTableSection):
                continue
            for sym in table.iter_symbols():
                if sym["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC") and sym["st_value"] and sym.name:
                    symbols[sym["st_value"]] = sym.name
    except ELFError as exc:
        raise NotAuditableError(f"{name}: not a readable ELF file ({exc})") from None
    addresses = sorted(symbols)
    return ElfImage(name=name, arch=MACHINES[machine], sections=sections,
                    symbol_addresses=addresses, symbol_names=[symbols[a] for a in addresses])
