"""`cpubuild matrix`'s report: per arch of the project's matrix, the build
platform and compiler this host would use, and per variant whether its flags
compile here (buildable) and whether this CPU runs it (runnable)."""

from __future__ import annotations

import os
from typing import Any

from .. import hostprobe
from ..errors import CpubuildError
from ..matrix import Matrix
from ..platforms import Host, select_platform
from ..toolchain import compilers


def arch_report(matrix: Matrix, arch: str, host: Host, *, build_check: bool = True) -> dict[str, Any]:
    """One arch: its platform, compiler, and per variant buildable / runnable."""
    info = matrix.arches[arch]
    variants = matrix.variants_for(arch)
    out: dict[str, Any] = {"manylinux": info.manylinux, "macos": info.macos, "platform": None, "compiler": None, "compiler_error": None}
    probes: dict[str, compilers.FlagProbe] = {}
    try:
        platform = select_platform(info, host)
        out["platform"] = platform.name
        if build_check:
            toolchain = platform.toolchain(info, os.environ)
            out["compiler"] = toolchain.cxx.display
            probes = {p.variant: p for p in compilers.probe_variants(toolchain.cxx, variants)}
    except CpubuildError as exc:
        out["compiler_error"] = exc.message
    features = hostprobe.host_features(arch, matrix.features.get(arch, {}))
    runs_here = arch == host.arch and not features.source.startswith("unavailable")
    rows = []
    for v in variants:
        probe = probes.get(v.name)
        missing = [f for f in v.requires if f not in features.found]
        rows.append({
            "name": v.name,
            "priority": v.priority,
            "requires": list(v.requires),
            "description": v.description,
            "flags": {family: list(flags) for family, flags in v.flags.items()},
            "buildable": probe.ok if probe else None,
            "build_log": (probe.log or None) if probe else None,
            "runnable": (not missing) if runs_here else None,
            "missing": missing if runs_here else [],
        })
    out["variants"] = rows
    out["feature_source"] = features.source
    return out


def matrix_report(matrix: Matrix, host: Host, *, build_check: bool = True,
                  project_facts: dict[str, Any] | None = None) -> dict[str, Any]:
    project_facts = project_facts or {}
    features = hostprobe.host_features(host.arch, matrix.features.get(host.arch, {}))
    return {
        "matrix": matrix.path,
        "project": {"package": project_facts.get("package"), "env_prefix": project_facts.get("env_prefix")},
        "host": {"os": host.os, "arch": host.arch, "features": sorted(features.found), "feature_source": features.source},
        "arches": {arch: arch_report(matrix, arch, host, build_check=build_check) for arch in matrix.arches},
    }
