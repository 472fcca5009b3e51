"""`python -m dotlib.selftest [--json]`: the installed package checks its own kernels.

Runs both kernels of every variant this CPU runs against a pure-Python
reference (no NumPy needed), on sizes that hit whole vectors, vector tails
and the int8 block boundary. `cpubuild test` runs it under emulated CPUs and
reads the JSON: {"variant", "variants", "passed", "failed", "failures"}.
Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import array
import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import dot, dot_i8, selected_isa, supported_variants

SEED = 20240607
# empty, shorter than a vector, vector +- 1 (4, 8, 16, 32 lanes), larger,
# and across the int8 kernels' 65536-element block
SIZES = (0, 1, 3, 15, 16, 17, 31, 32, 33, 64, 100, 1000, 65536 + 33)


def exact_floats(rng: random.Random, n: int) -> list[float]:
    """Multiples of 1/4 from -2 to 2: the products are multiples of 1/16 up to 4, so every
    partial sum over the sizes below (under 4 * 65569 in steps of 1/16) is exact in float32."""
    return [rng.randint(-8, 8) / 4 for _ in range(n)]


@dataclass(frozen=True)
class Case:
    name: str
    kernel: Callable[..., float]  # dot or dot_i8
    a: Any
    b: Any
    want: float
    bound: float = 0.0  # the error allowed; 0: exact

    def check(self, variant: str) -> str | None:
        """None, or what went wrong."""
        got = self.kernel(self.a, self.b, variant=variant)
        if abs(got - self.want) <= self.bound:
            return None
        return f"got {got!r}, want {self.want!r}" + (f" (error bound {self.bound:.3g})" if self.bound else "")


def cases() -> list[Case]:
    """The checks; their data is made once and reused for every variant."""
    rng = random.Random(SEED)
    out: list[Case] = []
    for n in SIZES:
        a, b = exact_floats(rng, n), exact_floats(rng, n)
        out.append(Case(f"dot exact n={n}", dot, a, b, sum(x * y for x, y in zip(a, b, strict=True))))
        # random float32 data, through the buffer path: within the rounding-error bound
        fa = array.array("f", [rng.uniform(-1, 1) for _ in range(n)])
        fb = array.array("f", [rng.uniform(-1, 1) for _ in range(n)])
        products = [x * y for x, y in zip(fa, fb, strict=True)]
        out.append(Case(f"dot float32 n={n}", dot, fa, fb, sum(products),
                        (n + 1) * 2.0**-23 * sum(map(abs, products))))
        ia = [rng.randint(-128, 127) for _ in range(n)]
        ib = [rng.randint(-128, 127) for _ in range(n)]
        out.append(Case(f"dot_i8 n={n}", dot_i8, ia, ib, sum(x * y for x, y in zip(ia, ib, strict=True))))
    # the largest products everywhere: the 32-bit lanes must not overflow
    worst = array.array("b", [-128] * SIZES[-1])
    out.append(Case("dot_i8 -128*-128", dot_i8, worst, worst, 16384 * len(worst)))
    return out


def run() -> dict[str, Any]:
    variants = supported_variants()
    checks = cases()
    passed, failures = 0, []
    for variant in variants:
        for case in checks:
            try:
                problem = case.check(variant)
            except Exception as exc:  # a crash of the binding is a failed check too
                problem = f"{type(exc).__name__}: {exc}"
            if problem is None:
                passed += 1
            else:
                failures.append(f"{variant}: {case.name}: {problem}")
    return {"variant": selected_isa(), "variants": variants, "passed": passed, "failed": len(failures),
            "failures": failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dotlib.selftest",
                                     description="Check every variant this CPU runs against a pure-Python reference.")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = run()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for failure in result["failures"]:
            print(f"FAIL {failure}")
        print(f"{result['passed']} passed, {result['failed']} failed "
              f"(variants: {', '.join(result['variants'])}; selected: {result['variant']})")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
