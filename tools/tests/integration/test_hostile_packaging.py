"""cpubuild's own wheel and sdist carry every non-Python file under
tools/cpubuild/ (the code reads each: templates, CMake package, Dockerfiles,
C sources, TOML data), so a regular install works where the checkout does."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from testsupport import REPO, require, run


def _data_files() -> set[str]:
    listed = run(["git", "ls-files", "tools/cpubuild"], cwd=REPO).stdout.split()
    files = {p.removeprefix("tools/") for p in listed if not p.endswith(".py")}
    require(bool(files), "git ls-files lists no file under tools/cpubuild")
    return files


def test_wheel_and_sdist_carry_every_data_file(tmp_path: Path) -> None:
    wanted = _data_files()
    assert "cpubuild/docker/Dockerfile.base" in wanted
    out = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--sdist", "--outdir", str(tmp_path),
                          str(REPO / "tools")], capture_output=True, text=True, timeout=600, check=False)
    require(out.returncode == 0 or "No module named build" not in out.stderr, "python -m build is not installed")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (wheel,) = tmp_path.glob("cpubuild_core-*.whl")  # tools/ is cpubuild-core: every file (tools/cli/ has none)
    (sdist,) = tmp_path.glob("cpubuild_core-*.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
    with tarfile.open(sdist) as archive:
        in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert sorted(wanted - in_wheel) == []
    assert sorted(wanted - in_sdist) == []
