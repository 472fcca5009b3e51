"""`cpubuild wheel` end to end: real compilers, CMake, auditwheel, uv.

The built wheels are shared by the session (one subset wheel, one all-variant
wheel); their build directories live in a cache outside the repository so
ccache makes reruns cheap. Expectations about the CPU come from an oracle
independent of cpukern: the kernel's /proc/cpuinfo flags of this host.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cpubuild.errors import BuildFailedError
from cpubuild.matrix import load_matrix
from cpubuild.toolchain import repair
from oracle import oracle_features, oracle_ranking
from packaging.utils import parse_wheel_filename
from test_licenses import assert_wheel_carries
from testsupport import REPO, require, require_tool, run

MATRIX = load_matrix(REPO / "isa_matrix.toml")
ARCH = "x86_64"
SUBSET = "avx512"  # the example subset
LIBRARY = "_cpukern_{}.so"  # the package's library naming (CMake's CPUKERN_LIBRARY_PATTERN)


def cache_root() -> Path:
    """Build roots shared across test runs (ccache hits); the builder locks each build dir."""
    explicit = os.environ.get("CPUBUILD_TEST_CACHE")
    for candidate in ([Path(explicit)] if explicit else []) + [Path("/var/cache/cpubuild/wheel-tests")]:
        try:
            candidate.mkdir(parents=True, exist_ok=True)
            if os.access(candidate, os.W_OK):
                return candidate
        except OSError:
            continue
    return Path(os.environ.get("TMPDIR", "/tmp")) / "cpubuild-wheel-tests"


def cpubuild(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())", *args]
    full_env = {**os.environ, "PYTHONPATH": str(REPO / "tools"), **(env or {})}
    return run(cmd, env=full_env, cwd=cwd, check=check, timeout=1800)


def build(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> dict[str, Any]:
    proc = cpubuild("wheel", "--json", *args, env=env, cwd=cwd)
    summary: dict[str, Any] = json.loads(proc.stdout)
    assert summary["ok"], summary
    return summary


def expected_selection(variants: list[str]) -> str:
    """The oracle's pick (tools/tests/oracle.py: this host's /proc/cpuinfo)."""
    return oracle_ranking(MATRIX, variants)[0]


def host_runs(variant: str) -> bool:
    return set(MATRIX.variant(ARCH, variant).requires) <= oracle_features()


def so_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {Path(n).name for n in z.namelist() if n.endswith(".so")}


def empty_or_absent(path: Path) -> bool:
    return not path.exists() or not any(path.iterdir())


def git_head() -> tuple[str, str]:
    short = run(["git", "-C", str(REPO), "rev-parse", "--short=7", "HEAD"]).stdout.strip()
    epoch = run(["git", "-C", str(REPO), "log", "-1", "--format=%ct"]).stdout.strip()
    return short, epoch


@pytest.fixture(scope="session")
def native_host() -> None:
    require(MATRIX.arches.get(ARCH) is not None and os.uname().machine == ARCH, f"needs an {ARCH} host")
    require_tool("g++", "gcc", "cmake", "ninja", "git", "auditwheel", "patchelf", "uv")


@pytest.fixture(scope="session")
def subset_wheel(all_wheel: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # built after the all-variant wheel: its objects come from ccache (ISA sets share them)
    head = git_head()
    summary = build("--isa", SUBSET, "--out", str(tmp_path_factory.mktemp("subset")), "--build-root", str(cache_root() / "root"))
    summary["_git"] = head
    return summary


@pytest.fixture(scope="session")
def all_wheel(native_host: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build("--out", str(tmp_path_factory.mktemp("all")), "--build-root", str(cache_root() / "root"))


@pytest.fixture(scope="session")
def install(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Path]:
    """Installs a wheel into a fresh venv (uv venv + uv pip install, no index); returns its python."""
    def _install(wheel: Path) -> Path:
        venv = tmp_path_factory.mktemp("venv") / "v"
        run(["uv", "venv", "-q", "--python", sys.executable, str(venv)])
        python = venv / "bin" / "python"
        run(["uv", "pip", "install", "-q", "--no-index", "--python", str(python), str(wheel)])
        return python
    return _install


def cpukern_json(python: Path, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("CPUKERN_") and k != "PYTHONPATH"}
    proc = run([str(python), "-m", "cpukern", "--json"], check=False, env={**clean_env, **(env or {})}, cwd=python.parent)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


# ------------------------------------------------------------ the subset wheel


@pytest.mark.slow
def test_subset_wheel_holds_exactly_baseline_and_the_subset(subset_wheel: dict[str, Any]) -> None:
    wheel = Path(subset_wheel["wheel"]["path"])
    baseline = MATRIX.baseline(ARCH).name
    assert so_files(wheel) == {LIBRARY.format(baseline), LIBRARY.format(SUBSET), LIBRARY.format("probe")}
    assert subset_wheel["wheel"]["variants"] == [baseline, SUBSET]
    with zipfile.ZipFile(wheel) as z:
        manifest = json.loads(z.read("cpukern/_manifest.json"))
    assert {v["name"] for v in manifest["variants"] if v["built"]} == {baseline, SUBSET}


@pytest.mark.slow
def test_subset_wheel_carries_the_licence(subset_wheel: dict[str, Any]) -> None:
    """PEP 639: License-Expression, License-File and .dist-info/licenses/LICENSE survive auditwheel and re-zipping."""
    assert_wheel_carries(Path(subset_wheel["wheel"]["path"]))


@pytest.mark.slow
def test_subset_wheel_is_manylinux_2_28_or_lower_and_auditwheel_agrees(subset_wheel: dict[str, Any]) -> None:
    wheel = Path(subset_wheel["wheel"]["path"])
    _name, _version, _build, tags = parse_wheel_filename(wheel.name)
    platforms = {t.platform for t in tags}
    assert {t.interpreter for t in tags} == {"py3"} and {t.abi for t in tags} == {"none"}
    for plat in platforms:
        assert repair.policy_at_most(plat, f"manylinux_2_28_{ARCH}"), plat
    shown = json.loads(run(["auditwheel", "show", "--json", str(wheel)]).stdout)
    assert shown["overall_tag"] in platforms
    assert subset_wheel["wheel"]["policy"] == shown["overall_tag"]


@pytest.mark.slow
def test_subset_wheel_name_carries_git_version_and_isa_label(subset_wheel: dict[str, Any]) -> None:
    wheel = Path(subset_wheel["wheel"]["path"])
    _name, version, _build, _tags = parse_wheel_filename(wheel.name)
    short, epoch = subset_wheel["_git"]
    assert str(version) == subset_wheel["version"]
    assert version.local is not None and version.local.endswith(f"cpu.{SUBSET}")
    assert subset_wheel["source_date_epoch"] == int(epoch)
    tagged = run(["git", "-C", str(REPO), "describe", "--tags", "--match", "v[0-9]*"], check=False).returncode == 0
    if not tagged:  # this repository's case: base version .dev<commit count> + g<hash>
        count = run(["git", "-C", str(REPO), "rev-list", "--count", "HEAD"]).stdout.strip()
        base = re.search(r'__version__ = "([^"]+)"', (REPO / "python/cpukern/_version.py").read_text())
        assert base is not None
        assert version.public == f"{base.group(1)}.dev{count}"
        assert version.local.startswith(f"g{short}.")


@pytest.mark.slow
def test_subset_wheel_selects_the_best_this_host_runs(subset_wheel: dict[str, Any], install: Callable[[Path], Path]) -> None:
    python = install(Path(subset_wheel["wheel"]["path"]))
    baseline = MATRIX.baseline(ARCH).name
    rc, data, _ = cpukern_json(python)
    assert rc == 0, data
    assert data["version"] == subset_wheel["version"]
    assert data["selected"] == expected_selection([baseline, SUBSET])
    rc, data, stderr = cpukern_json(python, {"CPUKERN_ISA": SUBSET})
    if host_runs(SUBSET):
        assert rc == 0 and data["selected"] == SUBSET
    else:
        assert rc == 1
        assert data["selected"] is None and SUBSET in data["error"]
        assert "Traceback" not in stderr


@pytest.mark.slow
def test_isa_extension_check_did_not_need_disabling(subset_wheel: dict[str, Any], tmp_path: Path) -> None:
    """gcc here writes no ISA-level notes; the baseline and probe must never carry one."""
    wheel = Path(subset_wheel["wheel"]["path"])
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path)
    for name in (LIBRARY.format(MATRIX.baseline(ARCH).name), LIBRARY.format("probe")):
        assert repair.x86_isa_level(tmp_path / "cpukern" / name) is None
    assert subset_wheel["wheel"]["isa_ext_check"] == "passed"


@pytest.mark.slow
def test_rebuild_with_nothing_changed_is_a_no_op_with_identical_bytes(subset_wheel: dict[str, Any], tmp_path: Path) -> None:
    env = {"CPUBUILD_VERSION": subset_wheel["source_version"], "SOURCE_DATE_EPOCH": str(subset_wheel["source_date_epoch"])}
    again = build("--isa", SUBSET, "--out", str(tmp_path), "--build-root", str(cache_root() / "root"), env=env)
    assert "ninja: no work to do." in Path(again["log"]).read_text()
    assert Path(again["wheel"]["path"]).read_bytes() == Path(subset_wheel["wheel"]["path"]).read_bytes()


# ------------------------------------------------------------ the all-variant wheel


@pytest.mark.slow
def test_default_wheel_holds_every_variant_and_selects_the_hosts_best(all_wheel: dict[str, Any], install: Callable[[Path], Path]) -> None:
    every = [v.name for v in MATRIX.variants_for(ARCH)]
    wheel = Path(all_wheel["wheel"]["path"])
    assert all_wheel["wheel"]["variants"] == every
    assert so_files(wheel) == {LIBRARY.format(v) for v in [*every, "probe"]}
    assert parse_wheel_filename(wheel.name)[1].local.endswith(".cpu")  # type: ignore[union-attr]
    python = install(wheel)
    rc, data, _ = cpukern_json(python)
    assert rc == 0, data
    assert data["selected"] == expected_selection(every)
    assert sorted(v["name"] for v in data["variants"] if v["built"]) == sorted(every)


# ------------------------------------------------------------ reproducibility


def snapshot(dest: Path) -> Path:
    """A copy of the working tree (tracked + untracked, not ignored), without .git."""
    listed = run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"]).stdout.split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.mark.slow
def test_two_clean_builds_in_different_directories_are_byte_identical(native_host: None, tmp_path: Path) -> None:
    _short, epoch = git_head()
    version = run([sys.executable, "-c", "import sys; from pathlib import Path; from cpubuild.wheelbuild.version import source_version; "
                   f"print(source_version(Path({str(REPO)!r}), Path({str(REPO / 'python/cpukern/_version.py')!r}), {{}}).text)"],
                  env={**os.environ, "PYTHONPATH": str(REPO / "tools")}).stdout.strip()
    env = {"CPUBUILD_VERSION": version, "SOURCE_DATE_EPOCH": epoch}
    # The first checkout sits at a fixed path (reruns hit ccache); the second is
    # new every time and compiled without ccache: a real second compile.
    root = cache_root() / "repro"
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _compare_clean_builds(root, tmp_path, env)


def _compare_clean_builds(root: Path, tmp_path: Path, env: dict[str, str]) -> None:
    shutil.rmtree(root / "one", ignore_errors=True)
    first = snapshot(root / "one" / "src")
    second = snapshot(tmp_path / "second-checkout" / "deeper" / "src")
    a = build("--isa", SUBSET, "--out", str(tmp_path / "out-a"), "--project", str(first), env=env, cwd=first)
    b = build("--isa", SUBSET, "--out", str(tmp_path / "out-b"), "--project", str(second), cwd=second,
              env={**env, "CCACHE_DISABLE": "1"})  # a real second compile, not cache hits
    wa, wb = Path(a["wheel"]["path"]), Path(b["wheel"]["path"])
    assert wa.name == wb.name
    assert wa.read_bytes() == wb.read_bytes()
    with zipfile.ZipFile(wa) as z:
        binaries = b"".join(z.read(n) for n in z.namelist() if n.endswith(".so"))
    for leaked in (str(first), str(second), str(tmp_path), str(REPO)):
        assert leaked.encode() not in binaries


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--isa", "avx1024"], "unknown ISA 'avx1024'"),
        (["--isa", next(v.name for v in MATRIX.variants if v.arch != ARCH and not v.is_baseline)], "not of x86_64"),
        (["--arch", "sparc64"], "unknown arch 'sparc64'"),
        (["--isa", "avx2", "--frontend", "poetry"], "poetry"),
    ],
)
def test_usage_errors_exit_2_and_write_nothing(args: list[str], message: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = cpubuild("wheel", "--out", str(out), *args, check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert empty_or_absent(out)


@pytest.mark.slow
def test_config_settings_reach_scikit_build_core_and_the_report(native_host: None, tmp_path: Path) -> None:
    """-C KEY=VALUE (here an extra CMake cache entry) is passed to the build and shown in --json."""
    summary = build("--isa", MATRIX.baseline(ARCH).name, "--out", str(tmp_path / "out"), "--build-root", str(cache_root() / "root"),
                    "-C", "cmake.define.CPUKERN_TEST_SETTING=seen")
    assert summary["config_settings"] == {"cmake.define.CPUKERN_TEST_SETTING": "seen"}
    cache = (Path(summary["build_dir"]) / "CMakeCache.txt").read_text()
    assert "CPUKERN_TEST_SETTING:UNINITIALIZED=seen" in cache or "CPUKERN_TEST_SETTING:STRING=seen" in cache
    proc = cpubuild("wheel", "-C", "build-dir=/elsewhere", "--out", str(tmp_path / "no"), check=False)
    assert proc.returncode == 2 and "-C build-dir: cpubuild sets this config-setting itself" in proc.stderr
    assert empty_or_absent(tmp_path / "no")


def test_json_errors_are_json(tmp_path: Path) -> None:
    proc = cpubuild("wheel", "--json", "--isa", "avx1024", "--out", str(tmp_path / "out"), check=False)
    assert proc.returncode == 2
    data = json.loads(proc.stdout)
    assert data["ok"] is False and data["exit_code"] == 2 and "avx1024" in data["error"]


def test_a_compiler_without_the_variants_flags_is_named(native_host: None, tmp_path: Path) -> None:
    cross = next((f"{a.triplet}-g++" for a in MATRIX.arches.values() if a.name != ARCH and shutil.which(f"{a.triplet}-g++")), None)
    require(cross is not None, "needs a cross g++ (a real compiler that rejects x86 flags)")
    assert cross is not None
    out = tmp_path / "out"
    proc = cpubuild("wheel", "--isa", SUBSET, "--out", str(out), "--build-root", str(tmp_path / "b"),
                    env={"CXX": cross, "CPUBUILD_CACHE_DIR": str(tmp_path / "cache")}, check=False)
    assert proc.returncode == 1, proc.stderr
    assert cross in proc.stderr and "rejects the variant's flags" in proc.stderr
    assert re.search(r"variant '(\w+)'", proc.stderr)
    assert "Traceback" not in proc.stderr
    assert empty_or_absent(out)


def path_without(tool: str, tmp_path: Path) -> str:
    """PATH with every directory holding `tool` replaced by a mirror that lacks it."""
    dirs = []
    for i, entry in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        directory = Path(entry)
        if not (directory / tool).exists():
            dirs.append(entry)
            continue
        mirror = tmp_path / f"path{i}"
        mirror.mkdir()
        for item in directory.iterdir():
            if item.name != tool:
                (mirror / item.name).symlink_to(item)
        dirs.append(str(mirror))
    return os.pathsep.join(dirs)


def test_missing_cmake_is_named_with_its_fix(native_host: None, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = cpubuild("wheel", "--isa", SUBSET, "--out", str(out), "--build-root", str(tmp_path / "b"),
                    env={"PATH": path_without("cmake", tmp_path)}, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "missing build tools: cmake" in proc.stderr
    assert "fix: apt-get install -y cmake" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert empty_or_absent(out)


@pytest.mark.slow
def test_a_failing_compile_names_the_variant_and_shows_its_log(native_host: None, tmp_path: Path) -> None:
    broken = tmp_path / "broken.h"
    # only in the variant's own sources (CMake's flag checks do not define the variant name)
    broken.write_text('#if defined(CPUKERN_VARIANT_NAME) && defined(__AVX512F__)\n#error "deliberately broken for this test"\n#endif\n')
    out = tmp_path / "out"
    # a fixed, cleaned build root: CMake reads CXXFLAGS afresh, ccache serves the baseline objects
    proc = cpubuild("wheel", "--isa", SUBSET, "--out", str(out), "--build-root", str(cache_root() / "broken"), "--clean",
                    env={"CXXFLAGS": f"-include {broken}"}, check=False)
    assert proc.returncode == 1, proc.stderr
    assert f"compile failed in variant '{SUBSET}'" in proc.stderr
    assert "deliberately broken for this test" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert empty_or_absent(out)


# ------------------------------------------------------------ auditwheel's ISA-extension check


def tiny_wheel(path: Path, libs: dict[str, list[str]], tmp: Path) -> Path:
    """A minimal real wheel holding shared libraries compiled with the given flags."""
    src = tmp / "f.c"
    src.write_text("int cpubuild_f(int x) { return x * 3; }\n")
    files: dict[str, bytes] = {}
    for name, flags in libs.items():
        out = tmp / name
        run(["gcc", "-O2", "-fPIC", "-shared", *flags, "-o", str(out), str(src)])
        files[f"tiny/{name}"] = out.read_bytes()
    files["tiny/__init__.py"] = b""
    dist = "tiny-1.0.dist-info"
    files[f"{dist}/METADATA"] = b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n"
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n" for n, d in files.items())
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    wheel = path / "tiny-1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
    return wheel


def test_isa_extension_check_is_disabled_only_for_guarded_libraries(native_host: None, tmp_path: Path) -> None:
    """-mneeded makes gcc write the x86 ISA-level note auditwheel checks."""
    wheel = tiny_wheel(tmp_path, {"_plain.so": [], "_v4.so": ["-mavx512f", "-mneeded"]}, tmp_path)
    lines: list[str] = []
    repaired = repair.repair_linux(wheel, tmp_path / "ok", ceiling="manylinux_2_28_x86_64", guarded=["tiny/_v4.so"], log=lines.append)
    assert repaired.isa_ext_check.startswith("disabled") and "_v4.so (x86-64-v4)" in repaired.isa_ext_check
    assert repair.policy_at_most(repaired.policy, "manylinux_2_28_x86_64")
    assert any("--disable-isa-ext-check" in line for line in lines)
    with pytest.raises(BuildFailedError, match=r"_v4\.so"):
        repair.repair_linux(wheel, tmp_path / "refused", ceiling="manylinux_2_28_x86_64", guarded=[], log=lines.append)


# ------------------------------------------------------------ matrix and doctor


def test_matrix_json_reports_every_arch_and_what_this_host_builds_and_runs(native_host: None) -> None:
    data = json.loads(cpubuild("matrix", "--json").stdout)
    assert set(data["arches"]) == set(MATRIX.arches)
    rows = {v["name"]: v for v in data["arches"][ARCH]["variants"]}
    assert list(rows) == [v.name for v in MATRIX.variants_for(ARCH)]
    assert all(v["buildable"] is True for v in rows.values())  # gcc 12 accepts every x86 variant's flags
    for name, row in rows.items():
        assert row["runnable"] == host_runs(name), name
    assert data["host"]["arch"] == ARCH


def test_doctor_json_gives_a_fix_for_every_gap(native_host: None) -> None:
    proc = cpubuild("doctor", "--json", check=False)
    data = json.loads(proc.stdout)
    failed_required = [c for c in data["checks"] if c["required"] and not c["ok"]]
    assert proc.returncode == (1 if failed_required else 0)
    assert data["ok"] == (not failed_required)
    assert {c["section"] for c in data["checks"]} >= {"cpu", "build", "cross", "docker", "qemu"}
    for check in data["checks"]:
        assert check["ok"] or check["fix"], check
    names = {c["name"] for c in data["checks"]}
    assert {"cmake", "ninja", "auditwheel", "patchelf", "ccache"} <= names


def test_doctor_names_the_fix_for_a_missing_tool(native_host: None, tmp_path: Path) -> None:
    proc = cpubuild("doctor", env={"PATH": path_without("ninja", tmp_path)}, check=False)
    assert proc.returncode == 1
    assert "ninja" in proc.stdout and "apt-get install -y ninja-build" in proc.stdout
