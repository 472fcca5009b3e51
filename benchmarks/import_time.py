"""What `import cpukern` adds to interpreter start.

    python benchmarks/import_time.py [--runs 40] [--json]

Alternates `python -c pass` and `python -c "import cpukern"` (so both see the
same machine load), reports the medians and their difference (and that of the fastest runs), and
the median of what `-X importtime` attributes to cpukern itself. On a busy
machine the wall-clock difference is noisy; -X importtime is not. Target: <= 15 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

TARGET_MS = 15.0


def wall_ms(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return (time.perf_counter() - start) * 1e3


def importtime_ms() -> float:
    """cumulative microseconds -X importtime reports for the cpukern package."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import cpukern"], capture_output=True, text=True, check=True
    )
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == "cpukern":
            return int(parts[1]) / 1e3
    raise SystemExit(f"cpukern missing from -X importtime output:\n{proc.stderr[-2000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    wall_ms("import cpukern")  # warm the page cache and __pycache__
    bare, with_import, self_ms = [], [], []
    for _ in range(args.runs):
        bare.append(wall_ms("pass"))
        with_import.append(wall_ms("import cpukern"))
        self_ms.append(importtime_ms())
    result = {
        "runs": args.runs,
        "bare_ms": round(statistics.median(bare), 2),
        "import_ms": round(statistics.median(with_import), 2),
        "added_ms": round(statistics.median(with_import) - statistics.median(bare), 2),
        "added_min_ms": round(min(with_import) - min(bare), 2),
        "importtime_ms": round(statistics.median(self_ms), 2),
        "target_ms": TARGET_MS,
    }
    if args.json:
        print(json.dumps(result))
    else:
        verdict = "met" if result["added_ms"] <= TARGET_MS else "MISSED"
        print(f"python -c pass:           {result['bare_ms']:8.2f} ms (median of {args.runs})")
        print(f"python -c 'import cpukern': {result['import_ms']:6.2f} ms")
        print(f"added by import cpukern:  {result['added_ms']:8.2f} ms (target <= {TARGET_MS} ms: {verdict})")
        print(f"  fastest runs' difference: {result['added_min_ms']:6.2f} ms")
        print(f"-X importtime, cpukern:   {result['importtime_ms']:8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
