"""Which cpubuild feature each instruction needs: the tables of
``hardware/audit_features.toml`` applied to one decoded instruction."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ..hardware import hardware

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

DATA_FILE = Path(__file__).parent.parent / "hardware" / "audit_features.toml"


@dataclass(frozen=True, kw_only=True)
class ArchTables:
    arch: str
    disassembler: dict[str, str] = field(hash=False)  # disassembler feature / group -> cpubuild name ("" = baseline)
    exact: dict[str, str] = field(hash=False)  # mnemonic -> name
    prefixes: tuple[tuple[str, str], ...]  # (mnemonic prefix, name), longest first
    operand: tuple[tuple[str, re.Pattern[str]], ...]
    fp16_prefixes: tuple[str, ...]
    fp16_base: frozenset[str]
    undecodable: dict[int, str] = field(hash=False)  # first opcode byte -> name
    probe: dict[str, str] = field(hash=False)  # mnemonic the probe runs only after checking -> name
    guarded: dict[str, str] = field(hash=False)  # symbol pattern the toolchain guards -> why
    baseline: frozenset[str]
    implied: dict[str, tuple[str, ...]] = field(hash=False)  # hardware feature -> extra names its CPUs have
    order: tuple[str, ...]  # hardware.toml's features of the arch, weakest first

    def mnemonic_feature(self, mnemonic: str) -> str | None:
        if mnemonic in self.exact:
            return self.exact[mnemonic]
        return next((name for prefix, name in self.prefixes if mnemonic.startswith(prefix)), None)

    def operand_features(self, mnemonic: str, operands: str) -> set[str]:
        found: set[str] = set()
        for name, pattern in self.operand:
            if name == "asimdhp" and not self._fp16_candidate(mnemonic):
                continue
            if pattern.search(operands):
                found.add(name)
        return found

    def _fp16_candidate(self, mnemonic: str) -> bool:
        return mnemonic not in self.fp16_base and mnemonic.startswith(self.fp16_prefixes)

    def allowed(self, requires: tuple[str, ...] | list[str]) -> frozenset[str]:
        """Everything a variant with `requires` may use: those features, what
        they imply in hardware.toml and here, and the arch baseline."""
        hw = hardware()
        known = [r for r in requires if r in hw.features[self.arch]]
        names = set(hw.closure(self.arch, known)) | set(requires) | self.baseline
        for name in list(names):
            names.update(self.implied.get(name, ()))
        return frozenset(names)

    def rank(self, name: str) -> int:
        """Position in hardware.toml's order (unknown names after every known one)."""
        return self.order.index(name) if name in self.order else len(self.order)


def _compile(arch: str, raw: dict[str, Any], common: dict[str, Any]) -> ArchTables:
    mnemonics: dict[str, str] = raw.get("mnemonic", {})
    exact = {m: n for m, n in mnemonics.items() if not m.endswith("*")}
    prefixes = sorted(((m[:-1], n) for m, n in mnemonics.items() if m.endswith("*")), key=lambda p: -len(p[0]))
    fp16 = raw.get("fp16", {})
    return ArchTables(
        arch=arch,
        disassembler=dict(raw.get("disassembler", {})),
        exact=exact,
        prefixes=tuple(prefixes),
        operand=tuple((n, re.compile(p)) for n, p in raw.get("operand", {}).items()),
        fp16_prefixes=tuple(fp16.get("prefixes", ())),
        fp16_base=frozenset(fp16.get("base", ())),
        undecodable={int(k, 16): v for k, v in raw.get("undecodable", {}).items()},
        probe=dict(raw.get("probe", {})),
        guarded=dict(raw.get("guarded", {})),
        baseline=frozenset(common["baseline"].get(arch, ())),
        implied={k: tuple(v) for k, v in common.get("implied", {}).get(arch, {}).items()},
        order=tuple(hardware().features[arch]),
    )


@cache
def tables(arch: str) -> ArchTables:
    data = tomllib.loads(DATA_FILE.read_text(encoding="utf-8"))
    if data.get("schema") != 1 or arch not in data:
        raise KeyError(f"{DATA_FILE}: no audit tables for arch {arch!r}")
    return _compile(arch, data[arch], data)


def audited_arches() -> tuple[str, ...]:
    return ("x86_64", "aarch64", "s390x")
