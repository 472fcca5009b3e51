"""`cpubuild develop --precompiled [--index URL] [--commit SHA]`

An editable install of a project's Python package for contributors who only
touch Python: the build products (variant libraries, probe, manifest and the
runtime cpubuild copies in: everything the wheel's package holds that the
source package does not) come out of the wheel published for the merge-base
commit, or the newest nightly, and are placed next to the sources (git-ignore
them). The editable install itself is a tiny wheel holding a .pth file that
puts the package's parent directory on sys.path, installed with pip or uv:
nothing runs CMake, nothing compiles.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import click
from packaging import tags
from packaging.version import Version

from ..errors import CpubuildError, ToolMissingError, UsageError
from ..index.client import RemoteFile, as_url, fetch, project_files
from ..index.names import NIGHTLY, IndexInputError, check_variant, parse_wheel_name, resolve_commit
from ..index.wheelfile import read_wheel_bytes, sha256_hex, write_wheel
from ..project import Project, find_project
from ..wheelbuild.tools import find_tool

INDEX_ENV = "CPUBUILD_INDEX_URL"
BASE_REFS = ("origin/main", "main")
LIBRARY = re.compile(r"\.(?:so|dylib)(?:\.[0-9.]+)?$")


class PrecompiledNotFoundError(CpubuildError):
    """No published wheel fits this checkout and host."""


@dataclass(frozen=True, kw_only=True)
class Candidate:
    tree: str
    why: str


def _git(repo: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


@dataclass(frozen=True, kw_only=True)
class Checkout:
    """Where the project's package sources are."""

    root: Path  # the project
    name: str  # distribution name, normalised as index pages spell it
    package: str
    source: Path  # the package's source directory (holds __init__.py)

    @property
    def import_root(self) -> Path:
        """The directory the .pth file puts on sys.path."""
        return self.source.parent


def find_checkout(project: Project) -> Checkout:
    source = project.source_dir
    if source is None:
        raise UsageError(f"{project.root}: no source directory of package {project.config.package!r} "
                         "(set [tool.cpubuild] source = \"path/to/package\")")
    return Checkout(root=project.root, name=re.sub(r"[-_.]+", "-", project.config.dist_name).lower(),
                    package=project.config.package, source=source.resolve())


def candidates(repo: Path, commit: str | None) -> list[Candidate]:
    """Which index trees to try, in order."""
    if commit is not None:
        return [Candidate(tree=resolve_commit(commit, repo=repo), why="--commit")]
    found = []
    for ref in BASE_REFS:
        base = _git(repo, "merge-base", "HEAD", ref)
        if base:
            found.append(Candidate(tree=base, why=f"merge-base of HEAD and {ref}"))
            break
    found.append(Candidate(tree=NIGHTLY, why="newest nightly"))
    return found


def target_tags(python: str) -> list[tags.Tag]:
    """Tags the target interpreter installs, best first (same host, its version)."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"],
            capture_output=True, text=True, timeout=60, check=False,
        )
    except OSError as exc:
        raise UsageError(f"--python {python}: cannot run it ({exc.strerror or exc})") from None
    if out.returncode != 0:
        raise UsageError(f"--python {python} does not run: {out.stderr.strip()[-300:]}")
    version = tuple(int(x) for x in out.stdout.split())
    platforms = list(tags.platform_tags())
    return [*tags.cpython_tags(version, platforms=platforms), *tags.compatible_tags(version, platforms=platforms)]


def choose_wheel(files: list[RemoteFile], supported: list[tags.Tag], project: str) -> RemoteFile | None:
    """The best wheel for this host: installable tags, the all-variant build
    (local label ending in 'cpu') before subsets, then the newest version,
    then the most specific tag."""
    rank = {tag: i for i, tag in enumerate(supported)}
    best: tuple[tuple[int, Version, int], RemoteFile] | None = None
    for f in files:
        try:
            name = parse_wheel_name(f.filename)
        except IndexInputError:
            continue
        if name.project != project:
            continue
        fits = [rank[t] for t in name.tags if t in rank]
        if not fits:
            continue
        local = name.version.local or ""
        full = 1 if local.split(".")[-1] in ("", "cpu") else 0
        key = (full, name.version, -min(fits))
        if best is None or key > best[0]:
            best = (key, f)
    return best[1] if best else None


def built_members(names: list[str], package: str, source: Path) -> list[str]:
    """Wheel members that are build products: under the package, absent from its sources
    (variant libraries, probe, manifest, the copied runtime), plus auditwheel's <package>.libs/."""
    out = []
    for name in names:
        parts = PurePosixPath(name).parts
        if name.endswith("/") or name.startswith("/") or ".." in parts:
            continue  # a directory, or a member that would escape the package
        if name.startswith(f"{package}.libs/") or (name.startswith(f"{package}/") and not (source / name[len(package) + 1:]).is_file()):
            out.append(name)
        elif name.startswith(f"{package}/") and (name.endswith("/_manifest.json") or "/_cpubuild/" in name):
            out.append(name)  # from an earlier precompiled install: refreshed
    return out


def extract_binaries(wheel_bytes: bytes, checkout: Checkout) -> list[str]:
    """Puts the wheel's build products next to the sources (atomically, file by
    file) and removes variant libraries left from an earlier wheel."""
    with zipfile.ZipFile(io.BytesIO(wheel_bytes)) as archive:
        members = built_members(archive.namelist(), checkout.package, checkout.source)
        if f"{checkout.package}/_manifest.json" not in members:
            raise PrecompiledNotFoundError(f"the published wheel holds no {checkout.package}/_manifest.json: not a wheel built by cpubuild")
        for member in members:
            target = checkout.import_root / member
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
            tmp.write_bytes(archive.read(member))
            os.chmod(tmp, 0o755 if LIBRARY.search(target.name) else 0o644)
            os.replace(tmp, target)  # a running interpreter keeps its mapped copy
    keep = {checkout.import_root / m for m in members}
    for stale in checkout.source.iterdir():
        if stale not in keep and LIBRARY.search(stale.name) and stale.is_file():
            stale.unlink()
    return sorted(members)


def install_editable(python: str, checkout: Checkout, version: str, record: dict[str, str]) -> None:
    dist = re.sub(r"[-_.]+", "_", checkout.name)
    with tempfile.TemporaryDirectory(prefix="cpubuild-develop-") as tmp:
        dist_info = f"{dist}-{version}.dist-info"
        wheel = write_wheel(
            Path(tmp),
            name=dist,
            version=version,
            requires_python=None,
            files={
                f"_{dist}_editable.pth": f"{checkout.import_root}\n".encode(),
                f"{dist_info}/cpubuild_precompiled.json": (json.dumps(record, indent=1) + "\n").encode(),
            },
        )
        has_pip = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, timeout=120, check=False).returncode == 0
        if has_pip:
            cmd = [python, "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall", "--disable-pip-version-check", "-q", str(wheel)]
        else:
            uv = find_tool("uv")
            cmd = [uv, "pip"] if uv else [sys.executable, "-m", "uv", "pip"]
            cmd += ["install", "--python", python, "--no-deps", "--reinstall", "--offline", "-q", str(wheel)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            raise ToolMissingError(f"installing the editable wheel failed: {' '.join(cmd)}", detail=(proc.stdout + proc.stderr)[-3000:])


def check_import(python: str, checkout: Checkout) -> str:
    package = checkout.package
    proc = subprocess.run(
        [python, "-c", f"import {package}; print({package}.__file__)"], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0 or Path(proc.stdout.strip()).parent.resolve() != checkout.source:
        raise CpubuildError(
            f"{python} imports {package} from {proc.stdout.strip() or 'nowhere'}, not {checkout.source}",
            detail=(proc.stderr[-2000:] or f"another {package} installed earlier on sys.path shadows the editable one; uninstall it"),
        )
    return proc.stdout.strip()


@click.command("develop")
@click.option("--precompiled", is_flag=True, help="Take the compiled libraries from the published wheel; never compile.")
@click.option("--index", "index_url", envvar=INDEX_ENV, metavar="URL", help=f"Index root (URL or directory); default ${INDEX_ENV}.")
@click.option("--commit", metavar="SHA", help="Use this commit's wheel (default: the merge-base with main, then nightly).")
@click.option("--variant", default="cpu", show_default=True, help="Index tree name (cpu, ...).")
@click.option("--python", "python", default=sys.executable, show_default="this interpreter", help="Interpreter to install into.")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
def command(precompiled: bool, index_url: str | None, commit: str | None, variant: str, python: str, project_dir: Path | None) -> None:
    """Editable install of the project's package with precompiled variant libraries."""
    if not precompiled:
        raise UsageError("only --precompiled is supported here; for a full editable build run: pip install --no-build-isolation -e .")
    if not index_url:
        raise UsageError(f"no index: pass --index URL (or set {INDEX_ENV}), e.g. the root `cpubuild publish --to` wrote")
    check_variant(variant)
    project = find_project(project_dir)
    checkout = find_checkout(project)
    version = project.source_version().public
    supported = target_tags(python)
    root = as_url(index_url)
    tried = []
    for cand in candidates(checkout.root, commit):
        tree_url = f"{root}{cand.tree}/{variant}/"
        files = project_files(tree_url, checkout.name)
        chosen = choose_wheel(files or [], supported, checkout.name)
        tried.append(f"  {tree_url}{checkout.name}/ ({cand.why}): " + ("no page" if files is None else "no wheel for this host" if chosen is None else "ok"))
        if chosen is not None:
            break
    else:
        raise PrecompiledNotFoundError(
            f"no published {checkout.name} wheel for this checkout and host; build it instead: pip install --no-build-isolation -e .",
            detail="tried:\n" + "\n".join(tried),
        )
    got = fetch(chosen.url)
    if got is None:
        raise PrecompiledNotFoundError(f"{chosen.url} is listed but missing")
    data = got[0]
    if chosen.sha256 and sha256_hex(data) != chosen.sha256:
        raise CpubuildError(f"{chosen.url}: sha256 {sha256_hex(data)} does not match the index ({chosen.sha256})")
    read_wheel_bytes(chosen.filename, data)  # a real wheel, before any file is touched
    members = extract_binaries(data, checkout)
    record = {"index": root, "tree": cand.tree, "variant": variant, "wheel": chosen.filename, "url": chosen.url, "sha256": sha256_hex(data)}
    install_editable(python, checkout, version, record)
    where = check_import(python, checkout)
    manifest = json.loads((checkout.source / "_manifest.json").read_text())
    click.echo(f"{cand.why}: {cand.tree}")
    click.echo(f"wheel:    {chosen.filename}")
    click.echo(f"libs:     {', '.join(m.split('/')[-1] for m in members if LIBRARY.search(m))}")
    click.echo(f"variants: {', '.join(v['name'] for v in manifest.get('variants', []))}")
    click.echo(f"editable: {python} imports {where}")
