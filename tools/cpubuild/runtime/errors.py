"""Errors the dispatcher raises. Each names where the request came from: an
environment variable with the project's prefix (``<PREFIX>_ISA=avx512``,
``<PREFIX>_DISABLE_ISA=...``) or a call (``load_variant('avx512')``)."""

from __future__ import annotations


class DispatchError(RuntimeError):
    """Base class of the dispatcher's errors."""


class UnsupportedISAError(DispatchError):
    """A forced variant needs CPU features this host lacks."""

    def __init__(self, name: str, missing: list[str], *, env: str = "ISA", source: str | None = None) -> None:
        self.name = name
        self.missing = list(missing)
        super().__init__(f"{source or f'{env}={name}'}: this CPU cannot run variant {name!r}; missing features: {', '.join(missing)}")


class UnknownISAError(DispatchError):
    """A forced (or disabled) variant is not a variant of this arch, or not in this build."""

    def __init__(self, name: str, available: list[str], *, known: bool, env: str = "ISA",
                 source: str | None = None) -> None:
        self.name = name
        self.available = list(available)
        why = "is not built into this package" if known else "is not a variant of this arch"
        super().__init__(f"{source or f'{env}={name}'}: {name!r} {why}; available: {', '.join(available) or 'none'}")


class NoVariantError(DispatchError):
    """The package holds no variant this CPU can run: a CPU below the project's
    floor (`missing` names what the lowest built variant needs), or a broken install."""

    def __init__(self, message: str, *, missing: list[str] | None = None, variants: tuple[object, ...] = ()) -> None:
        self.missing = list(missing or [])
        self.variants = variants  # the selection's VariantStatus rows, for reports
        super().__init__(message)


class ManifestError(ImportError):
    """The package's _manifest.json is missing, not JSON or not a manifest: the
    install is broken (an ImportError, so `import pkg` fails the usual way)."""
