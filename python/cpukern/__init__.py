"""cpukern: LLM CPU kernels with a runtime ISA dispatcher.

Importing is cheap: the CPU is probed and a variant library loaded on first
use. `selected_isa()` tells which variant runs; `python -m cpukern` explains why.
"""

from __future__ import annotations

from ._dispatch import selected_isa, supported_variants
from ._version import __version__
from .errors import CpukernError, NoVariantError, UnknownISAError, UnsupportedISAError

__all__ = [
    "CpukernError",
    "NoVariantError",
    "UnknownISAError",
    "UnsupportedISAError",
    "__version__",
    "selected_isa",
    "supported_variants",
]
