"""The kernels' Python API, for numpy arrays and torch tensors alike.

Every op checks its arguments here (errors name the argument) and then calls
the C kernel of the selected variant through ctypes; the GIL is released
while the kernel runs. `use_variant(name)` runs ops on one given variant
(checked against the CPU first) and `use_reference()` on the scalar
reference kernels: the hooks the tests compare variants with.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import numbers
import os
import sys
from collections.abc import Iterator
from typing import Any

from . import _abi, _arrays, _memo
from ._abi import f32, i32, i64, ptr
from ._arrays import TORCH, Array, check_no_overlap, require_dtype, require_same_dtype, require_writable, rows, wrap
from ._dispatch import DISPATCHER
from ._memo import Plan

__all__ = [
    "FLOAT_DTYPES",
    "fused_add_rms_norm",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "use_reference",
    "use_variant",
]

FLOAT_DTYPES = ("float32", "bfloat16", "float16")

for _prefix in ("cpukern_", "cpukern_ref_"):
    _abi.signature(_prefix + "rms_norm", ptr, ptr, ptr, i64, i64, i64, i64, f32, i32)
    _abi.signature(_prefix + "fused_add_rms_norm", ptr, ptr, ptr, i64, i64, i64, i64, f32, i32)
    _abi.signature(_prefix + "silu_and_mul", ptr, ptr, i64, i64, i64, i64, i32)
    _abi.signature(
        _prefix + "rotary_embedding",
        ptr, i64, ptr, ptr, ptr, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i32, i32, i32,
    )
_abi.signature("cpukern_has_float16")

# (variant name or None for the dispatcher's choice, use the scalar reference)
_target: contextvars.ContextVar[tuple[str | None, bool]] = contextvars.ContextVar(
    "cpukern_target", default=(None, False)
)
_fast: dict[str, Any] = {}  # op -> bound C function of the selected variant
_fast_for: list[Any] = [None]  # the dispatcher selection _fast was bound under
_float16_ok: dict[int, bool] = {}


@contextlib.contextmanager
def use_variant(name: str) -> Iterator[None]:
    """Runs the ops in this block (this thread / context) on variant `name`.

    Raises UnknownISAError / UnsupportedISAError right away when the variant
    is not built or this CPU cannot run it."""
    DISPATCHER.load_variant(name)
    token = _target.set((name, False))
    try:
        yield
    finally:
        _target.reset(token)


@contextlib.contextmanager
def use_reference() -> Iterator[None]:
    """Runs the ops in this block on the scalar reference kernels of the
    arch's baseline variant (plain loops, one thread): the tests' oracle."""
    baseline = DISPATCHER.supported_variants()[0]
    DISPATCHER.load_variant(baseline)
    token = _target.set((baseline, True))
    try:
        yield
    finally:
        _target.reset(token)


def _kernel(op: str, dtype: str) -> Any:
    variant, reference = _target.get()
    if variant is None:
        selection = DISPATCHER.selection()  # cached; a new object after DISPATCHER.reset()
        if selection is not _fast_for[0]:
            _fast.clear()
            _fast_for[0] = selection
        fn = _fast.get(op)
        if fn is None:
            fn = _fast[op] = _abi.prepared("cpukern_" + op)
        lib = None
    else:
        lib = DISPATCHER.load_variant(variant)
        fn = _abi.prepared(("cpukern_ref_" if reference else "cpukern_") + op, lib)
    if dtype == "float16":
        _require_float16(lib if lib is not None else DISPATCHER.library(), variant or DISPATCHER.selected_isa())
    return fn


def _require_float16(lib: Any, variant: str) -> None:
    ok = _float16_ok.get(id(lib))
    if ok is None:
        ok = _float16_ok[id(lib)] = bool(_abi.function("cpukern_has_float16", lib)())
    if not ok:
        raise TypeError(f"dtype float16 is not supported on this platform (variant {variant} has no half-precision type)")


def _check(op: str, status: int) -> None:
    if status:
        raise RuntimeError(f"cpukern_{op} failed with status {status} after argument checks passed (a cpukern bug)")


def _execute(plan: Plan, out: Any, like: Any) -> tuple[Any, int]:
    """Runs a checked call (its status returned); a plan that allocated its
    output gets a fresh one (like `like`) when `out` is None."""
    args = plan.args
    if out is None and plan.out_shape is not None:
        out, args = _memo.bind(plan, out, like)
    if args is None:
        return out, 0
    status: int = _kernel(plan.op, plan.dtype)(args)
    if status == 2:
        raise TypeError(f"{plan.op}: dtype {plan.dtype} is not supported by this variant")
    return out, status


def _eps(eps: Any) -> float:
    if type(eps) is not float and (isinstance(eps, bool) or not isinstance(eps, numbers.Real)):
        raise TypeError(f"eps: expected a float, got {type(eps).__name__}")
    value = float(eps)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"eps: expected a finite value >= 0, got {value}")
    return value


def _empty(like: Array, shape: tuple[int, ...]) -> Any:
    if like.kind == TORCH:
        import torch

        return torch.empty(shape, dtype=like.obj.dtype, device=like.obj.device)
    import numpy as np

    return np.empty(shape, dtype=like.obj.dtype)


def _torch_ready(first: Array) -> None:
    if first.kind == TORCH and not _torch_registered[0]:
        _register_torch_now()


# set once torch.ops.cpukern.{rms_norm, ...} exist; _torch.py defines them
# around the implementations passed here (it never imports this module).
_torch_registered: list[bool] = [False]


def _register_torch_now() -> bool:
    from . import _torch

    _torch.register_ops(
        rms_norm=_rms_norm, fused_add_rms_norm=_fused_add_rms_norm, silu_and_mul=_silu_and_mul,
        rotary_embedding=_rotary_embedding,
    )
    _torch_registered[0] = True
    return True


# What torch._dynamo.assume_constant_result does, without importing torch:
# torch.compile runs this function for real when it traces a caller (the
# first op call of a process may come from a compiled function).
_register_torch_now._dynamo_marked_constant = True  # type: ignore[attr-defined]


_is_compiling: list[Any] = []  # torch.compiler.is_compiling, looked up once torch is there


def _tracing() -> bool:
    """True while torch.compile traces a caller (without importing torch)."""
    if not _is_compiling:
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "compiler"):
            return False
        _is_compiling.append(torch.compiler.is_compiling)
    return bool(_is_compiling[0]())


def _compiling() -> bool:
    """True while torch.compile traces a caller: route through torch.ops."""
    return _tracing() and (_torch_registered[0] or _register_torch_now())


# ---------------------------------------------------------------- rms_norm
def rms_norm(x: Any, weight: Any, eps: float = 1e-6, *, out: Any = None) -> Any:
    """out = x / sqrt(mean(x**2, -1) + eps) * weight over the last dimension.

    x: [..., hidden] float32 / bfloat16 / float16, last dimension contiguous
    (any row stride); weight: [hidden], same dtype; out: like x (allocated
    when None; may be x itself for an in-place norm). Returns out. Results
    are rounded to nearest; a bfloat16 tie (rare: ~1 in 10^5 values) goes to
    even, or away from zero on the x86 variants without AVX-512 BF16 (one
    integer add there)."""
    if _compiling():
        from . import _torch

        return _torch.traced_rms_norm(x, weight, eps, out)
    return _rms_norm(x, weight, eps, out)


def _hidden(a: Array) -> int:
    if a.ndim == 0:
        raise ValueError(f"{a.name}: expected at least 1 dimension [..., hidden], got a scalar")
    hidden = a.shape[-1]
    if hidden == 0:
        raise ValueError(f"{a.name}: the hidden dimension (last) is empty")
    return hidden


def _weight(weight: Any, like: Array, hidden: int) -> Array:
    wa = wrap(weight, "weight", like.kind)
    require_same_dtype(wa, like)
    if wa.shape != (hidden,):
        raise ValueError(f"weight: expected shape ({hidden},) to match the hidden size of {like.name}, got {wa.shape}")
    if hidden > 1 and wa.strides[0] != 1:
        raise ValueError(f"weight: must be contiguous, got stride {wa.strides[0]}")
    return wa


def _rms_norm(x: Any, weight: Any, eps: Any, out: Any) -> Any:
    key, plan = _memo.lookup("rms_norm", (x, weight, out), (eps,))
    if plan is None:
        out, plan = _plan_rms_norm(x, weight, eps, out)
        _memo.put(key, plan)
    out, status = _execute(plan, out, x)
    _check("rms_norm", status)
    return out


def _plan_rms_norm(x: Any, weight: Any, eps: Any, out: Any) -> tuple[Any, Plan]:
    xa = wrap(x, "x")
    _torch_ready(xa)
    require_dtype(xa, FLOAT_DTYPES)
    hidden = _hidden(xa)
    n, x_stride = rows(xa)
    wa = _weight(weight, xa, hidden)
    epsf = _eps(eps)
    allocated = out is None
    if allocated:
        out = _empty(xa, xa.shape)
        oa = wrap(out, "out")
    else:
        oa = wrap(out, "out", xa.kind)
        require_same_dtype(oa, xa)
        if oa.shape != xa.shape:
            raise ValueError(f"out: expected shape {xa.shape} like x, got {oa.shape}")
        require_writable(oa)
        check_no_overlap(oa, (xa, wa), allow_alias=xa)
    _, out_stride = rows(oa)
    code = _abi.DTYPE_CODES[xa.dtype]
    args = (oa.ptr, xa.ptr, wa.ptr, n, hidden, x_stride, out_stride, epsf, code) if n else None
    return out, _memo.plan("rms_norm", xa.dtype, args, xa.shape if allocated else None, 0)


# ---------------------------------------------------------------- fused_add_rms_norm
def fused_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6) -> None:
    """In place, vLLM semantics: residual += x (rounded to the dtype), then
    x = rms_norm(residual) * weight (its ties as rms_norm's; residual's to
    even). x, residual: [..., hidden], same shape and dtype, both writable,
    not overlapping; weight: [hidden]."""
    if _compiling():
        from . import _torch

        _torch.traced_fused_add_rms_norm(x, residual, weight, eps)
        return
    _fused_add_rms_norm(x, residual, weight, eps)


def _fused_add_rms_norm(x: Any, residual: Any, weight: Any, eps: Any) -> None:
    key, plan = _memo.lookup("fused_add_rms_norm", (x, residual, weight), (eps,))
    if plan is None:
        plan = _plan_fused_add_rms_norm(x, residual, weight, eps)
        _memo.put(key, plan)
    _check("fused_add_rms_norm", _execute(plan, x, x)[1])


def _plan_fused_add_rms_norm(x: Any, residual: Any, weight: Any, eps: Any) -> Plan:
    xa = wrap(x, "x")
    _torch_ready(xa)
    require_dtype(xa, FLOAT_DTYPES)
    hidden = _hidden(xa)
    ra = wrap(residual, "residual", xa.kind)
    require_same_dtype(ra, xa)
    if ra.shape != xa.shape:
        raise ValueError(f"residual: expected shape {xa.shape} like x, got {ra.shape}")
    n, x_stride = rows(xa)
    _, res_stride = rows(ra)
    wa = _weight(weight, xa, hidden)
    epsf = _eps(eps)
    require_writable(xa)
    require_writable(ra)
    check_no_overlap(xa, (ra, wa))
    check_no_overlap(ra, (wa,))
    code = _abi.DTYPE_CODES[xa.dtype]
    args = (xa.ptr, ra.ptr, wa.ptr, n, hidden, x_stride, res_stride, epsf, code) if n else None
    return _memo.plan("fused_add_rms_norm", xa.dtype, args)


# ---------------------------------------------------------------- silu_and_mul
def silu_and_mul(x: Any, *, out: Any = None) -> Any:
    """out = silu(x[..., :d]) * x[..., d:] with x: [..., 2 * d]; out: [..., d]
    (allocated when None, must not overlap x). Returns out."""
    if _compiling():
        from . import _torch

        return _torch.traced_silu_and_mul(x, out)
    return _silu_and_mul(x, out)


# 16-bit silu_and_mul on x86 reads silu from a 64K-entry table (by gathers;
# the SSE2 baseline by scalar loads, always) unless Linux reports the Gather
# Data Sampling mitigation or the core is AMD's
# (csrc/kernels/activation.cpp, use_silu_table); "0" / "1" force it.
SILU_TABLE_ENV = "CPUKERN_SILU_LUT"


def _silu_and_mul(x: Any, out: Any) -> Any:
    key, plan = _memo.lookup("silu_and_mul", (x, out), ())
    if plan is None:
        out, plan = _plan_silu_and_mul(x, out)
        _memo.put(key, plan)
    out, status = _execute(plan, out, x)
    if status == _abi.STATUS_EENV:  # the kernel read the override: no os.environ.get per call (~1.3 us unset)
        value = os.environ.get(SILU_TABLE_ENV, "")
        raise ValueError(f"{SILU_TABLE_ENV}={value!r}: expected 0 or 1 (or unset: by host)")
    _check("silu_and_mul", status)
    return out


def _plan_silu_and_mul(x: Any, out: Any) -> tuple[Any, Plan]:
    xa = wrap(x, "x")
    _torch_ready(xa)
    require_dtype(xa, FLOAT_DTYPES)
    if xa.ndim == 0:
        raise ValueError("x: expected at least 1 dimension [..., 2 * d], got a scalar")
    width = xa.shape[-1]
    if width % 2:
        raise ValueError(f"x: the last dimension must be even (gate and up halves), got {width}")
    d = width // 2
    n, x_stride = rows(xa)
    shape = (*xa.shape[:-1], d)
    allocated = out is None
    if allocated:
        out = _empty(xa, shape)
        oa = wrap(out, "out")
    else:
        oa = wrap(out, "out", xa.kind)
        require_same_dtype(oa, xa)
        if oa.shape != shape:
            raise ValueError(f"out: expected shape {shape} (x's with the last dimension halved), got {oa.shape}")
        require_writable(oa)
        check_no_overlap(oa, (xa,))
    _, out_stride = rows(oa)
    code = _abi.DTYPE_CODES[xa.dtype]
    args = (oa.ptr, xa.ptr, n, d, x_stride, out_stride, code) if n and d else None
    return out, _memo.plan("silu_and_mul", xa.dtype, args, shape if allocated else None, 0)


# ---------------------------------------------------------------- rotary_embedding
def rotary_embedding(
    positions: Any, query: Any, key: Any, head_size: int, cos_sin_cache: Any, is_neox: bool = True
) -> None:
    """Rotary position embedding in place on query and key (vLLM semantics).

    positions: int64 [...] (token positions, e.g. [num_tokens]);
    query: [..., num_heads * head_size] or [..., num_heads, head_size] whose
    leading dimensions equal positions.shape; key: likewise with its own head
    count, or None; cos_sin_cache: [max_position, rot_dim] with cos in the
    first rot_dim/2 columns and sin in the rest (rot_dim even, <= head_size:
    only the first rot_dim lanes of every head rotate), dtype of query or
    float32. is_neox: rotate halves (GPT-NeoX) or interleaved pairs (GPT-J)."""
    if _compiling():
        from . import _torch

        _torch.traced_rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)
        return
    _rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)


def _heads(a: Array, positions: Array, head_size: int) -> tuple[int, int, int]:
    """(num_heads, token stride, head stride) of query / key."""
    lead = positions.ndim
    if a.shape[:lead] != positions.shape or a.ndim not in (lead + 1, lead + 2):
        raise ValueError(
            f"{a.name}: expected shape {positions.shape} + (num_heads * head_size,) or + (num_heads, head_size) "
            f"to match positions, got {a.shape}"
        )
    _arrays.require_contiguous_last(a)
    if a.ndim == lead + 1:
        width = a.shape[-1]
        if width % head_size:
            raise ValueError(f"{a.name}: last dimension {width} is not a multiple of head_size={head_size}")
        heads, head_stride = width // head_size, head_size
    else:
        if a.shape[-1] != head_size:
            raise ValueError(f"{a.name}: last dimension {a.shape[-1]} differs from head_size={head_size}")
        heads, head_stride = a.shape[-2], a.strides[-2]
    _, token_stride = _arrays.collapse(a, lead)
    return heads, token_stride, head_stride


def _rotary_embedding(
    positions: Any, query: Any, key: Any, head_size: Any, cos_sin_cache: Any, is_neox: Any
) -> None:
    memo_key, plan = _memo.lookup("rotary_embedding", (positions, query, key, cos_sin_cache), (head_size, is_neox))
    if plan is None:
        plan = _plan_rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)
        _memo.put(memo_key, plan)
    status = _execute(plan, query, query)[1]
    if status == 1:
        max_position = plan.args[13] if plan.args is not None else 0
        values = wrap(positions, "positions").obj.reshape(-1)
        bad = [int(v) for v in values.tolist() if not 0 <= int(v) < max_position][:3]
        raise ValueError(f"positions: values must lie in [0, {max_position}), found {bad} (rows of cos_sin_cache)")
    _check("rotary_embedding", status)


def _plan_rotary_embedding(
    positions: Any, query: Any, key: Any, head_size: Any, cos_sin_cache: Any, is_neox: Any
) -> Plan:
    pa = wrap(positions, "positions")
    _torch_ready(pa)
    require_dtype(pa, ("int64",))
    qa = wrap(query, "query", pa.kind)
    require_dtype(qa, FLOAT_DTYPES)
    ka = None if key is None else wrap(key, "key", pa.kind)
    if ka is not None:
        require_same_dtype(ka, qa)
    ca = wrap(cos_sin_cache, "cos_sin_cache", pa.kind)
    if ca.dtype not in (qa.dtype, "float32"):
        raise TypeError(f"cos_sin_cache: dtype {ca.dtype} must be query's ({qa.dtype}) or float32")
    if isinstance(head_size, bool) or not isinstance(head_size, numbers.Integral):
        raise TypeError(f"head_size: expected an int, got {type(head_size).__name__}")
    head_size = int(head_size)
    if head_size <= 0:
        raise ValueError(f"head_size: must be > 0, got {head_size}")
    if not isinstance(is_neox, (bool, int)):
        raise TypeError(f"is_neox: expected a bool, got {type(is_neox).__name__}")
    if ca.ndim != 2:
        raise ValueError(f"cos_sin_cache: expected shape (max_position, rot_dim), got {ca.shape}")
    max_position, rot_dim = ca.shape
    if rot_dim % 2 or rot_dim > head_size:
        raise ValueError(f"cos_sin_cache: rot_dim={rot_dim} (its last dimension) must be even and <= head_size={head_size}")
    _arrays.require_contiguous_last(ca)
    tokens, pos_stride = _arrays.collapse(pa, pa.ndim)
    heads, q_ts, q_hs = _heads(qa, pa, head_size)
    k_heads, k_ts, k_hs = _heads(ka, pa, head_size) if ka is not None else (0, 0, 0)
    require_writable(qa)
    check_no_overlap(qa, [a for a in (ka, ca, pa) if a is not None])
    if ka is not None:
        require_writable(ka)
        check_no_overlap(ka, (ca, pa))
    code = _abi.DTYPE_CODES[qa.dtype]
    args = (
        pa.ptr, pos_stride, qa.ptr, ka.ptr if ka is not None else None, ca.ptr, tokens, heads, k_heads, rot_dim, q_ts,
        q_hs, k_ts, k_hs, max_position, ca.strides[0], int(bool(is_neox)), code, _abi.DTYPE_CODES[ca.dtype],
    )
    return _memo.plan("rotary_embedding", qa.dtype, args if tokens else None)
