"""Checked calls remembered (cpukern/_memo.py): a call on the same torch
buffers (or plain numpy arrays) skips the argument checks, yet reads the buffers' current contents,
allocates a fresh output when it allocated one before, refuses what the
checks refuse on every call, and never lets a remembered call stand for a
different variant or scalar type. Model weights (nn.Parameter) are remembered
like plain tensors."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest
from testsupport import require, skip_host_fact

require(importlib.util.find_spec("torch") is not None, "torch is not installed")

import cpukern  # noqa: E402
import torch  # noqa: E402
from cpukern import _memo, ops  # noqa: E402


def ref_rms_norm(x: Any, w: Any, eps: float) -> Any:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


@pytest.fixture(autouse=True)
def empty_memo() -> None:
    _memo.clear()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_remembered_call_reads_the_current_contents(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 64, generator=g).to(dtype), torch.randn(64, generator=g).to(dtype)
    out = torch.empty_like(x)
    cpukern.rms_norm(x, w, 1e-6, out=out)
    assert _memo.size() == 1
    for _ in range(3):
        x.copy_(torch.randn(4, 64, generator=g).to(dtype))
        w.copy_(torch.randn(64, generator=g).to(dtype))
        cpukern.rms_norm(x, w, 1e-6, out=out)
        torch.testing.assert_close(out, ref_rms_norm(x, w, 1e-6), rtol=2e-2, atol=2e-2)
    assert _memo.size() == 1, "the same buffers, shapes and eps: one remembered call"
    cpukern.rms_norm(x[:2], w, 1e-6, out=out[:2])
    cpukern.rms_norm(x, w, 1e-5, out=out)
    assert _memo.size() == 3, "another shape, another eps: checked and remembered apart"


def test_an_allocated_output_is_fresh_on_every_call() -> None:
    x, w = torch.randn(3, 32), torch.randn(32)
    first, second = cpukern.rms_norm(x, w), cpukern.rms_norm(x, w)
    assert first.data_ptr() != second.data_ptr() and torch.equal(first, second)
    gate = torch.randn(3, 64).bfloat16()
    h1, h2 = cpukern.silu_and_mul(gate), cpukern.silu_and_mul(gate)
    assert h1.shape == (3, 32) and h1.dtype == torch.bfloat16 and h1.data_ptr() != h2.data_ptr()
    assert torch.equal(h1, h2)
    a, b = torch.randn(2, 16).bfloat16(), torch.randn(16, 8).bfloat16()
    packed = cpukern.pack_b(b)
    y1 = cpukern.gemm_bf16(a, packed, out_dtype=torch.bfloat16)
    y2 = cpukern.gemm_bf16(a, packed, out_dtype=torch.bfloat16)
    assert y2.dtype == torch.bfloat16 and y2.shape == (2, 8) and y1.data_ptr() != y2.data_ptr()
    assert torch.equal(y1, y2)
    torch.testing.assert_close(y2.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)


def test_a_refused_call_is_refused_every_time() -> None:
    buf = torch.randn(4, 96)
    x, out, w = buf[:, :64], buf[:, 32:], torch.randn(64)
    for _ in range(2):
        with pytest.raises(ValueError, match="out: overlaps x"):
            cpukern.rms_norm(x, w, out=out)
    assert _memo.size() == 0


def test_parameters_are_remembered() -> None:
    x, w = torch.randn(2, 16), torch.nn.Parameter(torch.randn(16), requires_grad=False)
    out = torch.empty_like(x)
    cpukern.rms_norm(x, w, out=out)
    cpukern.rms_norm(x, w, out=out)
    assert _memo.size() == 1
    torch.testing.assert_close(out, ref_rms_norm(x, w.data, 1e-6))


def test_a_scalar_of_another_type_is_checked_again() -> None:
    x, w = torch.randn(2, 16), torch.randn(16)
    cpukern.rms_norm(x, w, 1.0)
    with pytest.raises(TypeError, match="eps: expected a float"):
        cpukern.rms_norm(x, w, True)  # == 1.0, hashes alike


def test_positions_are_checked_on_every_call() -> None:
    positions = torch.tensor([0, 1, 2])
    query, cache = torch.randn(3, 2 * 16), torch.randn(8, 16)
    cpukern.rotary_embedding(positions, query, None, 16, cache, True)
    positions[1] = 8  # past the cache's 8 rows: data, not a checked argument
    with pytest.raises(ValueError, match=r"positions: values must lie in \[0, 8\), found \[8\]"):
        cpukern.rotary_embedding(positions, query, None, 16, cache, True)


def test_a_remembered_product_stands_for_its_variant_only() -> None:
    b = torch.randn(32, 16).bfloat16()
    layouts: dict[str, tuple[str, Any]] = {}
    for v in cpukern.supported_variants():
        with ops.use_variant(v):
            packed = cpukern.pack_b(b)
            layouts.setdefault(packed.layout, (v, packed))
    if len(layouts) < 2:
        skip_host_fact("all runnable variants share one packed bf16 layout")
    (v1, p1), (v2, _) = list(layouts.values())[:2]
    a = torch.randn(2, 32).bfloat16()
    with ops.use_variant(v1):
        cpukern.gemm_bf16(a, p1)
        cpukern.gemm_bf16(a, p1)
    with ops.use_variant(v2), pytest.raises(ValueError, match=f"packed by variant '{v1}'"):
        cpukern.gemm_bf16(a, p1)


def test_numpy_arrays_are_remembered_with_their_writability() -> None:
    """A plain ndarray is keyed by its data (address, read-only): the same
    arrays skip the checks and read their current contents; an array made
    read-only is checked again and refused; subclasses are checked in full."""
    np = pytest.importorskip("numpy")
    x, w = np.ones((2, 8), np.float32), np.ones(8, np.float32)
    cpukern.rms_norm(x, w, out=x)
    cpukern.rms_norm(x, w, out=x)
    assert _memo.size() == 1
    x[:] = 3.0
    w[:] = 2.0
    cpukern.rms_norm(x, w, 0.0, out=x)
    assert np.allclose(x, 2.0), "a remembered call reads the arrays' current contents"
    x.setflags(write=False)
    for _ in range(2):
        with pytest.raises(ValueError, match="out: array is read-only"):
            cpukern.rms_norm(np.ones((2, 8), np.float32), w, out=x)
    sizes = _memo.size()
    cpukern.rms_norm(np.ones((2, 8), np.float32).view(np.matrix), w)  # a subclass: never keyed
    assert _memo.size() == sizes


def test_a_remembered_numpy_call_allocates_a_fresh_output() -> None:
    np = pytest.importorskip("numpy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x, w = np.ones((3, 16), np.float32), np.ones(16, np.float32)
    first, second = cpukern.rms_norm(x, w), cpukern.rms_norm(x, w)
    assert first is not second and first.ctypes.data != second.ctypes.data and np.array_equal(first, second)
    a = np.ones((2, 16), ml_dtypes.bfloat16)
    packed = cpukern.pack_b(np.ones((16, 8), ml_dtypes.bfloat16))
    y1 = cpukern.gemm_bf16(a, packed, out_dtype="bfloat16")
    y2 = cpukern.gemm_bf16(a, packed, out_dtype="bfloat16")
    assert y2.dtype == ml_dtypes.bfloat16 and y2.shape == (2, 8) and y1.ctypes.data != y2.ctypes.data
    assert np.array_equal(y2.astype(np.float32), np.full((2, 8), 16.0, np.float32))
    ai, sa, sb = np.ones((2, 16), np.int8), np.ones(2, np.float32), np.full(8, 0.5, np.float32)
    pi = cpukern.pack_b_int8(np.ones((16, 8), np.int8))
    sizes = _memo.size()
    z = [cpukern.gemm_w8a8(ai, sa, pi, sb) for _ in range(2)]
    assert _memo.size() == sizes + 1 and z[0].ctypes.data != z[1].ctypes.data
    assert z[1].dtype == np.float32 and np.array_equal(z[1], np.full((2, 8), 8.0, np.float32))


def test_a_numpy_array_is_keyed_by_its_own_address() -> None:
    """The address and writable flag read from the array object (not
    __array_interface__, ~1 us) are each array's, views and offsets included;
    two views of one buffer at different offsets are different calls."""
    np = pytest.importorskip("numpy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    base = np.arange(4 * 64, dtype=np.float32).reshape(4, 64)
    frozen = np.ones(8, np.int8)
    frozen.setflags(write=False)
    arrays = [base, base[1:], base[:, 3:], base.T, base[::2, 5:9], base.reshape(-1)[7:], np.float32(2.0) * base[0],
              np.empty(0, np.float32), np.ones((), np.float32), np.ones((2, 8), ml_dtypes.bfloat16), frozen,
              np.frombuffer(bytearray(64), np.int8)[3:]]
    _memo.key("probe", (base,), ())  # finds numpy's types and the reader
    read = _memo._read_head
    if sys.implementation.name == "cpython":
        assert read is not _memo._interface_head, "CPython's numpy keeps its data pointer and flags where its ABI says"
        assert _memo._head_at is not None, "... and key() reads them inline"
    for a in arrays:
        head = (a.__array_interface__["data"][0], 0x400 if a.flags.writeable else 0)
        assert read(a) == head, a.shape
        parts = _memo.key("probe", (a,), ())
        assert parts is not None and parts[1] is np.ndarray and parts[-3:] == (a.shape, a.strides, a.dtype), a.shape
        assert ((parts[2] or 0), parts[3]) == head if _memo._head_at else parts[2] == head, a.shape
    w = np.ones(8, np.float32)
    rows = np.arange(32, dtype=np.float32).reshape(4, 8)
    low = cpukern.rms_norm(rows[:2], w)
    high = cpukern.rms_norm(rows[2:], w)
    assert not np.array_equal(low, high) and np.array_equal(high, cpukern.rms_norm(rows[2:].copy(), w))
    assert _memo.size() == 3


def test_the_memo_is_bounded() -> None:
    w = torch.randn(8)
    for rows in range(1, _memo.LIMIT + 10):
        cpukern.rms_norm(torch.randn(rows, 8), w, out=torch.empty(rows, 8))
    assert 0 < _memo.size() <= _memo.LIMIT


def test_a_plan_holds_c_values_for_a_function_of_its_own() -> None:
    """A remembered call passes its arguments in 64-bit slots to the function's
    `_slots` entry (`_abi.prepared`), a function object distinct from
    `_abi.function`'s, which keeps converting Python values; a float goes as
    its float32 bits, an int32 wraps as ctypes wraps it; a plan of the wrong
    arity is refused by name."""
    import ctypes
    import struct

    from cpukern import _abi

    plain, prepared = _abi.function("cpukern_rms_norm"), _abi.prepared("cpukern_rms_norm")
    assert plain is not prepared and plain.argtypes and not prepared.argtypes
    assert prepared.__name__ == "cpukern_rms_norm_slots"
    slots = _abi.arguments("cpukern_rms_norm", (None, 2, 3, 4, 5, 6, 7, 0.5, 2**31 + 1))
    assert isinstance(slots, ctypes.Array) and slots._type_ is ctypes.c_int64
    assert list(slots) == [0, 2, 3, 4, 5, 6, 7, struct.unpack("<I", struct.pack("<f", 0.5))[0], -(2**31) + 1]
    assert _abi.arguments("cpukern_rms_norm", (1, 2, 3, 4, 5, 6, 7, 1e300, 1))[7] == 0x7F800000  # c_float's inf
    with pytest.raises(TypeError, match="cpukern_rms_norm: 2 arguments, the signature has 9"):
        _abi.arguments("cpukern_rms_norm", (1, 2))
    x = torch.randn(3, 16)
    w = torch.randn(16)
    first = cpukern.rms_norm(x, w, 1e-6)
    again = cpukern.rms_norm(x, w, 1e-6)  # remembered: the prepared function with the plan's values
    assert torch.equal(first, again) and torch.allclose(again, ref_rms_norm(x, w, 1e-6), atol=1e-5)
