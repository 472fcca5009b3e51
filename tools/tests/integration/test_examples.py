"""The examples/ projects, built and checked through cpubuild's public path only.

cpubuild comes from a non-editable install in a fresh venv (tools/tests/public_cpubuild.py);
each example is built there with `cpubuild wheel --project` (natively and for
aarch64, each wheel once per session), installed into fresh venvs and checked:
the variant picked against the independent CPU oracle (tools/tests/oracle.py), forced
variants, the example's own tests, the aarch64 wheel under QEMU cortex-a53 and
neoverse-n1 and the x86_64 wheel under QEMU Haswell (`cpubuild test`), and an
install from an index made by `cpubuild publish` and served by `cpubuild serve`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cpubuild.hardware import hardware
from cpubuild.matrix import Matrix, load_matrix
from oracle import ARCH, oracle_features, oracle_ranking
from public_cpubuild import UV, PublicCpubuild, clean_env, fresh_venv, public_cpubuild  # noqa: F401 (a fixture)
from testsupport import REPO, nested_pytest, require, require_host, require_tool, run, skip_host_fact

pytestmark = pytest.mark.slow

COMMIT = "e4a3" * 10  # the commit the index is keyed by (any 40 hex digits)


@dataclass(frozen=True)
class Example:
    dir: Path
    dist: str
    package: str
    prefix: str  # written down here, not read from the project: the contract must yield it

    @property
    def matrix(self) -> Matrix:
        return load_matrix(self.dir / "isa_matrix.toml")

    def runnable(self, arch: str, features: set[str] | frozenset[str]) -> list[str]:
        """Variants of `arch` a CPU with `features` runs, lowest priority first."""
        return [v.name for v in self.matrix.variants_for(arch) if set(v.requires) <= features]


EXAMPLES = {
    "dotlib": Example(dir=REPO / "examples" / "dotlib", dist="dotlib", package="dotlib", prefix="DOTLIB"),
    "vec-norm": Example(dir=REPO / "examples" / "vec-norm", dist="vec-norm", package="vecnorm", prefix="VNORM"),
}
QEMU_AARCH64 = ("cortex-a53", "neoverse-n1")


def qemu_model_features(arch: str, cpu: str) -> frozenset[str]:
    """What a QEMU CPU model has, from the hardware data (tools/tests/integration/test_emulated.py checks it against QEMU)."""
    return next(m.features for m in hardware().qemu[arch] if m.cpu == cpu)


# ------------------------------------------------------------------ session fixtures


@pytest.fixture(scope="session")
def build_wheel(public_cpubuild: PublicCpubuild, tmp_path_factory: pytest.TempPathFactory,  # noqa: F811
                ) -> Callable[[str, str], dict[str, Any]]:
    """(example, arch) -> the `cpubuild wheel --json` summary; each wheel is built once."""
    require_tool("cmake")
    root = tmp_path_factory.mktemp("example-wheels")
    built: dict[tuple[str, str], dict[str, Any]] = {}

    def build(name: str, arch: str) -> dict[str, Any]:
        if (name, arch) not in built:
            if arch != ARCH:
                require_tool(f"{hardware().arches[arch].triplet}-gcc", f"{hardware().arches[arch].triplet}-g++")
            _, summary = public_cpubuild.json(
                "wheel", "--project", str(EXAMPLES[name].dir), "--arch", arch, "--out", str(root / name / arch),
                "--build-root", str(root / "build" / name), cwd=root)
            assert summary["ok"] and summary["isolated"], summary  # scikit-build-core is not in the public venv
            built[name, arch] = summary
        return built[name, arch]

    return build


@pytest.fixture(scope="session")
def installed(build_wheel: Callable[[str, str], dict[str, Any]], tmp_path_factory: pytest.TempPathFactory,
              ) -> Callable[[str], Path]:
    """example -> the python of a fresh venv holding its native wheel (and pytest, numpy for its tests)."""
    pythons: dict[str, Path] = {}

    def install(name: str) -> Path:
        if name not in pythons:
            wheel = build_wheel(name, ARCH)["wheel"]["path"]
            # what the examples' tests import besides the package (dotlib checks itself against NumPy)
            pythons[name] = fresh_venv(tmp_path_factory.mktemp(f"venv-{name}") / "venv", wheel, "pytest", "numpy")
        return pythons[name]

    return install


def python_env(**extra: str) -> dict[str, str]:
    """A clean environment without any example's <PREFIX>_ISA settings."""
    prefixes = tuple(f"{e.prefix}_" for e in EXAMPLES.values())
    return {k: v for k, v in clean_env(**extra).items() if not k.startswith(prefixes) or k in extra}


def report(python: Path, example: Example, cwd: Path, *, wrap: list[str] | None = None, **env: str,
           ) -> subprocess.CompletedProcess[str]:
    """`python -m <package> --json` (under `wrap`, e.g. a QEMU command, when given)."""
    return run([*(wrap or []), str(python), "-m", example.package, "--json"], env=python_env(**env), cwd=cwd,
               check=False, timeout=300)


def assert_clean_failure(proc: subprocess.CompletedProcess[str], variant: str, missing: set[str]) -> None:
    """Exit 1, one error line on stderr that names the variant and every missing feature; no traceback, no signal."""
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("qemu-")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and variant in lines[0], lines[0]
    for feature in missing:
        assert feature in lines[0], (feature, lines[0])


# ------------------------------------------------------------------ native


@pytest.mark.parametrize("name", EXAMPLES)
def test_native_wheel_holds_every_variant(name: str, build_wheel: Callable[[str, str], dict[str, Any]]) -> None:
    example, summary = EXAMPLES[name], build_wheel(name, ARCH)
    assert sorted(summary["wheel"]["variants"]) == sorted(v.name for v in example.matrix.variants_for(ARCH))
    assert Path(summary["wheel"]["path"]).name.startswith(example.dist.replace("-", "_") + "-")
    if name == "vec-norm":  # static [project] version: cpubuild adds the ISA-set label (and +dirty for local changes)
        dirty = run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"]).stdout.strip()
        assert summary["version"] == ("0.4.0+dirty.cpu" if dirty else "0.4.0+cpu")


@pytest.mark.parametrize("name", EXAMPLES)
def test_selected_variant_is_the_oracles(name: str, installed: Callable[[str], Path], tmp_path: Path) -> None:
    example, python = EXAMPLES[name], installed(name)
    proc = report(python, example, tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    built = [v["name"] for v in data["variants"] if v["built"]]
    assert data["selected"] == oracle_ranking(example.matrix, built)[0]
    assert data["env_prefix"] == example.prefix and data["name"] == example.package
    where = run([str(python), "-c", f"import {example.package}; print({example.package}.__file__)"], env=python_env(),
                cwd=tmp_path).stdout.strip()
    assert str(python.parent.parent) in where, f"{example.package} imported from {where}, not the venv"


@pytest.mark.parametrize("name", EXAMPLES)
def test_forcing_the_baseline(name: str, installed: Callable[[str], Path], tmp_path: Path) -> None:
    example, python = EXAMPLES[name], installed(name)
    baseline = example.matrix.baseline(ARCH).name
    proc = report(python, example, tmp_path, **{f"{example.prefix}_ISA": baseline})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["selected"] == baseline and data["override"] == baseline
    code = f"import {example.package} as p; print(p.selected_isa())"
    assert run([str(python), "-c", code], env=python_env(**{f"{example.prefix}_ISA": baseline}),
               cwd=tmp_path).stdout.strip() == baseline


@pytest.mark.parametrize("name", EXAMPLES)
def test_forcing_a_variant_this_cpu_lacks_fails_cleanly(name: str, installed: Callable[[str], Path], tmp_path: Path) -> None:
    example, have = EXAMPLES[name], oracle_features()
    lacking = [v for v in example.matrix.variants_for(ARCH) if not set(v.requires) <= have]
    if not lacking:
        skip_host_fact(f"this CPU runs every {ARCH} variant of {name} (oracle: /proc/cpuinfo): nothing to force")
    variant = lacking[-1]
    proc = report(installed(name), example, tmp_path, **{f"{example.prefix}_ISA": variant.name})
    assert_clean_failure(proc, variant.name, set(variant.requires) - have)


@pytest.mark.qemu
@pytest.mark.parametrize("name", EXAMPLES)
def test_forcing_avx512_under_qemu_haswell_fails_cleanly(name: str, installed: Callable[[str], Path], tmp_path: Path) -> None:
    """The same refusal on a CPU that surely lacks AVX-512, whatever this host has."""
    require_host(ARCH == "x86_64", "runs the x86_64 venv's Python under qemu-x86_64")
    require_tool("qemu-x86_64-static")
    example, have = EXAMPLES[name], qemu_model_features("x86_64", "Haswell")
    variant = example.matrix.variant("x86_64", "avx512")
    proc = report(installed(name), example, tmp_path, wrap=["qemu-x86_64-static", "-cpu", "Haswell"],
                  **{f"{example.prefix}_ISA": "avx512"})
    assert_clean_failure(proc, "avx512", set(variant.requires) - have)


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_examples_own_tests_pass(name: str, installed: Callable[[str], Path]) -> None:
    example = EXAMPLES[name]
    proc = nested_pytest(installed(name), example.dir, env=python_env())
    assert "failed" not in proc.stdout and "error" not in proc.stdout.lower()


def test_cpubuild_bench_gives_dotlib_its_roofline(public_cpubuild: PublicCpubuild,  # noqa: F811
                                                  build_wheel: Callable[[str, str], dict[str, Any]], tmp_path: Path) -> None:
    """`cpubuild bench` on a project other than cpukern (dotlib's benchmark, written by `cpubuild init`): every
    variant the oracle says this CPU runs is timed and gets a measured peak for fp32 and int8, its bound and the
    cache level(s) that bound assumes. Structure only: the percentages are timings (the benchmark judges them)."""
    example = EXAMPLES["dotlib"]
    python = fresh_venv(tmp_path / "venv", *map(str, public_cpubuild.wheels), build_wheel("dotlib", ARCH)["wheel"]["path"])
    proc = run([str(python.parent / "cpubuild"), "bench", "--json"], cwd=example.dir, env=python_env(), check=False,
               timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout[proc.stdout.find("{"):])
    runnable = [v.name for v in example.matrix.variants_for(ARCH) if set(v.requires) <= oracle_features(ARCH)]
    assert {r["variant"] for r in out["records"]} == set(runnable)
    assert {(r["op"], r["dtype"]) for r in out["records"]} == {("dot_f32", "fp32"), ("dot_i8", "int8")}
    # every record is bounded at its own working set: a point measured for it, or a ladder rung of that size
    points = {b["bytes"]: b for b in out["limits"]["bandwidth"]}
    for record in out["records"]:
        assert record["bound"] in ("compute", "memory") and math.isfinite(record["pct_bound"]), record
        point = points[record["bytes"]]
        assert record["pct_bound"] > 0, record
        assert record["level"].endswith(" measured") if point["exact"] else record["level"] == point["level"], record
    peaks = {(p["variant"], p["dtype"]): p for p in out["limits"]["peaks"]}
    assert all(peaks[v, d]["ops_per_s"] > 0 for v in runnable for d in ("fp32", "int8"))


# ------------------------------------------------------------------ emulated


@pytest.fixture(scope="session")
def emulation_ready() -> None:
    require_host(ARCH == "x86_64", "the emulated runs need an x86_64 host")
    require(os.geteuid() == 0, "cpubuild test needs root for the aarch64 rootfs (debootstrap, chroot)")
    require_tool("qemu-aarch64-static", "qemu-x86_64-static", "debootstrap")
    require(Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").is_file(), "qemu-aarch64 binfmt handler not registered (scripts/setup.sh)")


@pytest.mark.qemu
@pytest.mark.cross
@pytest.mark.parametrize("cpu", QEMU_AARCH64)
@pytest.mark.parametrize("name", EXAMPLES)
def test_aarch64_wheel_under_qemu(name: str, cpu: str, emulation_ready: None, public_cpubuild: PublicCpubuild,  # noqa: F811
                                  build_wheel: Callable[[str, str], dict[str, Any]], tmp_path: Path) -> None:
    example, summary = EXAMPLES[name], build_wheel(name, "aarch64")
    assert sorted(summary["wheel"]["variants"]) == sorted(v.name for v in example.matrix.variants_for("aarch64"))
    runs = example.runnable("aarch64", qemu_model_features("aarch64", cpu))
    code, outcome = public_cpubuild.json("test", "--arch", "aarch64", "--cpu", cpu, "--expect", "auto",
                                         summary["wheel"]["path"], cwd=tmp_path, check=False, timeout=1200)
    assert code == 0 and outcome["ok"], outcome
    assert outcome["selected"] == runs[-1]
    assert outcome["checks"] is not None, outcome["checks_skipped"]
    assert outcome["checks"]["failed"] == 0 and outcome["checks"]["passed"] > 0
    assert outcome["checks"]["variants"] == runs


@pytest.mark.qemu
@pytest.mark.parametrize("name", EXAMPLES)
def test_x86_64_wheel_under_qemu_haswell(name: str, public_cpubuild: PublicCpubuild,  # noqa: F811
                                         build_wheel: Callable[[str, str], dict[str, Any]], tmp_path: Path) -> None:
    require_host(ARCH == "x86_64", "runs the x86_64 wheel under qemu-x86_64")
    require_tool("qemu-x86_64-static")
    example, summary = EXAMPLES[name], build_wheel(name, "x86_64")
    runs = example.runnable("x86_64", qemu_model_features("x86_64", "Haswell"))
    wheelhouse = Path(summary["wheel"]["path"]).parent
    # the project's newest wheel from a wheelhouse, as a user runs it after `cpubuild wheel`
    code, outcome = public_cpubuild.json("test", "--project", str(example.dir), "--wheelhouse", str(wheelhouse),
                                         "--arch", "x86_64", "--cpu", "Haswell", "--expect", "auto",
                                         cwd=tmp_path, check=False, timeout=1200)
    assert code == 0 and outcome["ok"], outcome
    assert outcome["selected"] == runs[-1] == "avx2"
    # the public venv has no NumPy; the examples' selftests need none, so they run
    assert outcome["checks"] is not None, outcome["checks_skipped"]
    assert outcome["checks"]["failed"] == 0 and outcome["checks"]["variants"] == runs


# ------------------------------------------------------------------ publish, serve, install


@pytest.fixture(scope="module")
def index_url(public_cpubuild: PublicCpubuild, build_wheel: Callable[[str, str], dict[str, Any]],  # noqa: F811
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Both examples' native wheels published under COMMIT, served by `cpubuild serve --port 0`."""
    root = tmp_path_factory.mktemp("examples-index")
    wheels = [build_wheel(name, ARCH)["wheel"]["path"] for name in EXAMPLES]
    _, published = public_cpubuild.json("publish", *wheels, "--to", str(root / "index"), "--commit", COMMIT, cwd=root)
    assert sorted(published["stored"]) == sorted(Path(w).name for w in wheels), published
    with public_cpubuild.serve(root / "index") as base:
        yield f"{base}{COMMIT}/cpu/"


@pytest.mark.parametrize("name", EXAMPLES)
def test_install_from_the_published_index(name: str, index_url: str, build_wheel: Callable[[str, str], dict[str, Any]],
                                          tmp_path: Path) -> None:
    example = EXAMPLES[name]
    # only the served index: no other index configuration, an empty cache
    env = {k: v for k, v in python_env().items() if not k.startswith(("UV_", "PIP_"))}
    env.update(UV_CACHE_DIR=str(tmp_path / "uv-cache"), UV_NO_CONFIG="1", UV_PYTHON_DOWNLOADS="never")
    python = fresh_venv(tmp_path / "venv", env=env)
    run([*UV, "pip", "install", "--python", str(python), example.dist, "--index-url", index_url],
        env=env, cwd=tmp_path, timeout=600)
    version = run([str(python), "-c", f"import importlib.metadata as m; print(m.version({example.dist!r}))"],
                  env=python_env(), cwd=tmp_path).stdout.strip()
    assert version == build_wheel(name, ARCH)["version"]
    proc = report(python, example, tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["selected"] == oracle_ranking(example.matrix, [v["name"] for v in data["variants"] if v["built"]])[0]
