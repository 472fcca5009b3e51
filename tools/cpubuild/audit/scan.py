"""One pass over one library: every instruction's features counted, and each
instruction needing something outside `allowed` recorded with its function."""

from __future__ import annotations

import fnmatch
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .disasm import UNDECODABLE, Disassembler
from .elf import ElfImage

MAX_LISTED = 200  # violations kept per library with full detail (all are counted)


@dataclass(frozen=True, kw_only=True)
class Allow:
    """Code the project dispatches itself (matrix `audit.allow`)."""

    symbol: str  # exact name or a shell-style pattern
    reason: str

    def matches(self, function: str) -> bool:
        return function == self.symbol or fnmatch.fnmatchcase(function, self.symbol)


@dataclass(frozen=True, kw_only=True)
class Finding:
    library: str
    function: str
    address: int
    instruction: str
    features: tuple[str, ...]  # the ones outside what the library may use
    guarded_by: str | None = None  # the allow entry's reason, when the project declared it

    def as_json(self) -> dict[str, object]:
        return {"library": self.library, "function": self.function, "address": f"0x{self.address:x}",
                "instruction": self.instruction, "features": list(self.features), "guarded_by": self.guarded_by}


@dataclass(kw_only=True)
class LibraryScan:
    name: str
    arch: str
    text_bytes: int
    instructions: int = 0
    undecodable: int = 0
    by_feature: Counter[str] = field(default_factory=Counter)  # instructions, under each one's highest feature
    functions_by_feature: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    function_highest: dict[str, str] = field(default_factory=dict)
    violations: list[Finding] = field(default_factory=list)
    violation_count: int = 0
    violating_functions: set[str] = field(default_factory=set)
    guarded: list[Finding] = field(default_factory=list)
    guarded_count: int = 0
    guarded_functions: set[str] = field(default_factory=set)


def scan_library(image: ElfImage, allowed: frozenset[str] | None, allow: tuple[Allow, ...] = ()) -> LibraryScan:
    """Decode every executable section of `image`; `allowed` None: only count."""
    dis = Disassembler(image.arch)
    rank = dis.tables.rank
    result = LibraryScan(name=image.name, arch=image.arch, text_bytes=image.text_bytes)
    key_cache: dict[frozenset[str], str] = {}
    addresses, names = image.symbol_addresses, image.symbol_names
    for section in image.sections:
        index = -1
        for address, _size, feats in dis.decode(section.data, section.address):
            result.instructions += 1
            if not feats:
                continue
            if UNDECODABLE in feats:
                result.undecodable += 1
                continue
            while index + 1 < len(addresses) and addresses[index + 1] <= address:
                index += 1
            function = names[index] if index >= 0 else f"(before any symbol in {section.name})"
            key = key_cache.get(feats)
            if key is None:
                key = key_cache[feats] = max(sorted(feats), key=rank)
            result.by_feature[key] += 1
            result.functions_by_feature[key].add(function)
            previous = result.function_highest.get(function)
            if previous is None or rank(key) > rank(previous):
                result.function_highest[function] = key
            if allowed is None or feats <= allowed:
                continue
            outside = tuple(sorted(feats - allowed, key=rank))
            guard = next((a for a in allow if a.matches(function)), None)
            offset = address - section.address
            if guard is not None:
                result.guarded_count += 1
                result.guarded_functions.add(function)
                if len(result.guarded) < MAX_LISTED:
                    result.guarded.append(Finding(library=image.name, function=function, address=address,
                                                  instruction=dis.describe(section.data, offset, address),
                                                  features=outside, guarded_by=guard.reason))
                continue
            result.violation_count += 1
            result.violating_functions.add(function)
            if len(result.violations) < MAX_LISTED:
                result.violations.append(Finding(library=image.name, function=function, address=address,
                                                 instruction=dis.describe(section.data, offset, address),
                                                 features=outside))
    return result
