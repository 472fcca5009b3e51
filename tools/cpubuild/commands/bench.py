"""`cpubuild bench [--variants a,b] [--python PATH] [--json] [--plot F] [BENCHMARK ARGS...]`

Runs the project's declared benchmark ([tool.cpubuild] benchmark, a script in
the project) over every variant of the installed package this CPU runs, in one
measuring process with tcmalloc preloaded, and renders what it measured side
by side: microseconds per variant with each one's percentage of its roofline
bound, torch eager and a copy of the same bytes where the benchmark times
them, the best variant's ratios, and the project's own targets. Then the
roofline: this host's limits, measured once per run (cpubuild/bench/roofline.py:
each variant's peak per dtype, the bandwidth ladder); where the host lacks a
variant's ISA the output says so instead of a figure. Options cpubuild does
not know go to the benchmark script.

The benchmark protocol (docs/project.md): `python SCRIPT --variants a,b [ARGS]`
prints one JSON object ``{"meta": {"title", "threads"?}, "records": [{"op",
"dtype", "shape", "variant", "us", "torch_us", "memcpy_us", "flops"?, "bytes"?,
"bytes_written"?}], "targets": [...]}``; bad arguments exit 2 with one line
on stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from ..bench import roofline, timing
from ..bench import targets as bench_targets
from ..bench.plot import group, speedup_ladder
from ..errors import BenchmarkError, ToolMissingError, UsageError
from ..progress import step
from ..project import Project, find_project
from ..settings import split_list
from ..toolchain.tools import find_user_program


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


def choose_variants(requested: str | None, runnable: Sequence[str]) -> list[str]:
    if requested is None:
        return list(runnable)
    wanted = list(split_list(requested))
    if not wanted:
        raise UsageError("--variants: empty list")
    unknown = [v for v in wanted if v not in runnable]
    if unknown:
        raise UsageError(f"--variants: {', '.join(unknown)} cannot run here; this host runs: {', '.join(runnable)}")
    return [v for v in runnable if v in wanted]  # priority order: the ladder reads left to right


def measure(project: Project, variants: Sequence[str], args: Sequence[str], *, quiet: bool,
            python: str = sys.executable) -> dict[str, Any]:
    config = project.config
    assert config.benchmark is not None
    script = project.root / config.benchmark.target
    cmd = [python, str(script), *config.benchmark.args, "--variants", ",".join(variants), *args]
    with contextlib.nullcontext() if quiet else step(f"benchmark {config.benchmark.target}: {', '.join(variants)}"):
        proc = subprocess.run(cmd, env=timing.preload_env(), capture_output=True, text=True, cwd=project.root)
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


def measure_limits(project: Project, report: dict[str, Any], variants: Sequence[str], result: dict[str, Any],
                   *, quiet: bool) -> roofline.Limits:
    records = result["records"]
    dtypes = list(dict.fromkeys(str(r["dtype"]) for r in records))
    threads = result.get("meta", {}).get("threads")
    if not isinstance(threads, int) or threads < 1:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cc = os.environ.get("CC") or "cc"
    infos = variant_infos(project, report, variants, roofline.compiler_family(cc))
    say = None if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    with contextlib.nullcontext() if quiet else step("roofline: measuring this host's peaks and bandwidth"):
        return roofline.measure(arch=str(report.get("arch")), variants=infos, dtypes=dtypes, threads=threads, cc=cc,
                                progress=say)


def _ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:6.2f}x" if num and den else "      -"


def _pct(value: float | None) -> str:
    return f"{value:4.0f}%" if value is not None else "    -"


def _bound_cell(record: dict[str, Any]) -> str:
    """'compute', or 'memory L2' (the cache level(s) the memory bound assumes)."""
    kind = record.get("bound") or "-"
    return f"{kind} {record['level']}" if kind == "memory" and record.get("level") else str(kind)


def render(result: dict[str, Any], variants: Sequence[str], limits: roofline.Limits | None = None) -> str:
    meta, records = result.get("meta", {}), result["records"]
    baseline = variants[0]
    title = str(meta.get("title", "benchmark"))
    shown = {k: v for k, v in meta.items() if isinstance(v, str | int | float) and k != "title" and str(v) not in title}
    has_roof = limits is not None
    lines = [
        f"{title}: " + "; ".join(f"{k} {v}" for k, v in shown.items()),
        "times in microseconds (best round); ratios: torch / best, baseline / best (the ladder), best / copy",
    ]
    if has_roof:
        lines.append("next to each time: its % of the roofline bound that applies (compute: the variant's peak for the "
                     "dtype; memory: the bandwidth at the working set); bound: which one, for the best variant")
    width = 18 if has_roof else 12
    head = f"{'op':<19}{'dtype':<6}{'shape':>16}" + "".join(f"{v:>{width}}" for v in variants)
    ladder = max(13, len(baseline) + 5)  # 'vs <baseline>' right-aligned with a gap
    head += f"{'torch':>{width}}{'copy':>10}  {'best':<11}{'vs torch':>9}{'vs ' + baseline:>{ladder}}{'/ copy':>8}"
    if has_roof:
        head += f"  {'bound':<14}"
    lines.append(head)
    by_key = {(r["op"], r["dtype"], "x".join(map(str, r["shape"])), r["variant"]): r for r in records}
    for (op, dtype), shapes in group(records).items():
        for label, entry in shapes.items():
            times: dict[str, float] = entry["variants"]
            best = min(times, key=lambda v: times[v])
            row = f"{op:<19}{dtype:<6}{label:>16}"
            for v in variants:
                if v not in times:
                    row += f"{'-':>{width}}"
                elif has_roof:
                    row += f"{times[v]:12.1f}{_pct(by_key[(op, dtype, label, v)].get('pct_bound')):>6}"
                else:
                    row += f"{times[v]:12.1f}"
            torch_us = entry["torch_us"]
            if torch_us is None:
                row += f"{'-':>{width}}"
            elif has_roof:
                row += f"{torch_us:12.1f}{_pct(by_key[(op, dtype, label, best)].get('torch_pct_bound')):>6}"
            else:
                row += f"{torch_us:12.1f}"
            row += f"{entry['memcpy_us']:10.1f}" if entry["memcpy_us"] is not None else f"{'-':>10}"
            row += f"  {best:<11}{_ratio(entry['torch_us'], times[best]):>9}"
            row += f"{_ratio(times.get(baseline), times[best]):>{ladder}}"
            row += f"{_ratio(times[best], entry['memcpy_us']):>8}"
            if has_roof:
                row += f"  {_bound_cell(by_key[(op, dtype, label, best)]):<14}"
            lines.append(row)
    if has_roof:
        assert limits is not None
        lines += ["", *roofline.describe(limits, list(dict.fromkeys(str(r["dtype"]) for r in records)))]
        lines += roofline.model_verdicts(records)
    if result.get("targets"):
        lines += ["", *map(str, result["targets"])]
    return "\n".join(lines)


@click.command("bench", context_settings={"ignore_unknown_options": True})
@click.option("--variants", "variants_opt", default=None, help="Variants to time (default: every one this CPU runs).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: meta, limits (the roofline), records (with their roofline fields), targets.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Draw the speedup ladder per op and the roofline into this image (e.g. ladder.png).")
@click.option("--roofline/--no-roofline", "with_roofline", default=True,
              help="Measure this host's limits (peaks, bandwidth) and each record's share of its bound (default: on).")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
@click.option("--python", "python_opt", default=None, metavar="PATH",
              help="The interpreter the package is installed in; the benchmark runs there (default: cpubuild's).")
@click.argument("benchmark_args", nargs=-1, type=click.UNPROCESSED)
def command(variants_opt: str | None, as_json: bool, plot: Path | None, with_roofline: bool, project_dir: Path | None,
            python_opt: str | None, benchmark_args: tuple[str, ...]) -> None:
    """Run the project's benchmark on every variant this host runs (other options go to the benchmark)."""
    project = find_project(project_dir)
    if project.config.benchmark is None:
        raise UsageError(f"{project.root / 'pyproject.toml'}: [tool.cpubuild] declares no benchmark "
                         "(benchmark = \"benchmarks/bench.py\", see docs/project.md)")
    script = project.root / project.config.benchmark.target
    if not script.is_file():
        raise UsageError(f"[tool.cpubuild] benchmark: {script} does not exist")
    if plot is not None:
        if not plot.parent.is_dir():
            raise UsageError(f"--plot: directory {plot.parent} does not exist")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ToolMissingError("--plot needs matplotlib: pip install 'cpubuild[bench]'") from None
    python = resolve_python(python_opt)
    report = package_report(project.config.package, python)
    variants = choose_variants(variants_opt, runnable_in(report))
    result = measure(project, variants, benchmark_args, quiet=False, python=python)
    limits = measure_limits(project, report, variants, result, quiet=False) if with_roofline else None
    if limits is not None:
        result["records"] = roofline.annotate(result["records"], limits)
    runnable = runnable_in(report)
    result["targets"] = bench_targets.check_all(result.get("targets") or [], result["records"], variants,
                                                report.get("host_features") or [],
                                                baseline=runnable[0] if runnable else None)
    if as_json:
        out = {"meta": result.get("meta", {}), "limits": limits.to_json() if limits else None,
               "records": result["records"], "targets": result["targets"],
               "model": roofline.model_verdicts(result["records"]) if limits else []}
        click.echo(json.dumps(out, indent=1))
    else:
        click.echo(render(result, variants, limits))
    if plot is not None:
        meta = result.get("meta", {})
        title = f"{meta.get('title', project.config.dist_name)}: speedup over {variants[0]} ({timing.allocator().split(' ')[0]})"
        speedup_ladder(result["records"], variants, plot, title=title, limits=limits)
        click.echo(f"plot: {plot}", err=as_json)
