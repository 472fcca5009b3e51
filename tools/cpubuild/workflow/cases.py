"""The emulated CPU cases each arch's wheel is tested under in CI: listed in
ci/emulation.toml (checked against the matrix), or derived from the hardware
data's QEMU models."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..hardware import hardware
from ..matrix import Matrix

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EMULATION = "emulation.toml"


@dataclass(frozen=True, kw_only=True)
class EmulationCase:
    arch: str
    cpu: str
    expect: str
    checks: bool = True


def derived_cases(matrix: Matrix) -> list[EmulationCase]:
    """The qemu models of the hardware data, weakest first, each kept when it shows
    the project's variants a set of the features they require that no earlier
    model showed (cortex-a53 and neoverse-n1 differ in dot product; Nehalem and
    SandyBridge in AVX, which avx2 requires though both select the baseline)."""
    cases = []
    for arch in matrix.arches:
        relevant = {f for v in matrix.variants_for(arch) for f in v.requires}
        seen: set[frozenset[str]] = set()
        for model in hardware().qemu.get(arch, ()):
            shown = frozenset(model.features & relevant)
            if shown not in seen:
                seen.add(shown)
                cases.append(EmulationCase(arch=arch, cpu=model.cpu, expect=matrix.best_for(arch, model.features).name))
    return cases


def load_cases(path: Path, matrix: Matrix) -> list[EmulationCase]:
    """ci/emulation.toml when the project lists its cases, every arch and variant
    checked against the matrix; else the cases derived from the hardware data."""
    if not path.is_file():
        return derived_cases(matrix)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: {exc}") from None
    if data.get("schema") != 1 or not isinstance(data.get("case"), list):
        raise UsageError(f"{path}: expected schema = 1 and [[case]] tables")
    cases = []
    for i, raw in enumerate(data["case"], 1):
        where = f"{path}: case #{i}"
        if not isinstance(raw, dict) or set(raw) - {"arch", "cpu", "expect", "checks"}:
            raise UsageError(f"{where}: keys are arch, cpu, expect and checks")
        arch, cpu, expect, checks = raw.get("arch"), raw.get("cpu"), raw.get("expect"), raw.get("checks", True)
        if not isinstance(arch, str):
            raise UsageError(f"{where}: arch must be a string")
        try:
            arch = hardware().resolve_arch(arch, matrix.arches, offered_by="isa_matrix.toml declares")
        except UsageError as exc:
            raise UsageError(f"{where}: {exc.message}") from None
        names = [v.name for v in matrix.variants_for(str(arch))]
        if expect not in names:
            raise UsageError(f"{where}: {expect!r} is not a variant of {arch} (known: {', '.join(names)})")
        if not isinstance(cpu, str) or not re.fullmatch(r"[A-Za-z0-9_.,=+-]+", cpu) or not isinstance(checks, bool):
            raise UsageError(f"{where}: cpu must be a QEMU model name (with ,prop=value options), checks a boolean")
        cases.append(EmulationCase(arch=str(arch), cpu=cpu, expect=str(expect), checks=checks))
    return cases
