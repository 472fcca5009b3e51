"""tools/cpubuild/emulate/bochs.py without booting anything: the initramfs archive
format, the guest's /init and how its serial output is read back."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cpubuild.emulate import bochs
from cpubuild.errors import ToolMissingError, UsageError
from testsupport import require_tool


def test_cpio_is_read_by_gnu_cpio(tmp_path: Path) -> None:
    require_tool("cpio")
    tree = tmp_path / "tree"
    (tree / "usr/share/doc").mkdir(parents=True)
    (tree / "usr/share/doc/big").write_text("pruned")
    (tree / "usr/bin").mkdir()
    (tree / "usr/bin/tool").write_bytes(b"#!/bin/sh\n")
    (tree / "usr/bin/tool").chmod(0o755)
    (tree / "bin").symlink_to("usr/bin")
    buf = io.BytesIO()
    writer = bochs.CpioWriter(buf)
    writer.tree(tree, skip=("usr/share/doc",))
    writer.file("init", b"#!/bin/sh\necho hi\n", 0o755)
    writer.char_device("dev/console", 5, 1)
    writer.close()
    assert len(buf.getvalue()) % 4 == 0
    listing = subprocess.run(["cpio", "-itv"], input=buf.getvalue(), capture_output=True, check=True).stdout.decode()
    names = {line.split()[-1] if "->" not in line else line.split()[-3] for line in listing.splitlines()}
    assert {"usr", "usr/bin", "usr/bin/tool", "bin", "init", "dev/console", "usr/share"} <= names
    assert "usr/share/doc" not in names and "usr/share/doc/big" not in names
    assert "bin -> usr/bin" in listing


def test_init_runs_each_command_between_markers() -> None:
    script = bochs.init_script([bochs.GuestCommand(name="forced", argv=("python3", "-m", "cpukern"),
                                                   env={"CPUKERN_ISA": "avx512bf16"})])
    assert script.startswith("#!/bin/sh\n")
    assert "run forced env CPUKERN_ISA=avx512bf16 python3 -m cpukern\n" in script
    assert "echo o > /proc/sysrq-trigger" in script


def test_serial_output_is_split_by_command() -> None:
    serial = (
        "[    1.0] kernel noise\r\n@@cpubuild booted\r\n@@cpubuild begin report\r\n{\"a\": 1}\r\n\r\n"
        "@@cpubuild stderr report\r\n\r\n@@cpubuild end report 0\r\n"
        "@@cpubuild begin forced\r\n\r\n@@cpubuild stderr forced\r\nerror: no\r\n\r\n@@cpubuild end forced 1\r\n"
        "@@cpubuild done\r\n"
    )
    results = bochs.parse_serial(serial)
    assert results["report"] == bochs.GuestResult(name="report", returncode=0, stdout='{"a": 1}', stderr="")
    assert results["forced"].returncode == 1 and results["forced"].stderr == "error: no"


def test_missing_tools_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find = bochs.find_tool
    monkeypatch.setattr(bochs, "find_tool", lambda name: None if name == "bochs-bin" else real_find(name))
    with pytest.raises(ToolMissingError) as info:
        bochs.check_tools()
    assert "bochs-bin" in info.value.message
    assert "apt-get install bochs" in (info.value.detail or "")


def test_unknown_model_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown Bochs CPU model"):
        bochs.run_wheel(tmp_path / "x.whl", [], model="pentium")


def tiny_wheel(path: Path, arch: str) -> Path:
    """A wheel holding only a schema-2 manifest: what `cpubuild test` reads before running anything."""
    manifest = {"schema": 2, "package": "cpukern", "env_prefix": "CPUKERN", "selftest": None, "arch": arch,
                "variants": [{"name": "baseline", "priority": 0, "requires": [], "built": True}]}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("cpukern/_manifest.json", json.dumps(manifest))
    return path


def test_cli_bochs_model_errors_exit_2(tmp_path: Path) -> None:
    """`cpubuild test --cpu bochs:MODEL`: an unknown model or a non-x86_64 arch is bad input."""
    wheel = tiny_wheel(tmp_path / "cpukern-0.1.0-py3-none-manylinux_2_27_x86_64.whl", "x86_64")
    tools = Path(__file__).resolve().parents[3] / "tools"
    base = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", "test"]
    env = {"PYTHONPATH": str(tools), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([*base, "--arch", "x86_64", "--cpu", "bochs:pentium", str(wheel)], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "unknown Bochs CPU model 'pentium'" in proc.stderr, proc.stderr
    arm = tiny_wheel(tmp_path / "cpukern-0.1.0-py3-none-manylinux_2_27_aarch64.whl", "aarch64")
    proc = subprocess.run([*base, "--arch", "aarch64", "--cpu", "bochs:tigerlake", str(arm)], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "Bochs emulates x86_64 only" in proc.stderr, proc.stderr
