"""Every op, every dtype, every variant this CPU runs (forced one by one, the
Highway pattern) against the scalar reference kernels and a float64 numpy
reference, on random data with awkward sizes (hidden 1, 7, 4095, 4097,
single tokens, strided rows, thread splits)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

np = pytest.importorskip("numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")

import cpukern  # noqa: E402
from cpukern import ops  # noqa: E402

VARIANTS = cpukern.supported_variants()
DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
# one unit in the last place, relative: what one rounding to the dtype may cost
ULP = {"float32": 2.0**-22, "bfloat16": 2.0**-7, "float16": 2.0**-10}
# float32 arithmetic inside the kernels on top of the final rounding
COMPUTE = 4e-6
# spacing of the subnormals: the absolute error floor of one rounding
SUBNORMAL = {"float32": 2.0**-149, "bfloat16": 2.0**-133, "float16": 2.0**-24}

ROW_SHAPES = [(1, 1), (4, 1), (1, 7), (3, 7), (1, 4095), (3, 4095), (1, 4097), (3, 4097), (67, 1000)]


def rand(shape: tuple[int, ...], dtype: str, seed: int, scale: float = 1.0) -> Any:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(DTYPES[dtype])


def f64(a: Any) -> Any:
    return np.asarray(a).astype(np.float64)


def assert_close(got: Any, want: Any, dtype: str, *, what: str, atol: float = 0.0, ulps: float = 1.0) -> None:
    """|got - want| <= ulps * ulp(dtype) * |want| + float32 slack + atol, elementwise."""
    g, w = f64(got), f64(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    tol = (ulps * ULP[dtype] + COMPUTE) * np.abs(w) + atol + ulps * SUBNORMAL[dtype]
    err = np.abs(g - w)
    bad = ~(err <= tol)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err / tol, 0)), err.shape)
        pytest.fail(f"{what}: {int(bad.sum())} of {bad.size} elements off; worst at {i}: got {g[i]!r}, want {w[i]!r}")


def run_on(target: str, fn: Callable[[], Any]) -> Any:
    """Runs fn on a variant, or on the scalar reference ('reference')."""
    ctx = ops.use_reference() if target == "reference" else ops.use_variant(target)
    with ctx:
        return fn()


def np_rms_norm(x: Any, w: Any, eps: float) -> Any:
    x64 = f64(x)
    return x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * f64(w)


def np_silu_and_mul(x: Any) -> Any:
    x64 = f64(x)
    d = x64.shape[-1] // 2
    a = x64[..., :d]
    return a / (1.0 + np.exp(-a)) * x64[..., d:]


def np_rotary(positions: Any, x: Any, head_size: int, cache: Any, neox: bool) -> Any:
    """x: [*positions.shape, ...] -> float64 copy with the rotation applied."""
    lead = positions.shape
    out = f64(x).reshape(*lead, -1, head_size).copy()
    rot = cache.shape[1]
    half = rot // 2
    cs = f64(cache)[positions][..., None, :]  # [*lead, 1, rot]
    cos, sin = cs[..., :half], cs[..., half:]
    i1, i2 = (np.arange(half), np.arange(half, rot)) if neox else (np.arange(0, rot, 2), np.arange(1, rot, 2))
    a, b = out[..., i1].copy(), out[..., i2].copy()
    out[..., i1] = a * cos - b * sin
    out[..., i2] = b * cos + a * sin
    return out.reshape(x.shape)


# ---------------------------------------------------------------- rms_norm
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("variant", VARIANTS)
def test_rms_norm(variant: str, dtype: str, shape: tuple[int, int]) -> None:
    x = rand(shape, dtype, 1)
    w = rand(shape[-1:], dtype, 2)
    got = run_on(variant, lambda: cpukern.rms_norm(x, w, 1e-5))
    ref = run_on("reference", lambda: cpukern.rms_norm(x, w, 1e-5))
    assert got.dtype == x.dtype and got.shape == x.shape
    assert_close(got, ref, dtype, what=f"{variant} vs scalar reference")
    assert_close(got, np_rms_norm(x, w, 1e-5), dtype, what=f"{variant} vs numpy float64")
    assert_close(ref, np_rms_norm(x, w, 1e-5), dtype, what="scalar reference vs numpy float64")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rms_norm_layouts(dtype: str) -> None:
    """Row strides, 3-D inputs, a strided out and in place (out=x)."""
    wide = rand((6, 300), dtype, 3)
    x = wide[:, 17:273]  # row stride 300
    w = rand((256,), dtype, 4)
    want = np_rms_norm(x, w, 1e-6)
    out_wide = np.zeros((6, 512), DTYPES[dtype])
    out = out_wide[:, 256:]
    assert cpukern.rms_norm(x, w, out=out) is out
    assert_close(out, want, dtype, what="strided x and out")
    assert not out_wide[:, :256].any(), "wrote outside out"
    x3 = np.ascontiguousarray(x).reshape(2, 3, 256)
    assert_close(cpukern.rms_norm(x3, w), want.reshape(2, 3, 256), dtype, what="3-D x")
    inplace = np.ascontiguousarray(x)
    cpukern.rms_norm(inplace, w, out=inplace)
    assert_close(inplace, want, dtype, what="in place")


def test_rms_norm_empty_rows() -> None:
    x = np.zeros((0, 64), np.float32)
    assert cpukern.rms_norm(x, np.ones(64, np.float32)).shape == (0, 64)


@pytest.mark.parametrize("variant", VARIANTS)
def test_rms_norm_of_tiny_rows_with_eps_zero(variant: str) -> None:
    """bf16 rows whose squares are float32 denormals (|x| ~ 2^-68): the bf16
    dot instructions (vdpbf16ps, BFDOT) flush those squares to zero, which
    with eps = 0 would turn the row into inf; the kernel takes such a sum again
    exactly, so the row normalises to values of order 1."""
    rng = np.random.default_rng(30)
    for hidden in (64, 4096, 4097):
        magnitude = rng.uniform(1.0, 4.0, (3, hidden)) * 2.0**-68
        x = (magnitude * rng.choice([-1.0, 1.0], (3, hidden))).astype(ml_dtypes.bfloat16)
        w = rand((hidden,), "bfloat16", 31)
        got = run_on(variant, lambda x=x, w=w: cpukern.rms_norm(x, w, 0.0))
        assert np.isfinite(f64(got)).all(), f"{variant}: non-finite output for tiny rows, hidden {hidden}"
        # the float32 denormal squares themselves carry ~2^-9 relative error
        assert_close(got, np_rms_norm(x, w, 0.0), "bfloat16", what=f"{variant} hidden {hidden}", ulps=2)
        ref = run_on("reference", lambda x=x, w=w: cpukern.rms_norm(x, w, 0.0))
        assert_close(got, ref, "bfloat16", what=f"{variant} vs reference, hidden {hidden}", ulps=2)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("variant", VARIANTS)
def test_nan_and_inf_stay_in_their_row(variant: str, dtype: str) -> None:
    """A NaN / inf poisons its own row (NaN stays NaN through the bf16
    rounding), never its neighbours."""
    x = rand((4, 40), dtype, 20)
    x[1, 3], x[2, 39] = np.nan, np.inf
    w = rand((40,), dtype, 21)
    got = f64(run_on(variant, lambda: cpukern.rms_norm(x, w)))
    with np.errstate(invalid="ignore"):
        want = np_rms_norm(x, w, 1e-6)  # inf row: x / inf = 0, inf / inf = NaN
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[1]).all() and np.isnan(got[2, 39])
    finite = ~np.isnan(want)
    assert_close(got[finite], want[finite], dtype, what="rms_norm")
    gate = rand((2, 16), dtype, 22)
    gate[0, 2], gate[1, 9] = np.nan, np.nan
    out = f64(run_on(variant, lambda: cpukern.silu_and_mul(gate)))
    assert np.isnan(out[0, 2]) and np.isnan(out[1, 1]) and np.isfinite(out).sum() == out.size - 2
    r = rand((4, 40), dtype, 23)
    x2 = rand((4, 40), dtype, 24)
    x2[0, 0] = np.nan
    run_on(variant, lambda: cpukern.fused_add_rms_norm(x2, r, w))
    assert np.isnan(f64(r[0, 0])) and np.isfinite(f64(r[1:])).all() and np.isnan(f64(x2[0])).all()


# ---------------------------------------------------------------- fused_add_rms_norm
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_add_rms_norm(variant: str, dtype: str, shape: tuple[int, int]) -> None:
    x0, r0, w = rand(shape, dtype, 5), rand(shape, dtype, 6), rand(shape[-1:], dtype, 7)
    results = {}
    for target in (variant, "reference"):
        x, r = x0.copy(), r0.copy()
        assert run_on(target, lambda x=x, r=r: cpukern.fused_add_rms_norm(x, r, w, 1e-6)) is None
        results[target] = (x, r)
    # residual: one float32 add rounded to the dtype, exactly
    want_r = (x0.astype(np.float32) + r0.astype(np.float32)).astype(DTYPES[dtype])
    for target, (x, r) in results.items():
        np.testing.assert_array_equal(f64(r), f64(want_r), err_msg=f"{target}: residual")
        assert_close(x, np_rms_norm(want_r, w, 1e-6), dtype, what=f"{target} vs numpy float64")
    assert_close(results[variant][0], results["reference"][0], dtype, what=f"{variant} vs scalar reference")


def test_fused_add_rms_norm_strided_rows() -> None:
    big_x, big_r = rand((4, 200), "bfloat16", 8), rand((4, 300), "bfloat16", 9)
    x, r = big_x[:, :128], big_r[:, 100:228]
    w = rand((128,), "bfloat16", 10)
    x0, r0 = x.copy(), r.copy()
    untouched = big_r[:, :100].copy(), big_x[:, 128:].copy()
    cpukern.fused_add_rms_norm(x, r, w)
    want_r = (x0.astype(np.float32) + r0.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(f64(r), f64(want_r))
    assert_close(x, np_rms_norm(want_r, w, 1e-6), "bfloat16", what="strided x")
    np.testing.assert_array_equal(f64(big_r[:, :100]), f64(untouched[0]))
    np.testing.assert_array_equal(f64(big_x[:, 128:]), f64(untouched[1]))


# ---------------------------------------------------------------- silu_and_mul
SILU_SHAPES = [(1, 2), (4, 2), (1, 14), (3, 14), (1, 8190), (2, 8190), (1, 8194), (2, 8194), (3, 22016)]




@pytest.fixture(params=["table", "polynomial"])
def silu_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both 16-bit silu paths of the x86 variants (CPUKERN_SILU_LUT,
    read per call; the others have the polynomial only and ignore it)."""
    monkeypatch.setenv(ops.SILU_TABLE_ENV, "1" if request.param == "table" else "0")
    return str(request.param)


@pytest.mark.parametrize("shape", SILU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("variant", VARIANTS)
def test_silu_and_mul(variant: str, dtype: str, shape: tuple[int, int], silu_path: str) -> None:
    x = rand(shape, dtype, 11, scale=4.0)  # reaches the exp's saturating range too
    got = run_on(variant, lambda: cpukern.silu_and_mul(x))
    ref = run_on("reference", lambda: cpukern.silu_and_mul(x))
    assert got.shape == (shape[0], shape[1] // 2) and got.dtype == x.dtype
    assert_close(got, ref, dtype, what=f"{variant} vs scalar reference", ulps=2)
    assert_close(got, np_silu_and_mul(x), dtype, what=f"{variant} vs numpy float64", ulps=2)
    assert_close(ref, np_silu_and_mul(x), dtype, what="scalar reference vs numpy float64")


# Both ends of the exp's range (88.72: float32's exp overflows there). Not in
# the list: a in (-103, -88.72), where exp(-a) overflows float32 so the kernels,
# the float32 scalar reference and torch give -0 while the exact silu is a tiny
# normal float.
EXTREMES = [-1e30, -1e4, -105.0, -88.7, -88.5, -88.0, -87.5, -20.0, -0.0, 0.0, 20.0, 87.5, 88.0, 88.5, 1e4, 1e30]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_silu_and_mul_every_16bit_input(variant: str, dtype: str, silu_path: str) -> None:
    """All 65536 inputs of a 16-bit type (every entry of the table path), times 1."""
    gate = np.arange(1 << 16, dtype=np.uint16).view(DTYPES[dtype])
    x = np.concatenate([gate, np.ones_like(gate)])[None, :]
    with np.errstate(over="ignore", invalid="ignore"):
        want = np_silu_and_mul(x)
    got = f64(run_on(variant, lambda: cpukern.silu_and_mul(x)))
    nan, inf = np.isnan(want), np.isinf(want)
    assert np.array_equal(np.isnan(got), nan), f"{variant}: NaN where silu has none, or the reverse"
    assert np.array_equal(got[inf], want[inf]), f"{variant}: infinities"
    finite = ~(nan | inf)
    # silu(a) for a in (-103, -88.72) is a tiny float the polynomial path gives as -0 (see EXTREMES)
    assert_close(got[finite], want[finite], dtype, what=variant, ulps=2, atol=2.0**-118)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])  # bf16 takes the cheaper degree-3 exp
def test_silu_and_mul_extremes(dtype: str, silu_path: str) -> None:
    """Both ends of the exp's clamped range and the overflow fix-up."""
    x = np.array([EXTREMES + [2.0] * len(EXTREMES)], DTYPES[dtype])
    with np.errstate(over="ignore"):
        want = np_silu_and_mul(x)
    for variant in VARIANTS:
        got = run_on(variant, lambda: cpukern.silu_and_mul(x))
        assert np.isfinite(got).all(), f"{variant}: {got}"
        # results below float32's normal range (silu(-105) ~ -2e-44) may flush to zero
        assert_close(got, want, dtype, what=variant, ulps=2, atol=2.0**-126)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_silu_and_mul_propagates_nan_and_inf(dtype: str, silu_path: str) -> None:
    x = np.array([[np.nan, np.inf, -np.inf, 1.0, 1.0, 1.0, 1.0, np.inf]], DTYPES[dtype])
    with np.errstate(over="ignore", invalid="ignore"):
        want = np_silu_and_mul(x)  # [nan, inf, nan (-inf / inf), silu(1) * inf = inf]
    for variant in VARIANTS:
        got = f64(run_on(variant, lambda: cpukern.silu_and_mul(x)))
        assert np.array_equal(np.isnan(got), np.isnan(want)), f"{variant}: {got} vs {want}"
        assert np.array_equal(got[~np.isnan(got)], want[~np.isnan(want)]), f"{variant}: {got} vs {want}"


def test_silu_table_env_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel refuses a bad value (CPUKERN_EENV), remembered calls too:
    the Python side reads the environment only then."""
    x, out = np.ones((1, 4), np.float32), np.empty((1, 2), np.float32)
    cpukern.silu_and_mul(x, out=out)  # remembered from here on
    monkeypatch.setenv(ops.SILU_TABLE_ENV, "yes")
    for _ in range(2):
        with pytest.raises(ValueError, match="CPUKERN_SILU_LUT='yes': expected 0 or 1"):
            cpukern.silu_and_mul(x, out=out)
    with pytest.raises(ValueError, match="CPUKERN_SILU_LUT='yes': expected 0 or 1"):
        cpukern.silu_and_mul(np.ones((1, 4), np.float32))
    monkeypatch.setenv(ops.SILU_TABLE_ENV, "")
    cpukern.silu_and_mul(x, out=out)


def test_silu_and_mul_layouts() -> None:
    wide = rand((2, 3, 40), "float32", 12)
    x = wide[..., 4:36]  # 3-D with a row stride
    out_wide = np.zeros((2, 3, 20), np.float32)
    out = out_wide[..., 2:18]
    assert cpukern.silu_and_mul(x, out=out) is out
    assert_close(out, np_silu_and_mul(x), "float32", what="strided", ulps=2)
    assert not out_wide[..., :2].any() and not out_wide[..., 18:].any()


# ---------------------------------------------------------------- rotary_embedding
# (positions shape, query heads, key heads or None, head_size, rot_dim, query as [.., H, hs], cache float32)
ROTARY_CASES = {
    "decode-llama": ((1,), 32, 8, 128, 128, False, False),
    "mha-no-key-3d": ((7,), 4, None, 64, 64, True, True),
    "partial-rot": ((5,), 3, 1, 80, 32, False, False),
    "odd-half": ((9,), 2, 2, 18, 14, True, True),
    "pair-single-tail": ((6,), 2, 1, 64, 56, False, False),  # rot/2 = 28: a pair, a vector and a tail on AVX2
    "batch-dims": ((3, 11), 8, 2, 96, 96, False, True),
    "no-rotation": ((2,), 1, 1, 8, 0, False, False),
}


@pytest.mark.parametrize("case", list(ROTARY_CASES))
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("variant", VARIANTS)
def test_rotary_embedding(variant: str, dtype: str, neox: bool, case: str) -> None:
    lead, heads, kv_heads, head_size, rot, split_heads, cache_f32 = ROTARY_CASES[case]
    max_position = 50
    rng = np.random.default_rng(13)
    positions = rng.integers(0, max_position, lead).astype(np.int64)
    positions.reshape(-1)[0] = max_position - 1
    qshape = (*lead, heads, head_size) if split_heads else (*lead, heads * head_size)
    q0 = rand(qshape, dtype, 14)
    k0 = None if kv_heads is None else rand((*lead, kv_heads * head_size), dtype, 15)
    angles = rng.uniform(-np.pi, np.pi, (max_position, rot // 2))
    cache = np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32 if cache_f32 else DTYPES[dtype])
    results = {}
    for target in (variant, "reference"):
        q, k = q0.copy(), None if k0 is None else k0.copy()
        run_on(target, lambda q=q, k=k: cpukern.rotary_embedding(positions, q, k, head_size, cache, neox))
        results[target] = (q, k)
    atol = 4 * ULP[dtype]  # a*cos - b*sin cancels: error relative to |a| + |b| (~1 here)
    for name, x0, index in (("query", q0, 0), ("key", k0, 1)):
        if x0 is None:
            continue
        want = np_rotary(positions, x0, head_size, cache, neox)
        got, ref = results[variant][index], results["reference"][index]
        assert_close(got, want, dtype, what=f"{variant} {name} vs numpy float64", atol=atol)
        assert_close(ref, want, dtype, what=f"reference {name} vs numpy float64", atol=atol)
        assert_close(got, ref, dtype, what=f"{variant} {name} vs scalar reference", atol=atol)


def test_rotary_embedding_strided_query() -> None:
    """query and key as column slices of one qkv buffer (vLLM's split)."""
    tokens, heads, kv, hs = 6, 4, 2, 32
    qkv = rand((tokens, (heads + 2 * kv) * hs), "float32", 16)
    q, k = qkv[:, : heads * hs], qkv[:, heads * hs : (heads + kv) * hs]
    v0 = qkv[:, (heads + kv) * hs :].copy()
    positions = np.arange(tokens, dtype=np.int64)
    angles = np.linspace(0, 3, tokens * hs // 2).reshape(tokens, hs // 2)
    cache = np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    want_q, want_k = np_rotary(positions, q, hs, cache, True), np_rotary(positions, k, hs, cache, True)
    cpukern.rotary_embedding(positions, q, k, hs, cache)
    assert_close(q, want_q, "float32", what="query", atol=1e-6)
    assert_close(k, want_k, "float32", what="key", atol=1e-6)
    np.testing.assert_array_equal(qkv[:, (heads + kv) * hs :], v0)


# ---------------------------------------------------------------- import cost
def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(m for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return set(out.stdout.split())


def test_import_is_lazy() -> None:
    loaded = _modules_after("import cpukern")
    assert not loaded & {"numpy", "torch", "ctypes", "json", "cpukern.ops", "cpukern._dispatch"}


def test_cli_json_needs_no_numpy() -> None:
    code = (
        "import sys, runpy\nsys.argv = ['cpukern', '--json']\n"
        "try:\n    runpy.run_module('cpukern', run_name='__main__')\nexcept SystemExit:\n    pass"
    )
    loaded = _modules_after(code)
    assert "cpukern._dispatch" in loaded
    assert not loaded & {"numpy", "torch"}
