"""cpukern: LLM CPU kernels with a runtime ISA dispatcher.

Importing is cheap (no numpy, torch, ctypes or json): the CPU is probed and
a variant library loaded on first use. `selected_isa()` tells which variant
runs; `python -m cpukern` explains why.
"""

from __future__ import annotations

import sys

from . import _process  # noqa: F401 (records the importing process)
from ._version import __version__
from .errors import CpukernError, NoVariantError, UnknownISAError, UnsupportedISAError

# Public names served from submodules, imported on first access (PEP 562).
_LAZY = {
    "selected_isa": "_dispatch",  # DISPATCHER's methods
    "supported_variants": "_dispatch",
    "rms_norm": "ops",
    "fused_add_rms_norm": "ops",
    "silu_and_mul": "ops",
    "rotary_embedding": "ops",
    "ops": None,
    "PackedWeights": "gemm",
    "gemm_bf16": "gemm",
    "gemm_w8a8": "gemm",
    "pack_b": "gemm",
    "pack_b_int8": "gemm",
    "gemm": None,
}

__all__ = [
    "CpukernError",
    "NoVariantError",
    "PackedWeights",
    "UnknownISAError",
    "UnsupportedISAError",
    "__version__",
    "fused_add_rms_norm",
    "gemm",
    "gemm_bf16",
    "gemm_w8a8",
    "ops",
    "pack_b",
    "pack_b_int8",
    "register_torch_ops",
    "rms_norm",
    "rotary_embedding",
    "selected_isa",
    "silu_and_mul",
    "supported_variants",
]


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'cpukern' has no attribute {name!r}")
    from importlib import import_module

    module_name = _LAZY[name]
    module = import_module(f".{module_name or name}", __name__)
    source = module.DISPATCHER if module_name == "_dispatch" else module
    value = module if module_name is None else getattr(source, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def register_torch_ops() -> None:
    """Registers the ops as torch.ops.cpukern.* (imports torch). Done
    automatically when torch is imported before cpukern and on the first op
    call with a torch tensor (eager or traced by torch.compile); call it to
    use torch.ops.cpukern.* directly before any of those happened."""
    from . import gemm, ops

    ops._register_torch_now()
    gemm._register_torch_now()


if hasattr(sys.modules.get("torch"), "library"):  # torch fully imported before cpukern
    register_torch_ops()
