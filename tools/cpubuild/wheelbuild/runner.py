"""Runs a BuildPlan on a Platform: preflight, build, repair, normalise, deliver.

Everything is produced in a private staging directory and moved into the
output directory only at the very end (an atomic rename), so a failing or
interrupted build leaves nothing half-written there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from ..cache import cache_dir, digest
from ..cmake import CMAKE_DIR
from ..contract import read_pyproject
from ..errors import BuildFailedError, UsageError
from ..licenses import unmatched_license_files
from ..matrix import Matrix
from ..platforms import Platform, Toolchain
from ..progress import locked
from ..toolchain import compilers, sharedcache, wheelzip
from ..toolchain.repair import Repaired
from ..toolchain.tools import require_all
from . import frontend, sbom
from .plan import BuildPlan
from .report import Reporter, optional_flags

LOG_TAIL_LINES = 30
# Variables that would silently change what the backend builds.
SCRUBBED_ENV = ("SKBUILD_BUILD_DIR",)


def log_tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """The part of a build log worth showing: from the first failed step or CMake error, else the end."""
    all_lines = text.splitlines()
    for i, line in enumerate(all_lines):
        if line.startswith(("FAILED: ", "CMake Error")):
            return "\n".join(all_lines[i : i + lines])
    return "\n".join(all_lines[-lines:])


def failure_message(*, stage: str | None, target: str | None, returncode: int) -> str:
    if target and stage == "configure":
        return f"CMake configure failed for variant {target!r} (exit {returncode})"
    if target == "probe":
        return f"the CPU probe library failed to build (exit {returncode})"
    if target == "common":  # COMMON_SOURCES: compiled once, linked into every variant
        return f"the shared objects (COMMON_SOURCES of cpubuild_add_variants) failed to compile (exit {returncode})"
    if target:
        return f"compile failed in variant {target!r} (exit {returncode})"
    return f"the wheel build failed during {stage or 'start-up'} (exit {returncode})"


def preflight(plan: BuildPlan, platform: Platform, matrix: Matrix, environ: Mapping[str, str]) -> Toolchain:
    """Licence files present, tools present, compilers identified, every requested variant's flags accepted."""
    unmatched = unmatched_license_files(plan.project, read_pyproject(plan.project / "pyproject.toml"))
    if unmatched:
        raise UsageError(f"{plan.project / 'pyproject.toml'}: [project] license-files: {unmatched[0]!r} matches no file "
                         "(a vendored library's licence comes with its sources: fetch them first)")
    arch = matrix.arches[plan.arch]
    require_all([*platform.requirements(arch), frontend.requirement(plan.frontend)])
    toolchain = platform.toolchain(arch, environ)
    variants = [matrix.variant(plan.arch, n) for n in plan.variants]
    compilers.require_variants(toolchain.cxx, variants, jobs=plan.jobs)
    compilers.require_variants(toolchain.c, [matrix.baseline(plan.arch)], jobs=1)
    return toolchain


def _verify(contents: wheelzip.WheelContents, plan: BuildPlan) -> None:
    problems = wheelzip.record_problems(contents.path)
    if contents.manifest is None:
        raise UsageError(
            f"{contents.path.name} holds no {wheelzip.MANIFEST_NAME}: the project's CMakeLists.txt never called "
            "cpubuild_add_variants(NAME SOURCES ...) (see docs/project.md)"
        )
    else:
        built = set(contents.built_variants)
        present = set(contents.variant_libraries)
        if built != set(plan.variants):
            problems.append(f"manifest lists {sorted(built)}, the plan asked for {sorted(plan.variants)}")
        if present != set(plan.variants):
            problems.append(f"variant libraries present: {sorted(present)}, expected {sorted(plan.variants)}")
    if problems:
        raise BuildFailedError(f"{contents.path.name} failed verification", detail="\n".join(problems))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _deliver(source: Path, out_dir: Path) -> Path:
    """Atomic move into the output directory (copy + rename across file systems),
    with the permissions a new file gets under the umask (temporary files are 0600)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    source.chmod(0o666 & ~_umask())
    target = out_dir / source.name
    try:
        os.replace(source, target)
    except OSError:
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{source.name}.", suffix=".partial")
        os.close(fd)
        try:
            shutil.copyfile(source, tmp)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return target


def repair_cached(
    plan: BuildPlan,
    platform: Platform,
    wheel: Path,
    dest: Path,
    guarded: Sequence[str],
    log: Callable[[str], None],
    reporter: Reporter,
) -> Repaired:
    """platform.repair, remembered per build directory.

    The backend's wheel is reproducible, so an unchanged rebuild hands over the
    very same bytes: the repaired wheel (and what auditwheel said about it) is
    reused instead of running auditwheel again. Keyed by the input's sha256,
    the platform, the policy, the guarded libraries and auditwheel's version."""
    try:
        tool = metadata.version("auditwheel")
    except metadata.PackageNotFoundError:
        tool = "?"
    key = digest(wheelzip.sha256_file(wheel), platform.name, plan.manylinux, *sorted(guarded), tool,
                 *(plan.torch.libraries if plan.torch else ()))
    store = plan.build_dir / "cpubuild-repair"
    meta = store / f"{key}.json"
    if meta.is_file():
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
            cached = store / key / data["filename"]
            if cached.is_file():
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cached, dest / cached.name)
                reporter.note("repair: unchanged input, reusing the repaired wheel")
                log(f"repair: reused {cached} (input sha256 unchanged)")
                return Repaired(wheel=dest / cached.name, policy=data["policy"], audited=data["audited"], isa_ext_check=data["isa_ext_check"])
        except (OSError, ValueError, KeyError):
            pass
    result = platform.repair(wheel, dest, plan, guarded, log)
    shutil.rmtree(store, ignore_errors=True)
    (store / key).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(result.wheel, store / key / result.wheel.name)
    meta.write_text(json.dumps({"filename": result.wheel.name, "policy": result.policy, "audited": result.audited,
                                "isa_ext_check": result.isa_ext_check}), encoding="utf-8")
    return result


def execute(
    plan: BuildPlan,
    platform: Platform,
    matrix: Matrix,
    reporter: Reporter,
    *,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Builds the plan's wheel into plan.out_dir and returns the JSON summary."""
    environ = dict(os.environ if environ is None else environ)
    started = time.monotonic()
    try:
        reporter.stage("preflight")
        toolchain = preflight(plan, platform, matrix, environ)
        reporter.note(f"compiler: {toolchain.cxx.display}")
        build_root = plan.build_dir.parent
        log_path = build_root / "logs" / f"{plan.build_dir.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with locked(plan.build_dir.parent / f"{plan.build_dir.name}.lock", f"the build directory {plan.build_dir}"):
            if plan.clean and plan.build_dir.exists():
                shutil.rmtree(plan.build_dir)
            plan.build_dir.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=build_root))
            try:
                with log_path.open("w", encoding="utf-8") as log:
                    result = _build(plan, platform, toolchain, reporter, environ, staging, log, log_path,
                                    variant_entries=sbom.matrix_entries(matrix, plan.arch))
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:  # an unwritable output or build directory, a full disk
        where = f"{exc.filename}: " if exc.filename else ""
        raise BuildFailedError(f"{where}{exc.strerror or exc}") from None
    finally:
        reporter.close()
    result["stages"] = reporter.stage_seconds
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


def _build(
    plan: BuildPlan,
    platform: Platform,
    toolchain: Toolchain,
    reporter: Reporter,
    environ: Mapping[str, str],
    staging: Path,
    log: IO[str],
    log_path: Path,
    *,
    variant_entries: Mapping[str, dict[str, Any]],
) -> dict[str, Any]:
    def log_line(text: str) -> None:
        log.write(text + "\n")
        reporter.line(text)

    setup = platform.setup(plan, toolchain, log_line)
    for note in setup.notes:
        reporter.note(note)
    settings = {**plan.config_settings, **setup.config_settings}
    env = {k: v for k, v in environ.items() if k not in SCRUBBED_ENV}
    env.update(plan.env)
    env.update(setup.env)
    dist = staging / "dist"
    dist.mkdir()
    counts: dict[str, int] | None = None
    current: dict[str, str | None] = {"stage": "frontend"}
    with contextlib.ExitStack() as stack:
        if plan.shared_cache:
            roots = {"project": plan.project, "build": plan.build_dir, "cpubuild": CMAKE_DIR.parent, "cache": cache_dir(),
                     **({"torch": plan.torch.directory} if plan.torch else {})}
            settings.update(sharedcache.cache_settings(plan.shared_cache, settings, plan.build_dir / "cpubuild-cc", cache_dir()))
            env.update(sharedcache.server_env(plan.shared_cache, roots, env))
            reporter.note(f"compiler cache: {plan.shared_cache.url} (sccache)")
            counts = stack.enter_context(sharedcache.running(plan.shared_cache, env))
        cmd = frontend.frontend_command(
            plan.frontend, python=sys.executable, project=plan.project, outdir=dist, settings=settings, isolated=plan.isolated
        )
        reporter.variants([*plan.variants, "probe"])
        reporter.stage("frontend")

        def on_event(event: frontend.Event) -> None:
            if event.kind == "stage" and event.stage and event.stage != current["stage"]:
                current["stage"] = event.stage
                reporter.stage(event.stage)
            reporter.event(event)

        outcome = frontend.run_frontend(
            cmd, env=env, cwd=plan.project, log=log, on_event=on_event, on_line=reporter.line, outdir=dist,
            variants=plan.variants,
        )
    if outcome.wheel is None:
        log.flush()
        text = log_path.read_text(encoding="utf-8", errors="replace")
        message = failure_message(stage=current["stage"], target=outcome.failed_target, returncode=outcome.returncode)
        raise BuildFailedError(f"{message}; full log: {log_path}", detail=log_tail(text))

    built = wheelzip.inspect(outcome.wheel)
    baseline = None if plan.isa.without_floor else plan.variants[0]  # a partial without the floor: every library is guarded
    guarded = [lib for name, lib in built.variant_libraries.items() if name != baseline]
    reporter.stage("repair")
    if plan.repair:
        repaired = repair_cached(plan, platform, outcome.wheel, staging / "repaired", guarded, log_line, reporter)
        wheel, policy, audited, isa_check = repaired.wheel, repaired.policy, repaired.audited, repaired.isa_ext_check
    else:
        wheel, policy, audited, isa_check = outcome.wheel, built.platforms[0], "not audited (--no-repair)", "not run"

    reporter.stage("normalize")
    if plan.relabel:  # a static [project] version: the ISA-set label goes on afterwards
        wheel = wheelzip.set_version(wheel, plan.version)
    sbom.add_to_wheel(wheel, project=plan.project, build_dir=plan.build_dir, arch=plan.arch,
                      compiler=toolchain.cxx.display, source_date_epoch=plan.source_date_epoch,
                      matrix_entries=variant_entries,
                      torch=plan.torch.version if plan.torch else None)
    wheelzip.normalize(wheel, plan.source_date_epoch)
    contents = wheelzip.inspect(wheel)
    _verify(contents, plan)
    reporter.stage("audit")
    from ..audit.gate import require_clean, summary

    # a violation fails the build, nothing delivered; the build tree's unstripped libraries name the functions
    audited_wheel = require_clean(wheel, symbol_dirs=(plan.build_dir,))
    instruction_audit = summary(audited_wheel)
    from ..audit.record import record_guarded

    record_guarded(wheel, audited_wheel, plan.source_date_epoch)  # names of declared guarded code, for later audits
    for warning in instruction_audit["warnings"]:
        reporter.note(f"audit: {warning}")
    reporter.stage("finalize")
    final = _deliver(wheel, plan.out_dir)
    return {
        "ok": True,
        "project": str(plan.project),
        "arch": plan.arch,
        "platform": plan.platform,
        "version": plan.version,
        "source_version": plan.source_version,
        "version_origin": plan.version_origin,
        "source_date_epoch": plan.source_date_epoch,
        "isa": {"variants": list(plan.variants), "label": plan.isa.label_text, "complete": plan.isa.complete},
        "wheel": {
            "path": str(final),
            "filename": final.name,
            "sha256": wheelzip.sha256_file(final),
            "size": final.stat().st_size,
            "variants": list(contents.built_variants),
            "optional_flags": optional_flags(contents.manifest),
            "tags": list(contents.tags),
            "policy": policy,
            "audited": audited,
            "isa_ext_check": isa_check,
            "instruction_audit": instruction_audit,
        },
        "compiler": toolchain.cxx.display,
        "torch": {"version": plan.torch.version, "origin": plan.torch.origin} if plan.torch else None,
        "ccache": plan.ccache,
        "shared_cache": {"url": plan.shared_cache.url, **(counts or {})} if plan.shared_cache else None,
        "frontend": plan.frontend,
        "config_settings": dict(plan.extra_settings),
        "isolated": plan.isolated,
        "build_dir": str(plan.build_dir),
        "log": str(log_path),
    }
