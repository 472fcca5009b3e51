"""`cpubuild image` against a real Docker daemon (no registry, nothing pulled).

The amd64 runtime image compiles its wheel in the build stage; the arm64 one is
assembled from a wheel cross-compiled on the host and runs under QEMU. What the
images must select comes from an oracle independent of cpukern: this host's
/proc/cpuinfo flags (tools/tests/oracle.py) and, for arm64, QEMU's default `max`
CPU, which has every feature.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cpubuild.docker.base import base_tag
from cpubuild.hardware import hardware
from cpubuild.matrix import Matrix, load_matrix
from oracle import oracle_features
from testsupport import CPUKERN_MATRIX, REPO, require, require_host, require_tool

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MATRIX: Matrix = load_matrix(CPUKERN_MATRIX)
TAG = "cpubuild-test/cpukern"
COMPILERS = ("gcc", "cc", "g++", "c++", "clang")


# ------------------------------------------------------------------ helpers


def cpubuild(*args: str, timeout: float = 2400, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", *args]
    environment = dict(os.environ, PYTHONPATH=str(REPO / "tools"), **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=environment)


def docker_run(image: str, *args: str, env: dict[str, str] | None = None, entrypoint: str | None = None, user: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ["docker", "run", "--rm", "--network", "host"]
    for key, value in (env or {}).items():
        cmd += ["-e", f"{key}={value}"]
    if entrypoint is not None:
        cmd += ["--entrypoint", entrypoint]
    if user is not None:
        cmd += ["--user", user]
    return subprocess.run([*cmd, image, *args], capture_output=True, text=True, timeout=600)


def built_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, f"cpubuild image exited {proc.returncode}\n{proc.stderr[-6000:]}"
    assert "Traceback" not in proc.stderr
    (image,) = json.loads(proc.stdout)["images"]
    assert isinstance(image, dict)
    return image


def cpuinfo_features() -> set[str]:
    """The x86 features this host has, by the oracle (tools/tests/oracle.py)."""
    return oracle_features("x86_64")


def expected_best(arch: str, features: set[str] | None, built: set[str]) -> str:
    """Highest-priority built variant whose requirements the CPU meets (None: all)."""
    runnable = [v for v in MATRIX.variants_for(arch) if v.name in built and (features is None or set(v.requires) <= features)]
    return runnable[-1].name


# ------------------------------------------------------------------ fixtures


def _daemon_up() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


@pytest.fixture(scope="session")
def daemon() -> None:
    """A reachable daemon; started here (as scripts/setup.sh does) when it is not running."""
    require_tool("docker")
    require(shutil.which("dockerd") is not None or _daemon_up(), "dockerd is not installed (run scripts/setup.sh)")
    if not _daemon_up() and os.geteuid() == 0 and "DOCKER_HOST" not in os.environ:
        with open("/var/log/dockerd.log", "ab") as log:
            subprocess.Popen(["dockerd"], stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _daemon_up():
            time.sleep(0.5)
    require(_daemon_up(), "the Docker daemon is not reachable (run scripts/setup.sh)")


@pytest.fixture(scope="session")
def amd64_runtime(daemon: None) -> dict[str, Any]:
    require(os.uname().machine == "x86_64", "the amd64 image compiles natively: needs an x86_64 host")
    return built_json(cpubuild("image", "--platform", "linux/amd64", "--tag", f"{TAG}:runtime-amd64", "--json"))


@pytest.fixture(scope="session")
def arm64_runtime(daemon: None) -> dict[str, Any]:
    require_tool("aarch64-linux-gnu-g++")
    require(Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists(), "qemu-aarch64 binfmt is not registered (scripts/setup.sh)")
    return built_json(cpubuild("image", "--platform", "linux/arm64", "--tag", f"{TAG}:runtime-arm64", "--json"))


@pytest.fixture(scope="session")
def amd64_build(amd64_runtime: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """The build stage (from the runtime build's layer cache when the tree is
    unchanged) and the wheel it made, copied out with --output like buildx's
    --output of the `wheel` stage."""
    out = tmp_path_factory.mktemp("amd64-wheel")
    image = built_json(cpubuild("image", "--platform", "linux/amd64", "--target", "build", "--tag", f"{TAG}:build-amd64", "--output", str(out), "--json"))
    (wheel,) = out.glob("*.whl")
    return image, wheel


@pytest.fixture()
def hostile_wheel(tmp_path: Path) -> Iterator[Path]:
    """A wheel whose manifest is fine but one member escapes the install folder."""
    path = tmp_path / "cpukern-0.1.0-py3-none-linux_x86_64.whl"
    variants = [v.name for v in MATRIX.variants_for("x86_64")]
    manifest = {"arch": "x86_64", "variants": [{"name": v, "library": f"_cpukern_{v}.so"} for v in variants]}
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("cpukern/_manifest.json", json.dumps(manifest))
        for v in variants:
            zf.writestr(f"cpukern/_cpukern_{v}.so", b"\x7fELF")
        zf.writestr("../../etc/cpukern-escape", b"outside")
    yield path


# ------------------------------------------------------------------ amd64


def test_amd64_runtime_selects_what_the_cpu_supports(amd64_runtime: dict[str, Any]) -> None:
    proc = docker_run(amd64_runtime["tag"], "python3", "-m", "cpukern", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    built = {v["name"] for v in report["variants"] if v["built"]}
    assert built == {v.name for v in MATRIX.variants_for("x86_64")}  # the default image holds every variant
    assert report["selected"] == expected_best("x86_64", cpuinfo_features(), built)
    assert amd64_runtime["selected"] == report["selected"]  # cpubuild's own smoke test agrees
    assert amd64_runtime["platform"] == "linux/amd64" and amd64_runtime["variants"] == "all"
    assert amd64_runtime["wheel_source"] == "build stage"  # compiled inside the image build


def test_amd64_runtime_honours_and_checks_cpukern_isa(amd64_runtime: dict[str, Any]) -> None:
    features = cpuinfo_features()
    runs = [v.name for v in MATRIX.variants_for("x86_64") if set(v.requires) <= features]
    require_host("avx2" in runs, "this host cannot run avx2")
    forced = docker_run(amd64_runtime["tag"], "python3", "-m", "cpukern", "--json", env={"CPUKERN_ISA": "avx2"})
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["selected"] == "avx2"
    lacking = [v for v in MATRIX.variants_for("x86_64") if not set(v.requires) <= features]
    require_host(bool(lacking), "this host runs every x86 variant: nothing to refuse")
    refused = docker_run(amd64_runtime["tag"], "python3", "-m", "cpukern", env={"CPUKERN_ISA": lacking[0].name})
    assert refused.returncode == 1
    assert f"CPUKERN_ISA={lacking[0].name}" in refused.stderr and "missing features" in refused.stderr
    assert "Traceback" not in refused.stderr + refused.stdout


def test_amd64_runtime_is_slim_non_root_and_tuned(amd64_runtime: dict[str, Any]) -> None:
    tag = amd64_runtime["tag"]
    probe = docker_run(tag, "sh", "-c", f"id -u; for c in {' '.join(COMPILERS)}; do command -v $c; done; true")
    assert probe.returncode == 0, probe.stderr
    lines = probe.stdout.split()
    assert lines[0] != "0", "the runtime image must not run as root"
    assert lines[1:] == [], f"compilers on the PATH: {lines[1:]}"
    inspect = json.loads(subprocess.run(["docker", "image", "inspect", tag], capture_output=True, text=True, check=True).stdout)[0]
    config = inspect["Config"]
    assert config["Healthcheck"]["Test"] == ["CMD", "python3", "-m", "cpukern"]
    preload = dict(e.split("=", 1) for e in config["Env"])["LD_PRELOAD"]
    assert "tcmalloc" in preload
    # the preloaded file is really there, and really loaded into the process
    maps = docker_run(tag, "python3", "-c", "print(open('/proc/self/maps').read())")
    assert maps.returncode == 0 and "libtcmalloc_minimal" in maps.stdout
    assert "warning" not in maps.stderr


def test_missing_tcmalloc_is_a_warning_not_a_crash(amd64_runtime: dict[str, Any]) -> None:
    script = "rm -f /usr/lib/*/libtcmalloc_minimal.so.4* && exec /usr/local/bin/cpubuild-entrypoint python3 -m cpukern --json"
    proc = docker_run(amd64_runtime["tag"], "-c", script, entrypoint="/bin/sh", user="root")
    assert proc.returncode == 0, proc.stderr
    assert "entrypoint: warning: LD_PRELOAD names /usr/local/lib/libtcmalloc_minimal.so.4, which is missing" in proc.stderr
    assert json.loads(proc.stdout)["selected"] == amd64_runtime["selected"]


def test_build_stage_exports_the_wheel_it_compiled(amd64_build: tuple[dict[str, Any], Path]) -> None:
    image, wheel = amd64_build
    assert image["target"] == "build" and image["selected"] is None  # no smoke test in the build stage
    assert wheel.name.endswith("_x86_64.whl") and "manylinux" in wheel.name
    with zipfile.ZipFile(wheel) as zf:
        libraries = {n for n in zf.namelist() if n.startswith("cpukern/_cpukern_") and not n.endswith("probe.so")}
    assert len(libraries) == len(MATRIX.variants_for("x86_64"))
    compilers = docker_run(image["tag"], "sh", "-c", "command -v g++ cmake")
    assert compilers.returncode == 0 and "g++" in compilers.stdout  # the build stage does have them


def test_test_stage_runs_the_package_checks_in_the_image(amd64_build: tuple[dict[str, Any], Path]) -> None:
    """--target test from a given wheel: no compiling; the image build runs
    python3 -m cpukern.selftest, and the image keeps NumPy for reruns."""
    _, wheel = amd64_build
    image = built_json(cpubuild("image", "--wheel", str(wheel), "--target", "test", "--tag", f"{TAG}:test-amd64", "--json"))
    assert image["wheel_source"] == "given" and image["target"] == "test"
    proc = docker_run(image["tag"], "python3", "-m", "cpukern.selftest", "--json", "--selected-only")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["failed"] == 0 and result["passed"] > 0
    assert result["variant"] == image["selected"]


def test_failing_step_names_stage_and_shows_its_log(daemon: None, hostile_wheel: Path) -> None:
    proc = cpubuild("image", "--wheel", str(hostile_wheel), "--tag", f"{TAG}:hostile", "--no-smoke")
    assert proc.returncode == 1
    assert "failed in stage 'build'" in proc.stderr
    assert "escapes the install directory" in proc.stderr  # the tail of the failing step's output
    assert "full log:" in proc.stderr and "Traceback" not in proc.stderr
    assert subprocess.run(["docker", "image", "inspect", f"{TAG}:hostile"], capture_output=True).returncode != 0


def test_image_from_partial_wheels_merges_them_and_compiles_nothing(daemon: None, tmp_path: Path) -> None:
    """The partial wheels of a fanned-out build (docs/scale-out.md), given as several --wheel
    for one platform: merged on the host, byte for byte what `cpubuild merge` makes; the image
    carries every variant and compiles nothing (the build stage only unpacks)."""
    require(os.uname().machine == "x86_64", "cpukern's x86 partials build natively: needs an x86_64 host")
    partials = []
    for isa in ("avx2,avxvnni,avx512", "avx512vnni,avx512bf16,amx"):
        proc = cpubuild("wheel", "--isa", isa, "--out", str(tmp_path / isa), "--build-root", str(tmp_path / "build"), "--json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        partials.append(Path(json.loads(proc.stdout)["wheel"]["path"]))
    merge = cpubuild("merge", *map(str, partials), "--out", str(tmp_path / "merged"), "--json")
    assert merge.returncode == 0, merge.stderr
    merged = Path(json.loads(merge.stdout)["wheel"])
    image = built_json(cpubuild("image", *(a for p in partials for a in ("--wheel", str(p))), "--tag", f"{TAG}:merged-amd64",
                                "--json"))
    assert image["wheel_source"] == "merged" and image["wheel"] == merged.name and image["isa"] == "all"
    proc = docker_run(image["tag"], "python3", "-m", "cpukern", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    built = {v["name"] for v in report["variants"] if v["built"]}
    assert built == {v.name for v in MATRIX.variants_for("x86_64")}
    assert report["selected"] == image["selected"] == expected_best("x86_64", cpuinfo_features(), built)
    # the image holds the merged wheel's libraries, byte for byte: nothing was rebuilt inside
    with zipfile.ZipFile(merged) as zf:
        libraries = {hashlib.sha256(zf.read(n)).hexdigest() for n in zf.namelist() if n.endswith(".so")}
    inside = docker_run(image["tag"], "sh", "-c", "find /opt/cpukern -name '*.so' -exec sha256sum {} +")
    assert inside.returncode == 0 and libraries <= {line.split()[0] for line in inside.stdout.splitlines()}, inside.stdout


# ------------------------------------------------------------------ arm64


def test_arm64_runtime_from_a_cross_built_wheel_selects_neon(arm64_runtime: dict[str, Any]) -> None:
    tag = arm64_runtime["tag"]
    inspect = json.loads(subprocess.run(["docker", "image", "inspect", tag], capture_output=True, text=True, check=True).stdout)[0]
    assert inspect["Architecture"] == "arm64"
    proc = docker_run(tag, "python3", "-m", "cpukern", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["machine"] == "aarch64"
    built = {v["name"] for v in report["variants"] if v["built"]}
    # QEMU's default user-mode CPU is `max`: every feature, so the best built variant
    assert report["selected"] == expected_best("aarch64", None, built)
    assert report["selected"] in {"neon_bf16", "sve"}
    assert arm64_runtime["wheel_source"] == "cross-compiled"  # on the host by cpubuild, not given
    assert arm64_runtime["wheel"].endswith("_aarch64.whl")
    assert arm64_runtime["selected"] == report["selected"]


def test_base_images_are_local_and_labelled_with_their_arch(amd64_runtime: dict[str, Any], arm64_runtime: dict[str, Any]) -> None:
    for arch in ("x86_64", "aarch64"):
        spec = hardware().arches[arch]
        out = subprocess.run(["docker", "image", "inspect", base_tag(spec)], capture_output=True, text=True)
        assert out.returncode == 0, f"{base_tag(spec)} missing"
        data = json.loads(out.stdout)[0]
        assert data["Architecture"] == spec.docker_platform.split("/")[1]
        assert data["RepoDigests"] == []  # made here, never pulled


# ------------------------------------------------------------------ any project


def test_a_project_without_a_dockerfile_gets_cpubuilds_template(daemon: None, tmp_path: Path) -> None:
    """examples/dotlib keeps no Dockerfile: `cpubuild image --project` renders cpubuild's template for it
    (its package, its selftest in the test stage) and the image dispatches as the oracle says."""
    require_host(os.uname().machine == "x86_64", "x86_64 host")
    project = REPO / "examples" / "dotlib"
    assert not (project / "docker").exists()
    out = tmp_path / "wheels"
    proc = cpubuild("wheel", "-q", "--project", str(project), "--out", str(out), "--build-root", str(tmp_path / "build"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("dotlib-*_x86_64.whl")
    image = built_json(cpubuild("image", "--project", str(project), "--wheel", str(wheel), "--target", "test",
                                "--tag", "cpubuild-test/dotlib:test-amd64", "--json"))
    assert image["wheel_source"] == "given" and image["target"] == "test"  # the test stage ran dotlib.selftest
    dotlib = load_matrix(project / "isa_matrix.toml")
    built = {v.name for v in dotlib.variants_for("x86_64")}
    assert image["selected"] == [v.name for v in dotlib.variants_for("x86_64") if v.name in built
                                 and set(v.requires) <= oracle_features("x86_64")][-1]
    inspect = json.loads(subprocess.run(["docker", "image", "inspect", image["tag"]], capture_output=True, text=True,
                                        check=True).stdout)[0]
    assert inspect["Config"]["Cmd"] == ["python3", "-m", "dotlib"] and inspect["Config"]["User"] == "dotlib"
    assert inspect["Config"]["Labels"]["io.cpubuild.package"] == "dotlib"
    assert not (project / "docker").exists() and not (project / ".cpubuild").exists()  # nothing written into the project


TORCH_PROBE = """\
import json, os, pathlib, importlib.metadata as md, torch, torch_ops
x = torch.randn(8, 64, dtype=torch.bfloat16); w = torch.randn(64, dtype=torch.bfloat16)
xf = x.float()
reference = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "torch_file": torch.__file__,
                  "requires": md.requires("torch-ops"), "preload": os.environ.get("LD_PRELOAD"),
                  "tcmalloc_mapped": "libtcmalloc_minimal" in pathlib.Path("/proc/self/maps").read_text(),
                  "selected": torch_ops.selected_isa(),
                  "close": torch.allclose(torch_ops.rms_norm(x, w, 1e-6).float(), reference, atol=0.05, rtol=0.02)}))
"""


def check_torch_image(image: dict[str, Any], release: str) -> None:
    """What runs in a torch project's image: the CPU build of `release` from the image's own tree, the wheel
    pinned to its minor, tcmalloc preloaded and mapped, the dispatched rms_norm close to torch's."""
    proc = docker_run(image["tag"], "python3", "-c", TORCH_PROBE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = json.loads(proc.stdout)
    assert facts["torch"].split("+", 1)[0] == release and facts["cuda"] is None
    assert facts["torch_file"].startswith("/opt/cpubuild-torch/")
    assert f"torch=={'.'.join(release.split('.')[:2])}.*" in facts["requires"]
    assert facts["preload"] == "/usr/local/lib/libtcmalloc_minimal.so.4" and facts["tcmalloc_mapped"]
    assert facts["selected"] == image["selected"] and facts["close"]


def test_a_torch_project_image_carries_the_cpu_torch_its_wheel_was_built_against(daemon: None) -> None:
    """examples/torch_ops (kind torch) on amd64: the build stage compiles against the CPU torch that
    `cpubuild image` fetched for the image's platform and python3 (this Python's release), the runtime
    carries that torch, the test stage ran the selftest (every op of the loaded variant against torch
    eager), and the image dispatches as the oracle says."""
    require_host(os.uname().machine == "x86_64", "x86_64 host")
    try:
        release = importlib.metadata.version("torch").split("+", 1)[0]  # the release the image must carry
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("torch is not installed for the test runner's Python (scripts/setup.sh installs it)")
    project = REPO / "examples" / "torch_ops"
    image = built_json(cpubuild("image", "--project", str(project), "--target", "test",
                                "--tag", "cpubuild-test/torch-ops:test-amd64", "--json"))
    assert image["wheel_source"] == "build stage" and image["target"] == "test" and image["torch"] == release
    matrix = load_matrix(project / "isa_matrix.toml")
    assert image["selected"] == [v.name for v in matrix.variants_for("x86_64")
                                 if set(v.requires) <= oracle_features("x86_64")][-1]
    check_torch_image(image, release)
    assert not (project / "docker").exists() and not (project / ".cpubuild").exists()


def test_a_torch_project_arm64_image_gets_the_aarch64_cpu_torch(daemon: None) -> None:
    """The arm64 image of examples/torch_ops with --torch 2.9.1: the wheel cross-compiled on the host against
    the aarch64 torch, that torch unpacked in the image, and under QEMU's `max` CPU (every feature) the
    highest aarch64 variant runs."""
    require_tool("aarch64-linux-gnu-g++")
    require(Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists(), "qemu-aarch64 binfmt is not registered (scripts/setup.sh)")
    project = REPO / "examples" / "torch_ops"
    image = built_json(cpubuild("image", "--project", str(project), "--platform", "linux/arm64", "--torch", "2.9.1",
                                "--tag", "cpubuild-test/torch-ops:runtime-arm64", "--json"))
    assert image["wheel_source"] == "cross-compiled" and image["torch"].split("+", 1)[0] == "2.9.1"
    assert image["selected"] == load_matrix(project / "isa_matrix.toml").variants_for("aarch64")[-1].name
    check_torch_image(image, "2.9.1")
