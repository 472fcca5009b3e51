"""bf16 and int8 (w8a8) matrix multiplication with weights packed once.

    packed = cpukern.pack_b(w)                    # w: [K, N] bfloat16, any strides
    y = cpukern.gemm_bf16(x, packed)              # x: [M, K] bfloat16 -> [M, N] float32
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
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from . import _abi, _dispatch
from ._abi import i32, i64, ptr
from ._arrays import TORCH, Array, check_no_overlap, require_dtype, require_writable, wrap

__all__ = ["PackedWeights", "gemm_bf16", "gemm_w8a8", "pack_b", "pack_b_int8"]

_KIND_CODE = {"bfloat16": 0, "int8": 1}
_OUT_DTYPES = ("float32", "bfloat16")
_STATUS_NO_MEMORY = 3

_abi.signature("cpukern_gemm_layout", i32, restype=ctypes.c_char_p)
_abi.signature("cpukern_gemm_kernel", i32, i64, restype=ctypes.c_char_p)
_abi.signature("cpukern_gemm_packed_bytes", i32, i64, i64, restype=ctypes.c_int64)
_abi.signature("cpukern_gemm_pack_b", i32, ptr, i64, i64, i64, i64, ptr)
_abi.signature("cpukern_gemm_bf16", ptr, i64, ptr, i64, i64, i64, ptr, i64, i32)
_abi.signature("cpukern_gemm_w8a8", ptr, i64, ptr, ptr, ptr, i64, i64, i64, ptr, i64, i32)


@dataclass(frozen=True, kw_only=True, eq=False)
class PackedWeights:
    """A [K, N] weight matrix packed for one variant's GEMM micro-kernel."""

    dtype: str  # "bfloat16" or "int8"
    k: int
    n: int
    variant: str  # the variant that packed it
    layout: str  # e.g. "bf16:nr16:kg2:kpad2:le"; any variant reporting it can use the data
    data: Any  # the bytes: a numpy uint8 array or a torch uint8 tensor
    ptr: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.k, self.n)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes) if hasattr(self.data, "nbytes") else int(self.data.numel())

    def __repr__(self) -> str:
        return f"PackedWeights(dtype={self.dtype}, shape=({self.k}, {self.n}), variant={self.variant}, layout={self.layout})"


def _variant() -> tuple[str, Any]:
    """The variant ops run on here: `ops.use_variant`'s, else the dispatcher's."""
    from .ops import _target

    name = _target.get()[0] or _dispatch.selected_isa()
    return name, _dispatch.load_variant(name)


def kernel_name(dtype: str, m: int) -> str:
    """The micro-kernel the running variant uses for `m` rows (e.g. 'vdpbf16ps')."""
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


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, str):
        name = dtype
    elif type(dtype).__module__.startswith("torch"):
        name = str(dtype).removeprefix("torch.")
    else:
        import numpy as np

        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"out_dtype: expected float32 or bfloat16, got {dtype!r}") from None
    if name not in _OUT_DTYPES:
        raise TypeError(f"out_dtype: expected float32 or bfloat16, got {dtype!r}")
    return name


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


# ---------------------------------------------------------------- packing
def pack_b(b: Any) -> PackedWeights:
    """Packs a [K, N] bfloat16 weight (any strides) for gemm_bf16."""
    return _pack(b, "bfloat16")


def pack_b_int8(b: Any) -> PackedWeights:
    """Packs a [K, N] int8 weight (any strides) for gemm_w8a8."""
    return _pack(b, "int8")


def _pack(b: Any, dtype: str) -> PackedWeights:
    ba = wrap(b, "b")
    require_dtype(ba, (dtype,))
    k, n = _matrix(ba)
    if k == 0 or n == 0:
        raise ValueError(f"b: expected a non-empty [K, N] matrix, got shape {ba.shape}")
    name, lib = _variant()
    code = _KIND_CODE[dtype]
    nbytes = int(_abi.function("cpukern_gemm_packed_bytes", lib)(code, k, n))
    data, dst = _byte_buffer(ba.kind, nbytes)
    status = _abi.function("cpukern_gemm_pack_b", lib)(code, ba.ptr, k, n, ba.strides[0], ba.strides[1], dst)
    if status:
        raise RuntimeError(f"cpukern_gemm_pack_b failed with status {status} (a cpukern bug)")
    layout: bytes = _abi.function("cpukern_gemm_layout", lib)(code)
    return PackedWeights(dtype=dtype, k=k, n=n, variant=name, layout=layout.decode(), data=data, ptr=dst)


def _packed(b: Any, dtype: str, k: int, lib: Any, variant: str) -> PackedWeights:
    if not isinstance(b, PackedWeights):
        packer = "pack_b" if dtype == "bfloat16" else "pack_b_int8"
        raise TypeError(f"b: expected the weights packed by cpukern.{packer}(), got {type(b).__name__}")
    if b.dtype != dtype:
        raise TypeError(f"b: packed {b.dtype} weights, this GEMM needs {dtype} (use the matching pack function)")
    layout: bytes = _abi.function("cpukern_gemm_layout", lib)(_KIND_CODE[dtype])
    if b.layout != layout.decode():
        raise ValueError(
            f"b: packed by variant {b.variant!r} (layout {b.layout}), but variant {variant!r} runs this product "
            f"(layout {layout.decode()}): pack the weights again under {variant!r}"
        )
    if b.k != k:
        raise ValueError(f"a: has {k} columns but b was packed with K={b.k} rows")
    return b


def _output(out: Any, out_dtype: Any, a: Array, m: int, n: int) -> tuple[Any, Array, str]:
    if out is None:
        dtype = "float32" if out_dtype is None else _dtype_name(out_dtype)
        out = _empty(a.kind, (m, n), dtype)
        return out, wrap(out, "out"), dtype
    oa = wrap(out, "out", a.kind)
    require_dtype(oa, _OUT_DTYPES)
    if out_dtype is not None and _dtype_name(out_dtype) != oa.dtype:
        raise TypeError(f"out: dtype {oa.dtype} differs from out_dtype={_dtype_name(out_dtype)}")
    if oa.shape != (m, n):
        raise ValueError(f"out: expected shape ({m}, {n}), got {oa.shape}")
    require_writable(oa)
    check_no_overlap(oa, (a,))
    return out, oa, oa.dtype


def _call(fn_name: str, lib: Any, *args: Any) -> None:
    status = _abi.function(fn_name, lib)(*args)
    if status == _STATUS_NO_MEMORY:
        raise MemoryError(f"{fn_name}: out of memory for the packing buffers")
    if status:
        raise RuntimeError(f"{fn_name} failed with status {status} after argument checks passed (a cpukern bug)")


# ---------------------------------------------------------------- products
def gemm_bf16(a: Any, b: PackedWeights, *, out: Any = None, out_dtype: Any = None) -> Any:
    """out[M, N] = a[M, K] @ b[K, N] with bfloat16 inputs, float32 accumulation.

    a: [M, K] bfloat16; b: from pack_b(); out_dtype: float32 (default) or
    bfloat16 (rounded to nearest even), or pass `out` ([M, N], float32 or
    bfloat16, contiguous last dimension). Returns out."""
    aa = wrap(a, "a")
    require_dtype(aa, ("bfloat16",))
    m, k = _matrix(aa)
    lda = _row_stride(aa)
    variant, lib = _variant()
    pb = _packed(b, "bfloat16", k, lib, variant)
    out, oa, dtype = _output(out, out_dtype, aa, m, pb.n)
    if m:
        _call("cpukern_gemm_bf16", lib, aa.ptr, lda, pb.ptr, m, pb.n, k, oa.ptr, _row_stride(oa),
              _abi.DTYPE_CODES[dtype])
    return out


def gemm_w8a8(a: Any, a_scale: Any, b: PackedWeights, b_scale: Any, *, out: Any = None, out_dtype: Any = None) -> Any:
    """out[M, N] = (a @ b) * a_scale[:, None] * b_scale[None, :] in float32.

    a: [M, K] int8 activations; a_scale: [M] float32 per-token scales;
    b: from pack_b_int8() ([K, N] int8); b_scale: [N] float32 per-channel
    scales. The int8 products accumulate exactly in int32. out_dtype:
    float32 (default) or bfloat16, or pass `out`. Returns out."""
    aa = wrap(a, "a")
    require_dtype(aa, ("int8",))
    m, k = _matrix(aa)
    lda = _row_stride(aa)
    sa = _vector(a_scale, "a_scale", aa.kind, m, "one scale per row of a")
    variant, lib = _variant()
    pb = _packed(b, "int8", k, lib, variant)
    sb = _vector(b_scale, "b_scale", aa.kind, pb.n, "one scale per column of b")
    out, oa, dtype = _output(out, out_dtype, aa, m, pb.n)
    check_no_overlap(oa, (sa, sb))
    if m:
        _call("cpukern_gemm_w8a8", lib, aa.ptr, lda, sa.ptr, pb.ptr, sb.ptr, m, pb.n, k, oa.ptr, _row_stride(oa),
              _abi.DTYPE_CODES[dtype])
    return out
