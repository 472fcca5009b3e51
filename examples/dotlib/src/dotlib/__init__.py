"""dotlib: float32 and int8 dot products, one native library per CPU ISA variant.

The wheel holds one library per variant of isa_matrix.toml; the dispatcher
cpubuild ships inside this package (``dotlib._cpubuild``) picks the best
one this CPU runs, or the one ``DOTLIB_ISA=<variant>`` forces
(``DOTLIB_DISABLE_ISA=a,b`` rules variants out). ``python -m dotlib``
shows the choice and why.

    >>> import dotlib
    >>> dotlib.dot([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    32.0
    >>> dotlib.dot_i8([1, -2, 3], [4, 5, -6])
    -24
"""

from __future__ import annotations

import ctypes
from typing import Any

from ._cpubuild import (
    UnknownISAError,
    UnsupportedISAError,
    add_load_hook,
    library,
    load_variant,
    selected_isa,
    supported_variants,
)
from ._version import __version__

__all__ = [
    "UnknownISAError",
    "UnsupportedISAError",
    "__version__",
    "dot",
    "dot_i8",
    "selected_isa",
    "supported_variants",
]

# struct / memoryview item formats of the element types, native byte order
_FORMATS = {ctypes.c_float: ("f", "float32"), ctypes.c_int8: ("b", "int8")}


def _declare(variant: str, lib: ctypes.CDLL) -> None:
    """The C signatures, set once on each variant library as it is loaded."""
    f32, i8 = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int8)
    lib.dotlib_dot_f32.argtypes = [f32, f32, ctypes.c_size_t]
    lib.dotlib_dot_f32.restype = ctypes.c_float
    lib.dotlib_dot_i8.argtypes = [i8, i8, ctypes.c_size_t]
    lib.dotlib_dot_i8.restype = ctypes.c_int64


add_load_hook(_declare)


def _array(values: Any, ctype: Any, name: str) -> Any:
    """`values` as a ctypes array of `ctype`: a contiguous 1-D buffer of that
    type (array.array, a NumPy array) is used in place, a sequence is converted."""
    fmt, dtype = _FORMATS[ctype]
    if isinstance(values, str):
        raise TypeError(f"{name} must be a sequence of numbers or a {dtype} buffer, not str")
    try:
        view = memoryview(values)
    except TypeError:
        view = None
    if view is not None:
        with view:
            if view.format.lstrip("@=") != fmt or view.ndim != 1 or not view.c_contiguous:
                raise TypeError(
                    f"{name} must be a contiguous 1-D {dtype} buffer, got format {view.format!r} with {view.ndim} dimension(s)"
                )
            kind = ctype * len(view)
            return kind.from_buffer_copy(view) if view.readonly else kind.from_buffer(values)
    try:
        items = list(values)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of numbers or a {dtype} buffer, not {type(values).__name__}") from None
    if ctype is ctypes.c_int8:
        for i, v in enumerate(items):
            if not isinstance(v, int) or not -128 <= v <= 127:
                raise ValueError(f"{name}[{i}] = {v!r} is not an int8 (an integer from -128 to 127)")
    try:
        return (ctype * len(items))(*items)
    except TypeError:
        raise TypeError(f"{name} must hold numbers only") from None


def _pair(a: Any, b: Any, ctype: Any) -> tuple[Any, Any, int]:
    x, y = _array(a, ctype, "a"), _array(b, ctype, "b")
    if len(x) != len(y):
        raise ValueError(f"a and b differ in length: {len(x)} != {len(y)}")
    return x, y, len(x)


def _lib(variant: str | None) -> ctypes.CDLL:
    lib: ctypes.CDLL = library() if variant is None else load_variant(variant)
    return lib


def dot(a: Any, b: Any, *, variant: str | None = None) -> float:
    """Dot product of two float32 vectors (float32 buffers or sequences of numbers).

    `variant` runs a given variant instead of the selected one (it must be
    built and runnable on this CPU, else UnknownISAError / UnsupportedISAError).
    """
    x, y, n = _pair(a, b, ctypes.c_float)
    return float(_lib(variant).dotlib_dot_f32(x, y, n))


def dot_i8(a: Any, b: Any, *, variant: str | None = None) -> int:
    """Dot product of two int8 vectors, exact (64-bit result)."""
    x, y, n = _pair(a, b, ctypes.c_int8)
    return int(_lib(variant).dotlib_dot_i8(x, y, n))
