"""Decoding one executable section into (address, size, features) per
instruction: iced-x86 for x86_64, capstone for aarch64 and s390x. The
instruction text is formatted only on demand (for a violation), which keeps a
pass over a large library cheap."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .features import ArchTables, tables

Decoded = tuple[int, int, frozenset[str]]  # address, size, cpubuild features beyond nothing
UNDECODABLE = "undecodable"  # pseudo-feature: bytes the disassembler cannot decode (data, or newer than it knows)


class Disassembler:
    """Decodes one arch; `describe` gives one instruction's text."""

    def __init__(self, arch: str) -> None:
        self.arch = arch
        self.tables: ArchTables = tables(arch)
        self._cache: dict[Any, frozenset[str]] = {}
        self.decode: Callable[[bytes, int], Iterator[Decoded]] = {
            "x86_64": self._x86, "aarch64": self._aarch64, "s390x": self._s390x}[arch]

    # ---------------------------------------------------------------- x86_64
    def _x86(self, code: bytes, address: int) -> Iterator[Decoded]:
        iced_x86 = _iced()

        names = _iced_feature_names()
        invalid = iced_x86.Code.INVALID
        for ins in iced_x86.Decoder(64, code, ip=address):
            key = ins.code
            feats = self._cache.get(key)
            if feats is None:
                if key == invalid:
                    feats = frozenset((UNDECODABLE,))
                else:
                    feats = self._x86_features([names[c] for c in ins.cpuid_features()], _iced_mnemonic(ins))
                self._cache[key] = feats
            yield ins.ip, ins.len, feats

    def _x86_features(self, iced: list[str], mnemonic: str) -> frozenset[str]:
        t = self.tables
        by_mnemonic = t.mnemonic_feature(mnemonic)
        if by_mnemonic is not None:
            return frozenset((by_mnemonic,)) - {""}
        return frozenset(t.disassembler.get(name, name.lower()) for name in iced) - {""}

    # --------------------------------------------------------------- aarch64
    def _aarch64(self, code: bytes, address: int) -> Iterator[Decoded]:
        import capstone

        md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
        offset = 0
        while offset < len(code):
            for addr, size, mnemonic, operands in md.disasm_lite(code[offset:], address + offset):
                yield addr, size, self._arm_features(mnemonic, operands)
                offset += size
            if offset < len(code):  # capstone stops at an undecodable word
                yield address + offset, 4, frozenset((UNDECODABLE,))
                offset += 4

    def _arm_features(self, mnemonic: str, operands: str) -> frozenset[str]:
        key = (mnemonic, operands)
        feats = self._cache.get(key)
        if feats is None:
            t = self.tables
            found = set(t.operand_features(mnemonic, operands))
            by_mnemonic = t.mnemonic_feature(mnemonic)
            if by_mnemonic:
                # an SVE form of a NEON mnemonic (sdot z0.s ...) needs SVE, not the NEON feature
                found.add(by_mnemonic if "sve" not in found or by_mnemonic in ("bf16", "i8mm") else "sve")
            if mnemonic.startswith("crc32"):
                found.add(t.disassembler.get("crc", "crc32"))
            feats = frozenset(found - {""})
            if len(self._cache) < 200_000:
                self._cache[key] = feats
        return feats

    # ----------------------------------------------------------------- s390x
    def _s390x(self, code: bytes, address: int) -> Iterator[Decoded]:
        import capstone

        md = capstone.Cs(capstone.CS_ARCH_SYSZ, capstone.CS_MODE_BIG_ENDIAN)
        md.detail = True
        offset = 0
        while offset < len(code):
            for ins in md.disasm(code[offset:], address + offset):
                feats = self._cache.get(ins.mnemonic)
                if feats is None:
                    groups = [ins.group_name(g) for g in ins.groups]
                    feats = frozenset(self.tables.disassembler.get(g, g) for g in groups if g != "jump") - {""}
                    self._cache[ins.mnemonic] = feats
                yield ins.address, ins.size, feats
                offset += ins.size
            if offset < len(code):
                size = _s390x_length(code[offset])
                yield address + offset, size, self._s390x_undecodable(md, code[offset:offset + size])
                offset += size

    def _s390x_undecodable(self, md: Any, word: bytes) -> frozenset[str]:
        if len(word) == 6 and word[0] == 0xE7 and word[4] & 0xF0:  # a z14 alignment hint on a z13 instruction?
            for ins in md.disasm(word[:4] + bytes((word[4] & 0x0F,)) + word[5:], 0, 1):
                groups = [ins.group_name(g) for g in ins.groups]
                return frozenset(self.tables.disassembler.get(g, g) for g in groups if g != "jump") - {""}
        return frozenset((self.tables.undecodable.get(word[0], UNDECODABLE),))

    # ------------------------------------------------------------------ text
    def describe(self, code: bytes, offset: int, address: int) -> str:
        """The instruction at `offset` of `code` (loaded at `address` + offset) as text."""
        window = code[offset:offset + 16]
        if self.arch == "x86_64":
            import iced_x86

            ins = next(iter(iced_x86.Decoder(64, window, ip=address)))
            return str(iced_x86.Formatter(iced_x86.FormatterSyntax.GAS).format(ins)) if not ins.is_invalid else "(bad)"
        import capstone

        mode = (capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM) if self.arch == "aarch64" else (
            capstone.CS_ARCH_SYSZ, capstone.CS_MODE_BIG_ENDIAN)
        for _a, _s, mnemonic, operands in capstone.Cs(*mode).disasm_lite(window, address):
            return f"{mnemonic} {operands}".strip()
        return "(bad) " + window[:6 if self.arch == "s390x" else 4].hex()


def _s390x_length(first_byte: int) -> int:
    """z/Architecture instruction length from the opcode's two top bits."""
    return (2, 4, 4, 6)[first_byte >> 6]


_ICED_NAMES: dict[int, str] = {}


def _iced_feature_names() -> dict[int, str]:
    if not _ICED_NAMES:
        import iced_x86

        _ICED_NAMES.update({v: k for k, v in vars(iced_x86.CpuidFeature).items()
                            if not k.startswith("_") and isinstance(v, int)})
    return _ICED_NAMES


_ICED_MNEMONICS: dict[int, str] = {}


def _iced_mnemonic(ins: Any) -> str:
    if not _ICED_MNEMONICS:
        import iced_x86

        _ICED_MNEMONICS.update({v: k.lower() for k, v in vars(iced_x86.Mnemonic).items()
                                if not k.startswith("_") and isinstance(v, int)})
    return _ICED_MNEMONICS[ins.mnemonic]


def _iced() -> Any:
    """iced-x86, or one clear line: it has wheels for x86_64 hosts only."""
    try:
        import iced_x86
    except ImportError:
        from ..errors import ToolMissingError

        raise ToolMissingError("auditing x86_64 code needs iced-x86, which is not installed here",
                               detail="fix: python3 -m pip install 'iced-x86>=1.20' (wheels exist for x86_64 hosts; "
                                      "elsewhere it builds from Rust sources)") from None
    return iced_x86
