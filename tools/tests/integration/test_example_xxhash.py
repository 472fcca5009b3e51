"""examples/xxhash-variants: a third-party C library (xxHash) brought into a project.

Through cpubuild's public path (tools/tests/public_cpubuild.py): a copy of the example
fetches xxHash from its registry sdist (pinned by sha256, never committed), a
build without it stops with one clear line, the wheel holds every variant and
both licence texts (PEP 639), and installed in a fresh venv with the `xxhash`
package as reference its own tests pass (equal hashes in every variant, each
variant on its own XXH_VECTOR path) and the dispatcher picks the oracle's variant.
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from cpubuild.matrix import load_matrix
from oracle import ARCH, oracle_ranking
from public_cpubuild import PublicCpubuild, clean_env, fresh_venv, public_cpubuild  # noqa: F401 (a fixture)
from testsupport import REPO, nested_pytest, require, require_tool, run

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "xxhash-variants"
LICENSES = ("LICENSE", "third_party/xxhash/LICENSE")


def test_xxhash_example_fetch_build_licences_and_equal_results(public_cpubuild: PublicCpubuild,  # noqa: F811
                                                                tmp_path: Path) -> None:
    require_tool("cmake")
    project = tmp_path / "xxhash-variants"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("third_party", "wheelhouse", "build", "__pycache__"))

    missing = public_cpubuild.cli("wheel", "--project", str(project), "--build-root", str(tmp_path / "build0"),
                                  cwd=tmp_path, check=False)
    assert missing.returncode != 0
    lines = [line for line in missing.stderr.splitlines() if line.startswith("error:")]
    assert lines == [f"error: {project / 'pyproject.toml'}: [project] license-files: 'third_party/xxhash/LICENSE' "
                     "matches no file (a vendored library's licence comes with its sources: fetch them first)"]
    assert "Traceback" not in missing.stdout + missing.stderr

    fetched = run([sys.executable, str(project / "fetch_xxhash.py")], cwd=tmp_path, check=False, timeout=600)
    require(fetched.returncode == 0, f"the package registry did not give the pinned xxhash sdist: {fetched.stderr.strip()}")
    assert fetched.stdout.strip() == str(project / "third_party" / "xxhash")

    _, summary = public_cpubuild.json("wheel", "--project", str(project), "--build-root", str(tmp_path / "build"),
                                      cwd=tmp_path)
    assert summary["ok"], summary
    matrix = load_matrix(project / "isa_matrix.toml")
    assert sorted(summary["wheel"]["variants"]) == sorted(v.name for v in matrix.variants_for(ARCH))
    wheel = Path(summary["wheel"]["path"])

    with zipfile.ZipFile(wheel) as archive:
        dist_info = next(n.split("/")[0] for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{dist_info}/METADATA").decode()
        for rel in LICENSES:
            assert archive.read(f"{dist_info}/licenses/{rel}") == (project / rel).read_bytes(), rel
    assert "License-Expression: Apache-2.0 AND BSD-2-Clause" in metadata.splitlines()
    assert [line for line in metadata.splitlines() if line.startswith("License-File:")] == [
        f"License-File: {rel}" for rel in LICENSES]

    python = fresh_venv(tmp_path / "venv", str(wheel), "pytest", "xxhash==4.1.0")
    env = clean_env()
    tests = nested_pytest(python, project, env=env)
    assert " passed" in tests.stdout and "failed" not in tests.stdout
    report = json.loads(run([str(python), "-m", "xxhash_variants", "--json"], cwd=tmp_path, env=env).stdout)
    assert report["selected"] == oracle_ranking(matrix, summary["wheel"]["variants"])[0]
    selftest = json.loads(run([str(python), "-m", "xxhash_variants.selftest", "--json"], cwd=tmp_path, env=env).stdout)
    assert selftest["failed"] == 0 and selftest["passed"] > 0
