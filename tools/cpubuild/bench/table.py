"""The text table of `cpubuild bench`: microseconds per variant with each
one's percentage of its roofline bound, torch eager and a copy of the same
bytes, the best variant's ratios, then the roofline and the project's targets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import roofline
from .plot import group


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
