"""`cpubuild wheel`: one repaired, reproducible wheel for a set of ISA variants."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import click

from .. import hostprobe, torchdist
from ..errors import CpubuildError, ToolMissingError, UsageError
from ..hardware import Arch, hardware
from ..matrix import Matrix
from ..platforms import Host, select_platform
from ..project import Project, find_project
from ..selfwheel import self_wheel
from ..settings import WheelSettings
from ..settings.clickopts import given, settings_options
from ..torchdist import TorchBuild
from ..wheelbuild.options import WheelOptions, layer_options
from ..wheelbuild.plan import BuildPlan, best_runnable, make_plan, resolve_isa_set
from ..wheelbuild.report import dump_json, make_reporter, render_summary
from ..wheelbuild.runner import execute
from ..wheelbuild.variantwheels import make_variant_wheels, plan_level_wheels


def resolve_ccache(choice: str) -> str | None:
    path = shutil.which("ccache")
    if choice == "off":
        return None
    if choice == "on" and path is None:
        raise ToolMissingError("--ccache on, but ccache is not installed", detail="fix: apt-get install -y ccache")
    return path


def plan_from_options(
    project: Project, matrix: Matrix, options: WheelOptions, *, host: Host, verbose: bool = False
) -> BuildPlan:
    """Options -> plan: validates the arch and ISA names, resolves the version. Runs nothing."""
    arch = hardware().resolve_arch(options.arch or host.arch, matrix.arches, offered_by=f"{matrix.path} has variants for")
    platform = select_platform(matrix.arches[arch], host)

    def native() -> str:
        features = hostprobe.host_features(arch, matrix.features.get(arch, {}))
        return best_runnable(matrix, arch, features.found).name

    isa = resolve_isa_set(matrix, arch, options.isa, native=native if arch == host.arch else None)
    torch = torch_for(project, matrix.arches[arch], options.torch, native=arch == host.arch)
    isolated = not project.backend_importable() if options.isolation == "auto" else options.isolation == "on"
    return make_plan(
        matrix=matrix,
        project=project.root,
        isa=isa,
        platform=platform.name,
        source=project.source_version(),
        build_root=options.build_root or project.root / "build" / "cpubuild",
        # given paths are absolute by now; the default wheelhouse/ is the project's (where `cpubuild test --project` looks)
        out_dir=project.root / options.out,
        frontend=(("uv" if shutil.which("uv") else "build") if options.frontend == "auto" else options.frontend),
        isolated=isolated,
        jobs=options.jobs or os.cpu_count() or 1,
        ccache=resolve_ccache(options.ccache),
        repair=options.repair,
        clean=options.clean,
        verbose=verbose,
        inherited_ccache_ignore=os.environ.get("CCACHE_IGNOREOPTIONS", ""),
        relabel=project.config.static_version is not None,
        torch=torch,
        extra_settings=dict(setting.split("=", 1) for setting in options.config_settings),
        # An isolated build installs build-system.requires: cpubuild resolves to this one,
        # and torch (which the build does not use: CMake gets the torch above) to the one here.
        extra_env=self_wheel().pip_env(torchdist.build_env_pins(torch)) if isolated else None,
    )


def torch_for(project: Project, arch: Arch, requested: str | None, *, native: bool) -> TorchBuild | None:
    """The torch a torch project builds against: this Python's (native, unless
    another version is asked for), else the requested version's wheel for the
    target arch, downloaded (default: this Python's version)."""
    if project.config.kind != "torch":
        if requested:
            raise UsageError(f"--torch {requested}: {project.config.dist_name} is not a torch project ([tool.cpubuild] kind = torch)")
        return None
    here = torchdist.installed_version()
    if native and (requested is None or (here and torchdist.same_release(here, requested))):
        return torchdist.installed(requested)
    if requested is None:
        if here is None:
            raise UsageError("a cross build of a torch project needs --torch X.Y.Z (this Python has no torch to follow)")
        requested = torchdist.release(here)
    return torchdist.downloaded(requested, arch)


@click.command(name="wheel")
@settings_options(WheelSettings)
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
@click.option("-q", "--quiet", is_flag=True, help="No progress; print only the wheel path.")
@click.option("-v", "--verbose", is_flag=True, help="Stream the full build log.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary on stdout.")
def command(project_dir: Path | None, quiet: bool, verbose: bool, as_json: bool, **options: Any) -> None:
    """Build one repaired, reproducible wheel holding a set of ISA variants.

    Options come from, in rising precedence: pyproject.toml [tool.cpubuild.wheel],
    CPUBUILD_* environment variables, this command line. See docs/wheels.md.
    """
    if quiet and verbose:
        raise UsageError("-q and -v exclude each other")
    try:
        summary = _run(
            cli=given(WheelSettings, options),
            project_dir=project_dir, quiet=quiet, verbose=verbose,
        )
    except CpubuildError as exc:
        if as_json:
            click.echo(dump_json({"ok": False, "error": exc.message, "detail": exc.detail, "exit_code": exc.exit_code}))
        raise
    if as_json:
        click.echo(dump_json(summary))
    elif quiet:
        click.echo(summary["wheel"]["path"])
        for extra in (summary.get("variant_wheels") or {}).get("wheels", []):
            click.echo(extra["path"])
    else:
        click.echo(render_summary(summary))
        extras = summary.get("variant_wheels")
        if extras:
            for extra in extras["wheels"]:
                level = f"{extras['namespace']} level {extra['level']}" if extra["level"] else "no level detected"
                click.echo(f"variant wheel {extra['label']:<14} ({level}): {', '.join(extra['variants'])}")
            click.echo(f"variants.json: {extras['variants_json']}")


def _run(*, cli: dict[str, Any], project_dir: Path | None, quiet: bool, verbose: bool) -> dict[str, Any]:
    project = find_project(project_dir)
    problems = project.cmake_problems()
    if problems:
        raise UsageError(problems[0])
    options = layer_options(
        pyproject=project.tool("cpubuild", "wheel") or {},
        environ=os.environ,
        cli=cli,
        project=project.root,
        cwd=Path.cwd(),
    )
    matrix = project.load_matrix()
    host = Host.current()
    plan = plan_from_options(project, matrix, options, host=host, verbose=verbose)
    if options.variant_wheels:
        plan_level_wheels(matrix, plan.arch, plan.variants)  # an arch without levels fails before the build
    platform = select_platform(plan.target, host)
    reporter = make_reporter(quiet=quiet, verbose=verbose)
    reporter.note(f"{plan.arch} [{', '.join(plan.variants)}] -> {plan.version}")
    summary = execute(plan, platform, matrix, reporter)
    if options.variant_wheels:
        summary["variant_wheels"] = make_variant_wheels(Path(summary["wheel"]["path"]), matrix, plan.arch,
                                                        plan.source_date_epoch)
    return summary
