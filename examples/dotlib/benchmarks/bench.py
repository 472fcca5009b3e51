"""dotlib's benchmark, as `cpubuild bench` runs it (the benchmark protocol of
cpubuild's project contract): every variant asked for, one process each (forced
with DOTLIB_ISA, so a process loads one library), times the C kernels through
ctypes on two sizes - one that stays in cache, one that streams from memory -
and prints one JSON object. `cpubuild bench` adds the roofline: each time as a
share of the variant's peak (FMA / integer multiply-add) or of the bandwidth.

    cpubuild bench                      # after installing the wheel in this Python
    python benchmarks/bench.py --variants baseline --json-only
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from typing import Any

# Bytes both inputs of a call take: one working set in cache, one four times a 32 MiB
# last-level cache (the bandwidth cpubuild measures at that size bounds it).
WORKING_SETS = (128 << 10, 128 << 20)


def best_us(fn: Any, budget_s: float = 0.02, rounds: int = 5) -> float:
    """Microseconds per call: the best of `rounds` rounds of about `budget_s` each."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= budget_s and calls >= 3:
                break
        best = min(best, elapsed / calls * 1e6)
    return best


def worker() -> list[dict[str, Any]]:
    """Times this process's variant (the one DOTLIB_ISA forces)."""
    import dotlib

    lib, variant = dotlib.library(), dotlib.selected_isa()
    records = []
    for op, ctype, width, dtype in (("dot_f32", ctypes.c_float, 4, "fp32"), ("dot_i8", ctypes.c_int8, 1, "int8")):
        fn = getattr(lib, f"dotlib_{op}")
        for total in WORKING_SETS:
            n = total // (2 * width)
            x, y = (ctype * n)(), (ctype * n)()  # zero-filled: the time does not depend on the values
            records.append({"op": op, "dtype": dtype, "shape": [n], "variant": variant,
                            "us": best_us(lambda fn=fn, x=x, y=y, n=n: fn(x, y, n)), "torch_us": None, "memcpy_us": None,
                            "flops": 2 * n, "bytes": total, "bytes_written": 0})
    return records


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # the protocol: bad arguments are one line, exit 2
        print(f"benchmarks/bench.py: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__)
    parser.add_argument("--variants", required=True, help="comma-separated variants to time")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker()))
        return 0
    records = []
    for variant in args.variants.split(","):
        env = {k: v for k, v in os.environ.items() if not k.startswith("DOTLIB_")}
        env["DOTLIB_ISA"] = variant
        proc = subprocess.run([sys.executable, __file__, "--worker", "--variants", variant], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"benchmarks/bench.py: variant {variant}: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return 1
        records += json.loads(proc.stdout)
    print(json.dumps({"meta": {"title": "dotlib: dot products through ctypes", "threads": 1},
                      "records": records, "targets": []}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
