"""The index root as a boundary for `cpubuild publish`: links planted below
it (to directories and files outside, dangling ones for the lock) are refused
with one line and never followed; what lies outside stays byte-identical.
And crash consistency: publishers killed with SIGKILL at several points leave
temp files that the next publish removes, and every page verifies."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cpubuild.index.storage import TEMP_PREFIX, LocalStorage
from cpubuild.index.verify import root_leftovers, verify_tree
from cpubuild.index.wheelfile import write_wheel
from hostile import TOOLS, assert_one_line, cli, tree_hash

COMMIT = "6" * 40
OTHER = "7" * 40


def wheel(dest: Path, version: str = "1.0", payload: bytes = b"") -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    return write_wheel(dest, name="relp", version=version, files={"relp/__init__.py": b"# " + payload + b"\n"})


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(index root with one publish, an outside directory holding a file, a new wheel)."""
    root = tmp_path / "index"
    out = cli("publish", str(wheel(tmp_path / "w0")), "--to", str(root), "--commit", COMMIT, "--channel", "nightly")
    assert out.returncode == 0, out.stderr
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("keep me\n")
    return root, outside, wheel(tmp_path / "w1", "1.1")


def _link_commit_dir(root: Path, outside: Path) -> str:
    (root / OTHER).symlink_to(outside, target_is_directory=True)
    return OTHER


def _link_page_dir(root: Path, outside: Path) -> str:
    (root / OTHER).mkdir()
    (root / OTHER / "cpu").symlink_to(outside, target_is_directory=True)
    return f"{OTHER}/cpu"


def _link_nightly(root: Path, outside: Path) -> str:
    os.rename(root / "nightly", outside / "nightly-moved")
    (root / "nightly").symlink_to(outside / "nightly-moved", target_is_directory=True)
    return "nightly"


def _link_lock(root: Path, outside: Path) -> str:
    page = root / "nightly" / "cpu" / "relp"
    (page / ".cpubuild.lock").unlink(missing_ok=True)
    (page / ".cpubuild.lock").symlink_to(outside / "created-by-lock")  # dangling: following it would create the file
    return "nightly/cpu/relp/.cpubuild.lock"


def _link_page_file(root: Path, outside: Path) -> str:
    page = root / "nightly" / "cpu" / "relp" / "index.json"
    (outside / "index.json").write_bytes(page.read_bytes())
    page.unlink()
    page.symlink_to(outside / "index.json")
    return "nightly/cpu/relp/index.json"


def _link_wheel_name(root: Path, outside: Path) -> str:
    (root / OTHER).mkdir()
    (root / OTHER / "relp-1.1-py3-none-any.whl").symlink_to(outside / "secret.txt")
    return f"{OTHER}/relp-1.1-py3-none-any.whl"


def _link_metadata_name(root: Path, outside: Path) -> str:
    (root / OTHER).mkdir()
    (root / OTHER / "relp-1.1-py3-none-any.whl.metadata").symlink_to(outside / "none-yet")
    return f"{OTHER}/relp-1.1-py3-none-any.whl.metadata"


def _file_for_dir(root: Path, outside: Path) -> str:
    (root / OTHER).write_text("not a directory\n")
    return OTHER


def _link_etc(root: Path, outside: Path) -> str:
    (root / OTHER).mkdir()
    (root / OTHER / "cpu").symlink_to("/etc", target_is_directory=True)
    return f"{OTHER}/cpu"


PLANTS = {
    "commit-dir-link": (_link_commit_dir, "a symbolic link"),
    "page-dir-link": (_link_page_dir, "a symbolic link"),
    "nightly-link": (_link_nightly, "a symbolic link"),
    "lock-link-dangling": (_link_lock, "a symbolic link"),
    "page-file-link": (_link_page_file, "a symbolic link"),
    "wheel-name-link": (_link_wheel_name, "a symbolic link"),
    "metadata-name-link": (_link_metadata_name, "a symbolic link"),
    "file-where-dir-belongs": (_file_for_dir, "a file where a directory belongs"),
    "etc-link": (_link_etc, "a symbolic link"),
}


@pytest.mark.parametrize("case", sorted(PLANTS))
def test_publish_never_follows_a_link_below_the_root(case: str, setup: tuple[Path, Path, Path]) -> None:
    root, outside, new = setup
    plant, problem = PLANTS[case]
    culprit = plant(root, outside)
    before, before_outside = tree_hash(root), tree_hash(outside)
    out = cli("publish", str(new), "--to", str(root), "--commit", OTHER, "--channel", "nightly")
    assert_one_line(out, 2, str(root / culprit), problem)
    assert tree_hash(root) == before
    assert tree_hash(outside) == before_outside
    assert not (outside / "created-by-lock").exists()
    assert any(culprit in p for p in root_leftovers(LocalStorage(root))) or case == "file-where-dir-belongs"


def test_stale_temp_files_are_swept_by_age_and_lock(tmp_path: Path) -> None:
    root = tmp_path / "index"
    out = cli("publish", str(wheel(tmp_path / "w0")), "--to", str(root), "--commit", COMMIT)
    assert out.returncode == 0, out.stderr
    commit_dir = root / COMMIT
    old, young, held = (commit_dir / f"{TEMP_PREFIX}{n}-x.whl" for n in ("old", "young", "held"))
    for path in (old, young, held):
        path.write_bytes(b"partial")
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    os.utime(held, (hour_ago, hour_ago))
    with open(held, "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a live writer (on another host, say) holds it
        problems = root_leftovers(LocalStorage(root))
        assert len([p for p in problems if "temp file" in p]) == 3
        out = cli("publish", str(wheel(tmp_path / "w1", "1.1")), "--to", str(root), "--commit", COMMIT)
        assert out.returncode == 0, out.stderr
        assert not old.exists()
        assert young.exists() and held.exists()
    young.unlink()
    held.unlink()
    assert root_leftovers(LocalStorage(root)) == []


def test_a_writer_killed_holding_its_temp_file_leaves_it_to_the_next_publish(tmp_path: Path) -> None:
    """SIGKILL at a known point: the temp file written and locked, not yet linked."""
    root = tmp_path / "index"
    assert cli("publish", str(wheel(tmp_path / "w0")), "--to", str(root), "--commit", COMMIT).returncode == 0
    script = (
        "import os, signal, sys; from pathlib import Path; from cpubuild.index.storage import LocalStorage\n"
        "s = LocalStorage(Path(sys.argv[1])); fd = s._open_dir([sys.argv[2]], create=True)\n"
        "with s._temp(fd, 'relp-9.9-py3-none-any.whl', b'x' * 100000):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(root), COMMIT], env=dict(os.environ, PYTHONPATH=TOOLS),
                          timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL
    left = list((root / COMMIT).glob(f"{TEMP_PREFIX}*"))
    assert len(left) == 1
    assert any("temp file" in p for p in root_leftovers(LocalStorage(root)))
    assert cli("publish", str(wheel(tmp_path / "w1", "1.1")), "--to", str(root), "--commit", COMMIT).returncode == 0
    assert not left[0].exists()
    assert root_leftovers(LocalStorage(root)) == []


def test_the_verifier_repairs_leftovers_and_reports_links(tmp_path: Path) -> None:
    root = tmp_path / "index"
    assert cli("publish", str(wheel(tmp_path / "w0")), "--to", str(root), "--commit", COMMIT).returncode == 0
    stale = root / COMMIT / f"{TEMP_PREFIX}old-x.whl"
    stale.write_bytes(b"partial")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    (root / "etc_link").symlink_to("/etc")
    assert len(root_leftovers(LocalStorage(root))) == 2
    assert root_leftovers(LocalStorage(root), repair=True) == ["etc_link: a symbolic link below the index root"]
    assert not stale.exists()


def _publish_proc(wheels: list[Path], root: Path, commit: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])",
         "publish", *map(str, wheels), "--to", str(root), "--commit", commit, "--channel", "nightly", "-q"],
        env=dict(os.environ, PYTHONPATH=TOOLS), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_sigkill_during_a_20_wheel_publish_leaves_nothing_the_next_publish_keeps(tmp_path: Path) -> None:
    rng = random.Random(21)
    wheels = []
    for i in range(20):  # distinct projects, some weight each, so a kill lands mid-write
        d = tmp_path / "wheels"
        d.mkdir(exist_ok=True)
        wheels.append(write_wheel(d, name=f"relp{i}", version="1.0", tag="py3-none-any",
                                  files={f"relp{i}/data.bin": rng.randbytes(400_000)}))
    root = tmp_path / "index"
    start = time.monotonic()
    first = _publish_proc(wheels[:2], root, COMMIT)
    assert first.wait(timeout=120) == 0
    span = max(0.3, (time.monotonic() - start) * 6)
    killed_running = 0
    leftovers_seen = 0
    for attempt in range(6):  # bounded: six kills at spread-out points
        proc = _publish_proc(wheels, root, COMMIT)
        time.sleep(span * (attempt + rng.random()) / 6)
        if proc.poll() is None:
            killed_running += 1
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=120)
        leftovers_seen += len([p for p in root_leftovers(LocalStorage(root)) if "temp file" in p])
        for tree in (f"{COMMIT}/cpu", "nightly/cpu"):
            if (root / tree / "index.json").exists():
                assert verify_tree(LocalStorage(root), tree).problems == []
    assert killed_running > 0, "no publisher was running when killed: the test proved nothing"
    final = _publish_proc(wheels, root, COMMIT)
    assert final.wait(timeout=300) == 0
    assert list(root.rglob(f"{TEMP_PREFIX}*")) == []
    assert root_leftovers(LocalStorage(root)) == []
    for tree in (f"{COMMIT}/cpu", "nightly/cpu"):
        report = verify_tree(LocalStorage(root), tree)
        assert report.problems == []
        assert len(report.files) == 20
    print(f"kills while running: {killed_running}/6, temp files left by kills: {leftovers_seen}")
