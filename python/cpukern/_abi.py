"""The variant libraries' C ABI as seen from ctypes.

Every op module declares its C functions' signatures with `signature` (once,
at import of that module: no I/O) and calls them with `call`, which binds the
function in the selected (or a given) variant library on first use. A
remembered call (`_memo.Plan`) holds its arguments converted once
(`arguments`) and calls `prepared(name, lib)`, which converts nothing: ~1 us
less per call of 9-11 arguments after a kernel that streamed the caches.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ._dispatch import DISPATCHER

# must match CpukernDtype in csrc/include/cpukern/export.h
DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2}
STATUS_TEXT = {1: "invalid argument", 2: "dtype not supported by this variant"}

_signatures: dict[str, tuple[list[Any], Any]] = {}
_bound: dict[tuple[int, str], Any] = {}
_prepared: dict[tuple[int, str], Any] = {}

ptr = ctypes.c_void_p
i32 = ctypes.c_int32
i64 = ctypes.c_int64
f32 = ctypes.c_float


def signature(name: str, *argtypes: Any, restype: Any = ctypes.c_int32) -> None:
    _signatures[name] = (list(argtypes), restype)


def function(name: str, lib: ctypes.CDLL | None = None) -> Any:
    lib = lib if lib is not None else DISPATCHER.library()
    key = (id(lib), name)
    fn = _bound.get(key)
    if fn is None:
        argtypes, restype = _signatures[name]
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = restype
        _bound[key] = fn
    return fn


def arguments(name: str, values: tuple[Any, ...]) -> tuple[Any, ...]:
    """`values` as the C types of `name`'s signature, for `prepared`."""
    argtypes, _ = _signatures[name]
    if len(values) != len(argtypes):
        raise TypeError(f"{name}: {len(values)} arguments, the signature has {len(argtypes)}")
    return tuple(ctype(value) for ctype, value in zip(argtypes, values, strict=True))


def prepared(name: str, lib: ctypes.CDLL | None = None) -> Any:
    """`name` in `lib` for arguments made by `arguments`: no argtypes, so ctypes
    passes them as they are (a separate function object from `function`'s)."""
    lib = lib if lib is not None else DISPATCHER.library()
    key = (id(lib), name)
    fn = _prepared.get(key)
    if fn is None:
        fn = lib[name]  # a new object each time, unlike getattr's
        fn.restype = _signatures[name][1]
        _prepared[key] = fn
    return fn


def call(name: str, *args: Any, lib: ctypes.CDLL | None = None) -> None:
    """Calls a status-returning kernel; a non-zero status is a cpukern bug
    (arguments are validated in Python first), reported as RuntimeError."""
    status = function(name, lib)(*args)
    if status:
        raise RuntimeError(f"{name} failed: {STATUS_TEXT.get(status, f'status {status}')}")
