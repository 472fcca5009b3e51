"""Checked calls remembered, for torch tensors.

An op's checks (dtypes, shapes, strides, overlaps) and the C arguments they
yield depend only on each tensor's address, shape, strides and dtype and on
the scalar arguments' types and values. A model calls the same ops on the same
buffers layer after layer, so the checks are done once per such key and their
result, a `Plan`, is looked up afterwards: about a third of the per-call cost
of checking again (a one-token rms_norm: ~12 us -> ~5 us when the memo came,
4.0 us with the key and slots since; torch.ops' own dispatch of vLLM's kernel
takes ~3 us). Plain CPU tensors (torch.Tensor, nn.Parameter) and plain
numpy arrays (np.ndarray itself) are keyed - an array by its data address and
writable flag, so an array made read-only is checked again (a GEMV with 16
MiB of int8 weights: ~20 us of checks per numpy call, 6 % of it); subclasses
and anything unusual take the full checks every time. A plan holds integers
and shapes, never an array: nothing is kept alive. An array's address is read from the array object (`_head_reader`).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from . import _abi
from ._abi import Slots

# An upper bound, not a cache policy: a model's working set of distinct
# (buffer, shape) keys is small; a caller cycling through fresh buffers
# starts over when it is reached.
LIMIT = 4096


class Plan(NamedTuple):
    """What the checks of one call decided: the C arguments of `op` (None:
    an empty input, nothing to run), in the slots `_abi.prepared` takes;
    when the op allocated its output, `out_shape`, its dtype (None: the first
    argument's) and the argument index of the output's address; `call`, the
    function to run them with where the key names the variant (None: looked
    up per call). Made by `plan`."""

    op: str
    dtype: str
    args: Slots | None
    out_shape: tuple[int, ...] | None = None
    out_slot: int = 0
    out_dtype: str | None = None
    call: Any = None


def plan(op: str, dtype: str, values: tuple[Any, ...] | None, out_shape: tuple[int, ...] | None = None,
         out_slot: int = 0, out_dtype: str | None = None, call: Any = None) -> Plan:
    """The Plan of a checked call, its C arguments `values` converted once into cpukern_<op>'s slots."""
    args = None if values is None else _abi.arguments("cpukern_" + op, values)
    return Plan(op, dtype, args, out_shape, out_slot, out_dtype, call)


_plans: dict[tuple[Any, ...], Plan] = {}

_WRITEABLE = 0x0400  # NPY_ARRAY_WRITEABLE


class _ArrayHead(ctypes.Structure):
    """The first fields of numpy's array object after the object header
    (PyArrayObject_fields): `PyArray_DATA` / `PyArray_FLAGS` compile these
    offsets into every numpy extension, so numpy keeps them."""

    _fields_ = [("data", ctypes.c_void_p), ("nd", ctypes.c_int), ("dimensions", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("base", ctypes.c_void_p), ("descr", ctypes.c_void_p),
                ("flags", ctypes.c_int)]


def _interface_head(a: Any) -> tuple[int, int]:
    address, read_only = a.__array_interface__["data"]
    return address, 0 if read_only else _WRITEABLE


def _head_reader(np: Any) -> Callable[[Any], tuple[int, int]]:
    """Reads (data address, writable flag) from an ndarray object, ~0.2 us
    (`__array_interface__` builds a dict, ~1.1 us, five times on a w8a8
    GEMV); checked here on a few arrays against `__array_interface__`, which
    it is otherwise (an unusual build). CPython only: there `id()` is the
    object's address."""
    if sys.implementation.name != "cpython":
        return _interface_head
    at = _ArrayHead.from_address
    header = object.__basicsize__

    def read(a: Any) -> tuple[int, int]:
        head = at(id(a) + header)
        return head.data or 0, head.flags & _WRITEABLE

    probe = np.arange(24, dtype=np.int16).reshape(4, 6)
    frozen = probe[2:]
    frozen.setflags(write=False)
    samples = (probe, probe[1:, 2:], probe.T[3], frozen, np.empty(0, np.float32), np.zeros((2, 3), np.int8))
    if all(read(s) == _interface_head(s) for s in samples):
        return read
    return _interface_head


# Set by _note_modules once each module is imported (key() looks when it meets a type it does not know yet):
_ndarray: Any = None  # np.ndarray
_read_head: Callable[[Any], tuple[int, int]] = _interface_head  # (data address, writable flag) of an ndarray
_head_at: Any = None  # _ArrayHead.from_address, where _head_reader's check passed: key() reads the head inline
_header = object.__basicsize__
_torch_plain: tuple[type, ...] = ()  # torch.Tensor, nn.Parameter


def _note_modules() -> bool:
    """Finds numpy's and torch's plain types (and the array-head reader) once
    each is imported; True when it found one it did not know."""
    global _ndarray, _read_head, _head_at, _torch_plain
    found = False
    if _ndarray is None and (np := sys.modules.get("numpy")) is not None:
        _read_head = _head_reader(np)
        _head_at = _ArrayHead.from_address if _read_head is not _interface_head else None
        _ndarray, found = np.ndarray, True
    if not _torch_plain and (torch := sys.modules.get("torch")) is not None:
        _torch_plain, found = (torch.Tensor, torch.nn.parameter.Parameter), True
    return found


def key(op: str, tensors: tuple[Any, ...], scalars: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The key of one call, or None when it must be checked in full. Flat, no
    calls of its own on the common path: after a kernel that streamed the
    caches every Python step costs (a w8a8 GEMV's key of five arrays 4.9-5.7
    us right after a 16 MiB GEMV, against 5.5-9.5 with the helper layers it had)."""
    parts: list[Any] = [op]
    for t in tensors:
        # each tensor's parts start with its type, which says how many follow: keys of different kinds never match
        kind = type(t)
        if kind is _ndarray:
            if _head_at is not None:
                head = _head_at(id(t) + _header)
                parts += (kind, head.data, head.flags & _WRITEABLE, t.shape, t.strides, t.dtype)
            else:
                parts += (kind, _interface_head(t), t.shape, t.strides, t.dtype)
        elif t is None:
            parts.append(None)
        elif kind in _torch_plain and t.is_cpu:
            try:
                parts += (kind, t.data_ptr(), t.shape, t.stride(), t.dtype)
            except RuntimeError:  # sparse, mkldnn: no strides; the full checks say why
                return None
        elif (_ndarray is None or not _torch_plain) and _note_modules():
            return key(op, tensors, scalars)  # numpy or torch was imported since: look again (once per module)
        else:
            return None
    for s in scalars:
        parts += (type(s), s)  # True and 1.0 compare equal; only one of them passes the checks
    return tuple(parts)


def lookup(op: str, tensors: tuple[Any, ...], scalars: tuple[Any, ...]) -> tuple[tuple[Any, ...] | None, Plan | None]:
    """(key, its plan or None): one call on the hot path (every call costs here, the
    more so after a kernel that streamed its operands through the caches)."""
    k = key(op, tensors, scalars)
    return k, (None if k is None else _plans.get(k))


def bind(plan: Plan, out: Any, like: Any) -> tuple[Any, Slots | None]:
    """(output, C arguments) of a planned call: a plan that allocated its
    output gets a fresh one (on `like`'s device) when `out` is None."""
    args = plan.args
    if out is None and plan.out_shape is not None:
        if type(like) is _ndarray:
            out = _numpy_empty(plan.out_shape, like.dtype if plan.out_dtype is None else plan.out_dtype)
            address = _read_head(out)[0]
        else:
            if plan.out_dtype is None:
                out = like.new_empty(plan.out_shape)
            else:
                out = like.new_empty(plan.out_shape, dtype=getattr(sys.modules["torch"], plan.out_dtype))
            address = out.data_ptr()
        if args is not None:
            args = type(args).from_buffer_copy(args)
            args[plan.out_slot] = address
    return out, args


def _numpy_empty(shape: tuple[int, ...], dtype: Any) -> Any:
    """A fresh numpy output; `dtype` a numpy dtype or a name ("bfloat16": ml_dtypes',
    which the first, checked call already required)."""
    np = sys.modules["numpy"]
    if dtype == "bfloat16":
        dtype = sys.modules["ml_dtypes"].bfloat16
    return np.empty(shape, dtype=dtype)


def find(k: tuple[Any, ...] | None) -> Plan | None:
    return None if k is None else _plans.get(k)


def put(k: tuple[Any, ...] | None, plan: Plan) -> None:
    if k is None:
        return
    if len(_plans) >= LIMIT:
        _plans.clear()
    _plans[k] = plan


def clear() -> None:
    _plans.clear()


def size() -> int:
    return len(_plans)
