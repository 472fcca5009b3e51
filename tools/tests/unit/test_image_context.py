"""The build context `cpubuild image` sends: source files git knows, no build
outputs, and cpubuild's own `.cpubuild/` folder made for this build only."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest
from cpubuild.docker.context import build_context, generated_files, source_files
from testsupport import require_tool


def _tree(root: Path) -> None:
    files = {
        "isa_matrix.toml": "schema = 1\n",
        "csrc/kernels/norm.cpp": "// kernel\n",
        "tools/cpubuild/build/plan.py": "# a package named build, deep in the tree\n",
        "build/cp311/CMakeCache.txt": "build output\n",
        "wheelhouse/cpukern-0.1-py3-none-linux_x86_64.whl": "old wheel\n",
        ".cpubuild/wheel/stale-py3-none-linux_x86_64.whl": "a wheel someone left here\n",
        ".cpubuild/Dockerfile": "FROM stale\n",
        "python/cpukern/__pycache__/x.cpython-311.pyc": "bytecode\n",
        "notes-untracked.txt": "work in progress\n",
        "ignored.log": "ignored\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / ".gitignore").write_text("build/\nwheelhouse/*\n__pycache__/\n*.log\n")


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    require_tool("git")
    _tree(tmp_path)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "isa_matrix.toml", "csrc", ".gitignore")
    _git(tmp_path, "add", "-f", ".cpubuild/Dockerfile")  # even tracked, .cpubuild/ is this build's
    _git(tmp_path, "add", "-f", "tools/cpubuild/build/plan.py")
    return tmp_path


EXPECTED = {
    ".gitignore",
    "csrc/kernels/norm.cpp",
    "isa_matrix.toml",
    "notes-untracked.txt",
    "tools/cpubuild/build/plan.py",
}


def test_sources_are_what_git_tracks_or_would_track(repo: Path) -> None:
    assert {str(p) for p in source_files(repo)} == EXPECTED


def test_without_git_the_same_outputs_stay_out(tmp_path: Path) -> None:
    _tree(tmp_path)
    got = {str(p) for p in source_files(tmp_path)}
    # no git: ignore rules are unknown, so only the fixed exclusions apply
    assert got == EXPECTED | {"ignored.log"}


GENERATED = {".cpubuild/wheel/.keep", ".cpubuild/ca-certificates/.keep", ".cpubuild/tool/.keep", ".cpubuild/torch/.keep",
             ".cpubuild/entrypoint.sh", ".cpubuild/install.py"}


def test_context_tar_holds_sources_and_this_builds_files_only(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    wheel = tmp_path_factory.mktemp("wheels") / "cpukern-0.1.0-py3-none-manylinux_2_28_aarch64.whl"
    wheel.write_bytes(b"PK fake")
    generated = generated_files(dockerfile="FROM scratch\n", wheel=wheel, ca_certificates=[], tool_wheels=())
    context = build_context(repo, generated)
    with context.file, tarfile.open(fileobj=context.file) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == EXPECTED | GENERATED | {f".cpubuild/wheel/{wheel.name}", ".cpubuild/Dockerfile"}
        assert all(m.uid == 0 and m.gid == 0 for m in members.values())
        extracted = tar.extractfile(members[f".cpubuild/wheel/{wheel.name}"])
        assert extracted is not None and extracted.read() == b"PK fake"
        dockerfile = tar.extractfile(members[".cpubuild/Dockerfile"])
        assert dockerfile is not None and dockerfile.read() == b"FROM scratch\n"  # this build's, not the tree's
        assert members[".cpubuild/entrypoint.sh"].mode == 0o755
        installer = tar.extractfile(members[".cpubuild/install.py"])
        assert installer is not None and b"import cpubuild" not in installer.read()  # runs without cpubuild
    assert context.files == len(EXPECTED) + len(GENERATED) + 2
