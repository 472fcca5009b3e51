"""torch.ops.cpukern.*: the ops as torch custom operators, so they run under
torch.compile (fake implementations give the compiler shapes; mutated
arguments are declared, so functionalization keeps the graph correct).

Imported only when torch is: by `import cpukern` when torch was imported
first, by the first op call with a torch tensor, or by
`cpukern.register_torch_ops()`.
"""

# No `from __future__ import annotations`: torch.library reads the real
# annotations of the op functions to build their schemas.
import threading
from typing import Any, Optional

import torch

from . import ops

_lock = threading.Lock()


def register() -> None:
    """Defines the torch.ops.cpukern.* operators (once per process)."""
    with _lock:
        if ops._torch_registered[0]:
            return
        if not hasattr(torch.ops.cpukern, "rms_norm"):
            _define()
        ops._torch_registered[0] = True


def _define() -> None:
    @torch.library.custom_op("cpukern::rms_norm", mutates_args=("out",), device_types="cpu")
    def rms_norm(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        ops._rms_norm(x, weight, eps, out)

    @rms_norm.register_fake
    def _(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        return None

    @torch.library.custom_op(
        "cpukern::fused_add_rms_norm", mutates_args=("x", "residual"), device_types="cpu"
    )
    def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        ops._fused_add_rms_norm(x, residual, weight, eps)

    @fused_add_rms_norm.register_fake
    def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        return None

    @torch.library.custom_op("cpukern::silu_and_mul", mutates_args=("out",), device_types="cpu")
    def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
        ops._silu_and_mul(x, out)

    @silu_and_mul.register_fake
    def _(out: torch.Tensor, x: torch.Tensor) -> None:
        return None

    @torch.library.custom_op("cpukern::rotary_embedding", mutates_args=("query", "key"), device_types="cpu")
    def rotary_embedding(
        positions: torch.Tensor, query: torch.Tensor, key: Optional[torch.Tensor], head_size: int,  # noqa: UP045
        cos_sin_cache: torch.Tensor, is_neox: bool,
    ) -> None:
        ops._rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)

    @rotary_embedding.register_fake
    def _(
        positions: torch.Tensor, query: torch.Tensor, key: Optional[torch.Tensor], head_size: int,  # noqa: UP045
        cos_sin_cache: torch.Tensor, is_neox: bool,
    ) -> None:
        return None


# The public functions' bodies while torch.compile traces them: allocate
# outputs with torch and call the registered operators.
def traced_rms_norm(x: Any, weight: Any, eps: float, out: Any) -> Any:
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    torch.ops.cpukern.rms_norm(out, x, weight, float(eps))
    return out


def traced_fused_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float) -> None:
    torch.ops.cpukern.fused_add_rms_norm(x, residual, weight, float(eps))


def traced_silu_and_mul(x: Any, out: Any) -> Any:
    if out is None:
        out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)
    torch.ops.cpukern.silu_and_mul(out, x)
    return out


def traced_rotary_embedding(
    positions: Any, query: Any, key: Any, head_size: int, cos_sin_cache: Any, is_neox: bool
) -> None:
    torch.ops.cpukern.rotary_embedding(positions, query, key, int(head_size), cos_sin_cache, bool(is_neox))
