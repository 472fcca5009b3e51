"""[tool.cpubuild.ci] variant-groups, checked against the matrix: which arches
fan out over several build jobs, and which variants each job builds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import UsageError
from ..hardware import hardware
from ..matrix import Matrix

WHERE = "pyproject.toml [tool.cpubuild.ci] variant-groups"


class VariantGroupsError(UsageError):
    """variant-groups names an unknown arch or variant, overlaps, or leaves a variant out."""


def fan_out(matrix: Matrix, records: Iterable[Mapping[str, str]], arches: list[str]) -> dict[str, list[list[str]]]:
    """arch -> its groups (variant names in matrix order). A baseline is left out
    (every partial builds it); a floor is built by the group that names it, or, if
    none does, by every group. Arches without groups are absent (one job each)."""
    groups: dict[str, list[list[str]]] = {}
    for index, record in enumerate(records, 1):
        where = f"{WHERE}: entry {index}"
        try:
            arch = str(hardware().resolve_arch(record["arch"], arches, offered_by="the workflow builds"))
        except UsageError as exc:
            raise VariantGroupsError(f"{where}: {exc.message}") from None
        known, lowest = _placeable(matrix, arch), matrix.baseline(arch)
        names = [n for n in (n.strip() for n in record["isa"].split(",")) if n and (n != lowest.name or lowest.floor)]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise VariantGroupsError(f"{where}: {unknown[0]!r} is not a variant of {arch} (known: {', '.join(known)})")
        if not names:
            raise VariantGroupsError(f"{where}: names no variant besides the baseline (every group builds that)")
        taken = {n for group in groups.get(arch, []) for n in group}
        if taken & set(names):
            raise VariantGroupsError(f"{where}: {sorted(taken & set(names))[0]!r} is already in another {arch} group")
        groups.setdefault(arch, []).append([n for n in known if n in names])
    for arch, mine in groups.items():
        lowest = matrix.baseline(arch)
        missing = [n for n in _placeable(matrix, arch) if n != lowest.name and all(n not in g for g in mine)]
        if missing:
            raise VariantGroupsError(f"{WHERE}: {arch}: {', '.join(missing)} in no group (each variant needs one)")
        if len(mine) < 2:
            raise VariantGroupsError(f"{WHERE}: {arch} has one group: fan out to two or more, or list none")
        if lowest.floor and all(lowest.name not in g for g in mine):
            groups[arch] = [[lowest.name, *g] for g in mine]  # no group names the floor: each builds it
    return groups


def _placeable(matrix: Matrix, arch: str) -> list[str]:
    """The variants a group may name: all but a baseline (a floor is a full variant one group can build)."""
    return [v.name for v in matrix.variants_for(arch) if not v.is_baseline or v.floor]
