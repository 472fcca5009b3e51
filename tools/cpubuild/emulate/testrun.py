"""The engine of `cpubuild test --arch ARCH --cpu MODEL [WHEEL]`: run a wheel under an emulated CPU.

Installs the wheel into a Python of the target arch (a cached Debian rootfs
for foreign arches, the host's own Python for x86_64) and runs it under
qemu-user with the given CPU model: first the dispatcher's report
(`python -m <package> --json`, which needs no NumPy), then the project's
declared selftest (`python -m <selftest> --json`, [tool.cpubuild] selftest;
NumPy is installed in the trees). What to run comes from the wheel's own
manifest, so any cpubuild-built wheel can be tested. Prints the selected
variant and pass/fail; exit status 1 on any failure, 2 on bad input.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contract import ContractError
from ..errors import ToolMissingError, UsageError
from ..hardware import Arch, hardware
from ..project import Project, find_project, nearest_project
from ..runtime.select import env_names
from ..settings import EmulatedTestSettings, layer
from ..toolchain.tools import find_tool
from ..toolchain.wheelzip import inspect
from .rootfs import Emulator, RootfsSpec, check_can_run, ensure_rootfs, host_qemu_arch, installed_wheel
from .torchsite import check_host_torch, ensure_torch_site

AUTO = "auto"
NO_VARIANT = "none"  # --expect none: a CPU below the package's floor, refused cleanly
NO_NUMPY = "No module named 'numpy'"


@dataclass(frozen=True, kw_only=True)
class Target:
    """What the wheel says about itself (its manifest): what to run and how to force."""

    package: str
    env_prefix: str
    selftest: tuple[str, ...]  # () when the project declares none
    variants: dict[str, tuple[str, ...]]  # built variant -> required features, lowest priority first
    known: tuple[str, ...]  # every variant of the arch, built or not
    torch: str | None = None  # torch projects: the torch release the wheel was built against

    @property
    def force_env(self) -> str:
        return env_names(self.env_prefix)[0]


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one emulated run found; `ok` decides the exit status."""

    arch: str
    cpu: str
    wheel: str
    forced: str | None
    selected: str | None
    report_error: str | None
    checks: dict[str, Any] | None
    checks_skipped: str | None
    problems: tuple[str, ...]
    seconds: float
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "cpu": self.cpu,
            "wheel": self.wheel,
            "forced": self.forced,
            "selected": self.selected,
            "report_error": self.report_error,
            "host_features": self.report.get("host_features", []),
            "checks": self.checks,
            "checks_skipped": self.checks_skipped,
            "problems": list(self.problems),
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
        }


# ------------------------------------------------------------------ inputs


def wheel_arch(wheel: Path) -> str:
    """The machine of a wheel's platform tag (`..._aarch64.whl` -> aarch64)."""
    stem = wheel.name[: -len(".whl")] if wheel.name.endswith(".whl") else wheel.name
    parts = stem.split("-")
    if len(parts) < 5:
        raise UsageError(f"{wheel.name} is not a wheel file name (name-version-python-abi-platform.whl)")
    platform = parts[-1].split(".")[0]  # compressed tag sets: take the first
    for arch in ("x86_64", "aarch64", "s390x", "arm64"):
        if platform.endswith("_" + arch):
            return "aarch64" if arch == "arm64" else arch
    raise UsageError(f"{wheel.name}: platform tag {parts[-1]!r} names no arch this command runs")


def read_target(wheel: Path) -> Target:
    """The package, its environment prefix, selftest and built variants, from the wheel's manifest."""
    try:
        manifest = inspect(wheel).manifest
    except (OSError, ValueError) as exc:
        raise UsageError(f"{wheel} is not a readable wheel: {exc}") from None
    if not manifest or manifest.get("schema") != 2 or "package" not in manifest:
        raise UsageError(f"{wheel.name} holds no cpubuild manifest (<package>/_manifest.json, schema 2): not built by this cpubuild")
    ordered = sorted(manifest["variants"], key=lambda v: int(v["priority"]))
    return Target(
        package=str(manifest["package"]),
        env_prefix=str(manifest["env_prefix"]),
        selftest=tuple(shlex.split(manifest["selftest"])) if manifest.get("selftest") else (),
        variants={str(v["name"]): tuple(v["requires"]) for v in ordered if v.get("built", True)},
        known=tuple(str(v["name"]) for v in ordered),
        torch=str(manifest["torch"]) if manifest.get("torch") else None,
    )


def expected_variant(arch: str, cpu: str, target: Target) -> str:
    """`--expect auto`: the best built variant a CPU model of the hardware data runs (none below a floor)."""
    model = next((m for m in hardware().qemu[arch] if m.cpu == cpu), None)
    if model is None:
        known = ", ".join(m.cpu for m in hardware().qemu[arch]) or "none"
        raise UsageError(f"--expect auto: cpubuild's hardware data lists no features for {arch} CPU model {cpu!r} (known: {known}); name the expected variant")
    runnable = [name for name, needs in target.variants.items() if set(needs) <= model.features]
    return runnable[-1] if runnable else NO_VARIANT


def find_wheel(arch: str, wheelhouse: Path, wheel_name: str) -> Path:
    """The newest wheel of the project for `arch` in `wheelhouse`."""
    candidates = []
    for path in wheelhouse.glob(f"{wheel_name}-*.whl"):
        try:
            if wheel_arch(path) == arch:
                candidates.append(path)
        except UsageError:
            continue
    if not candidates:
        raise UsageError(
            f"no {wheel_name} wheel for {arch} in {wheelhouse}",
            detail=f"build one with: cpubuild wheel --arch {arch}   (or pass the wheel's path)",
        )
    return max(candidates, key=lambda p: (p.stat().st_mtime, p.name))


def base_model(cpu: str) -> str:
    """`max,vxeh=off` -> `max`: the model name before its property list."""
    return cpu.split(",", 1)[0].strip()


def qemu_models(qemu: str) -> list[str]:
    """CPU model names qemu-user knows for one arch (`-cpu help`)."""
    exe = find_tool(f"qemu-{qemu}-static") or find_tool(f"qemu-{qemu}")
    if exe is None:
        raise ToolMissingError(f"qemu-{qemu}-static is not installed", detail="fix: apt-get install qemu-user-static")
    out = subprocess.run([exe, "-cpu", "help"], capture_output=True, text=True, timeout=60).stdout
    return parse_model_list(out)


def parse_model_list(text: str) -> list[str]:
    """Model names from qemu's `-cpu help` output, whose layout differs per
    arch: `  cortex-a53` (arm), `x86 Haswell  Intel...`, `s390 z14  IBM...`;
    the feature-flag list that follows the models is not read."""
    names: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if line.startswith("Recognized"):
            break
        if not words or line.rstrip().endswith(":"):
            continue
        if words[0] in ("x86", "s390") and len(words) > 1:
            names.append(words[1])
        elif line.startswith(" ") and len(words) == 1:
            names.append(words[0])
    return names


def check_model(qemu: str, cpu: str) -> None:
    models = qemu_models(qemu)
    if base_model(cpu) not in models:
        raise UsageError(
            f"qemu-{qemu} has no CPU model {base_model(cpu)!r}",
            detail="known models: " + " ".join(models),
        )


def signal_name(returncode: int) -> str | None:
    """A child killed by a signal: Python reports -N (chroot/qemu may give 128+N)."""
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    if number <= 0:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def last_json(text: str) -> dict[str, Any] | None:
    """The JSON object a command printed (the last line that parses)."""
    start = text.find("{")
    if start >= 0:
        try:
            data = json.loads(text[start:])
            if isinstance(data, dict):
                return data
        except ValueError:
            pass
    return None


# ------------------------------------------------------------------ judging


def judge_report(report: dict[str, Any], *, cpu: str, forced: str | None, expect: str | None,
                 problems: list[str], say: Any, force_env: str) -> tuple[str | None, str | None]:
    """(selected, error) of a dispatcher report; says what it found, adds problems."""
    selected, report_error = report.get("selected"), report.get("error")
    if expect == NO_VARIANT:  # below the floor: the package imports and says what is missing
        if selected is None and report_error and "no variant for this CPU" in str(report_error):
            say(f"refused, as expected: {report_error}")
        else:
            problems.append(f"expected no variant under {cpu} (below the package's floor), "
                            f"the dispatcher {'selected ' + repr(selected) if selected else 'said: ' + str(report_error)}")
        return selected, report_error
    if report_error:
        problems.append(str(report_error))
    if selected is not None:
        say(f"selected: {selected}" + (f" (forced by {force_env}={forced})" if forced else ""))
        say("features: " + (" ".join(report.get("host_features", [])) or "(none)"))
    if expect is not None and selected is not None and selected != expect:
        problems.append(f"expected variant {expect!r} under {cpu}, the dispatcher selected {selected!r}")
    return selected, report_error


def judge_checks(stdout: str, stderr: str, returncode: int, *, cpu: str, selected: str,
                 problems: list[str], say: Any) -> dict[str, Any] | None:
    """The selftest's JSON result; a signal, no result or a failed case is a problem."""
    result = last_json(stdout)
    if died := signal_name(returncode):
        problems.append(f"the correctness checks were killed by {died} under {cpu}")
    elif result is None:
        problems.append(f"the correctness checks printed no result (exit {returncode}): {stderr[-1500:]}")
    else:
        problems += [f"check failed: {case}" for case in result.get("failures", [])]
        if returncode != 0 and not result.get("failures"):
            problems.append(f"the correctness checks exited {returncode}")
        say(f"checks: {result.get('passed', 0)} passed, {result.get('failed', 0)} failed"
            f" (variants {', '.join(result.get('variants', [selected]))})")
    return result


# ------------------------------------------------------------------ the run


def run_emulated(
    *,
    arch: Arch,
    cpu: str,
    wheel: Path,
    target: Target,
    forced: str | None,
    expect: str | None,
    checks: bool,
    say: Any,
) -> Outcome:
    started = time.monotonic()
    problems: list[str] = []
    foreign = arch.qemu != host_qemu_arch()
    check_can_run(arch.qemu)
    root = ensure_rootfs(RootfsSpec.for_arch(arch), log=say) if foreign else None
    emulator = Emulator(qemu=arch.qemu, cpu=cpu, root=root)
    env = {target.force_env: forced} if forced else {}
    report_cmd = f"python -m {target.package}"
    python = sys.executable
    where = f"rootfs {root}" if root else f"host Python {python}"
    say(f"{arch.name} under qemu -cpu {cpu} ({where})")
    say(f"wheel: {wheel.name}")
    report: dict[str, Any] = {}
    selected = report_error = checks_skipped = None
    result: dict[str, Any] | None = None
    torch_site = ""  # a torch extension: that torch must be importable there too
    if target.torch and root is None:
        check_host_torch(python, target.torch)
    elif target.torch and root is not None:
        torch_site = f":{ensure_torch_site(root, arch, target.torch, log=say)}"
        say(f"torch: {target.torch} ({torch_site[1:]})")
    with installed_wheel(wheel, root) as wheel_site:
        site = wheel_site + torch_site
        proc = emulator.run(["-m", target.package, "--json"], pythonpath=site, env=env, host_python=python)
        died = signal_name(proc.returncode)
        parsed = last_json(proc.stdout)
        if died:
            problems.append(f"`{report_cmd}` was killed by {died} under {cpu}")
        elif parsed is None:
            problems.append(f"`{report_cmd} --json` printed no report (exit {proc.returncode}): {proc.stderr[-800:]}")
        else:
            report = parsed
            selected, report_error = judge_report(report, cpu=cpu, forced=forced, expect=expect,
                                                  problems=problems, say=say, force_env=target.force_env)
        if checks and not target.selftest:
            checks_skipped = "the project declares no selftest ([tool.cpubuild] selftest): selection report only"
        elif checks and selected is not None and not problems:
            # NumPy killed by a signal: the CPU model cannot run it (a fact of the model),
            # so a selftest that imports it cannot run either. NumPy merely absent: run the
            # selftest anyway (many need no NumPy); a failure if it then asks for NumPy.
            probe = emulator.run(["-c", "import numpy"], pythonpath=site, host_python=python)
            numpy_died = signal_name(probe.returncode)
            if numpy_died:
                checks_skipped = f"NumPy cannot import under {cpu} (killed by {numpy_died}): selection report only"
                say(f"checks: skipped - {checks_skipped}")
            else:
                proc = emulator.run(["-m", *target.selftest, "--json"], pythonpath=site, env=env, host_python=python)
                if probe.returncode != 0 and last_json(proc.stdout) is None and NO_NUMPY in proc.stderr:
                    problems.append(f"the selftest needs NumPy, which {python} lacks: pip install numpy there "
                                    "(or pass --no-checks for the selection report alone)")
                else:
                    result = judge_checks(proc.stdout, proc.stderr, proc.returncode, cpu=cpu, selected=selected,
                                          problems=problems, say=say)
    return Outcome(
        arch=arch.name,
        cpu=cpu,
        wheel=str(wheel),
        forced=forced,
        selected=selected,
        report_error=report_error,
        checks=result,
        checks_skipped=checks_skipped,
        problems=tuple(problems),
        seconds=time.monotonic() - started,
        report=report,
    )


BOCHS_PREFIX = "bochs:"


def run_bochs(*, arch: Arch, cpu: str, wheel: Path, target: Target, forced: str | None, expect: str | None,
              checks: bool, say: Any) -> Outcome:
    """The same report and checks, in a Debian guest booted under Bochs 2.7
    (x86_64 models QEMU 7.2 lacks: AVX-512, VNNI); see cpubuild.emulate.bochs."""
    from . import bochs

    model = cpu.removeprefix(BOCHS_PREFIX)
    if target.torch:
        raise UsageError(f"{wheel.name} is a torch extension: the Bochs guest has no torch (use a QEMU model)")
    env = {target.force_env: forced} if forced else {}
    commands = [bochs.GuestCommand(name="report", argv=("python3", "-m", target.package, "--json"), env=env)]
    if checks and target.selftest:
        commands.append(bochs.GuestCommand(name="selftest", argv=("python3", "-m", *target.selftest, "--json"), env=env))
    say(f"{arch.name} under Bochs 2.7 -cpu {model} (full system: Debian kernel, x86_64 rootfs as initramfs)")
    say(f"wheel: {wheel.name}")
    run = bochs.run_wheel(wheel, commands, model=model, log=say)
    problems: list[str] = []
    rep = run.results.get("report")
    report = (last_json(rep.stdout) if rep else None) or {}
    if rep is None or not report:
        problems.append(f"`python -m {target.package} --json` printed no report in the guest: {rep.stderr[-800:] if rep else ''}")
    elif died := signal_name(rep.returncode):
        problems.append(f"`python -m {target.package}` was killed by {died} under {model}")
    selected, report_error = judge_report(report, cpu=model, forced=forced, expect=expect, problems=problems, say=say,
                                          force_env=target.force_env)
    result: dict[str, Any] | None = None
    test = run.results.get("selftest")
    if checks and selected is not None and not problems and target.selftest:
        if test is None:
            problems.append("the correctness checks printed no result in the guest")
        else:
            result = judge_checks(test.stdout, test.stderr, test.returncode, cpu=model, selected=selected,
                                  problems=problems, say=say)
    say(f"bochs: /init after {run.boot_seconds or 0:.1f} s, whole run {run.seconds:.1f} s")
    return Outcome(arch=arch.name, cpu=cpu, wheel=str(wheel), forced=forced, selected=selected, report_error=report_error,
                   checks=result, checks_skipped=None, problems=tuple(problems), seconds=run.seconds, report=report)


AMX_CPU = "bochs:sapphire_rapids"


def run_amx_harness(*, arch: Arch, cpu: str, wheel: Path, target: Target, forced: str | None, project: Project | None,
                    say: Any) -> Outcome:
    """`--cpu bochs:sapphire_rapids`: the project's GEMM, built per variant with the
    matrix's flags into a bare-metal image, run under Bochs 3.0 (cpubuild.emulate.amx)."""
    from ..matrix import load_matrix
    from . import amx

    project = project or find_project(None)
    matrix = load_matrix(project.matrix_path)
    try:
        harness = amx.harness_config(project.config, matrix)
    except ContractError as exc:
        raise UsageError(str(exc)) from None
    variants = [forced] if forced else list(harness.variants)
    for name in variants:
        if name not in target.variants:
            raise UsageError(f"{wheel.name} does not hold variant {name!r} (built: {', '.join(target.variants)})")
    say(f"{arch.name} under Bochs 3.0 {cpu} (bare metal: the project's GEMM, no OS)")
    say(f"wheel: {wheel.name} (variants {', '.join(variants)} checked against {project.root})")
    # test-only: proves a wrong packing is caught (tools/tests/integration/test_bochs_amx.py)
    corrupt = os.environ.get(amx.CORRUPT_ENV) == "1"
    run = amx.run_harness(harness, matrix, variants=variants, corrupt_packing=corrupt, log=say)
    problems: list[str] = []
    for vr in run.runs:
        for kat in vr.kats:
            say(f"{vr.variant}: known answer {kat.name}: {kat.finding}")
        for res in vr.results:
            verdict = res.note if not res.judged else "ok" if res.ok else f"FAIL ({res.mismatches} wrong)"
            say(f"{vr.variant}: {res.case} via {res.kernel}: {verdict}")
        problems += [f"{vr.variant}: {p}" for p in vr.problems]
    seconds = sum(vr.seconds for vr in run.runs)
    say(f"bochs {run.bochs_version}: {len(run.runs)} boot(s), {seconds:.1f} s in the emulator")
    return Outcome(arch=arch.name, cpu=cpu, wheel=str(wheel), forced=forced, selected=None, report_error=None,
                   checks=run.to_json(), checks_skipped=None, problems=tuple(problems), seconds=seconds)


def layer_test_options(*, project_dir: Path | None, wheel: Path | None, cli: Mapping[str, Any], environ: Mapping[str, str],
                 cwd: Path) -> tuple[EmulatedTestSettings, Project | None]:
    """[tool.cpubuild.test] < CPUBUILD_TEST_* < the command line, and the project they came from: the one
    given, else the nearest one (required when no wheel is given; a wheel outside any project needs none)."""
    project = find_project(project_dir, cwd=cwd) if project_dir is not None or wheel is None else nearest_project(cwd)
    options: EmulatedTestSettings = layer(
        EmulatedTestSettings, pyproject=(project.tool("cpubuild", "test") or {}) if project else {},
        pyproject_path=(project.root if project else cwd) / "pyproject.toml", table_name="tool.cpubuild.test",
        environ=environ, cli=cli, project=project.root if project else cwd, cwd=cwd)
    for name in ("arch", "cpu"):
        if getattr(options, name) is None:
            raise UsageError(f"--{name} is required (or [tool.cpubuild.test] {name}, CPUBUILD_TEST_{name.upper()})")
    return options, project


def run_test(options: EmulatedTestSettings, *, wheel: Path | None, project: Project | None,
             say: Callable[[str], None]) -> Outcome:
    """One `cpubuild test` run: finds and checks the wheel, then runs it under qemu-user,
    Bochs 2.7 or (bochs:sapphire_rapids) the bare-metal AMX harness."""
    assert options.arch is not None and options.cpu is not None  # layer_test_options requires them
    cpu, forced, expect, checks = options.cpu, options.force_variant, options.expect, options.checks
    arch = hardware().arches[hardware().resolve_arch(options.arch)]
    if wheel is None:
        assert project is not None  # layer_test_options found it
        wheel = find_wheel(arch.name, options.wheelhouse or project.root / "wheelhouse", project.config.wheel_name)
    elif not wheel.is_file():
        raise UsageError(f"wheel {wheel} does not exist")
    if wheel_arch(wheel) != arch.name:
        raise UsageError(f"{wheel.name} is built for {wheel_arch(wheel)}, not {arch.name}")
    target = read_target(wheel)
    use_bochs = cpu.startswith(BOCHS_PREFIX)
    if cpu == AMX_CPU:
        if arch.name != "x86_64":
            raise UsageError(f"--cpu {cpu}: Bochs emulates x86_64 only")
        if expect is not None:
            raise UsageError(f"--cpu {cpu} runs the GEMM bare metal (no dispatcher): --expect does not apply")
        return run_amx_harness(arch=arch, cpu=cpu, wheel=wheel.resolve(), target=target, forced=forced,
                               project=project, say=say)
    if expect == AUTO:
        expect = expected_variant(arch.name, cpu, target)
    for label, value in (("--force-variant", forced), ("--expect", expect)):
        if value is not None and value not in target.known and not (label == "--expect" and value == NO_VARIANT):
            raise UsageError(f"{label} {value}: not a variant of {wheel.name} (known: {', '.join(target.known)})")
    if use_bochs and arch.name != "x86_64":
        raise UsageError(f"--cpu {cpu}: Bochs emulates x86_64 only")
    if not use_bochs:
        check_model(arch.qemu, cpu)
    runner = run_bochs if use_bochs else run_emulated
    return runner(arch=arch, cpu=cpu, wheel=wheel.resolve(), target=target, forced=forced, expect=expect,
                  checks=checks, say=say)
