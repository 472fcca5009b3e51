"""cpukern's benchmark cases: the foundation ops at the foundation benchmark's
shapes (shared by bench_variants.py, which `cpubuild bench` runs, and
bench_ops.py, so both time the same thing) and the GEMMs ([M, N, K] with
N = K = 4096).

A case holds the timed call of cpukern (the selected variant, and a factory
for any forced variant), torch eager's equivalent when torch is installed and
a copy of the same bytes for memory-bound cases. Inputs are built once per
case; cpukern writes into preallocated outputs (`out=`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cpubuild.bench import timing

HIDDEN = 4096
INTERMEDIATE = 11008  # silu_and_mul input is [T, 2 * 11008]
HEAD_SIZE, KV_HEADS, MAX_POSITION = 128, 8, 4096
OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding")
GEMM_OPS = ("gemm_bf16", "gemm_w8a8")
GEMM_NK = 4096
GEMM_M = (1, 32, 256)
# N of the GEMV (M = 1, K = 4096) cases: weights of 32 MiB (bf16) that the
# hosts measured so far hold largely in their LLC, and 256 MiB that they cannot
# (an LLM's decode step streams its weights from DRAM; 32768 ~ an lm_head).
GEMV_N = (4096, 32768)


@dataclass(frozen=True, kw_only=True)
class Case:
    op: str
    dtype: str  # "bf16" / "fp32" / "int8"
    shape: list[int]  # the op's main input; [M, N, K] for GEMMs
    cpukern: Callable[[], Any]  # on the dispatcher's variant
    for_variant: Callable[[str], Callable[[], Any]]  # the timed call on a forced variant (timing.InContext)
    torch: Callable[[], Any] | None
    memcpy: Callable[[], Any] | None  # None: not memory-bound
    # the roofline (docs/project.md): arithmetic (a multiply-add counts 2; None
    # for element-wise ops, whose bound is memory) and the minimum memory
    # traffic of one call, of which written
    flops: int | None = None
    bytes: int | None = None
    bytes_written: int | None = None
    working_set: int | None = None  # the bytes touched, where fewer than `bytes` (in place)


def _in_variant(fn: Callable[[], Any]) -> Callable[[str], Callable[[], Any]]:
    def factory(variant: str) -> Callable[[], Any]:
        return _forced(fn, variant)

    return factory


def _forced(fn: Callable[[], Any], variant: str) -> timing.InContext:
    """fn on `variant`, forced once per timing round (as a host that selects it runs it)."""
    from cpukern import ops

    return timing.InContext(fn=fn, context=lambda: ops.use_variant(variant))


def op_case(op: str, dtype: str, tokens: int, *, has_torch: bool) -> Case:
    """One foundation op at [tokens, hidden] (silu_and_mul: [tokens, 2 * 11008])."""
    import ml_dtypes
    import numpy as np
    from cpukern import ops as cpukern

    np_dtype = ml_dtypes.bfloat16 if dtype == "bf16" else np.float32
    rng = np.random.default_rng(tokens)
    e = 2 if dtype == "bf16" else 4

    def rand(*shape: int, scale: float = 1.0) -> Any:
        # scaled before the cast: bfloat16 * a Python float is float32 under newer ml_dtypes
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np_dtype)

    def to_torch(a: Any) -> Any:
        import torch

        t = torch.from_numpy(a.view(np.int16) if dtype == "bf16" else a)
        return t.view(torch.bfloat16) if dtype == "bf16" else t

    torch_fn: Callable[[], Any] | None = None
    footprint: int | None = None  # out of place: the traffic is the footprint
    if op == "rms_norm":
        x, w, out = rand(tokens, HIDDEN), rand(HIDDEN), rand(tokens, HIDDEN)
        copy_dst = np.empty_like(x)
        fn: Callable[[], Any] = lambda: cpukern.rms_norm(x, w, 1e-6, out=out)  # noqa: E731
        copy: Callable[[], Any] = lambda: np.copyto(copy_dst, x)  # noqa: E731
        if has_torch:
            import torch.nn.functional as F

            tx, tw = to_torch(x), to_torch(w)
            torch_fn = lambda: F.rms_norm(tx, (HIDDEN,), tw, 1e-6)  # noqa: E731
        shape = [tokens, HIDDEN]
        written = tokens * HIDDEN * e
        traffic = 2 * written + HIDDEN * e  # x in, out, the weight
    elif op == "fused_add_rms_norm":
        x, r, w = rand(tokens, HIDDEN), rand(tokens, HIDDEN, scale=0.01), rand(HIDDEN)
        x_dst, r_dst = np.empty_like(x), np.empty_like(r)
        fn = lambda: cpukern.fused_add_rms_norm(x, r, w, 1e-6)  # noqa: E731

        def copy() -> None:
            np.copyto(x_dst, x)
            np.copyto(r_dst, r)

        if has_torch:
            import torch.nn.functional as F

            tx, tr, tw = to_torch(rand(tokens, HIDDEN)), to_torch(rand(tokens, HIDDEN, scale=0.01)), to_torch(w)

            def torch_fn() -> None:
                tr.add_(tx)
                tx.copy_(F.rms_norm(tr, (HIDDEN,), tw, 1e-6))

        shape = [tokens, HIDDEN]
        written = 2 * tokens * HIDDEN * e  # x and the residual, in place
        traffic = 2 * written + HIDDEN * e
        footprint = written + HIDDEN * e
    elif op == "silu_and_mul":
        x, out = rand(tokens, 2 * INTERMEDIATE), rand(tokens, INTERMEDIATE)
        copy_dst = np.empty_like(x)
        fn = lambda: cpukern.silu_and_mul(x, out=out)  # noqa: E731
        copy = lambda: np.copyto(copy_dst, x)  # noqa: E731
        if has_torch:
            import torch.nn.functional as F

            tx = to_torch(x)
            torch_fn = lambda: F.silu(tx[..., :INTERMEDIATE]) * tx[..., INTERMEDIATE:]  # noqa: E731
        shape = [tokens, 2 * INTERMEDIATE]
        written = tokens * INTERMEDIATE * e
        traffic = 3 * written
    elif op == "rotary_embedding":
        heads = HIDDEN // HEAD_SIZE
        positions = rng.integers(0, MAX_POSITION, tokens).astype(np.int64)
        q, k = rand(tokens, HIDDEN), rand(tokens, KV_HEADS * HEAD_SIZE)
        angles = np.outer(np.arange(MAX_POSITION), 1e4 ** (-np.arange(0, HEAD_SIZE, 2) / HEAD_SIZE))
        cache = np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np_dtype)
        q_dst, k_dst = np.empty_like(q), np.empty_like(k)
        fn = lambda: cpukern.rotary_embedding(positions, q, k, HEAD_SIZE, cache, True)  # noqa: E731

        def copy() -> None:
            np.copyto(q_dst, q)
            np.copyto(k_dst, k)

        if has_torch:
            import torch

            tp, tq, tk, tc = torch.from_numpy(positions), to_torch(q), to_torch(k), to_torch(cache)

            def rotate(t: Any, cos: Any, sin: Any) -> None:  # vLLM's forward_native, neox style
                v = t.view(tokens, -1, HEAD_SIZE)
                x1, x2 = v.chunk(2, dim=-1)
                v.copy_(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1))

            def torch_fn() -> None:
                cos, sin = tc.index_select(0, tp).unsqueeze(-2).chunk(2, dim=-1)
                rotate(tq, cos, sin)
                rotate(tk, cos, sin)

        shape = [tokens, HIDDEN]
        written = tokens * (HIDDEN + KV_HEADS * HEAD_SIZE) * e  # q and k, in place
        traffic = 2 * written + tokens * (HEAD_SIZE * e + 8)  # + a cache row and a position per token
        footprint = traffic - written
        del heads
    else:
        raise ValueError(f"unknown op {op!r} (known: {', '.join(OPS)})")
    return Case(op=op, dtype=dtype, shape=shape, cpukern=fn, for_variant=_in_variant(fn), torch=torch_fn, memcpy=copy,
                bytes=traffic, bytes_written=written, working_set=footprint)


def gemm_case(op: str, m: int, *, has_torch: bool, n: int = GEMM_NK, k: int = GEMM_NK) -> Case:
    """gemm_bf16 (torch.matmul in bf16) or gemm_w8a8 (torch._int_mm, then the
    scales) at [m, n, k]; the copy (of the packed weight bytes) only for the
    memory-bound GEMV (m = 1). Weights are packed per variant (layouts differ)."""
    import ml_dtypes
    import numpy as np
    from cpukern import gemm as cpukern
    from cpukern import ops

    if op not in GEMM_OPS:
        raise ValueError(f"unknown op {op!r} (known: {', '.join(GEMM_OPS)})")
    rng = np.random.default_rng(m)
    out = np.empty((m, n), np.float32)
    if op == "gemm_bf16":
        a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
        b = (rng.standard_normal((k, n), dtype=np.float32) * 0.05).astype(ml_dtypes.bfloat16)

        def prepare() -> Callable[[], Any]:
            packed = cpukern.pack_b(b)
            return lambda: cpukern.gemm_bf16(a, packed, out=out)
    else:
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        sa = (rng.random(m, dtype=np.float32) + 0.5) / 128
        sb = (rng.random(n, dtype=np.float32) + 0.5) / 128

        def prepare() -> Callable[[], Any]:
            packed = cpukern.pack_b_int8(b)
            return lambda: cpukern.gemm_w8a8(a, sa, packed, sb, out=out)

    selected = prepare()

    def for_variant(variant: str) -> Callable[[], Any]:
        with ops.use_variant(variant):
            return _forced(prepare(), variant)

    torch_fn: Callable[[], Any] | None = None
    if has_torch:
        import torch

        if op == "gemm_bf16":
            ta = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
            tb = torch.from_numpy(b.view(np.int16)).view(torch.bfloat16)
            torch_fn = lambda: torch.matmul(ta, tb)  # noqa: E731
        else:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            tsa, tsb = torch.from_numpy(sa[:, None].copy()), torch.from_numpy(sb)
            torch_fn = lambda: torch._int_mm(ta, tb) * tsa * tsb  # noqa: E731
    memcpy = None
    if m == 1:
        src = np.ones(b.nbytes, np.uint8)  # the weight bytes a GEMV streams
        dst = np.empty_like(src)
        memcpy = lambda: np.copyto(dst, src)  # noqa: E731
    e = 2 if op == "gemm_bf16" else 1
    scales = 0 if op == "gemm_bf16" else 4 * (m + n)
    return Case(op=op, dtype="bf16" if op == "gemm_bf16" else "int8", shape=[m, n, k], cpukern=selected,
                for_variant=for_variant, torch=torch_fn, memcpy=memcpy, flops=2 * m * n * k,
                bytes=(m * k + k * n) * e + scales + m * n * 4, bytes_written=m * n * 4)
