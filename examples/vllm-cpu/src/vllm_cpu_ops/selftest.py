"""`python -m vllm_cpu_ops.selftest [--json]`: vLLM's ops of the loaded variant against torch eager.

What `cpubuild test` runs under emulated CPUs (QEMU Arm models), where vLLM's
own pytest files are too slow: rms_norm, fused_add_rms_norm, silu_and_mul,
gelu_and_mul and rotary_embedding (NeoX and GPT-J layouts), float32 and
bfloat16, through `torch.ops._C` as vLLM calls them, against references
written from the ops' definitions. Sizes are multiples of vLLM's vector width
(its kernels require that). Prints {"variant", "variants", "passed",
"failed", "failures"}; exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import torch

from . import _load_error, selected_isa

SEED = 20260604
HIDDEN = (16, 64, 256)
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.bfloat16: {"rtol": 1.6e-2, "atol": 2e-2}}


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype).float().mul(w.float()).to(x.dtype)


def check_rms_norm(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.empty_like(x)
    torch.ops._C.rms_norm(out, x, w, 1e-6)
    return out, rms(x, w, 1e-6)


def check_fused_add(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    residual = torch.flip(x, dims=[0]).contiguous()
    total = (x.float() + residual.float()).to(x.dtype)
    got_x, got_residual = x.clone(), residual.clone()
    torch.ops._C.fused_add_rms_norm(got_x, got_residual, w, 1e-6)
    return torch.cat([got_x, got_residual]), torch.cat([rms(total, w, 1e-6), total])


def gated(op: str, act: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """vLLM's `<act>_and_mul(out, gate)`: act(first half) * second half."""
    def check(x: torch.Tensor, _: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate = torch.cat([x, x.flip(-1)], dim=-1).contiguous()
        out = torch.empty_like(x)
        getattr(torch.ops._C, op)(out, gate)
        d = x.shape[-1]
        return out, (act(gate[..., :d].float()) * gate[..., d:].float()).to(x.dtype)
    return check


def rotate(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """Rotary embedding of the first 2*cos.shape[-1] dims of each head (positions already looked up)."""
    half = cos.shape[-1]
    qf = q.float()
    if neox:
        x1, x2 = qf[..., :half], qf[..., half:2 * half]
        rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    else:
        x1, x2 = qf[..., 0:2 * half:2], qf[..., 1:2 * half:2]
        rotated = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    return torch.cat([rotated, qf[..., 2 * half:]], dim=-1).to(q.dtype)


def rotary_case(neox: bool) -> Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    def check(x: torch.Tensor, _: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, head_size, heads = x.shape[0], 64, 2
        positions = torch.arange(tokens, dtype=torch.long).flip(0).contiguous()
        angles = torch.outer(torch.arange(16, dtype=torch.float32), torch.rand(head_size // 2, generator=torch.Generator().manual_seed(7)))
        cache = torch.cat([angles.cos(), angles.sin()], dim=-1).to(x.dtype)
        query = torch.randn(tokens, heads * head_size, generator=torch.Generator().manual_seed(11)).to(x.dtype)
        key = torch.randn(tokens, heads * head_size, generator=torch.Generator().manual_seed(13)).to(x.dtype)
        got_q, got_k = query.clone(), key.clone()
        torch.ops._C.rotary_embedding(positions, got_q, got_k, head_size, cache, neox)
        cos, sin = cache[positions].float().chunk(2, dim=-1)
        cos, sin = cos[:, None, :], sin[:, None, :]
        want = [rotate(t.view(tokens, heads, head_size), cos, sin, neox).view(tokens, -1) for t in (query, key)]
        return torch.cat([got_q, got_k]), torch.cat(want)
    return check


CASES: dict[str, Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]] = {
    "rms_norm": check_rms_norm, "fused_add_rms_norm": check_fused_add, "silu_and_mul": gated("silu_and_mul", torch.nn.functional.silu),
    "gelu_and_mul": gated("gelu_and_mul", torch.nn.functional.gelu), "rotary_embedding neox": rotary_case(True), "rotary_embedding gptj": rotary_case(False),
}


def run() -> dict[str, Any]:
    if _load_error is not None:  # a forced variant this CPU cannot run, or a CPU below the floor
        return {"variant": None, "variants": [], "passed": 0, "failed": 1, "failures": [str(_load_error)]}
    variant = selected_isa()
    generator = torch.Generator().manual_seed(SEED)
    passed, failures = 0, []
    for dtype in (torch.float32, torch.bfloat16):
        for hidden in HIDDEN:
            x = (torch.randn(5, hidden, generator=generator) * 3).to(dtype)
            w = torch.rand(hidden, generator=generator).add(0.5).to(dtype)
            for name, case in CASES.items():
                try:
                    got, want = case(x, w)
                    torch.testing.assert_close(got, want, **TOLERANCE[dtype])
                    passed += 1
                except Exception as exc:  # a mismatch or an op that raises: a failed check either way
                    failures.append(f"{variant}: {name} {dtype} hidden={hidden}: {str(exc).splitlines()[0]}")
    return {"variant": variant, "variants": [variant], "passed": passed, "failed": len(failures), "failures": failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_cpu_ops.selftest",
                                     description="Check the loaded variant's vLLM ops against torch eager.")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = run()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for failure in result["failures"]:
            print(f"FAIL {failure}")
        print(f"{result['passed']} passed, {result['failed']} failed (variant: {result['variant']})")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
