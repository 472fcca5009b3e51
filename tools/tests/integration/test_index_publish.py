"""`cpubuild publish` into a local directory: layout, channels, no-op
re-publish, bad input, concurrent publishers and publishers killed midway."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cpubuild.index.storage import LocalStorage
from cpubuild.index.verify import verify_tree
from cpubuild.index.wheelfile import write_wheel
from testsupport import REPO, require, require_tool, run

TOOLS = str(REPO / "tools")
COMMIT_A = "1" * 40
COMMIT_B = "2" * 40
COMMIT_C = "3" * 40


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=TOOLS)
    return subprocess.run(
        [sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=300, check=False,
    )


def tree_hash(root: Path) -> str:
    """Every path and byte under root: equal hashes mean an untouched index."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def wheel(tmp: Path, version: str, tag: str = "py3-none-any", payload: bytes = b"") -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    return write_wheel(tmp, name="cpukern", version=version, tag=tag, files={"cpukern/__init__.py": b"# " + payload + b"\n"})


def listed(root: Path, tree: str) -> dict[str, str]:
    report = verify_tree(LocalStorage(root), tree)
    assert report.problems == []
    assert report.html_files == report.files
    return report.files


def test_two_commits_nightly_and_release(tmp_path: Path) -> None:
    root = tmp_path / "index"
    a = wheel(tmp_path / "a", "0.1.0.dev1+g111.cpu", "py3-none-manylinux_2_28_x86_64")
    a_arm = wheel(tmp_path / "a", "0.1.0.dev1+g111.cpu", "py3-none-manylinux_2_28_aarch64")
    b = wheel(tmp_path / "b", "0.1.0.dev2+g222.cpu", "py3-none-manylinux_2_28_x86_64")
    out = cli("publish", str(a), "--to", str(root), "--commit", COMMIT_A, "--channel", "nightly")
    assert out.returncode == 0, out.stderr
    out = cli("publish", str(b), "--to", str(root), "--commit", COMMIT_B, "--channel", "nightly", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["stored"] == [b.name]

    # each wheel stored once, under its commit, with its .metadata twin
    assert (root / COMMIT_A / a.name).read_bytes() == a.read_bytes()
    assert (root / COMMIT_B / (b.name + ".metadata")).is_file()
    assert listed(root, f"{COMMIT_A}/cpu") == {a.name: hashlib.sha256(a.read_bytes()).hexdigest()}
    assert set(listed(root, f"{COMMIT_B}/cpu")) == {b.name}
    assert set(listed(root, "nightly/cpu")) == {b.name}  # nightly moved to the newer commit

    # an older commit finishing late adds to its own tree but leaves nightly alone
    out = cli("publish", str(a_arm), "--to", str(root), "--commit", COMMIT_A, "--channel", "nightly")
    assert out.returncode == 0, out.stderr
    assert "nightly stays at commit" in out.stdout
    assert set(listed(root, f"{COMMIT_A}/cpu")) == {a.name, a_arm.name}
    assert set(listed(root, "nightly/cpu")) == {b.name}

    # a release: its own tree, immutable to one commit
    rel = wheel(tmp_path / "rel", "0.1.0+cpu", "py3-none-manylinux_2_28_x86_64")
    out = cli("publish", str(rel), "--to", str(root), "--commit", COMMIT_C, "--channel", "release")
    assert out.returncode == 0, out.stderr
    assert set(listed(root, "0.1.0/cpu")) == {rel.name}
    other = wheel(tmp_path / "rel2", "0.1.0+cpu", "py3-none-manylinux_2_28_aarch64")
    before = tree_hash(root)
    out = cli("publish", str(other), "--to", str(root), "--commit", COMMIT_A, "--channel", "release")
    assert out.returncode == 1 and "releases are immutable" in out.stderr
    assert tree_hash(root) == before
    out = cli("publish", str(b), "--to", str(root), "--commit", COMMIT_B, "--channel", "release")
    assert out.returncode == 2 and "needs a release version" in out.stderr


def test_republishing_identical_bytes_is_a_no_op(tmp_path: Path) -> None:
    root = tmp_path / "index"
    a = wheel(tmp_path, "0.1.0.dev1")
    assert cli("publish", str(a), "--to", str(root), "--commit", COMMIT_A, "--channel", "nightly").returncode == 0
    before = tree_hash(root)
    out = cli("publish", str(a), "--to", str(root), "--commit", COMMIT_A, "--channel", "nightly")
    assert out.returncode == 0, out.stderr
    assert "identical, nothing to do" in out.stdout
    assert tree_hash(root) == before


def _zip_with_member(path: Path, member: str) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, b"x")
        z.writestr("cpukern-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: cpukern\nVersion: 1.0\n")
        z.writestr("cpukern-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\n")
        z.writestr("cpukern-1.0.dist-info/RECORD", b"")
    return path


@pytest.mark.parametrize(
    "case",
    ["not-a-wheel", "not-a-zip", "member-traversal", "variant-traversal", "commit-traversal", "missing-commit",
     "name-clash", "metadata-mismatch", "missing-file"],
)
def test_bad_input_is_refused_and_leaves_the_index_unchanged(tmp_path: Path, case: str) -> None:
    root = tmp_path / "index"
    good = wheel(tmp_path / "good", "1.0")
    assert cli("publish", str(good), "--to", str(root), "--commit", COMMIT_A, "--channel", "nightly").returncode == 0
    before = tree_hash(root)
    bad = tmp_path / "bad"
    bad.mkdir()
    args = ["--to", str(root), "--commit", COMMIT_A]
    expect = ""
    if case == "not-a-wheel":
        target = bad / "README.md"
        target.write_text("hello")
        expect = "not a wheel"
    elif case == "not-a-zip":
        target = bad / "cpukern-1.1-py3-none-any.whl"
        target.write_text("not a zip")
        expect = "not a zip archive"
    elif case == "member-traversal":
        target = _zip_with_member(bad / "cpukern-1.0-py3-none-any.whl", "../../evil.py")
        expect = "escapes the install directory"
    elif case == "variant-traversal":
        target, args = good, [*args, "--variant", "../../etc"]
        expect = "not a valid index tree name"
    elif case == "commit-traversal":
        target, args = good, ["--to", str(root), "--commit", "../../x"]
        expect = "commit"
    elif case == "missing-commit":
        target, args = good, ["--to", str(root)]
        expect = "no commit given"
    elif case == "name-clash":
        target = wheel(bad, "1.0", payload=b"other bytes, same name")
        expect = "already published with different content"
    elif case == "metadata-mismatch":
        other = wheel(bad / "x", "2.0")
        target = bad / "cpukern-1.0-py3-none-any.whl"
        target.write_bytes(other.read_bytes())
        expect = "METADATA says"
    else:
        target = bad / "cpukern-9.9-py3-none-any.whl"
        expect = "no such file"
    out = cli("publish", str(target), *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert expect in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert tree_hash(root) == before


# ------------------------------------------------------------------ concurrency and crashes

WORKER = """
import sys
from pathlib import Path
from cpubuild.index.publish import publish
from cpubuild.index import open_storage
from cpubuild.index.wheelfile import read_wheel
root, commit, *wheels = sys.argv[1:]
storage = open_storage(root)
for path in wheels:
    publish(storage, [read_wheel(Path(path))], commit=commit, channel="nightly")
    print("published", path, flush=True)
"""


def start_worker(root: str, commit: str, wheels: list[Path]) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=TOOLS)
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, root, commit, *map(str, wheels)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def synthetic_wheels(tmp: Path, worker: int, count: int) -> list[Path]:
    # distinct names on one page: one version per worker, one platform tag per wheel
    return [wheel(tmp / f"w{worker}", f"0.1.0.dev7+g777.cpu{worker}", f"py3-none-manylinux_2_{10 + i}_x86_64") for i in range(count)]


@pytest.mark.slow
def test_concurrent_publishers_lose_nothing(tmp_path: Path) -> None:
    root = tmp_path / "index"
    sets = [synthetic_wheels(tmp_path, w, 25) for w in range(8)]
    workers = [start_worker(str(root), COMMIT_A, s) for s in sets]
    for proc in workers:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    expected = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for s in sets for p in s}
    assert len(expected) == 200
    assert listed(root, f"{COMMIT_A}/cpu") == expected
    assert listed(root, "nightly/cpu") == expected


@pytest.mark.slow
def test_publishers_killed_midway_leave_a_valid_index(tmp_path: Path) -> None:
    root = tmp_path / "index"
    rng = random.Random(1234)
    sets = [synthetic_wheels(tmp_path, w, 12) for w in range(4)]
    # how long the publishers take here, so the kills land while they run on fast hosts too
    started = time.monotonic()
    for proc in [start_worker(str(tmp_path / "timing"), COMMIT_A, s) for s in sets]:
        proc.communicate(timeout=600)
    duration = time.monotonic() - started
    killed_running = 0
    for _ in range(4):
        workers = [start_worker(str(root), COMMIT_A, s) for s in sets]
        time.sleep(rng.uniform(0.15, 0.7) * duration)
        for proc in workers:
            if proc.poll() is None:
                killed_running += 1
                proc.send_signal(signal.SIGKILL)
            proc.communicate()
        for tree in (f"{COMMIT_A}/cpu", "nightly/cpu"):
            if (root / tree / "index.json").exists():
                report = verify_tree(LocalStorage(root), tree)
                assert report.problems == [], report.problems
    assert killed_running > 0, "no publisher was still running when killed: the test proved nothing"
    # the index (and its locks) still work: finishing every set lists everything
    for proc in [start_worker(str(root), COMMIT_A, s) for s in sets]:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    expected = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for s in sets for p in s}
    assert listed(root, f"{COMMIT_A}/cpu") == expected
    assert listed(root, "nightly/cpu") == expected


# ------------------------------------------------------------------ one upload time, unwritable destinations


def test_a_file_has_one_upload_time_on_every_page(tmp_path: Path) -> None:
    """Published to its commit first and to nightly in a later call: both pages give the time of the first."""
    root = tmp_path / "index"
    a = wheel(tmp_path / "a", "0.1.0.dev1+g111.cpu", "py3-none-manylinux_2_28_x86_64")
    assert cli("publish", str(a), "--to", str(root), "--commit", COMMIT_A).returncode == 0
    time.sleep(0.05)
    out = cli("publish", str(a), "--to", str(root), "--commit", COMMIT_A, "--channel", "nightly")
    assert out.returncode == 0, out.stderr

    def upload_time(tree: str) -> str:
        page = json.loads((root / tree / "cpu" / "cpukern" / "index.json").read_text())
        (entry,) = page["files"]
        return str(entry["upload-time"])

    assert upload_time("nightly") == upload_time(COMMIT_A)


@pytest.fixture(scope="module")
def world_readable() -> Iterator[Path]:
    """A folder every user can read, outside pytest's root-only temp tree."""
    base = Path(tempfile.mkdtemp(prefix="cpubuild-publish-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def nobody_cpubuild(world_readable: Path) -> list[str]:
    """cpubuild installed (not editable, as a user gets it) into a venv user `nobody` can run:
    the command line that runs it as nobody."""
    require(os.geteuid() == 0, "running a command as another user needs root")
    require_tool("setpriv", "uv")
    require(Path("/usr/bin/python3").is_file(), "no /usr/bin/python3 (this Python's home is root-only)")
    venv = world_readable / "venv"
    run(["uv", "venv", "-q", "-p", "/usr/bin/python3", str(venv)])
    run(["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(REPO / "tools"), str(REPO / "tools" / "cli")])
    run(["chmod", "-R", "a+rX", str(world_readable)])
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(venv / "bin" / "cpubuild")]


def _one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and "cannot write the index" in out.stderr, out.stderr
    return out.stderr


@pytest.mark.parametrize("case", ["path-under-a-file", "proc"])
def test_an_unwritable_destination_is_a_one_line_error(tmp_path: Path, case: str) -> None:
    a = wheel(tmp_path / "a", "0.1.0")
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a directory\n")
    dest = blocker / "index" if case == "path-under-a-file" else Path("/proc/cpubuild-index")
    _one_line_error(cli("publish", str(a), "--to", str(dest), "--commit", COMMIT_A, "--channel", "nightly"))
    assert blocker.read_bytes() == b"not a directory\n" and not Path("/proc/cpubuild-index").exists()


def test_an_index_of_another_user_is_a_one_line_error_and_stays_as_it_was(world_readable: Path,
                                                                         nobody_cpubuild: list[str]) -> None:
    root = world_readable / "index-owned-by-root"
    a = wheel(world_readable / "a", "0.1.0.dev1")
    b = wheel(world_readable / "b", "0.1.0.dev2")
    assert cli("publish", str(a), "--to", str(root), "--commit", COMMIT_A, "--channel", "nightly").returncode == 0
    run(["chmod", "-R", "a+rX", str(world_readable)])
    before = tree_hash(root)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    new = subprocess.run([*nobody_cpubuild, "publish", str(b), "--to", str(root), "--commit", COMMIT_B, "--channel", "nightly"],
                         capture_output=True, text=True, env=env, cwd=world_readable, timeout=300, check=False)
    assert "Permission denied" in _one_line_error(new)
    assert tree_hash(root) == before
    # The same bytes again, by a user who can only read the index: nothing to write, so no lock file is
    # needed either (the root publish's lock files are removed first, and none may come back).
    for lock in root.rglob(".cpubuild.lock"):
        lock.unlink()
    before = tree_hash(root)
    again = subprocess.run([*nobody_cpubuild, "publish", str(a), "--to", str(root), "--commit", COMMIT_A, "--channel", "nightly"],
                           capture_output=True, text=True, env=env, cwd=world_readable, timeout=300, check=False)
    assert again.returncode == 0, again.stderr
    assert "identical, nothing to do" in again.stdout
    assert tree_hash(root) == before and not list(root.rglob(".cpubuild.lock"))
