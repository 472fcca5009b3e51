"""bf16 and int8 (w8a8) matrix multiplication with weights packed once.

    packed = cpukern.pack_b(w)                    # w: [K, N] bfloat16, any strides
    y = cpukern.gemm_bf16(x, packed)              # x: [M, K] bfloat16 -> [M, N] float32
    y = cpukern.gemm_bf16(x, w)                   # the same, packing w for this call only
    y = cpukern.gemm_bf16(x, packed, out_dtype="bfloat16")

    q = cpukern.pack_b_int8(w_int8)               # [K, N] int8
    y = cpukern.gemm_w8a8(x_int8, x_scale, q, w_scale)   # (x @ w) * x_scale[:, None] * w_scale[None, :]

numpy arrays (bfloat16 from ml_dtypes) and torch tensors alike; the result is
of the same kind as `a`. Packing copies, so `b` may have any strides (pass
`weight.T` of a torch Linear weight). `a` and `out` need a contiguous last
dimension; any row stride is accepted without a copy (a column slice, every
other row); anything else is a ValueError naming the argument.

The packed layout depends on the variant's micro-kernel (panel width, k
grouping, padding): a `PackedWeights` records the layout it was packed for and
is checked against the variant that runs the product; after switching
variants (CPUKERN_ISA, `ops.use_variant`) pack again.

With torch tensors the calls also run under torch.compile: while it traces,
they call the operators torch.ops.cpukern.{pack_b, gemm_bf16,
gemm_bf16_packed, gemm_w8a8} (see _torch.py); the packed bytes are a uint8
tensor (`PackedWeights.data`) that the operators read with the layout text.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from . import _abi, _memo, ops
from ._abi import i32, i64, ptr
from ._arrays import TORCH, Array, check_no_overlap, kind_of, require_dtype, require_writable, wrap
from ._dispatch import DISPATCHER
from ._packed import OUT_DTYPES, PackedWeights, b_type_error, dtype_name, layout_fields, packed_nbytes

__all__ = ["PackedWeights", "gemm_bf16", "gemm_w8a8", "pack_b", "pack_b_int8"]

_KIND_CODE = {"bfloat16": 0, "int8": 1}

_abi.signature("cpukern_gemm_layout", i32, restype=ctypes.c_char_p)
_abi.signature("cpukern_gemm_kernel", i32, i64, restype=ctypes.c_char_p)
_abi.signature("cpukern_gemm_packed_bytes", i32, i64, i64, restype=ctypes.c_int64)
_abi.signature("cpukern_gemm_pack_b", i32, ptr, i64, i64, i64, i64, ptr)
_abi.signature("cpukern_gemm_bf16", ptr, i64, ptr, i64, i64, i64, ptr, i64, i32)
_abi.signature("cpukern_gemm_w8a8", ptr, i64, ptr, ptr, ptr, i64, i64, i64, ptr, i64, i32)


# Micro-kernels chosen by CPU vendor from 16 rows on (csrc/kernels/gemm.cpp),
# or forced; variants without the choice ignore them: the avx512bf16
# variant's bf16 kernel (widen_bf16), and how the avx2 / avx512 variants' int8
# kernel (the baseline's from 64 rows) adds its int32 sums (int8_float_sums:
# as floats on AMD's cores).
BF16_KERNEL_ENV = "CPUKERN_GEMM_BF16"
BF16_KERNELS = ("vdpbf16ps", "widened")
INT8_SUMS_ENV = "CPUKERN_GEMM_INT8_SUMS"
INT8_SUMS = ("float", "int")
_KERNEL_ENVS = {"bfloat16": (BF16_KERNEL_ENV, BF16_KERNELS), "int8": (INT8_SUMS_ENV, INT8_SUMS)}


_BF16_M_SLOT = 3  # cpukern_gemm_bf16's M, among the plan's slots
_W8A8_M_SLOT = 5  # cpukern_gemm_w8a8's


def _check_kernel_env(dtype: str) -> None:
    name, allowed = _KERNEL_ENVS[dtype]
    value = os.environ.get(name, "")
    if value and value not in allowed:
        raise ValueError(f"{name}={value!r}: expected one of {', '.join(allowed)} (or unset: by CPU)")


def _variant() -> tuple[str, Any]:
    """The variant ops run on here: `ops.use_variant`'s, else the dispatcher's."""
    name = _variant_name()
    return name, DISPATCHER.load_variant(name)


def _variant_name() -> str:
    """The name of _variant(): a product's plan holds the variant's function."""
    return ops._target.get()[0] or DISPATCHER.selection().selected


def packed_layout(dtype: str) -> tuple[str, str]:
    """(variant, packed layout text) for `dtype` ("bfloat16" / "int8") on the
    variant ops run on here: the `layout` argument of torch.ops.cpukern.*."""
    name, lib = _variant()
    layout: bytes = _abi.function("cpukern_gemm_layout", lib)(_KIND_CODE[dtype])
    return name, layout.decode()


# torch.compile runs it for real while tracing (torch._dynamo.assume_constant_
# result without importing torch): the layout is a constant of the graph, and
# the operators check it against the running variant on every call.
packed_layout._dynamo_marked_constant = True  # type: ignore[attr-defined]


def kernel_name(dtype: str, m: int) -> str:
    """The micro-kernel the running variant uses for `m` rows (e.g. 'vdpbf16ps')."""
    _check_kernel_env(dtype)
    _, lib = _variant()
    name: bytes = _abi.function("cpukern_gemm_kernel", lib)(_KIND_CODE[dtype], m)
    return name.decode()


def _matrix(a: Array) -> tuple[int, int]:
    if a.ndim != 2:
        raise ValueError(f"{a.name}: expected a 2-D matrix, got shape {a.shape}")
    return a.shape[0], a.shape[1]


def _row_stride(a: Array) -> int:
    """Row stride in elements; the last dimension must be contiguous."""
    rows, cols = a.shape
    if cols > 1 and a.strides[1] != 1:
        raise ValueError(
            f"{a.name}: the last dimension must be contiguous (stride 1), got strides {a.strides}; "
            "pass a contiguous copy (np.ascontiguousarray / .contiguous())"
        )
    if rows > 1 and a.strides[0] < cols:
        raise ValueError(f"{a.name}: rows overlap (row stride {a.strides[0]} < {cols} columns)")
    return a.strides[0] if rows > 1 else cols


def _vector(v: Any, name: str, kind: str, length: int, what: str) -> Array:
    va = wrap(v, name, kind)
    require_dtype(va, ("float32",))
    if va.shape != (length,):
        raise ValueError(f"{name}: expected shape ({length},) ({what}), got {va.shape}")
    if length > 1 and va.strides[0] != 1:
        raise ValueError(f"{name}: must be contiguous, got stride {va.strides[0]}")
    return va


def _empty(kind: str, shape: tuple[int, int], dtype: str) -> Any:
    if kind == TORCH:
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype))
    import numpy as np

    if dtype == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError("out_dtype: bfloat16 numpy output needs the ml_dtypes package") from None
        return np.empty(shape, dtype=ml_dtypes.bfloat16)
    return np.empty(shape, dtype=np.float32)


def _byte_buffer(kind: str, nbytes: int) -> tuple[Any, int]:
    if kind == TORCH:
        import torch

        t = torch.empty(max(nbytes, 1), dtype=torch.uint8)
        return t, int(t.data_ptr())
    import numpy as np

    arr = np.empty(max(nbytes, 1), dtype=np.uint8)
    return arr, int(arr.ctypes.data)


# ---------------------------------------------------------------- torch.ops
# set once torch.ops.cpukern.{pack_b, gemm_*} exist; _torch.py defines them
# around the implementations passed here (it never imports this module).
_torch_registered: list[bool] = [False]


def _register_torch_now() -> bool:
    from . import _torch

    _torch.register_gemm(pack_b=pack_for_layout, gemm_bf16=_gemm_bf16, gemm_w8a8=_gemm_w8a8)
    _torch_registered[0] = True
    return True


_register_torch_now._dynamo_marked_constant = True  # type: ignore[attr-defined]  # as ops._register_torch_now


def _torch_ready(first: Array) -> None:
    if first.kind == TORCH and not _torch_registered[0]:
        _register_torch_now()


def _compiling() -> bool:
    """True while torch.compile traces a caller: route through torch.ops."""
    return ops._tracing() and (_torch_registered[0] or _register_torch_now())


# ---------------------------------------------------------------- packing
def pack_b(b: Any) -> PackedWeights:
    """Packs a [K, N] bfloat16 weight (any strides) for gemm_bf16."""
    return _pack_public(b, "bfloat16")


def pack_b_int8(b: Any) -> PackedWeights:
    """Packs a [K, N] int8 weight (any strides) for gemm_w8a8."""
    return _pack_public(b, "int8")


def _pack_public(b: Any, dtype: str) -> PackedWeights:
    if _compiling():
        from . import _torch

        variant, layout = packed_layout(dtype)  # a graph constant; the op checks it when it runs
        return _torch.traced_pack_b(b, dtype, variant, layout)
    return _pack(b, dtype)


def _pack(b: Any, dtype: str, kind: str | None = None, layout: str | None = None) -> PackedWeights:
    """Packs b for the running variant; `layout` (from torch.ops) must be its layout."""
    ba = wrap(b, "b", kind)
    _torch_ready(ba)
    require_dtype(ba, (dtype,))
    k, n = _matrix(ba)
    if k == 0 or n == 0:
        raise ValueError(f"b: expected a non-empty [K, N] matrix, got shape {ba.shape}")
    name, lib = _variant()
    code = _KIND_CODE[dtype]
    running = _abi.function("cpukern_gemm_layout", lib)(code).decode()
    if layout is not None and layout != running:
        raise ValueError(
            f"layout: {layout!r} was asked for, but variant {name!r} packs {dtype} as {running!r} "
            "(the variant changed since the layout was read: read it again)"
        )
    nbytes = int(_abi.function("cpukern_gemm_packed_bytes", lib)(code, k, n))
    data, dst = _byte_buffer(ba.kind, nbytes)
    status = _abi.function("cpukern_gemm_pack_b", lib)(code, ba.ptr, k, n, ba.strides[0], ba.strides[1], dst)
    if status:
        raise RuntimeError(f"cpukern_gemm_pack_b failed with status {status} (a cpukern bug)")
    return PackedWeights(dtype=dtype, k=k, n=n, variant=name, layout=running, data=data)


def pack_for_layout(b: Any, layout: str) -> Any:
    """The bytes of torch.ops.cpukern.pack_b(b, layout): b packed by the
    running variant, which must use `layout` (dtype from the layout)."""
    dtype = layout_fields(layout)[0]
    return _pack(b, dtype, layout=layout).data


def _packed(b: Any, dtype: str, a: Array, lib: Any, variant: str) -> tuple[PackedWeights, int]:
    """(packed weights, address of their bytes) for a product with `a` on `variant`;
    plain [K, N] weights are packed for this call."""
    k = a.shape[1]
    if not isinstance(b, PackedWeights):
        if kind_of(b) is None or dtype != "bfloat16":
            raise b_type_error(b, dtype)
        ba = wrap(b, "b", a.kind)
        require_dtype(ba, (dtype,))
        if ba.ndim == 2 and ba.shape[0] != k:
            raise ValueError(f"a: has {k} columns but b has K={ba.shape[0]} rows")
        pb = _pack(b, dtype, a.kind)
        return pb, pb.ptr
    if b.dtype != dtype:
        raise TypeError(f"b: packed {b.dtype} weights, this GEMM needs {dtype} (use the matching pack function)")
    layout: bytes = _abi.function("cpukern_gemm_layout", lib)(_KIND_CODE[dtype])
    if b.layout != layout.decode():
        by = f"packed by variant {b.variant!r}" if b.variant else "packed"
        raise ValueError(
            f"b: {by} (layout {b.layout}), but variant {variant!r} runs this product "
            f"(layout {layout.decode()}): pack the weights again under {variant!r}"
        )
    if b.k != k:
        raise ValueError(f"a: has {k} columns but b was packed with K={b.k} rows")
    return b, _checked_address(b)


def _checked_address(b: PackedWeights) -> int:
    """Address of b's bytes, after checking they can hold b's [k, n] matrix in its layout."""
    data, nbytes = b.data, packed_nbytes(b.layout, b.k, b.n)
    kind = kind_of(data)
    if kind == TORCH:
        import torch

        ok = data.dtype is torch.uint8 and data.dim() == 1 and data.is_contiguous() and data.is_cpu
        size = data.numel()
    else:
        ok = kind is not None and data.dtype.char == "B" and data.ndim == 1 and data.flags.c_contiguous
        size = data.size if ok else 0
    if not ok or size < nbytes:
        got = f"dtype {str(data.dtype).removeprefix('torch.')}, shape {tuple(data.shape)}" if kind is not None else type(data).__name__
        raise ValueError(
            f"b.data: expected {nbytes} contiguous uint8 bytes on the CPU (a [{b.k}, {b.n}] matrix in layout "
            f"{b.layout}), got {got}"
        )
    return b.ptr


def _output(out: Any, out_dtype: Any, a: Array, m: int, n: int) -> tuple[Any, Array, str]:
    if out is None:
        dtype = "float32" if out_dtype is None else dtype_name(out_dtype)
        out = _empty(a.kind, (m, n), dtype)
        return out, wrap(out, "out"), dtype
    oa = wrap(out, "out", a.kind)
    require_dtype(oa, OUT_DTYPES)
    if out_dtype is not None and dtype_name(out_dtype) != oa.dtype:
        raise TypeError(f"out: dtype {oa.dtype} differs from out_dtype={dtype_name(out_dtype)}")
    if oa.shape != (m, n):
        raise ValueError(f"out: expected shape ({m}, {n}), got {oa.shape}")
    require_writable(oa)
    check_no_overlap(oa, (a,))
    return out, oa, oa.dtype


def _memo_key(op: str, a: Any, b: Any, out: Any, scales: tuple[Any, ...], out_dtype: Any, variant: str) -> Any:
    """The memo key of a product with packed weights (None: check it in full);
    it names the variant, whose function the plan holds."""
    if type(b) is not PackedWeights:
        return None  # plain weights are packed per call
    return _memo.key(op, (a, out, b.data, *scales), (out_dtype, variant, b.memo_key))


def _run_planned(plan: _memo.Plan, out: Any, a: Any) -> Any:
    args = plan.args
    if out is None and plan.out_shape is not None:
        out, args = _memo.bind(plan, out, a)
    if args is not None:
        status = plan.call(args)
        if status:
            _raise_status("cpukern_" + plan.op, status)
    return out


def _raise_status(fn_name: str, status: int) -> None:
    if status == _abi.STATUS_ENOMEM:
        raise MemoryError(f"{fn_name}: out of memory for the packing buffers")
    raise RuntimeError(f"{fn_name} failed with status {status} after argument checks passed (a cpukern bug)")


# ---------------------------------------------------------------- products
def gemm_bf16(a: Any, b: Any, *, out: Any = None, out_dtype: Any = None) -> Any:
    """out[M, N] = a[M, K] @ b[K, N] with bfloat16 inputs, float32 accumulation.

    a: [M, K] bfloat16; b: from pack_b(), or a plain [K, N] bfloat16 matrix
    (any strides; packed for this call only); out_dtype: float32 (default)
    or bfloat16 (rounded to nearest even), or pass `out` ([M, N], float32 or
    bfloat16, contiguous last dimension). Returns out."""
    if _compiling():
        from . import _torch

        return _torch.traced_gemm_bf16(a, b, out, out_dtype)
    return _gemm_bf16(a, b, out, out_dtype)


def _gemm_bf16(a: Any, b: Any, out: Any, out_dtype: Any) -> Any:
    variant = _variant_name()
    key = _memo_key("gemm_bf16", a, b, out, (), out_dtype, variant)
    plan = _memo.find(key)
    if plan is None:
        # b's bytes (packed for this call when b is a plain matrix) live until the call
        out, plan, b = _plan_gemm_bf16(a, b, out, out_dtype, variant, DISPATCHER.load_variant(variant))
        _memo.put(key, plan)
    if plan.args is not None and plan.args[_BF16_M_SLOT] > 1:
        _check_kernel_env("bfloat16")  # ~1.3 us when unset (os.environ.get raises inside); a GEMV never reads it
    return _run_planned(plan, out, a)


def _plan_gemm_bf16(
    a: Any, b: Any, out: Any, out_dtype: Any, variant: str, lib: Any
) -> tuple[Any, _memo.Plan, PackedWeights]:
    aa = wrap(a, "a")
    _torch_ready(aa)
    require_dtype(aa, ("bfloat16",))
    m, k = _matrix(aa)
    lda = _row_stride(aa)
    pb, b_ptr = _packed(b, "bfloat16", aa, lib, variant)
    allocated = out is None
    out, oa, dtype = _output(out, out_dtype, aa, m, pb.n)
    args = (aa.ptr, lda, b_ptr, m, pb.n, k, oa.ptr, _row_stride(oa), _abi.DTYPE_CODES[dtype]) if m else None
    call = _abi.prepared("cpukern_gemm_bf16", lib)
    return out, _memo.plan("gemm_bf16", "bfloat16", args, (m, pb.n) if allocated else None, 6, dtype, call), pb


def gemm_w8a8(a: Any, a_scale: Any, b: PackedWeights, b_scale: Any, *, out: Any = None, out_dtype: Any = None) -> Any:
    """out[M, N] = (a @ b) * a_scale[:, None] * b_scale[None, :] in float32.

    a: [M, K] int8 activations; a_scale: [M] float32 per-token scales;
    b: from pack_b_int8() ([K, N] int8); b_scale: [N] float32 per-channel
    scales. The int8 products accumulate exactly in int32. out_dtype:
    float32 (default) or bfloat16, or pass `out`. Returns out."""
    if _compiling():
        from . import _torch

        return _torch.traced_gemm_w8a8(a, a_scale, b, b_scale, out, out_dtype)
    return _gemm_w8a8(a, a_scale, b, b_scale, out, out_dtype)


def _gemm_w8a8(a: Any, a_scale: Any, b: Any, b_scale: Any, out: Any, out_dtype: Any) -> Any:
    variant = _variant_name()
    key = _memo_key("gemm_w8a8", a, b, out, (a_scale, b_scale), out_dtype, variant)
    plan = _memo.find(key)
    if plan is None:
        out, plan = _plan_gemm_w8a8(a, a_scale, b, b_scale, out, out_dtype, variant, DISPATCHER.load_variant(variant))
        _memo.put(key, plan)
    if plan.args is not None and plan.args[_W8A8_M_SLOT] > 1:
        _check_kernel_env("int8")
    return _run_planned(plan, out, a)


def _plan_gemm_w8a8(
    a: Any, a_scale: Any, b: Any, b_scale: Any, out: Any, out_dtype: Any, variant: str, lib: Any
) -> tuple[Any, _memo.Plan]:
    aa = wrap(a, "a")
    _torch_ready(aa)
    require_dtype(aa, ("int8",))
    m, k = _matrix(aa)
    lda = _row_stride(aa)
    sa = _vector(a_scale, "a_scale", aa.kind, m, "one scale per row of a")
    pb, b_ptr = _packed(b, "int8", aa, lib, variant)
    sb = _vector(b_scale, "b_scale", aa.kind, pb.n, "one scale per column of b")
    allocated = out is None
    out, oa, dtype = _output(out, out_dtype, aa, m, pb.n)
    check_no_overlap(oa, (sa, sb))
    args = (
        (aa.ptr, lda, sa.ptr, b_ptr, sb.ptr, m, pb.n, k, oa.ptr, _row_stride(oa), _abi.DTYPE_CODES[dtype]) if m else None
    )
    call = _abi.prepared("cpukern_gemm_w8a8", lib)
    return out, _memo.plan("gemm_w8a8", "int8", args, (m, pb.n) if allocated else None, 8, dtype, call)
