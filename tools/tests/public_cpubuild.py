"""cpubuild the way a user has it, for tests that go through its public path only.

`public_cpubuild` (session scoped) installs cpubuild from tools/ **non-editable**
into a fresh virtual environment: no system site-packages, no cpukern, nothing
of this checkout on sys.path, so the CLI, the templates, the CMake package and
the runtime it ships must all come from the installed distribution. Projects
built with it need scikit-build-core: `cpubuild wheel` then builds them in an
isolated environment, where cpubuild offers itself as a wheel (selfwheel.py).
`fresh_venv` makes the environments the built wheels are installed into.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from testsupport import REPO, require, require_host, run

UV = [sys.executable, "-m", "uv"]
# Variables that would point a Python, an installer or cpubuild at something
# other than what the test set up (a package index configured by the machine stays).
DROP = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "CONDA_PREFIX",
        "PIP_USER", "PIP_REQUIRE_VIRTUALENV", "PIP_TARGET", "PIP_PREFIX", "UV_SYSTEM_PYTHON", "UV_PYTHON",
        "UV_PROJECT_ENVIRONMENT", "UV_PREFIX", "UV_TARGET")
KEEP_CPUBUILD = ("CPUBUILD_CACHE_DIR",)  # the other CPUBUILD_* settings change what `cpubuild wheel` builds


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without variables that would leak this checkout or another environment into a run."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in DROP and (not k.startswith("CPUBUILD_") or k in KEEP_CPUBUILD)
    }
    env.update(UV_PYTHON_DOWNLOADS="never", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONDONTWRITEBYTECODE="1",
               PYTHONNOUSERSITE="1")
    env.update(extra)
    return env


def venv_env(venv: Path, **extra: str) -> dict[str, str]:
    """clean_env() with `venv` activated (its bin/ first on PATH)."""
    env = clean_env(**extra)
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}")
    return env


def fresh_venv(path: Path, *requirements: str, env: dict[str, str] | None = None) -> Path:
    """A new virtual environment (this interpreter, no system site-packages) with
    `requirements` installed by uv; returns its python."""
    require_host(sys.platform.startswith("linux"), "the public-path tests run on Linux")
    env = env or clean_env()
    run([*UV, "venv", "-q", "--python", sys.executable, str(path)], env=env, cwd=path.parent, timeout=300)
    python = path / "bin" / "python"
    if requirements:
        run([*UV, "pip", "install", "-q", "--python", str(python), *requirements], env=env, cwd=path.parent, timeout=900)
    return python


def site_packages(python: Path) -> Path:
    out = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env=clean_env())
    return Path(out.stdout.strip())


@dataclass(frozen=True)
class PublicCpubuild:
    venv: Path
    wheels: tuple[Path, Path]  # cpubuild-core's and cpubuild's wheels, installed there (other venvs may install them too)

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def exe(self) -> Path:
        return self.venv / "bin" / "cpubuild"

    def env(self, **extra: str) -> dict[str, str]:
        return venv_env(self.venv, **extra)

    def cli(self, *args: str, cwd: Path, check: bool = True, timeout: float = 1800,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`cpubuild ARGS` with the installed console script."""
        return run([str(self.exe), *args], cwd=cwd, check=check, timeout=timeout, env=env or self.env())

    def json(self, *args: str, cwd: Path, check: bool = True, timeout: float = 1800) -> tuple[int, dict[str, Any]]:
        """`cpubuild ARGS --json`: exit status and the JSON object it printed."""
        proc = self.cli(*args, "--json", cwd=cwd, check=check, timeout=timeout)
        start = proc.stdout.find("{")
        assert start >= 0, f"no JSON from cpubuild {' '.join(args)} (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}"
        data: dict[str, Any] = json.loads(proc.stdout[start:])
        return proc.returncode, data

    def wheel_of_every_variant(self, project: Path, *, build_root: Path, cwd: Path) -> dict[str, Any]:
        """`cpubuild wheel --project P --json` (defaults, so the project's wheelhouse/): its summary, checked to
        hold every variant its matrix declares for this host's arch."""
        from cpubuild.matrix import load_matrix

        _, summary = self.json("wheel", "--project", str(project), "--build-root", str(build_root), cwd=cwd)
        assert summary["ok"], summary
        declared = load_matrix(project / "isa_matrix.toml").variants_for(os.uname().machine)
        assert sorted(summary["wheel"]["variants"]) == sorted(v.name for v in declared)
        return summary

    @contextmanager
    def serve(self, directory: Path, *, startup_timeout: float = 60) -> Iterator[str]:
        """`cpubuild serve DIRECTORY --port 0`; yields the base URL it announces (ending in /)."""
        proc = subprocess.Popen([str(self.exe), "serve", str(directory), "--port", "0"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env(PYTHONUNBUFFERED="1"), cwd=directory)
        try:
            assert proc.stdout is not None
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + startup_timeout
            line = ""
            while not line and time.monotonic() < deadline and proc.poll() is None:
                if sel.select(timeout=0.2):
                    line = proc.stdout.readline()
            assert "http://" in line, f"cpubuild serve announced no URL: {line!r} (exit {proc.poll()})"
            url = line[line.index("http://"):].split()[0]
            yield url if url.endswith("/") else url + "/"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def public_cpubuild(tmp_path_factory: pytest.TempPathFactory) -> PublicCpubuild:
    """cpubuild installed from tools/ as a regular (non-editable) distribution into a fresh venv."""
    require_host(sys.platform.startswith("linux"), "the public-path tests run on Linux")
    require(_has_uv(), "uv is not installed for this Python (pip install uv)")
    root = tmp_path_factory.mktemp("public-cpubuild")
    wheels = root / "dist"
    # A wheel built from a copy of tools/ (setuptools writes build/ and *.egg-info next to
    # the sources; parallel sessions must not share them), then installed as a file:
    # a regular install, exactly what `pip install cpubuild` gives.
    source = root / "tools"
    shutil.copytree(REPO / "tools", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.pyc"))
    # Both distributions: cpubuild-core (tools/, every file) and cpubuild (tools/cli/, the command and its dependencies).
    for folder in (source, source / "cli"):
        run([*UV, "build", "-q", "--wheel", "--out-dir", str(wheels), str(folder)], env=clean_env(), cwd=root, timeout=900)
    (core,) = wheels.glob("cpubuild_core-*.whl")
    (cli,) = wheels.glob("cpubuild-*.whl")
    python = fresh_venv(root / "venv", str(core), str(cli))
    public = PublicCpubuild(venv=root / "venv", wheels=(core, cli))
    where = Path(run([str(python), "-c", "import cpubuild; print(cpubuild.__file__)"], env=public.env(), cwd=root).stdout.strip())
    assert where.is_relative_to(site_packages(python)), f"cpubuild imported from {where}, not the venv"
    leaked = run([str(python), "-c", "import importlib.util as u; print(u.find_spec('cpukern'), u.find_spec('numpy'))"],
                 env=public.env(), cwd=root).stdout.split()
    assert leaked == ["None", "None"], f"the public venv sees more than it should: {leaked}"
    return public


def _has_uv() -> bool:
    return subprocess.run([*UV, "--version"], capture_output=True).returncode == 0
