"""A pinned image supply chain: the base by digest (`--base NAME@sha256:...`, an
image ID, a digest recorded by `cpubuild base-image`), and the build stage's
Python packages from a hashed requirements set (a tampered hash stops the build).
Bad references are refused in one line before Docker is touched; the daemon
cases use a real Docker daemon and a project made by `cpubuild init`."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cpubuild.docker import dockerfile, pin
from cpubuild.docker.hashed import hashed_requirements
from cpubuild.selfwheel import self_wheel
from hostile import assert_one_line, cli, tree_hash
from testsupport import require

DIGEST = "sha256:" + "ab" * 32
DEAD = {"DOCKER_HOST": "unix:///nonexistent/cpubuild-hostile.sock"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("img") / "relp"
    assert cli("init", str(root), "--name", "relp").returncode == 0
    return root


@pytest.mark.parametrize("base", [
    "debian@sha256:1234", f"debian@sha256:{'AB' * 32}", f"debian@md5:{'ab' * 16}", "Debian:bookworm", "debian:book worm",
    "debian::x", "-debian", "debian:bookworm\n", "a" * 600, "debian:tag@sha256:",
])
def test_a_malformed_base_is_one_line_before_docker(base: str, project: Path) -> None:
    for extra in ((), ("--bake", str(project / "bake.json"))):
        before = tree_hash(project)
        out = cli("image", "--project", str(project), "--base", base, *extra, env=DEAD)
        assert_one_line(out, 2, "--base", "not an image reference")
        assert tree_hash(project) == before


def test_references_parse_to_their_parts() -> None:
    ref = pin.parse(f"registry.example:5000/team/debian:bookworm-slim@{DIGEST}")
    assert (ref.name, ref.tag, ref.digest) == ("registry.example:5000/team/debian", "bookworm-slim", DIGEST)
    assert pin.parse(DIGEST).name is None and pin.parse("debian").tagged == "debian:latest"


def test_bake_pins_the_base_given_by_digest(project: Path, tmp_path: Path) -> None:
    out = cli("image", "--project", str(project), "--bake", str(tmp_path / "b.json"), "--base", f"debian@{DIGEST}", env=DEAD)
    assert out.returncode == 0, out.stderr
    targets = json.loads((tmp_path / "b.json").read_text())["target"].values()
    assert {t["args"]["CPUBUILD_BASE"] for t in targets} == {f"debian@{DIGEST}"}
    assert f"ARG CPUBUILD_BASE=debian@{DIGEST}\n" in (project / ".cpubuild/Dockerfile").read_text()


def test_bake_pins_a_tag_to_the_repo_digest_recorded_for_it(project: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / pin.RECORD).write_text(json.dumps({"schema": 1, "bases": {"debian:bookworm-slim": {
        "linux/amd64": {"id": "sha256:" + "cd" * 32, "repo_digest": f"debian@{DIGEST}"}}}}))
    out = cli("image", "--project", str(project), "--bake", str(tmp_path / "b.json"), "--platform", "linux/amd64",
              env={**DEAD, "CPUBUILD_CACHE": str(cache)})
    assert out.returncode == 0, out.stderr
    (target,) = [t for t in json.loads((tmp_path / "b.json").read_text())["target"].values() if t["target"] != "wheel"]
    assert target["args"]["CPUBUILD_BASE"] == f"debian:bookworm-slim@{DIGEST}"
    # nothing recorded: the tag as given (nothing is known to pin it to)
    out = cli("image", "--project", str(project), "--bake", str(tmp_path / "c.json"), "--platform", "linux/arm64",
              env={**DEAD, "CPUBUILD_CACHE": str(cache)})
    assert out.returncode == 0, out.stderr
    assert {t["args"]["CPUBUILD_BASE"] for t in json.loads((tmp_path / "c.json").read_text())["target"].values()} == {"debian:bookworm-slim"}


def test_an_image_id_cannot_pin_a_bake_file(project: Path, tmp_path: Path) -> None:
    out = cli("image", "--project", str(project), "--bake", str(tmp_path / "b.json"), "--base", DIGEST, env=DEAD)
    assert_one_line(out, 2, "an image ID pins local builds only")
    assert not (tmp_path / "b.json").exists()


def test_the_build_stage_installs_a_hashed_set(project: Path, tmp_path: Path) -> None:
    out = cli("image", "--project", str(project), "--bake", str(tmp_path / "b.json"), env=DEAD)
    assert out.returncode == 0, out.stderr
    tool = project / ".cpubuild/tool"
    (core,) = tool.glob("cpubuild_core-*.whl")
    (cli_wheel,) = tool.glob("cpubuild-*.whl")
    text = (tool / "requirements.txt").read_text()
    own = "".join(f"{name} @ file:///cpubuild/{w.name} --hash=sha256:{hashlib.sha256(w.read_bytes()).hexdigest()}\n"
                  for name, w in (("cpubuild-core", core), ("cpubuild", cli_wheel)))
    assert text.startswith(own)
    pinned = re.findall(r"^([A-Za-z0-9_.-]+)==\S+", text, re.M)
    assert {"click", "rich", "packaging", "scikit-build-core"} <= {p.lower() for p in pinned}
    assert not {"cpubuild", "cpubuild-core"} & {p.lower() for p in pinned}  # only from the context, by hash
    # every requirement carries at least one hash; the Dockerfile installs with --require-hashes
    blocks = re.split(r"\n(?=\S)", text.strip())
    assert all("--hash=sha256:" in b for b in blocks), [b for b in blocks if "--hash" not in b]
    rendered = (project / ".cpubuild/Dockerfile").read_text()
    assert "--require-hashes --no-deps" in rendered and "-r /cpubuild/requirements.txt" in rendered
    assert dockerfile.instructions(rendered)  # still parses


# ------------------------------------------------------------------ with a daemon


@pytest.fixture(scope="module")
def daemon() -> None:
    require(shutil.which("docker") is not None, "docker is not installed (run scripts/setup.sh)")
    require(subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0,
            "the Docker daemon is not reachable (run scripts/setup.sh)")


@pytest.mark.docker
@pytest.mark.slow
def test_base_image_records_its_id(daemon: None) -> None:
    out = cli("base-image", "--json", timeout=3600)
    assert out.returncode == 0, out.stderr
    (image,) = json.loads(out.stdout)["images"]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", image["id"])
    recorded = pin.recorded(pin.parse(image["tag"]), image["platform"])
    assert recorded is not None and recorded.image_id == image["id"]


@pytest.mark.docker
@pytest.mark.slow
def test_a_tampered_hash_stops_the_build_stage(daemon: None, project: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run(["docker", "image", "rm", "cpubuild-test/hashcheck:build"], capture_output=True)
    """The cached resolution is what goes into the context: one hash changed there must
    fail the build stage's pip step, named with its stage, never install the package."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("CPUBUILD_CACHE_DIR", str(cache))
    hashed_requirements(project, self_wheel().wheels, python="3.11")
    (resolved,) = (cache / "image-requirements").glob("*.txt")
    text = resolved.read_text()
    block = re.search(r"^click==\S+(?: \\\n\s+--hash=sha256:[0-9a-f]{64})+", text, re.M)
    assert block is not None, text
    tampered = re.sub(r"--hash=sha256:[0-9a-f]{64}", "--hash=sha256:" + "0" * 64, block.group(0))
    resolved.write_text(text.replace(block.group(0), tampered))
    out = cli("image", "--project", str(project), "--platform", "linux/amd64", "--target", "build",
              "--tag", "cpubuild-test/hashcheck:build", "--no-smoke", env={"CPUBUILD_CACHE_DIR": str(cache)}, timeout=3600)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert "failed in stage 'build', step" in out.stderr, out.stderr[-3000:]
    assert "DO NOT MATCH THE HASHES" in out.stderr and f"Expected sha256 {'0' * 64}" in out.stderr
    assert re.search(r"click==\S+ from ", out.stderr), out.stderr[-3000:]
    assert subprocess.run(["docker", "image", "inspect", "cpubuild-test/hashcheck:build"], capture_output=True).returncode != 0


@pytest.mark.docker
@pytest.mark.slow
def test_the_build_stage_builds_on_the_pinned_base_from_the_hashed_set(daemon: None, project: Path) -> None:
    out = cli("image", "--project", str(project), "--platform", "linux/amd64", "--target", "build",
              "--tag", "cpubuild-test/hashcheck:build", "--no-smoke", "--json", timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    (built,) = json.loads(out.stdout)["images"]
    base = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", built["base"]], capture_output=True, text=True)
    assert built["base_pinned"] == base.stdout.strip() and re.fullmatch(r"sha256:[0-9a-f]{64}", built["base_pinned"])
    subprocess.run(["docker", "image", "rm", "cpubuild-test/hashcheck:build"], capture_output=True)
