"""The rendered release workflow, run: every `run:` step of ci/release.yml as
written, in job order (partial builds fanned out per variant group -> merge ->
emulated tests on the merged wheel -> publish -> install from the published
index), each job in a fresh clone of this repository, the way a GitHub runner
executes it.

What stands in for GitHub: `actions/checkout` is a `git clone` of the commit
under test; `actions/setup-python` a fresh venv first on PATH (this machine's
Python 3.11 instead of 3.12); `upload-artifact` / `download-artifact` copy
files through a local folder; the S3 index (`vars.CPUBUILD_INDEX`) is a local
directory, served to the install job by `cpubuild serve` as
`vars.CPUBUILD_INDEX_URL`; the AWS credentials step has nothing to do. The
event is a push to main, so the `if:` conditions select the nightly job and
skip the release job (a tag push) - evaluated from the workflow's own
conditions. `vars.CPUBUILD_CACHE` is not set, so the shared-cache steps are
skipped (tests/test_shared_cache.py runs that cache). Everything else - apt-get, pip installing cpubuild from ./tools
(not editable), `cpubuild wheel/test/publish`, uv installing from the index -
runs for real, as the workflow says.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from cpubuild.matrix import load_matrix
from cpubuild.toolchain import wheelzip
from oracle import oracle_ranking
from testsupport import REPO, require, require_tool, run, skip_host_fact

pytestmark = [pytest.mark.slow, pytest.mark.qemu, pytest.mark.cross]

WORKFLOW = REPO / "ci" / "release.yml"
EVENT = {"github.event_name": "push", "github.ref": "refs/heads/main"}


def load_workflow() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    data: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())
    if True in data:  # YAML 1.1 reads the key `on` as true
        data["on"] = data.pop(True)
    return data


def job_runs(condition: str | None) -> bool:
    """The workflow's `if:` for a push to main: the two forms cpubuild renders."""
    if condition is None:
        return True
    ref_is = re.fullmatch(r"github\.event_name == 'push' && github\.ref == '([^']+)'", condition)
    if ref_is:
        return EVENT["github.ref"] == ref_is.group(1)
    tag = re.fullmatch(r"github\.event_name == 'push' && startsWith\(github\.ref, '([^']+)'\)", condition)
    if tag:
        return EVENT["github.ref"].startswith(tag.group(1))
    raise AssertionError(f"a condition this runner cannot evaluate: {condition}")


def step_runs(condition: str | None, values: Mapping[str, str]) -> bool:
    """A step's `if:`: the `vars.X != ''` form cpubuild renders."""
    if condition is None:
        return True
    unset = re.fullmatch(r"(vars\.[A-Z_]+) != ''", condition)
    assert unset, f"a step condition this runner cannot evaluate: {condition}"
    return values[unset.group(1)] != ""


def job_order(jobs: Mapping[str, Any]) -> list[str]:
    order: list[str] = []
    while len(order) < len(jobs):
        ready = [j for j in jobs if j not in order and all(n in order for n in jobs[j].get("needs", []))]
        assert ready, "a cycle in needs"
        order += ready
    return order


class Runner:
    """Runs one job instance's steps in its own checkout."""

    def __init__(self, work: Path, commit: str, index: Path) -> None:
        self.work = work
        self.commit = commit
        self.index = index
        self.artifacts = work / "artifacts"
        self.index_url = ""
        self.count = 0

    def values(self, matrix: Mapping[str, str]) -> dict[str, str]:
        values = {f"matrix.{k}": str(v) for k, v in matrix.items()}
        values.update({"vars.CPUBUILD_INDEX": str(self.index), "vars.CPUBUILD_INDEX_URL": self.index_url,
                       "runner.temp": str(self.work / "runner-temp"), "github.token": "unused",
                       "vars.CPUBUILD_AWS_REGION": "unused", "secrets.CPUBUILD_AWS_ROLE": "unused",
                       "secrets.CPUBUILD_INDEX_AUTH_URL": "",  # a public index: no credentials
                       "vars.CPUBUILD_CACHE": ""})
        return values

    def expand(self, text: str, matrix: Mapping[str, str], workspace: Path) -> str:
        values = self.values(matrix)

        def one(match: re.Match[str]) -> str:
            key = match.group(1).strip()
            assert key in values, f"{key} is not known to this runner (in {text!r})"
            return values[key]

        return re.sub(r"\$\{\{\s*([^}]+?)\s*\}\}", one, text)

    def job(self, name: str, job: Mapping[str, Any], matrix: Mapping[str, str], defaults: Mapping[str, Any]) -> list[str]:
        self.count += 1
        workspace = self.work / f"job{self.count}-{name}"
        venv = self.work / f"venv{self.count}"
        (self.work / "runner-temp").mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(GITHUB_SHA=self.commit, GITHUB_REF=EVENT["github.ref"], GITHUB_REF_NAME="main",
                   GITHUB_WORKSPACE=str(workspace), RUNNER_TEMP=str(self.work / "runner-temp"), CI="true")
        outputs = []
        for step in job["steps"]:
            if not step_runs(step.get("if"), self.values(matrix)):
                continue
            if "uses" in step:
                self.action(step["uses"], {k: self.expand(str(v), matrix, workspace) for k, v in step.get("with", {}).items()},
                            workspace, venv, env)
                continue
            step_env = {**env, **{k: self.expand(str(v), matrix, workspace) for k, v in step.get("env", {}).items()}}
            cwd_rel = step.get("working-directory") or defaults.get("run", {}).get("working-directory") or "."
            cwd = Path(self.expand(cwd_rel, matrix, workspace))
            cwd = cwd if cwd.is_absolute() else workspace / cwd
            script = self.expand(step["run"], matrix, workspace)
            proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=step_env,
                                  capture_output=True, text=True, timeout=3600)
            assert proc.returncode == 0, (f"job {name} {dict(matrix)}: step {step.get('name')!r} exited {proc.returncode}\n"
                                          f"$ {script}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
            outputs.append(proc.stdout)
        return outputs

    def action(self, uses: str, inputs: Mapping[str, str], workspace: Path, venv: Path, env: dict[str, str]) -> None:
        action = uses.split("@")[0]
        if action == "actions/checkout":
            run(["git", "clone", "-q", str(REPO), str(workspace)])
            run(["git", "-C", str(workspace), "checkout", "-q", self.commit])
        elif action == "actions/setup-python":
            run([sys.executable, "-m", "venv", str(venv)])
            env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
            env["VIRTUAL_ENV"] = str(venv)
        elif action == "actions/upload-artifact":
            files = sorted(workspace.glob(inputs["path"]))
            assert files or inputs.get("if-no-files-found") != "error", f"upload-artifact: nothing matches {inputs['path']}"
            target = self.artifacts / inputs["name"]
            target.mkdir(parents=True, exist_ok=True)
            for f in files:
                shutil.copy2(f, target / f.name)
        elif action == "actions/download-artifact":
            names = [inputs["name"]] if "name" in inputs else sorted(
                p.name for p in self.artifacts.iterdir() if re.fullmatch(re.escape(inputs["pattern"]).replace(r"\*", ".*"), p.name))
            assert names, f"download-artifact: no artifact {inputs}"
            for artifact in names:
                dest = workspace / inputs["path"] if inputs.get("merge-multiple") or "name" in inputs else workspace / inputs["path"] / artifact
                dest.mkdir(parents=True, exist_ok=True)
                for f in (self.artifacts / artifact).iterdir():
                    shutil.copy2(f, dest / f.name)
        elif action == "aws-actions/configure-aws-credentials":
            pass  # the index is a local directory here
        else:
            raise AssertionError(f"an action this runner does not know: {uses}")


@pytest.fixture(scope="module")
def committed_tree() -> str:
    require_tool("git", "apt-get", "sudo", "qemu-aarch64-static", "debootstrap")
    dirty = run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"]).stdout
    require(not dirty.strip() or os.environ.get("CI") is not None, "commit first: the workflow runs a clone of HEAD")
    return run(["git", "-C", str(REPO), "rev-parse", "HEAD"]).stdout.strip()


def test_release_workflow_runs_as_written(committed_tree: str, tmp_path: Path) -> None:
    workflow = load_workflow()
    jobs = workflow["jobs"]
    runner = Runner(tmp_path, committed_tree, tmp_path / "index")
    ran: dict[str, int] = {}
    reports: list[dict[str, Any]] = []
    unchecked: list[str] = []  # test rows whose CPU model cannot run NumPy, so no selftest ran
    for name in job_order(jobs):
        job = jobs[name]
        if not job_runs(job.get("if")):
            ran[name] = 0
            continue
        rows = job.get("strategy", {}).get("matrix", {}).get("include", [{}])
        if name == "verify":
            with serve(runner.index) as url:
                runner.index_url = url.rstrip("/")
                outputs = runner.job(name, job, {}, workflow.get("defaults", {}))
            reports.append(json.loads(outputs[-1][outputs[-1].index("{"):]))
            ran[name] = 1
            continue
        for row in rows:
            outputs = runner.job(name, job, row, workflow.get("defaults", {}))
            if name == "test":  # the selftest really ran (NumPy is installed for it), or the model cannot run NumPy
                checked = re.search(r"checks: (\d+) passed, 0 failed", outputs[-1])
                if checked is None and "checks: skipped - NumPy cannot import under Nehalem" in outputs[-1]:
                    unchecked.append(row["cpu"])  # said at the end, as a host fact
                    continue
                assert checked and int(checked.group(1)) > 0, f"{row}: {outputs[-1]}"
        ran[name] = len(rows)
    # every job the push to main triggers ran, in order; the tag-only release job did not
    assert ran["release"] == 0 and all(ran[j] > 0 for j in ("build", "merge", "test", "nightly", "verify"))
    matrix = load_matrix(REPO / "isa_matrix.toml")
    arches = [name for name, a in matrix.arches.items() if "linux" in a.os]
    assert ran["build"] == len(arches) + ran["merge"]  # cpukern: x86_64 in two partials, merged by one job
    # the merged x86_64 wheel carries every variant, under the release label (not a partial's +cpu.<isa>)
    (merged,) = (runner.artifacts / "wheels-x86_64").glob("*.whl")
    assert ".cpu-" in merged.name and ".cpu." not in merged.name  # +g<commit>.cpu, not +g<commit>.cpu.avx2...
    assert set(wheelzip.inspect(merged).built_variants) == {v.name for v in matrix.variants_for("x86_64")}
    assert wheelzip.record_problems(merged) == []
    # the nightly index holds every arch's wheel under the commit, and nightly/ points at them
    stored = sorted(p.name for p in (runner.index / committed_tree).glob("*.whl"))
    assert len(stored) == len(arches) and all(f"_{arch}.whl" in " ".join(stored) for arch in arches)
    assert (runner.index / "nightly" / "cpu" / "cpukern" / "index.html").is_file()
    # the wheel installed from the published index dispatches as the oracle says
    (report,) = reports
    built = [v["name"] for v in report["variants"] if v["built"]]
    assert report["selected"] == oracle_ranking(matrix, built)[0]
    assert report["version"] in " ".join(stored).replace("%2B", "+")
    if unchecked:  # everything above passed; the numerical checks of these rows could not run
        skip_host_fact(f"the workflow ran as written; NumPy cannot import under {', '.join(unchecked)}, "
                       "so the selftest did not run there (selection report only)")


class serve:
    """`cpubuild serve DIR --port 0` with this checkout's cpubuild; the URL it announces."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __enter__(self) -> str:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", "serve",
             str(self.directory), "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "http://" in line, f"cpubuild serve announced no URL: {line!r}"
        return line[line.index("http://"):].split()[0]

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
