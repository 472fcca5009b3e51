"""`cpubuild ci` with [tool.cpubuild.ci] variant-groups: one build job per
(arch, group) making a partial wheel, a merge job per fanned-out arch, the
tests on the merged wheel; refusals of groups that do not fit the matrix."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cpubuild.errors import UsageError
from cpubuild.matrix import load_matrix
from cpubuild.workflow.cases import derived_cases
from cpubuild.workflow.groups import fan_out
from cpubuild.workflow.render import Pipeline, release_workflow, structural_problems
from test_index_publish import cli
from testsupport import CPUKERN_MATRIX, REPO

ARCHES = ["x86_64", "aarch64", "s390x"]
TWO = ({"arch": "x86_64", "isa": "avx512,avx2,avxvnni"}, {"arch": "amd64", "isa": "amx, avx512bf16,avx512vnni"})


def pipeline(groups: tuple[dict[str, str], ...]) -> Pipeline:
    return Pipeline(cpubuild="./tools", workdir=".", dist="cpukern", package="cpukern", variant_groups=groups)


def test_groups_fan_out_the_build_and_a_merge_job_per_arch() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    workflow = release_workflow(matrix, derived_cases(matrix), pipeline(TWO))
    assert structural_problems(workflow) == []
    jobs = workflow["jobs"]
    rows = jobs["build"]["strategy"]["matrix"]["include"]
    assert [(r["arch"], r["isa"], r["artifact"]) for r in rows] == [
        ("x86_64", "avx2,avxvnni,avx512", "partial-x86_64-1"),
        ("x86_64", "avx512vnni,avx512bf16,amx", "partial-x86_64-2"),  # matrix order, whatever the setting's
        ("aarch64", "all", "wheels-aarch64"), ("s390x", "all", "wheels-s390x")]
    build = "\n".join(s.get("run", "") for s in jobs["build"]["steps"])
    assert "--partial --isa ${{ matrix.isa }}" in build and '${CACHE:+--cache "$CACHE"}' in build
    assert [r["arch"] for r in jobs["merge"]["strategy"]["matrix"]["include"]] == ["x86_64"]
    merge = jobs["merge"]["steps"]
    assert merge[-3]["with"]["pattern"] == "partial-${{ matrix.arch }}-*"
    assert merge[-2]["run"] == "cpubuild merge partial/*.whl --out wheelhouse --json\n"
    assert merge[-1]["with"]["name"] == "wheels-${{ matrix.arch }}"
    assert jobs["test"]["needs"] == ["build", "merge"]
    assert list(jobs) == ["build", "merge", "test", "nightly", "release", "verify"]


def test_without_groups_one_job_per_arch_and_no_merge() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    workflow = release_workflow(matrix, derived_cases(matrix), pipeline(()))
    jobs = workflow["jobs"]
    assert "merge" not in jobs and jobs["test"]["needs"] == ["build"]
    assert [set(r) for r in jobs["build"]["strategy"]["matrix"]["include"]] == [{"arch", "compiler"}] * 3
    # the shared cache is used only when the CI variable is set, with the role's credentials
    conditional = [s for s in jobs["build"]["steps"] if "if" in s]
    assert [s["if"] for s in conditional] == ["vars.CPUBUILD_CACHE != ''"] * 2
    assert "secret" not in str([s.get("env") for s in jobs["build"]["steps"]]).lower()


@pytest.mark.parametrize(
    ("groups", "message"),
    [(({"arch": "mips", "isa": "a"},), "entry 1: unknown arch 'mips'"),
     (({"arch": "x86_64", "isa": "avx2,neon"}, {"arch": "x86_64", "isa": "amx"}), "entry 1: 'neon' is not a variant of x86_64"),
     (({"arch": "x86_64", "isa": "baseline"},), "entry 1: names no variant besides the baseline"),
     (({"arch": "x86_64", "isa": "avx2,avx512"}, {"arch": "x86_64", "isa": "avx512,amx"}), "entry 2: 'avx512' is already in"),
     (({"arch": "x86_64", "isa": "avx2,avxvnni,avx512"}, {"arch": "x86_64", "isa": "amx"}),
      "x86_64: avx512vnni, avx512bf16 in no group"),
     (({"arch": "s390x", "isa": "vxe"},), "s390x has one group")],
)
def test_groups_that_do_not_fit_the_matrix_are_refused(groups: tuple[dict[str, str], ...], message: str) -> None:
    with pytest.raises(UsageError) as info:
        fan_out(load_matrix(CPUKERN_MATRIX), groups, ARCHES)
    assert message in info.value.message and "\n" not in info.value.message


def test_a_bad_group_in_pyproject_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    shutil.copy(REPO / "isa_matrix.toml", project)
    text = (REPO / "pyproject.toml").read_text().replace('isa = "avx2,avxvnni,avx512"}', 'isa = "avx2,avxvnni"}')
    (project / "pyproject.toml").write_text(text)
    out = cli("ci", "--project", str(project), "--dir", str(project / "ci"))
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0, out.stderr
    assert "variant-groups" in out.stderr and "avx512 in no group" in out.stderr
    assert not (project / "ci").exists()


def test_a_project_in_a_sub_directory_gets_its_artifact_paths_below_it() -> None:
    matrix = load_matrix(CPUKERN_MATRIX)
    pipe = Pipeline(cpubuild="./tools", workdir="libs/k", dist="cpukern", package="cpukern", variant_groups=TWO)
    workflow = release_workflow(matrix, derived_cases(matrix), pipe)
    paths = {job: [s["with"]["path"] for s in spec["steps"] if "path" in s.get("with", {})]
             for job, spec in workflow["jobs"].items()}
    assert paths["build"] == ["libs/k/wheelhouse/*.whl"]
    assert paths["merge"] == ["libs/k/partial", "libs/k/wheelhouse/*.whl"]
    assert paths["test"] == paths["nightly"] == paths["release"] == ["libs/k/wheelhouse"]


def test_a_floor_is_built_by_the_group_naming_it_else_by_every_group() -> None:
    """vLLM's matrix has a floor (avx2), a full variant: one partial builds it, the rendered jobs say --partial."""
    matrix = load_matrix(REPO / "examples" / "vllm-cpu" / "isa_matrix.toml")
    named = fan_out(matrix, ({"arch": "x86_64", "isa": "avx2,avx512,avx512vnni"}, {"arch": "x86_64", "isa": "avx512bf16"},
                             {"arch": "x86_64", "isa": "amx"}), ARCHES)
    assert named == {"x86_64": [["avx2", "avx512", "avx512vnni"], ["avx512bf16"], ["amx"]]}
    unnamed = fan_out(matrix, ({"arch": "x86_64", "isa": "avx512,avx512vnni"}, {"arch": "x86_64", "isa": "avx512bf16,amx"}), ARCHES)
    assert unnamed == {"x86_64": [["avx2", "avx512", "avx512vnni"], ["avx2", "avx512bf16", "amx"]]}
    with pytest.raises(UsageError, match="'avx2' is already in another x86_64 group"):
        fan_out(matrix, ({"arch": "x86_64", "isa": "avx2,avx512"}, {"arch": "x86_64", "isa": "avx2,amx"}), ARCHES)
    workflow = release_workflow(matrix, derived_cases(matrix), pipeline(({"arch": "x86_64", "isa": "avx2,avx512"},
                                                                        {"arch": "x86_64", "isa": "avx512vnni,avx512bf16,amx"})))
    build = "\n".join(s.get("run", "") for s in workflow["jobs"]["build"]["steps"])
    assert "cpubuild wheel --arch ${{ matrix.arch }} --partial --isa ${{ matrix.isa }}" in build
