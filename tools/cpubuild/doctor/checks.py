"""What `cpubuild doctor` checks: does the project follow the contract (its
[tool.cpubuild] tables read by the settings model, the variables the commands
would layer over them), and is this host ready to build, cross-build, emulate
and containerise it? Every check says what fixes a gap."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import hostprobe
from ..errors import CpubuildError
from ..matrix import Matrix
from ..platforms import Host, select_platform
from ..project import VERSION_PROVIDER, Project
from ..runtime.select import lacking
from ..scaffold import cpubuild_requirement
from ..selfwheel import CLI, CORE
from ..settings import FRONTENDS, TABLES, SettingsError, layer
from ..toolchain.tools import ToolStatus, apt_fix, check, find_tool, tool_origin
from ..wheelbuild import frontend, syslibs

# the tables whose values CPUBUILD_* variables and options override, by sub-table key
LAYERED = {name.rsplit(".", 1)[1]: cls for name, cls in TABLES.items() if getattr(cls, "layered", False)}
LAYERED_DOCS = {"wheel": "docs/wheels.md", "test": "docs/cross.md", "bench": "docs/project.md"}
DOCS = "docs/project.md"

BINFMT = Path("/proc/sys/fs/binfmt_misc")


@dataclass(frozen=True, kw_only=True)
class Check:
    section: str
    name: str
    ok: bool
    detail: str
    fix: str | None
    required: bool

    def to_json(self) -> dict[str, Any]:
        return {"section": self.section, "name": self.name, "ok": self.ok, "detail": self.detail, "fix": self.fix, "required": self.required}


def from_status(section: str, status: ToolStatus, *, required: bool | None = None) -> Check:
    req = status.requirement
    where = f"{status.path}, from {tool_origin(status.path)}" if status.path else "not found"
    detail = status.problem or f"{status.version or 'found'} ({where})"
    return Check(section=section, name=req.name, ok=status.ok, detail=f"{detail} - {req.purpose}",
                 fix=None if status.ok else req.fix, required=req.required if required is None else required)


def cpu_checks(matrix: Matrix, host: Host) -> list[Check]:
    features = hostprobe.host_features(host.arch)
    if features.source.startswith("unavailable"):
        return [Check(section="cpu", name="features", ok=False, detail=features.source,
                      fix="apt-get install -y gcc  (or: python3 -m pip install py-cpuinfo)", required=False)]
    names = list(matrix.features.get(host.arch, {}))
    checks = [Check(section="cpu", name="features", ok=True,
                    detail=f"found ({features.source}): {' '.join(n for n in names if n in features.found) or '-'}; "
                           f"not found: {' '.join(n for n in names if n not in features.found) or '-'}",
                    fix=None, required=False)]
    runnable = [v.name for v in matrix.variants_for(host.arch) if not lacking(v.requires, features.found)]
    if runnable:
        checks.append(Check(section="cpu", name="variants this CPU runs", ok=True, detail=", ".join(runnable), fix=None, required=False))
    return checks


def _module_file(source: Path, package: str, module: str) -> Path | None:
    """Where module `package.sub.mod` lives in the package's source directory."""
    parts = module.split(".")
    if parts[0] != package:
        return None
    base = source.joinpath(*parts[1:])
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def layered_checks(project: Project, item: Callable[..., Check]) -> list[Check]:
    """Each layered table ([tool.cpubuild.wheel], .test, .bench) with the variables its command would
    layer over it (CPUBUILD_*, CPUBUILD_TEST_*, CPUBUILD_BENCH_*), read by the same model."""
    checks = []
    for key, cls in LAYERED.items():
        name = f"tool.cpubuild.{key}"
        try:
            layer(cls, pyproject=project.config.tables.get(key, {}), pyproject_path=project.root / "pyproject.toml",
                  table_name=name, environ=os.environ, cli={}, project=project.root, cwd=Path.cwd())
            checks.append(item(f"{key} options", None, f"[{name}] and {getattr(cls, 'env_prefix', 'CPUBUILD_')}* variables"))
        except SettingsError as exc:
            checks.append(item(f"{key} options", str(exc), "", fix=f"see {LAYERED_DOCS[key]}"))
    return checks


def project_checks(project: Project) -> list[Check]:
    """The project against the contract (docs/project.md), one check per part."""
    config = project.config

    def item(name: str, problem: str | None, detail: str, fix: str | None = None, required: bool = True) -> Check:
        return Check(section="project", name=name, ok=problem is None, detail=problem or detail,
                     fix=(fix or f"see {DOCS}") if problem else None, required=required)

    checks = [item("contract", None, f"[tool.cpubuild] package {config.package}, env prefix {config.env_prefix}_, kind {config.kind}")]
    checks += layered_checks(project, item)
    try:
        matrix = project.load_matrix()
        checks.append(item("matrix", None, f"{matrix.path}: {len(matrix.variants)} variants for {', '.join(matrix.arches)}"))
    except CpubuildError as exc:
        checks.append(item("matrix", exc.message, ""))
    system = project.pyproject.get("build-system", {})
    requires = [re.split(r"[<>=!~;\[ ]", str(r), maxsplit=1)[0].lower() for r in system.get("requires", [])]
    # cpubuild-core holds the files an isolated build needs; cpubuild (the CLI, which depends on it) works too, slower
    missing = [" or ".join(names) for names in (("scikit-build-core",), (CORE, CLI))
               if not any(name in requires for name in names)]
    backend_ok = system.get("build-backend") == "scikit_build_core.build"
    checks.append(item("build-system", f"pyproject.toml build-system lacks {', '.join(missing) or 'build-backend = scikit_build_core.build'}"
                       if missing or not backend_ok else None, "scikit-build-core + cpubuild-core",
                       fix=f'requires = ["scikit-build-core>=1.1", "{cpubuild_requirement()}"], build-backend = "scikit_build_core.build"'))
    cmake = project.cmake_problems()
    checks.append(item("CMakeLists.txt", cmake[0] if cmake else None, "find_package(cpubuild) + cpubuild_add_variants()",
                       fix="find_package(cpubuild CONFIG REQUIRED) then cpubuild_add_variants(NAME SOURCES ...)"))
    source = project.source_dir
    checks.append(item("package source", None if source else f"no {config.package}/__init__.py under src/, python/ or the project root",
                       str(source), fix="[tool.cpubuild] source = \"path/to/package\""))
    if source is not None:
        main = source / "__main__.py"
        delegates = main.is_file() and "_cpubuild" in main.read_text(encoding="utf-8", errors="replace")
        checks.append(item(f"python -m {config.package}", None if delegates else f"{main} does not call the shipped report",
                           "the dispatcher's report", fix="from ._cpubuild.report import main; sys.exit(main())"))
        for key, command in (("selftest", config.selftest),):
            if command is not None and _module_file(source, config.package, command.target) is None:
                checks.append(item(key, f"module {command.target} not found in {source}", ""))
            elif command is not None:
                checks.append(item(key, None, f"python -m {command.text} --json"))
    if config.benchmark is not None:
        script = project.root / config.benchmark.target
        checks.append(item("benchmark", None if script.is_file() else f"{script} does not exist", str(script), required=False))
    if config.static_version is not None:
        checks.append(item("version", None, f"static {config.static_version} (+ the ISA-set label)"))
    else:
        try:
            base = project.base_version_file
            checks.append(item("version", None if base and base.is_file() else f"fallback file {base} does not exist",
                               f"provider {VERSION_PROVIDER!r}, fallback {base}"))
        except CpubuildError as exc:
            checks.append(item("version", exc.message, ""))
    return checks


def build_checks(matrix: Matrix, host: Host) -> list[Check]:
    checks: list[Check] = []
    if host.arch not in matrix.arches:
        return [Check(section="build", name="native arch", ok=False, detail=f"{host.arch} is not an arch of isa_matrix.toml",
                      fix=None, required=True)]
    platform = select_platform(matrix.arches[host.arch], host)
    for req in platform.requirements(matrix.arches[host.arch]):
        checks.append(from_status("build", check(req)))
    for name in (f for f in FRONTENDS if f != "auto"):
        checks.append(from_status("build", check(frontend.requirement(name)), required=name == "build"))
    checks += [from_status("build", status) for status in syslibs.library_statuses(matrix, host.arch)]
    return checks


def cross_checks(matrix: Matrix, host: Host) -> list[Check]:
    checks = []
    for arch, info in matrix.arches.items():
        if arch == host.arch:
            continue
        compiler = f"{info.triplet}-g++"
        path = find_tool(compiler)
        try:
            platform: str | None = select_platform(info, host).name
        except Exception:
            platform = None
        detail = f"{path or 'not found'}; build platform: {platform or 'none registered'}"
        checks.append(Check(section="cross", name=f"{arch} compiler", ok=path is not None, detail=detail,
                            fix=None if path else apt_fix(f"g++-{info.triplet.replace('_', '-')}"), required=False))
    return checks


def docker_checks() -> list[Check]:
    cli = find_tool("docker")
    checks = [Check(section="docker", name="docker CLI", ok=cli is not None, detail=cli or "not found",
                    fix=None if cli else apt_fix("docker.io"), required=False)]
    if cli:
        try:
            proc = subprocess.run([cli, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=15)
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            ok = proc.returncode == 0
            detail = f"daemon {proc.stdout.strip()}" if ok else (lines[-1] if lines else "no answer")
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, detail = False, str(exc)
        checks.append(Check(section="docker", name="docker daemon", ok=ok, detail=detail,
                            fix=None if ok else "dockerd >/var/log/dockerd.log 2>&1 &   (as root; apt-get install -y docker.io first)", required=False))
    return checks


def qemu_checks(matrix: Matrix, host: Host) -> list[Check]:
    checks = []
    mounted = (BINFMT / "status").exists()
    checks.append(Check(section="qemu", name="binfmt_misc", ok=mounted, detail="mounted" if mounted else "not mounted",
                        fix=None if mounted else "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc", required=False))
    for arch, info in matrix.arches.items():
        if arch == host.arch:
            continue
        exe = find_tool(f"qemu-{info.qemu}-static")
        checks.append(Check(section="qemu", name=f"qemu-{info.qemu}-static", ok=exe is not None, detail=exe or "not found",
                            fix=None if exe else apt_fix("qemu-user-static", "binfmt-support"), required=False))
        entry = BINFMT / f"qemu-{info.qemu}"
        try:
            enabled = entry.read_text().splitlines()[0].strip() == "enabled"
        except OSError:
            enabled = False
        checks.append(Check(section="qemu", name=f"binfmt qemu-{info.qemu}", ok=enabled,
                            detail="enabled" if enabled else "not registered",
                            fix=None if enabled else f"update-binfmts --enable qemu-{info.qemu}", required=False))
    return checks


def run_checks(project: Project, host: Host) -> list[Check]:
    checks = project_checks(project)
    try:
        matrix = project.load_matrix()
    except CpubuildError:
        return checks  # the matrix check above says why
    return [*checks, *cpu_checks(matrix, host), *build_checks(matrix, host), *cross_checks(matrix, host), *docker_checks(),
            *qemu_checks(matrix, host)]
