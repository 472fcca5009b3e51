"""Tests of the installed torch_ops package (build and install a wheel first, see README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import torch_ops
from torch_ops._cpubuild import built_variants, variants

ENV = "TORCH_OPS_ISA"


def python(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_OPS_")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env={**clean, **env}, timeout=600)


def reference_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def reference_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return (torch.nn.functional.silu(x[..., :d].float()) * x[..., d:].float()).to(x.dtype)


@pytest.mark.parametrize("variant", torch_ops.supported_variants())
def test_every_variant_this_cpu_runs(variant: str) -> None:
    """One process per variant (a process loads one): the selftest against torch's eager ops."""
    proc = python("-m", "torch_ops.selftest", "--json", **{ENV: variant})
    result = json.loads(proc.stdout)
    assert proc.returncode == 0, result["failures"]
    assert result["variant"] == variant and result["failed"] == 0 and result["passed"] > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (7, 33), (2, 3, 4096)])
def test_ops_match_torch(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape).to(dtype)
    w = torch.rand(shape[-1]).add(0.5).to(dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-2}
    torch.testing.assert_close(torch_ops.rms_norm(x, w, 1e-5), reference_rms_norm(x, w, 1e-5), **tol)
    gate = torch.randn(*shape[:-1], 2 * shape[-1]).to(dtype)
    torch.testing.assert_close(torch_ops.silu_and_mul(gate), reference_silu_and_mul(gate), **tol)


def test_vllm_form_writes_into_out() -> None:
    x = torch.randn(4, 64)
    out = torch.full((4, 32), float("nan"))
    assert torch.ops.torch_ops.silu_and_mul(out, x) is None
    torch.testing.assert_close(out, reference_silu_and_mul(x))


def test_torch_compile_fullgraph() -> None:
    def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch_ops.silu_and_mul(torch_ops.rms_norm(x, w, 1e-6)) * 2

    x, w = torch.randn(8, 256), torch.rand(256)
    compiled = torch.compile(block, fullgraph=True)
    torch.testing.assert_close(compiled(x, w), block(x, w))


def test_bad_arguments() -> None:
    x = torch.randn(4, 16)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        torch_ops.rms_norm(x.double(), torch.ones(16, dtype=torch.double))
    with pytest.raises(RuntimeError, match="weight is"):
        torch_ops.rms_norm(x, torch.ones(16, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="shape"):
        torch_ops.rms_norm(x, torch.ones(8))
    with pytest.raises(RuntimeError, match="even"):
        torch_ops.silu_and_mul(torch.randn(4, 15))
    with pytest.raises(RuntimeError, match="contiguous"):
        torch_ops.rms_norm(x.t(), torch.ones(4))


def test_selected_is_the_best_supported() -> None:
    if os.environ.get(ENV) or os.environ.get("TORCH_OPS_DISABLE_ISA"):
        pytest.skip(f"{ENV} / TORCH_OPS_DISABLE_ISA is set")
    assert torch_ops.selected_isa() == torch_ops.supported_variants()[-1]


def test_forcing_the_baseline() -> None:
    baseline = variants()[0]["name"]  # lowest priority first
    proc = python("-m", "torch_ops", "--json", **{ENV: baseline})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["selected"] == baseline


LACKING = [v for v in built_variants() if v not in torch_ops.supported_variants()]


@pytest.mark.skipif(not LACKING, reason="this CPU runs every built variant")
def test_a_variant_this_cpu_lacks_is_never_loaded() -> None:
    variant = LACKING[-1]
    code = f"""
import json, torch, torch_ops
try:
    torch_ops.rms_norm(torch.ones(4), torch.ones(4))
    error = None
except torch_ops.UnsupportedISAError as exc:
    error = str(exc)
maps = open("/proc/self/maps").read()
print(json.dumps({{"error": error, "mapped": "_torch_ops_{variant}." in maps}}))
"""
    proc = python("-c", code, **{ENV: variant})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["error"] and variant in result["error"] and not result["mapped"]


def test_unknown_variant_fails_cleanly() -> None:
    proc = python("-m", "torch_ops", **{ENV: "no_such_variant"})
    assert proc.returncode == 1
    assert "no_such_variant" in proc.stderr and "Traceback" not in proc.stderr
