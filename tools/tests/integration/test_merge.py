"""`cpubuild merge`: cpukern's six x86 variants built as three partial wheels (as three
CI runners would), merged, equal byte for byte to one `cpubuild wheel` of all of them -
and so are the PEP 825 variant wheels derived from each; the same for an aarch64 cross
build (one partial per variant; a torch project's merge is in test_torch_project.py), and a project
whose matrix has a floor instead of a baseline, its floor built by one partial only. Refusals: another
commit, other flags (a real build with different CXXFLAGS), an overlapping variant whose bytes
differ, a partial without the baseline, partials none of which holds the floor; each one line, exit 2,
nothing written.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cpubuild.hardware import hardware
from cpubuild.matrix import load_matrix
from cpubuild.toolchain import wheelzip
from test_variant_inputs import MATRIX as FLOOR_MATRIX
from test_variant_inputs import ONLY512
from testsupport import CPUKERN_MATRIX, REPO, require_host, require_tool

pytestmark = [pytest.mark.slow]

PARTIALS = ("avx2,avxvnni", "avx512,avx512vnni", "avx512bf16,amx")


def cpubuild(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, PYTHONPATH=str(REPO / "tools"), **(env or {}))
    return subprocess.run([sys.executable, "-c", "import sys; from cpubuild.cli import main; main(sys.argv[1:])", *args],
                          capture_output=True, text=True, env=environ, timeout=1800, check=False)


def build(tmp: Path, isa: str, *extra: str, env: dict[str, str] | None = None, build_root: str = "build") -> Path:
    out = tmp / f"out-{isa}-{'-'.join(extra)}-{build_root}"
    proc = cpubuild("wheel", "--project", str(REPO), "--isa", isa, "--out", str(out), "--build-root", str(tmp / build_root),
                    "--json", *extra, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return Path(json.loads(proc.stdout)["wheel"]["path"])


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_host(os.uname().machine == "x86_64", "cpukern's x86 variants: an x86_64 host")
    tmp = tmp_path_factory.mktemp("merge")
    built = {"all": build(tmp, "all", "--variant-wheels")}
    for isa in PARTIALS:
        built[isa] = build(tmp, isa, "--partial")
    return built


def rewrite(wheel: Path, out: Path, change: dict[str, bytes | None]) -> Path:
    """A copy of `wheel` with members replaced (None: removed) and RECORD recomputed."""
    with zipfile.ZipFile(wheel) as z:
        entries = [(i.filename, 0o644, z.read(i)) for i in z.infolist()]
    entries = [(n, m, change.get(n, d)) for n, m, d in entries if change.get(n, d) is not None]
    record = next(n for n, _m, _d in entries if n.endswith(".dist-info/RECORD"))
    entries = [e for e in entries if e[0] != record]
    entries.append((record, 0o644, wheelzip.record_file(((n, d) for n, _m, d in entries), record)))
    out.mkdir(parents=True, exist_ok=True)
    wheelzip.write_wheel(out / wheel.name, [(n, m, d) for n, m, d in entries if d is not None], 315532800)
    return out / wheel.name


def refused(partials: list[Path], out: Path, *words: str) -> str:
    proc = cpubuild("merge", *map(str, partials), "--out", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert not out.exists() or not any(out.iterdir()), sorted(p.name for p in out.iterdir())
    return lines[0]


def test_three_partials_merge_into_the_single_build_byte_for_byte(wheels: dict[str, Path], tmp_path: Path) -> None:
    proc = cpubuild("merge", *(str(wheels[isa]) for isa in PARTIALS), "--out", str(tmp_path / "merged"),
                    "--variant-wheels", "--project", str(REPO), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    merged = Path(summary["wheel"])
    assert merged.name == wheels["all"].name
    assert sha(merged) == sha(wheels["all"])
    assert summary["variants"] == list(wheelzip.inspect(wheels["all"]).built_variants)
    # the variant wheels and variants.json derived after the merge equal the single build's too
    single = {p.name: sha(p) for p in wheels["all"].parent.iterdir()}
    derived = {p.name: sha(p) for p in merged.parent.iterdir()}
    assert len(derived) > 2 and derived == single


def test_merge_order_does_not_matter_and_a_subset_is_labelled_like_its_build(wheels: dict[str, Path], tmp_path: Path) -> None:
    proc = cpubuild("merge", str(wheels["avx512bf16,amx"]), str(wheels["avx2,avxvnni"]), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    merged = Path(proc.stdout.strip().splitlines()[-1])
    # the label of --isa avx2,avxvnni,avx512bf16,amx
    assert "+" in merged.name and ".cpu.avx2.avxvnni.avx512bf16.amx-" in merged.name
    contents = wheelzip.inspect(merged)
    assert set(contents.built_variants) == {"baseline", "avx2", "avxvnni", "avx512bf16", "amx"}
    assert wheelzip.record_problems(merged) == []
    with zipfile.ZipFile(merged) as z:
        version_py = z.read(f"{contents.manifest_dir}/_version.py").decode()
    assert f'"{contents.version}"' in version_py


def test_aarch64_cross_partials_merge_byte_for_byte(tmp_path: Path) -> None:
    require_tool(f"{hardware().arches['aarch64'].triplet}-g++")
    names = [v.name for v in load_matrix(CPUKERN_MATRIX).variants_for("aarch64")][1:]
    single = build(tmp_path, "all", "--arch", "aarch64")
    partials = [build(tmp_path, name, "--arch", "aarch64") for name in names]
    proc = cpubuild("merge", *map(str, partials), "--out", str(tmp_path / "merged"))
    assert proc.returncode == 0, proc.stderr
    merged = Path(proc.stdout.strip().splitlines()[-1])
    assert merged.name == single.name and sha(merged) == sha(single)


def test_another_commit_is_refused(wheels: dict[str, Path], tmp_path: Path) -> None:
    other = Path(wheelzip.set_version(rewrite(wheels["avx2,avxvnni"], tmp_path / "copy", {}),
                                      wheelzip.inspect(wheels["avx2,avxvnni"]).version.replace("+g", "+g0000000.g")))
    refused([other, wheels["avx512,avx512vnni"]], tmp_path / "out", "source version")


def test_other_flags_are_refused(wheels: dict[str, Path], tmp_path: Path) -> None:
    flagged = build(tmp_path, "avx2", env={"CXXFLAGS": "-DCPUKERN_MERGE_TEST=1"}, build_root="build-flags")
    refused([flagged, wheels["avx512,avx512vnni"]], tmp_path / "out", "'baseline'", "flags")


def test_overlapping_variant_with_other_bytes_is_refused(wheels: dict[str, Path], tmp_path: Path) -> None:
    contents = wheelzip.inspect(wheels["avx2,avxvnni"])
    lib = contents.variant_libraries["avx2"]
    with zipfile.ZipFile(wheels["avx2,avxvnni"]) as z:
        data = bytearray(z.read(lib))
    data[-1] ^= 0xFF
    changed = rewrite(wheels["avx2,avxvnni"], tmp_path / "changed", {lib: bytes(data)})
    refused([changed, wheels["all"]], tmp_path / "out", "'avx2'", "different bytes")


def test_a_partial_without_the_baseline_is_refused(wheels: dict[str, Path], tmp_path: Path) -> None:
    contents = wheelzip.inspect(wheels["avx2,avxvnni"])
    lib = contents.variant_libraries["baseline"]
    refused([rewrite(wheels["avx2,avxvnni"], tmp_path / "nobase", {lib: None}), wheels["avx512,avx512vnni"]], tmp_path / "out",
            "lacks the baseline")


def test_not_a_wheel_and_one_partial_are_refused(wheels: dict[str, Path], tmp_path: Path) -> None:
    junk = tmp_path / "junk-1.0-py3-none-any.whl"
    junk.write_bytes(b"not a zip")
    refused([junk, wheels["avx2,avxvnni"]], tmp_path / "out", "not a readable wheel")
    refused([wheels["avx2,avxvnni"]], tmp_path / "out", "at least two")


FLOOR_VNNI = """
[[variant]]
name = "avx512vnni"
extends = "avx512"
requires = ["avx512_vnni"]
flags = ["-mavx512vnni"]
"""


def test_a_floor_is_built_by_one_partial_and_the_merge_equals_the_single_build(tmp_path: Path) -> None:
    """A matrix with a floor (no baseline): `--partial` leaves the floor to the partial naming it (vLLM's
    floor is a full variant: every partial compiling it was most of a partial's work)."""
    require_host(os.uname().machine == "x86_64", "an x86_64 host")
    project = tmp_path / "fl"
    proc = cpubuild("init", "--name", "fl", "--arch", "x86_64", "-q", str(project))
    assert proc.returncode == 0, proc.stderr
    (project / "isa_matrix.toml").write_text(FLOOR_MATRIX + FLOOR_VNNI, encoding="utf-8")
    (project / "csrc" / "only512.c").write_text(ONLY512, encoding="utf-8")

    def wheel(name: str, *args: str) -> Path:
        proc = cpubuild("wheel", "--project", str(project), "--out", str(tmp_path / name), "--json", *args)
        assert proc.returncode == 0, proc.stderr[-4000:]
        return Path(json.loads(proc.stdout)["wheel"]["path"])

    single = wheel("single", "--isa", "all")
    with_floor = wheel("p1", "--partial", "--isa", "avx2")
    avx512, vnni = wheel("p2", "--partial", "--isa", "avx512"), wheel("p3", "--partial", "--isa", "avx512vnni")
    assert wheelzip.inspect(avx512).built_variants == ("avx512",)
    assert set(wheelzip.inspect(avx512).variant_libraries) == {"avx512"}  # the floor's library is not built there
    assert wheelzip.inspect(wheel("whole", "--isa", "avx512")).built_variants == ("avx2", "avx512")  # not a partial
    proc = cpubuild("merge", str(vnni), str(with_floor), str(avx512), "--out", str(tmp_path / "merged"))
    assert proc.returncode == 0, proc.stderr
    merged = Path(proc.stdout.strip().splitlines()[-1])
    assert merged.name == single.name and sha(merged) == sha(single)
    refused([avx512, vnni], tmp_path / "out", "no partial holds the floor variant 'avx2'", "--partial --isa avx2")
    proc = cpubuild("wheel", "--project", str(project), "--partial", "--isa", "avx512", "--variant-wheels",
                    "--out", str(tmp_path / "vw"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "cpubuild merge --variant-wheels" in proc.stderr, proc.stderr
    assert not (tmp_path / "vw").exists()
