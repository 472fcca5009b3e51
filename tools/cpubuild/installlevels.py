"""Install-time CPU levels (hardware/install_levels.toml): what an installer with
PEP 825 wheel-variant support detects by itself, and which level a variant goes to.

A variant wheel of level L holds the baseline plus every variant placed at L or
below; the finer pick inside a level stays with the runtime dispatcher.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from .variantsjson import LABEL

DATA_FILE = Path(__file__).parent / "hardware" / "install_levels.toml"


@dataclass(frozen=True, kw_only=True)
class Level:
    value: str  # e.g. v3, 8.4a
    requires: frozenset[str]  # cpubuild features every CPU of the level has


@dataclass(frozen=True, kw_only=True)
class LevelScheme:
    """One arch's levels: `namespace :: feature :: value` properties, low to high."""

    arch: str
    namespace: str
    feature: str
    provider: str  # the provider variant.json must require for the installer to act
    levels: tuple[Level, ...]

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(level.value for level in self.levels)

    def rank(self, value: str) -> int:
        return self.values.index(value)

    def label(self, value: str) -> str:
        """The variant label of a level's wheel: x86_64_v3, aarch64_8.4a."""
        return f"{self.arch}_{value}"

    def property(self, value: str) -> str:
        return f"{self.namespace} :: {self.feature} :: {value}"

    def place(self, requires: Iterable[str]) -> str:
        """The level of a variant that names none: the highest level that brings a
        feature it requires (no CPU below that level can run it); the lowest level
        for a variant that requires none of them."""
        needed = set(requires)
        placed, below = self.levels[0].value, frozenset[str]()
        for level in self.levels:
            if (level.requires - below) & needed:
                placed = level.value
            below = level.requires
        return placed


def parse_install_levels(data: dict[str, Any]) -> dict[str, LevelScheme]:
    schemes = {}
    for arch, table in data.items():
        levels = tuple(Level(value=str(lv["value"]), requires=frozenset(lv.get("requires", ()))) for lv in table["levels"])
        scheme = LevelScheme(arch=arch, namespace=str(table["namespace"]), feature=str(table["feature"]),
                             provider=str(table["provider"]), levels=levels)
        for value in scheme.values:
            if not LABEL.fullmatch(scheme.label(value)):
                raise ValueError(f"{DATA_FILE}: label {scheme.label(value)!r} is not a PEP 825 variant label")
        schemes[arch] = scheme
    return schemes


@functools.cache
def install_levels() -> dict[str, LevelScheme]:
    """Arch -> its levels, for the arches an installer detects levels of."""
    return parse_install_levels(tomllib.loads(DATA_FILE.read_text(encoding="utf-8")))
