"""Argument checking shared by every op: numpy arrays and torch tensors seen
through one small `Array` record (pointer, shape, element strides, dtype).

numpy and torch are imported only when an argument of that kind shows up.
Errors name the argument: TypeError for the wrong kind or dtype, ValueError
for shapes, strides, sizes, read-only or overlapping outputs.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterable, Sequence
from typing import Any

NUMPY = "numpy"
TORCH = "torch"

_torch_dtype_names: dict[Any, str] = {}
_torch_strided: list[Any] = []


class Array:
    """One array argument, as the C ABI needs it (strides in elements)."""

    __slots__ = ("dtype", "itemsize", "kind", "name", "obj", "ptr", "shape", "strides", "writable")

    def __init__(
        self, *, obj: Any, name: str, kind: str, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...],
        dtype: str, itemsize: int, writable: bool,
    ) -> None:
        self.obj = obj
        self.name = name
        self.kind = kind
        self.ptr = ptr
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.itemsize = itemsize
        self.writable = writable

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n



def kind_of(obj: Any) -> str | None:
    """'numpy' / 'torch' without importing either."""
    module = type(obj).__module__
    if module == "numpy" and type(obj).__name__ == "ndarray":
        return NUMPY
    if module.startswith("torch") and "torch" in sys.modules:
        import torch

        if isinstance(obj, torch.Tensor):
            return TORCH
    if "numpy" in sys.modules:
        import numpy as np

        if isinstance(obj, np.ndarray):
            return NUMPY
    return None


def wrap(obj: Any, name: str, kind: str | None = None) -> Array:
    """Describes `obj`; `kind` (from the op's first argument) must match."""
    got = kind_of(obj)
    if got is None:
        raise TypeError(f"{name}: expected a numpy array or a torch tensor, got {type(obj).__name__}")
    if kind is not None and got != kind:
        want = "a numpy array" if kind == NUMPY else "a torch tensor"
        raise TypeError(f"{name}: expected {want} like the other arguments, got {type(obj).__module__}.{type(obj).__name__}")
    return _wrap_torch(obj, name) if got == TORCH else _wrap_numpy(obj, name)


class _NumpyDtype:
    """What wrapping needs to know of one numpy dtype, looked up once."""

    __slots__ = ("as_bytes", "itemsize", "name", "native")

    def __init__(self, dt: Any) -> None:
        import numpy as np

        self.name = str(dt.name)  # dtype.name is a slow Python property
        self.itemsize = int(dt.itemsize)
        self.native = bool(dt.isnative)
        # A buffer export is several times cheaper than a.ctypes.data. ml_dtypes'
        # bfloat16 has no buffer format: export a view as the unsigned integer
        # of its size (same bytes, same shape) instead.
        self.as_bytes: Any = None
        if self.itemsize in (1, 2, 4, 8):
            probe: Any = np.empty(1, dt)
            try:
                memoryview(probe)
            except (ValueError, TypeError, BufferError):
                self.as_bytes = np.dtype(f"u{self.itemsize}")


_numpy_dtypes: dict[Any, _NumpyDtype] = {}


def _wrap_numpy(a: Any, name: str) -> Array:
    dt = a.dtype
    info = _numpy_dtypes.get(dt)
    if info is None:
        info = _numpy_dtypes[dt] = _NumpyDtype(dt)
    dtype = info.name
    flags = a.flags
    if not info.native:
        raise TypeError(f"{name}: byte order {dt.str!r} is not the machine's; use .astype(dt.newbyteorder('='))")
    if not flags.aligned:
        raise ValueError(f"{name}: data is not aligned to its {dtype} elements")
    itemsize = info.itemsize
    byte_strides = a.strides
    strides = tuple([s // itemsize for s in byte_strides])
    for s in byte_strides:
        if s % itemsize:
            raise ValueError(f"{name}: stride of {s} bytes is not a multiple of the {itemsize}-byte element")
    writable = flags.writeable
    ptr = None
    if writable and flags.c_contiguous and a.size:
        try:
            view = a if info.as_bytes is None else a.view(info.as_bytes)
            ptr = ctypes.addressof(ctypes.c_char.from_buffer(view))
        except (ValueError, TypeError, BufferError):
            ptr = None
    if ptr is None:
        ptr = a.ctypes.data
    return Array(
        obj=a, name=name, kind=NUMPY, ptr=ptr, shape=a.shape, strides=strides, dtype=dtype, itemsize=itemsize,
        writable=bool(writable),
    )


def _wrap_torch(t: Any, name: str) -> Array:
    if not _torch_dtype_names:
        import torch

        _torch_dtype_names.update({
            torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.int64: "int64",
            torch.int32: "int32", torch.float64: "float64",
        })
        _torch_strided.append(torch.strided)
    if not t.is_cpu:
        raise ValueError(f"{name}: tensor is on {t.device}, cpukern runs on the CPU")
    if t.layout is not _torch_strided[0]:
        raise TypeError(f"{name}: expected a dense (strided) tensor, got layout {t.layout}")
    dtype = _torch_dtype_names.get(t.dtype) or str(t.dtype).removeprefix("torch.")
    return Array(
        obj=t, name=name, kind=TORCH, ptr=t.data_ptr(), shape=tuple(t.shape), strides=t.stride(), dtype=dtype,
        itemsize=t.element_size(), writable=True,
    )


def require_dtype(a: Array, allowed: Sequence[str]) -> None:
    if a.dtype not in allowed:
        raise TypeError(f"{a.name}: dtype {a.dtype} is not supported; expected {' or '.join(allowed)}")


def require_same_dtype(a: Array, like: Array) -> None:
    if a.dtype != like.dtype:
        raise TypeError(f"{a.name}: dtype {a.dtype} differs from {like.name}'s {like.dtype}")


def require_writable(a: Array) -> None:
    if not a.writable:
        raise ValueError(f"{a.name}: array is read-only, the op writes into it")


def rows(a: Array) -> tuple[int, int]:
    """(number of rows, row stride) of `a` seen as [rows, hidden]: the last
    dimension must be contiguous, the others must collapse into one stride
    (any row stride is fine, e.g. a column slice of a wider array)."""
    if a.ndim == 0:
        raise ValueError(f"{a.name}: expected at least 1 dimension, got a scalar")
    require_contiguous_last(a)
    if a.ndim == 2:
        return a.shape[0], a.strides[0] if a.shape[0] > 1 else 0
    return collapse(a, a.ndim - 1)


def require_contiguous_last(a: Array) -> None:
    # empty arrays may carry any strides: nothing is read or written
    if a.shape[-1] > 1 and a.strides[-1] != 1 and a.size:
        raise ValueError(f"{a.name}: the last dimension must be contiguous (stride 1), got stride {a.strides[-1]}")


def collapse(a: Array, dims: int) -> tuple[int, int]:
    """(count, stride) of the first `dims` dimensions walked as one."""
    if any(d == 0 for d in a.shape[:dims]):
        return 0, 0
    n, stride = 1, 0
    for d in range(dims - 1, -1, -1):  # innermost first
        size, st = a.shape[d], a.strides[d]
        if size == 1:
            continue
        if n == 1:
            stride = st
        elif st != stride * n:
            raise ValueError(
                f"{a.name}: dimensions {tuple(a.shape[:dims])} with strides {tuple(a.strides[:dims])} cannot be "
                "walked with one stride; pass a contiguous array (.contiguous() / np.ascontiguousarray)"
            )
        n *= size
    return n, stride


def extent(a: Array) -> tuple[int, int]:
    """[first byte, last byte + 1) the array touches ((0, 0) when empty)."""
    lo = hi = a.ptr
    item = a.itemsize
    for size, st in zip(a.shape, a.strides, strict=True):
        if size == 0:
            return 0, 0
        step = (size - 1) * st * item
        if step < 0:
            lo += step
        else:
            hi += step
    return lo, hi + item


def same_layout(a: Array, b: Array) -> bool:
    return a.ptr == b.ptr and a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype


def check_no_overlap(written: Array, others: Iterable[Array], *, allow_alias: Array | None = None) -> None:
    """`written` must not share memory with any of `others`, except that it may
    be exactly `allow_alias` (same pointer, shape and strides: in place)."""
    lo, hi = extent(written)
    if lo == hi:
        return
    for other in others:
        if other is allow_alias and same_layout(written, other):
            continue
        olo, ohi = extent(other)
        if olo >= hi or lo >= ohi:
            continue
        if _shares_memory(written, other):
            raise ValueError(f"{written.name}: overlaps {other.name} in memory; the op writes {written.name}")


def _shares_memory(a: Array, b: Array) -> bool:
    # Extents intersect (e.g. interleaved column slices of one buffer): ask
    # numpy for the exact answer, through byte views for torch tensors.
    import numpy as np

    def as_numpy(x: Array) -> Any:
        if x.kind == NUMPY:
            return x.obj
        import torch

        return x.obj.detach().view(torch.uint8).numpy()

    return bool(np.shares_memory(as_numpy(a), as_numpy(b)))
