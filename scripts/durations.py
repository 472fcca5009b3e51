"""Per-file time summary of a pytest run, from its JUnit XML report.

    python3 scripts/durations.py build/pytest-junit.xml [--top N]

Each test's time in the report includes its setup and teardown, so a file
that builds a session fixture first carries that build. Printed at the end of
`scripts/test.sh`, beside pytest's own `--durations` table, to keep the CI
run's time budget visible (docs: README, "Tests and CI time").
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def per_file(report: Path) -> dict[str, tuple[float, int]]:
    """file -> (seconds, tests) from a JUnit XML report written by pytest."""
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("file") or (case.get("classname") or "?").split("::")[0]
        if not name.endswith(".py"):  # classname: tests.unit.test_x[.Class]
            parts = name.split(".")
            while parts and not parts[-1].startswith("test_"):
                parts.pop()
            name = "/".join(parts) + ".py" if parts else name
        seconds[name] += float(case.get("time") or 0.0)
        counts[name] += 1
    return {name: (seconds[name], counts[name]) for name in seconds}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    if not args.report.is_file():
        print(f"durations: no report at {args.report}", file=sys.stderr)
        return 2
    rows = sorted(per_file(args.report).items(), key=lambda item: -item[1][0])
    total = sum(s for s, _ in (v for _, v in rows))
    print(f"== time per test file (setup + call + teardown; {total / 60:.1f} min in all)")
    for name, (secs, count) in rows[: args.top]:
        print(f"{secs:8.1f} s {100 * secs / (total or 1):5.1f}% {count:5d} tests  {name}")
    if len(rows) > args.top:
        rest = sum(s for _, (s, _) in rows[args.top:])
        print(f"{rest:8.1f} s        {len(rows) - args.top} more files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
