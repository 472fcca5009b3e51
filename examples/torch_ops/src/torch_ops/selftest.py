"""`python -m torch_ops.selftest [--json]`: the installed package checks its ops.

Runs rms_norm and silu_and_mul of the variant this process loaded (a torch
project loads one variant per process: force another with TORCH_OPS_ISA)
against torch's own eager implementation, float32 and bfloat16, on sizes that
hit whole vectors and tails. `cpubuild test` runs it under emulated CPUs and
reads the JSON: {"variant", "variants", "passed", "failed", "failures"}.
Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import torch

from . import _load_error, rms_norm, selected_isa, silu_and_mul

SEED = 20240607
# one element, shorter than a vector, vector lengths +- 1 (4, 8, 16, 32 lanes), larger
SIZES = (1, 3, 15, 16, 17, 31, 32, 33, 64, 100, 1000, 4096 + 3)
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2}}


def reference_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def reference_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    xf = x.float()
    return (torch.nn.functional.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)


def problem(got: torch.Tensor, want: torch.Tensor) -> str | None:
    try:
        torch.testing.assert_close(got, want, **TOLERANCE[want.dtype])
    except AssertionError as exc:
        return str(exc).splitlines()[0] + " " + " ".join(str(exc).splitlines()[1:3])
    return None


def run() -> dict[str, Any]:
    if _load_error is not None:  # e.g. a forced variant this CPU cannot run
        return {"variant": None, "variants": [], "passed": 0, "failed": 1, "failures": [str(_load_error)]}
    variant = selected_isa()
    generator = torch.Generator().manual_seed(SEED)
    passed, failures = 0, []
    for dtype in (torch.float32, torch.bfloat16):
        for n in SIZES:
            x = (torch.randn(3, n, generator=generator) * 4).to(dtype)
            w = torch.rand(n, generator=generator).add(0.5).to(dtype)
            gate = (torch.randn(3, 2 * n, generator=generator) * 6).to(dtype)
            cases: list[tuple[str, Callable[..., torch.Tensor], Callable[..., torch.Tensor], tuple[Any, ...]]] = [
                (f"rms_norm {dtype} n={n}", rms_norm, reference_rms_norm, (x, w, 1e-6)),
                (f"silu_and_mul {dtype} d={n}", silu_and_mul, reference_silu_and_mul, (gate,)),
            ]
            for name, ours, theirs, args in cases:
                try:
                    found = problem(ours(*args), theirs(*args))
                except Exception as exc:  # an op that raises is a failed check too
                    found = f"{type(exc).__name__}: {exc}"
                if found is None:
                    passed += 1
                else:
                    failures.append(f"{variant}: {name}: {found}")
    return {"variant": variant, "variants": [variant], "passed": passed, "failed": len(failures), "failures": failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_ops.selftest",
                                     description="Check the loaded variant's ops against torch's eager ones.")
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
