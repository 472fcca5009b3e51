"""Counts of the hostile-input cases per group (tools/tests/integration/test_hostile_*.py), as collected
by pytest (each parametrized case counts once), and - with --run - how many of each
passed, failed or were skipped. The closing note of the hostile-input work quotes it.

    python3 scripts/hostile_counts.py          # collected cases per group
    python3 scripts/hostile_counts.py --run    # run them (the slow docker/daemon cases too) and count outcomes
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GROUPS = sorted(p.name for p in (REPO / "tools" / "tests" / "integration").glob("test_hostile_*.py"))


def collected() -> Counter[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", *[f"tools/tests/integration/{g}" for g in GROUPS]],
                          cwd=REPO, capture_output=True, text=True, check=False)
    counts: Counter[str] = Counter()
    for line in proc.stdout.splitlines():
        match = re.match(r"tools/tests/integration/(test_hostile_\w+\.py)::", line)
        if match:
            counts[match.group(1)] += 1
    if proc.returncode not in (0, 5) or not counts:
        sys.exit(f"collecting failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return counts


def outcomes(extra: list[str]) -> dict[str, Counter[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", f"--junitxml={report}", *extra, *[f"tools/tests/integration/{g}" for g in GROUPS]],
                       cwd=REPO, check=False)
        tree = ET.parse(report)
    result: dict[str, Counter[str]] = {}
    for case in tree.iter("testcase"):
        group = case.get("classname", "").split(".")[-1] + ".py"
        state = "failed" if case.find("failure") is not None or case.find("error") is not None else \
            "skipped" if case.find("skipped") is not None else "passed"
        result.setdefault(group, Counter())[state] += 1
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="run the cases and count their outcomes")
    args, extra = parser.parse_known_args()
    counts = collected()
    ran = outcomes(extra) if args.run else {}
    header = "| group | cases |" + (" passed | failed | skipped |" if ran else "")
    print(header)
    print("|---|---:|" + ("---:|---:|---:|" if ran else ""))
    for group in GROUPS:
        row = f"| {group.removeprefix('test_hostile_').removesuffix('.py')} | {counts[group]} |"
        if ran:
            got = ran.get(group, Counter())
            row += f" {got['passed']} | {got['failed']} | {got['skipped']} |"
        print(row)
    total = f"| total | {sum(counts.values())} |"
    if ran:
        total += "".join(f" {sum(c[k] for c in ran.values())} |" for k in ("passed", "failed", "skipped"))
    print(total)
    if ran and any(c["failed"] for c in ran.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
