"""The ops on torch tensors: eager calls, torch.ops.cpukern.* registration
(schemas declare what they mutate; opcheck validates fake implementations)
and torch.compile."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from testsupport import require

require(importlib.util.find_spec("torch") is not None, "torch is not installed")
np = pytest.importorskip("numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")

import cpukern  # noqa: E402
import torch  # noqa: E402

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def to_numpy(t: Any) -> Any:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def example_inputs(dtype: torch.dtype, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, generator=g).to(dtype)

    return {
        "x": randn(5, 64), "residual": randn(5, 64), "weight": randn(64), "gate_up": randn(5, 96),
        "positions": torch.tensor([0, 3, 9, 1, 4]), "query": randn(5, 4 * 16), "key": randn(5, 2, 16),
        "cache": randn(10, 12),
    }


def all_ops(t: dict[str, Any]) -> tuple[Any, Any]:
    y = cpukern.rms_norm(t["x"], t["weight"], 1e-5)
    cpukern.fused_add_rms_norm(y, t["residual"], t["weight"])
    h = cpukern.silu_and_mul(t["gate_up"])
    cpukern.rotary_embedding(t["positions"], t["query"], t["key"], 16, t["cache"], False)
    return y, h


@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
def test_tensors_match_numpy_path(dtype: str) -> None:
    """Same kernels whatever the container: bit-identical to the numpy path."""
    t = example_inputs(TORCH_DTYPES[dtype])
    a = {k: to_numpy(v.clone()) for k, v in t.items()}
    assert isinstance(cpukern.rms_norm(t["x"], t["weight"]), torch.Tensor)
    pairs = [
        (cpukern.rms_norm(t["x"], t["weight"]), cpukern.rms_norm(a["x"], a["weight"])),
        (cpukern.silu_and_mul(t["gate_up"]), cpukern.silu_and_mul(a["gate_up"])),
    ]
    cpukern.fused_add_rms_norm(t["x"], t["residual"], t["weight"])
    cpukern.fused_add_rms_norm(a["x"], a["residual"], a["weight"])
    cpukern.rotary_embedding(t["positions"], t["query"], t["key"], 16, t["cache"], True)
    cpukern.rotary_embedding(a["positions"], a["query"], a["key"], 16, a["cache"], True)
    pairs += [(t[k], a[k]) for k in ("x", "residual", "query", "key")]
    for got, want in pairs:
        np.testing.assert_array_equal(to_numpy(got).astype(np.float64), want.astype(np.float64))


def test_registered_schemas_declare_mutations() -> None:
    cpukern.register_torch_ops()
    expected = {
        "rms_norm": {"out"},
        "fused_add_rms_norm": {"x", "residual"},
        "silu_and_mul": {"out"},
        "rotary_embedding": {"query", "key"},
    }
    for name, mutated in expected.items():
        schema = getattr(torch.ops.cpukern, name).default._schema
        written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        assert written == mutated, f"{name}: {schema}"


def test_operators_bump_what_they_write_and_run_in_inference_mode() -> None:
    """The kernels registered through torch.library's low-level API bump the
    version counter of each tensor they write, as custom_op's layer did, so
    autograd still refuses a saved tensor modified afterwards; inference
    tensors (no counter) run as well and give what the eager call gives."""
    cpukern.register_torch_ops()
    t = example_inputs(torch.float32)
    out = torch.empty(5, 64)
    calls = [
        (lambda: torch.ops.cpukern.rms_norm(out, t["x"], t["weight"], 1e-6), [out]),
        (lambda: torch.ops.cpukern.fused_add_rms_norm(t["x"], t["residual"], t["weight"], 1e-6), [t["x"], t["residual"]]),
        (lambda: torch.ops.cpukern.silu_and_mul(out[:, :48], t["gate_up"]), [out]),
        (lambda: torch.ops.cpukern.rotary_embedding(t["positions"], t["query"], t["key"], 16, t["cache"], True),
         [t["query"], t["key"]]),
        (lambda: torch.ops.cpukern.rotary_embedding(t["positions"], t["query"], None, 16, t["cache"], True), [t["query"]]),
    ]
    for call, written in calls:
        before = [w._version for w in written]
        call()
        assert all(w._version > v for w, v in zip(written, before, strict=True)), call
    w = torch.randn(64, requires_grad=True)
    x = t["x"].clone()
    y = (x * w).sum()  # saves x for w's gradient
    torch.ops.cpukern.rms_norm(x, t["residual"], t["weight"], 1e-6)  # writes x
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    with torch.inference_mode():
        i = example_inputs(torch.bfloat16, seed=2)
        got = torch.empty(5, 64, dtype=torch.bfloat16)
        torch.ops.cpukern.rms_norm(got, i["x"], i["weight"], 1e-6)
        assert torch.equal(got, cpukern.rms_norm(i["x"], i["weight"], 1e-6))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit internals opcheck uses
def test_opcheck() -> None:
    """torch's own checks: schema vs real mutations, fake tensors, AOT dispatch."""
    cpukern.register_torch_ops()
    t = example_inputs(torch.float32)
    cases = [
        (torch.ops.cpukern.rms_norm.default, (torch.empty(5, 64), t["x"], t["weight"], 1e-6)),
        (torch.ops.cpukern.fused_add_rms_norm.default, (t["x"], t["residual"], t["weight"], 1e-6)),
        (torch.ops.cpukern.silu_and_mul.default, (torch.empty(5, 48), t["gate_up"])),
        (torch.ops.cpukern.rotary_embedding.default, (t["positions"], t["query"], t["key"], 16, t["cache"], True)),
        (torch.ops.cpukern.rotary_embedding.default, (t["positions"], t["query"], None, 16, t["cache"], False)),
    ]
    for op, args in cases:
        result = torch.library.opcheck(op, args)
        assert all(v == "SUCCESS" for v in result.values()), f"{op}: {result}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torch_compile_fullgraph() -> None:
    """Inductor end to end (aot_eager runs in test_registration_follows_torch_import)."""
    eager = example_inputs(torch.bfloat16, seed=1)
    compiled = {k: v.clone() for k, v in eager.items()}
    want = all_ops(eager)
    torch._dynamo.reset()
    got = torch.compile(all_ops, fullgraph=True)(compiled)
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    for k in eager:  # the in-place ops mutated the compiled call's inputs alike
        torch.testing.assert_close(compiled[k], eager[k], rtol=0, atol=0, msg=k)


def test_tensor_errors() -> None:
    x, w = torch.randn(2, 8), torch.randn(8)
    with pytest.raises(ValueError, match="x: tensor is on meta"):
        cpukern.rms_norm(torch.empty(2, 8, device="meta"), w)
    with pytest.raises(TypeError, match=re.escape("weight: expected a torch tensor like the other arguments")):
        cpukern.rms_norm(x, w.numpy())
    with pytest.raises(ValueError, match="x: the last dimension must be contiguous"):
        cpukern.rms_norm(torch.randn(8, 2).t(), torch.randn(2))
    with pytest.raises(TypeError, match="x: dtype float64"):
        cpukern.silu_and_mul(torch.randn(2, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="query: overlaps key"):
        qkv = torch.randn(3, 48)
        cpukern.rotary_embedding(torch.arange(3), qkv[:, :32], qkv[:, 16:32], 16, torch.randn(4, 16))
    with pytest.raises(TypeError, match="positions: dtype int32"):
        cpukern.rotary_embedding(torch.arange(3, dtype=torch.int32), torch.randn(3, 16), None, 16, torch.randn(4, 16))


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_registration_follows_torch_import() -> None:
    """torch first: registered by `import cpukern`. cpukern first: torch is not
    imported by cpukern, and the first call, even one torch.compile traces,
    registers the ops."""
    out = _run("""
        import torch, cpukern
        print(hasattr(torch.ops.cpukern, "rms_norm"), hasattr(torch.ops.cpukern, "gemm_w8a8"))
    """)
    assert out.split() == ["True", "True"]
    out = _run("""
        import sys, cpukern
        print("torch" in sys.modules)
        import torch
        def f(x, w):
            return cpukern.gemm_bf16(x, w) + cpukern.rms_norm(x, w[0]).float()
        x, w = torch.randn(3, 16).bfloat16(), torch.randn(16, 16).bfloat16()
        y = torch.compile(f, fullgraph=True, backend="aot_eager")(x, w)
        print(hasattr(torch.ops.cpukern, "rms_norm"), hasattr(torch.ops.cpukern, "gemm_bf16"), torch.equal(y, f(x, w)))
    """)
    assert out.split() == ["False", "True", "True", "True"]
