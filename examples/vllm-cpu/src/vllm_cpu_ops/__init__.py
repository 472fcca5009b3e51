"""vllm_cpu_ops: vLLM's own CPU kernels, one torch extension per CPU ISA variant.

The wheel holds vLLM's ``layernorm.cpp``, ``activation.cpp`` and
``pos_encoding.cpp`` (from its sdist, unmodified) compiled once per variant of
isa_matrix.toml. Importing this package makes cpubuild's dispatcher
(``vllm_cpu_ops._cpubuild``) load exactly one variant library with
``torch.ops.load_library``: the best this CPU runs, or the one
``VLLM_CPU_OPS_ISA=<variant>`` forces. The ops then live where vLLM's Python
code looks for them, ``torch.ops._C.*`` (vLLM's schemas):

    >>> import torch, vllm_cpu_ops
    >>> x = torch.randn(4, 4096, dtype=torch.bfloat16)
    >>> out = torch.empty_like(x)
    >>> torch.ops._C.rms_norm(out, x, torch.ones(4096, dtype=torch.bfloat16), 1e-6)

A variant this CPU cannot run (forced) is not loaded: the import succeeds and
``ops()`` raises UnsupportedISAError naming the missing features; below the
matrix's floor (AVX2 + F16C on x86) it raises NoVariantError likewise.
``vllm_cpu_ops.vllm_shim.install()`` makes ``import vllm._C`` (and vLLM's
``_C_AVX512`` / ``_C_AVX2``) resolve to the loaded variant.
"""

from __future__ import annotations

import torch

from ._cpubuild import (
    DispatchError,
    UnknownISAError,
    UnsupportedISAError,
    library,
    selected_isa,
    supported_variants,
)
from ._version import __version__

__all__ = [
    "OPS",
    "DispatchError",
    "UnknownISAError",
    "UnsupportedISAError",
    "__version__",
    "load_error",
    "ops",
    "selected_isa",
    "supported_variants",
]

# The ops this package registers in torch.ops._C (csrc/registration.cpp).
OPS = (
    "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "gelu_tanh", "gelu_new", "gelu_fast", "gelu_quick",
    "rms_norm", "fused_add_rms_norm", "rotary_embedding",
)

_load_error: DispatchError | None = None
try:
    library()  # registers torch.ops._C.* from the selected variant
except DispatchError as exc:  # kept for the first call: `python -m vllm_cpu_ops` still reports
    _load_error = exc


def load_error() -> DispatchError | None:
    """Why no variant was loaded (a forced variant this CPU lacks ...), or None."""
    return _load_error


def ops() -> torch._ops._OpNamespace:
    """torch.ops._C, after the dispatcher loaded a variant; raises its error otherwise."""
    if _load_error is not None:
        raise _load_error
    return torch.ops._C
