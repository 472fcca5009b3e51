"""Running a project's declared benchmark ([tool.cpubuild] benchmark) over the
variants of its installed package that this CPU runs, in one measuring process
with tcmalloc preloaded, and measuring this host's roofline limits for them.

The benchmark protocol (docs/project.md): `python SCRIPT --variants a,b [ARGS]`
prints one JSON object ``{"meta": {"title", "threads"?}, "records": [{"op",
"dtype", "shape", "variant", "us", "torch_us", "memcpy_us", "flops"?, "bytes"?,
"bytes_written"?, "working_set"?}], "targets": [...]}``; bad arguments exit 2 with one line
on stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BenchmarkError, ToolMissingError, UsageError
from ..progress import step
from ..project import Project
from ..settings import BenchSettings, layer
from ..toolchain.tools import find_user_program
from . import roofline, timing
from . import targets as bench_targets


def runnable_variants(package: str, python: str = sys.executable) -> list[str]:
    """Variants of the package installed in `python` that this CPU runs, lowest priority first
    (from its own report, `python -m <package> --json`)."""
    return runnable_in(package_report(package, python))


def runnable_in(report: dict[str, Any]) -> list[str]:
    rows = [v for v in report.get("variants", []) if v.get("built") and v.get("supported")]
    return [v["name"] for v in sorted(rows, key=lambda v: int(v["priority"]))]


def package_report(package: str, python: str = sys.executable) -> dict[str, Any]:
    """The installed package's own report (`python -m <package> --json`): its dispatcher's view of this host."""
    proc = subprocess.run([python, "-m", package, "--json"], capture_output=True, text=True, timeout=300)
    try:
        report: Any = json.loads(proc.stdout)
    except ValueError:
        tail = (proc.stderr.strip().splitlines() or ["no report"])[-1]
        raise ToolMissingError(
            f"{package} is not installed (or not built) in this Python ({python}): {tail}",
            detail=f"install it first, e.g. `cpubuild wheel --install {python}`",
        ) from None
    if not isinstance(report, dict):
        raise ToolMissingError(f"{package}'s report (python -m {package} --json) is not a JSON object")
    return report


def resolve_python(value: str | None) -> str:
    """--python: a path, or a name on the user's PATH; default: the interpreter running cpubuild."""
    if value is None:
        return sys.executable
    found = value if os.sep in value else find_user_program(value)
    if found is None or not Path(found).is_file() or not os.access(found, os.X_OK):
        raise UsageError(f"--python {value}: no such interpreter")
    return str(Path(found).absolute())


def choose_variants(requested: Sequence[str], runnable: Sequence[str]) -> list[str]:
    """The variants to time, in priority order (the ladder reads left to right); none asked: every runnable one."""
    if not requested:
        return list(runnable)
    unknown = [v for v in requested if v not in runnable]
    if unknown:
        raise UsageError(f"--variants: {', '.join(unknown)} cannot run here; this host runs: {', '.join(runnable)}")
    return [v for v in runnable if v in requested]


def measure(project: Project, variants: Sequence[str], args: Sequence[str], *, quiet: bool,
            python: str = sys.executable, probe: Path | None = None) -> dict[str, Any]:
    config = project.config
    assert config.benchmark is not None
    script = project.root / config.benchmark.target
    cmd = [python, str(script), *config.benchmark.args, "--variants", ",".join(variants), *args]
    with contextlib.nullcontext() if quiet else step(f"benchmark {config.benchmark.target}: {', '.join(variants)}"):
        env = timing.preload_env()
        if probe is not None:  # for timing.side_bandwidth
            env[timing.ENV_PROBE] = str(probe)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=project.root)
    if not quiet:
        sys.stderr.write(proc.stderr)
    if proc.returncode == 2:  # the benchmark's own usage error
        raise UsageError((proc.stderr.strip().splitlines() or ["bad arguments"])[-1].removeprefix("error: "))
    if proc.returncode != 0:
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        raise BenchmarkError(f"the benchmark {config.benchmark.target} failed ({how})", detail=proc.stderr[-3000:] if quiet else None)
    try:
        result: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise BenchmarkError(f"the benchmark {config.benchmark.target} printed no JSON result", detail=proc.stdout[-2000:]) from None
    if not isinstance(result.get("records"), list):
        raise BenchmarkError(f"the benchmark {config.benchmark.target} printed no 'records' list (docs/project.md)")
    return result


def variant_infos(project: Project, report: dict[str, Any], variants: Sequence[str], family: str) -> list[roofline.VariantInfo]:
    """Every built variant, lowest priority first, with the matrix's requires
    and flags: the chosen ones timed, the other runnable ones only for the
    bandwidth ladder (which must not depend on --variants), the ones this host
    cannot run for the 'not on this host' lines."""
    matrix = project.load_matrix()
    arch = str(report.get("arch"))
    rows = sorted((v for v in report.get("variants", []) if v.get("built")), key=lambda v: int(v["priority"]))
    out = []
    for row in rows:
        try:
            mv = matrix.variant(arch, row["name"])
        except KeyError:
            continue
        try:
            flags: tuple[str, ...] | None = mv.flags_for(family)
        except KeyError:
            flags = None
        out.append(roofline.VariantInfo(name=mv.name, requires=mv.requires, runnable=bool(row.get("supported")),
                                        missing=tuple(row.get("missing") or ()), flags=flags,
                                        timed=row["name"] in variants))
    return out


def measure_limits(report: dict[str, Any], infos: Sequence[roofline.VariantInfo], result: dict[str, Any],
                   builds: roofline.ProbeBuilds, *, quiet: bool) -> roofline.Limits:
    records = result["records"]
    dtypes = list(dict.fromkeys(str(r.get("peak_dtype") or r["dtype"]) for r in records))
    threads = result.get("meta", {}).get("threads")
    if not isinstance(threads, int) or threads < 1:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    say = None if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    with contextlib.nullcontext() if quiet else step("roofline: measuring this host's peaks and bandwidth"):
        return roofline.measure(arch=str(report.get("arch")), variants=infos, dtypes=dtypes, threads=threads,
                                working_sets=[int(r.get("working_set") or r["bytes"]) for r in records if r.get("bytes")],
                                progress=say, builds=builds)


def layer_bench_options(project: Project, *, cli: Mapping[str, Any], environ: Mapping[str, str], cwd: Path) -> BenchSettings:
    """[tool.cpubuild.bench] < CPUBUILD_BENCH_* < the command line; the benchmark and --plot's directory checked."""
    options: BenchSettings = layer(BenchSettings, pyproject=project.tool("cpubuild", "bench") or {},
                                   pyproject_path=project.root / "pyproject.toml", table_name="tool.cpubuild.bench",
                                   environ=environ, cli=cli, project=project.root, cwd=cwd)
    if project.config.benchmark is None:
        raise UsageError(f"{project.root / 'pyproject.toml'}: [tool.cpubuild] declares no benchmark "
                         "(benchmark = \"benchmarks/bench.py\", see docs/project.md)")
    script = project.root / project.config.benchmark.target
    if not script.is_file():
        raise UsageError(f"[tool.cpubuild] benchmark: {script} does not exist")
    if options.plot is not None:
        if not options.plot.parent.is_dir():
            raise UsageError(f"--plot: directory {options.plot.parent} does not exist")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ToolMissingError("--plot needs matplotlib: pip install 'cpubuild[bench]'") from None
    return options


@dataclass(frozen=True, kw_only=True)
class BenchRun:
    """What one `cpubuild bench` measured: the benchmark's result (records annotated
    with their roofline fields, targets checked), the variants timed, the host's limits."""

    result: dict[str, Any]
    variants: list[str]
    limits: roofline.Limits | None

    def to_json(self) -> dict[str, Any]:
        records = self.result["records"]
        return {"meta": self.result.get("meta", {}), "limits": self.limits.to_json() if self.limits else None,
                "records": records, "targets": self.result["targets"],
                "model": roofline.model_verdicts(records) if self.limits else [],
                **({"runs": self.result["runs"]} if "runs" in self.result else {})}


def run_bench(project: Project, options: BenchSettings, args: Sequence[str], *, quiet: bool) -> BenchRun:
    """The benchmark over the chosen variants, then (unless turned off) the roofline and the targets."""
    python = resolve_python(options.python)
    report = package_report(project.config.package, python)
    runnable = runnable_in(report)
    variants = choose_variants(options.variants, runnable)
    cc = os.environ.get("CC") or "cc"
    infos = variant_infos(project, report, variants, roofline.compiler_family(cc)) if options.roofline else []
    # the probe is built first: the benchmark measures bandwidth with it beside its records
    with roofline.probe_builds(infos, cc) as builds:
        probe = builds.bandwidth_probe if options.roofline else None
        results = [measure(project, variants, args, quiet=quiet, python=python, probe=probe) for _ in range(options.runs)]
        result = dict(results[0], records=median_records([r["records"] for r in results]))
        limits = measure_limits(report, infos, result, builds, quiet=quiet) if options.roofline else None
    def annotated(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return roofline.annotate(records, limits) if limits else records

    result["records"] = annotated(result["records"])
    runs = [annotated(r["records"]) for r in results] if options.runs > 1 else []
    if runs:
        result["runs"] = runs
    result["targets"] = bench_targets.check_runs(result.get("targets") or [], result["records"], runs, variants,
                                                 report.get("host_features") or [],
                                                 baseline=runnable[0] if runnable else None)
    return BenchRun(result=result, variants=variants, limits=limits)


def median_records(runs: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The first run's records with every time the median over the runs (a
    record missing from a run, or a null time, leaves that run out)."""
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return r["op"], r["dtype"], tuple(r["shape"]), r["variant"]

    by_key = [{key(r): r for r in run} for run in runs]
    out = []
    for record in runs[0]:
        merged = dict(record)
        for field in ("us", "torch_us", "memcpy_us"):
            values = [v for run in by_key if (v := run.get(key(record), {}).get(field)) is not None]
            merged[field] = statistics.median(values) if values else None
        side = [b for run in by_key if (b := run.get(key(record), {}).get("bandwidth"))]
        if side:  # measured beside the record in each run: the median figure, as its time is the median
            merged["bandwidth"] = {f: statistics.median(b.get(f) or 0.0 for b in side) for f in timing.BANDWIDTH_FIGURES}
        out.append(merged)
    return out
