"""Errors raised by cpukern's dispatcher (ops raise ValueError / TypeError)."""

from __future__ import annotations


class CpukernError(RuntimeError):
    """Base class of the dispatcher's errors."""


class UnsupportedISAError(CpukernError):
    """A forced variant needs CPU features this host lacks."""

    def __init__(self, name: str, missing: list[str]) -> None:
        self.name = name
        self.missing = list(missing)
        super().__init__(
            f"CPUKERN_ISA={name}: this CPU cannot run variant {name!r}; missing features: {', '.join(missing)}"
        )


class UnknownISAError(CpukernError):
    """A forced variant is not a known variant, or is not in this build."""

    def __init__(self, name: str, available: list[str], *, known: bool, env: str = "CPUKERN_ISA") -> None:
        self.name = name
        self.available = list(available)
        why = "is not built into this package" if known else "is not a variant of this arch"
        super().__init__(f"{env}={name}: {name!r} {why}; available: {', '.join(available) or 'none'}")


class NoVariantError(CpukernError):
    """The package holds no variant this CPU can run (a broken install)."""
