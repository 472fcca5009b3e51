"""The dispatcher of the INSTALLED cpukern, driven through subprocesses the way
users meet it: `python -m cpukern [--json]`, CPUKERN_ISA, CPUKERN_DISABLE_ISA,
broken or partial installs.

The expected variant comes from an independent oracle (tools/tests/oracle.py): the
native host's /proc/cpuinfo flags mapped to cpubuild's feature names. Nothing
here hard-codes what this machine picks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import oracle
import pytest
from cpubuild.matrix import load_matrix
from oracle import ARCH, oracle_features
from testsupport import CPUKERN_MATRIX, REPO, assert_not_killed, require, require_host, require_tool, skip_host_fact

MATRIX = load_matrix(CPUKERN_MATRIX)


def oracle_ranking(built: set[str]) -> list[str]:
    """Built variants this host runs, best first (the oracle, tools/tests/oracle.py)."""
    return oracle.oracle_ranking(MATRIX, built)


# ------------------------------------------------------------------ runner


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CPUKERN_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


def run_python(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env or clean_env(), capture_output=True,
                          text=True, timeout=120, check=False)
    assert_not_killed(proc, f"python {' '.join(args)}")
    return proc


def ok_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def fails_cleanly(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit status 1, not a signal, no traceback, one error line naming the problem."""
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr + proc.stdout
    for word in words:
        assert word in proc.stderr, f"{word!r} not in {proc.stderr!r}"
    return proc.stderr


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dispatch")


@pytest.fixture(scope="module")
def installed(work: Path) -> Path:
    """The cpukern package directory the test interpreter imports (not the source tree)."""
    proc = run_python(["-c", "import cpukern; print(cpukern.__file__)"], cwd=work)
    require(proc.returncode == 0, f"cpukern is not installed for {sys.executable}: pip install . first")
    pkg = Path(proc.stdout.strip()).parent
    require((pkg / "_manifest.json").is_file(), f"{pkg} holds no built cpukern (no _manifest.json)")
    source = REPO / "python" / "cpukern"
    stale = [p.name for p in source.glob("*.py") if not (pkg / p.name).is_file() or (pkg / p.name).read_bytes() != p.read_bytes()]
    assert not stale, f"installed cpukern at {pkg} differs from the source in {stale}: reinstall it (pip install .)"
    return pkg


@pytest.fixture(scope="module")
def report(installed: Path, work: Path) -> dict[str, Any]:
    return ok_json(run_python(["-m", "cpukern", "--json"], cwd=work))


def built_names(report: dict[str, Any]) -> set[str]:
    return {v["name"] for v in report["variants"] if v["built"]}


# ------------------------------------------------------------------ tests


def test_json_report_shape(report: dict[str, Any]) -> None:
    assert {"arch", "selected", "override", "host_features", "variants"} <= set(report)
    assert report["arch"] == ARCH and report["override"] is None
    assert isinstance(report["host_features"], list)
    assert [v["name"] for v in report["variants"]] == [v.name for v in reversed(MATRIX.variants_for(ARCH))]
    for v in report["variants"]:
        assert {"name", "built", "supported", "missing"} <= set(v)
        assert isinstance(v["built"], bool) and isinstance(v["supported"], bool)
        assert v["supported"] == (not v["missing"])
    assert MATRIX.baseline(ARCH).name in built_names(report)


def test_selects_what_the_oracle_says(report: dict[str, Any]) -> None:
    assert set(report["host_features"]) == oracle_features()
    ranking = oracle_ranking(built_names(report))
    assert report["selected"] == ranking[0]
    have = oracle_features()
    for v in report["variants"]:
        needed = set(MATRIX.variant(ARCH, v["name"]).requires)
        assert set(v["missing"]) == needed - have, v["name"]


def test_every_variant_the_compiler_supports_is_built(report: dict[str, Any]) -> None:
    """A default build has every variant of the arch that has flags for this compiler."""
    gcc_variants = {v.name for v in MATRIX.variants_for(ARCH) if "gcc" in v.flags}
    assert built_names(report) == gcc_variants


def test_concise_text_report(installed: Path, work: Path, report: dict[str, Any]) -> None:
    """The default text: a few lines (selected and why, built/runnable, the best it cannot run), no feature list."""
    proc = run_python(["-m", "cpukern"], cwd=work)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= 6, proc.stdout
    assert f"selected: {report['selected']} (" in proc.stdout
    runnable = [v["name"] for v in report["variants"] if v["built"] and v["supported"]]
    assert f"this CPU runs: {', '.join(runnable)}" in proc.stdout
    assert "features not found" not in proc.stdout
    blocked = next((v for v in report["variants"] if v["built"] and not v["supported"]), None)
    if blocked is not None:
        line = next(line for line in lines if line.startswith("best it cannot run: "))
        assert line.startswith(f"best it cannot run: {blocked['name']}, missing ")
        assert all(feature in line for feature in blocked["missing"])


def test_text_report_explains_every_variant(installed: Path, work: Path, report: dict[str, Any]) -> None:
    proc = run_python(["-m", "cpukern", "--verbose"], cwd=work)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    found_line = next(line for line in text.splitlines() if line.startswith("features found:"))
    assert set(found_line.split(":", 1)[1].split()) == set(report["host_features"])
    missing = set(MATRIX.features[ARCH]) - set(report["host_features"])
    not_found_line = next(line for line in text.splitlines() if line.startswith("features not found:"))
    assert set(not_found_line.split(":", 1)[1].split()) - {"(none)"} == missing
    for name in missing:  # and why each one is missing
        assert any(line.split()[:1] == [name] and len(line.split()) > 1 for line in text.splitlines()), name
    for v in report["variants"]:
        line = next(line for line in text.splitlines() if line[3:].split()[:1] == [v["name"]])
        if v["name"] == report["selected"]:
            assert line.startswith(" * ")
        elif not v["supported"]:
            assert "CPU lacks " + ", ".join(v["missing"]) in line
        else:
            assert "lower priority than " + report["selected"] in line
    assert f"selected: {report['selected']}" in text


def test_forced_supported_variants(installed: Path, work: Path, report: dict[str, Any]) -> None:
    for name in oracle_ranking(built_names(report)):
        data = ok_json(run_python(["-m", "cpukern", "--json"], cwd=work, env=clean_env(CPUKERN_ISA=name)))
        assert data["selected"] == name and data["override"] == name


def test_forced_amx_on_a_host_without_it(installed: Path, work: Path, report: dict[str, Any]) -> None:
    require_host(ARCH == "x86_64", "x86_64 only")
    require_host("amx" not in oracle_ranking(built_names(report)), "this host runs AMX")
    lacking = [f for f in MATRIX.variant(ARCH, "amx").requires if f not in oracle_features()]
    proc = run_python(["-m", "cpukern"], cwd=work, env=clean_env(CPUKERN_ISA="amx"))
    err = fails_cleanly(proc, "CPUKERN_ISA=amx", "cannot run variant 'amx'", "missing features: " + ", ".join(lacking))
    assert err.count("\n") == 1
    assert "selected: none" in proc.stdout  # the report still shows what runs
    data = json.loads(run_python(["-m", "cpukern", "--json"], cwd=work, env=clean_env(CPUKERN_ISA="amx")).stdout)
    assert data["selected"] is None and data["override"] == "amx" and "amx_tile" in data["error"]
    assert {v["name"] for v in data["variants"] if v["supported"] and v["built"]} == set(oracle_ranking(built_names(report)))


def test_load_variant_errors_name_the_call_not_the_environment(installed: Path, work: Path, report: dict[str, Any]) -> None:
    """No CPUKERN_ISA set: a refused load_variant('x') says load_variant('x'), not CPUKERN_ISA=x."""
    unsupported = [v["name"] for v in report["variants"] if v["built"] and not v["supported"]]
    if not unsupported:
        skip_host_fact("this CPU runs every built variant")
    name = unsupported[-1]
    script = (f"from cpukern._dispatch import DISPATCHER as d\ntry:\n    d.load_variant({name!r})\n"
              "except RuntimeError as exc:\n    print(exc)\n")
    text = run_python(["-c", script], cwd=work, env=clean_env()).stdout
    assert text.startswith(f"load_variant({name!r}): this CPU cannot run variant {name!r}"), text
    assert "CPUKERN_ISA" not in text


def test_import_stays_lazy_when_the_forced_variant_cannot_run(installed: Path, work: Path, report: dict[str, Any]) -> None:
    """`import cpukern` succeeds; selected_isa() and the first op call raise UnsupportedISAError."""
    unsupported = [v["name"] for v in report["variants"] if v["built"] and not v["supported"]]
    require_host(bool(unsupported), "this host runs every built variant")
    script = (
        "import cpukern\n"
        "import numpy as np\n"
        "def op():\n    cpukern.rms_norm(np.ones((1, 8), np.float32), np.ones(8, np.float32))\n"
        "for name, call in (('selected_isa', cpukern.selected_isa), ('rms_norm', op)):\n"
        "    try:\n        call()\n"
        "    except cpukern.UnsupportedISAError as exc:\n        print(name, exc.name, ','.join(exc.missing))\n"
    )
    proc = run_python(["-c", script], cwd=work, env=clean_env(CPUKERN_ISA=unsupported[-1]))
    assert proc.returncode == 0, proc.stderr
    lacking = ",".join(next(v["missing"] for v in report["variants"] if v["name"] == unsupported[-1]))
    assert proc.stdout.splitlines() == [f"selected_isa {unsupported[-1]} {lacking}", f"rms_norm {unsupported[-1]} {lacking}"]


def test_unknown_name_lists_available(installed: Path, work: Path, report: dict[str, Any]) -> None:
    available = [v.name for v in MATRIX.variants_for(ARCH) if v.name in built_names(report)]
    proc = run_python(["-m", "cpukern", "--json"], cwd=work, env=clean_env(CPUKERN_ISA="avx9000"))
    fails_cleanly(proc, "'avx9000' is not a variant of this arch", "available: " + ", ".join(available))
    assert json.loads(proc.stdout)["error"].startswith("CPUKERN_ISA=avx9000")


def test_disable(installed: Path, work: Path, report: dict[str, Any]) -> None:
    ranking = oracle_ranking(built_names(report))
    require_host(len(ranking) > 1, "only the baseline runs here")
    data = ok_json(run_python(["-m", "cpukern", "--json"], cwd=work, env=clean_env(CPUKERN_DISABLE_ISA=ranking[0])))
    assert data["selected"] == ranking[1] and data["disabled"] == [ranking[0]]
    everything_but_baseline = ",".join(ranking[:-1])
    data = ok_json(run_python(["-m", "cpukern", "--json"], cwd=work,
                              env=clean_env(CPUKERN_DISABLE_ISA=everything_but_baseline)))
    assert data["selected"] == MATRIX.baseline(ARCH).name
    proc = run_python(["-m", "cpukern"], cwd=work, env=clean_env(CPUKERN_DISABLE_ISA="avx9000"))
    fails_cleanly(proc, "CPUKERN_DISABLE_ISA=avx9000", "is not a variant")


def test_report_needs_no_numpy(installed: Path, work: Path, report: dict[str, Any]) -> None:
    """`python -m cpukern` must run where NumPy cannot import (a CPU without XSAVE)."""
    script = (
        "import sys, runpy\n"
        "sys.modules['numpy'] = sys.modules['torch'] = sys.modules['ml_dtypes'] = None\n"
        "sys.argv = ['cpukern', '--json']\n"
        "runpy.run_module('cpukern', run_name='__main__', alter_sys=True)\n"
    )
    data = ok_json(run_python(["-c", script], cwd=work))
    assert data["selected"] == report["selected"]


# ------------------------------------------------- partial and broken installs


@pytest.fixture
def package_copy(installed: Path, tmp_path: Path) -> Iterator[Path]:
    """A private copy of the installed package to break, importable via PYTHONPATH."""
    root = tmp_path / "site"
    shutil.copytree(installed, root / "cpukern", ignore=shutil.ignore_patterns("__pycache__"))
    yield root


def test_missing_library_file(package_copy: Path, report: dict[str, Any]) -> None:
    ranking = oracle_ranking(built_names(report))
    require_host(len(ranking) > 1, "only the baseline runs here")
    gone = ranking[0]
    (package_copy / "cpukern" / f"_cpukern_{gone}.so").unlink()
    env = clean_env(PYTHONPATH=str(package_copy))
    data = ok_json(run_python(["-m", "cpukern", "--json"], cwd=package_copy, env=env))
    assert data["selected"] == ranking[1]
    row = next(v for v in data["variants"] if v["name"] == gone)
    assert row["built"] is False and row["reason"] == "not built into this package"
    proc = run_python(["-m", "cpukern"], cwd=package_copy, env=clean_env(PYTHONPATH=str(package_copy), CPUKERN_ISA=gone))
    available = [v.name for v in MATRIX.variants_for(ARCH) if v.name in built_names(report) - {gone}]
    fails_cleanly(proc, f"'{gone}' is not built into this package", "available: " + ", ".join(available))


def test_missing_manifest_is_a_clean_error(package_copy: Path) -> None:
    (package_copy / "cpukern" / "_manifest.json").unlink()
    env = clean_env(PYTHONPATH=str(package_copy))
    assert run_python(["-c", "import cpukern"], cwd=package_copy, env=env).returncode == 0
    fails_cleanly(run_python(["-m", "cpukern"], cwd=package_copy, env=env), "cpukern is not built", "_manifest.json")


@pytest.mark.slow
def test_subset_build(work: Path) -> None:
    """`-C cmake.define.CPUBUILD_ISA=avx2` builds baseline + avx2 only; the others are known but not built."""
    require_host(ARCH == "x86_64", "x86_64 only")
    require_tool("cmake", "ninja")
    cache = Path(os.environ.get("CPUBUILD_CACHE", "/var/cache/cpubuild"))
    target = work / "subset"
    env = clean_env(CMAKE_C_COMPILER_LAUNCHER="ccache", CMAKE_CXX_COMPILER_LAUNCHER="ccache",
                    CMAKE_BUILD_PARALLEL_LEVEL="2")
    if shutil.which("ccache") is None:
        env = clean_env()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-build-isolation",
         "--no-deps", "--target", str(target), "-C", "cmake.define.CPUBUILD_ISA=avx2",
         "-C", f"build-dir={cache}/build-test-subset-avx2", str(REPO)],
        capture_output=True, text=True, timeout=900, env=env, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    libs = sorted(p.name for p in (target / "cpukern").glob("_cpukern_*.so"))
    assert libs == ["_cpukern_avx2.so", "_cpukern_baseline.so", "_cpukern_probe.so"]
    env = clean_env(PYTHONPATH=str(target))
    data = ok_json(run_python(["-m", "cpukern", "--json"], cwd=work, env=env))
    assert {v["name"] for v in data["variants"] if v["built"]} == {"baseline", "avx2"}
    assert data["selected"] == oracle_ranking({"baseline", "avx2"})[0]
    proc = run_python(["-m", "cpukern"], cwd=work, env=clean_env(PYTHONPATH=str(target), CPUKERN_ISA="avx512"))
    fails_cleanly(proc, "'avx512' is not built into this package", "available: baseline, avx2")
