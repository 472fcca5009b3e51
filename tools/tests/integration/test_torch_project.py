"""A torch extension project (examples/torch_ops, `cpubuild init --kind torch`), built and used as a user does.

cpubuild comes from its wheel, installed non-editable into a fresh venv together
with scikit-build-core and the same torch as this Python's (a torch project
builds against the torch of its environment, without isolation, as vLLM does).
It builds examples/torch_ops natively (torch 2.13), natively against another
release (--torch 2.12.0: that release's wheel is downloaded) and for aarch64
(--torch 2.9.1, PyPI's aarch64 CPU build). The native wheel goes into fresh
venvs with torch: every variant this CPU runs, forced one per process, matches
torch's eager ops; the default pick is the CPU oracle's; a variant the CPU
lacks fails with the missing features named and its library never mapped
(natively when this CPU lacks one, and always under QEMU Haswell);
torch.compile(fullgraph=True) traces the ops; uv refuses the wheel next to
torch 2.12 because of the pin; one index keeps the torch builds apart. The
aarch64 wheel runs under QEMU cortex-a53 and neoverse-n1 with the aarch64 torch
installed in the cached rootfs (`cpubuild test`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cpubuild.hardware import hardware
from cpubuild.matrix import Matrix, load_matrix
from cpubuild.torchdist import release_wheel
from oracle import ARCH, oracle_features, oracle_ranking
from public_cpubuild import UV, PublicCpubuild, clean_env, fresh_venv, public_cpubuild  # noqa: F401 (a fixture)
from testsupport import REPO, nested_pytest, require, require_host, require_tool, run, skip_host_fact

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "torch_ops"
PACKAGE, PREFIX, NAMESPACE = "torch_ops", "TORCH_OPS", "torch_ops"
OTHER_TORCH = "2.12.0"  # an older release, built against from its downloaded wheel
AARCH64_TORCH = "2.9.1"  # PyPI's aarch64 torch of this release is a CPU build
COMMIT = "7c4d" * 10


def host_torch() -> str:
    """This Python's torch (2.13.0+cpu): the venvs get the same release."""
    try:
        import importlib.metadata

        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("torch is not installed for the test runner's Python (scripts/setup.sh installs it)")


def pip_find_links() -> list[str]:
    """The find-links directories this machine's pip configuration names (uv does not read pip's)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    links: list[str] = []
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("find-links"):
            links += [p for p in value.strip("'\"").split() if Path(p).is_dir()]
    return links


def torch_requirement() -> list[str]:
    """uv arguments that install this Python's torch release."""
    return [f"torch=={host_torch().split('+', 1)[0]}", *(arg for d in pip_find_links() for arg in ("--find-links", d))]


def env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in clean_env(**extra).items() if not k.startswith(f"{PREFIX}_") or k in extra}


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(EXAMPLE / "isa_matrix.toml")


@pytest.fixture(scope="module")
def torch_cpubuild(public_cpubuild: PublicCpubuild, tmp_path_factory: pytest.TempPathFactory) -> PublicCpubuild:  # noqa: F811
    """`pip install cpubuild scikit-build-core torch`: what the example's README asks for."""
    root = tmp_path_factory.mktemp("torch-cpubuild")
    fresh_venv(root / "venv", *map(str, public_cpubuild.wheels), "scikit-build-core", *torch_requirement())
    return PublicCpubuild(venv=root / "venv", wheels=public_cpubuild.wheels)


@pytest.fixture(scope="module")
def build(torch_cpubuild: PublicCpubuild, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., dict[str, Any]]:
    """(arch, torch) -> the `cpubuild wheel --json` summary; each wheel built once."""
    require_tool("cmake")
    root = tmp_path_factory.mktemp("torch-wheels")
    built: dict[tuple[str, str | None], dict[str, Any]] = {}

    def wheel(arch: str = ARCH, torch: str | None = None) -> dict[str, Any]:
        if (arch, torch) not in built:
            if arch != ARCH:
                require_tool(f"{hardware().arches[arch].triplet}-g++")
            extra = ["--torch", torch] if torch else []
            _, summary = torch_cpubuild.json("wheel", "--project", str(EXAMPLE), "--arch", arch, *extra,
                                             "--out", str(root / "out" / arch), "--build-root", str(root / "build"), cwd=root)
            assert summary["ok"], summary
            built[arch, torch] = summary
        return built[arch, torch]

    return wheel


@pytest.fixture(scope="module")
def python(build: Callable[..., dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the native wheel, this Python's torch and pytest."""
    wheel = build()["wheel"]["path"]
    return fresh_venv(tmp_path_factory.mktemp("torch-venv") / "venv", wheel, "pytest", *torch_requirement())


def run_in(python: Path, code: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return run([str(python), "-c", code], env=env(**extra), cwd=cwd, check=False, timeout=600)


def metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode()


def needed(data: bytes) -> list[str]:
    """DT_NEEDED of an ELF file's bytes."""
    import io

    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    dynamic = ELFFile(io.BytesIO(data)).get_section_by_name(".dynamic")
    assert isinstance(dynamic, DynamicSection)
    return [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]


# ------------------------------------------------------------------ the wheel


def test_native_wheel_pins_torch_and_carries_no_libtorch(build: Callable[..., dict[str, Any]], matrix: Matrix) -> None:
    summary = build()
    wheel = Path(summary["wheel"]["path"])
    minor = ".".join(host_torch().split(".")[:2])
    label = "pt" + minor.replace(".", "")
    assert sorted(summary["wheel"]["variants"]) == sorted(v.name for v in matrix.variants_for(ARCH))
    # +<local>.cpu.pt213 (git builds) or +cpu.pt213; tags: every Python 3, no CPython ABI, a manylinux <= torch's 2_28
    assert f"cpu.{label}-py3-none-manylinux_" in wheel.name, wheel.name
    glibc = wheel.name.split("-py3-none-manylinux_")[1].split("_")[:2]
    assert (int(glibc[0]), int(glibc[1])) <= (2, 28), wheel.name
    assert f"Requires-Dist: torch=={minor}.*" in metadata(wheel).splitlines()
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert not [n for n in names if "libtorch" in n or "libc10" in n or "libgomp" in n or ".libs/" in n], names
        variants = [n for n in names if n.startswith(f"{PACKAGE}/_{PACKAGE}_") and "_probe" not in n]
        assert len(variants) == len(summary["wheel"]["variants"])
        manifest = json.loads(archive.read(f"{PACKAGE}/_manifest.json"))
        for name in variants:
            libs = needed(archive.read(name))
            assert "libtorch_cpu.so" in libs and "libc10.so" in libs, (name, libs)
            assert not [lib for lib in libs if lib.startswith("libpython")], (name, libs)  # py3-none is honest
    assert manifest["kind"] == "torch" and manifest["torch"].startswith(minor + ".")


def test_another_torch_release_gets_its_own_label(build: Callable[..., dict[str, Any]]) -> None:
    """--torch 2.12.0 natively: built against that release's downloaded wheel, labelled and pinned for it."""
    summary = build(ARCH, OTHER_TORCH)
    wheel = Path(summary["wheel"]["path"])
    assert ".cpu.pt212-py3-none-" in wheel.name
    assert "Requires-Dist: torch==2.12.*" in metadata(wheel).splitlines()
    assert Path(build()["wheel"]["path"]).name != wheel.name


def test_partials_merge_into_the_native_wheel_byte_for_byte(build: Callable[..., dict[str, Any]],
                                                             torch_cpubuild: PublicCpubuild, matrix: Matrix,
                                                             tmp_path: Path) -> None:
    """`cpubuild merge` (docs/scale-out.md): the variants built as two partial wheels, as two runners would."""
    single = Path(build()["wheel"]["path"])
    names = [v.name for v in matrix.variants_for(ARCH)][1:]
    partials = []
    for i, group in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
        _, summary = torch_cpubuild.json("wheel", "--project", str(EXAMPLE), "--isa", ",".join(group),
                                         "--out", str(tmp_path / f"part{i}"), "--build-root", str(single.parent.parent.parent / "build"),
                                         cwd=tmp_path)
        partials.append(summary["wheel"]["path"])
    _, merged = torch_cpubuild.json("merge", *partials, "--out", str(tmp_path / "merged"), cwd=tmp_path)
    assert Path(merged["wheel"]).name == single.name
    assert Path(merged["wheel"]).read_bytes() == single.read_bytes()


# ------------------------------------------------------------------ installed


def test_default_pick_is_the_oracles(python: Path, matrix: Matrix, tmp_path: Path) -> None:
    proc = run([str(python), "-m", PACKAGE, "--json"], env=env(), cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    built = [v["name"] for v in report["variants"] if v["built"]]
    assert report["selected"] == oracle_ranking(matrix, built)[0]
    assert report["env_prefix"] == PREFIX


PROBE_RUN = f"""
import json, torch, {PACKAGE}
from {PACKAGE}.selftest import run
result = run()
maps = open("/proc/self/maps").read()
result["mapped"] = sorted({{line.split()[-1].rsplit("/", 1)[-1] for line in maps.splitlines() if "_{PACKAGE}_" in line}})
result["ops"] = sorted(name for name in dir(torch.ops.{NAMESPACE}) if not name.startswith("_"))
print(json.dumps(result))
"""


def test_every_variant_this_cpu_runs_matches_torch(python: Path, matrix: Matrix, tmp_path: Path) -> None:
    """Forced one per process: the selftest (float32 + bfloat16 vs torch eager) passes, the
    ops are registered under the package's namespace, and only that variant is mapped."""
    runs = [v.name for v in matrix.variants_for(ARCH) if set(v.requires) <= oracle_features()]
    assert runs, "the oracle says this CPU runs no variant at all"
    for variant in runs:
        proc = run_in(python, PROBE_RUN, tmp_path, **{f"{PREFIX}_ISA": variant})
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout)
        assert result["variant"] == variant and result["failed"] == 0 and result["passed"] > 0, result["failures"]
        assert {"rms_norm", "silu_and_mul"} <= set(result["ops"]), result["ops"]
        assert result["mapped"] == sorted([f"_{PACKAGE}_probe.so", f"_{PACKAGE}_{variant}.so"]), result["mapped"]


LACKING_RUN = f"""
import json, torch, {PACKAGE}
try:
    {PACKAGE}.rms_norm(torch.ones(2, 8), torch.ones(8))
    error = None
except {PACKAGE}.UnsupportedISAError as exc:
    error = str(exc)
maps = open("/proc/self/maps").read()
print(json.dumps({{"error": error, "mapped": [l.split()[-1] for l in maps.splitlines() if "_{PACKAGE}_" in l]}}))
"""


def assert_refused(proc: subprocess.CompletedProcess[str], variant: str, missing: set[str]) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]  # no SIGILL, no traceback: the import worked, the call raised
    result = json.loads(proc.stdout)
    assert result["error"] and variant in result["error"], result
    for feature in missing:
        assert feature in result["error"], (feature, result["error"])
    assert not [m for m in result["mapped"] if f"_{PACKAGE}_{variant}." in m], result["mapped"]
    assert {Path(m).name for m in result["mapped"]} == {f"_{PACKAGE}_probe.so"}, result["mapped"]


def test_a_variant_this_cpu_lacks_is_refused_and_never_loaded(python: Path, matrix: Matrix, tmp_path: Path) -> None:
    have = oracle_features()
    lacking = [v for v in matrix.variants_for(ARCH) if not set(v.requires) <= have]
    if not lacking:
        skip_host_fact(f"this CPU runs every {ARCH} variant of torch_ops (oracle): nothing to force natively")
    variant = lacking[-1]
    proc = run_in(python, LACKING_RUN, tmp_path, **{f"{PREFIX}_ISA": variant.name})
    assert_refused(proc, variant.name, set(variant.requires) - have)


@pytest.mark.qemu
def test_avx512bf16_under_qemu_haswell_is_refused_and_never_loaded(python: Path, matrix: Matrix, tmp_path: Path) -> None:
    """The same on a CPU that surely lacks AVX-512, whatever this host has: the venv's Python
    (and torch) under qemu-x86_64 -cpu Haswell."""
    require_host(ARCH == "x86_64", "runs the x86_64 venv's Python under qemu-x86_64")
    require_tool("qemu-x86_64-static")
    haswell = next(m.features for m in hardware().qemu["x86_64"] if m.cpu == "Haswell")
    variant = matrix.variant("x86_64", "avx512bf16")
    proc = run(["qemu-x86_64-static", "-cpu", "Haswell", str(python), "-c", LACKING_RUN],
               env=env(**{f"{PREFIX}_ISA": "avx512bf16"}), cwd=tmp_path, check=False, timeout=900)
    assert_refused(proc, "avx512bf16", set(variant.requires) - haswell)


def test_torch_compile_fullgraph(python: Path, tmp_path: Path) -> None:
    """Inductor traces through the ops (their fake implementations) without a graph break."""
    code = f"""
import json, torch, {PACKAGE}
def block(x, w):
    return {PACKAGE}.silu_and_mul({PACKAGE}.rms_norm(x, w, 1e-6)) * 2
x, w = torch.randn(16, 512, dtype=torch.bfloat16), torch.rand(512, dtype=torch.bfloat16)
compiled = torch.compile(block, fullgraph=True)
torch.testing.assert_close(compiled(x, w), block(x, w))
torch._dynamo.reset()
explained = torch._dynamo.explain(block)(x, w)
print(json.dumps({{"graphs": explained.graph_count, "breaks": explained.graph_break_count}}))
"""
    proc = run_in(python, code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"graphs": 1, "breaks": 0}


def test_the_examples_own_tests_pass(python: Path, matrix: Matrix) -> None:
    runs_all = all(set(v.requires) <= oracle_features() for v in matrix.variants_for(ARCH))
    proc = nested_pytest(python, EXAMPLE, env=env(), args=("-rA",), timeout=900,
                         host_facts=["this CPU runs every built variant"] if runs_all else [])  # the oracle agrees
    assert "PASSED tests/test_torch_ops.py::test_torch_compile_fullgraph" in proc.stdout


# ------------------------------------------------------------------ installers and indexes


@pytest.fixture(scope="module")
def torch_212_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv where torch 2.12 is present: PyPI's 2.12.0 wheel (cached by cpubuild), unpacked by uv."""
    root = tmp_path_factory.mktemp("torch-212")
    wheel = release_wheel(OTHER_TORCH, f"manylinux_2_28_{ARCH}")  # no dependencies: present is enough here
    python = fresh_venv(root / "venv")
    run([*UV, "pip", "install", "-q", "--python", str(python), "--no-deps", str(wheel)], env=clean_env(), cwd=root)
    return python


def installed_torch(python: Path) -> str:
    return run([str(python), "-c", "from importlib.metadata import version; print(version('torch'))"], env=env(),
               cwd=python.parent).stdout.strip()


def test_uv_refuses_the_wheel_next_to_another_torch(build: Callable[..., dict[str, Any]], torch_212_venv: Path,
                                                     tmp_path: Path) -> None:
    """torch 2.12 present, the wheel built for 2.13: the pin makes uv refuse, whether the
    environment's torch is held by a constraint or no other torch can be found. (uv accepting
    the matching pair: the venvs above and test_one_index_keeps_the_torch_builds_apart.)"""
    wheel = build()["wheel"]["path"]
    minor = ".".join(host_torch().split(".")[:2])
    constraint = tmp_path / "constraints.txt"
    constraint.write_text(f"torch=={OTHER_TORCH}\n")
    held = run([*UV, "pip", "install", "--python", str(torch_212_venv), "--constraint", str(constraint), wheel],
               env=clean_env(), cwd=tmp_path, check=False)
    offline = run([*UV, "pip", "install", "--python", str(torch_212_venv), "--offline", "--no-index", wheel],
                  env=clean_env(), cwd=tmp_path, check=False)
    for proc in (held, offline):
        assert proc.returncode != 0, proc.stdout + proc.stderr
        # refused for the pin, not for anything about torch 2.12 itself (it is present without its CUDA packages)
        said = " ".join(proc.stderr.split())  # uv wraps its explanation at a width (a long version moves the break)
        assert f"depends on torch=={minor}.*" in said and "unsatisfiable" in said, proc.stderr
        assert "cuda" not in proc.stderr.lower(), proc.stderr
    assert installed_torch(torch_212_venv) == OTHER_TORCH
    listed = run([*UV, "pip", "list", "--python", str(torch_212_venv)], env=clean_env(), cwd=tmp_path).stdout
    assert PACKAGE.replace("_", "-") not in listed


@pytest.fixture(scope="module")
def index_url(torch_cpubuild: PublicCpubuild, build: Callable[..., dict[str, Any]],
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("torch-index")
    wheels = [build()["wheel"]["path"], build(ARCH, OTHER_TORCH)["wheel"]["path"]]
    _, published = torch_cpubuild.json("publish", *wheels, "--to", str(root / "index"), "--commit", COMMIT, cwd=root)
    assert sorted(published["stored"]) == sorted(Path(w).name for w in wheels), published
    with torch_cpubuild.serve(root / "index") as base:
        yield f"{base}{COMMIT}/cpu/"


def test_one_index_keeps_the_torch_builds_apart(index_url: str, build: Callable[..., dict[str, Any]],
                                                tmp_path: Path) -> None:
    """Both builds on one project page; in an environment with torch 2.13 uv resolves the
    2.13 build, although the 2.12 one is on the same page."""
    import urllib.request

    with urllib.request.urlopen(f"{index_url}torch-ops/") as page:
        html = page.read().decode()
    for summary in (build(), build(ARCH, OTHER_TORCH)):
        assert Path(summary["wheel"]["path"]).name in html
    python = fresh_venv(tmp_path / "venv", *torch_requirement())
    proc = run([*UV, "pip", "install", "--python", str(python), "--dry-run", "torch-ops", "--index-url", index_url],
               env=clean_env(), cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    chosen = [line for line in proc.stderr.splitlines() if line.strip().startswith("+ torch-ops==")]
    assert chosen and chosen[0].strip().endswith(".cpu.pt" + "".join(host_torch().split(".")[:2])), proc.stderr


# ------------------------------------------------------------------ aarch64


@pytest.mark.qemu
@pytest.mark.cross
@pytest.mark.parametrize(("cpu", "expect"), [("cortex-a53", "neon"), ("neoverse-n1", "neon_dotprod")])
def test_aarch64_wheel_under_qemu(cpu: str, expect: str, torch_cpubuild: PublicCpubuild,
                                  build: Callable[..., dict[str, Any]], tmp_path: Path) -> None:
    require_host(ARCH == "x86_64", "the emulated runs need an x86_64 host")
    require(os.geteuid() == 0, "cpubuild test needs root for the aarch64 rootfs (debootstrap, chroot)")
    require_tool("qemu-aarch64-static", "debootstrap")
    summary = build("aarch64", AARCH64_TORCH)
    wheel = Path(summary["wheel"]["path"])
    assert ".cpu.pt29-py3-none-manylinux_" in wheel.name and wheel.name.endswith("_aarch64.whl")
    assert "Requires-Dist: torch==2.9.*" in metadata(wheel).splitlines()
    code, outcome = torch_cpubuild.json("test", "--arch", "aarch64", "--cpu", cpu, "--expect", "auto", str(wheel),
                                        cwd=tmp_path, check=False, timeout=1800)
    assert code == 0 and outcome["ok"], outcome
    assert outcome["selected"] == expect
    assert outcome["checks"] is not None and outcome["checks"]["failed"] == 0 and outcome["checks"]["passed"] > 0


# ------------------------------------------------------------------ bad input


def test_a_torch_release_that_does_not_exist(torch_cpubuild: PublicCpubuild, tmp_path: Path) -> None:
    proc = torch_cpubuild.cli("wheel", "--project", str(EXAMPLE), "--torch", "9.9.9", "--build-root",
                              str(tmp_path / "build"), "--out", str(tmp_path / "out"), cwd=tmp_path, check=False)
    assert_one_line_error(proc, "--torch 9.9.9: no such torch release")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_torch_project_without_torch(public_cpubuild: PublicCpubuild, tmp_path: Path) -> None:  # noqa: F811
    """The plain public venv has no torch: the build stops before anything runs."""
    proc = public_cpubuild.cli("wheel", "--project", str(EXAMPLE), "--build-root", str(tmp_path / "build"),
                               "--out", str(tmp_path / "out"), cwd=tmp_path, check=False)
    assert_one_line_error(proc, "has no torch")
    assert "--torch X.Y.Z" in proc.stderr


def assert_one_line_error(proc: subprocess.CompletedProcess[str], message: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    # progress lines of the step that failed (cpubuild.progress) may come first; the error is one line, the last
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0] and message in errors[0], proc.stderr
    assert all(line.startswith(("error: ", "pip download ")) for line in lines), proc.stderr
    assert "Traceback" not in proc.stderr
