"""`cpubuild matrix` at scale and with hostile names: a 2,500-variant matrix
compiles one probe per distinct flag set (counted through a logging compiler
wrapper on PATH), and names with a trailing newline are refused in one line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hostile import assert_one_line, cli, tree_hash
from testsupport import require_tool

FLAG_SETS = [["-mavx2"], ["-mavx2", "-mfma"], ["-msse4.2"], ["-mavx"], ["-mf16c", "-mavx2"]]


def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    out = cli("init", str(root), "--name", "relp", "--arch", "x86_64")
    assert out.returncode == 0, out.stderr
    return root


def logging_compilers(tmp_path: Path) -> tuple[str, Path]:
    """PATH with c++/g++/cc/gcc that log each call and run the real compiler."""
    shims, log = tmp_path / "shims", tmp_path / "compiles.log"
    shims.mkdir()
    for name in ("c++", "g++", "cc", "gcc"):
        real = shutil.which(name)
        if real:
            (shims / name).write_text(f"#!/bin/sh\necho \"$*\" >> {log}\nexec {real} \"$@\"\n")
            (shims / name).chmod(0o755)
    return f"{shims}:{os.environ['PATH']}", log


def test_2500_variants_probe_each_distinct_flag_set_once(tmp_path: Path) -> None:
    require_tool("g++")
    root = project(tmp_path)
    extra = []
    for i in range(2500):
        flags = ", ".join(f'"{f}"' for f in FLAG_SETS[i % len(FLAG_SETS)])
        extra.append(f'[[variant]]\nname = "v{i}"\narch = "x86_64"\nextends = "baseline"\npriority = {i + 1000}\n'
                     f'requires = ["avx2"]\nflags = [{flags}]\n')
    with (root / "isa_matrix.toml").open("a") as handle:
        handle.write("\n" + "\n".join(extra))
    path, log = logging_compilers(tmp_path)
    env = {"PATH": path, "CPUBUILD_CACHE": str(tmp_path / "cache"), "CXX": "c++", "CC": "cc"}
    out = cli("matrix", "--json", cwd=root, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    compiles = [line for line in log.read_text().splitlines() if "-c" in line.split() or "-S" in line.split()]
    variants_total = out.stdout.count('"buildable": true')
    assert variants_total >= 2500
    # the init project's own variants plus five distinct sets; never one per variant
    assert len(FLAG_SETS) <= len(compiles) <= 12, len(compiles)


@pytest.mark.parametrize("field,value", [("name", "avx512\\n"), ("name", "avx512 "), ("flags", '["-mavx2\\n"]'),
                                         ("flags", '["-mavx2 -mfma"]')])
def test_hostile_variant_fields_are_one_line(field: str, value: str, tmp_path: Path) -> None:
    root = project(tmp_path)
    text = (root / "isa_matrix.toml").read_text()
    shown = f'"{value}"' if field == "name" else value
    (root / "isa_matrix.toml").write_text(
        text + f'\n[[variant]]\nname = {shown if field == "name" else chr(34) + "extra" + chr(34)}\narch = "x86_64"\n'
        f'extends = "baseline"\nflags = {shown if field == "flags" else chr(91) + chr(34) + "-mavx2" + chr(34) + chr(93)}\n')
    before = tree_hash(root)
    out = cli("matrix", "--no-build-check", cwd=root, env={"CPUBUILD_CACHE": str(tmp_path / "cache")})
    assert_one_line(out, 2, "isa_matrix.toml", f"field {field!r}")
    assert tree_hash(root) == before
