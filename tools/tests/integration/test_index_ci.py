"""`cpubuild ci`: the release workflow is derived from the project's matrix
and cpubuild's hardware data, committed up to date, parses to what was
rendered, and passes actionlint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cpubuild.hardware import hardware
from cpubuild.matrix import load_matrix
from cpubuild.project import load_project
from cpubuild.workflow.cases import EMULATION, derived_cases, load_cases
from cpubuild.workflow.render import WORKFLOW, pipeline_of, release_workflow, structural_problems
from test_index_publish import cli
from testsupport import CPUKERN_MATRIX, REPO, require, require_tool

CI_DIR = REPO / "ci"


def load_yaml(text: str) -> object:
    try:
        import yaml
    except ImportError:
        require(False, "PyYAML is needed to read the workflow back")
    data = yaml.safe_load(text)
    if isinstance(data, dict) and True in data:  # YAML 1.1 reads the key `on` as true
        data["on"] = data.pop(True)
    return data


def test_committed_workflow_is_current_and_round_trips() -> None:
    out = cli("ci", "--check")
    assert out.returncode == 0, out.stderr
    matrix = load_matrix(CPUKERN_MATRIX)
    workflow = release_workflow(matrix, load_cases(CI_DIR / EMULATION, matrix), pipeline_of(load_project(REPO)))
    assert load_yaml((CI_DIR / WORKFLOW).read_text()) == workflow
    assert structural_problems(workflow) == []
    # derived, not listed: every Linux arch of the matrix is built, every case tested
    built = [row["arch"] for row in workflow["jobs"]["build"]["strategy"]["matrix"]["include"]]
    assert list(dict.fromkeys(built)) == [name for name, arch in matrix.arches.items() if "linux" in arch.os]
    # cpukern fans x86_64 out over two partial builds (pyproject.toml's variant-groups), merged by one job
    assert built.count("x86_64") == 2 and [r["arch"] for r in workflow["jobs"]["merge"]["strategy"]["matrix"]["include"]] == ["x86_64"]
    tested = {(row["arch"], row["cpu"], row["expect"]) for row in workflow["jobs"]["test"]["strategy"]["matrix"]["include"]}
    assert tested == {(c.arch, c.cpu, c.expect) for c in load_cases(CI_DIR / EMULATION, matrix)}


def test_cases_come_from_the_hardware_data() -> None:
    """Without ci/emulation.toml, each qemu model of the hardware data that shows the
    project's variants a new set of their required features is a case, expecting what
    the matrix says; every variant some model selects is tested."""
    matrix = load_matrix(CPUKERN_MATRIX)
    cases = derived_cases(matrix)
    assert not (CI_DIR / EMULATION).exists()
    for arch in matrix.arches:
        models = hardware().qemu[arch]
        relevant = {f for v in matrix.variants_for(arch) for f in v.requires}
        mine = [c for c in cases if c.arch == arch]
        assert {c.expect for c in mine} == {matrix.best_for(arch, m.features).name for m in models}
        shown = [frozenset(next(m for m in models if m.cpu == c.cpu).features & relevant) for c in mine]
        assert len(set(shown)) == len(shown)  # no two cases show the variants the same CPU
        for case in mine:
            model = next(m for m in models if m.cpu == case.cpu)
            assert case.expect == matrix.best_for(arch, model.features).name and case.checks
    # cpukern's x86 ladder under QEMU 7.2 (no AVX-512): no XSAVE, AVX without AVX2, AVX2
    assert [(c.cpu, c.expect) for c in cases if c.arch == "x86_64"] == [
        ("Nehalem", "baseline"), ("SandyBridge", "baseline"), ("Haswell", "avx2")]
    assert [c.cpu for c in cases if c.arch == "aarch64"] == ["cortex-a53", "neoverse-n1", "max,sve=off", "max"]


def test_stale_ci_dir_is_detected(tmp_path: Path) -> None:
    ci = tmp_path / "ci"
    shutil.copytree(CI_DIR, ci)
    assert cli("ci", "--check", "--dir", str(ci)).returncode == 0
    # an arch dropped from the matrix must leave the workflow
    matrix = (REPO / "isa_matrix.toml").read_text()
    fewer = matrix[: matrix.index("# ---------------------------------------------------------------- s390x")]
    (tmp_path / "isa_matrix.toml").write_text(fewer)
    out = cli("ci", "--check", "--dir", str(ci), "--matrix", str(tmp_path / "isa_matrix.toml"))
    assert out.returncode == 1 and "stale" in out.stderr and "g++-s390x-linux-gnu" in out.stderr
    # re-rendering fixes it
    assert cli("ci", "--dir", str(ci), "--matrix", str(tmp_path / "isa_matrix.toml")).returncode == 0
    assert cli("ci", "--check", "--dir", str(ci), "--matrix", str(tmp_path / "isa_matrix.toml")).returncode == 0
    assert "s390x" not in (ci / WORKFLOW).read_text()
    # a hand edit is stale too
    (ci / WORKFLOW).write_text((ci / WORKFLOW).read_text().replace("fail-fast: false", "fail-fast: true", 1))
    assert cli("ci", "--check", "--dir", str(ci), "--matrix", str(tmp_path / "isa_matrix.toml")).returncode == 1


@pytest.mark.parametrize(
    ("case", "message"),
    [('arch = "mips"\ncpu = "x"\nexpect = "baseline"', "unknown arch"),
     ('arch = "x86_64"\ncpu = "Haswell"\nexpect = "neon"', "not a variant of x86_64"),
     ('arch = "x86_64"\ncpu = "Has well"\nexpect = "avx2"', "QEMU model name")],
)
def test_bad_emulation_cases_are_refused(tmp_path: Path, case: str, message: str) -> None:
    (tmp_path / EMULATION).write_text(f"schema = 1\n[[case]]\n{case}\n")
    out = cli("ci", "--dir", str(tmp_path))
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not (tmp_path / WORKFLOW).exists()


def test_actionlint_accepts_the_workflow() -> None:
    require_tool("actionlint")
    out = cli("ci", "--check", "--lint")
    assert out.returncode == 0, out.stdout + out.stderr
