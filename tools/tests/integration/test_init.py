"""`cpubuild init`: the project it writes works as written, and bad input changes nothing.

The end-to-end case goes through the public path only (tools/tests/public_cpubuild.py):
a non-editable cpubuild in a fresh venv writes a project, builds its wheel
(isolated build: scikit-build-core plus cpubuild's own wheel), the wheel goes
into another fresh venv, and the project's own pytest suite passes there. The
committed examples/dotlib must be exactly what init writes today.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from cpubuild.matrix import load_matrix
from cpubuild.project import load_project
from oracle import ARCH, oracle_ranking
from public_cpubuild import PublicCpubuild, clean_env, fresh_venv, public_cpubuild  # noqa: F401 (a fixture)
from testsupport import REPO, nested_pytest, require, require_tool, run

# The committed examples init wrote, and the command that wrote each (see examples/README.md).
EXAMPLES = {
    "dotlib": ("init", "examples/dotlib", "--name", "dotlib", "--arch", "x86_64,aarch64"),
    "torch_ops": ("init", "examples/torch_ops", "--name", "torch-ops", "--kind", "torch", "--arch", "x86_64,aarch64"),
}


def cpubuild(*args: str, cwd: Path, check: bool = False) -> subprocess.CompletedProcess[str]:
    """This checkout's cpubuild CLI (fast: no install), as the console script runs it."""
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", *args]
    return run(cmd, env={**os.environ, "PYTHONPATH": str(REPO / "tools")}, cwd=cwd, check=check, timeout=120)


def tree(root: Path) -> dict[str, bytes]:
    """Every file below root (relative path -> bytes)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ the template


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_is_fresh_init_output(tmp_path: Path, name: str) -> None:
    """examples/<name> (tracked and untracked-but-not-ignored files) == what init writes now."""
    require(shutil.which("git") is not None and (REPO / ".git").exists(), "not a git checkout: cannot tell ignored files")
    command = EXAMPLES[name]
    example = REPO / command[1]
    out = tmp_path / command[1]
    cpubuild(command[0], str(out), *command[2:], cwd=tmp_path, check=True)
    listed = run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "."], cwd=example).stdout.split()
    committed = {name: (example / name).read_bytes() for name in listed if (example / name).is_file()}
    fresh = tree(out)
    assert sorted(committed) == sorted(fresh), "files differ: rerun `cpubuild " + " ".join(command) + " --force`"
    stale = [name for name in fresh if committed[name] != fresh[name]]
    assert not stale, f"{command[1]} differs from `cpubuild {' '.join(command)}` in {stale}"


@pytest.mark.parametrize(("arches", "expected"), [
    ("x86_64,aarch64", {"x86_64": ["baseline", "avx2", "avx512"], "aarch64": ["neon", "neon_dotprod"]}),
    ("amd64", {"x86_64": ["baseline", "avx2", "avx512"]}),
    ("arm64", {"aarch64": ["neon", "neon_dotprod"]}),
])
def test_written_project_follows_the_contract(tmp_path: Path, arches: str, expected: dict[str, list[str]]) -> None:
    out = tmp_path / "proj"
    proc = cpubuild("init", str(out), "--name", "my-dots", "--arch", arches, cwd=tmp_path, check=True)
    assert "wrote" in proc.stdout and "cpubuild wheel --project" in proc.stdout
    project = load_project(out)
    assert (project.config.dist_name, project.config.package, project.config.env_prefix) == ("my-dots", "my_dots", "MY_DOTS")
    assert project.cmake_problems() == []
    assert project.source_dir == out / "src" / "my_dots"
    assert project.base_version_file == out / "src" / "my_dots" / "_version.py"
    assert project.config.selftest is not None and project.config.selftest.target == "my_dots.selftest"
    matrix = load_matrix(project.matrix_path)
    assert {arch: [v.name for v in matrix.variants_for(arch)] for arch in matrix.arches} == expected
    for arch in expected:
        assert matrix.baseline(arch).name == expected[arch][0]
    files = tree(out)
    assert {"pyproject.toml", "isa_matrix.toml", "CMakeLists.txt", "csrc/my_dots.c", "src/my_dots/__init__.py",
            "src/my_dots/__main__.py", "src/my_dots/selftest.py", "tests/test_my_dots.py", "README.md",
            ".gitignore"} <= set(files)
    for name, data in files.items():
        assert b"{{" not in data and b"}}" not in data, f"{name}: an unrendered placeholder"
    kernel = files["csrc/my_dots.c"].decode()
    for variant in (v for variants in expected.values() for v in variants):
        if variant not in ("baseline", "neon"):  # the baselines take the scalar path
            assert f"MY_DOTS_VARIANT_{variant.upper()}" in kernel
    readme = files["README.md"].decode()
    assert "cpubuild wheel" in readme and "cpubuild publish" in readme and "--extra-index-url" in readme
    if "aarch64" in expected:
        assert "cpubuild test --arch aarch64 --cpu neoverse-n1 --expect auto" in readme


def test_torch_project_follows_the_contract(tmp_path: Path) -> None:
    """--kind torch: a torch project (dynamic dependencies for the torch pin), the ops under
    the package's namespace, code paths for the variants the issue names, nothing unrendered."""
    out = tmp_path / "ops"
    proc = cpubuild("init", str(out), "--name", "my-ops", "--kind", "torch", cwd=tmp_path, check=True)
    assert "torch project" in proc.stdout and "--torch X.Y.Z" in proc.stdout
    project = load_project(out)
    assert project.config.kind == "torch" and project.config.package == "my_ops"
    assert project.cmake_problems() == []
    pyproject = tomllib.loads((out / "pyproject.toml").read_text())
    assert set(pyproject["project"]["dynamic"]) == {"version", "dependencies"}
    assert "torch" in pyproject["build-system"]["requires"]
    matrix = load_matrix(project.matrix_path)
    assert {arch: [v.name for v in matrix.variants_for(arch)] for arch in matrix.arches} == {
        "x86_64": ["baseline", "avx2", "avx512", "avx512vnni", "avx512bf16", "amx"], "aarch64": ["neon", "neon_dotprod"]}
    assert "f16c" in matrix.variant("x86_64", "avx2").requires  # vLLM's code needs it
    files = tree(out)
    for name, data in files.items():
        assert b"{{" not in data.replace(b'{{"error"', b"") and b"{{#" not in data, f"{name}: an unrendered placeholder"
    vec = files["csrc/vec.h"].decode()
    for variant in ("AVX2", "AVX512", "AVX512VNNI", "AVX512BF16", "AMX", "NEON_DOTPROD"):
        assert f"MY_OPS_VARIANT_{variant}" in vec
    bindings = files["csrc/torch_bindings.cpp"].decode()
    assert "TORCH_LIBRARY(my_ops, m)" in bindings and "rms_norm(Tensor! out" in bindings
    assert 'register_fake("my_ops::rms_norm")' in files["src/my_ops/__init__.py"].decode()


def test_force_writes_into_a_nonempty_directory(tmp_path: Path) -> None:
    out = tmp_path / "proj"
    out.mkdir()
    (out / "NOTES.txt").write_text("mine\n")
    (out / "README.md").write_text("old\n")
    cpubuild("init", str(out), "--name", "dotlib", "--force", "-q", cwd=tmp_path, check=True)
    assert (out / "NOTES.txt").read_text() == "mine\n"  # other files stay
    assert (out / "README.md").read_text().startswith("# dotlib")  # same-named files are replaced
    assert (out / "pyproject.toml").is_file()


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(("args", "message"), [
    (["--name", "3dots"], "not a Python package name"),
    (["--name", "my.dots"], "not a Python package name"),
    (["--name", "-dots"], "not a distribution name"),
    (["--name", "dots lib"], "not a distribution name"),
    (["--name", "dötlib"], "not a distribution name"),
    (["--name", "class"], "keyword"),
    (["--name", "json"], "shadow"),
    (["--name", "cpubuild"], "shadow"),
    (["--name", "torch", "--kind", "torch"], "shadow"),
    (["--name", "dotlib", "--arch", "riscv64"], "unknown arch"),
    (["--name", "dotlib", "--arch", "x86_64,s390x"], "no template for s390x"),
    (["--name", "dotlib", "--arch", ","], "at least one arch"),
    (["--name", "dotlib", "--kind", "torch", "--template", "minimal"], "disagree"),
], ids=lambda v: "_".join(v) if isinstance(v, list) else None)
def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "new" / "proj"
    proc = cpubuild("init", str(out), *args, cwd=tmp_path)
    assert_usage_error(proc, message)
    assert not (tmp_path / "new").exists()


def test_nonempty_directory_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "proj"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    proc = cpubuild("init", str(out), "--name", "dotlib", cwd=tmp_path)
    assert_usage_error(proc, "not empty")
    assert tree(out) == {"keep.txt": b"x"}


def test_directory_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "proj").write_text("x")
    assert_usage_error(cpubuild("init", str(tmp_path / "proj"), "--name", "dotlib", cwd=tmp_path), "not a directory")
    assert (tmp_path / "proj").read_text() == "x"


def test_force_does_not_replace_a_directory_with_a_file(tmp_path: Path) -> None:
    out = tmp_path / "proj"
    (out / "README.md").mkdir(parents=True)
    proc = cpubuild("init", str(out), "--name", "dotlib", "--force", cwd=tmp_path)
    assert_usage_error(proc, "in the way")
    assert [p.name for p in out.iterdir()] == ["README.md"]


def assert_usage_error(proc: subprocess.CompletedProcess[str], message: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr
    assert proc.stdout == ""


# ------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_init_build_install_and_its_own_tests_pass(public_cpubuild: PublicCpubuild,  # noqa: F811
                                                    tmp_path: Path) -> None:
    require_tool("cmake")
    project = tmp_path / "my-dots"
    public_cpubuild.cli("init", str(project), "--name", "my-dots", "--arch", "x86_64,aarch64", cwd=tmp_path)
    # no --out: the wheel goes to the project's wheelhouse/, as the README and init's hint say
    _, summary = public_cpubuild.json("wheel", "--project", str(project), "--build-root", str(tmp_path / "build"),
                                      cwd=tmp_path)
    assert summary["ok"], summary
    matrix = load_matrix(project / "isa_matrix.toml")
    assert sorted(summary["wheel"]["variants"]) == sorted(v.name for v in matrix.variants_for(ARCH))
    wheel = Path(summary["wheel"]["path"])
    assert wheel.parent == project / "wheelhouse" and wheel.name.startswith("my_dots-0.1.0+")
    python = fresh_venv(tmp_path / "venv", str(wheel), "pytest", "numpy")  # the template's tests use NumPy
    env = clean_env()
    tests = nested_pytest(python, project, env=env)
    assert " passed" in tests.stdout and "failed" not in tests.stdout
    report = json.loads(run([str(python), "-m", "my_dots", "--json"], cwd=tmp_path, env=env).stdout)
    assert report["selected"] == oracle_ranking(matrix, summary["wheel"]["variants"])[0]
    assert report["env_prefix"] == "MY_DOTS"


def test_minimal_template_is_one_function_in_two_files(tmp_path: Path) -> None:
    """Replacing the minimal template's code touches the C file and the binding: the function's
    C name appears only in those two, and --kind ctypes still means the dot template."""
    out = tmp_path / "proj"
    proc = cpubuild("init", str(out), "--name", "my-sum", "--template", "minimal", cwd=tmp_path, check=True)
    assert "(minimal template)" in proc.stdout
    files = tree(out)
    assert [rel for rel, data in files.items() if b"my_sum_checksum" in data] == ["csrc/my_sum.c", "src/my_sum/__init__.py"]
    assert load_project(out).cmake_problems() == []
    dot = tmp_path / "dot"
    cpubuild("init", str(dot), "--name", "my-sum", "--kind", "ctypes", cwd=tmp_path, check=True)
    assert b"my_sum_dot_f32" in (dot / "csrc" / "my_sum.c").read_bytes()


@pytest.mark.slow
def test_minimal_template_to_installed_dispatching_wheel(public_cpubuild: PublicCpubuild,  # noqa: F811
                                                         tmp_path: Path) -> None:
    """`init --template minimal`, `wheel`, install: the project's own tests pass and the best variant runs."""
    require_tool("cmake")
    project = tmp_path / "my-sum"
    public_cpubuild.cli("init", str(project), "--name", "my-sum", "--template", "minimal", cwd=tmp_path)
    _, summary = public_cpubuild.json("wheel", "--project", str(project), "--build-root", str(tmp_path / "build"),
                                      cwd=tmp_path)
    assert summary["ok"], summary
    matrix = load_matrix(project / "isa_matrix.toml")
    assert sorted(summary["wheel"]["variants"]) == sorted(v.name for v in matrix.variants_for(ARCH))
    python = fresh_venv(tmp_path / "venv", summary["wheel"]["path"], "pytest")
    env = clean_env()
    tests = nested_pytest(python, project, env=env)
    assert " passed" in tests.stdout and "failed" not in tests.stdout
    report = json.loads(run([str(python), "-m", "my_sum", "--json"], cwd=tmp_path, env=env).stdout)
    assert report["selected"] == oracle_ranking(matrix, summary["wheel"]["variants"])[0]
    selftest = json.loads(run([str(python), "-m", "my_sum.selftest", "--json"], cwd=tmp_path, env=env).stdout)
    assert selftest["failed"] == 0 and selftest["passed"] > 0 and selftest["variant"] == report["selected"]
