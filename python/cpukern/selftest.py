"""`python -m cpukern.selftest`: the installed package checks its own kernels.

Runs every op on small random inputs (odd sizes included, so vector tails are
hit) for every variant this CPU runs, and compares the results with float64
NumPy references. Needs only NumPy: that is what runs inside an emulated
target-arch Python (`cpubuild test`), where ml_dtypes may not exist. Without
ml_dtypes, bfloat16 data travels as its uint16 bit patterns straight into the
kernels' C ABI, which is exactly where byte order matters (s390x is
big-endian). Where a variant has no float16 kernels (GCC 12 on s390x has no
half-precision type), the check is that the op refuses float16 with a
TypeError that says so.

Exit status 0 when every check passed, 1 otherwise; `--json` prints one
object with `variant` (the dispatcher's choice), `variants` (those checked),
`passed`, `failed`, `failures` and `notes`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _abi, ops
from ._dispatch import DISPATCHER


def numpy_bfloat16() -> Any:
    """ml_dtypes' bfloat16 when installed, else None (imported only when asked:
    it takes seconds to import under emulation)."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes.bfloat16


SEED = 20240607
HIDDEN_SIZES = (1, 7, 64, 133)  # one lane, a tail only, whole vectors, vectors + tail
ROWS = 3
# |got - want| <= ATOL + RTOL * |want|: a few units in the last place of the
# dtype (the kernels accumulate in float32 and use a ~2 ulp exp()).
TOLERANCE = {"float32": (2e-5, 1e-6), "bfloat16": (1.6e-2, 1e-3), "float16": (2e-3, 1e-4)}
DTYPES = ("float32", "bfloat16", "float16")


# ------------------------------------------------------------------ values


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float -> bfloat16 bit patterns (round to nearest even), native byte order."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@dataclass(frozen=True, kw_only=True)
class Typed:
    """One dtype's view of the data: how to store floats and read them back."""

    name: str
    raw: bool  # bfloat16 as uint16 through the C ABI (no ml_dtypes)

    def make(self, values: np.ndarray) -> np.ndarray:
        if self.name == "bfloat16":
            return bf16_bits(values) if self.raw else np.asarray(values, dtype=np.float32).astype(numpy_bfloat16())
        return np.asarray(values).astype(self.name)

    def read(self, a: np.ndarray) -> np.ndarray:
        if self.name == "bfloat16" and self.raw:
            return bf16_values(a)
        return np.asarray(a).astype(np.float64)

    def round(self, values: np.ndarray) -> np.ndarray:
        """What storing float64 values in this dtype keeps."""
        return self.read(self.make(values))

    def empty(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.make(np.zeros(shape))


def close(got: np.ndarray, want: np.ndarray, dtype: str) -> str | None:
    rtol, atol = TOLERANCE[dtype]
    err = np.abs(got - want) - (atol + rtol * np.abs(want))
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if not np.all(np.isfinite(got)):
        return "non-finite output"
    if np.any(err > 0):
        i = np.unravel_index(int(np.argmax(err)), err.shape)
        return f"at {tuple(int(x) for x in i)}: got {got[i]!r}, want {want[i]!r}"
    return None


# ------------------------------------------------------------------ calls


def _raw(op: str, variant: str) -> Callable[..., int]:
    fn: Callable[..., int] = _abi.function("cpukern_" + op, DISPATCHER.load_variant(variant))
    return fn


def _ptr(a: np.ndarray) -> int:
    return int(a.ctypes.data)


def _call_raw(op: str, variant: str, *args: Any) -> None:
    status = _raw(op, variant)(*args)
    if status:
        raise RuntimeError(f"cpukern_{op} returned status {status}")


BF16_CODE = _abi.DTYPE_CODES["bfloat16"]


def run_rms_norm(t: Typed, variant: str, x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    if not t.raw:
        return np.asarray(ops.rms_norm(x, w, eps))
    out = np.empty_like(x)
    _call_raw("rms_norm", variant, _ptr(out), _ptr(x), _ptr(w), x.shape[0], x.shape[1], x.shape[1], x.shape[1], eps, BF16_CODE)
    return out


def run_fused(t: Typed, variant: str, x: np.ndarray, r: np.ndarray, w: np.ndarray, eps: float) -> None:
    if not t.raw:
        ops.fused_add_rms_norm(x, r, w, eps)
        return
    _call_raw("fused_add_rms_norm", variant, _ptr(x), _ptr(r), _ptr(w), x.shape[0], x.shape[1], x.shape[1], r.shape[1], eps, BF16_CODE)


def run_silu(t: Typed, variant: str, x: np.ndarray) -> np.ndarray:
    if not t.raw:
        return np.asarray(ops.silu_and_mul(x))
    d = x.shape[1] // 2
    out = np.empty((x.shape[0], d), dtype=x.dtype)
    _call_raw("silu_and_mul", variant, _ptr(out), _ptr(x), x.shape[0], d, x.shape[1], d, BF16_CODE)
    return out


def run_rotary(t: Typed, variant: str, pos: np.ndarray, q: np.ndarray, k: np.ndarray, head: int,
               cache: np.ndarray, neox: bool) -> None:
    if not t.raw:
        ops.rotary_embedding(pos, q, k, head, cache, neox)
        return
    tokens, rot = pos.shape[0], cache.shape[1]
    _call_raw(
        "rotary_embedding", variant, _ptr(pos), 1, _ptr(q), _ptr(k), _ptr(cache), tokens, q.shape[1] // head,
        k.shape[1] // head, rot, q.shape[1], head, k.shape[1], head, cache.shape[0], cache.shape[1], int(neox),
        BF16_CODE, BF16_CODE,
    )


# ------------------------------------------------------------------ references


def ref_rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return np.asarray(x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w)


def ref_silu_and_mul(x: np.ndarray) -> np.ndarray:
    d = x.shape[-1] // 2
    a, b = x[..., :d], x[..., d:]
    return np.asarray(a / (1.0 + np.exp(-a)) * b)


def ref_rotary(pos: np.ndarray, x: np.ndarray, head: int, cache: np.ndarray, neox: bool) -> np.ndarray:
    rot = cache.shape[1]
    half = rot // 2
    out = x.reshape(x.shape[0], -1, head).copy()
    cos = cache[pos, :half][:, None, :]
    sin = cache[pos, half:][:, None, :]
    if neox:
        x1, x2 = out[..., :half].copy(), out[..., half:rot].copy()
        out[..., :half] = x1 * cos - x2 * sin
        out[..., half:rot] = x2 * cos + x1 * sin
    else:
        x1, x2 = out[..., 0:rot:2].copy(), out[..., 1:rot:2].copy()
        out[..., 0:rot:2] = x1 * cos - x2 * sin
        out[..., 1:rot:2] = x2 * cos + x1 * sin
    return np.asarray(out.reshape(x.shape))


# ------------------------------------------------------------------ the checks


@dataclass
class Results:
    passed: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def check(self, label: str, problem: str | None) -> None:
        if problem is None:
            self.passed += 1
        else:
            self.failures.append(f"{label}: {problem}")


def has_float16(variant: str) -> bool:
    return bool(_abi.function("cpukern_has_float16", DISPATCHER.load_variant(variant))())


def check_elementwise(results: Results, variant: str, t: Typed, rng: np.random.Generator) -> None:
    eps = 1e-5
    for hidden in HIDDEN_SIZES:
        tag = f"{variant} {t.name} hidden={hidden}"
        x = t.make(rng.standard_normal((ROWS, hidden)))
        w = t.make(rng.uniform(0.5, 1.5, hidden))
        want = ref_rms_norm(t.read(x), t.read(w), eps)
        results.check(f"rms_norm {tag}", close(t.read(run_rms_norm(t, variant, x, w, eps)), want, t.name))

        r = t.make(rng.standard_normal((ROWS, hidden)))
        new_r = t.round(t.read(x) + t.read(r))
        want = ref_rms_norm(new_r, t.read(w), eps)
        run_fused(t, variant, x, r, w, eps)
        results.check(f"fused_add_rms_norm residual {tag}", close(t.read(r), new_r, t.name))
        results.check(f"fused_add_rms_norm {tag}", close(t.read(x), want, t.name))

        g = t.make(rng.uniform(-6, 6, (ROWS, 2 * hidden)))
        results.check(f"silu_and_mul {tag}", close(t.read(run_silu(t, variant, g)), ref_silu_and_mul(t.read(g)), t.name))


def check_rotary(results: Results, variant: str, t: Typed, rng: np.random.Generator) -> None:
    tokens, max_pos = 3, 11
    for head, rot, heads, k_heads in ((16, 16, 2, 1), (12, 8, 3, 2), (10, 2, 1, 1)):
        for neox in (True, False):
            tag = f"{variant} {t.name} head={head} rot={rot} {'neox' if neox else 'gptj'}"
            pos = rng.integers(0, max_pos, tokens).astype(np.int64)
            angles = rng.uniform(0, 6.3, (max_pos, rot // 2))
            cache = t.make(np.concatenate([np.cos(angles), np.sin(angles)], axis=1))
            q = t.make(rng.standard_normal((tokens, heads * head)))
            k = t.make(rng.standard_normal((tokens, k_heads * head)))
            want_q = ref_rotary(pos, t.read(q), head, t.read(cache), neox)
            want_k = ref_rotary(pos, t.read(k), head, t.read(cache), neox)
            run_rotary(t, variant, pos, q, k, head, cache, neox)
            results.check(f"rotary_embedding query {tag}", close(t.read(q), want_q, t.name))
            results.check(f"rotary_embedding key {tag}", close(t.read(k), want_k, t.name))


def check_float16_refused(results: Results, variant: str) -> None:
    x = np.ones((1, 4), dtype=np.float16)
    try:
        with ops.use_variant(variant):
            ops.rms_norm(x, np.ones(4, dtype=np.float16))
    except TypeError as exc:
        if "float16" in str(exc):
            results.passed += 1
            results.notes.append(f"{variant}: float16 unsupported, refused clearly ({exc})")
            return
        results.failures.append(f"{variant}: float16 refused with an unclear message: {exc}")
        return
    results.failures.append(f"{variant}: has no float16 kernels but rms_norm accepted float16 input")


def check_gemm_w8a8(results: Results, variant: str, rng: np.random.Generator) -> None:
    from . import gemm

    # 20 x 300: the many-rows kernels (from 16 rows on) over two k blocks of 256,
    # their int32 sums added each way (gemm.INT8_SUMS: avx2 / avx512 by CPU vendor);
    # 66 x 180: the baseline's splat-panel kernels (from 64 rows; sums each way too),
    # two k blocks and 2 edge rows
    for m, k, n in ((1, 37, 19), (5, 64, 33), (20, 300, 40), (66, 180, 24)):
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        sa = rng.uniform(0.01, 0.1, m).astype(np.float32)
        sb = rng.uniform(0.01, 0.1, n).astype(np.float32)
        want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float64) * sa[:, None] * sb[None, :]
        for sums in gemm.INT8_SUMS if m >= 16 else ("",):
            with ops.use_variant(variant), _environ(gemm.INT8_SUMS_ENV, sums):
                got = gemm.gemm_w8a8(a, sa, gemm.pack_b_int8(b), sb)
            label = f"gemm_w8a8 {variant} {m}x{k}x{n}" + (f" ({sums} sums)" if sums else "")
            results.check(label, close(np.asarray(got, dtype=np.float64), want, "float32"))


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """`name` set to `value` (unset when empty) for the block, then as before."""
    before = os.environ.pop(name, None)
    if value:
        os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)
        if before is not None:
            os.environ[name] = before


def check_gemm_bf16(results: Results, variant: str, rng: np.random.Generator) -> None:
    """gemm_bf16 through the C ABI with bfloat16 bit patterns (no ml_dtypes
    needed): b packed by the variant itself, float32 output. The bound is the
    one of float32 summation: K * 2^-23 * (|a| @ |b|) per element (the
    bfloat16 products are exact in float32)."""
    from . import gemm

    lib = DISPATCHER.load_variant(variant)
    code = gemm._KIND_CODE["bfloat16"]
    for m, k, n in ((1, 37, 19), (5, 64, 33), (17, 130, 40), (20, 300, 40), (34, 180, 24)):
        a = bf16_bits(rng.standard_normal((m, k)))
        b = bf16_bits(rng.standard_normal((k, n)))
        packed = np.zeros(max(int(_abi.function("cpukern_gemm_packed_bytes", lib)(code, k, n)), 1), dtype=np.uint8)
        out = np.full((m, n), np.nan, dtype=np.float32)
        label = f"gemm_bf16 {variant} {m}x{k}x{n}"
        if _abi.function("cpukern_gemm_pack_b", lib)(code, _ptr(b), k, n, n, 1, _ptr(packed)) or _abi.function(
            "cpukern_gemm_bf16", lib
        )(_ptr(a), k, _ptr(packed), m, n, k, _ptr(out), n, _abi.DTYPE_CODES["float32"]):
            results.failures.append(f"{label}: the C ABI returned an error status")
            continue
        fa, fb = bf16_values(a), bf16_values(b)
        want, bound = fa @ fb, k * 2.0**-23 * (np.abs(fa) @ np.abs(fb))
        err = np.abs(out.astype(np.float64) - want)
        worst = float(np.max(err - bound))
        results.check(label, None if worst <= 0 else f"error exceeds the float32 summation bound by {worst:.3g}")


def run_checks(variants: list[str], *, raw_bf16: bool) -> Results:
    results = Results()
    if raw_bf16:
        results.notes.append("bfloat16 checked through the C ABI as uint16 bit patterns (no ml_dtypes used)")
    for variant in variants:
        rng = np.random.default_rng(SEED)
        for name in DTYPES:
            if name == "float16" and not has_float16(variant):
                check_float16_refused(results, variant)
                continue
            t = Typed(name=name, raw=name == "bfloat16" and raw_bf16)
            with ops.use_variant(variant):
                check_elementwise(results, variant, t, rng)
                check_rotary(results, variant, t, rng)
        if hasattr(DISPATCHER.load_variant(variant), "cpukern_gemm_w8a8"):
            check_gemm_w8a8(results, variant, rng)
        if hasattr(DISPATCHER.load_variant(variant), "cpukern_gemm_bf16"):
            check_gemm_bf16(results, variant, rng)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cpukern.selftest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--selected-only", action="store_true",
                        help="check only the dispatcher's choice (default: every variant this CPU runs)")
    parser.add_argument("--raw-bf16", action="store_true",
                        help="pass bfloat16 as uint16 bit patterns through the C ABI even when ml_dtypes is installed")
    args = parser.parse_args(argv)
    selected = DISPATCHER.selected_isa()
    variants = [selected] if args.selected_only else DISPATCHER.supported_variants()
    if selected not in variants:  # CPUKERN_DISABLE_ISA may hide it from the supported list
        variants.append(selected)
    results = run_checks(variants, raw_bf16=args.raw_bf16 or numpy_bfloat16() is None)
    summary = {
        "variant": selected,
        "variants": variants,
        "machine_byteorder": sys.byteorder,
        "passed": results.passed,
        "failed": len(results.failures),
        "failures": results.failures,
        "notes": results.notes,
    }
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        for note in results.notes:
            print(f"note: {note}")
        for failure in results.failures:
            print(f"FAIL {failure}")
        print(f"selected {selected}; checked {', '.join(variants)} ({sys.byteorder}-endian): "
              f"{results.passed} passed, {len(results.failures)} failed")
    return 1 if results.failures else 0


if __name__ == "__main__":
    sys.exit(main())
