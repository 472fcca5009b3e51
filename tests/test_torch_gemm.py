"""gemm_bf16 / pack_b / gemm_w8a8 on torch tensors: eager calls, the
torch.ops.cpukern.* operators (opcheck validates schemas and fake
implementations, the packed byte count included) and torch.compile with
fullgraph=True on the eager, aot_eager and inductor backends."""

from __future__ import annotations

import ctypes
import importlib.util
import re
from typing import Any

import pytest
from testsupport import require

require(importlib.util.find_spec("torch") is not None, "torch is not installed")
np = pytest.importorskip("numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")

import cpukern  # noqa: E402
import torch  # noqa: E402
from cpukern import _abi, _dispatch, gemm, ops  # noqa: E402

M, K, N = 5, 70, 30  # K off the k groups' multiples, N off the panel widths


def example(seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    return {
        "a": torch.randn(M, K, generator=g).bfloat16(),
        "w": torch.randn(K, N, generator=g).bfloat16(),
        "ai": torch.randint(-128, 128, (M, K), dtype=torch.int8, generator=g),
        "wi": torch.randint(-128, 128, (K, N), dtype=torch.int8, generator=g),
        "sa": torch.rand(M, generator=g) + 0.5,
        "sb": torch.rand(N, generator=g) + 0.5,
    }


def to_numpy(t: Any) -> Any:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


@pytest.mark.parametrize("variant", cpukern.supported_variants())
def test_packed_nbytes_follows_the_layout_text(variant: str) -> None:
    """The fake pack_b sizes its output from the layout text: same count as the library."""
    lib = _dispatch.DISPATCHER.load_variant(variant)
    with ops.use_variant(variant):
        for dtype, code in (("bfloat16", 0), ("int8", 1)):
            _, layout = gemm.packed_layout(dtype)
            for k, n in ((1, 1), (5, 17), (67, 33), (130, 64)):
                want = _abi.function("cpukern_gemm_packed_bytes", lib)(ctypes.c_int32(code), k, n)
                assert gemm.packed_nbytes(layout, k, n) == want, (layout, k, n)
    with pytest.raises(ValueError, match="layout: 'fp8:nr4' is not a cpukern packed layout"):
        gemm.packed_nbytes("fp8:nr4", 1, 1)


def test_eager_tensors_plain_packed_and_ops_agree() -> None:
    """Plain b, pack_b, torch.ops and the numpy path run the same kernel: bit-identical."""
    t = example()
    packed = cpukern.pack_b(t["w"])
    assert isinstance(packed.data, torch.Tensor) and packed.data.dtype == torch.uint8
    got = cpukern.gemm_bf16(t["a"], packed)
    assert isinstance(got, torch.Tensor) and got.shape == (M, N) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), t["a"].double() @ t["w"].double(), rtol=1e-4, atol=1e-4)
    want = to_numpy(got)
    assert np.array_equal(to_numpy(cpukern.gemm_bf16(t["a"], t["w"])), want)
    assert np.array_equal(cpukern.gemm_bf16(to_numpy(t["a"]), to_numpy(t["w"])), want)
    via_op = torch.empty(M, N)
    torch.ops.cpukern.gemm_bf16_packed(via_op, t["a"], packed.data, K, N, packed.layout)
    assert np.array_equal(to_numpy(via_op), want)
    torch.ops.cpukern.gemm_bf16(via_op.zero_(), t["a"], t["w"])
    assert np.array_equal(to_numpy(via_op), want)
    assert torch.equal(torch.ops.cpukern.pack_b(t["w"], packed.layout), packed.data)

    qi = cpukern.pack_b_int8(t["wi"])
    got = cpukern.gemm_w8a8(t["ai"], t["sa"], qi, t["sb"], out_dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16
    via_op = torch.empty(M, N, dtype=torch.bfloat16)
    torch.ops.cpukern.gemm_w8a8(via_op, t["ai"], t["sa"], qi.data, t["sb"], K, N, qi.layout)
    assert torch.equal(via_op, got)


def test_schemas_declare_mutations() -> None:
    cpukern.register_torch_ops()
    expected = {"pack_b": set(), "gemm_bf16": {"out"}, "gemm_bf16_packed": {"out"}, "gemm_w8a8": {"out"}}
    for name, mutated in expected.items():
        schema = getattr(torch.ops.cpukern, name).default._schema
        written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        assert written == mutated, f"{name}: {schema}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit internals opcheck uses
def test_opcheck() -> None:
    """Schema vs real mutations, fake vs real outputs (pack_b's byte count), AOT dispatch with dynamic shapes."""
    cpukern.register_torch_ops()
    t = example()
    _, bf16 = gemm.packed_layout("bfloat16")
    _, int8 = gemm.packed_layout("int8")
    packed, packed_i8 = torch.ops.cpukern.pack_b(t["w"], bf16), torch.ops.cpukern.pack_b(t["wi"], int8)
    cases = [
        (torch.ops.cpukern.pack_b.default, (t["w"], bf16)),
        (torch.ops.cpukern.pack_b.default, (t["wi"].t().contiguous().t(), int8)),  # column-major
        (torch.ops.cpukern.gemm_bf16.default, (torch.empty(M, N), t["a"], t["w"])),
        (torch.ops.cpukern.gemm_bf16_packed.default, (torch.empty(M, N, dtype=torch.bfloat16), t["a"], packed, K, N, bf16)),
        (torch.ops.cpukern.gemm_w8a8.default, (torch.empty(M, N), t["ai"], t["sa"], packed_i8, t["sb"], K, N, int8)),
    ]
    for op, args in cases:
        result = torch.library.opcheck(op, args)
        assert all(v == "SUCCESS" for v in result.values()), f"{op}: {result}"


def all_gemms(a: Any, w: Any, packed: Any, ai: Any, sa: Any, wi: Any, packed_i8: Any, sb: Any) -> tuple[Any, ...]:
    y1 = cpukern.gemm_bf16(a, packed)
    y2 = cpukern.gemm_bf16(a, w, out_dtype=torch.bfloat16)  # plain weights
    y3 = cpukern.gemm_bf16(a, cpukern.pack_b(w)) + 1  # packed inside the graph
    out = torch.empty(a.shape[0], w.shape[1], dtype=torch.bfloat16)
    y4 = cpukern.gemm_w8a8(ai, sa, packed_i8, sb, out=out)
    y5 = cpukern.gemm_w8a8(ai, sa, cpukern.pack_b_int8(wi), sb).relu()
    return y1, y2, y3, y4, y5


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend: str) -> None:
    t = example(seed=1)
    args = (t["a"], t["w"], cpukern.pack_b(t["w"]), t["ai"], t["sa"], t["wi"], cpukern.pack_b_int8(t["wi"]), t["sb"])
    want = all_gemms(*args)
    torch._dynamo.reset()
    got = torch.compile(all_gemms, fullgraph=True, backend=backend)(*args)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype and g.shape == w.shape, i
        torch.testing.assert_close(g, w, rtol=0, atol=0, msg=f"result {i}")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_compiled_module_and_dynamic_shapes() -> None:
    """Packed weights held by a module; dynamic M, K, N (symbolic sizes in the fake pack_b)."""

    class Linear(torch.nn.Module):
        def __init__(self, weight: Any) -> None:
            super().__init__()
            self.packed = cpukern.pack_b(weight.t())  # Linear weight [N, K]

        def forward(self, x: Any) -> Any:
            return cpukern.gemm_bf16(x, self.packed, out_dtype=torch.bfloat16).relu()

    layer = Linear(torch.randn(16, 24).bfloat16())
    x = torch.randn(4, 24).bfloat16()
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), layer(x), rtol=0, atol=0)

    def pack_and_multiply(a: Any, w: Any) -> tuple[Any, Any]:
        packed = cpukern.pack_b(w)
        return cpukern.gemm_bf16(a, packed), packed.data

    dynamic = torch.compile(pack_and_multiply, fullgraph=True, backend="aot_eager", dynamic=True)
    for m, k, n in ((3, 20, 9), (7, 33, 18), (1, 5, 40)):
        a, w = torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()
        for g, e in zip(dynamic(a, w), pack_and_multiply(a, w), strict=True):
            assert torch.equal(g, e), (m, k, n)


def test_tensor_errors() -> None:
    t = example()
    packed = cpukern.pack_b(t["w"])
    with pytest.raises(ValueError, match=f"a: has 69 columns but b has K={K} rows"):
        cpukern.gemm_bf16(t["a"][:, 1:], t["w"])
    with pytest.raises(TypeError, match="b: expected a torch tensor like the other arguments"):
        cpukern.gemm_bf16(t["a"], to_numpy(t["w"]))
    with pytest.raises(ValueError, match="a: tensor is on meta"):
        cpukern.gemm_bf16(torch.empty(M, K, dtype=torch.bfloat16, device="meta"), packed)
    with pytest.raises(ValueError, match=re.escape("b: packed (layout bf16:nr1:kg2:kpad2:le), but variant")):
        torch.ops.cpukern.gemm_bf16_packed(torch.empty(M, N), t["a"], packed.data, K, N, "bf16:nr1:kg2:kpad2:le")
    with pytest.raises(ValueError, match=r"b\.data: expected [0-9]+ contiguous uint8 bytes"):
        torch.ops.cpukern.gemm_bf16_packed(torch.empty(M, N), t["a"], packed.data[:-2], K, N, packed.layout)
    with pytest.raises(ValueError, match=r"b\.data: expected .* got dtype float32"):
        torch.ops.cpukern.gemm_bf16_packed(torch.empty(M, N), t["a"], packed.data.float(), K, N, packed.layout)
    int8_layout = gemm.packed_layout("int8")[1]
    with pytest.raises(TypeError, match="b: packed int8 weights, this GEMM needs bfloat16"):
        torch.ops.cpukern.gemm_bf16_packed(torch.empty(M, N), t["a"], packed.data, K, N, int8_layout)
    with pytest.raises(TypeError, match="b: dtype bfloat16 is not supported; expected int8"):
        torch.ops.cpukern.pack_b(t["w"], int8_layout)
    with pytest.raises(ValueError, match="layout: 'bf16:nr1:kg2:kpad2:le' was asked for"):
        torch.ops.cpukern.pack_b(t["w"], "bf16:nr1:kg2:kpad2:le")
    with pytest.raises(TypeError, match=r"b: expected the weights packed by cpukern.pack_b_int8\(\), got Tensor"):
        cpukern.gemm_w8a8(t["ai"], t["sa"], t["wi"], t["sb"])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_compiled_errors() -> None:
    """Shape errors come from the operator when the graph runs: the same ValueError.
    Errors in Python values are raised while tracing (without fullgraph: as is)."""
    t = example()
    packed = cpukern.pack_b(t["w"])
    torch._dynamo.reset()
    run = torch.compile(lambda a, p: cpukern.gemm_bf16(a, p), fullgraph=True, backend="aot_eager")
    with pytest.raises(ValueError, match=f"a: has 69 columns but b was packed with K={K} rows"):
        run(t["a"][:, 1:].contiguous(), packed)
    half = torch.compile(lambda a, p: cpukern.gemm_bf16(a, p, out_dtype=torch.float16), backend="eager")
    with pytest.raises(TypeError, match="out_dtype: expected float32 or bfloat16"):
        half(t["a"], packed)
