"""`python -m xxhash_variants.selftest [--json]`: every variant this CPU runs gives the same hashes.

Each variant's XXH3-64 is checked against xxHash's published value for the empty
input and against the lowest variant on sizes covering each of XXH3's input
ranges (0-16, 17-128, 129-240 bytes, longer: its vector loop, with tails).
`cpubuild test` runs it under emulated CPUs and reads the JSON:
{"variant", "variants", "passed", "failed", "failures"}; exit status 1 when a check fails.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from . import selected_isa, supported_variants, xxh3_64

KNOWN = {(b"", 0): 0x2D06800538D394C2}  # XXH3_64bits("") from xxHash's documentation
SIZES = (*range(0, 260), 511, 512, 1023, 1024, 1025, 4096, 100_003)


def run() -> dict[str, Any]:
    rng = random.Random(20240607)
    inputs = [(rng.randbytes(n), rng.randrange(1 << 64) if n % 3 else 0) for n in SIZES]
    variants = supported_variants()
    want = {(data, seed): KNOWN.get((data, seed), xxh3_64(data, seed, variant=variants[0])) for data, seed in inputs}
    want.update(KNOWN)
    failures = [f"{variant}: n={len(data)} seed={seed}: got {got:#x}, want {expected:#x}"
                for variant in variants for (data, seed), expected in want.items()
                if (got := xxh3_64(data, seed, variant=variant)) != expected]
    return {"variant": selected_isa(), "variants": variants, "passed": len(variants) * len(want) - len(failures),
            "failed": len(failures), "failures": failures}


def main() -> int:
    result = run()
    if "--json" in sys.argv[1:]:
        print(json.dumps(result, indent=1))
    else:
        print("".join(f"FAIL {f}\n" for f in result["failures"])
              + f"{result['passed']} passed, {result['failed']} failed (variants: {', '.join(result['variants'])})")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
