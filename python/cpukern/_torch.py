"""torch.ops.cpukern.*: the ops as torch operators, so they run under
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


# torch.library's low-level API (a schema, a CPU kernel, a fake), not custom_op:
# custom_op adds Python autograd and version-bump layers around the kernel, ~16 us
# a call - a one-token rms_norm through torch.ops took 22.4 us against 6.5, a
# compiled function of that op 42.5 us against 23.2 (Zen 4 class, 2026-12-07). The kernels bump
# the version counters of what they write, as custom_op's layer does (autograd's
# check for tensors modified after being saved; inference tensors have none), and
# have no backward: autograd's fallback for ops without one applies.
_libraries: list[Any] = []  # kept: a Library that is collected takes its operators with it


def _fragment() -> torch.library.Library:
    """A new fragment of the cpukern namespace (one per group of ops), kept alive."""
    library = torch.library.Library("cpukern", "FRAGMENT")  # type: ignore[no-untyped-call]
    _libraries.append(library)
    return library


def _op(library: torch.library.Library, schema: str, kernel: Callable[..., Any], fake: Callable[..., Any]) -> None:
    """Defines cpukern::<schema> in `library` with `kernel` for CPU tensors and `fake` for torch.compile."""
    name = schema.split("(", 1)[0]
    library.define(schema)  # type: ignore[no-untyped-call]
    library.impl(name, kernel, "CPU")  # type: ignore[no-untyped-call]
    torch.library.register_fake(f"cpukern::{name}", fake, lib=library)


def _no_output(*args: Any) -> None:
    return None


_bump = torch.autograd.graph.increment_version


def _define(
    rms_norm_impl: Callable[..., Any], fused_add_rms_norm_impl: Callable[..., Any],
    silu_and_mul_impl: Callable[..., Any], rotary_embedding_impl: Callable[..., Any],
) -> None:
    def rms_norm(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        rms_norm_impl(x, weight, eps, out)
        _bump((out,))

    def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        fused_add_rms_norm_impl(x, residual, weight, eps)
        _bump((x, residual))

    def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
        silu_and_mul_impl(x, out)
        _bump((out,))

    def rotary_embedding(
        positions: torch.Tensor, query: torch.Tensor, key: Optional[torch.Tensor], head_size: int,  # noqa: UP045
        cos_sin_cache: torch.Tensor, is_neox: bool,
    ) -> None:
        rotary_embedding_impl(positions, query, key, head_size, cos_sin_cache, is_neox)
        _bump((query,) if key is None else (query, key))

    library = _fragment()
    _op(library, "rms_norm(Tensor(a0!) out, Tensor x, Tensor weight, float eps) -> ()", rms_norm, _no_output)
    _op(library, "fused_add_rms_norm(Tensor(a0!) x, Tensor(a1!) residual, Tensor weight, float eps) -> ()",
        fused_add_rms_norm, _no_output)
    _op(library, "silu_and_mul(Tensor(a0!) out, Tensor x) -> ()", silu_and_mul, _no_output)
    _op(library, "rotary_embedding(Tensor positions, Tensor(a1!) query, Tensor(a2!)? key, SymInt head_size, "
        "Tensor cos_sin_cache, bool is_neox) -> ()", rotary_embedding, _no_output)


def _define_gemm(
    pack_impl: Callable[..., Any], gemm_bf16_impl: Callable[..., Any], gemm_w8a8_impl: Callable[..., Any]
) -> None:
    def pack_b(b: torch.Tensor, layout: str) -> torch.Tensor:
        data: torch.Tensor = pack_impl(b, layout)
        return data

    def pack_b_fake(b: torch.Tensor, layout: str) -> torch.Tensor:
        k, n = b.shape if b.dim() == 2 else (0, 0)  # a bad b fails in the real op
        return b.new_empty((_packed.packed_nbytes(layout, k, n),), dtype=torch.uint8)

    # b: a plain [K, N] bfloat16 matrix, packed for the call
    def gemm_bf16(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        gemm_bf16_impl(a, b, out, None)
        _bump((out,))

    def gemm_bf16_packed(out: torch.Tensor, a: torch.Tensor, b_packed: torch.Tensor, k: int, n: int, layout: str) -> None:
        gemm_bf16_impl(a, _from_op(b_packed, k, n, layout), out, None)
        _bump((out,))

    def gemm_w8a8(
        out: torch.Tensor, a: torch.Tensor, a_scale: torch.Tensor, b_packed: torch.Tensor, b_scale: torch.Tensor,
        k: int, n: int, layout: str,
    ) -> None:
        gemm_w8a8_impl(a, a_scale, _from_op(b_packed, k, n, layout), b_scale, out, None)
        _bump((out,))

    library = _fragment()
    _op(library, "pack_b(Tensor b, str layout) -> Tensor", pack_b, pack_b_fake)
    _op(library, "gemm_bf16(Tensor(a0!) out, Tensor a, Tensor b) -> ()", gemm_bf16, _no_output)
    _op(library, "gemm_bf16_packed(Tensor(a0!) out, Tensor a, Tensor b_packed, SymInt k, SymInt n, str layout) -> ()",
        gemm_bf16_packed, _no_output)
    _op(library, "gemm_w8a8(Tensor(a0!) out, Tensor a, Tensor a_scale, Tensor b_packed, Tensor b_scale, SymInt k, "
        "SymInt n, str layout) -> ()", gemm_w8a8, _no_output)


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
