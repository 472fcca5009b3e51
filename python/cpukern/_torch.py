"""torch.ops.cpukern.*: the ops as torch custom operators, so they run under
torch.compile (fake implementations give the compiler shapes; mutated
arguments are declared, so functionalization keeps the graph correct).

Packed GEMM weights cross the operator boundary as their bytes, a uint8
tensor, plus (k, n, layout text): pack_b(b, layout) -> bytes, whose fake
computes the byte count from the layout, and the products read them.
`cpukern.PackedWeights` carries the same four things, so torch.compile traces
it like any object holding a tensor (its fields become graph constants).

Imported only when torch is: by `import cpukern` when torch was imported
first, by the first op call with a torch tensor, or by
`cpukern.register_torch_ops()`. It stands below ops.py and gemm.py: they pass
it their implementations (register_ops / register_gemm) and call its traced_*
bodies; it imports only `_packed` (no import cycle).
"""

# No `from __future__ import annotations`: torch.library reads the real
# annotations of the op functions to build their schemas.
import threading
from collections.abc import Callable
from typing import Any, Optional

import torch

from . import _packed

_lock = threading.Lock()


def register_ops(
    *, rms_norm: Callable[..., Any], fused_add_rms_norm: Callable[..., Any], silu_and_mul: Callable[..., Any],
    rotary_embedding: Callable[..., Any],
) -> None:
    """Defines torch.ops.cpukern.{rms_norm, fused_add_rms_norm, silu_and_mul,
    rotary_embedding} around ops.py's implementations (once per process)."""
    with _lock:
        if not hasattr(torch.ops.cpukern, "rms_norm"):
            _define(rms_norm, fused_add_rms_norm, silu_and_mul, rotary_embedding)


def register_gemm(*, pack_b: Callable[..., Any], gemm_bf16: Callable[..., Any], gemm_w8a8: Callable[..., Any]) -> None:
    """Defines torch.ops.cpukern.{pack_b, gemm_bf16, gemm_bf16_packed,
    gemm_w8a8} around gemm.py's implementations (once per process)."""
    with _lock:
        if not hasattr(torch.ops.cpukern, "gemm_bf16_packed"):
            _define_gemm(pack_b, gemm_bf16, gemm_w8a8)


def _define(
    rms_norm_impl: Callable[..., Any], fused_add_rms_norm_impl: Callable[..., Any],
    silu_and_mul_impl: Callable[..., Any], rotary_embedding_impl: Callable[..., Any],
) -> None:
    @torch.library.custom_op("cpukern::rms_norm", mutates_args=("out",), device_types="cpu")
    def rms_norm(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        rms_norm_impl(x, weight, eps, out)

    @rms_norm.register_fake
    def _(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        return None

    @torch.library.custom_op(
        "cpukern::fused_add_rms_norm", mutates_args=("x", "residual"), device_types="cpu"
    )
    def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        fused_add_rms_norm_impl(x, residual, weight, eps)

    @fused_add_rms_norm.register_fake
    def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        return None

    @torch.library.custom_op("cpukern::silu_and_mul", mutates_args=("out",), device_types="cpu")
    def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
        silu_and_mul_impl(x, out)

    @silu_and_mul.register_fake
    def _(out: torch.Tensor, x: torch.Tensor) -> None:
        return None

    @torch.library.custom_op("cpukern::rotary_embedding", mutates_args=("query", "key"), device_types="cpu")
    def rotary_embedding(
        positions: torch.Tensor, query: torch.Tensor, key: Optional[torch.Tensor], head_size: int,  # noqa: UP045
        cos_sin_cache: torch.Tensor, is_neox: bool,
    ) -> None:
        rotary_embedding_impl(positions, query, key, head_size, cos_sin_cache, is_neox)

    @rotary_embedding.register_fake
    def _(
        positions: torch.Tensor, query: torch.Tensor, key: Optional[torch.Tensor], head_size: int,  # noqa: UP045
        cos_sin_cache: torch.Tensor, is_neox: bool,
    ) -> None:
        return None


def _define_gemm(
    pack_impl: Callable[..., Any], gemm_bf16_impl: Callable[..., Any], gemm_w8a8_impl: Callable[..., Any]
) -> None:
    @torch.library.custom_op("cpukern::pack_b", mutates_args=(), device_types="cpu")
    def pack_b(b: torch.Tensor, layout: str) -> torch.Tensor:
        data: torch.Tensor = pack_impl(b, layout)
        return data

    @pack_b.register_fake
    def _(b: torch.Tensor, layout: str) -> torch.Tensor:
        k, n = b.shape if b.dim() == 2 else (0, 0)  # a bad b fails in the real op
        return b.new_empty((_packed.packed_nbytes(layout, k, n),), dtype=torch.uint8)

    # b: a plain [K, N] bfloat16 matrix, packed for the call
    @torch.library.custom_op("cpukern::gemm_bf16", mutates_args=("out",), device_types="cpu")
    def gemm_bf16(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        gemm_bf16_impl(a, b, out, None)

    @gemm_bf16.register_fake
    def _(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        return None

    @torch.library.custom_op("cpukern::gemm_bf16_packed", mutates_args=("out",), device_types="cpu")
    def gemm_bf16_packed(
        out: torch.Tensor, a: torch.Tensor, b_packed: torch.Tensor, k: int, n: int, layout: str
    ) -> None:
        gemm_bf16_impl(a, _from_op(b_packed, k, n, layout), out, None)

    @gemm_bf16_packed.register_fake
    def _(out: torch.Tensor, a: torch.Tensor, b_packed: torch.Tensor, k: int, n: int, layout: str) -> None:
        return None

    @torch.library.custom_op("cpukern::gemm_w8a8", mutates_args=("out",), device_types="cpu")
    def gemm_w8a8(
        out: torch.Tensor, a: torch.Tensor, a_scale: torch.Tensor, b_packed: torch.Tensor, b_scale: torch.Tensor,
        k: int, n: int, layout: str,
    ) -> None:
        gemm_w8a8_impl(a, a_scale, _from_op(b_packed, k, n, layout), b_scale, out, None)

    @gemm_w8a8.register_fake
    def _(
        out: torch.Tensor, a: torch.Tensor, a_scale: torch.Tensor, b_packed: torch.Tensor, b_scale: torch.Tensor,
        k: int, n: int, layout: str,
    ) -> None:
        return None


def _from_op(data: torch.Tensor, k: int, n: int, layout: str) -> _packed.PackedWeights:
    dtype = _packed.layout_fields(layout)[0]
    return _packed.PackedWeights(dtype=dtype, k=k, n=n, variant="", layout=layout, data=data)


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


def traced_pack_b(b: Any, dtype: str, variant: str, layout: str) -> _packed.PackedWeights:
    k, n = b.shape if b.dim() == 2 else (0, 0)  # a bad b fails in the op
    data = torch.ops.cpukern.pack_b(b, layout)
    return _packed.PackedWeights(dtype=dtype, k=k, n=n, variant=variant, layout=layout, data=data)


def _gemm_out(a: Any, n: Any, out: Any, out_dtype: Any) -> Any:
    """`out`, or a new [M, n] output (the op checks a's and out's shapes when it runs)."""
    dtype = torch.float32 if out_dtype is None else getattr(torch, _packed.dtype_name(out_dtype))
    if out is None:
        return torch.empty((a.shape[0] if a.dim() == 2 else 0, n), dtype=dtype, device=a.device)
    if out_dtype is not None and out.dtype != dtype:
        raise TypeError(f"out: dtype {out.dtype} differs from out_dtype={out_dtype}")
    return out


def _traced_packed(b: Any, dtype: str) -> Any:
    if not isinstance(b, _packed.PackedWeights):
        raise _packed.b_type_error(b, dtype)
    if not isinstance(b.data, torch.Tensor):
        raise TypeError("b: packed from a numpy array; pack a torch tensor to use it under torch.compile")
    return b


def traced_gemm_bf16(a: Any, b: Any, out: Any, out_dtype: Any) -> Any:
    if isinstance(b, torch.Tensor):
        out = _gemm_out(a, b.shape[1] if b.dim() == 2 else 0, out, out_dtype)
        torch.ops.cpukern.gemm_bf16(out, a, b)
        return out
    pb = _traced_packed(b, "bfloat16")
    out = _gemm_out(a, pb.n, out, out_dtype)
    torch.ops.cpukern.gemm_bf16_packed(out, a, pb.data, pb.k, pb.n, pb.layout)
    return out


def traced_gemm_w8a8(a: Any, a_scale: Any, b: Any, b_scale: Any, out: Any, out_dtype: Any) -> Any:
    pb = _traced_packed(b, "int8")
    out = _gemm_out(a, pb.n, out, out_dtype)
    torch.ops.cpukern.gemm_w8a8(out, a, a_scale, pb.data, b_scale, pb.k, pb.n, pb.layout)
    return out
