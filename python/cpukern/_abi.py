"""The variant libraries' C ABI as seen from ctypes.

Every op module declares its C functions' signatures with `signature` (once,
at import of that module: no I/O) and calls them with `call`, which binds the
function in the selected (or a given) variant library on first use. A
remembered call (`_memo.Plan`) holds its arguments converted once into 64-bit
slots (`arguments`) and calls `prepared(name, lib)`, the function's
`<name>_slots` entry (CPUKERN_SLOTS, csrc export.h), with that one array:
ctypes converts one argument, not nine to eighteen (an 11-argument call
~0.4 us instead of ~1.2 warm, ~0.8 instead of ~2.1 right after a kernel that
streamed the caches).
"""

from __future__ import annotations

import ctypes
from typing import Any

from ._dispatch import DISPATCHER

# must match CpukernDtype and CpukernStatus in csrc/include/cpukern/export.h
DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2}
STATUS_EINVAL, STATUS_EDTYPE, STATUS_ENOMEM, STATUS_EENV = 1, 2, 3, 4
STATUS_TEXT = {
    STATUS_EINVAL: "invalid argument",
    STATUS_EDTYPE: "dtype not supported by this variant",
    STATUS_ENOMEM: "out of memory",
    STATUS_EENV: "an environment override has a value the kernel does not know",
}

_signatures: dict[str, tuple[list[Any], Any]] = {}
_bound: dict[tuple[int, str], Any] = {}
_prepared: dict[tuple[int, str], Any] = {}

Slots = ctypes.Array[ctypes.c_int64]  # the arguments of a `_slots` entry (`arguments`)

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


def arguments(name: str, values: tuple[Any, ...]) -> Slots:
    """`values` in the 64-bit slots of `name`'s `_slots` entry, for `prepared`: a
    pointer or an integer as itself, a float (f32) as its bits, as ctypes
    converts each for `function`. Indexing the array gives the slots back."""
    argtypes, _ = _signatures[name]
    if len(values) != len(argtypes):
        raise TypeError(f"{name}: {len(values)} arguments, the signature has {len(argtypes)}")
    slots: Slots = (ctypes.c_int64 * len(values))(*(_slot(ctype, value) for ctype, value in zip(argtypes, values, strict=True)))
    return slots


def _slot(ctype: Any, value: Any) -> int:
    if ctype is f32:
        return ctypes.c_uint32.from_buffer(f32(value)).value
    if ctype is ptr:
        return int(value or 0)
    return int(ctype(value).value)  # an integer type's own wrap-around (i32 of 2**31 is negative)


def prepared(name: str, lib: ctypes.CDLL | None = None) -> Any:
    """`name`'s `_slots` entry in `lib`, for the slots `arguments` made: called
    with that one array (a separate function object from `function`'s)."""
    lib = lib if lib is not None else DISPATCHER.library()
    key = (id(lib), name)
    fn = _prepared.get(key)
    if fn is None:
        fn = lib[name + "_slots"]  # no argtypes: ctypes passes an array as its address
        fn.restype = _signatures[name][1]
        _prepared[key] = fn
    return fn


def call(name: str, *args: Any, lib: ctypes.CDLL | None = None) -> None:
    """Calls a status-returning kernel; a non-zero status is a cpukern bug
    (arguments are validated in Python first), reported as RuntimeError."""
    status = function(name, lib)(*args)
    if status:
        raise RuntimeError(f"{name} failed: {STATUS_TEXT.get(status, f'status {status}')}")
