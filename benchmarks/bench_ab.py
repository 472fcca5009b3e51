"""Builds of one cpukern variant library, timed in one process, interleaved.

    python benchmarks/bench_ab.py OLD.so NEW.so silu_and_mul [--dtype bf16] [--rows 512] [--threads 2]
    python benchmarks/bench_ab.py OLD.so NEW.so rms_norm|fused_add_rms_norm|rotary_embedding [--dtype f32] [--rows 512]
    python benchmarks/bench_ab.py OLD.so NEW.so [MORE.so ...] gemm_bf16 [--m 256] [--n 4096] [--k 4096]

For a kernel change: the libraries (e.g. `_cpukern_avx512bf16.so` of two
unpacked wheels, one built with a measuring macro) are loaded side by side
through the C ABI, each round calls every library once on the same inputs in
a shuffled order, and the medians are printed with the median of the
per-round ratios to the first library (a slow period then hits both sides
of a ratio); the results must agree. On this project's noisy 2-vCPU VMs two
separate processes differ by up to 2x, and even medians of interleaved calls
drift with the period; the per-round ratios drift least. Linux's AMX
permission is requested first, so `amx` libraries run too. Every library
has its own thread pool: with `--repeat 2` or more a library's turn waits
until the last one's worker stopped polling, and its first call (untimed)
wakes its own - use it for calls under a few milliseconds.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import statistics
import time
from collections.abc import Callable

# NumPy's OpenBLAS threads poll for a while after import (and after every BLAS
# call), taking a CPU from the libraries' pools: on a 2-vCPU VM a short run
# timed one library - any of them, a copy of another too - at one thread's
# speed throughout (rotary_embedding, rms_norm: 2x in about 4 of 10 runs;
# with this and the pause below, none in 11). The harness needs no threaded BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

I64, PTR = ctypes.c_int64, ctypes.c_void_p
POOL_POLL_S = 0.0005  # > cpukern's default CPUKERN_SPIN_US
DTYPE_CODE = {"f32": 0, "bf16": 1, "f16": 2}


def request_amx() -> None:
    libc = ctypes.CDLL(None)
    libc.syscall(158, 0x1023, 18)  # arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); harmless elsewhere


HUGE_PAGE = 2 << 20


def aligned_empty(shape: tuple[int, ...] | int, dtype: np.typing.DTypeLike) -> np.ndarray:
    """An array starting on a 2 MiB boundary. NumPy asks for transparent huge
    pages for its large allocations, and which of a buffer's bytes get them
    depends on where it starts: libraries given buffers that start alike are
    timed alike (the same library three times, rms_norm bf16 on Zen 4: 1.00 /
    0.95 / 0.96 with np.empty's buffers)."""
    dt = np.dtype(dtype)
    count = int(np.prod(shape))
    raw = np.empty(count * dt.itemsize + HUGE_PAGE, np.uint8)
    start = -raw.ctypes.data % HUGE_PAGE
    return raw[start:start + count * dt.itemsize].view(dt).reshape(shape)


def aligned_copy(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def bf16_bits(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def encode(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 data in the element-wise ops' dtype (bf16 as its bits)."""
    return bf16_bits(x) if dtype == "bf16" else x.astype(np.float16) if dtype == "f16" else x


def as_float(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.uint32) << 16).view(np.float32) if x.dtype == np.uint16 else x.astype(np.float32)


def silu_calls(libs: list[ctypes.CDLL], args: argparse.Namespace) -> tuple[list[Callable[[], int]], list[np.ndarray]]:
    d = 11008
    x = np.random.default_rng(0).standard_normal((args.rows, 2 * d)).astype(np.float32) * 4
    xs = encode(x, args.dtype)
    outs = [aligned_empty((args.rows, d), xs.dtype) for _ in libs]
    code = DTYPE_CODE[args.dtype]

    def call(lib: ctypes.CDLL, out: np.ndarray) -> Callable[[], int]:
        return lambda: int(lib.cpukern_silu_and_mul(PTR(out.ctypes.data), PTR(xs.ctypes.data), I64(args.rows),
                                                    I64(d), I64(2 * d), I64(d), ctypes.c_int32(code)))

    return [call(lib, out) for lib, out in zip(libs, outs, strict=True)], outs


def norm_calls(libs: list[ctypes.CDLL], args: argparse.Namespace) -> tuple[list[Callable[[], int]], list[np.ndarray]]:
    """rms_norm, or fused_add_rms_norm in place on each library's own copies
    (residual += x, x = norm(residual): repeated calls stay finite)."""
    hidden, rows, code = 4096, args.rows, DTYPE_CODE[args.dtype]
    rng = np.random.default_rng(0)
    def data(shape: tuple[int, ...]) -> np.ndarray:
        return encode(rng.standard_normal(shape).astype(np.float32), args.dtype)
    x, w, residual = data((rows, hidden)), data((hidden,)), data((rows, hidden))
    fused = args.op == "fused_add_rms_norm"
    calls, outs = [], []
    for lib in libs:
        first = aligned_copy(x) if fused else x
        second = aligned_copy(residual) if fused else aligned_empty(x.shape, x.dtype)
        outs.append(first if fused else second)

        def call(lib: ctypes.CDLL = lib, first: np.ndarray = first, second: np.ndarray = second) -> int:
            ptrs = (PTR(first.ctypes.data), PTR(second.ctypes.data)) if fused else (PTR(second.ctypes.data), PTR(first.ctypes.data))
            fn = lib.cpukern_fused_add_rms_norm if fused else lib.cpukern_rms_norm
            return int(fn(*ptrs, PTR(w.ctypes.data), I64(rows), I64(hidden), I64(hidden), I64(hidden),
                          ctypes.c_float(1e-6), ctypes.c_int32(code)))

        calls.append(call)
    return calls, outs


def rotary_calls(libs: list[ctypes.CDLL], args: argparse.Namespace) -> tuple[list[Callable[[], int]], list[np.ndarray]]:
    """rotary_embedding (neox, or GPT-J with --gptj) in place on each library's
    own query and key, cpukern's benchmark shape: 32 query and 8 key heads of
    128, a float32 cache (--cache-like-x: the cache in the rows' dtype, as
    `cpubuild bench` and vLLM have it)."""
    head, heads, kv_heads, max_pos, rows = 128, 32, 8, 4096, args.rows
    rng = np.random.default_rng(0)
    positions = rng.integers(0, max_pos, rows).astype(np.int64)
    angles = np.outer(np.arange(max_pos), 1e4 ** (-np.arange(0, head, 2) / head))
    cache = np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    cache_dtype = args.dtype if args.cache_like_x else "f32"
    cache = aligned_copy(encode(cache, cache_dtype))
    def data(width: int) -> np.ndarray:
        return aligned_copy(encode(rng.standard_normal((rows, width)).astype(np.float32), args.dtype))
    q, k = data(heads * head), data(kv_heads * head)
    calls, outs = [], []
    for lib in libs:
        lq, lk = aligned_copy(q), aligned_copy(k)
        outs.append(lq)

        def call(lib: ctypes.CDLL = lib, lq: np.ndarray = lq, lk: np.ndarray = lk) -> int:
            # rotations keep the norm: repeated calls stay finite
            return int(lib.cpukern_rotary_embedding(
                PTR(positions.ctypes.data), I64(1), PTR(lq.ctypes.data), PTR(lk.ctypes.data), PTR(cache.ctypes.data),
                I64(rows), I64(heads), I64(kv_heads), I64(head), I64(heads * head), I64(head), I64(kv_heads * head),
                I64(head), I64(max_pos), I64(head), ctypes.c_int32(0 if args.gptj else 1), ctypes.c_int32(DTYPE_CODE[args.dtype]),
                ctypes.c_int32(DTYPE_CODE[cache_dtype])))

        calls.append(call)
    return calls, outs


def gemm_calls(libs: list[ctypes.CDLL], args: argparse.Namespace) -> tuple[list[Callable[[], int]], list[np.ndarray]]:
    m, n, k = args.m, args.n, args.k
    rng = np.random.default_rng(0)
    int8 = args.op == "gemm_w8a8"
    if int8:
        a, b = rng.integers(-127, 128, (m, k), dtype=np.int8), rng.integers(-127, 128, (k, n), dtype=np.int8)
    else:
        a, b = bf16_bits(rng.standard_normal((m, k))), bf16_bits(rng.standard_normal((k, n)))
    scale_a, scale_b = np.ones(m, np.float32), np.ones(n, np.float32)
    outs = [aligned_empty((m, n), np.float32) for _ in libs]
    calls = []
    for lib, out in zip(libs, outs, strict=True):
        lib.cpukern_gemm_packed_bytes.restype = ctypes.c_int64
        packed = aligned_empty(lib.cpukern_gemm_packed_bytes(int(int8), I64(k), I64(n)), np.uint8)
        status = lib.cpukern_gemm_pack_b(int(int8), PTR(b.ctypes.data), I64(k), I64(n), I64(n), I64(1),
                                         PTR(packed.ctypes.data))
        if status != 0:
            raise SystemExit(f"cpukern_gemm_pack_b failed: {status}")

        def call(lib: ctypes.CDLL = lib, out: np.ndarray = out, packed: np.ndarray = packed) -> int:
            if int8:
                return int(lib.cpukern_gemm_w8a8(PTR(a.ctypes.data), I64(k), PTR(scale_a.ctypes.data),
                                                 PTR(packed.ctypes.data), PTR(scale_b.ctypes.data), I64(m), I64(n),
                                                 I64(k), PTR(out.ctypes.data), I64(n), ctypes.c_int32(0)))
            return int(lib.cpukern_gemm_bf16(PTR(a.ctypes.data), I64(k), PTR(packed.ctypes.data), I64(m), I64(n),
                                             I64(k), PTR(out.ctypes.data), I64(n), ctypes.c_int32(0)))

        calls.append(call)
    return calls, outs


CALLS = {"silu_and_mul": silu_calls, "rms_norm": norm_calls, "fused_add_rms_norm": norm_calls,
         "rotary_embedding": rotary_calls, "gemm_bf16": gemm_calls, "gemm_w8a8": gemm_calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("libs", nargs="+", metavar="LIB.so", help="two or more builds; the first is the reference")
    parser.add_argument("op", choices=list(CALLS))
    parser.add_argument("--dtype", choices=list(DTYPE_CODE), default="bf16", help="the element-wise ops' dtype")
    parser.add_argument("--rows", type=int, default=512, help="their rows (silu_and_mul: x 22016, norms and rotary: x 4096)")
    parser.add_argument("--gptj", action="store_true", help="rotary_embedding: GPT-J (interleaved) pairs, not neox")
    parser.add_argument("--cache-like-x", action="store_true",
                        help="rotary_embedding: the cos/sin cache in --dtype, not float32")
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=0, help="cpukern threads (default: its own choice)")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--repeat", type=int, default=1,
                        help="calls per library per round: the first warms the caches (a GEMV whose weights fit "
                             "the L3 is otherwise timed on weights another build evicted), the best of the rest counts")
    args = parser.parse_args()
    if len(args.libs) < 2:
        parser.error("give at least two libraries")
    request_amx()
    libs = [ctypes.CDLL(path) for path in args.libs]
    if args.threads:
        for lib in libs:
            lib.cpukern_set_num_threads(args.threads)
    calls, outs = CALLS[args.op](libs, args)
    # one call each from the same inputs, compared before the timing: the in-place
    # ops (fused_add_rms_norm, rotary_embedding) iterate on their own copies, where
    # an ulp at a tie (ties to even or away) grows over thousands of calls
    for path, call in zip(args.libs, calls, strict=True):
        if call() != 0:
            raise SystemExit(f"{args.op} failed in {path}")
    reference = as_float(outs[0])
    for path, out in zip(args.libs[1:], outs[1:], strict=True):
        if not np.allclose(reference, as_float(out), rtol=1e-2, atol=1e-2, equal_nan=True):
            raise SystemExit(f"{path} disagrees with {args.libs[0]}")
    times: list[list[float]] = [[] for _ in libs]
    order = random.Random(0)
    for _ in range(args.rounds):
        for which in order.sample(range(len(libs)), len(libs)):
            if args.repeat > 1:
                # each library has its own pool, whose worker polls for 200 us after a call
                # (CPUKERN_SPIN_US): let the last library's stop before this one's warm-up call
                time.sleep(POOL_POLL_S)
                calls[which]()
            best = float("inf")
            for _ in range(max(args.repeat - 1, 1)):
                start = time.perf_counter()
                if calls[which]() != 0:
                    raise SystemExit(f"{args.op} failed in {args.libs[which]}")
                best = min(best, time.perf_counter() - start)
            times[which].append(best)
    for path, t in zip(args.libs, times, strict=True):
        ratio = statistics.median(x / y for x, y in zip(t, times[0], strict=True))
        print(f"{args.op} {path}: median {statistics.median(t) * 1e6:.0f} us (best {min(t) * 1e6:.0f}), "
              f"per-round ratio to the first {ratio:.3f}")


if __name__ == "__main__":
    main()
