"""cpubuild released like a real package, and projects built from source the
Python way (docs/project.md "Installing from source").

Once per module: ci/cpubuild-release.yml's `run:` steps, as written, in a clone
of this commit (a fresh venv first on PATH stands in for setup-python) build
cpubuild's sdist and the wheel from it, `twine check --strict` them and
`twine upload` them to a real pypiserver on loopback. Then with only that
server as extra index, each install route works WITH build isolation (cpubuild
comes from the server as a build requirement) for cpukern, an `init` project
and an `init --kind torch` project, and the installed package dispatches
(`python -m <pkg> --json` selects a variant this CPU runs).

Torch projects get the user's configured CPU torch in the isolated build: a
build constraint (PIP_BUILD_CONSTRAINT / UV_BUILD_CONSTRAINT) pins the torch
installed here, found where pip is configured to find it (uv: UV_FIND_LINKS).
Each build makes only baseline + avx2 (cpukern: CPUKERN_ISA_BUILD; the init
projects: scikit-build-core's SKBUILD_CMAKE_DEFINE=CPUBUILD_ISA=avx2) to keep
the matrix of 18 builds affordable on two cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cpubuild import __version__
from public_cpubuild import clean_env
from pypi_server import PypiServer, pypiserver
from testsupport import REPO, require, run

pytestmark = pytest.mark.slow

WORKFLOW = REPO / "ci" / "cpubuild-release.yml"
UV = [sys.executable, "-m", "uv"]
# The workflow's `if:`s for a push of the tag cpubuild-v<version>.
CONDITIONS = {"startsWith(github.ref, 'refs/tags/cpubuild-v')": True, "github.event_name != 'pull_request'": True}


@dataclass(frozen=True, kw_only=True)
class Published:
    server: PypiServer
    checkout: Path  # a clone of this commit (cpukern), its dist/ made by the workflow
    commit: str
    dist: tuple[Path, ...]


def workflow_steps() -> list[dict[str, object]]:
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    (job,) = data["jobs"].values()
    return [step for step in job["steps"] if "run" in step]


def run_workflow(checkout: Path, server: PypiServer, venv: Path) -> None:
    secrets = {"${{ vars.CPUBUILD_PYPI_URL }}": server.url, "${{ secrets.CPUBUILD_PYPI_TOKEN }}": "test"}
    for step in workflow_steps():
        condition = step.get("if")
        assert condition is None or condition in CONDITIONS, f"a condition this runner cannot evaluate: {condition}"
        if condition is not None and not CONDITIONS[str(condition)]:
            continue
        env = clean_env(GITHUB_REF=f"refs/tags/cpubuild-v{__version__}", GITHUB_REF_NAME=f"cpubuild-v{__version__}",
                        VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
        for key, value in dict(step.get("env") or {}).items():  # type: ignore[call-overload]
            env[str(key)] = secrets.get(str(value), str(value))
            assert "${{" not in env[str(key)], f"step {step.get('name')}: unresolved {value}"
        run(["bash", "-e", "-o", "pipefail", "-c", str(step["run"])], cwd=checkout, env=env, timeout=900)


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    require(shutil.which("git") is not None, "git is not installed")
    tmp = tmp_path_factory.mktemp("pypi")
    commit = run(["git", "-C", str(REPO), "rev-parse", "HEAD"]).stdout.strip()
    checkout = tmp / "checkout"
    run(["git", "clone", "-q", str(REPO), str(checkout)])
    run(["git", "-C", str(checkout), "checkout", "-q", commit])
    venv = tmp / "runner-python"  # what setup-python gives a job: a fresh Python with pip
    run([*UV, "venv", "-q", "--seed", "--python", sys.executable, str(venv)], env=clean_env())
    with pypiserver(tmp / "packages") as server:
        run_workflow(checkout, server, venv)
        dist = tuple(sorted((checkout / "dist").iterdir()))
        names = sorted(p.name for p in dist)
        assert names == sorted(f"{dist}-{__version__}{end}" for dist in ("cpubuild", "cpubuild_core")
                               for end in ("-py3-none-any.whl", ".tar.gz"))
        assert sorted(p.name for p in server.root.iterdir()) == names  # uploaded, byte for byte below
        assert all((server.root / p.name).read_bytes() == p.read_bytes() for p in dist)
        yield Published(server=server, checkout=checkout, commit=commit, dist=dist)


def user_torch_config() -> tuple[str, list[str]]:
    """The CPU torch installed here and where pip is configured to find it (find-links)."""
    require(importlib.util.find_spec("torch") is not None, "torch is not installed (run scripts/setup.sh)")
    import torch

    require(torch.version.cuda is None, "the installed torch is not a CPU build (run scripts/setup.sh)")
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    links = re.findall(r"find-links='([^']*)'", listed) + os.environ.get("PIP_FIND_LINKS", "").split()
    return str(torch.__version__), sorted({p for link in links for p in link.split() if p})


@pytest.fixture(scope="module")
def projects(published: Published, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """cpukern (the clone), and an init project and a torch project made by the cpubuild
    installed from the server, each a git repository with one commit."""
    tmp = tmp_path_factory.mktemp("projects")
    tools = tmp / "cpubuild-venv"
    run([*UV, "venv", "-q", "--python", sys.executable, str(tools)], env=clean_env())
    run([*UV, "pip", "install", "-q", "--python", str(tools / "bin" / "python"), f"cpubuild=={__version__}",
         "--extra-index-url", published.server.simple], env=clean_env())
    found = {"cpukern": published.checkout}
    for kind, args in (("init", ["--name", "dotp"]), ("torch", ["--name", "tproj", "--kind", "torch"])):
        project = tmp / kind
        run([str(tools / "bin" / "cpubuild"), "init", str(project), "-q", *args], env=clean_env())
        run(["git", "init", "-q", str(project)])
        run(["git", "-C", str(project), "add", "-A"])
        run(["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"])
        found[kind] = project
    return found


PACKAGE = {"cpukern": "cpukern", "init": "dotp", "torch": "tproj"}
ROUTES = ["pip install .", "pip install -e .", "uv pip install .", "uv pip install -e .", "pip wheel .", "uv pip install git+file"]
# pip installs torch (~800 MB) into every isolated build environment afresh: 3-4 minutes a build on
# 2 cores. For the torch project `pip wheel .` proves pip's isolated build with the constraint (pip
# install . runs the same build); pip's editable route is proven by cpukern and the init project.
PIP_TORCH_ONCE = {("torch", "pip install ."), ("torch", "pip install -e .")}
CASES = [pytest.param(kind, route, id=f"{kind}-{re.sub(r'[^a-z]+', '-', route).strip('-')}")
         for kind in ("cpukern", "init", "torch") for route in ROUTES if (kind, route) not in PIP_TORCH_ONCE]


@pytest.mark.parametrize(("kind", "route"), CASES)
def test_isolated_install_from_the_index(published: Published, projects: dict[str, Path], kind: str, route: str,
                                         tmp_path: Path) -> None:
    project, package = projects[kind], PACKAGE[kind]
    # two variants (baseline + avx2) keep 18 builds affordable; the dispatch check is the same
    env = clean_env(CPUKERN_ISA_BUILD="avx2") if kind == "cpukern" else clean_env(SKBUILD_CMAKE_DEFINE="CPUBUILD_ISA=avx2")
    if kind == "torch":
        torch_version, links = user_torch_config()
        constraints = tmp_path / "build-constraints.txt"
        constraints.write_text(f"torch=={torch_version}\n", encoding="utf-8")
        env.update(PIP_BUILD_CONSTRAINT=str(constraints), UV_BUILD_CONSTRAINT=str(constraints))
        if links:
            env["UV_FIND_LINKS"] = ",".join(links)
    venv = tmp_path / "venv"
    # pip's targets see this Python's packages (the torch project's runtime torch is installed here);
    # uv installs what the resolution needs from its cache
    run([*UV, "venv", "-q", "--seed", "--python", sys.executable, *(["--system-site-packages"] if route.startswith("pip") else []),
         str(venv)], env=env)
    python = str(venv / "bin" / "python")
    index = ["--extra-index-url", published.server.simple]
    if route == "pip wheel .":
        out = tmp_path / "wheels"
        run([python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), *index, "."], cwd=project, env=env)
        (wheel,) = out.glob(f"{package}-*.whl")
        # --force-reinstall: the same name and version in this Python's site-packages would count as installed
        run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--force-reinstall", str(wheel)], env=env)
    elif route.startswith("pip"):
        run([python, "-m", "pip", "install", "-q", *route.split()[2:], *index], cwd=project, env=env)
    elif route == "uv pip install git+file":
        requirement = f"{package} @ git+file://{project}@{published.commit if kind == 'cpukern' else head(project)}"
        run([*UV, "pip", "install", "-q", "--python", python, *index, requirement], env=env)
    else:
        run([*UV, "pip", "install", "-q", "--python", python, *route.split()[3:], *index], cwd=project, env=env)
    report = json.loads(run([python, "-m", package, "--json"], cwd=tmp_path, env=clean_env()).stdout)
    runnable = [v for v in report["variants"] if v["built"] and v["supported"]]
    assert report["error"] is None and runnable, report
    assert report["selected"] == max(runnable, key=lambda v: v["priority"])["name"], report
    where = run([python, "-c", f"import {package}; print({package}.__file__)"], cwd=tmp_path, env=clean_env()).stdout
    if route.endswith("-e ."):
        assert Path(where.strip()).is_relative_to(project), where  # editable: the package is the project's source
    else:
        assert Path(where.strip()).is_relative_to(venv), where


def head(project: Path) -> str:
    return run(["git", "-C", str(project), "rev-parse", "HEAD"]).stdout.strip()
