"""Variant selection and feature decoding: pure functions, no I/O.

The dispatcher feeds them the manifest (written at build time from the
project's isa_matrix.toml and cpubuild's hardware data), the raw probe facts
and the environment; tests feed them made-up hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import NoVariantError, UnknownISAError, UnsupportedISAError

_REGISTERS = ("eax", "ebx", "ecx", "edx")
BASELINE = "baseline"  # <PREFIX>_ISA=baseline names the arch's baseline even where it is called otherwise (neon)


@dataclass(frozen=True, kw_only=True)
class RawProbe:
    """What the baseline probe read from the hardware and the OS."""

    cpuid: Mapping[tuple[int, int], tuple[int, int, int, int]] = field(default_factory=dict)
    xcr0: int | None = None  # None: OSXSAVE clear, XGETBV not executed
    hwcap: int = 0
    hwcap2: int = 0
    sysctl: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class FeatureReport:
    found: tuple[str, ...]
    not_found: dict[str, str]  # feature -> why


def decode_features(
    specs: Mapping[str, Mapping[str, Any]],
    raw: RawProbe,
    *,
    darwin: bool = False,
    permission: Callable[[str], bool] | None = None,
) -> FeatureReport:
    """Turns raw probe facts into feature names using the manifest's specs.

    `permission(name)` asks the OS for an extra grant (Linux AMX tile data);
    it is called at most once per name, only when the CPU and XCR0 agree.
    """
    found: list[str] = []
    missing: dict[str, str] = {}
    granted: dict[str, bool] = {}
    for name, spec in specs.items():
        why = _why_missing(spec, raw, darwin)
        if why is None and "permission" in spec:
            perm = str(spec["permission"])
            if perm not in granted:
                granted[perm] = bool(permission and permission(perm))
            if not granted[perm]:
                why = f"the OS refused the {perm} permission"
        if why is None:
            found.append(name)
        else:
            missing[name] = why
    return FeatureReport(found=tuple(found), not_found=missing)


def _why_missing(spec: Mapping[str, Any], raw: RawProbe, darwin: bool) -> str | None:
    if darwin:
        key = spec.get("sysctl")
        if key is None:
            return "not available on macOS"
        return None if raw.sysctl.get(str(key), 0) else f"sysctl {key} is 0"
    if "cpuid" in spec:
        leaf, sub, reg, bit = spec["cpuid"]
        regs = raw.cpuid.get((int(leaf), int(sub)), (0, 0, 0, 0))
        if not (regs[_REGISTERS.index(reg)] >> int(bit)) & 1:
            return "CPUID does not report it"
        if "version" in spec:
            vleaf, vsub, vreg, width, minimum = spec["version"]
            vregs = raw.cpuid.get((int(vleaf), int(vsub)), (0, 0, 0, 0))
            found = vregs[_REGISTERS.index(vreg)] & ((1 << int(width)) - 1)
            if found < int(minimum):
                return f"CPUID reports version {found}, not {minimum} or later"
        need = int(spec.get("xcr0", 0))
        if need:
            if raw.xcr0 is None:
                return "the OS has not enabled XSAVE (no XGETBV)"
            if raw.xcr0 & need != need:
                return f"the OS does not enable its register state (XCR0 {raw.xcr0:#x} lacks {need & ~raw.xcr0:#x})"
        return None
    for key, word in (("hwcap", raw.hwcap), ("hwcap2", raw.hwcap2)):
        if key in spec:
            return None if (word >> int(spec[key])) & 1 else f"AT_{key.upper()} bit {spec[key]} is clear"
    return "no way to detect it here"


@dataclass(frozen=True, kw_only=True)
class VariantStatus:
    name: str
    priority: int
    built: bool
    supported: bool
    missing: tuple[str, ...]
    reason: str  # why it was selected or rejected


@dataclass(frozen=True, kw_only=True)
class Selection:
    selected: str
    override: str | None
    disabled: tuple[str, ...]
    variants: tuple[VariantStatus, ...]


def lacking(requires: Iterable[str], have: Iterable[str]) -> tuple[str, ...]:
    """The one required-features check: what of `requires` the CPU (`have`) lacks, in order."""
    found = set(have)
    return tuple(f for f in requires if f not in found)


def env_names(env_prefix: str) -> tuple[str, str]:
    """The project's runtime variables: (<PREFIX>_ISA forces a variant, <PREFIX>_DISABLE_ISA
    removes some). The only place these names are spelled."""
    return f"{env_prefix}_ISA", f"{env_prefix}_DISABLE_ISA"


def parse_name_list(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").replace(";", ",").split(",") if item.strip()]


def select_variant(
    variants: Iterable[Mapping[str, Any]],
    host_features: Iterable[str],
    *,
    built: Iterable[str],
    forced: str | None = None,
    disabled: Iterable[str] = (),
    env_prefix: str,
    package: str = "this package",
) -> Selection:
    """The dispatcher contract.

    `variants`: every variant of the arch (name, priority, requires); `built`:
    the names whose libraries are present. Picks the highest priority variant
    that is built, not disabled and fully supported; `forced` must be built
    and supported, else UnknownISAError / UnsupportedISAError.
    """
    force_env, disable_env = env_names(env_prefix)
    have = set(host_features)
    present = set(built)
    off = set(disabled)
    table = sorted(variants, key=lambda v: int(v["priority"]), reverse=True)
    forced = forced or None
    names = [str(v["name"]) for v in table]
    if forced == BASELINE and forced not in names and table:  # every arch's baseline, whatever its name
        forced = str(table[-1]["name"])
    available = [n for n in reversed(names) if n in present]
    for name in sorted(off):  # a typo must not silently disable nothing
        if name not in names:
            raise UnknownISAError(name, available, known=False, env=disable_env)
    if forced is not None:
        if forced not in names or forced not in present:
            raise UnknownISAError(forced, available, known=forced in names, env=force_env)
        wanted = next(v for v in table if v["name"] == forced)
        short = lacking(wanted["requires"], have)
        if short:
            raise UnsupportedISAError(forced, list(short), env=force_env)
    statuses: list[VariantStatus] = []
    chosen: str | None = None
    for v in table:
        name = str(v["name"])
        missing = lacking(v["requires"], have)
        supported = not missing
        if name not in present:
            reason = "not built into this package"
        elif not supported:
            reason = "CPU lacks " + ", ".join(missing)
        elif forced is not None and name != forced:
            reason = f"{force_env}={forced} forces another variant"
        elif forced is None and name in off:
            reason = f"disabled by {disable_env}"
        elif chosen is not None:
            reason = f"lower priority than {chosen}"
        else:
            chosen = name
            reason = f"forced by {force_env}" if forced else "highest priority variant this CPU runs"
        statuses.append(
            VariantStatus(
                name=name, priority=int(v["priority"]), built=name in present, supported=supported,
                missing=missing, reason=reason,
            )
        )
    if chosen is None:
        lowest = statuses[-1] if statuses else None  # the arch's lowest variant: the baseline, or a declared floor
        if lowest is not None and lowest.built and not lowest.supported and forced is None:
            # a CPU below the project's floor: no kernel for it, by design (a baseline runs everywhere)
            raise NoVariantError(
                f"no variant for this CPU: {package} needs at least {lowest.name!r}, and this CPU lacks "
                f"{', '.join(lowest.missing)}", missing=list(lowest.missing), variants=tuple(statuses))
        raise NoVariantError(
            f"no usable {package} variant: " + "; ".join(f"{s.name}: {s.reason}" for s in statuses), variants=tuple(statuses)
        )
    return Selection(selected=chosen, override=forced, disabled=tuple(sorted(off)), variants=tuple(statuses))
