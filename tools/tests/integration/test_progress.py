"""No silent minutes (cpubuild.progress): long steps print what they do and the elapsed
time, and a wait for another process's lock says so.

The lock case runs two real processes: one holds the rootfs lock and then
finishes the tree, the other calls ensure_rootfs and has to wait. The cold case
(slow) makes a real root filesystem with debootstrap into a temporary cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cpubuild.emulate.rootfs import STAMP, RootfsSpec
from cpubuild.progress import elapsed_text, interval_s
from testsupport import REPO, require, require_tool, run

# a native tree (no qemu binfmt handler needed); its own flavour, so no real cache is touched
SPEC = RootfsSpec(arch="x86_64", debian_arch="amd64", qemu="x86_64", packages=("python3",), flavor="progresstest")
SPEC_ARGS = "arch='x86_64', debian_arch='amd64', qemu='x86_64', packages=('python3',), flavor='progresstest'"
ENSURE = f"""
import sys
from pathlib import Path
from cpubuild.emulate.rootfs import RootfsSpec, ensure_rootfs
print(ensure_rootfs(RootfsSpec({SPEC_ARGS}), cache=Path(sys.argv[1])))
"""


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "tools"), **extra}


def test_elapsed_text_and_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    assert elapsed_text(8.24) == "8.2 s"
    assert elapsed_text(185) == "3 min 05 s"
    monkeypatch.setenv("CPUBUILD_PROGRESS_INTERVAL", "0.5")
    assert interval_s() == 0.5
    for bad in ("x", "-1", "0"):
        monkeypatch.setenv("CPUBUILD_PROGRESS_INTERVAL", bad)
        assert interval_s() == 12.0


def test_a_step_prints_start_periodic_and_end_lines_off_a_terminal() -> None:
    code = ("import time; from cpubuild.progress import step\n"
            "with step('unpacking things'):\n    time.sleep(1.6)\n"
            "try:\n    with step('failing things'):\n        raise SystemExit(3)\nexcept SystemExit:\n    pass\n")
    proc = run([sys.executable, "-c", code], env=env(CPUBUILD_PROGRESS_INTERVAL="0.5"))
    lines = proc.stderr.splitlines()
    assert proc.stdout == ""  # stdout stays for results and --json
    assert lines[0] == "unpacking things ..."
    assert any(line.startswith("unpacking things ... ") and line.endswith(" s") for line in lines[1:-2])
    assert lines[-3].startswith("unpacking things: done in ")
    assert lines[-2:] == ["failing things ...", lines[-1]] and lines[-1].startswith("failing things: failed after ")


def test_image_build_steps_get_a_heartbeat_in_a_log() -> None:
    """Off a terminal a long image build step prints `label ... N s` until it finishes; a step
    that never finishes (a failed build) stops ticking when the build's live display ends."""
    code = ("import time\nfrom rich.console import Console\nfrom cpubuild.docker.buildlog import Step\n"
            "from cpubuild.docker.progress import ConsoleProgress\n"
            "p = ConsoleProgress(Console(stderr=True), prefix='[x86_64] ')\n"
            "s = Step(number=1, total=2, instruction='RUN apt-get install', stage='build')\n"
            "with p.live('image'):\n    p.step_started(s); time.sleep(1.3); p.step_finished(s)\n"
            "    p.step_started(s); time.sleep(0.7)\ntime.sleep(2.5)\n")
    lines = run([sys.executable, "-c", code], env=env(CPUBUILD_PROGRESS_INTERVAL="0.5")).stderr.splitlines()
    label = "[x86_64] [build 1/2] RUN apt-get install"
    assert lines[0].startswith(f"{label} ... ") and lines[0].endswith(" s")
    finished = next(i for i, line in enumerate(lines) if line.endswith("  [build 1/2] RUN apt-get install"))
    assert all(line.startswith(f"{label} ... ") for line in lines[:finished])
    assert len(lines) - finished - 1 <= 2  # the unfinished step ticked in 0.7 s, not in the 2.5 s after the display ended


def test_waiting_for_another_process_s_rootfs_lock(tmp_path: Path) -> None:
    """A second ensure_rootfs waits for the first's lock, says so with the elapsed time, then uses its tree."""
    require(os.geteuid() == 0, "ensure_rootfs needs root (debootstrap, chroot)")
    require_tool("debootstrap")
    base = tmp_path / "rootfs"
    base.mkdir()
    holder_code = f"""
import fcntl, json, sys, time
from pathlib import Path
base = Path(sys.argv[1])
with open(base / "{SPEC.name}.lock", "a") as handle:
    fcntl.flock(handle, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(3)
    (base / "{SPEC.name}").mkdir()
    (base / "{SPEC.name}" / "{STAMP}").write_text(json.dumps({json.dumps(SPEC.stamp())}))
"""
    holder = subprocess.Popen([sys.executable, "-c", holder_code, str(base)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        waiter = run([sys.executable, "-c", ENSURE, str(tmp_path)], env=env(CPUBUILD_PROGRESS_INTERVAL="1"),
                     timeout=120)
        waited = time.monotonic() - started
    finally:
        holder.wait(timeout=60)
    assert waiter.stdout.strip() == str(base / SPEC.name)  # the holder's tree, not a second debootstrap
    lines = waiter.stderr.splitlines()
    what = f"waiting for another process's lock on {base / (SPEC.name + '.lock')} (the {SPEC.name} rootfs)"
    assert lines[0] == f"{what} ...", waiter.stderr
    assert any(line.startswith(f"{what} ... ") for line in lines[1:]), waiter.stderr
    assert lines[-1].startswith(f"{what}: done in "), waiter.stderr
    assert waited >= 1  # it did wait for the holder (a fact of the setup, not a speed)
    assert "debootstrap" not in waiter.stdout + waiter.stderr


@pytest.mark.slow
def test_cold_rootfs_build_shows_progress(tmp_path: Path) -> None:
    """A real debootstrap into an empty cache: the step line, periodic elapsed lines, the end line."""
    require(os.geteuid() == 0, "ensure_rootfs needs root (debootstrap, chroot)")
    require_tool("debootstrap")
    proc = run([sys.executable, "-c", ENSURE, str(tmp_path)], env=env(CPUBUILD_PROGRESS_INTERVAL="5"), timeout=1200)
    root = Path(proc.stdout.strip().splitlines()[-1])
    assert (root / STAMP).is_file() and (root / "usr" / "bin" / "python3").exists()
    what = "rootfs: debootstrap bookworm amd64 (1 packages)"
    lines = proc.stderr.splitlines()
    assert f"{what} ..." in lines, proc.stderr
    assert any(line.startswith(f"{what} ... ") and line.endswith(" s") for line in lines), proc.stderr
    assert any(line.startswith(f"{what}: done in ") for line in lines), proc.stderr
