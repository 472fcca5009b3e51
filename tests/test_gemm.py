"""gemm_bf16 and gemm_w8a8 on every variant this CPU runs (forced one by one)
against a float64 numpy reference: GEMV (M=1), tails in every dimension (K
not a multiple of the k block, odd N, M across row panels and blocks, the
few-rows and many-rows micro-kernels), strided inputs and outputs, transposed
weights, torch tensors, and the argument errors."""

from __future__ import annotations

import os
from typing import Any

import pytest
from testsupport import skip_host_fact

np = pytest.importorskip("numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")

import cpukern  # noqa: E402
from cpukern import gemm, ops  # noqa: E402

VARIANTS = cpukern.supported_variants()
BF16 = ml_dtypes.bfloat16

# (M, N, K): GEMV, tiny, odd N, K off every block size (2, 4, 32, 64, 256,
# 512), M around the few-rows/many-rows switch (16, 32) and the row blocks (96+)
SHAPES = [
    (1, 1, 1),
    (1, 33, 4097),
    (2, 7, 5),
    (5, 17, 67),
    (15, 40, 300),
    (16, 9, 129),
    (33, 65, 530),
    (130, 37, 1030),
]


def rand_bf16(shape: tuple[int, ...], seed: int) -> Any:
    return np.random.default_rng(seed).standard_normal(shape).astype(BF16)


def rand_int8(shape: tuple[int, ...], seed: int) -> Any:
    return np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8)


def f64(a: Any) -> Any:
    return np.asarray(a).astype(np.float64)


def check_bf16_product(got: Any, a: Any, b: Any, out_dtype: str, what: str) -> None:
    """float32 accumulation: |err| <= K * 2^-23 * (|a| @ |b|) (+ one bf16 rounding)."""
    want = f64(a) @ f64(b)
    bound = (f64(np.abs(f64(a))) @ np.abs(f64(b))) * (a.shape[1] + 4) * 2.0**-23
    if out_dtype == "bfloat16":
        bound = bound + np.abs(want) * 2.0**-8
    err = np.abs(f64(got) - want)
    bad = err > bound + 1e-30
    assert not bad.any(), f"{what}: {int(bad.sum())} elements off, worst {float((err - bound).max())}"


def check_w8a8(got: Any, a: Any, sa: Any, b: Any, sb: Any, out_dtype: str, what: str) -> None:
    """int32 products are exact; then two float32 scalings (+ one bf16 rounding)."""
    exact = f64(a) @ f64(b)
    want = exact * f64(sa)[:, None] * f64(sb)[None, :]
    rel = 2.0**-8 if out_dtype == "bfloat16" else 4 * 2.0**-24
    err = np.abs(f64(got) - want)
    bad = err > np.abs(want) * rel + 1e-30
    assert not bad.any(), f"{what}: {int(bad.sum())} elements off, worst relative {float((err / (np.abs(want) + 1e-30)).max())}"


@pytest.mark.parametrize("kernel", ["", *gemm.BF16_KERNELS], ids=lambda k: k or "by-cpu")
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_bf16_matches_float64(variant: str, shape: tuple[int, int, int], kernel: str,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with the avx512bf16 variant's larger-M kernel forced each way (one packed B for both)."""
    monkeypatch.setenv(gemm.BF16_KERNEL_ENV, kernel)
    m, n, k = shape
    a, b = rand_bf16((m, k), m * 7 + k), rand_bf16((k, n), n * 3 + k)
    with ops.use_variant(variant):
        packed = cpukern.pack_b(b)
        assert packed.variant == variant and packed.shape == (k, n)
        for out_dtype in ("float32", "bfloat16"):
            got = cpukern.gemm_bf16(a, packed, out_dtype=out_dtype)
            assert got.shape == (m, n) and got.dtype == np.dtype(out_dtype if out_dtype == "float32" else BF16)
            check_bf16_product(got, a, b, out_dtype, f"{variant} {shape} -> {out_dtype}")


@pytest.mark.parametrize("sums", ["", *gemm.INT8_SUMS], ids=lambda k: k or "by-cpu")
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_w8a8_matches_float64(variant: str, shape: tuple[int, int, int], sums: str,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with the avx2 / avx512 variants' larger-M sums forced each way (one packed B for both)."""
    monkeypatch.setenv(gemm.INT8_SUMS_ENV, sums)
    m, n, k = shape
    rng = np.random.default_rng(m + n + k)
    a, b = rand_int8((m, k), m + 1), rand_int8((k, n), n + 2)
    sa = (rng.random(m) * 0.02 + 0.001).astype(np.float32)
    sb = (rng.random(n) * 0.02 + 0.001).astype(np.float32)
    with ops.use_variant(variant):
        packed = cpukern.pack_b_int8(b)
        for out_dtype in ("float32", "bfloat16"):
            got = cpukern.gemm_w8a8(a, sa, packed, sb, out_dtype=out_dtype)
            check_w8a8(got, a, sa, b, sb, out_dtype, f"{variant} {shape} -> {out_dtype}")


@pytest.mark.parametrize("sums", gemm.INT8_SUMS)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("a_value", [-128, 127])
def test_w8a8_extremes_are_exact(variant: str, a_value: int, sums: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """-128 x -128 everywhere: saturating int16 tricks (vpmaddubsw) fail here;
    127 (+128: both nibbles 15) x -128: the largest sums of the nibble GEMV;
    127 x 127 (+128: 255 x 255): the largest of the float sums, 256 k per block.
    66 rows: the baseline's splat-panel kernels too (from 64 rows), two rows past its 4-row tiles."""
    m, n, k = 66, 20, 1001
    monkeypatch.setenv(gemm.INT8_SUMS_ENV, sums)
    a = np.full((m, k), a_value, np.int8)
    b = np.full((k, n), -128, np.int8)
    b[:, 1::2] = 127
    ones_m, ones_n = np.ones(m, np.float32), np.ones(n, np.float32)
    with ops.use_variant(variant):
        for rows in (1, m):  # few-rows and many-rows kernels
            got = cpukern.gemm_w8a8(a[:rows], ones_m[:rows], cpukern.pack_b_int8(b), ones_n)
            want = a[:rows].astype(np.int64) @ b.astype(np.int64)  # |values| < 2^24: exact in float32
            assert np.array_equal(got, want.astype(np.float32)), f"{variant}: rows={rows}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_w8a8_float_sums_ignore_the_callers_flush_to_zero(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The float sums are subnormal floats: with flush-to-zero and
    denormals-are-zero set by the caller (torch.set_flush_denormal) the kernel
    clears them for its call and puts them back."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv(gemm.INT8_SUMS_ENV, "float")
    rng = np.random.default_rng(9)
    a = rng.integers(-128, 128, (64, 600), dtype=np.int8)  # 64 rows: the baseline's float sums too
    b = rng.integers(-128, 128, (600, 24), dtype=np.int8)
    tiny = np.float32(1e-39)  # subnormal
    assert torch.set_flush_denormal(True), "this CPU has no flush-to-zero / denormals-are-zero"
    try:
        with ops.use_variant(variant):
            got = cpukern.gemm_w8a8(a, np.ones(64, np.float32), cpukern.pack_b_int8(b), np.ones(24, np.float32))
        assert tiny * np.float32(1) == 0, "the caller's flush-to-zero was not put back"
    finally:
        torch.set_flush_denormal(False)
    assert tiny * np.float32(1) != 0
    assert np.array_equal(got, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32)), variant


SMALL_CACHES_CHECK = r"""
import json, sys
import numpy as np, ml_dtypes
import cpukern
from cpukern import ops
rng = np.random.default_rng(5)
done = []
for variant in cpukern.supported_variants():
    with ops.use_variant(variant):
        for m, n, k in ((130, 37, 1030), (33, 65, 530), (20, 9, 70), (1, 37, 1030), (1, 65, 532), (1, 9, 70)):
            a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
            b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
            fa, fb = a.astype(np.float64), b.astype(np.float64)
            err = np.abs(cpukern.gemm_bf16(a, cpukern.pack_b(b)) - fa @ fb)
            assert (err <= np.abs(fa) @ np.abs(fb) * (k + 4) * 2.0**-23 + 1e-30).all(), (variant, m, n, k)
            ai = rng.integers(-128, 128, (m, k), dtype=np.int8)
            bi = rng.integers(-128, 128, (k, n), dtype=np.int8)
            got = cpukern.gemm_w8a8(ai, np.ones(m, np.float32), cpukern.pack_b_int8(bi), np.ones(n, np.float32))
            want = ai.astype(np.int64) @ bi.astype(np.int64)  # |values| < 2^24: exact in float32
            assert np.array_equal(got, want.astype(np.float32)), (variant, m, n, k)
    done.append(variant)
print(json.dumps(done))
"""


@pytest.mark.parametrize("sizes", ["4,16", "1,1,65536"])
def test_blocking_for_small_caches(sizes: str) -> None:
    """The blocking caps k and row blocks by the host's L1d / L2 (read once per
    process): CPUKERN_CACHE_SIZES stands in for a tiny-cache host, so every
    variant's GEMMs run in k blocks of 32 and row blocks of one micro-panel.
    Its LLC (third, KiB; none: 0) picks the GEMV's form where a kernel has two:
    the streamed one without, the cached one with 64 MiB (the other tests, on
    the host's LLC, take the cached one for their small weights)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "CPUKERN_CACHE_SIZES": sizes}
    proc = subprocess.run([sys.executable, "-c", SMALL_CACHES_CHECK], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == VARIANTS


@pytest.mark.parametrize("variant", VARIANTS)
def test_strided_inputs_outputs_and_transposed_weights(variant: str) -> None:
    m, n, k = 24, 50, 96
    wide = rand_bf16((2 * m, k + 10), 1)
    a = wide[::2, 3 : 3 + k]  # row stride 2 * (k + 10), offset columns: no copy needed
    w = rand_bf16((n, k), 2)  # a torch Linear weight is [N, K]: pack its transpose
    out_big = np.zeros((m, n + 6), np.float32)
    out = out_big[:, 2 : 2 + n]
    with ops.use_variant(variant):
        result = cpukern.gemm_bf16(a, cpukern.pack_b(w.T), out=out)
        assert result is out
        check_bf16_product(out, a, w.T, "float32", f"{variant} strided")
        assert not out_big[:, :2].any() and not out_big[:, 2 + n :].any(), "wrote outside out"
        ai = rand_int8((2 * m, k), 3)[::2]
        bi = rand_int8((n, k), 4)
        sa, sb = np.ones(m, np.float32), np.full(n, 0.5, np.float32)
        got = cpukern.gemm_w8a8(ai, sa, cpukern.pack_b_int8(bi.T), sb)
        check_w8a8(got, ai, sa, bi.T, sb, "float32", f"{variant} strided int8")


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_bf16_kernel_override_is_checked_and_reported(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with ops.use_variant(variant):
        small = gemm.kernel_name("bfloat16", 1)
        for kernel in gemm.BF16_KERNELS:
            monkeypatch.setenv(gemm.BF16_KERNEL_ENV, kernel)
            assert gemm.kernel_name("bfloat16", 1) == small  # GEMV keeps its kernel
            if small == "vdpbf16ps" and variant != "amx":  # avx512bf16 from 16 rows on (amx: its tiles)
                rows = 256
                assert gemm.kernel_name("bfloat16", rows) == {"vdpbf16ps": "vdpbf16ps", "widened": "widened panel+fma"}[kernel]
        monkeypatch.setenv(gemm.BF16_KERNEL_ENV, "fast")
        with pytest.raises(ValueError, match="CPUKERN_GEMM_BF16='fast': expected one of vdpbf16ps, widened"):
            cpukern.gemm_bf16(rand_bf16((2, 4), 1), rand_bf16((4, 3), 2))


def cpu_vendor() -> str:
    with open("/proc/cpuinfo") as f:
        return next((line.split(":")[1].strip() for line in f if line.startswith("vendor_id")), "")


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_int8_sums_override_is_checked_and_reported(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gemm.INT8_SUMS_ENV, raising=False)  # `large`: the vendor rule's pick
    with ops.use_variant(variant):
        small, large = gemm.kernel_name("int8", 1), gemm.kernel_name("int8", 256)
        names = {}
        for sums in gemm.INT8_SUMS:
            monkeypatch.setenv(gemm.INT8_SUMS_ENV, sums)
            assert gemm.kernel_name("int8", 1) == small  # GEMV keeps its kernel
            names[sums] = gemm.kernel_name("int8", 256)
        choice = {"avx2": "int16 panel madd", "avx512": "int16 panel madd", "baseline": "splat panel+pmaddwd"}
        if variant in choice:  # the variants with the choice (x86 without VNNI)
            assert names == {"float": f"{choice[variant]}, float sums", "int": choice[variant]}
            assert large == names["float" if cpu_vendor() in ("AuthenticAMD", "HygonGenuine") else "int"]
        else:
            assert names == {"float": large, "int": large}
        monkeypatch.setenv(gemm.INT8_SUMS_ENV, "fast")
        with pytest.raises(ValueError, match="CPUKERN_GEMM_INT8_SUMS='fast': expected one of float, int"):
            cpukern.gemm_w8a8(np.ones((2, 4), np.int8), np.ones(2, np.float32), cpukern.pack_b_int8(np.ones((4, 3), np.int8)),
                              np.ones(3, np.float32))


def test_packed_weights_are_reused_and_empty_m_works() -> None:
    a, b = rand_bf16((3, 20), 5), rand_bf16((20, 9), 6)
    packed = cpukern.pack_b(b)
    first = cpukern.gemm_bf16(a, packed)
    assert np.array_equal(cpukern.gemm_bf16(a, packed), first)
    assert np.array_equal(cpukern.gemm_bf16(a, b), first), "plain b (packed per call) differs"
    assert cpukern.gemm_bf16(a[:0], packed).shape == (0, 9)
    assert "bf16:" in packed.layout and packed.nbytes >= 20 * 9 * 2
    assert gemm.kernel_name("bfloat16", 1) and gemm.kernel_name("int8", 256)


def test_packed_for_another_layout_is_refused() -> None:
    layouts: dict[str, Any] = {}
    b = rand_bf16((8, 8), 7)
    for v in VARIANTS:
        with ops.use_variant(v):
            layouts.setdefault(cpukern.pack_b(b).layout, (v, cpukern.pack_b(b)))
    if len(layouts) < 2:
        skip_host_fact(f"all runnable variants ({', '.join(VARIANTS)}) share one packed layout")
    (v1, p1), (v2, _) = list(layouts.values())[:2]
    with ops.use_variant(v2), pytest.raises(ValueError, match=f"packed by variant '{v1}'.*pack the weights again"):
        cpukern.gemm_bf16(rand_bf16((1, 8), 8), p1)


def test_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    a = torch.randn(5, 70).bfloat16()
    w = torch.randn(30, 70).bfloat16()  # Linear weight [N, K]
    packed = cpukern.pack_b(w.t())
    assert isinstance(packed.data, torch.Tensor)
    got = cpukern.gemm_bf16(a, packed)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    want = a.double() @ w.double().t()
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    got16 = cpukern.gemm_bf16(a, packed, out_dtype=torch.bfloat16)
    assert got16.dtype == torch.bfloat16
    ai = torch.randint(-128, 128, (4, 70), dtype=torch.int8)
    wi = torch.randint(-128, 128, (70, 30), dtype=torch.int8)
    sa, sb = torch.rand(4) + 0.5, torch.rand(30) + 0.5
    got = cpukern.gemm_w8a8(ai, sa, cpukern.pack_b_int8(wi), sb)
    want = (ai.double() @ wi.double()) * sa.double()[:, None] * sb.double()[None, :]
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=0)


def vm_flags(address: int) -> list[str]:
    """The VmFlags of this process's mapping that holds `address`."""
    flags: list[str] = []
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):  # a mapping's first line: start-end perms ...
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and head == "VmFlags:":
                flags = line.split()[1:]
    return flags


def test_packed_weights_are_advised_huge_pages() -> None:
    """pack_b asks Linux for transparent huge pages over its buffer (a GEMV on 4 KiB pages took 1.14-1.72x the
    time): into a torch tensor, whose allocator does not ask as NumPy does. The advice sets the mapping's
    VM_HUGEPAGE ('hg'), whatever pages the kernel then grants."""
    torch = pytest.importorskip("torch")
    if not os.path.isdir("/sys/kernel/mm/transparent_hugepage"):
        skip_host_fact("no transparent huge pages in this kernel (or not Linux)")
    w = torch.zeros(4096, 2048, dtype=torch.bfloat16)  # 16 MiB of packed weights: whole 2 MiB pages inside
    for pack in (cpukern.pack_b, lambda b: cpukern.pack_b_int8(b.to(torch.int8))):
        packed = pack(w)
        start = packed.data.data_ptr()
        assert "hg" in vm_flags(start + (4 << 20)), vm_flags(start + (4 << 20))
    assert "hg" not in vm_flags(torch.zeros(4 << 20, dtype=torch.uint8).data_ptr() + (2 << 20))  # not by itself


# ---------------------------------------------------------------- errors
A = rand_bf16((4, 16), 9)
B = cpukern.pack_b(rand_bf16((16, 8), 10))
AI = rand_int8((4, 16), 11)
BI = cpukern.pack_b_int8(rand_int8((16, 8), 12))
SA, SB = np.ones(4, np.float32), np.ones(8, np.float32)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: cpukern.gemm_bf16(A.astype(np.float32), B), TypeError, "a: dtype float32 is not supported"),
        (lambda: cpukern.gemm_bf16(A[0], B), ValueError, r"a: expected a 2-D matrix, got shape \(16,\)"),
        (lambda: cpukern.gemm_bf16(A[:, :8], B), ValueError, "a: has 8 columns but b was packed with K=16"),
        (lambda: cpukern.gemm_bf16(A[:, ::2], B), ValueError, "a: the last dimension must be contiguous"),
        (lambda: cpukern.gemm_bf16(rand_bf16((16, 4), 1).T, B), ValueError, "a: the last dimension must be contiguous"),
        (lambda: cpukern.gemm_bf16(A, [[1.0]]), TypeError,
         r"b: expected a \[K, N\] bfloat16 matrix or the weights packed by cpukern.pack_b\(\), got list"),
        (lambda: cpukern.gemm_bf16(A, rand_bf16((8, 8), 1)), ValueError, "a: has 16 columns but b has K=8 rows"),
        (lambda: cpukern.gemm_bf16(A, rand_int8((16, 8), 1)), TypeError, "b: dtype int8 is not supported"),
        (lambda: cpukern.gemm_w8a8(AI, SA, rand_int8((16, 8), 1), SB), TypeError,
         r"b: expected the weights packed by cpukern.pack_b_int8\(\), got ndarray"),
        (lambda: cpukern.gemm_bf16(A, BI), TypeError, "b: packed int8 weights, this GEMM needs bfloat16"),
        (lambda: cpukern.gemm_bf16(A, B, out_dtype="float16"), TypeError, "out_dtype: expected float32 or bfloat16"),
        (lambda: cpukern.gemm_bf16(A, B, out=np.empty((4, 9), np.float32)), ValueError, r"out: expected shape \(4, 8\)"),
        (lambda: cpukern.gemm_bf16(A, B, out=np.empty((4, 8), np.float64)), TypeError, "out: dtype float64"),
        (lambda: cpukern.gemm_bf16(A, B, out=np.empty((4, 8), np.float32), out_dtype="bfloat16"), TypeError,
         "out: dtype float32 differs from out_dtype=bfloat16"),
        (lambda: cpukern.gemm_bf16(A, B, out=np.empty((8, 4), np.float32).T), ValueError,
         "out: the last dimension must be contiguous"),
        (lambda: cpukern.gemm_bf16(A.tolist(), B), TypeError, "a: expected a numpy array or a torch tensor"),
        (lambda: cpukern.pack_b(rand_bf16((0, 8), 1)), ValueError, r"b: expected a non-empty \[K, N\] matrix"),
        (lambda: cpukern.pack_b(rand_int8((16, 8), 1)), TypeError, "b: dtype int8 is not supported"),
        (lambda: cpukern.pack_b(rand_bf16((2, 3, 4), 1)), ValueError, "b: expected a 2-D matrix"),
        (lambda: cpukern.pack_b_int8(rand_bf16((16, 8), 1)), TypeError, "b: dtype bfloat16 is not supported"),
        (lambda: cpukern.gemm_w8a8(A, SA, BI, SB), TypeError, "a: dtype bfloat16 is not supported"),
        (lambda: cpukern.gemm_w8a8(AI, SA[:3], BI, SB), ValueError, r"a_scale: expected shape \(4,\)"),
        (lambda: cpukern.gemm_w8a8(AI, SA.astype(np.float64), BI, SB), TypeError, "a_scale: dtype float64"),
        (lambda: cpukern.gemm_w8a8(AI, SA, BI, SB[:7]), ValueError, r"b_scale: expected shape \(8,\)"),
        (lambda: cpukern.gemm_w8a8(AI, np.ones(8, np.float32)[::2], BI, SB), ValueError, "a_scale: must be contiguous"),
        (lambda: cpukern.gemm_w8a8(AI, SA, B, SB), TypeError, "b: packed bfloat16 weights, this GEMM needs int8"),
    ],
    ids=lambda x: "" if callable(x) or isinstance(x, type) else x[:40],
)
def test_argument_errors(call: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        call()


def test_read_only_and_overlapping_outputs() -> None:
    out = np.empty((4, 8), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out: array is read-only"):
        cpukern.gemm_bf16(A, B, out=out)
    buf = np.zeros((4, 16), np.float32)
    a_alias = buf.view(np.int8)[:, :16]  # int8 view over out's bytes
    with pytest.raises(ValueError, match="out: overlaps a"):
        cpukern.gemm_w8a8(a_alias, SA, BI, SB, out=buf[:, :8])


def test_mixing_numpy_and_torch_is_refused() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="out: expected a numpy array like the other arguments"):
        cpukern.gemm_bf16(A, B, out=torch.empty(4, 8))
    with pytest.raises(TypeError, match="a_scale: expected a torch tensor"):
        cpukern.gemm_w8a8(torch.from_numpy(AI), SA, BI, torch.from_numpy(SB))
