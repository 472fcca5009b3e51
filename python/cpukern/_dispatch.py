"""cpukern's view of the dispatcher cpubuild ships into the package.

The runtime lives in ``cpukern._cpubuild`` (copied there by the build from
cpubuild, with the manifest ``_manifest.json``): it probes the CPU, picks the
variant (``CPUKERN_ISA`` / ``CPUKERN_DISABLE_ISA``, checked) and loads its
library. cpukern adds one thing: each variant library gets its thread
binding (``CPUKERN_OMP_THREADS_BIND``) before its pool starts.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from ._cpubuild.dispatch import DISPATCHER

__all__ = ["DISPATCHER", "check_runnable", "library", "load_variant", "manifest", "reset", "selected_isa",
           "selection", "supported_variants"]

PACKAGE_DIR: Path = DISPATCHER.package_dir
ENV_FORCE = "CPUKERN_ISA"
ENV_DISABLE = "CPUKERN_DISABLE_ISA"
_state: dict[str, Any] = DISPATCHER._state  # the runtime's caches (tests enter emulated libraries here)


def _bind_threads(variant: str, lib: ctypes.CDLL) -> None:
    from . import _threads

    _threads.configure(lib)  # CPUKERN_OMP_THREADS_BIND, before the pool starts


DISPATCHER.add_load_hook(_bind_threads)


def manifest() -> dict[str, Any]:
    """The build's manifest (written by cpubuild's CMake package)."""
    result: dict[str, Any] = DISPATCHER.manifest()
    return result


def built_variants() -> list[str]:
    """Variants the build made whose library file is really present."""
    result: list[str] = DISPATCHER.built_variants()
    return result


def selection() -> Any:
    """The dispatcher's decision under the current environment (cached; a new
    object after reset()): `.selected`, `.override`, `.variants`."""
    return DISPATCHER.selection()


def selected_isa() -> str:
    """Name of the variant cpukern uses on this host."""
    result: str = DISPATCHER.selected_isa()
    return result


def supported_variants() -> list[str]:
    """Built variants this CPU can run, lowest priority first."""
    result: list[str] = DISPATCHER.supported_variants()
    return result


def check_runnable(name: str) -> None:
    """Raises unless variant `name` is built and this CPU can run it."""
    DISPATCHER.check_runnable(name)


def load_variant(name: str) -> ctypes.CDLL:
    """The library of one variant, after checking the CPU runs it (cached)."""
    result: ctypes.CDLL = DISPATCHER.load_variant(name)
    return result


def library() -> ctypes.CDLL:
    """The selected variant's library."""
    result: ctypes.CDLL = DISPATCHER.library()
    return result


def reset() -> None:
    """Forget the cached decision (tests change CPUKERN_ISA between calls)."""
    DISPATCHER.reset()
