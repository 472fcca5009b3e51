"""Projects that break the contract, and other user mistakes, through the public
cpubuild (installed from tools/ into a fresh venv): each is one error line
naming the file and the fix, exit 2, and nothing half-written. Plus the
behaviours of `cpubuild wheel` a new project meets first: a compile error
named by its variant, wheels written with the umask's permissions, the
release workflow rendered for a project in a sub-directory."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cpubuild.matrix import load_matrix
from public_cpubuild import PublicCpubuild, public_cpubuild  # noqa: F401 - the fixture
from testsupport import REPO, require_tool, run

DOTLIB = REPO / "examples" / "dotlib"


def project_copy(tmp_path: Path, name: str = "proj") -> Path:
    """examples/dotlib as a git repository of its own (the version comes from git)."""
    root = tmp_path / name
    shutil.copytree(DOTLIB, root, ignore=shutil.ignore_patterns("build", "wheelhouse", "__pycache__"))
    run(["git", "init", "-q", str(root)])
    run(["git", "-C", str(root), "add", "-A"])
    run(["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"])
    return root


def one_line_error(proc: subprocess.CompletedProcess[str], exit_code: int, *words: str) -> str:
    assert proc.returncode == exit_code, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    return lines[0]


@pytest.mark.parametrize("command", [["wheel"], ["matrix"], ["doctor"], ["test", "--arch", "x86_64", "--cpu", "Haswell"],
                                     ["image", "--bake", "x.json"], ["bench"], ["ci"], ["develop", "--precompiled", "--index", "/x"]])
def test_outside_any_project_every_command_says_so(public_cpubuild: PublicCpubuild, tmp_path: Path,  # noqa: F811
                                                   command: list[str]) -> None:
    proc = public_cpubuild.cli(*command, cwd=tmp_path, check=False)
    one_line_error(proc, 2, "not inside a cpubuild project", str(tmp_path), "--project DIR", "cpubuild init")
    assert sorted(tmp_path.iterdir()) == []  # nothing written


def test_no_tool_cpubuild_table(public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    root = project_copy(tmp_path)
    text = (root / "pyproject.toml").read_text()
    start = text.index("[tool.cpubuild]")
    (root / "pyproject.toml").write_text(text[:start] + text[text.index("[tool.pytest", start):])
    proc = public_cpubuild.cli("wheel", "--project", str(root), cwd=tmp_path, check=False)
    one_line_error(proc, 2, str(root / "pyproject.toml"), "[tool.cpubuild]", "add a [tool.cpubuild] table", "package =")
    assert not (root / "wheelhouse").exists() and not (root / "build").exists()


# A sample of the settings model's refusals (tools/tests/unit/test_settings.py covers every
# field through the reader): the installed CLI refuses each identically in every command.
BAD_TABLES = {
    "wheel.jobs = 1.5": ("[tool.cpubuild.wheel]\njobs = 1.5\n", "[tool.cpubuild.wheel] jobs"),
    "wheel.isas (unknown)": ('[tool.cpubuild.wheel]\nisas = ["avx2"]\n', "[tool.cpubuild.wheel] isas"),
    "ci.cpubuild with a newline": ('[tool.cpubuild.ci]\ncpubuild = "cpubuild==0.2.0\\n"\n', "[tool.cpubuild.ci] cpubuild"),
    "baremetal.sources not a list": ('[tool.cpubuild.baremetal]\nsources = "x.c"\n', "[tool.cpubuild.baremetal] sources"),
    "test.checks = 1": ("[tool.cpubuild.test]\nchecks = 1\n", "[tool.cpubuild.test] checks"),
    "bench.variants with a newline": ('[tool.cpubuild.bench]\nvariants = ["avx2\\n"]\n', "[tool.cpubuild.bench] variants"),
    "build-system = 5": ("", "[build-system]"),
    "dynamic a string": ("", "[project] dynamic"),
}
SETTINGS_COMMANDS = (["doctor"], ["wheel"], ["ci"], ["bench"], ["matrix"], ["test", "--arch", "x86_64", "--cpu", "Haswell"])


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_a_bad_setting_is_refused_alike_by_every_command(public_cpubuild: PublicCpubuild, tmp_path: Path,  # noqa: F811
                                                         case: str) -> None:
    root = project_copy(tmp_path)
    text = (root / "pyproject.toml").read_text()
    extra, where = BAD_TABLES[case]
    if case == "build-system = 5":
        text = "build-system = 5\n" + text[text.index("[project]"):]
    elif case == "dynamic a string":
        text = text.replace("dynamic = [", 'dynamic = "version"\nnot-dynamic = [')
    (root / "pyproject.toml").write_text(text + "\n" + extra)
    before = sorted(p.relative_to(root) for p in root.rglob("*") if ".git" not in p.parts)
    lines = {one_line_error(public_cpubuild.cli(*command, cwd=root, check=False), 2, where)
             for command in SETTINGS_COMMANDS}
    assert len(lines) == 1, lines  # doctor fails exactly where every command does
    assert sorted(p.relative_to(root) for p in root.rglob("*") if ".git" not in p.parts) == before


def test_cmakelists_without_the_cpubuild_call(public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    root = project_copy(tmp_path)
    cmake = (root / "CMakeLists.txt").read_text()
    (root / "CMakeLists.txt").write_text(cmake[: cmake.index("cpubuild_add_variants(")] + "add_library(dotlib MODULE csrc/dotlib.c)\n")
    proc = public_cpubuild.cli("wheel", "--project", str(root), cwd=tmp_path, check=False)
    one_line_error(proc, 2, str(root / "CMakeLists.txt"), "never calls cpubuild_add_variants(NAME SOURCES ...)")
    assert not (root / "wheelhouse").exists() and not (root / "build").exists()


def test_matrix_naming_an_unknown_feature(public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    root = project_copy(tmp_path)
    matrix = (root / "isa_matrix.toml").read_text()
    (root / "isa_matrix.toml").write_text(matrix.replace('requires = ["avx2", "fma"]', 'requires = ["avx2", "avx1024"]'))
    for command in ("wheel", "matrix"):
        proc = public_cpubuild.cli(command, "--project", str(root), cwd=tmp_path, check=False)
        one_line_error(proc, 2, str(root / "isa_matrix.toml"), "variant 'avx2' (x86_64), field 'requires'",
                       "unknown feature 'avx1024' for x86_64", "known: sse2")
    assert not (root / "wheelhouse").exists()


def test_compile_error_is_named_by_its_variant(public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    require_tool("cmake", "ninja")
    root = project_copy(tmp_path)
    source = root / "csrc" / "dotlib.c"
    source.write_text("#if defined(DOTLIB_VARIANT_AVX2)\n#error a mistake in the avx2 path only\n#endif\n" + source.read_text())
    proc = public_cpubuild.cli("wheel", "--project", str(root), cwd=tmp_path, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "compile failed in variant 'avx2'" in proc.stderr and "a mistake in the avx2 path only" in proc.stderr
    assert not any((root / "wheelhouse").glob("*.whl")) if (root / "wheelhouse").exists() else True


def test_wheels_get_the_permissions_of_the_umask(public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    require_tool("cmake", "ninja")
    root = project_copy(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.run(["sh", "-c", f'umask 022 && exec "{public_cpubuild.exe}" wheel -q --project "{root}" --out "{out}"'],
                          capture_output=True, text=True, env=public_cpubuild.env(), timeout=1800, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    assert stat.S_IMODE(wheel.stat().st_mode) == 0o644


def test_develop_with_a_python_that_does_not_exist(public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    root = project_copy(tmp_path)
    proc = public_cpubuild.cli("develop", "--precompiled", "--index", str(tmp_path / "index"), "--python",
                               str(tmp_path / "no" / "python"), "--project", str(root), cwd=tmp_path, check=False)
    one_line_error(proc, 2, "--python", "cannot run it")


def test_bench_without_a_declared_benchmark(public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    root = project_copy(tmp_path)
    pyproject = root / "pyproject.toml"
    declared = 'benchmark = "benchmarks/bench.py"\n'
    assert declared in pyproject.read_text()  # what init writes; removed here
    pyproject.write_text(pyproject.read_text().replace(declared, ""))
    proc = public_cpubuild.cli("bench", "--project", str(root), cwd=tmp_path, check=False)
    one_line_error(proc, 2, str(pyproject), "declares no benchmark", "benchmark =")


def test_the_amx_harness_without_a_baremetal_table(public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    """dotlib declares no GEMM C ABI for the bare-metal harness: one line naming the table, before any build."""
    root = project_copy(tmp_path)
    matrix = load_matrix(root / "isa_matrix.toml")
    built = [v.name for v in matrix.variants_for("x86_64")]
    manifest = matrix.manifest("x86_64", built, "_dotlib_{variant}.so", probe="probe",
                               project={"package": "dotlib", "env_prefix": "DOTLIB"})
    wheel = tmp_path / "dotlib-0.1.0-py3-none-linux_x86_64.whl"  # the manifest is all `test` reads before the harness
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("dotlib/_manifest.json", json.dumps(manifest))
    proc = public_cpubuild.cli("test", "--arch", "x86_64", "--cpu", "bochs:sapphire_rapids", str(wheel),
                               "--project", str(root), cwd=tmp_path, check=False)
    one_line_error(proc, 2, str(root / "pyproject.toml"), "[tool.cpubuild.baremetal]", "missing", "abi-prefix", "docs/amx.md")
    assert not (root / "build").exists()


def test_cpukern_benchmark_without_ml_dtypes_is_one_line() -> None:
    """cpukern's declared benchmark where ml_dtypes cannot import: exit 2, one line with the fix."""
    script = ("import runpy, sys\nsys.modules['ml_dtypes'] = None\n"
              f"sys.argv = ['bench_variants.py', '--variants', 'baseline']\nsys.path.insert(0, {str(REPO / 'benchmarks')!r})\n"
              f"runpy.run_path({str(REPO / 'benchmarks' / 'bench_variants.py')!r}, run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "tools")})
    one_line_error(proc, 2, "needs ml_dtypes", "pip install 'cpubuild[bench]'")


def test_release_workflow_for_a_project_in_a_sub_directory(public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    """`cpubuild ci --project examples/dotlib`: runs in its directory, uploads from there, lints clean."""
    yaml = pytest.importorskip("yaml")
    out = tmp_path / "ci"
    proc = public_cpubuild.cli("ci", "--project", str(DOTLIB), "--dir", str(out), cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    workflow = yaml.safe_load((out / "release.yml").read_text())
    assert workflow["defaults"] == {"run": {"working-directory": "examples/dotlib"}}
    build = workflow["jobs"]["build"]
    assert [row["arch"] for row in build["strategy"]["matrix"]["include"]] == ["x86_64", "aarch64"]
    assert next(s for s in build["steps"] if "upload-artifact" in s.get("uses", ""))["with"]["path"] == "examples/dotlib/wheelhouse/*.whl"
    cases = {(row["arch"], row["cpu"], row["expect"]) for row in workflow["jobs"]["test"]["strategy"]["matrix"]["include"]}
    assert ("aarch64", "neoverse-n1", "neon_dotprod") in cases and ("x86_64", "Haswell", "avx2") in cases
    assert "dotlib" in workflow["jobs"]["verify"]["steps"][-1]["run"]
    require_tool("actionlint")
    lint = subprocess.run(["actionlint", "-no-color", str(out / "release.yml")], capture_output=True, text=True, timeout=300)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_test_isa_is_a_deprecated_spelling_of_force_variant(public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    """`cpubuild test --isa` (renamed --force-variant: `wheel --isa` builds variants) still works, with a warning."""
    wheel = tmp_path / "dotlib-1.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"")
    proc = public_cpubuild.cli("test", "--arch", "aarch64", "--cpu", "max", str(wheel), "--isa", "neon", cwd=tmp_path, check=False)
    assert "warning: `cpubuild test --isa` is deprecated; use --force-variant" in proc.stderr
    one_line_error(public_cpubuild.cli("test", "--arch", "aarch64", "--cpu", "max", str(wheel), "--isa", "neon",
                                       "--force-variant", "sve", cwd=tmp_path, check=False), 2, "disagree")
    assert "--force-variant NAME" in public_cpubuild.cli("test", "--help", cwd=tmp_path).stdout
    assert "--isa" not in public_cpubuild.cli("test", "--help", cwd=tmp_path).stdout
