"""cpukern's dispatcher: the runtime cpubuild ships into the package
(``cpukern._cpubuild``, with the manifest ``_manifest.json``) probes the CPU,
picks the variant (``CPUKERN_ISA`` / ``CPUKERN_DISABLE_ISA``, checked) and
loads its library. cpukern adds one thing: each variant library gets its
thread binding (``CPUKERN_OMP_THREADS_BIND``) before its pool starts, so
cpukern's modules use ``DISPATCHER`` from here (its public methods:
``selected_isa()``, ``load_variant(name)``, ``library()``, ``selection()``, ...).
"""

from __future__ import annotations

import ctypes

from ._cpubuild.dispatch import DISPATCHER

__all__ = ["DISPATCHER"]


def _bind_threads(variant: str, lib: ctypes.CDLL) -> None:
    from . import _threads

    _threads.configure(lib)  # CPUKERN_OMP_THREADS_BIND, before the pool starts


DISPATCHER.add_load_hook(_bind_threads)
