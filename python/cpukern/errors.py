"""Errors raised by cpukern's dispatcher (ops raise ValueError / TypeError).

They are the classes of the runtime cpubuild ships into the package; the
messages name CPUKERN_ISA / CPUKERN_DISABLE_ISA.
"""

from __future__ import annotations

from ._cpubuild.errors import DispatchError as CpukernError
from ._cpubuild.errors import NoVariantError, UnknownISAError, UnsupportedISAError

__all__ = ["CpukernError", "NoVariantError", "UnknownISAError", "UnsupportedISAError"]
