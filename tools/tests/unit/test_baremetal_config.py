"""[tool.cpubuild.baremetal]: the AMX harness's view of a project, validated
(file, field, problem) before anything is compiled."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpubuild.contract import ContractError, load_config
from cpubuild.emulate import amx
from cpubuild.matrix import load_matrix

MATRIX = """schema = 2
[[variant]]
name = "baseline"
arch = "x86_64"
priority = 0
flags = ["-march=x86-64"]

[[variant]]
name = "avx512bf16"
extends = "baseline"
requires = ["avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16"]
flags = ["-mavx512f", "-mavx512bf16"]

[[variant]]
name = "amx"
extends = "avx512bf16"
requires = ["amx_tile", "amx_bf16", "amx_int8"]
flags = ["-mamx-tile"]
"""


def _project(tmp_path: Path, table: str, *, matrix: str = MATRIX) -> tuple[amx.ProjectConfig, amx.Matrix]:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "gemm.cpp").write_text("// the kernel\n")
    (tmp_path / "isa_matrix.toml").write_text(matrix)
    (tmp_path / "pyproject.toml").write_text(
        f'[project]\nname = "gk"\nversion = "1.0"\n[tool.cpubuild]\npackage = "gk"\n{table}')
    return load_config(tmp_path), load_matrix(tmp_path / "isa_matrix.toml")


def test_a_full_table(tmp_path: Path) -> None:
    config, matrix = _project(tmp_path, '[tool.cpubuild.baremetal]\nabi-prefix = "gk_gemm"\nsources = ["csrc/gemm.cpp"]\n'
                              'include-dirs = ["csrc"]\ncompile-options = ["-O2"]\nvariants = ["avx512bf16", "amx"]\n')
    h = amx.harness_config(config, matrix)
    assert h.abi_prefix == "gk_gemm"
    assert h.sources == (tmp_path / "csrc" / "gemm.cpp",)
    assert h.include_dirs == (tmp_path / "csrc",)
    assert h.compile_options == ("-O2",)
    assert h.variants == ("avx512bf16", "amx")


def test_variants_default_to_those_that_need_amx(tmp_path: Path) -> None:
    config, matrix = _project(tmp_path, '[tool.cpubuild.baremetal]\nabi-prefix = "gk"\nsources = ["csrc/gemm.cpp"]\n')
    h = amx.harness_config(config, matrix)
    assert h.variants == ("amx",)
    assert h.include_dirs == () and h.compile_options == ()


@pytest.mark.parametrize(("table", "field", "problem"), [
    ("", "[tool.cpubuild.baremetal]", "missing"),
    ('abi-prefix = "gk"\nsources = ["csrc/gemm.cpp"]\nsource = "x"\n', "[tool.cpubuild.baremetal] source", "unknown key"),
    ('abi-prefix = "gk-gemm"\nsources = ["csrc/gemm.cpp"]\n', "[tool.cpubuild.baremetal] abi-prefix", "C identifier"),
    ('sources = ["csrc/gemm.cpp"]\n', "[tool.cpubuild.baremetal] abi-prefix", "C identifier"),
    ('abi-prefix = "gk"\n', "[tool.cpubuild.baremetal] sources", "non-empty list"),
    ('abi-prefix = "gk"\nsources = "csrc/gemm.cpp"\n', "[tool.cpubuild.baremetal] sources", "non-empty list"),
    ('abi-prefix = "gk"\nsources = ["csrc/missing.cpp"]\n', "[tool.cpubuild.baremetal] sources", "missing.cpp does not exist"),
    ('abi-prefix = "gk"\nsources = ["/nonexistent/x.c"]\n', "[tool.cpubuild.baremetal] sources", "/nonexistent/x.c does not exist"),
    ('abi-prefix = "gk"\nsources = ["csrc/gemm.cpp"]\ninclude-dirs = ["inc"]\n', "[tool.cpubuild.baremetal] include-dirs",
     "inc is not a directory"),
    ('abi-prefix = "gk"\nsources = ["csrc/gemm.cpp"]\nvariants = ["neon"]\n', "[tool.cpubuild.baremetal] variants",
     "'neon' is no x86_64 variant of isa_matrix.toml (x86_64: amx, avx512bf16, baseline)"),
])
def test_bad_tables_name_the_field(tmp_path: Path, table: str, field: str, problem: str) -> None:
    header = "[tool.cpubuild.baremetal]\n" if table else ""
    with pytest.raises(ContractError) as info:  # types and keys when the project is read, the rest when the harness is
        config, matrix = _project(tmp_path, header + table)
        amx.harness_config(config, matrix)
    assert info.value.where == field
    assert problem in info.value.problem
    assert str(tmp_path / "pyproject.toml") in str(info.value)


def test_no_amx_variant_and_none_named(tmp_path: Path) -> None:
    matrix = MATRIX[:MATRIX.index('[[variant]]\nname = "amx"')]
    config, m = _project(tmp_path, '[tool.cpubuild.baremetal]\nabi-prefix = "gk"\nsources = ["csrc/gemm.cpp"]\n',
                         matrix=matrix)
    with pytest.raises(ContractError, match="no x86_64 variant that requires AMX"):
        amx.harness_config(config, m)
