"""Bad arguments to every op raise TypeError / ValueError naming the argument,
before anything is written, and never crash the process."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

np = pytest.importorskip("numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")

import cpukern  # noqa: E402
from cpukern import ops  # noqa: E402

F32, BF16 = np.float32, ml_dtypes.bfloat16


def arr(*shape: int, dtype: Any = F32) -> Any:
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def readonly(a: Any) -> Any:
    a.flags.writeable = False
    return a


def cache(rot: int = 16, max_position: int = 10, dtype: Any = F32) -> Any:
    return arr(max_position, rot, dtype=dtype)


def rope(**overrides: Any) -> Callable[[], Any]:
    """rotary_embedding with good arguments except `overrides`."""
    args: dict[str, Any] = {
        "positions": np.arange(3, dtype=np.int64), "query": arr(3, 2 * 16), "key": arr(3, 16),
        "head_size": 16, "cos_sin_cache": cache(), "is_neox": True,
    }
    args.update(overrides)
    return lambda: cpukern.rotary_embedding(**args)


def _shared_qkv() -> tuple[Any, Any]:
    buf = arr(3, 48)
    return buf[:, :32], buf[:, 16:32]


def _big() -> Any:
    return arr(4, 8)


BIG = _big()
SHARED_Q, SHARED_K = _shared_qkv()

CASES: dict[str, tuple[Callable[[], Any], type[Exception], str]] = {
    # rms_norm
    "rms-x-list": (lambda: cpukern.rms_norm([[1.0, 2.0]], arr(2)), TypeError, "x: expected a numpy array or a torch tensor"),
    "rms-x-float64": (lambda: cpukern.rms_norm(arr(2, 4, dtype=np.float64), arr(4)), TypeError, "x: dtype float64"),
    "rms-x-int": (lambda: cpukern.rms_norm(np.ones((2, 4), np.int32), arr(4)), TypeError, "x: dtype int32"),
    "rms-x-scalar": (lambda: cpukern.rms_norm(np.ones((), F32), arr(1)), ValueError, "x: expected at least 1 dimension"),
    "rms-x-empty-hidden": (lambda: cpukern.rms_norm(arr(2, 0), arr(0)), ValueError, "x: the hidden dimension"),
    "rms-x-byteswapped": (lambda: cpukern.rms_norm(arr(2, 4).astype(">f4"), arr(4)), TypeError, "x: byte order"),
    "rms-x-last-strided": (lambda: cpukern.rms_norm(arr(2, 8)[:, ::2], arr(4)), ValueError, "x: the last dimension must be contiguous"),
    "rms-x-rows-uncollapsible": (lambda: cpukern.rms_norm(arr(4, 6, 8)[:, :3, :], arr(8)), ValueError, "x: dimensions"),
    "rms-weight-dtype": (lambda: cpukern.rms_norm(arr(2, 4), arr(4, dtype=BF16)), TypeError, "weight: dtype bfloat16 differs from x's float32"),
    "rms-weight-shape": (lambda: cpukern.rms_norm(arr(2, 4), arr(5)), ValueError, "weight: expected shape (4,)"),
    "rms-weight-2d": (lambda: cpukern.rms_norm(arr(2, 4), arr(1, 4)), ValueError, "weight: expected shape (4,)"),
    "rms-weight-strided": (lambda: cpukern.rms_norm(arr(2, 4), arr(8)[::2]), ValueError, "weight: must be contiguous"),
    "rms-weight-kind": (lambda: cpukern.rms_norm(arr(2, 4), [1.0] * 4), TypeError, "weight: expected a numpy array"),
    "rms-eps-negative": (lambda: cpukern.rms_norm(arr(2, 4), arr(4), -1.0), ValueError, "eps: expected a finite value >= 0"),
    "rms-eps-nan": (lambda: cpukern.rms_norm(arr(2, 4), arr(4), float("nan")), ValueError, "eps:"),
    "rms-eps-str": (lambda: cpukern.rms_norm(arr(2, 4), arr(4), "1e-6"), TypeError, "eps: expected a float"),
    "rms-out-shape": (lambda: cpukern.rms_norm(arr(2, 4), arr(4), out=arr(2, 5)), ValueError, "out: expected shape (2, 4)"),
    "rms-out-dtype": (lambda: cpukern.rms_norm(arr(2, 4), arr(4), out=arr(2, 4, dtype=BF16)), TypeError, "out: dtype bfloat16"),
    "rms-out-readonly": (lambda: cpukern.rms_norm(arr(2, 4), arr(4), out=readonly(arr(2, 4))), ValueError, "out: array is read-only"),
    "rms-out-overlaps-x": (lambda: cpukern.rms_norm(BIG[:2], arr(8), out=BIG[1:3]), ValueError, "out: overlaps x"),
    "rms-out-is-weight": (lambda: cpukern.rms_norm(arr(1, 8), BIG[0], out=BIG[:1]), ValueError, "out: overlaps weight"),
    # fused_add_rms_norm
    "fused-residual-shape": (lambda: cpukern.fused_add_rms_norm(arr(2, 4), arr(3, 4), arr(4)), ValueError, "residual: expected shape (2, 4)"),
    "fused-residual-dtype": (lambda: cpukern.fused_add_rms_norm(arr(2, 4), arr(2, 4, dtype=BF16), arr(4)), TypeError, "residual: dtype bfloat16"),
    "fused-residual-readonly": (lambda: cpukern.fused_add_rms_norm(arr(2, 4), readonly(arr(2, 4)), arr(4)), ValueError, "residual: array is read-only"),
    "fused-x-readonly": (lambda: cpukern.fused_add_rms_norm(readonly(arr(2, 4)), arr(2, 4), arr(4)), ValueError, "x: array is read-only"),
    "fused-x-is-residual": (lambda: cpukern.fused_add_rms_norm(BIG, BIG, arr(8)), ValueError, "x: overlaps residual"),
    "fused-weight-in-residual": (lambda: cpukern.fused_add_rms_norm(arr(1, 8), BIG[1:2], BIG[1]), ValueError, "overlaps weight"),
    "fused-weight-shape": (lambda: cpukern.fused_add_rms_norm(arr(2, 4), arr(2, 4), arr(3)), ValueError, "weight: expected shape (4,)"),
    "fused-eps-bool": (lambda: cpukern.fused_add_rms_norm(arr(2, 4), arr(2, 4), arr(4), True), TypeError, "eps:"),
    "fused-x-last-strided": (lambda: cpukern.fused_add_rms_norm(arr(2, 8)[:, ::2], arr(2, 4), arr(4)), ValueError, "x: the last dimension"),
    # silu_and_mul
    "silu-odd": (lambda: cpukern.silu_and_mul(arr(2, 7)), ValueError, "x: the last dimension must be even"),
    "silu-dtype": (lambda: cpukern.silu_and_mul(arr(2, 8, dtype=np.float64)), TypeError, "x: dtype float64"),
    "silu-scalar": (lambda: cpukern.silu_and_mul(np.ones((), F32)), ValueError, "x: expected at least 1 dimension"),
    "silu-out-shape": (lambda: cpukern.silu_and_mul(arr(2, 8), out=arr(2, 8)), ValueError, "out: expected shape (2, 4)"),
    "silu-out-dtype": (lambda: cpukern.silu_and_mul(arr(2, 8), out=arr(2, 4, dtype=np.float16)), TypeError, "out: dtype float16"),
    "silu-out-readonly": (lambda: cpukern.silu_and_mul(arr(2, 8), out=readonly(arr(2, 4))), ValueError, "out: array is read-only"),
    "silu-out-overlaps": (lambda: cpukern.silu_and_mul(BIG, out=BIG[:, :4]), ValueError, "out: overlaps x"),
    "silu-out-strided": (lambda: cpukern.silu_and_mul(arr(2, 8), out=arr(2, 8)[:, ::2]), ValueError, "out: the last dimension"),
    "silu-x-tuple": (lambda: cpukern.silu_and_mul((1.0, 2.0)), TypeError, "x: expected a numpy array"),
    # rotary_embedding
    "rope-positions-float": (rope(positions=np.arange(3, dtype=np.float32)), TypeError, "positions: dtype float32"),
    "rope-positions-int32": (rope(positions=np.arange(3, dtype=np.int32)), TypeError, "positions: dtype int32"),
    "rope-positions-range": (rope(positions=np.array([0, 10, 1], np.int64)), ValueError, "positions: values must lie in [0, 10)"),
    "rope-positions-negative": (rope(positions=np.array([0, -1, 1], np.int64)), ValueError, "positions: values must lie in"),
    "rope-positions-list": (rope(positions=[0, 1, 2]), TypeError, "positions: expected a numpy array"),
    "rope-query-tokens": (rope(query=arr(4, 32)), ValueError, "query: expected shape (3,)"),
    "rope-query-not-heads": (rope(query=arr(3, 40)), ValueError, "query: last dimension 40 is not a multiple of head_size=16"),
    "rope-query-3d-head": (rope(query=arr(3, 2, 8)), ValueError, "query: last dimension 8 differs from head_size=16"),
    "rope-query-dtype": (rope(query=arr(3, 32, dtype=np.float64)), TypeError, "query: dtype float64"),
    "rope-query-readonly": (rope(query=readonly(arr(3, 32))), ValueError, "query: array is read-only"),
    "rope-query-last-strided": (rope(query=arr(3, 64)[:, ::2]), ValueError, "query: the last dimension must be contiguous"),
    "rope-key-dtype": (rope(key=arr(3, 16, dtype=BF16)), TypeError, "key: dtype bfloat16 differs from query's float32"),
    "rope-key-shape": (rope(key=arr(3, 24)), ValueError, "key: last dimension 24 is not a multiple of head_size=16"),
    "rope-key-readonly": (rope(key=readonly(arr(3, 16))), ValueError, "key: array is read-only"),
    "rope-key-overlaps-query": (rope(query=SHARED_Q, key=SHARED_K), ValueError, "query: overlaps key"),
    "rope-head-size-zero": (rope(head_size=0), ValueError, "head_size: must be > 0"),
    "rope-head-size-str": (rope(head_size="16"), TypeError, "head_size: expected an int"),
    "rope-head-size-float": (rope(head_size=16.0), TypeError, "head_size: expected an int"),
    "rope-cache-odd": (rope(cos_sin_cache=cache(rot=15)), ValueError, "cos_sin_cache: rot_dim=15"),
    "rope-cache-too-wide": (rope(cos_sin_cache=cache(rot=18)), ValueError, "cos_sin_cache: rot_dim=18 (its last dimension) must be even and <= head_size=16"),
    "rope-cache-1d": (rope(cos_sin_cache=arr(16)), ValueError, "cos_sin_cache: expected shape (max_position, rot_dim)"),
    "rope-cache-dtype": (rope(cos_sin_cache=cache(dtype=np.float16)), TypeError, "cos_sin_cache: dtype float16 must be query's (float32) or float32"),
    "rope-cache-strided": (rope(cos_sin_cache=cache(rot=32)[:, ::2]), ValueError, "cos_sin_cache: the last dimension"),
    "rope-is-neox-str": (rope(is_neox="yes"), TypeError, "is_neox: expected a bool"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_argument(case: str) -> None:
    call, error, message = CASES[case]
    with pytest.raises(error, match=re.escape(message)):
        call()


def test_bad_positions_write_nothing() -> None:
    q, k = arr(3, 32), arr(3, 16)
    q0, k0 = q.copy(), k.copy()
    with pytest.raises(ValueError, match=r"positions: values must lie in \[0, 10\), found \[12\]"):
        cpukern.rotary_embedding(np.array([1, 12, 2], np.int64), q, k, 16, cache())
    np.testing.assert_array_equal(q, q0)
    np.testing.assert_array_equal(k, k0)


def test_disjoint_views_of_one_buffer_are_fine() -> None:
    """Interleaved but disjoint slices share a memory range, not memory."""
    buf = arr(3, 16)
    x, out = buf[:, 8:], buf[:, :8]
    want = cpukern.rms_norm(x.copy(), arr(8))
    cpukern.rms_norm(x, arr(8), out=out)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_unknown_and_unsupported_variants() -> None:
    with pytest.raises(cpukern.UnknownISAError, match="nosuchisa"), ops.use_variant("nosuchisa"):
        pass
    have = set(cpukern.supported_variants())
    from cpukern import _dispatch

    built = _dispatch.DISPATCHER.built_variants()
    beyond = [v for v in built if v not in have]
    if beyond:  # a variant built here that this CPU cannot run: refused before loading it
        with pytest.raises(cpukern.UnsupportedISAError, match=beyond[-1]), ops.use_variant(beyond[-1]):
            pass


def test_abi_codes_match_the_c_headers() -> None:
    """The dtype and status codes of python/cpukern/_abi.py are export.h's enums,
    gemm.py's packed-weight kinds gemm.h's."""
    from cpukern import _abi, gemm
    from testsupport import REPO

    include = REPO / "csrc" / "include" / "cpukern"
    header = (include / "export.h").read_text()
    kinds = dict(re.findall(r"constexpr int32_t (kKind\w+) = (\d+);", (include / "gemm.h").read_text()))
    assert {"bfloat16": int(kinds["kKindBf16"]), "int8": int(kinds["kKindInt8"])} == gemm._KIND_CODE

    def enum(name: str) -> dict[str, int]:
        body = re.search(r"enum " + name + r" : int32_t \{(.*?)\};", header, re.S)
        assert body, f"export.h has no enum {name}"
        return {k: int(v) for k, v in re.findall(r"(CPUKERN_\w+) = (\d+)", body.group(1))}

    dtypes = enum("CpukernDtype")
    header_dtypes = {"float32": dtypes["CPUKERN_F32"], "bfloat16": dtypes["CPUKERN_BF16"], "float16": dtypes["CPUKERN_F16"]}
    assert header_dtypes == _abi.DTYPE_CODES
    statuses = enum("CpukernStatus")
    python = {"CPUKERN_" + k.removeprefix("STATUS_"): v for k, v in vars(_abi).items() if k.startswith("STATUS_E")}
    assert python == {k: v for k, v in statuses.items() if k != "CPUKERN_OK"}
    assert set(_abi.STATUS_TEXT) == set(python.values()), "every status has its text"
