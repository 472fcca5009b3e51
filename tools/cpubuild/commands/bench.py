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

The running is cpubuild/bench/run.py (the benchmark protocol, docs/project.md),
the table cpubuild/bench/table.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from ..bench import timing
from ..bench.plot import speedup_ladder
from ..bench.run import layer_bench_options, run_bench
from ..bench.table import render
from ..project import find_project
from ..settings import BenchSettings
from ..settings.clickopts import given, settings_options


@click.command("bench", context_settings={"ignore_unknown_options": True})
@settings_options(BenchSettings)
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: meta, limits (the roofline), records (with their roofline fields), targets.")
@click.option("--project", "project_dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project directory (default: the nearest one above the working directory).")
@click.argument("benchmark_args", nargs=-1, type=click.UNPROCESSED)
def command(as_json: bool, project_dir: Path | None, benchmark_args: tuple[str, ...], **settings: Any) -> None:
    """Run the project's benchmark on every variant this host runs (other options go to the benchmark).

    Options come from, in rising precedence: pyproject.toml [tool.cpubuild.bench],
    CPUBUILD_BENCH_* environment variables, this command line.
    """
    project = find_project(project_dir)
    options = layer_bench_options(project, cli=given(BenchSettings, settings), environ=os.environ, cwd=Path.cwd())
    run = run_bench(project, options, benchmark_args, quiet=False)
    if as_json:
        click.echo(json.dumps(run.to_json(), indent=1))
    else:
        click.echo(render(run.result, run.variants, run.limits))
    if options.plot is not None:
        meta = run.result.get("meta", {})
        title = f"{meta.get('title', project.config.dist_name)}: speedup over {run.variants[0]} ({timing.allocator().split(' ')[0]})"
        speedup_ladder(run.result["records"], run.variants, options.plot, title=title, limits=run.limits)
        click.echo(f"plot: {options.plot}", err=as_json)
