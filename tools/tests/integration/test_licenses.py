"""Licences, PEP 639 style: cpubuild, cpukern and every `cpubuild init` project
declare `license = "<SPDX>"` with `license-files`, and their wheels and sdists
carry the text and the License-Expression / License-File metadata.

A cpukern-style wheel (built by cpubuild through scikit-build-core) is checked
in tools/tests/integration/test_wheel_build.py (the session's subset wheel) and
tools/tests/integration/test_installed_cli.py (a fresh init project's wheel).
"""

from __future__ import annotations

import email
import os
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import tomllib
from public_cpubuild import UV, PublicCpubuild, clean_env, public_cpubuild  # noqa: F401 (a fixture)
from testsupport import REPO, run


def init(tmp_path: Path, *args: str, check: bool = True) -> Path:
    out = tmp_path / "proj"
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", "init", str(out),
           "--name", "lic-demo", "-q", *args]
    proc = run(cmd, env={**os.environ, "PYTHONPATH": str(REPO / "tools")}, cwd=tmp_path, check=check, timeout=120)
    assert check or proc.returncode == 2, proc.stdout + proc.stderr
    return out


def wheel_licence(wheel: Path) -> tuple[email.message.Message, dict[str, bytes]]:
    """METADATA and the .dist-info/licenses/ files of a wheel."""
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        files = {n.split("/licenses/", 1)[1]: z.read(n) for n in z.namelist() if ".dist-info/licenses/" in n}
        return email.message_from_bytes(z.read(meta)), files


def assert_wheel_carries(wheel: Path, expression: str = "Apache-2.0") -> None:
    """For other test files: License-Expression, License-File and the text in .dist-info/licenses/."""
    meta, files = wheel_licence(wheel)
    assert meta["License-Expression"] == expression, dict(meta)
    assert meta.get_all("License-File") == ["LICENSE"]
    assert files["LICENSE"].strip(), "empty LICENSE"
    if expression == "Apache-2.0":
        assert b"Apache License" in files["LICENSE"]


def test_repository_and_cpubuild_declare_apache_with_the_file() -> None:
    for pyproject in (REPO / "pyproject.toml", REPO / "tools" / "pyproject.toml", REPO / "tools" / "cli" / "pyproject.toml"):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        assert project["license"] == "Apache-2.0", pyproject
        assert project["license-files"] == ["LICENSE"], pyproject
        assert (pyproject.parent / "LICENSE").read_bytes() == (REPO / "LICENSE").read_bytes()
    assert (REPO / "LICENSE").read_text(encoding="utf-8").strip().startswith("Apache License")


@pytest.mark.parametrize(("args", "expression", "text"), [
    ((), "Apache-2.0", "Apache License"),
    (("--license", "mit"), "MIT", "Copyright (c) "),
    (("--kind", "torch", "--license", "MIT"), "MIT", "The lic-demo authors"),
])
def test_init_writes_the_licence_and_declares_it(tmp_path: Path, args: tuple[str, ...], expression: str, text: str) -> None:
    project = init(tmp_path, *args)
    declared = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert declared["license"] == expression
    assert declared["license-files"] == ["LICENSE"]
    assert text in (project / "LICENSE").read_text(encoding="utf-8")


def test_init_with_an_id_it_has_no_text_for_declares_it_only(tmp_path: Path) -> None:
    project = init(tmp_path, "--license", "bsd-3-clause OR mit")
    declared = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert declared["license"] == "BSD-3-Clause OR MIT"
    assert "license-files" not in declared
    assert not (project / "LICENSE").exists()


def test_init_refuses_a_non_spdx_licence(tmp_path: Path) -> None:
    init(tmp_path, "--license", "my own licence", check=False)
    assert not (tmp_path / "proj").exists()


@pytest.mark.parametrize("folder", ["tools", "tools/cli"])  # cpubuild-core and cpubuild
def test_cpubuild_wheel_and_sdist_carry_the_licence(public_cpubuild: PublicCpubuild, tmp_path: Path,  # noqa: F811
                                                    folder: str) -> None:
    for wheel in public_cpubuild.wheels:
        assert_wheel_carries(wheel)
    source = tmp_path / "tools"
    shutil.copytree(REPO / "tools", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.pyc"))
    run([*UV, "build", "-q", "--sdist", "--out-dir", str(tmp_path / "dist"), str(tmp_path / folder)], env=clean_env(),
        cwd=tmp_path, timeout=600)
    (sdist,) = (tmp_path / "dist").glob("cpubuild*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
        (pkg_info,) = [m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")]
        handle = tar.extractfile(pkg_info)
        assert handle is not None
        meta = email.message_from_bytes(handle.read())
    assert "LICENSE" in names
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
