"""ci/release.yml as data: build a wheel per arch (or, for the arches with
[tool.cpubuild.ci] variant-groups, a partial wheel per group, merged by a job
per arch), test each under its CPU models with `cpubuild test`, publish to the
index keyed by commit (nightly on main, a release on v* tags), then install the
published wheel from the index with uv and run its report. Build jobs use the
shared compiler cache named by the CI variable CPUBUILD_CACHE when it is set.
[tool.cpubuild.ci] `cpubuild` says how the jobs install cpubuild (a pip
requirement or a path)."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import CpubuildError
from ..matrix import Matrix
from ..project import Project
from ..supplychain import install_spec
from .cases import EMULATION, EmulationCase, load_cases
from .groups import fan_out
from .yamlout import to_yaml

WORKFLOW = "release.yml"
RUNNER = "ubuntu-24.04"
RUNNER_ARCH = "x86_64"  # GitHub's hosted Ubuntu runners: other arches cross-compile
PYTHON = "3.12"
CHECKOUT = "actions/checkout@v6"
SETUP_PYTHON = "actions/setup-python@v6"
UPLOAD = "actions/upload-artifact@v6"
DOWNLOAD = "actions/download-artifact@v7"
AWS_CREDENTIALS = "aws-actions/configure-aws-credentials@v6"


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    """What the rendered workflow needs to know about the project."""

    cpubuild: str  # pip requirement or path the jobs install cpubuild from
    workdir: str  # the project's directory inside the repository ("." at its root)
    dist: str  # distribution name
    package: str
    variant_groups: tuple[dict[str, str], ...] = ()  # [tool.cpubuild.ci] variant-groups, checked against the matrix later

    def install(self, extras: str = "") -> str:
        return install_spec(self.cpubuild, extras)  # parsed (PEP 508) and shell-quoted, or refused


def pipeline_of(project: Project) -> Pipeline:
    # [tool.cpubuild.ci] was validated (keys, types, non-empty) by the settings model when the project was read
    spec = project.config.settings.ci.cpubuild or f"cpubuild=={__version__}"
    top = _git_toplevel(project.root)
    workdir = project.root.relative_to(top).as_posix() if top is not None else "."
    install_spec(spec)  # refused here, in one line, before anything is rendered
    return Pipeline(cpubuild=spec.strip(), workdir=workdir or ".", dist=project.config.dist_name, package=project.config.package,
                    variant_groups=project.config.settings.ci.variant_groups)


def _git_toplevel(path: Path) -> Path | None:
    try:
        proc = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                              timeout=30, check=False)
    except OSError:
        return None
    return Path(proc.stdout.strip()).resolve() if proc.returncode == 0 else None


def _setup(pipe: Pipeline, *, extra_apt: str = "", extras: str = "", extra_pip: str = "") -> list[dict[str, Any]]:
    apt = f"sudo apt-get update -q\nsudo apt-get install -y -q --no-install-recommends {extra_apt}\n" if extra_apt else ""
    pip = f" {extra_pip}" if extra_pip else ""
    return [
        {"uses": CHECKOUT, "with": {"fetch-depth": 0}},  # tags: the version comes from git
        {"uses": SETUP_PYTHON, "with": {"python-version": PYTHON}},
        {"name": "Install tools", "run": f"{apt}python -m pip install --upgrade {pipe.install(extras)}{pip}\n"},
    ]


def _build_steps(pipe: Pipeline, fanned: bool) -> list[dict[str, Any]]:
    """Setup, the shared cache when vars.CPUBUILD_CACHE is set (its client and the
    role's credentials; never a literal credential), the build, the audit, the upload."""
    cache_set = "vars.CPUBUILD_CACHE != ''"
    isa = " --partial --isa ${{ matrix.isa }}" if fanned else ""
    artifact = "${{ matrix.artifact }}" if fanned else "wheels-${{ matrix.arch }}"
    return [
        *_setup(pipe, extra_apt="cmake ninja-build ccache ${{ matrix.compiler }}"),
        {"name": "Shared compiler cache client", "if": cache_set,
         "run": f"python -m pip install --upgrade {pipe.install('s3-cache')}\n"},
        {
            "uses": AWS_CREDENTIALS, "if": cache_set,
            "with": {"role-to-assume": "${{ secrets.CPUBUILD_AWS_ROLE }}", "aws-region": "${{ vars.CPUBUILD_AWS_REGION }}"},
        },
        {
            "name": "Build",
            "env": {"CACHE": "${{ vars.CPUBUILD_CACHE }}"},  # e.g. s3://bucket/cpubuild-cache/<project>
            "run": f'cpubuild wheel --arch ${{{{ matrix.arch }}}}{isa} --out wheelhouse ${{CACHE:+--cache "$CACHE"}} --json\n',
        },
        # the build already fails on a violation; this prints what each variant's code needs
        {"name": "Audit instructions", "run": "cpubuild audit wheelhouse/*.whl\n"},
        {"uses": UPLOAD, "with": {"name": artifact, "path": "wheelhouse/*.whl", "if-no-files-found": "error"}},
    ]


def _merge_job(pipe: Pipeline, arches: list[str]) -> dict[str, Any]:
    """One per fanned-out arch: its partials -> the wheel one build of all variants makes."""
    return {
        "name": "merge ${{ matrix.arch }}",
        "needs": ["build"],
        "runs-on": RUNNER,
        "strategy": {"fail-fast": False, "matrix": {"include": [{"arch": arch} for arch in arches]}},
        "steps": [
            *_setup(pipe),
            {"uses": DOWNLOAD, "with": {"pattern": "partial-${{ matrix.arch }}-*", "path": "partial", "merge-multiple": True}},
            {"name": "Merge", "run": "cpubuild merge partial/*.whl --out wheelhouse --json\n"},
            {"uses": UPLOAD, "with": {"name": "wheels-${{ matrix.arch }}", "path": "wheelhouse/*.whl", "if-no-files-found": "error"}},
        ],
    }


def _publish_job(pipe: Pipeline, channel: str, condition: str, arches: list[str]) -> dict[str, Any]:
    steps = [
        *_setup(pipe, extras="s3"),
        {"uses": DOWNLOAD, "with": {"pattern": "wheels-*", "path": "wheelhouse", "merge-multiple": True}},
        {
            "uses": AWS_CREDENTIALS,
            "with": {"role-to-assume": "${{ secrets.CPUBUILD_AWS_ROLE }}", "aws-region": "${{ vars.CPUBUILD_AWS_REGION }}"},
        },
        {
            "name": f"Publish ({channel})",
            "env": {"INDEX": "${{ vars.CPUBUILD_INDEX }}"},  # e.g. s3://bucket/wheels
            "run": 'cpubuild publish wheelhouse/*.whl --to "$INDEX" --commit "$GITHUB_SHA" '
            f"--channel {channel} --json\n",
        },
    ]
    permissions: dict[str, str] = {"contents": "read", "id-token": "write"}
    if channel == "release":
        permissions["contents"] = "write"
        steps.append(
            {
                "name": "GitHub release",
                "env": {"GH_TOKEN": "${{ github.token }}"},
                "run": 'gh release create "$GITHUB_REF_NAME" wheelhouse/*.whl --verify-tag --generate-notes\n',
            }
        )
    return {
        "name": f"publish {channel} ({', '.join(arches)})",
        "if": condition,
        "needs": ["build", "test"],
        "runs-on": RUNNER,
        "permissions": permissions,
        "environment": channel,
        "steps": steps,
    }


def _verify_job(pipe: Pipeline) -> dict[str, Any]:
    """The published nightly, installed from the index the way users install it."""
    return {
        "name": "install the published wheel from the index",
        "needs": ["nightly"],
        "runs-on": RUNNER,
        "steps": [
            {"uses": SETUP_PYTHON, "with": {"python-version": PYTHON}},
            {
                "name": "Install from the index",
                # where the index is served (https://...); a private one: the same URL with its
                # credentials as a secret, which only the environment carries (never this file)
                "env": {"INDEX_URL": "${{ vars.CPUBUILD_INDEX_URL }}", "INDEX_AUTH_URL": "${{ secrets.CPUBUILD_INDEX_AUTH_URL }}"},
                "working-directory": "${{ runner.temp }}",  # no checkout: what users install, nothing else
                "run": "python -m pip install --upgrade uv\n"
                'index="${INDEX_AUTH_URL:-$INDEX_URL}"\n'
                'export UV_EXTRA_INDEX_URL="${index%/}/$GITHUB_SHA/cpu/" UV_INDEX_STRATEGY=first-index\n'
                f'python -m uv pip install --python "$(command -v python)" {pipe.dist}\n'
                f"python -m {pipe.package} --json\n",
            },
        ],
    }


def release_workflow(matrix: Matrix, cases: list[EmulationCase], pipe: Pipeline) -> dict[str, Any]:
    arches = [name for name, arch in matrix.arches.items() if "linux" in arch.os]
    groups = fan_out(matrix, pipe.variant_groups, arches)
    build_include: list[dict[str, str]] = []
    for name in arches:
        row = {"arch": name, "compiler": "" if name == RUNNER_ARCH else f"g++-{matrix.arches[name].triplet}"}
        if not groups:  # no fan-out anywhere: one job per arch, nothing more in its row
            build_include.append(row)
        elif name not in groups:
            build_include.append({**row, "isa": "all", "artifact": f"wheels-{name}"})
        else:
            build_include += [{**row, "isa": ",".join(group), "artifact": f"partial-{name}-{i}"}
                              for i, group in enumerate(groups[name], 1)]
    test_include = [
        {"arch": c.arch, "cpu": c.cpu, "expect": c.expect, "flags": "" if c.checks else "--no-checks"}
        for c in cases
        if c.arch in arches
    ]
    build = {
        "name": "wheel ${{ matrix.arch }} (${{ matrix.isa }})" if groups else "wheel ${{ matrix.arch }}",
        "runs-on": RUNNER,
        "permissions": {"contents": "read", "id-token": "write"},  # the shared cache's role (OIDC), when set
        "strategy": {"fail-fast": False, "matrix": {"include": build_include}},
        "steps": _build_steps(pipe, bool(groups)),
    }
    test = {
        "name": "test ${{ matrix.arch }} on ${{ matrix.cpu }}",
        "needs": ["build", "merge"] if groups else ["build"],
        "runs-on": RUNNER,
        "strategy": {"fail-fast": False, "matrix": {"include": test_include}},
        "steps": [
            # NumPy: selftests compare with it; the x86_64 cases run in this Python (the rootfs trees have their own)
            *_setup(pipe, extra_apt="qemu-user-static binfmt-support debootstrap", extra_pip="numpy"),
            {"uses": DOWNLOAD, "with": {"name": "wheels-${{ matrix.arch }}", "path": "wheelhouse"}},
            {
                # root: foreign arches run in a debootstrap rootfs through chroot
                "name": "Test under QEMU",
                "run": 'sudo env "PATH=$PATH" cpubuild test --arch ${{ matrix.arch }} --cpu "${{ matrix.cpu }}" '
                "--expect ${{ matrix.expect }} ${{ matrix.flags }} --wheelhouse wheelhouse\n",
            },
        ],
    }
    workflow: dict[str, Any] = {
        "name": "release",
        "on": {
            "push": {"branches": ["main"], "tags": ["v*"]},
            "pull_request": {},
            "workflow_dispatch": {},
        },
        "permissions": {"contents": "read"},
        "concurrency": {"group": "release-${{ github.ref }}", "cancel-in-progress": "${{ github.event_name == 'pull_request' }}"},
        "jobs": {
            "build": build,
            **({"merge": _merge_job(pipe, list(groups))} if groups else {}),
            "test": test,
            "nightly": _publish_job(pipe, "nightly", "github.event_name == 'push' && github.ref == 'refs/heads/main'", arches),
            "release": _publish_job(pipe, "release", "github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v')", arches),
            "verify": _verify_job(pipe),
        },
    }
    if pipe.workdir != ".":  # a project in a sub-directory of its repository
        workflow["defaults"] = {"run": {"working-directory": pipe.workdir}}
        for job in workflow["jobs"].values():  # artifact paths are relative to the workspace, not the defaults
            for step in job["steps"]:
                if step.get("with", {}).get("path") in ("wheelhouse/*.whl", "wheelhouse", "partial"):
                    step["with"]["path"] = f"{pipe.workdir}/{step['with']['path']}"
    return workflow


def structural_problems(workflow: dict[str, Any]) -> list[str]:
    """Checks that need no linter: jobs named in `needs` exist, every
    `matrix.X` a job uses is in its matrix, each step uses or runs."""
    problems = []
    jobs = workflow.get("jobs", {})
    for job_id, job in jobs.items():
        for need in job.get("needs", []):
            if need not in jobs:
                problems.append(f"job {job_id}: needs unknown job {need!r}")
        if "runs-on" not in job or not job.get("steps"):
            problems.append(f"job {job_id}: runs-on and steps are required")
        matrix = job.get("strategy", {}).get("matrix", {})
        keys = {k for k in matrix if k != "include"} | {k for row in matrix.get("include", []) for k in row}
        used = set(re.findall(r"\bmatrix\.([A-Za-z_][A-Za-z0-9_-]*)", json.dumps(job)))
        for key in sorted(used - keys):
            problems.append(f"job {job_id}: uses matrix.{key}, which its matrix does not define")
        for i, step in enumerate(job.get("steps", []), 1):
            if ("uses" in step) == ("run" in step):
                problems.append(f"job {job_id}, step {i}: needs exactly one of uses / run")
    return problems



HEADER = """\
# GENERATED by `cpubuild ci` from the project's isa_matrix.toml and cpubuild's hardware data: do not edit.
# Copy to .github/workflows/release.yml (docs/index.md); `cpubuild ci --check` fails when stale.
# Needs: vars.CPUBUILD_INDEX (e.g. s3://bucket/wheels), vars.CPUBUILD_INDEX_URL (where that index
# is served over HTTPS), vars.CPUBUILD_AWS_REGION and secrets.CPUBUILD_AWS_ROLE (an IAM role for
# OIDC); environments `nightly` and `release`. A private index: secrets.CPUBUILD_INDEX_AUTH_URL,
# the served URL with its credentials (https://user:token@host/...). Optional: vars.CPUBUILD_CACHE
# (s3://bucket/prefix, a compiler cache the build jobs share; the role needs read/write there;
# docs/scale-out.md).
"""


def render_all(matrix: Matrix, ci_dir: Path, pipe: Pipeline) -> dict[str, str]:
    cases = load_cases(ci_dir / EMULATION, matrix)
    workflow = release_workflow(matrix, cases, pipe)
    problems = structural_problems(workflow)
    if problems:
        raise CpubuildError("the rendered workflow is inconsistent", detail="\n".join(problems))
    return {WORKFLOW: HEADER + to_yaml(workflow)}
