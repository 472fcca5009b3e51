"""`cpubuild develop --precompiled`: an editable install of a project's Python
package for contributors who only touch Python. The build products (variant
libraries, probe, manifest and the runtime cpubuild copies in: everything the
wheel's package holds that the source package does not) come out of the wheel
published for the merge-base commit, or the newest nightly, and are placed
next to the sources (git-ignore them). The editable install itself is a tiny
wheel holding a .pth file that puts the package's parent directory on
sys.path, installed with pip or uv: nothing runs CMake, nothing compiles.
"""


from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging import tags
from packaging.version import Version

from ..errors import CpubuildError, ToolMissingError, UsageError
from ..project import Project, find_project
from ..toolchain.tools import find_tool
from .client import RemoteFile, as_url, fetch, project_files, redact
from .names import NIGHTLY, IndexInputError, check_variant, parse_wheel_name, resolve_commit
from .precompiled import FileInTheWayError, members_to_extract, place_products
from .wheelfile import read_wheel_bytes, sha256_hex, write_wheel

INDEX_ENV = "CPUBUILD_INDEX_URL"
BASE_REFS = ("origin/main", "main")


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
    """Wheel members that would be placed in a fresh checkout (see index.precompiled)."""
    return members_to_extract(names, package, source, source.parent, {})


def extract_binaries(wheel_bytes: bytes, checkout: Checkout, *, force: bool = False) -> list[str]:
    """Puts the wheel's build products next to the sources; only files an earlier run put there are replaced or removed."""
    try:
        return place_products(wheel_bytes, root=checkout.root, package=checkout.package, source=checkout.source, force=force)
    except FileInTheWayError:
        raise
    except CpubuildError as exc:
        raise PrecompiledNotFoundError(exc.message) from None


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


@dataclass(frozen=True, kw_only=True)
class Developed:
    """What `develop --precompiled` placed and installed."""

    candidate: Candidate  # the index tree taken, and why
    wheel: str  # its file name
    members: list[str]  # the build products placed next to the sources
    variants: list[str]  # from the placed manifest
    imports_from: str  # where `python` now imports the package from


def develop_precompiled(project_dir: Path | None, *, index_url: str, commit: str | None, variant: str, python: str,
                        force: bool) -> Developed:
    """The build products of the published wheel that fits this checkout (the merge-base's,
    else the newest nightly) placed next to the sources, and an editable install into `python`."""
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
        tried.append(f"  {redact(tree_url)}{checkout.name}/ ({cand.why}): " + ("no page" if files is None else "no wheel for this host" if chosen is None else "ok"))
        if chosen is not None:
            break
    else:
        raise PrecompiledNotFoundError(
            f"no published {checkout.name} wheel for this checkout and host; build it instead: pip install --no-build-isolation -e .",
            detail="tried:\n" + "\n".join(tried),
        )
    got = fetch(chosen.url)
    if got is None:
        raise PrecompiledNotFoundError(f"{redact(chosen.url)} is listed but missing")
    data = got[0]
    if chosen.sha256 and sha256_hex(data) != chosen.sha256:
        raise CpubuildError(f"{redact(chosen.url)}: sha256 {sha256_hex(data)} does not match the index ({chosen.sha256})")
    read_wheel_bytes(chosen.filename, data)  # a real wheel, before any file is touched
    members = extract_binaries(data, checkout, force=force)
    record = {"index": redact(root), "tree": cand.tree, "variant": variant, "wheel": chosen.filename, "url": redact(chosen.url),
              "sha256": sha256_hex(data)}
    install_editable(python, checkout, version, record)
    where = check_import(python, checkout)
    manifest = json.loads((checkout.source / "_manifest.json").read_text())
    return Developed(candidate=cand, wheel=chosen.filename, members=members,
                     variants=[v["name"] for v in manifest.get("variants", [])], imports_from=where)
