"""torch_ops: vLLM-style CPU ops as torch.ops, one torch extension per CPU ISA variant.

The wheel holds one extension library per variant of isa_matrix.toml; the
dispatcher cpubuild ships inside this package (``torch_ops._cpubuild``)
probes the CPU and loads exactly one of them with ``torch.ops.load_library``:
the best this CPU runs, or the one ``TORCH_OPS_ISA=<variant>`` forces
(``TORCH_OPS_DISABLE_ISA=a,b`` rules variants out). No other variant's
library is ever opened. ``python -m torch_ops`` shows the choice and why.

    >>> import torch, torch_ops
    >>> x = torch.randn(4, 4096, dtype=torch.bfloat16)
    >>> y = torch_ops.rms_norm(x, torch.ones(4096, dtype=torch.bfloat16), 1e-6)
    >>> torch.ops.torch_ops.silu_and_mul(torch.empty(4, 2048, dtype=torch.bfloat16), x)  # vLLM's form

A variant this CPU cannot run (forced with TORCH_OPS_ISA) is not loaded: the
import succeeds and the first op call raises UnsupportedISAError, which names
the missing CPU features.
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
    "DispatchError",
    "UnknownISAError",
    "UnsupportedISAError",
    "__version__",
    "rms_norm",
    "selected_isa",
    "silu_and_mul",
    "supported_variants",
]

_load_error: DispatchError | None = None
try:
    library()  # registers torch.ops.torch_ops.* from the selected variant
except DispatchError as exc:  # kept for the first call: `python -m torch_ops` still reports
    _load_error = exc

if _load_error is None:
    # Shapes only, for torch.compile / FakeTensor tracing: the ops write into `out`.
    @torch.library.register_fake("torch_ops::rms_norm")
    def _rms_norm_fake(out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
        return None

    @torch.library.register_fake("torch_ops::silu_and_mul")
    def _silu_and_mul_fake(out: torch.Tensor, input: torch.Tensor) -> None:
        return None


def _ops() -> torch._ops._OpNamespace:
    if _load_error is not None:
        raise _load_error
    return torch.ops.torch_ops


def rms_norm(input: torch.Tensor, weight: torch.Tensor, epsilon: float = 1e-6, *,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """input / sqrt(mean(input^2, -1) + epsilon) * weight, over the last dimension
    (float32 or bfloat16, computed in float32). Writes into `out` when given."""
    if out is None:
        out = torch.empty_like(input)
    _ops().rms_norm(out, input, weight, epsilon)
    return out


def silu_and_mul(input: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(input[..., :d]) * input[..., d:] for an input of 2d columns (SwiGLU's gate)."""
    if out is None:
        out = input.new_empty((*input.shape[:-1], input.shape[-1] // 2))
    _ops().silu_and_mul(out, input)
    return out
