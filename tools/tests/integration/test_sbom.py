"""PEP 770 SBOMs: every wheel `cpubuild wheel` writes carries
`.dist-info/sboms/<name>.cdx.json`, valid CycloneDX 1.6 (the schema that
cyclonedx-python-lib ships), one component per variant library (hash,
compiler, flags, matrix entry, the sources' hashes), byte-identical on rebuild."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from cpubuild.toolchain import wheelzip
from cpubuild.wheelbuild.sbom import SbomInput, VariantBuild, compile_flags, make_bom
from testsupport import REPO, require_tool, run

jsonvalidation = pytest.importorskip("cyclonedx.validation.json")  # needs cyclonedx-python-lib[validation]
from cyclonedx.schema import SchemaVersion  # noqa: E402


def validate(text: str) -> None:
    error = jsonvalidation.JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    assert error is None, error


def spec(**kw: Any) -> SbomInput:
    variant = VariantBuild(name="avx2", library="demo/_demo_avx2.so", data=b"\x7fELF...", flags=("-O3", "-mavx2"),
                           matrix_entry={"name": "avx2", "requires": ["avx2"]}, sources=("csrc/demo.c",))
    base: dict[str, Any] = dict(dist="demo", version="1.0+cpu", arch="x86_64", compiler="g++ (gcc 12.2.0)",
                                source_date_epoch=1700000000, variants=(variant,),
                                source_hashes={"csrc/demo.c": hashlib.sha256(b"int x;").hexdigest()})
    return SbomInput(**{**base, **kw})


def test_bom_is_valid_and_a_function_of_its_input() -> None:
    text = make_bom(spec()).decode()
    validate(text)
    assert make_bom(spec()).decode() == text
    bom = json.loads(text)
    assert bom["metadata"]["timestamp"].startswith("2023-11-14T22:13:20")
    (lib,) = [c for c in bom["components"] if c["type"] == "library"]
    props = {p["name"]: p["value"] for p in lib["properties"]}
    assert props["cpubuild:flags"] == "-O3 -mavx2" and props["cpubuild:compiler"] == "g++ (gcc 12.2.0)"
    assert lib["hashes"] == [{"alg": "SHA-256", "content": hashlib.sha256(b"\x7fELF...").hexdigest()}]
    other = json.loads(make_bom(spec(version="1.1+cpu")))
    assert other["serialNumber"] != bom["serialNumber"]


def test_torch_projects_name_their_torch() -> None:
    bom = json.loads(make_bom(spec(torch="2.13.0+cpu")))
    validate(json.dumps(bom))
    torch = next(c for c in bom["components"] if c["name"] == "torch")
    assert torch["version"] == "2.13.0+cpu" and torch["purl"] == "pkg:pypi/torch@2.13.0%2Bcpu"


def test_compile_flags_drop_outputs_and_map_paths() -> None:
    entry = {"directory": "/b", "file": "/p/csrc/x.c",
             "command": "/usr/bin/gcc -DX=1 -I/p/include -ffile-prefix-map=/p=. -O3 -MD -MT a.o -MF a.d -o a.o -c /p/csrc/x.c"}
    assert compile_flags(entry, {"/p": "{project}"}) == ["-DX=1", "-I{project}/include", "-ffile-prefix-map={project}=.", "-O3"]


def sbom_of(wheel: Path) -> tuple[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if "/sboms/" in n]
        return name, z.read(name)


@pytest.mark.slow
def test_built_wheel_carries_a_reproducible_valid_sbom(tmp_path: Path) -> None:
    require_tool("cmake", "ninja", "git", "g++", "auditwheel", "patchelf")
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    cli = [sys.executable, "-c", "import sys; from cpubuild.cli import main; sys.exit(main())"]
    project = tmp_path / "sbom-demo"
    run([*cli, "init", str(project), "--name", "sbom-demo", "--arch", "x86_64", "-q"], env=env, cwd=tmp_path)
    for git in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"]):
        subprocess.run(["git", *git], cwd=project, check=True, capture_output=True)
    wheels = []
    for i in range(2):  # the second from a clean build directory
        out = run([*cli, "wheel", "-q", "--isa", "avx2", "--clean", "--out", str(tmp_path / f"out{i}"),
                   "--build-root", str(tmp_path / f"build{i}")], env=env, cwd=project, timeout=900).stdout
        wheels.append(Path(out.splitlines()[-1]))
    (name, first), (_, second) = sbom_of(wheels[0]), sbom_of(wheels[1])
    assert name.endswith(".dist-info/sboms/sbom-demo.cdx.json")
    assert first == second, "the SBOM differs between two clean builds"
    assert wheelzip.record_problems(wheels[0]) == []  # listed in RECORD with its hash
    validate(first.decode())
    bom = json.loads(first)
    libs = {c["bom-ref"]: c for c in bom["components"] if c["type"] == "library"}
    assert set(libs) == {"variant:baseline", "variant:avx2"}
    with zipfile.ZipFile(wheels[0]) as z:
        for ref, lib in libs.items():
            assert lib["hashes"][0]["content"] == hashlib.sha256(z.read(lib["name"])).hexdigest(), ref
    flags = {ref: next(p["value"] for p in lib["properties"] if p["name"] == "cpubuild:flags") for ref, lib in libs.items()}
    assert "-mavx2" in flags["variant:avx2"] and "-mavx2" not in flags["variant:baseline"]
    assert str(tmp_path) not in first.decode()  # no build-specific absolute paths
    files = {c["name"]: c["hashes"][0]["content"] for c in bom["components"] if c["type"] == "file"}
    assert files["csrc/sbom_demo.c"] == hashlib.sha256((project / "csrc" / "sbom_demo.c").read_bytes()).hexdigest()
