"""Time from `cpubuild init --template minimal` to an installed wheel that dispatches.

The way a new user goes, with nothing cached: `cpubuild init`, `cpubuild wheel`
(isolated build, as in a fresh environment; ccache disabled), a new venv, the
wheel installed into it, and `python -m <package>` picking a variant. Target:
under 30 s on 2 cores.

    python benchmarks/bench_init.py [--template minimal|dot] [--isolation on|off]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())"]
TARGET_S = 30.0


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools"), "CCACHE_DISABLE": "1"}
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return time.monotonic() - started, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--template", default="minimal")
    parser.add_argument("--isolation", choices=("on", "off"), default="on")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-init-") as tmp:
        work = Path(tmp)
        project, venv = work / "benchproj", work / "venv"
        python = venv / "bin" / "python"
        steps: list[tuple[str, float]] = []
        steps.append(("cpubuild init", timed([*CLI, "init", str(project), "--name", "benchproj", "--template",
                                              args.template, "-q"], work)[0]))
        steps.append(("uv venv", timed([sys.executable, "-m", "uv", "venv", "-q", str(venv)], work)[0]))
        steps.append((f"cpubuild wheel --install (isolation {args.isolation}, no ccache)",
                      timed([*CLI, "wheel", "-q", "--project", str(project), "--isolation", args.isolation,
                             "--install", str(python)], work)[0]))
        seconds, out = timed([str(python), "-m", "benchproj", "--json"], work)
        steps.append(("python -m benchproj", seconds))
        selected = json.loads(out)["selected"]
    total = sum(s for _, s in steps)
    print(f"--template {args.template}, {os.cpu_count()} cores: from nothing to an installed wheel that dispatches")
    for name, s in steps:
        print(f"  {name:<58} {s:7.1f} s")
    print(f"  {'total':<58} {total:7.1f} s   selected variant: {selected}   (target < {TARGET_S:g} s: "
          f"{'met' if total < TARGET_S else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
