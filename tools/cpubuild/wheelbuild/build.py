"""What `cpubuild wheel` does: its layered options -> a BuildPlan (plan_from_options:
the arch, the ISA set, the torch, ccache) -> the build (runner.execute) -> the
summary. commands/wheel.py only parses and prints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import hostprobe, torchdist
from ..errors import ToolMissingError, UsageError
from ..hardware import Arch, hardware
from ..matrix import Matrix
from ..platforms import Host, select_platform
from ..selfwheel import self_wheel
from ..toolchain import sharedcache
from ..toolchain.tools import find_tool
from ..torchdist import TorchBuild
from .options import WheelOptions, layer_options
from .plan import BuildPlan, best_runnable, make_plan, resolve_isa_set
from .report import make_reporter
from .runner import execute
from .variantwheels import make_variant_wheels, plan_level_wheels

if TYPE_CHECKING:  # the project reads wheelbuild.version: here it is only a type
    from ..project import Project


def resolve_ccache(choice: str) -> str | None:
    path = find_tool("ccache")
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

    isa = resolve_isa_set(matrix, arch, options.isa, native=native if arch == host.arch else None, partial=options.partial)
    torch = torch_for(project, matrix.arches[arch], options.torch, native=arch == host.arch)
    shared_cache = sharedcache.resolve(options.cache)
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
        frontend=(("uv" if find_tool("uv") else "build") if options.frontend == "auto" else options.frontend),
        isolated=isolated,
        jobs=options.jobs or os.cpu_count() or 1,
        ccache=None if shared_cache else resolve_ccache(options.ccache),
        shared_cache=shared_cache,
        repair=options.repair,
        clean=options.clean,
        verbose=verbose,
        inherited_ccache_ignore=os.environ.get("CCACHE_IGNOREOPTIONS", ""),
        relabel=project.config.static_version is not None,
        torch=torch,
        extra_settings=dict(setting.split("=", 1) for setting in options.config_settings),
        # An isolated build installs build-system.requires: cpubuild resolves to this one,
        # and torch (which the build does not use: CMake gets the torch above) to the one here.
        extra_env=self_wheel(backend_only=True).pip_env(torchdist.build_env_pins(torch)) if isolated else None,
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


def build_wheel(project: Project, *, cli: dict[str, Any], quiet: bool, verbose: bool) -> dict[str, Any]:
    """One `cpubuild wheel` run: layered options -> plan -> build (-> variant wheels); the summary."""
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
    if options.partial and options.variant_wheels:
        raise UsageError("--variant-wheels with --partial: a partial is not a release; derive the variant wheels from "
                         "the merged one (cpubuild merge --variant-wheels)")
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
