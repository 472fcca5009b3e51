"""pip and the nightly index (docs/index.md "pip and the nightly index").

pip merges every index it is given and installs the highest version. cpubuild
versions a build N commits after the tag vX.Y.Z as X.Y.(Z+1).devN (the next
release's dev build), so a nightly sorts above the release it follows, and
`pip install --pre --extra-index-url <root>/nightly/cpu/ <pkg>` takes the
nightly while the primary index has the release; without --pre pip keeps the
release (a dev version is a pre-release).

Real parts: an `init` project, its release and nightly wheels from
`cpubuild wheel`, the release uploaded with twine to a pypiserver (the primary
index), the nightly published with `cpubuild publish --channel nightly` and
served by `cpubuild serve`, and pip in a fresh venv reading only those two.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cpubuild.wheelbuild.version import GitState, version_from_git
from packaging.version import Version
from public_cpubuild import clean_env
from pypi_server import free_port, pypiserver, twine_upload, wait_for
from testsupport import REPO, run

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def test_a_build_after_a_release_sorts_above_it_and_below_the_next() -> None:
    after = version_from_git(GitState(tag="0.2.0", distance=3, short_hash="1a2b3c4", dirty=False, commit_time=0), "0.1.0")
    nightly = Version(after.with_label(("cpu",)))
    assert str(nightly) == "0.2.1.dev3+g1a2b3c4.cpu"
    assert Version("0.2.0+cpu") < nightly < Version("0.2.1") and nightly.is_prerelease
    rc = version_from_git(GitState(tag="1.0.0rc1", distance=2, short_hash="abcdef0", dirty=False, commit_time=0), "0.1.0")
    assert Version("1.0.0rc1+cpu") < Version(rc.with_label(("cpu",))) < Version("1.0.0rc2")


def cpubuild(*args: str, cwd: Path) -> str:
    env = clean_env(PYTHONPATH=str(REPO / "tools"))
    return run([sys.executable, "-m", "cpubuild", *args], cwd=cwd, env=env, timeout=1200).stdout


def wheel_version(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    return next(line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("Version: "))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str, str]]:
    """(primary simple URL, nightly URL, release version, nightly version)."""
    tmp = tmp_path_factory.mktemp("nightly")
    project = tmp / "dotn"
    cpubuild("init", str(project), "--name", "dotn", "-q", cwd=tmp)
    run(["git", "init", "-q", str(project)])
    run([*GIT, "-C", str(project), "add", "-A"])
    run([*GIT, "-C", str(project), "commit", "-qm", "first"])
    run([*GIT, "-C", str(project), "tag", "v0.2.0"])
    release = Path(cpubuild("wheel", "--out", str(tmp / "release"), "-q", cwd=project).splitlines()[-1])
    for n in (1, 2):
        run([*GIT, "-C", str(project), "commit", "-q", "--allow-empty", "-m", f"work {n}"])
    nightly = Path(cpubuild("wheel", "--out", str(tmp / "nightly"), "-q", cwd=project).splitlines()[-1])
    commit = run(["git", "-C", str(project), "rev-parse", "HEAD"]).stdout.strip()
    cpubuild("publish", str(nightly), "--to", str(tmp / "index"), "--commit", commit, "--channel", "nightly", cwd=project)
    port = free_port()
    log = tmp / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "cpubuild", "serve", str(tmp / "index"), "--port", str(port)],
                                stdout=sink, stderr=sink, env=clean_env(PYTHONPATH=str(REPO / "tools")))
    try:
        nightly_url = f"http://127.0.0.1:{port}/nightly/cpu/"
        wait_for(nightly_url, proc, log)
        with pypiserver(tmp / "primary") as primary:
            twine_upload(primary, [release])
            yield primary.simple, nightly_url, wheel_version(release), wheel_version(nightly)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("pre", [True, False], ids=["pre", "no-pre"])
def test_pip_with_two_indexes(served: tuple[str, str, str, str], pre: bool, tmp_path: Path) -> None:
    primary, nightly, release_version, nightly_version = served
    assert release_version.startswith("0.2.0+cpu") and nightly_version.startswith("0.2.1.dev2+g"), (release_version, nightly_version)
    env = clean_env(PIP_CONFIG_FILE=os.devnull)  # exactly the two indexes below
    run([sys.executable, "-m", "uv", "venv", "-q", "--seed", "--python", sys.executable, str(tmp_path / "venv")], env=env)
    python = str(tmp_path / "venv" / "bin" / "python")
    run([python, "-m", "pip", "install", "-q", *(["--pre"] if pre else []), "--index-url", primary,
         "--extra-index-url", nightly, "dotn"], env=env)
    installed = run([python, "-c", "from importlib.metadata import version; print(version('dotn'))"], env=env).stdout.strip()
    assert installed == (nightly_version if pre else release_version)
    run([python, "-m", "dotn"], cwd=tmp_path, env=env)  # the installed one dispatches
