"""`cpubuild doctor`: is this host ready to build, cross-build, emulate and containerise?

Every missing piece is printed with the command that fixes it. Exit status 1
when something the native wheel build needs is missing, else 0.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from ..matrix import Matrix
from ..platforms import Host, select_platform
from ..wheelbuild import frontend, hostcpu
from ..wheelbuild.options import FRONTENDS
from ..wheelbuild.project import find_project
from ..wheelbuild.report import dump_json
from ..wheelbuild.tools import ToolStatus, apt_fix, check

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
    detail = status.problem or f"{status.version or 'found'} ({status.path})"
    return Check(section=section, name=req.name, ok=status.ok, detail=f"{detail} - {req.purpose}",
                 fix=None if status.ok else req.fix, required=req.required if required is None else required)


def cpu_checks(matrix: Matrix, host: Host) -> list[Check]:
    checks = []
    try:
        info = importlib.import_module("cpuinfo").get_cpu_info()
        brand = str(info.get("brand_raw") or info.get("arch") or "unknown CPU")
        flags = [str(f) for f in info.get("flags", [])]
        checks.append(Check(section="cpu", name="py-cpuinfo", ok=True, detail=brand, fix=None, required=False))
    except Exception as exc:
        checks.append(Check(section="cpu", name="py-cpuinfo", ok=False, detail=f"not usable: {exc}",
                            fix="python3 -m pip install py-cpuinfo", required=False))
        return checks
    names = list(matrix.features.get(host.arch, {}))
    found = hostcpu.match_flags(names, flags)
    checks.append(Check(section="cpu", name="features", ok=True,
                        detail=f"found: {' '.join(n for n in names if n in found) or '-'}; "
                               f"not found: {' '.join(n for n in names if n not in found) or '-'}",
                        fix=None, required=False))
    runnable = [v.name for v in matrix.variants_for(host.arch) if all(f in found for f in v.requires)]
    if runnable:
        checks.append(Check(section="cpu", name="variants this CPU runs", ok=True, detail=", ".join(runnable), fix=None, required=False))
    return checks


def build_checks(matrix: Matrix, host: Host) -> list[Check]:
    checks: list[Check] = []
    if host.arch not in matrix.arches:
        return [Check(section="build", name="native arch", ok=False, detail=f"{host.arch} is not an arch of isa_matrix.toml",
                      fix=None, required=True)]
    platform = select_platform(host.arch, host)
    for req in platform.requirements(matrix.arches[host.arch]):
        checks.append(from_status("build", check(req)))
    for name in FRONTENDS:
        checks.append(from_status("build", check(frontend.requirement(name)), required=name == "build"))
    return checks


def cross_checks(matrix: Matrix, host: Host) -> list[Check]:
    checks = []
    for arch, info in matrix.arches.items():
        if arch == host.arch:
            continue
        compiler = f"{info.triplet}-g++"
        path = shutil.which(compiler)
        try:
            platform: str | None = select_platform(arch, host).name
        except Exception:
            platform = None
        detail = f"{path or 'not found'}; build platform: {platform or 'none registered'}"
        checks.append(Check(section="cross", name=f"{arch} compiler", ok=path is not None, detail=detail,
                            fix=None if path else apt_fix(f"g++-{info.triplet.replace('_', '-')}"), required=False))
    return checks


def docker_checks() -> list[Check]:
    cli = shutil.which("docker")
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
                            fix=None if ok else "dockerd >/var/log/dockerd.log 2>&1 &   (or: bash scripts/setup.sh)", required=False))
    return checks


def qemu_checks(matrix: Matrix, host: Host) -> list[Check]:
    checks = []
    mounted = (BINFMT / "status").exists()
    checks.append(Check(section="qemu", name="binfmt_misc", ok=mounted, detail="mounted" if mounted else "not mounted",
                        fix=None if mounted else "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc", required=False))
    for arch, info in matrix.arches.items():
        if arch == host.arch:
            continue
        exe = shutil.which(f"qemu-{info.qemu}-static")
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


def run_checks(matrix: Matrix, host: Host) -> list[Check]:
    return [*cpu_checks(matrix, host), *build_checks(matrix, host), *cross_checks(matrix, host), *docker_checks(), *qemu_checks(matrix, host)]


@click.command(name="doctor")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
def command(as_json: bool, project_dir: Path | None) -> None:
    """Check the host CPU, compilers and cross compilers, cmake/ninja, ccache,
    auditwheel/patchelf, the Docker daemon and QEMU binfmt; print a fix for each gap."""
    matrix = find_project(project_dir).load_matrix()
    host = Host.current()
    checks = run_checks(matrix, host)
    failed_required = [c for c in checks if c.required and not c.ok]
    if as_json:
        click.echo(dump_json({"host": {"os": host.os, "arch": host.arch}, "ok": not failed_required,
                              "checks": [c.to_json() for c in checks]}))
    else:
        console = Console(highlight=False, soft_wrap=True)
        section = None
        for c in checks:
            if c.section != section:
                section = c.section
                console.print(f"\n[bold]{section}[/]")
            mark = "[green]ok[/]  " if c.ok else ("[red]MISSING[/]" if c.required else "[yellow]missing[/]")
            console.print(f"  {mark} {escape(c.name)}: {escape(c.detail)}")
            if c.fix:
                console.print(f"          fix: {escape(c.fix)}")
        console.print("\n" + ("[green]ready to build wheels for this host[/]" if not failed_required
                              else f"[red]{len(failed_required)} required piece(s) missing[/]"))
    if failed_required:
        raise click.exceptions.Exit(1)
