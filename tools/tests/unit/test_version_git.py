"""Version naming: git rules (pure, then real throw-away git repositories), a
static [project] version (static_source_version), and the version provider
scikit-build-core calls in every build (cpubuild.version_provider)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cpubuild import version_provider
from cpubuild.errors import UsageError
from cpubuild.wheelbuild.version import (
    ZIP_EPOCH_MIN,
    GitState,
    compose,
    next_release,
    read_git_state,
    source_version,
    static_source_version,
    version_from_env,
    version_from_git,
)
from packaging.version import Version
from testsupport import require_tool


def state(**kw: object) -> GitState:
    base: dict[str, object] = {"tag": None, "distance": 12, "short_hash": "1a2b3c4", "dirty": False, "commit_time": 1_700_000_000}
    base.update(kw)
    return GitState(**base)  # type: ignore[arg-type]


def test_no_tag_dev_build_counts_commits_from_the_base_version() -> None:
    v = version_from_git(state(), "0.1.0")
    assert v.text == "0.1.0.dev12+g1a2b3c4"
    assert v.with_label(("cpu", "avx512")) == "0.1.0.dev12+g1a2b3c4.cpu.avx512"
    assert v.source_date_epoch == 1_700_000_000


def test_exact_tag_is_the_release() -> None:
    v = version_from_git(state(tag="0.2.0", distance=0), "0.1.0")
    assert v.text == "0.2.0"
    assert v.with_label(("cpu",)) == "0.2.0+cpu"


def test_commits_after_a_tag_are_dev_builds_of_the_next_release() -> None:
    v = version_from_git(state(tag="0.2.0", distance=3), "0.1.0")
    assert v.text == "0.2.1.dev3+g1a2b3c4"
    assert Version("0.2.0") < Version(v.text) < Version("0.2.1")


def test_after_a_prerelease_tag_the_prerelease_number_is_bumped() -> None:
    assert version_from_git(state(tag="1.0.0rc1", distance=2), "0.1.0").text == "1.0.0rc2.dev2+g1a2b3c4"
    assert next_release(Version("1.2")) == "1.3"


def test_dirty_trees_are_marked_even_on_a_tag() -> None:
    assert version_from_git(state(dirty=True), "0.1.0").text == "0.1.0.dev12+g1a2b3c4.dirty"
    tagged = version_from_git(state(tag="0.2.0", distance=0, dirty=True), "0.1.0")
    assert tagged.text == "0.2.0+g1a2b3c4.dirty"
    assert tagged.with_label(("cpu",)) != version_from_git(state(tag="0.2.0", distance=0), "0.1.0").with_label(("cpu",))


def test_non_pep440_tag_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="not a PEP 440 version"):
        version_from_git(state(tag="release-candidate", distance=0), "0.1.0")


def test_compose_rejects_bad_local_segments() -> None:
    with pytest.raises(ValueError):
        compose("0.1.0", ("neon_bf16",))


def test_explicit_version_from_the_environment() -> None:
    v = version_from_env({"CPUBUILD_VERSION": "0.3.0.dev4+gabcdef0", "SOURCE_DATE_EPOCH": "1600000000"})
    assert v is not None
    assert v.with_label(("cpu", "avx2")) == "0.3.0.dev4+gabcdef0.cpu.avx2"
    assert v.source_date_epoch == 1_600_000_000
    assert version_from_env({}) is None
    with pytest.raises(UsageError, match="canonical"):
        version_from_env({"CPUBUILD_VERSION": "0.3.0-dev4"})
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH"):
        version_from_env({"CPUBUILD_VERSION": "0.3.0", "SOURCE_DATE_EPOCH": "yesterday"})


def test_backend_provider_reads_the_environment_then_the_fallback(tmp_path: Path) -> None:
    fallback = tmp_path / "_version.py"
    fallback.write_text('__version__ = "0.1.0"\n')
    settings = {"fallback": str(fallback)}
    resolve = version_provider.resolve_version
    assert version_provider.ENV_VERSION == "CPUBUILD_BUILD_VERSION"
    assert resolve(settings, {}) == "0.1.0"
    assert resolve(settings, {"CPUBUILD_BUILD_VERSION": "0.1.0.dev3+g1234567.cpu.avx2"}) == "0.1.0.dev3+g1234567.cpu.avx2"
    assert resolve(settings, {"CPUBUILD_BUILD_VERSION": "  "}) == "0.1.0"  # blank: unset
    # the old project-specific variable means nothing any more
    assert resolve(settings, {"CPUKERN_BUILD_VERSION": "9.9.9"}) == "0.1.0"
    with pytest.raises(ValueError, match=r"CPUBUILD_BUILD_VERSION='0\.1\.0\+cpu\.neon_bf16' is not a canonical PEP 440"):
        resolve(settings, {"CPUBUILD_BUILD_VERSION": "0.1.0+cpu.neon_bf16"})


@pytest.mark.parametrize("text", ["1.0", "0.1.0.dev12+g1a2b3c4.cpu.avx512", "2.0rc1.post3.dev4", "1!2.0+cpu", "0.2.0+g1a2b3c4.dirty"])
def test_provider_accepts_canonical_versions(text: str) -> None:
    assert version_provider.PEP440.fullmatch(text)
    assert str(Version(text)) == text


@pytest.mark.parametrize("text", ["v1.0", "1.0-dev3", "1.0+cpu.neon_bf16", "1.0+CPU", "1.0.dev", "latest"])
def test_provider_refuses_other_spellings(text: str) -> None:
    assert not version_provider.PEP440.fullmatch(text)


def test_provider_fallback_file_forms(tmp_path: Path) -> None:
    path = tmp_path / "v.py"
    for line in ('__version__ = "1.2.3"', "__version__='1.2.3'", '__version__: str = "1.2.3"', '"""doc"""\nX = 1\n__version__ = "1.2.3"'):
        path.write_text(line + "\n")
        assert version_provider.resolve_version({"fallback": str(path)}, {}) == "1.2.3", line
    path.write_text("VERSION = '1.2.3'\n")
    with pytest.raises(ValueError, match="no __version__"):
        version_provider.resolve_version({"fallback": str(path)}, {})
    with pytest.raises(ValueError, match="needs a 'fallback' file setting"):
        version_provider.resolve_version({}, {})


def test_provider_hook_reads_the_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fallback = tmp_path / "_version.py"
    fallback.write_text('__version__ = "0.4.0"\n')
    monkeypatch.delenv("CPUBUILD_BUILD_VERSION", raising=False)
    project = {"name": "x", "dynamic": ["version"]}
    assert version_provider.dynamic_metadata({"fallback": str(fallback)}, project) == {"version": "0.4.0"}
    monkeypatch.setenv("CPUBUILD_BUILD_VERSION", "0.4.0+cpu.avx2")
    assert version_provider.dynamic_metadata({"fallback": str(fallback)}, project) == {"version": "0.4.0+cpu.avx2"}
    # what is not dynamic is not set: a static version with dynamic dependencies
    assert version_provider.dynamic_metadata({}, {"name": "x", "dynamic": []}) == {}


def test_provider_pins_the_torch_minor_of_a_torch_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kind = torch with dynamic dependencies: the `dependencies` setting plus torch==X.Y.* of the torch built against."""
    monkeypatch.chdir(tmp_path)  # scikit-build-core runs providers in the project directory
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.cpubuild]\nkind = "torch"\n')
    monkeypatch.setenv("CPUBUILD_TORCH_VERSION", "2.13.0+cpu")
    project = {"name": "x", "version": "1.0", "dynamic": ["dependencies"]}
    got = version_provider.dynamic_metadata({"dependencies": ["numpy>=1.22"]}, project)
    assert got == {"dependencies": ["numpy>=1.22", "torch==2.13.*"]}
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.cpubuild]\nkind = "ctypes"\n')
    assert version_provider.dynamic_metadata({"dependencies": ["numpy>=1.22"]}, project) == {"dependencies": ["numpy>=1.22"]}
    with pytest.raises(ValueError, match="must be a list of requirements"):
        version_provider.dynamic_metadata({"dependencies": "numpy"}, project)


def test_provider_is_registered_and_standard_library_only() -> None:
    """Projects name it `provider = "cpubuild"`; it runs inside isolated builds."""
    import ast
    import sys
    from importlib import metadata

    found = [ep for ep in metadata.entry_points(group="dynamic_metadata.provider") if ep.name == "cpubuild"]
    assert [ep.value for ep in found] == ["cpubuild.version_provider"]
    assert found[0].load() is version_provider
    tree = ast.parse(Path(version_provider.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    # tomli: tomllib's backport, imported on Python 3.10 only (a dependency of cpubuild there)
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "tomli"}, imported


# ------------------------------------------------------------ static versions


def test_static_version_is_used_as_written(tmp_path: Path) -> None:
    v = static_source_version("1.2.0", tmp_path, {})
    assert (v.public, v.local, v.text) == ("1.2.0", (), "1.2.0")
    assert v.with_label(("cpu", "avx2")) == "1.2.0+cpu.avx2"
    assert v.with_label(("cpu",)) == "1.2.0+cpu"
    assert v.source_date_epoch == ZIP_EPOCH_MIN  # outside git, no SOURCE_DATE_EPOCH: 1980
    assert "static" in v.origin
    assert static_source_version("01.02.0", tmp_path, {}).text == "1.2.0"  # normalised
    assert static_source_version("1.2.0", tmp_path, {"SOURCE_DATE_EPOCH": "1700000000"}).source_date_epoch == 1_700_000_000


@pytest.mark.parametrize(("version", "words"), [("banana", "is not a PEP 440 version"), ("1.2.0+local", "has a local label")])
def test_bad_static_versions_are_usage_errors(tmp_path: Path, version: str, words: str) -> None:
    with pytest.raises(UsageError) as info:
        static_source_version(version, tmp_path, {})
    assert info.value.exit_code == 2
    assert str(tmp_path / "pyproject.toml") in info.value.message and words in info.value.message


# ------------------------------------------------------------ real git


def git(repo: Path, *args: str, epoch: int = 1_650_000_000) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": f"@{epoch} +0000", "GIT_COMMITTER_DATE": f"@{epoch} +0000",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    require_tool("git")
    git(tmp_path, "init", "-q")
    (tmp_path / "_version.py").write_text('__version__ = "0.1.0"\n')
    (tmp_path / "a.txt").write_text("a\n")
    git(tmp_path, "add", ".")
    for i in range(3):
        git(tmp_path, "commit", "-q", "--allow-empty", "-m", f"c{i}", epoch=1_650_000_000 + i)
    return tmp_path


def test_real_repository_without_tags(repo: Path) -> None:
    st = read_git_state(repo)
    assert st is not None
    assert st.tag is None and st.distance == 3 and not st.dirty
    assert st.short_hash == git(repo, "rev-parse", "--short=7", "HEAD")
    assert st.commit_time == 1_650_000_002
    v = source_version(repo, repo / "_version.py", {})
    assert v.text == f"0.1.0.dev3+g{st.short_hash}"


def test_real_repository_tag_distance_and_dirt(repo: Path) -> None:
    git(repo, "tag", "v0.4.0")
    assert source_version(repo, repo / "_version.py", {}).text == "0.4.0"
    git(repo, "commit", "-q", "--allow-empty", "-m", "after")
    st = read_git_state(repo)
    assert st is not None and st.tag == "0.4.0" and st.distance == 1
    (repo / "a.txt").write_text("changed\n")
    v = source_version(repo, repo / "_version.py", {})
    assert v.text == f"0.4.1.dev1+g{st.short_hash}.dirty"
    (repo / "untracked.txt").write_text("new\n")  # untracked files do not make a tree dirty
    (repo / "a.txt").write_text("a\n")
    assert not source_version(repo, repo / "_version.py", {}).text.endswith("dirty")


def test_source_date_epoch_from_the_environment_wins(repo: Path) -> None:
    assert source_version(repo, repo / "_version.py", {"SOURCE_DATE_EPOCH": "1700000000"}).source_date_epoch == 1_700_000_000


def test_outside_git_the_base_version_is_marked(tmp_path: Path) -> None:
    (tmp_path / "_version.py").write_text('__version__ = "0.1.0"\n')
    v = source_version(tmp_path, tmp_path / "_version.py", {})
    assert v.text == "0.1.0+nogit"
    assert "CPUBUILD_VERSION" in v.origin


def test_static_version_takes_the_commit_time_but_ignores_tags(repo: Path) -> None:
    git(repo, "tag", "v9.0.0")
    v = static_source_version("1.2.0", repo, {})
    assert v.text == "1.2.0" and v.source_date_epoch == 1_650_000_002  # the commit time
    (repo / "a.txt").write_text("changed\n")
    # uncommitted changes: marked, so the build is never mistaken for (or published over) the clean one
    assert static_source_version("1.2.0", repo, {}).text == "1.2.0+dirty"
    assert static_source_version("1.2.0", repo, {"SOURCE_DATE_EPOCH": "1700000000"}).source_date_epoch == 1_700_000_000
