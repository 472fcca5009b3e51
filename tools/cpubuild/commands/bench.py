"""`cpubuild bench`: every variant this host runs x every op, side by side.

Runs against the cpukern installed in this Python. One measuring process
(tcmalloc preloaded when installed) forces each variant in turn through
cpukern's variant API and times, round robin with the same inputs: the
foundation ops (rms_norm, fused_add_rms_norm, silu_and_mul, rotary_embedding
at [1, 32, 512, 2048] x 4096 tokens x hidden, bf16 and fp32) and the GEMMs
(gemm_bf16, gemm_w8a8 at [M, N, K] = [1|32|256, 4096, 4096]), next to torch
eager (torch.matmul in bf16, torch._int_mm + scales; when installed) and a
copy of the same bytes for memory-bound cases. The table shows microseconds
and ratios; --json prints the records; --plot draws the speedup ladder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from ..bench import cases, timing
from ..bench.plot import group, speedup_ladder
from ..errors import BenchmarkError, ToolMissingError, UsageError

ALL_OPS = (*cases.OPS, *cases.GEMM_OPS)


def _split(value: str, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise UsageError(f"--{what}: empty list")
    return items


def _ints(value: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in _split(value, what)]
    except ValueError:
        raise UsageError(f"--{what}: expected comma-separated integers, got {value!r}") from None
    if any(v < 1 for v in values):
        raise UsageError(f"--{what}: values must be >= 1, got {value!r}")
    return values


def runnable_variants() -> list[str]:
    """Variants of the installed cpukern this CPU runs, lowest priority first."""
    try:
        from cpukern import _dispatch
    except ImportError as exc:
        raise ToolMissingError(
            f"cpukern is not installed in this Python ({sys.executable}): {exc}",
            detail="install it first, e.g. `pip install --no-build-isolation .` in the repository",
        ) from None
    return list(_dispatch.supported_variants())


def choose_variants(requested: str | None, runnable: Sequence[str]) -> list[str]:
    if requested is None:
        return list(runnable)
    wanted = _split(requested, "variants")
    unknown = [v for v in wanted if v not in runnable]
    if unknown:
        raise UsageError(f"--variants: {', '.join(unknown)} cannot run here; this host runs: {', '.join(runnable)}")
    return [v for v in runnable if v in wanted]  # priority order: the ladder reads left to right


def measure(config: dict[str, Any], *, quiet: bool) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "cpubuild.bench.worker", json.dumps(config)]
    proc = subprocess.run(cmd, env=timing.preload_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE if quiet else None, text=True)
    if proc.returncode != 0:
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        raise BenchmarkError(f"the measuring process failed ({how})", detail=proc.stderr[-3000:] if quiet else None)
    try:
        result: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise BenchmarkError("the measuring process printed no results", detail=proc.stdout[-2000:]) from None
    return result


def _ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:6.2f}x" if num and den else "      -"


def render(result: dict[str, Any]) -> str:
    meta, records = result["meta"], result["records"]
    variants: list[str] = meta["variants"]
    baseline = variants[0]
    lines = [
        f"cpukern {meta['cpukern']} (selected {meta['selected']}); allocator: {meta['allocator']}; {meta['torch']}",
        "times in microseconds (best round); ratios: torch / best, baseline / best (the ladder), best / copy",
    ]
    head = f"{'op':<19}{'dtype':<6}{'shape':>16}" + "".join(f"{v:>12}" for v in variants)
    head += f"{'torch':>12}{'copy':>10}  {'best':<11}{'vs torch':>9}{'vs ' + baseline:>13}{'/ copy':>8}"
    lines.append(head)
    for (op, dtype), shapes in group(records).items():
        for label, entry in shapes.items():
            times: dict[str, float] = entry["variants"]
            best = min(times, key=lambda v: times[v])
            row = f"{op:<19}{dtype:<6}{label:>16}" + "".join(f"{times[v]:12.1f}" for v in variants)
            row += f"{entry['torch_us']:12.1f}" if entry["torch_us"] is not None else f"{'-':>12}"
            row += f"{entry['memcpy_us']:10.1f}" if entry["memcpy_us"] is not None else f"{'-':>10}"
            row += f"  {best:<11}{_ratio(entry['torch_us'], times[best]):>9}{_ratio(times[baseline], times[best]):>13}"
            row += f"{_ratio(times[best], entry['memcpy_us']):>8}"
            lines.append(row)
    lines.extend(targets(records, variants))
    return "\n".join(lines)


# issue 7's targets on its 2-core reference host: (op, M, compared with, minimum ratio)
TARGETS = (
    ("gemm_bf16", 1, "torch", 1.5),
    ("gemm_bf16", 256, "torch", 0.9),
    ("gemm_w8a8", 256, "torch", 0.8),
    ("gemm_bf16", 256, "baseline", 4.0),
)


def targets(records: Sequence[dict[str, Any]], variants: Sequence[str]) -> list[str]:
    out: list[str] = []
    for op, m, versus, minimum in TARGETS:
        rows = [r for r in records if r["op"] == op and r["shape"][0] == m]
        if not rows:
            continue
        best = min(rows, key=lambda r: r["us"])
        other = best["torch_us"] if versus == "torch" else next(
            (r["us"] for r in rows if r["variant"] == variants[0]), None)
        if other is None:
            continue
        ratio = other / best["us"]
        name = "torch" if versus == "torch" else variants[0]
        verdict = "met" if ratio >= minimum else "MISSED"
        out.append(f"target: {op} M={m} {best['variant']} vs {name}: {ratio:.2f}x (>= {minimum}x: {verdict})")
    if out:
        out.insert(0, "")
    return out


@click.command("bench")
@click.option("--ops", "ops_opt", default=",".join(ALL_OPS), show_default=True, help="Ops to time.")
@click.option("--variants", "variants_opt", default=None, help="Variants to time (default: every one this CPU runs).")
@click.option("--dtypes", default="bf16,fp32", show_default=True, help="dtypes of the foundation ops.")
@click.option("--tokens", default="1,32,512,2048", show_default=True, help="Token counts of the foundation ops.")
@click.option("--m", "gemm_m", default=",".join(map(str, cases.GEMM_M)), show_default=True,
              help=f"GEMM rows M (N = K = {cases.GEMM_NK}).")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 100), help="Round-robin rounds.")
@click.option("--round-ms", default=20.0, show_default=True, type=click.FloatRange(1, 10000),
              help="Time per candidate per round.")
@click.option("--no-torch", is_flag=True, help="Skip torch even when installed.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as a JSON list.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Draw the speedup ladder per op into this image (e.g. ladder.png).")
def command(ops_opt: str, variants_opt: str | None, dtypes: str, tokens: str, gemm_m: str, rounds: int,
            round_ms: float, no_torch: bool, as_json: bool, plot: Path | None) -> None:
    """Benchmark every variant this host runs against torch and memcpy."""
    ops = _split(ops_opt, "ops")
    unknown = [o for o in ops if o not in ALL_OPS]
    if unknown:
        raise UsageError(f"--ops: unknown {', '.join(unknown)} (known: {', '.join(ALL_OPS)})")
    dtype_list = _split(dtypes, "dtypes")
    bad = [d for d in dtype_list if d not in ("bf16", "fp32")]
    if bad:
        raise UsageError(f"--dtypes: unknown {', '.join(bad)} (known: bf16, fp32)")
    if plot is not None:
        if not plot.parent.is_dir():
            raise UsageError(f"--plot: directory {plot.parent} does not exist")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ToolMissingError("--plot needs matplotlib", detail="pip install 'cpubuild[bench]'") from None
    variants = choose_variants(variants_opt, runnable_variants())
    config = {
        "ops": ops, "variants": variants, "dtypes": dtype_list, "tokens": _ints(tokens, "tokens"),
        "gemm_m": _ints(gemm_m, "m"), "rounds": rounds, "round_ms": round_ms, "torch": not no_torch,
    }
    result = measure(config, quiet=False)
    if as_json:
        click.echo(json.dumps(result["records"], indent=1))
    else:
        click.echo(render(result))
    if plot is not None:
        meta = result["meta"]
        speedup_ladder(result["records"], variants, plot,
                       title=f"cpukern {meta['cpukern']}: speedup over {variants[0]} ({meta['allocator'].split(' ')[0]})")
        click.echo(f"plot: {plot}", err=as_json)
