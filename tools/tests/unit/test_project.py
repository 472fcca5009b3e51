"""The project locator (cpubuild.project): `--project DIR`, else the nearest
project at or above the working directory, never a fallback to cpubuild's own
checkout; what a CMakeLists.txt must call; where the package's sources are;
the no-tag base version file."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpubuild.errors import MatrixFileError, UsageError
from cpubuild.project import Project, find_project, load_project
from testsupport import REPO

MATRIX = """\
schema = 2

[[variant]]
name = "baseline"
arch = "x86_64"
priority = 0
flags = ["-march=x86-64"]
"""

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.21)
project(dotlib LANGUAGES C)
find_package(cpubuild CONFIG REQUIRED)
cpubuild_add_variants(dotlib SOURCES src/dot.c)
"""


def pyproject(name: str = "dotlib", table: str = "", version: str = 'version = "1.0"') -> str:
    return f'[project]\nname = "{name}"\n{version}\n\n[tool.cpubuild]\n{table}'


def make_project(root: Path, *, name: str = "dotlib", matrix: bool = True, table: bool = True, cmake: str | None = CMAKELISTS,
                 extra: str = "", version: str = 'version = "1.0"') -> Path:
    root.mkdir(parents=True, exist_ok=True)
    text = pyproject(name, extra, version) if table else f'[project]\nname = "{name}"\n{version}\n{extra}'
    (root / "pyproject.toml").write_text(text)
    if matrix:
        (root / "isa_matrix.toml").write_text(MATRIX)
    if cmake is not None:
        (root / "CMakeLists.txt").write_text(cmake)
    return root


# ------------------------------------------------------------------ locating


def test_explicit_project_dir(tmp_path: Path) -> None:
    root = make_project(tmp_path / "dotlib")
    project = find_project(root, cwd=tmp_path / "elsewhere")
    assert project.root == root.resolve() and project.config.package == "dotlib"
    assert project.matrix_path == root.resolve() / "isa_matrix.toml"
    assert project.load_matrix().variants_for("x86_64")[0].name == "baseline"


def test_explicit_dir_is_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_project(tmp_path / "dotlib")
    monkeypatch.chdir(tmp_path)
    assert find_project(Path("dotlib")).root == (tmp_path / "dotlib").resolve()


def test_explicit_dir_without_pyproject(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        find_project(tmp_path / "nowhere")
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"--project {tmp_path / 'nowhere'}: no pyproject.toml there")
    assert "cpubuild init" in info.value.message


def test_explicit_dir_is_trusted_even_without_a_matrix(tmp_path: Path) -> None:
    """--project names the project: its contract is read (and checked) whatever else is there."""
    root = make_project(tmp_path / "p", matrix=False)
    assert find_project(root).config.matrix == root.resolve() / "isa_matrix.toml"
    with pytest.raises(MatrixFileError, match=r"isa_matrix\.toml: file: cannot be read"):
        find_project(root).load_matrix()


def test_nearest_project_at_or_above_the_working_directory(tmp_path: Path) -> None:
    outer = make_project(tmp_path / "outer")
    inner = make_project(outer / "vendor" / "inner", name="inner")
    deep = inner / "src" / "a" / "b"
    deep.mkdir(parents=True)
    assert find_project(None, cwd=deep).root == inner.resolve()
    assert find_project(None, cwd=inner).root == inner.resolve()
    assert find_project(None, cwd=outer / "vendor").root == outer.resolve()
    assert find_project(None, cwd=outer).config.package == "dotlib"


def test_the_working_directory_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_project(tmp_path / "dotlib")
    (root / "python").mkdir()
    monkeypatch.chdir(root / "python")
    assert find_project(None).root == root.resolve()


def test_what_makes_a_directory_a_project(tmp_path: Path) -> None:
    outer = make_project(tmp_path / "outer")
    # a plain Python pyproject (no matrix, no [tool.cpubuild]) on the way up is not a cpubuild project
    plain = make_project(outer / "docs", table=False, matrix=False)
    assert find_project(None, cwd=plain).root == outer.resolve()
    # [tool.cpubuild] alone (the matrix declared elsewhere) is one
    custom = make_project(outer / "custom", matrix=False, extra='matrix = "conf/isa.toml"')
    assert find_project(None, cwd=custom).root == custom.resolve()
    # so is an isa_matrix.toml next to a pyproject.toml; its missing table is then the problem to report
    untabled = make_project(outer / "untabled", table=False)
    with pytest.raises(UsageError, match=r"\[tool\.cpubuild\]: missing"):
        find_project(None, cwd=untabled)
    # an unreadable pyproject without a matrix is skipped, not fatal
    broken = outer / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text("[project\n")
    assert find_project(None, cwd=broken).root == outer.resolve()


def test_outside_any_project_says_so(tmp_path: Path) -> None:
    lonely = tmp_path / "a" / "b"
    lonely.mkdir(parents=True)
    with pytest.raises(UsageError) as info:
        find_project(None, cwd=lonely)
    message = info.value.message
    assert info.value.exit_code == 2
    assert message.startswith("not inside a cpubuild project: no pyproject.toml with isa_matrix.toml at or above")
    assert str(lonely.resolve()) in message
    assert "--project DIR" in message and "cpubuild init DIR --name NAME" in message
    # cpubuild itself is installed from a checkout that is a project (cpukern's): it is never used instead
    assert str(REPO) not in message


def test_outside_any_project_never_falls_back_to_the_cpubuild_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cpubuild

    assert Path(cpubuild.__file__).resolve().is_relative_to(REPO)  # the checkout is a project...
    assert find_project(None, cwd=REPO / "tools" / "cpubuild").root == REPO  # ...found from inside it
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="not inside a cpubuild project"):
        find_project(None)  # ...but not from anywhere else


def test_a_bad_contract_is_a_usage_error_naming_the_key(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", extra='env-prefix = "lower"\n')
    with pytest.raises(UsageError) as info:
        find_project(root)
    assert info.value.exit_code == 2
    assert info.value.message.startswith(f"{root.resolve() / 'pyproject.toml'}: [tool.cpubuild] env-prefix: ")


def test_a_bad_matrix_is_a_matrix_file_error(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    (root / "isa_matrix.toml").write_text("schema = 1\n")
    project = find_project(root)  # locating reads the contract only
    with pytest.raises(MatrixFileError) as info:
        project.load_matrix()
    assert info.value.exit_code == 2 and "schema 1" in info.value.message


def test_load_project_keeps_the_whole_pyproject(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", extra="[tool.scikit-build]\nwheel.packages = ['python/dotlib']\n")
    project = load_project(root)
    assert isinstance(project, Project)
    assert project.tool("scikit-build", "wheel", "packages") == ["python/dotlib"]
    assert project.tool("nothing", "here") == {}
    assert project.tool("cpubuild") == {}


# ------------------------------------------------------------------ CMakeLists.txt


def problems(tmp_path: Path, cmake: str | None, extra_files: dict[str, str] | None = None) -> list[str]:
    root = make_project(tmp_path / "p", cmake=cmake)
    for rel, text in (extra_files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return load_project(root).cmake_problems()


def test_a_complete_cmakelists_has_no_problems(tmp_path: Path) -> None:
    assert problems(tmp_path, CMAKELISTS) == []
    assert problems(tmp_path, CMAKELISTS.replace("find_package(cpubuild", "FIND_PACKAGE( cpubuild")) == []


def test_missing_cmakelists(tmp_path: Path) -> None:
    found = problems(tmp_path, None)
    assert len(found) == 1 and "CMakeLists.txt: missing" in found[0] and "cpubuild init" in found[0]


def test_without_find_package(tmp_path: Path) -> None:
    found = problems(tmp_path, CMAKELISTS.replace("find_package(cpubuild CONFIG REQUIRED)\n", ""))
    assert len(found) == 1 and "never calls find_package(cpubuild CONFIG REQUIRED)" in found[0]
    assert found[0].startswith(str(tmp_path / "p" / "CMakeLists.txt"))
    # another package's name that merely starts the same does not count
    assert len(problems(tmp_path, CMAKELISTS.replace("find_package(cpubuild ", "find_package(cpubuild_extras "))) == 1


def test_without_cpubuild_add_variants(tmp_path: Path) -> None:
    found = problems(tmp_path, CMAKELISTS.replace("cpubuild_add_variants(dotlib SOURCES src/dot.c)\n", ""))
    assert len(found) == 1 and "never calls cpubuild_add_variants(NAME SOURCES ...)" in found[0]
    assert "no variant would be built" in found[0]
    assert len(problems(tmp_path, CMAKELISTS.replace("cpubuild_add_variants(", "my_cpubuild_add_variants("))) == 1


def test_comments_do_not_count(tmp_path: Path) -> None:
    commented = CMAKELISTS.replace("find_package(", "# find_package(").replace("cpubuild_add_variants(", "#cpubuild_add_variants(")
    assert len(problems(tmp_path, commented)) == 2
    trailing = "project(x)\nadd_library(x a.c)  # then find_package(cpubuild) and cpubuild_add_variants(x)\n"
    assert len(problems(tmp_path, trailing)) == 2
    bracket = ("project(x)\n#[[ the old way:\nfind_package(cpubuild CONFIG REQUIRED)\n"
               "cpubuild_add_variants(x SOURCES a.c)\n]]\n")
    assert len(problems(tmp_path, bracket)) == 2
    bracket_eq = "#[==[\nfind_package(cpubuild)\n]] still inside\n]==]\ncpubuild_add_variants(x SOURCES a.c)\n"
    assert len(problems(tmp_path, bracket_eq)) == 1


def test_calls_in_cmake_helper_files_count(tmp_path: Path) -> None:
    helper = {"cmake/Variants.cmake": "cpubuild_add_variants(dotlib SOURCES src/dot.c)\n"}
    top = CMAKELISTS.replace("cpubuild_add_variants(dotlib SOURCES src/dot.c)\n", "include(cmake/Variants.cmake)\n")
    assert problems(tmp_path, top, helper) == []
    assert len(problems(tmp_path, top, {"cmake/Variants.cmake": "# cpubuild_add_variants(dotlib)\n"})) == 1
    assert len(problems(tmp_path, top, {"elsewhere/Variants.cmake": helper["cmake/Variants.cmake"]})) == 1


def test_a_non_utf8_cmakelists_is_read(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", cmake=None)
    (root / "CMakeLists.txt").write_bytes(CMAKELISTS.encode() + b"# caf\xe9\n")
    assert load_project(root).cmake_problems() == []


def test_cpukern_cmakelists_uses_the_interface() -> None:
    assert load_project(REPO).cmake_problems() == []


# ------------------------------------------------------------------ sources and versions


def test_source_dir_rules(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")

    def package_at(rel: str) -> Path:
        (root / rel).mkdir(parents=True, exist_ok=True)
        (root / rel / "__init__.py").write_text("")
        return root / rel

    assert load_project(root).source_dir is None  # nothing there yet
    flat = package_at("dotlib")
    assert load_project(root).source_dir == flat
    python = package_at("python/dotlib")
    assert load_project(root).source_dir == python  # python/<pkg> before <pkg>
    src = package_at("src/dotlib")
    assert load_project(root).source_dir == src  # src/<pkg> first
    (root / "lib" / "dotlib").mkdir(parents=True)  # declared but not a package: skipped
    make_project(root, extra="[tool.scikit-build]\nwheel.packages = ['lib/dotlib', 'lib/other']\n")
    assert load_project(root).source_dir == src
    declared = package_at("lib/dotlib")
    assert load_project(root).source_dir == declared  # scikit-build-core's wheel.packages entry named like the package
    make_project(root, extra='source = "somewhere/else"\n')
    assert load_project(root).source_dir == root / "somewhere" / "else"  # [tool.cpubuild] source wins, as written


def test_source_dir_follows_the_package_name(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", name="dot-lib")
    (root / "src" / "dot_lib").mkdir(parents=True)
    (root / "src" / "dot_lib" / "__init__.py").write_text("")
    (root / "src" / "dotlib").mkdir()
    (root / "src" / "dotlib" / "__init__.py").write_text("")
    assert load_project(root).source_dir == root / "src" / "dot_lib"
    make_project(root, name="dot-lib", extra='package = "dotlib"\n')
    assert load_project(root).source_dir == root / "src" / "dotlib"


def test_base_version_file(tmp_path: Path) -> None:
    static = make_project(tmp_path / "static")
    assert load_project(static).base_version_file is None
    dynamic = make_project(tmp_path / "dynamic", version='dynamic = ["version"]',
                           extra='\n[[tool.dynamic-metadata]]\nprovider = "cpubuild"\nfallback = "src/dotlib/_version.py"\n')
    assert load_project(dynamic).base_version_file == dynamic / "src" / "dotlib" / "_version.py"
    unset = make_project(tmp_path / "unset", version='dynamic = ["version"]')
    with pytest.raises(UsageError) as info:
        _ = load_project(unset).base_version_file
    assert str(unset / "pyproject.toml") in info.value.message
    assert 'provider = "cpubuild"' in info.value.message and "fallback" in info.value.message
    assert load_project(REPO).base_version_file == REPO / "python" / "cpukern" / "_version.py"


def test_backend_importable(tmp_path: Path) -> None:
    def with_requires(*requires: str) -> Project:
        root = make_project(tmp_path / "r", extra="")
        text = (root / "pyproject.toml").read_text()
        listed = ", ".join(f'"{r}"' for r in requires)
        (root / "pyproject.toml").write_text(f"[build-system]\nrequires = [{listed}]\n\n{text}")
        return load_project(root)

    assert with_requires().backend_importable()
    assert with_requires("pytest", "packaging>=20").backend_importable()
    assert not with_requires("pytest>=999").backend_importable()
    assert not with_requires("surely-not-installed-cpubuild-test-pkg").backend_importable()
    assert with_requires("surely-not-installed-cpubuild-test-pkg; python_version < '3'").backend_importable()  # marker false
    assert not with_requires("not a requirement !!").backend_importable()
