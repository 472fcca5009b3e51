"""PEP 825 variant wheels end to end: `cpubuild wheel --variant-wheels` for cpukern and
examples/dotlib, `cpubuild publish` into a directory index, `cpubuild serve`, and real uv
(preview `wheel-variants`) installing the level this CPU has; pip and uv without preview
install the fat wheel. The expected level comes from the oracle (the host's
/proc/cpuinfo flags against the x86-64 psABI levels), and under QEMU from what the
emulated model's CPUID reports (tools/tests/data/cpuid_cpuinfo.c, bind-mounted over
/proc/cpuinfo in a private mount namespace: qemu-user shows the host's file).
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cpubuild.index.storage import LocalStorage
from cpubuild.index.verify import verify_tree
from cpubuild.index.wheelfile import write_wheel
from cpubuild.matrix import load_matrix
from cpubuild.wheelbuild.variantwheels import make_variant_wheels
from oracle import cpuinfo_flags
from testsupport import CPUKERN_MATRIX, REPO, require, require_host, require_tool, run

pytestmark = [pytest.mark.slow]

COMMIT = "c" * 40
PROJECTS = {"cpukern": REPO, "dotlib": REPO / "examples" / "dotlib"}
# The x86-64 psABI levels as /proc/cpuinfo spells their features (independent of cpubuild's data).
PSABI = {
    "v2": {"cx16", "lahf_lm", "popcnt", "pni", "ssse3", "sse4_1", "sse4_2"},
    "v3": {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"},
    "v4": {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
}


def psabi_level(flags: set[str]) -> str:
    level, needed = "v1", set()
    for name, adds in PSABI.items():
        needed |= adds
        if not needed <= flags:
            break
        level = name
    return level


def cpubuild(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "tools"))
    return subprocess.run([sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])", *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=1800, check=False)


@dataclass(frozen=True, kw_only=True)
class Built:
    fat: Path
    variants: dict[str, dict[str, object]]  # label -> cpubuild's summary of that wheel
    variants_json: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    require_host(os.uname().machine == "x86_64", "x86-64 levels: an x86_64 host")
    out: dict[str, Built] = {}
    for name, project in PROJECTS.items():
        tmp = tmp_path_factory.mktemp(name)
        proc = cpubuild("wheel", "--variant-wheels", "--json", "--project", str(project), "--out", str(tmp / "wheelhouse"),
                        "--build-root", str(tmp / "build"))
        assert proc.returncode == 0, proc.stderr[-4000:]
        summary = json.loads(proc.stdout)
        extra = summary["variant_wheels"]
        out[name] = Built(fat=Path(summary["wheel"]["path"]), variants={w["label"]: w for w in extra["wheels"]},
                          variants_json=Path(extra["variants_json"]))
    return out


def expected_label(built: Built, level: str) -> str:
    """The level wheel an installer at `level` should take: the highest one built at or below it."""
    order = ["v1", "v2", "v3", "v4"]
    offered = [w["level"] for w in built.variants.values() if w["level"]]
    return "x86_64_" + max((lv for lv in offered if order.index(str(lv)) <= order.index(level)), key=lambda lv: order.index(str(lv)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def published(built: dict[str, Built], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every wheel of both projects published (fat and variants, separate calls per label, as CI jobs
    would) into a directory index."""
    root = tmp_path_factory.mktemp("index") / "root"
    for b in built.values():
        for path in [b.fat, *(Path(str(w["path"])) for w in b.variants.values())]:
            proc = cpubuild("publish", str(path), "--to", str(root), "--commit", COMMIT, "--channel", "nightly")
            assert proc.returncode == 0, proc.stderr
    for tree in (f"{COMMIT}/cpu", "nightly/cpu"):
        assert verify_tree(LocalStorage(root), tree).problems == []
    return root


def wait_for(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, f"no server at {url}"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def index(published: Path) -> Iterator[str]:
    """The index served over HTTP by `cpubuild serve`; yields the nightly tree's URL."""
    root = published
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO / "tools"))
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])",
                             "serve", str(root), "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/nightly/cpu/"
    try:
        wait_for(base, proc)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(UV_CACHE_DIR=str(tmp / "uv-cache"), PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1", UV_NO_CONFIG="1",
               UV_PYTHON_DOWNLOADS="never", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def venv(tmp: Path, *, pip: bool = False) -> Path:
    require_tool("uv")
    path = tmp / "venv"
    run(["uv", "venv", "-q", "--python", sys.executable, *(["--seed"] if pip else []), str(path)], env=clean_env(tmp))
    return path


def installed(venv_path: Path, package: str) -> dict[str, object]:
    """Which wheel went in (its variant.json label, None for the fat wheel) and what the package selects."""
    site = next(venv_path.glob("lib/python3*/site-packages"))
    (dist,) = [d for d in site.glob("*.dist-info") if d.name.startswith(package + "-")]
    label = next(iter(json.loads((dist / "variant.json").read_text())["variants"])) if (dist / "variant.json").exists() else None
    report = run([str(venv_path / "bin" / "python"), "-m", package, "--json"], cwd=venv_path).stdout
    return {"label": label, "selected": json.loads(report)["selected"]}


def oracle_variant(project: str, variants: list[str]) -> str:
    """The variant the CPU oracle expects among those a wheel holds."""
    matrix = load_matrix(CPUKERN_MATRIX if project == "cpukern" else PROJECTS[project] / "isa_matrix.toml")
    from oracle import oracle_features

    features = oracle_features("x86_64")
    return [v.name for v in matrix.variants_for("x86_64") if v.name in variants and set(v.requires) <= features][-1]


# ------------------------------------------------------------------ what the build makes


def test_variant_wheels_hold_their_levels_and_describe_themselves(built: dict[str, Built]) -> None:
    cpukern = built["cpukern"]
    assert set(cpukern.variants) == {"x86_64_v1", "x86_64_v3", "x86_64_v4", "null"}
    assert cpukern.variants["x86_64_v1"]["variants"] == ["baseline"]
    assert cpukern.variants["x86_64_v3"]["variants"] == ["baseline", "avx2", "avxvnni"]
    everything = [v.name for v in load_matrix(CPUKERN_MATRIX).variants_for("x86_64")]
    assert cpukern.variants["x86_64_v4"]["variants"] == cpukern.variants["null"]["variants"] == everything
    for b in built.values():
        index_doc = json.loads(b.variants_json.read_text())
        assert set(index_doc["variants"]) == set(b.variants)
        for label, summary in b.variants.items():
            path = Path(str(summary["path"]))
            assert path.name == b.fat.name[: -len(".whl")] + f"-{label}.whl"
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                doc = json.loads(archive.read(next(n for n in names if n.endswith(".dist-info/variant.json"))))
                manifest = json.loads(archive.read(next(n for n in names if n.endswith("/_manifest.json"))))
            assert doc["providers"] == {"x86_64": {"requires": ["x86-64-variant-provider"]}}
            assert doc["variants"] == {label: index_doc["variants"][label]}
            libraries = {v["name"] for v in manifest["variants"] if any(n.endswith("/" + v["library"]) for n in names)}
            built_flag = {v["name"] for v in manifest["variants"] if v["built"]}
            assert libraries == built_flag == set(summary["variants"])  # the others' libraries are left out
            problems = run([sys.executable, "-c", "import sys; from cpubuild.toolchain.wheelzip import record_problems; "
                            "print(record_problems(__import__('pathlib').Path(sys.argv[1])))", str(path)],
                           env=dict(os.environ, PYTHONPATH=str(REPO / "tools"))).stdout.strip()
            assert problems == "[]"


def test_variant_wheels_are_reproducible(built: dict[str, Built], tmp_path: Path) -> None:
    """Derived again from a copy of the same fat wheel (whose own reproducibility test_wheels checks): the same bytes."""
    b = built["dotlib"]
    copy = tmp_path / b.fat.name
    shutil.copyfile(b.fat, copy)
    with zipfile.ZipFile(b.fat) as archive:  # the build's SOURCE_DATE_EPOCH, as the fat wheel's entries carry it
        stamp = calendar.timegm((*archive.infolist()[0].date_time, 0, 0, 0))
    again = make_variant_wheels(copy, load_matrix(PROJECTS["dotlib"] / "isa_matrix.toml"), "x86_64", stamp)
    assert {w["label"]: w["sha256"] for w in again["wheels"]} == {label: w["sha256"] for label, w in b.variants.items()}


# ------------------------------------------------------------------ installers


@pytest.mark.parametrize("project", list(PROJECTS))
def test_uv_preview_installs_the_level_this_cpu_has(project: str, built: dict[str, Built], index: str, tmp_path: Path) -> None:
    path = venv(tmp_path)
    run(["uv", "pip", "install", "-q", "--python", str(path / "bin" / "python"), "--preview-features", "wheel-variants",
         "--index-url", index, project], env=clean_env(tmp_path))
    got = installed(path, project)
    label = expected_label(built[project], psabi_level(cpuinfo_flags("x86_64")))
    assert got["label"] == label
    assert got["selected"] == oracle_variant(project, list(built[project].variants[label]["variants"]))  # type: ignore[arg-type]


def test_nginx_with_the_printed_config_serves_the_variant_index(built: dict[str, Built], published: Path, tmp_path: Path) -> None:
    """The same index behind nginx (`cpubuild serve --print-nginx-config`): variants.json as JSON, uv's pick unchanged."""
    require_tool("nginx")
    port = free_port()
    block = cpubuild("serve", str(published), "--port", str(port), "--print-nginx-config").stdout
    temps = "".join(f"    {n}_temp_path {tmp_path}/{n};\n" for n in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = tmp_path / "nginx.conf"
    conf.write_text(f"{'user root;' if os.geteuid() == 0 else ''}\nworker_processes 1;\npid {tmp_path}/nginx.pid;\n"
                    f"error_log {tmp_path}/error.log warn;\nevents {{ worker_connections 64; }}\n"
                    f"http {{\n    include /etc/nginx/mime.types;\n    default_type application/octet-stream;\n"
                    f"    access_log off;\n{temps}{block}}}\n")
    proc = subprocess.Popen(["nginx", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(conf), "-g", "daemon off;"])
    base = f"http://127.0.0.1:{port}/nightly/cpu/"
    try:
        wait_for(base, proc)
        page = json.loads(urllib.request.urlopen(urllib.request.Request(
            base + "cpukern/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})).read())
        (entry,) = [f for f in page["files"] if f["filename"].endswith("-variants.json")]
        with urllib.request.urlopen(urllib.parse.urljoin(base + "cpukern/", entry["url"])) as r:
            assert r.headers["Content-Type"].startswith("application/json")
            assert hashlib.sha256(r.read()).hexdigest() == entry["hashes"]["sha256"]
        path = venv(tmp_path)
        run(["uv", "pip", "install", "-q", "--python", str(path / "bin" / "python"), "--preview-features", "wheel-variants",
             "--index-url", base, "cpukern"], env=clean_env(tmp_path))
        assert installed(path, "cpukern")["label"] == expected_label(built["cpukern"], psabi_level(cpuinfo_flags("x86_64")))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("how", ["pip", "uv without preview"])
def test_pip_and_uv_without_preview_install_the_fat_wheel(how: str, index: str, tmp_path: Path) -> None:
    path = venv(tmp_path, pip=how == "pip")
    python = str(path / "bin" / "python")
    if how == "pip":
        run([python, "-m", "pip", "install", "-q", "--index-url", index, "cpukern"], env=clean_env(tmp_path))
    else:
        run(["uv", "pip", "install", "-q", "--python", python, "--index-url", index, "cpukern"], env=clean_env(tmp_path))
    got = installed(path, "cpukern")
    assert got["label"] is None
    assert got["selected"] == oracle_variant("cpukern", [v.name for v in load_matrix(CPUKERN_MATRIX).variants_for("x86_64")])


def test_find_links_and_a_variants_json_missing_a_label(built: dict[str, Built], tmp_path: Path) -> None:
    """A wheelhouse as --find-links; then its variants.json without the host's label (uv takes the next
    level it describes) and without the file (uv takes the fat wheel)."""
    b = built["dotlib"]
    links = tmp_path / "links"
    shutil.copytree(b.fat.parent, links)
    host = expected_label(b, psabi_level(cpuinfo_flags("x86_64")))

    def install(name: str) -> object:
        path = venv(tmp_path / name)
        run(["uv", "pip", "install", "-q", "--python", str(path / "bin" / "python"), "--preview-features", "wheel-variants",
             "--no-index", "--find-links", str(links), "dotlib"], env=clean_env(tmp_path / name))
        return installed(path, "dotlib")["label"]

    assert install("complete") == host
    index_file = links / b.variants_json.name
    doc = json.loads(index_file.read_text())
    del doc["variants"][host]
    index_file.write_text(json.dumps(doc))
    lower = [label for label in ("x86_64_v1", "x86_64_v3", "x86_64_v4") if label in doc["variants"] and label < host]
    assert install("missing-label") == (lower[-1] if lower else "null")
    index_file.unlink()
    assert install("no-variants-json") is None


@pytest.mark.parametrize("model", ["Haswell", "SandyBridge"])
def test_uv_under_qemu_picks_what_the_emulated_cpu_reports(model: str, built: dict[str, Built], index: str, tmp_path: Path) -> None:
    """uv's own binary under qemu-x86_64 -cpu MODEL; /proc/cpuinfo (which uv's interpreter reads, and which
    qemu-user would show from the host) is replaced by the model's CPUID flags in a private mount namespace."""
    require_tool("qemu-x86_64-static", "unshare", "gcc")
    require(os.geteuid() == 0, "a private mount namespace needs root")
    probe = tmp_path / "cpuid_cpuinfo"
    run(["gcc", "-O1", "-static", "-o", str(probe), str(REPO / "tools" / "tests" / "data" / "cpuid_cpuinfo.c")])
    fake = tmp_path / "cpuinfo"
    fake.write_text(run(["qemu-x86_64-static", "-cpu", model, str(probe)]).stdout)
    flags = set(fake.read_text().split("flags", 1)[1].split(":", 1)[1].split())
    level = psabi_level(flags)
    assert level == {"Haswell": "v3", "SandyBridge": "v2"}[model]  # what QEMU's models are documented to be
    path = venv(tmp_path)
    uv = shutil.which("uv")
    assert uv is not None
    script = (f"mount --bind {fake} /proc/cpuinfo && exec qemu-x86_64-static -cpu {model} {uv} pip install -q "
              f"--python {path / 'bin' / 'python'} --preview-features wheel-variants --index-url {index} cpukern")
    run(["unshare", "-m", "sh", "-c", script], env=clean_env(tmp_path))
    site = next(path.glob("lib/python3*/site-packages"))
    (dist,) = site.glob("cpukern-*.dist-info")
    label = next(iter(json.loads((dist / "variant.json").read_text())["variants"]))
    assert label == expected_label(built["cpukern"], level)  # Haswell: v3; SandyBridge: v1 (cpukern has no v2 variant)


# ------------------------------------------------------------------ the index


def test_concurrent_publishers_of_one_versions_labels_lose_none(built: dict[str, Built], tmp_path: Path) -> None:
    b = built["dotlib"]
    root = tmp_path / "index"
    wheels = [Path(str(w["path"])) for w in b.variants.values()]
    env = dict(os.environ, PYTHONPATH=str(REPO / "tools"))
    procs = [subprocess.Popen([sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])",
                               "publish", str(w), "--to", str(root), "--commit", COMMIT, "--channel", "nightly"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in wheels]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    for tree in (COMMIT, "nightly"):
        page = json.loads((root / tree / "cpu" / "dotlib" / "index.json").read_text())
        (entry,) = [f for f in page["files"] if f["filename"] == b.variants_json.name]
        doc = json.loads((root / tree / "cpu" / "dotlib" / urllib.parse.unquote(entry["url"])).read_bytes())
        assert set(doc["variants"]) == set(b.variants)  # every label, valid JSON, the hash the page lists
        assert verify_tree(LocalStorage(root), f"{tree}/cpu").problems == []


def test_a_variant_wheel_contradicting_the_index_file_is_refused(built: dict[str, Built], tmp_path: Path) -> None:
    b = built["dotlib"]
    root = tmp_path / "index"
    v3 = Path(str(b.variants["x86_64_v3"]["path"]))
    assert cpubuild("publish", str(v3), "--to", str(root), "--commit", COMMIT).returncode == 0
    # same version and label, other properties: a small wheel of its own (another file name, so only the
    # variants.json check can refuse it)
    version = v3.name.split("-")[1]
    (tmp_path / "liar").mkdir()
    plain = write_wheel(tmp_path / "liar", name="dotlib", version=version, files={
        "dotlib/__init__.py": b"",
        f"dotlib-{version}.dist-info/variant.json": json.dumps(
            {**json.loads(b.variants_json.read_text()), "variants": {"x86_64_v3": {"x86_64": {"level": ["v4"]}}}}).encode(),
    })
    other = plain.rename(plain.with_name(plain.name[: -len(".whl")] + "-x86_64_v3.whl"))
    before = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
    proc = cpubuild("publish", str(other), "--to", str(root), "--commit", COMMIT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "variant 'x86_64_v3'" in proc.stderr and "this wheel says" in proc.stderr, proc.stderr
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == before
