"""cpubuild's runtime dispatcher, copied into every package cpubuild builds.

In a built package this is ``<package>._cpubuild``; it reads the manifest the
build wrote (``<package>/_manifest.json``) and needs only the standard library.
Importing it is cheap: nothing is probed or loaded before the first call.

    from ._cpubuild import selected_isa, library, load_variant, supported_variants

Environment (PREFIX is the project's ``env-prefix``): ``<PREFIX>_ISA=<variant>``
forces a variant, checked against the CPU (UnsupportedISAError names the
missing features; UnknownISAError lists the available variants);
``<PREFIX>_DISABLE_ISA=a,b`` removes variants from consideration.
"""

from __future__ import annotations

from typing import Any

from .errors import DispatchError, NoVariantError, UnknownISAError, UnsupportedISAError

# Served by the package's Dispatcher (cpubuild.runtime.dispatch), imported on first use.
_DELEGATED = frozenset({
    "add_load_hook", "built_variants", "check_runnable", "host", "library", "library_path", "load_variant",
    "manifest", "reset", "selected_isa", "selection", "supported_variants", "variants",
})

__all__ = ["DispatchError", "NoVariantError", "UnknownISAError", "UnsupportedISAError", *sorted(_DELEGATED)]


def __getattr__(name: str) -> Any:
    if name == "dispatcher":
        from .dispatch import DISPATCHER

        return DISPATCHER
    if name in _DELEGATED:
        from .dispatch import DISPATCHER

        return getattr(DISPATCHER, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
