"""Names that go into an index: commit resolution (full SHAs, short SHAs,
revisions) and PEP 825 variant labels in wheel file names."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cpubuild.index.names import IndexInputError, check_variant, href, parse_wheel_name, resolve_commit
from testsupport import require_tool


@pytest.fixture(scope="module")
def git_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A checkout with one commit, and that commit's full SHA (the oracle: git itself)."""
    require_tool("git")
    repo = tmp_path_factory.mktemp("checkout")
    env_args = ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "f").write_text("x\n")
    subprocess.run(["git", *env_args, "-C", str(repo), "add", "f"], check=True)
    subprocess.run(["git", *env_args, "-C", str(repo), "commit", "-q", "-m", "one"], check=True)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                         text=True).stdout.strip()
    return repo, sha


@pytest.mark.parametrize("length", [40, 64])
def test_a_full_sha_is_taken_as_is_without_git(tmp_path: Path, length: int) -> None:
    sha = ("0123456789abcdef" * 4)[:length]
    assert resolve_commit(f" {sha}\n", repo=tmp_path) == sha  # tmp_path is no checkout: git is never asked


@pytest.mark.parametrize("length", [7, 12, 39])
def test_a_short_sha_resolves_to_the_full_commit(git_repo: tuple[Path, str], length: int) -> None:
    repo, sha = git_repo
    assert resolve_commit(sha[:length], repo=repo) == sha


@pytest.mark.parametrize("revision", ["HEAD", "HEAD^{commit}", "master@{0}"])
def test_a_revision_resolves_to_the_full_commit(git_repo: tuple[Path, str], revision: str) -> None:
    repo, sha = git_repo
    if revision.startswith("master"):
        branch = subprocess.run(["git", "-C", str(repo), "branch", "--show-current"], capture_output=True,
                                text=True, check=True).stdout.strip()
        revision = revision.replace("master", branch)
    assert resolve_commit(revision, repo=repo) == sha


@pytest.mark.parametrize("length", [7, 39])
def test_a_short_sha_of_no_commit_here_is_refused(git_repo: tuple[Path, str], length: int) -> None:
    repo, sha = git_repo
    other = ("f" if sha[0] != "f" else "e") * length  # not a prefix of the one commit
    with pytest.raises(IndexInputError, match=r"neither a full commit SHA .* nor a git revision"):
        resolve_commit(other, repo=repo)


@pytest.mark.parametrize("text", ["-rf", "--all", "HEAD ~1", "a\tb"])
def test_an_option_or_spaced_text_never_reaches_git(tmp_path: Path, text: str) -> None:
    with pytest.raises(IndexInputError, match="is not a commit SHA or git revision"):
        resolve_commit(text, repo=tmp_path)


@pytest.mark.parametrize("text", [None, "", "   "])
def test_no_commit_is_one_clear_error(text: str | None) -> None:
    with pytest.raises(IndexInputError, match=r"^no commit given: pass --commit SHA"):
        resolve_commit(text)


@pytest.mark.parametrize("filename", [
    "dotlib-1.0-cp311-cp311-linux_x86_64-avx2.whl",
    "dotlib-1.0-1-cp311-cp311-linux_x86_64-x86_64_v4.whl",
    "dotlib-1.0-cp311-cp311-linux_x86_64-a.whl",
    "dotlib-1.0-cp311-cp311-linux_x86_64-0123456789abcdef.whl",
])
def test_a_pep825_label_is_parsed(filename: str) -> None:
    assert parse_wheel_name(filename).label == filename[:-len(".whl")].rsplit("-", 1)[1]


@pytest.mark.parametrize("filename", [
    "dotlib-1.0-cp311-cp311-linux_x86_64-AVX2.whl",  # upper case
    "dotlib-1.0-1-cp311-cp311-linux_x86_64-Avx2.whl",  # after a build tag
    "dotlib-1.0-cp311-cp311-linux_x86_64-0123456789abcdefg.whl",  # 17 characters
    "dotlib-1.0-cp311-cp311-linux_x86_64-avx+2.whl",
    "dotlib-1.0-cp311-cp311-linux_x86_64-avx!2.whl",
])
def test_an_invalid_pep825_label_is_refused(filename: str) -> None:
    label = filename[:-len(".whl")].rsplit("-", 1)[1]
    with pytest.raises(IndexInputError, match=rf"variant label '{re.escape(label)}' is not \[0-9a-z_\.\]\{{1,16\}} \(PEP 825\)"):
        parse_wheel_name(filename)


def test_a_wheel_without_a_label_has_none() -> None:
    assert parse_wheel_name("dotlib-1.0-1-cp311-cp311-linux_x86_64.whl").label is None
    assert parse_wheel_name("dotlib-1.0-cp311-cp311-linux_x86_64.whl").label is None


@pytest.mark.parametrize(("filename", "problem"), [
    ("a/b-1.0-py3-none-any.whl", "is not a plain file name"),
    ("a\\b-1.0-py3-none-any.whl", "is not a plain file name"),
    (".", "is not a plain file name"),
    ("..", "is not a plain file name"),
    ("b-1.0-py3-none-any.zip", r"is not a wheel \(the name does not end in \.whl\)"),
    ("b-1.0-py3-none-any%20.whl", "has characters a wheel file name cannot have"),
    ("b-1.0.whl", "is not a valid wheel file name: "),
])
def test_each_bad_wheel_name_says_why(filename: str, problem: str) -> None:
    with pytest.raises(IndexInputError, match=f"^{re.escape(repr(filename))} {problem}"):
        parse_wheel_name(filename)


def test_a_parsed_wheel_name_keeps_every_part() -> None:
    name = parse_wheel_name("Dot_Lib-1.0+cpu-1a-cp311-cp311-linux_x86_64.whl")  # a build tag of a digit and a letter
    assert (name.filename, name.project, str(name.version), name.build, name.label) == (
        "Dot_Lib-1.0+cpu-1a-cp311-cp311-linux_x86_64.whl", "dot-lib", "1.0+cpu", (1, "a"), None)
    assert {str(t) for t in name.tags} == {"cp311-cp311-linux_x86_64"}
    assert str(name.public_version) == "1.0"


def test_a_bad_variant_name_says_what_a_good_one_is() -> None:
    with pytest.raises(IndexInputError, match=r"^variant 'CPU' is not a valid index tree name \(lower case letters"):
        check_variant("CPU")
    assert check_variant("cpu") == "cpu"


def test_href_escapes_plus_but_keeps_the_path() -> None:
    assert href("cpukern/cpukern-1.0+cpu-py3-none-any.whl") == "cpukern/cpukern-1.0%2Bcpu-py3-none-any.whl"


def test_a_revision_without_git_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH: the revision cannot be resolved
    with pytest.raises(IndexInputError, match=r"^--commit 'HEAD' is neither a full commit SHA"):
        resolve_commit("HEAD", repo=tmp_path)
