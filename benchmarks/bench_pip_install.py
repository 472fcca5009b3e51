"""An isolated `pip install .` of cpukern against a local PyPI-compatible index
vs `cpubuild wheel` (issue 23's target: within 1.3x), median of 3 each.

cpubuild's two wheels (cpubuild-core from tools/, cpubuild from tools/cli/) are
built and uploaded with twine to a pypiserver on loopback; pip then builds
cpukern in a fresh clone of HEAD with build isolation (scikit-build-core and
cpubuild-core, what cpukern's build-system.requires names, installed into its
build environment from the indexes) into a fresh venv, its build directory removed
before each run. `cpubuild wheel` builds the same commit, all variants, in a
fresh build root each run. ccache is whatever the environment gives both
(warm after the first run: the same for both).

    python benchmarks/bench_pip_install.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.3


def sh(*cmd: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def timed(*cmd: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    sh(*cmd, cwd=cwd, env=env)
    return time.monotonic() - started


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pip-") as tmp_name:
        tmp = Path(tmp_name)
        for folder in (REPO / "tools", REPO / "tools" / "cli"):  # cpubuild-core and cpubuild, as released
            sh(sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp / "dist"), str(folder))
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(port),
                                   "-a", ".", "-P", ".", str(tmp / "packages")], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        (tmp / "packages").mkdir()
        try:
            url = f"http://127.0.0.1:{port}/"
            for _ in range(150):
                try:
                    urllib.request.urlopen(url + "simple/", timeout=2).close()
                    break
                except OSError:
                    time.sleep(0.2)
            sh(sys.executable, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar", "--repository-url",
               url, "-u", "bench", "-p", "bench", *map(str, (tmp / "dist").glob("*.whl")))
            clone = tmp / "cpukern"
            sh("git", "clone", "-q", str(REPO), str(clone))
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            pip_times, wheel_times = [], []
            for run in range(args.runs):
                venv = tmp / f"venv-{run}"
                sh(sys.executable, "-m", "uv", "venv", "-q", "--seed", "--python", sys.executable, str(venv), env=env)
                shutil.rmtree(clone / "build", ignore_errors=True)
                pip_times.append(timed(str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--extra-index-url",
                                       url + "simple/", ".", cwd=clone, env=env))
                wheel_times.append(timed(sys.executable, "-m", "cpubuild", "wheel", "-q", "--out", str(tmp / "wheelhouse"),
                                         "--build-root", str(tmp / f"build-root-{run}"), cwd=clone,
                                         env={**env, "PYTHONPATH": str(REPO / "tools")}))
                print(f"run {run + 1}: pip install . {pip_times[-1]:.1f} s, cpubuild wheel {wheel_times[-1]:.1f} s", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=30)
    pip_s, wheel_s = statistics.median(pip_times), statistics.median(wheel_times)
    ratio = pip_s / wheel_s
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(f"median of {args.runs}: isolated pip install . {pip_s:.1f} s, cpubuild wheel {wheel_s:.1f} s: "
          f"ratio {ratio:.2f} (target <= {TARGET}: {verdict})")


if __name__ == "__main__":
    main()
