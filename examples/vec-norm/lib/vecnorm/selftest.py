"""`python -m vecnorm.selftest [--json]`: every variant this CPU runs against pure Python.

No NumPy needed (it runs inside emulated CPUs through `cpubuild test`, which
reads the JSON object: variant, variants, passed, failed, failures). Sizes
hit whole vectors, tails and the int8 block boundary. Exit status 1 on any
failure.
"""

from __future__ import annotations

import argparse
import array
import json
import math
import random
import sys
from typing import Any

from . import _cpubuild, l2, normalize, selected_isa, sumsq_i8

SIZES = (0, 1, 5, 16, 31, 32, 33, 100, 4097, 65536 + 17)


def check_variant(variant: str, rng: random.Random) -> list[str | None]:
    """One entry per check: None when it passed, else what went wrong."""
    results: list[str | None] = []
    for n in SIZES:
        x = array.array("f", [rng.uniform(-2, 2) for _ in range(n)])
        want = math.sqrt(sum(v * v for v in x))
        bound = (n + 4) * 2.0**-24 * want  # float32 summation, sqrt and rounding
        got = l2(x, variant=variant)
        results.append(None if abs(got - want) <= bound else f"l2 n={n}: got {got!r}, want {want!r}")
        if n:
            unit = normalize(x, variant=variant)
            off = max(abs(u - v / want) for u, v in zip(unit, x, strict=True))
            results.append(None if off <= (n + 8) * 2.0**-24 else f"normalize n={n}: off by {off:.3g}")
        q = array.array("b", [rng.randint(-128, 127) for _ in range(n)])
        got_i, want_i = sumsq_i8(q, variant=variant), sum(v * v for v in q)
        results.append(None if got_i == want_i else f"sumsq_i8 n={n}: got {got_i}, want {want_i}")
    worst = array.array("b", [-128]) * SIZES[-1]  # every square 2^14: no 32-bit lane may overflow
    got_w = sumsq_i8(worst, variant=variant)
    results.append(None if got_w == 16384 * len(worst) else f"sumsq_i8 of -128s: got {got_w}")
    try:
        normalize([0.0, 0.0], variant=variant)
        results.append("normalize of a zero vector did not fail")
    except ValueError:
        results.append(None)
    return results


def run() -> dict[str, Any]:
    variants = _cpubuild.supported_variants()
    passed, failures = 0, []
    for variant in variants:
        try:
            results = check_variant(variant, random.Random(7))
        except Exception as exc:  # a broken binding fails the variant, it does not stop the report
            results = [f"{type(exc).__name__}: {exc}"]
        passed += results.count(None)
        failures += [f"{variant}: {problem}" for problem in results if problem is not None]
    return {"variant": selected_isa(), "variants": variants, "passed": passed, "failed": len(failures),
            "failures": failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vecnorm.selftest", description="Check every variant this CPU runs.")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = run()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for failure in result["failures"]:
            print(f"FAIL {failure}")
        print(f"{result['passed']} passed, {result['failed']} failed (variants: {', '.join(result['variants'])})")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
