"""vecnorm: L2 norms and normalization of float32 and int8 vectors.

One native library per CPU ISA variant (isa_matrix.toml); the dispatcher
cpubuild ships in this package (``vecnorm._cpubuild``) picks the best one
this CPU runs, or the one ``VNORM_ISA=<variant>`` forces. Works on any
contiguous 1-D buffer of the right type (array.array, NumPy arrays) or on
plain sequences; NumPy is not needed.

    >>> import vecnorm
    >>> vecnorm.l2([3.0, 4.0])
    5.0
    >>> list(vecnorm.normalize([3.0, 4.0]))
    [0.6000000238418579, 0.800000011920929]
    >>> vecnorm.sumsq_i8([3, -4])
    25
"""

from __future__ import annotations

import array
import ctypes
from importlib import metadata
from typing import Any

from ._cpubuild import UnknownISAError, UnsupportedISAError, add_load_hook, library, load_variant, selected_isa

try:
    __version__ = metadata.version("vec-norm")
except metadata.PackageNotFoundError:  # a source tree, not installed
    __version__ = "0+unknown"

__all__ = ["UnknownISAError", "UnsupportedISAError", "__version__", "l2", "normalize", "selected_isa", "sumsq_i8"]

ABI_VERSION = 1
_STATUS = {1: "a null pointer", 2: "the vector's norm is zero", 3: "the vector's norm is not finite"}


def _declare(variant: str, lib: ctypes.CDLL) -> None:
    """C signatures, set on each variant library as the dispatcher loads it."""
    f32, i8 = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int8)
    lib.vecnorm_abi_version.restype = ctypes.c_int
    if lib.vecnorm_abi_version() != ABI_VERSION:
        raise ImportError(f"vecnorm: the {variant} library speaks ABI {lib.vecnorm_abi_version()}, not {ABI_VERSION}")
    lib.vecnorm_l2_f32.argtypes = [f32, ctypes.c_size_t]
    lib.vecnorm_l2_f32.restype = ctypes.c_float
    lib.vecnorm_normalize_f32.argtypes = [f32, f32, ctypes.c_size_t]
    lib.vecnorm_normalize_f32.restype = ctypes.c_int
    lib.vecnorm_sumsq_i8.argtypes = [i8, ctypes.c_size_t]
    lib.vecnorm_sumsq_i8.restype = ctypes.c_int64


add_load_hook(_declare)


def _lib(variant: str | None) -> ctypes.CDLL:
    lib: ctypes.CDLL = library() if variant is None else load_variant(variant)
    return lib


def _as_array(values: Any, typecode: str, name: str, *, writable: bool = False) -> Any:
    """A ctypes array over `values`: a contiguous 1-D buffer of the type in
    place (copied when read-only, unless `writable` is demanded), else a converted copy."""
    ctype: Any = {"f": ctypes.c_float, "b": ctypes.c_int8}[typecode]
    what = {"f": "float32", "b": "int8"}[typecode]
    if isinstance(values, str):
        raise TypeError(f"{name} must be a {what} buffer or a sequence of numbers, not str")
    try:
        view = memoryview(values)
    except TypeError:
        view = None
    if view is not None:
        with view:
            if view.format.lstrip("@=") != typecode or view.ndim != 1 or not view.c_contiguous:
                raise TypeError(f"{name} must be a contiguous 1-D {what} buffer (format {view.format!r}, {view.ndim}-D given)")
            if view.readonly and writable:
                raise TypeError(f"{name} is read-only")
            kind = ctype * len(view)
            return kind.from_buffer_copy(view) if view.readonly else kind.from_buffer(values)
    if writable:
        raise TypeError(f"{name} must be a writable {what} buffer (e.g. array.array({typecode!r}))")
    try:
        converted = array.array(typecode, values)
    except (TypeError, OverflowError) as exc:
        raise (ValueError if isinstance(exc, OverflowError) else TypeError)(f"{name}: {exc}") from None
    return (ctype * len(converted)).from_buffer(converted)


def l2(x: Any, *, variant: str | None = None) -> float:
    """The Euclidean norm of a float32 vector (summed in float32)."""
    data = _as_array(x, "f", "x")
    return float(_lib(variant).vecnorm_l2_f32(data, len(data)))


def normalize(x: Any, out: Any = None, *, variant: str | None = None) -> Any:
    """x / |x| as float32: into `out` (a writable float32 buffer of x's length,
    may be x itself) and returned, else into a new array.array('f')."""
    data = _as_array(x, "f", "x")
    if out is None:
        out = array.array("f", bytes(4 * len(data)))
    target = _as_array(out, "f", "out", writable=True)
    if len(target) != len(data):
        raise ValueError(f"out has {len(target)} elements, x has {len(data)}")
    status = _lib(variant).vecnorm_normalize_f32(data, target, len(data))
    if status:
        raise ValueError(f"cannot normalize: {_STATUS.get(status, f'status {status}')}")
    return out


def sumsq_i8(x: Any, *, variant: str | None = None) -> int:
    """The exact sum of squares of an int8 vector."""
    data = _as_array(x, "b", "x")
    return int(_lib(variant).vecnorm_sumsq_i8(data, len(data)))
