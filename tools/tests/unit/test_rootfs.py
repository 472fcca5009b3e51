"""Pure parts of the emulated test runner: rootfs specs and stamps, wheel
unpacking, the emulator command line, and `cpubuild test`'s parsers."""

from __future__ import annotations

import json
import signal
import zipfile
from pathlib import Path

import pytest
from cpubuild.emulate.rootfs import (
    STAMP,
    TEST_PACKAGES,
    Emulator,
    RootfsSpec,
    debootstrap_command,
    installed_wheel,
    is_ready,
    unpack_wheel,
)
from cpubuild.emulate.testrun import base_model, last_json, parse_model_list, signal_name, wheel_arch
from cpubuild.errors import UsageError
from cpubuild.matrix import load_matrix
from testsupport import CPUKERN_MATRIX

MATRIX = load_matrix(CPUKERN_MATRIX)


def spec_for(arch: str, **kw: object) -> RootfsSpec:
    return RootfsSpec.for_arch(MATRIX.arches[arch], mirror="http://mirror.example/debian", **kw)


def test_debootstrap_command_comes_from_the_matrix_arch() -> None:
    cmd = debootstrap_command(spec_for("aarch64"), Path("/x/tree"))
    assert cmd[:3] == ["debootstrap", "--arch=arm64", "--variant=minbase"]
    assert cmd[3] == "--include=" + ",".join(sorted(TEST_PACKAGES))
    assert cmd[4:] == ["bookworm", "/x/tree", "http://mirror.example/debian"]
    assert debootstrap_command(spec_for("s390x"), Path("/t"))[1] == "--arch=s390x"


def test_spec_names_separate_flavours() -> None:
    assert spec_for("aarch64").name == "aarch64"
    assert spec_for("aarch64", flavor="gxx", packages=("g++",)).name == "aarch64-gxx"


def test_stamp_decides_reuse(tmp_path: Path) -> None:
    spec = spec_for("s390x")
    assert not is_ready(spec, tmp_path)  # no stamp: not a finished tree
    (tmp_path / STAMP).write_text(json.dumps(spec.stamp()))
    assert is_ready(spec, tmp_path)
    # any mirror of the suite makes the same tree
    other_mirror = RootfsSpec(arch="s390x", debian_arch="s390x", qemu="s390x", mirror="http://other/debian")
    assert is_ready(other_mirror, tmp_path)
    # other packages or another suite: stale, rebuilt
    assert not is_ready(spec_for("s390x", packages=("python3",)), tmp_path)
    assert not is_ready(spec_for("s390x", suite="trixie"), tmp_path)
    (tmp_path / STAMP).write_text("{broken")
    assert not is_ready(spec, tmp_path)


def test_unpack_maps_data_dirs_and_refuses_escapes(tmp_path: Path) -> None:
    """purelib/platlib of <dist>.data land at the root; other schemes are left out."""
    names = [
        "cpukern/__init__.py",
        "cpukern/",
        "cpukern-1.0.dist-info/RECORD",
        "cpukern-1.0.data/platlib/cpukern/_cpukern_neon.so",
        "cpukern-1.0.data/purelib/extra.py",
        "cpukern-1.0.data/scripts/tool",
    ]
    wheel = tmp_path / "cpukern-1.0-py3-none-linux_aarch64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in names:
            z.writestr(name, "")
    assert unpack_wheel(wheel, tmp_path / "site") == [
        "cpukern-1.0.dist-info/RECORD", "cpukern/__init__.py", "cpukern/_cpukern_neon.so", "extra.py",
    ]
    assert not (tmp_path / "site/tool").exists() and not (tmp_path / "site/cpukern-1.0.data").exists()
    for i, bad in enumerate(("../evil.py", "/etc/passwd", "cpukern/../../x")):
        hostile = tmp_path / f"evil{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(hostile, "w") as z:
            z.writestr(bad, "")
        with pytest.raises(UsageError, match="escapes"):
            unpack_wheel(hostile, tmp_path / f"site{i}")
    assert not (tmp_path / "evil.py").exists()


def make_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "VALUE = 42\n")
        info = zipfile.ZipInfo("pkg/_lib.so")
        info.external_attr = 0o755 << 16
        z.writestr(info, b"\x7fELF")
        z.writestr("pkg-1.0.dist-info/METADATA", "Name: pkg\n")
    return path


def test_unpack_wheel_keeps_modes(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "pkg-1.0-py3-none-linux_aarch64.whl")
    files = unpack_wheel(wheel, tmp_path / "site")
    assert files == ["pkg-1.0.dist-info/METADATA", "pkg/__init__.py", "pkg/_lib.so"]
    assert (tmp_path / "site/pkg/__init__.py").read_text() == "VALUE = 42\n"
    assert (tmp_path / "site/pkg/_lib.so").stat().st_mode & 0o777 == 0o755


def test_unpack_rejects_a_non_zip(tmp_path: Path) -> None:
    bogus = tmp_path / "x-1.0-py3-none-any.whl"
    bogus.write_text("not a zip")
    with pytest.raises(UsageError, match="not a readable wheel"):
        unpack_wheel(bogus, tmp_path / "site")


def test_installed_wheel_inside_a_root_is_removed_after_the_run(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "pkg-1.0-py3-none-linux_s390x.whl")
    root = tmp_path / "root"
    root.mkdir()
    with installed_wheel(wheel, root) as site:
        assert site.startswith("/opt/cpubuild-run/")  # the path as the chrooted Python sees it
        assert (root / site.lstrip("/") / "pkg/__init__.py").is_file()
    assert list((root / "opt/cpubuild-run").iterdir()) == []


def test_emulator_command_and_environment() -> None:
    chrooted = Emulator(qemu="aarch64", cpu="cortex-a53", root=Path("/cache/rootfs/aarch64"))
    cmd = chrooted.command(["-m", "cpukern"], host_python="/usr/bin/python3")
    assert cmd[0].endswith("chroot") and cmd[1:] == ["/cache/rootfs/aarch64", "/usr/bin/python3", "-m", "cpukern"]
    env = chrooted.environment("/opt/cpubuild-run/x/site", {"CPUKERN_ISA": "neon"})
    assert env["QEMU_CPU"] == "cortex-a53" and env["PYTHONPATH"] == "/opt/cpubuild-run/x/site"
    assert env["CPUKERN_ISA"] == "neon"
    host = Emulator(qemu="x86_64", cpu="Haswell", root=None)
    cmd = host.command(["-c", "pass"], host_python="/py")
    assert cmd[0].endswith(("qemu-x86_64-static", "qemu-x86_64")) and cmd[1:] == ["-cpu", "Haswell", "/py", "-c", "pass"]
    assert "QEMU_CPU" not in host.environment("/site")


@pytest.mark.parametrize(
    ("name", "arch"),
    [
        ("cpukern-0.1.0+cpu-py3-none-manylinux_2_27_aarch64.whl", "aarch64"),
        ("cpukern-0.1.0+cpu-py3-none-manylinux_2_17_s390x.manylinux2014_s390x.whl", "s390x"),
        ("cpukern-0.1.0+cpu.avx2-py3-none-linux_x86_64.whl", "x86_64"),
        ("cpukern-0.1.0+cpu-py3-none-macosx_11_0_arm64.whl", "aarch64"),
    ],
)
def test_wheel_arch(name: str, arch: str) -> None:
    assert wheel_arch(Path(name)) == arch


@pytest.mark.parametrize("name", ["cpukern-0.1.0-py3-none-any.whl", "notawheel.whl", "cpukern-0.1.0-py3-none-win_amd64.whl"])
def test_wheel_arch_rejects(name: str) -> None:
    with pytest.raises(UsageError):
        wheel_arch(Path(name))


def test_parse_model_list_handles_each_layout() -> None:
    arm = "Available CPUs:\n  cortex-a53\n  max\n  neoverse-n1\n"
    assert parse_model_list(arm) == ["cortex-a53", "max", "neoverse-n1"]
    x86 = ("Available CPUs:\nx86 Haswell               (alias configured by machine type)\n"
           "x86 SandyBridge-v1        Intel Xeon E312xx (Sandy Bridge)\n\n"
           "Recognized CPUID flags:\n  avx avx2 fma\n  xsave\n")
    assert parse_model_list(x86) == ["Haswell", "SandyBridge-v1"]
    s390 = "s390 max             Enables all features\ns390 z14             IBM z14 GA1\n\nRecognized feature flags:\nvxeh   Vector enhancements facility 1\n"
    assert parse_model_list(s390) == ["max", "z14"]


def test_base_model_drops_properties() -> None:
    assert base_model("max,vxeh=off") == "max"
    assert base_model("cortex-a53") == "cortex-a53"


def test_signal_name() -> None:
    assert signal_name(-int(signal.SIGILL)) == "SIGILL"
    assert signal_name(128 + int(signal.SIGSEGV)) == "SIGSEGV"
    assert signal_name(0) is None and signal_name(1) is None


def test_last_json_finds_the_object_after_noise() -> None:
    assert last_json('qemu: warning\n{"selected": "neon"}\n') == {"selected": "neon"}
    assert last_json("no json here") is None
    assert last_json("[1, 2]") is None


def test_find_wheel_picks_the_newest_of_the_arch_and_project(tmp_path: Path) -> None:
    import os

    from cpubuild.emulate.testrun import find_wheel

    old = tmp_path / "cpukern-0.1.0+cpu-py3-none-manylinux_2_27_aarch64.whl"
    new = tmp_path / "cpukern-0.2.0+cpu-py3-none-manylinux_2_27_aarch64.whl"
    other = tmp_path / "cpukern-0.3.0+cpu-py3-none-manylinux_2_27_s390x.whl"
    foreign = tmp_path / "dotlib-9.0.0+cpu-py3-none-manylinux_2_27_aarch64.whl"  # another project's, newest
    for i, path in enumerate((old, new, other, foreign)):
        path.write_bytes(b"")
        os.utime(path, (1000 + i, 1000 + i))
    assert find_wheel("aarch64", tmp_path, "cpukern") == new
    assert find_wheel("s390x", tmp_path, "cpukern") == other
    assert find_wheel("aarch64", tmp_path, "dotlib") == foreign
    with pytest.raises(UsageError, match="no cpukern wheel for x86_64"):
        find_wheel("x86_64", tmp_path, "cpukern")
    with pytest.raises(UsageError, match="no dotlib wheel for s390x"):
        find_wheel("s390x", tmp_path, "dotlib")


def test_install_tree_swaps_in_a_finished_tree_without_apt_downloads(tmp_path: Path) -> None:
    from cpubuild.emulate.rootfs import install_tree

    root = tmp_path / "arm64"
    for attempt in ("first", "second"):
        tmp = tmp_path / f".tmp-{attempt}"
        (tmp / "var/cache/apt/archives").mkdir(parents=True)
        (tmp / "var/cache/apt/archives/big.deb").write_bytes(b"x" * 10)
        (tmp / "marker").write_text(attempt)
        install_tree(tmp, root, stamp=(".stamp.json", {"attempt": attempt}))
        assert not tmp.exists() and (root / "marker").read_text() == attempt  # a stale tree is replaced
        assert json.loads((root / ".stamp.json").read_text()) == {"attempt": attempt}
        assert list((root / "var/cache/apt/archives").iterdir()) == [root / "var/cache/apt/archives/partial"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arm64"]  # nothing stale left behind
