"""The speedup ladder: per op, for every shape, how much faster each variant
(lowest priority first) and torch eager run than the baseline variant; with
the host's limits, one more panel: the roofline (attainable rate over
arithmetic intensity, one roof per dtype's best peak, one slope per measured
bandwidth) with each record's best variant on it, labelled with its % of the
bound."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .roofline import Limits


def group(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """(op, dtype) -> shape label -> {"variants": {name: us}, "torch_us", "memcpy_us"} in record order."""
    out: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in records:
        shapes = out.setdefault((r["op"], r["dtype"]), {})
        entry = shapes.setdefault("x".join(map(str, r["shape"])), {"variants": {}, "torch_us": r["torch_us"],
                                                                   "memcpy_us": r["memcpy_us"]})
        entry["variants"][r["variant"]] = r["us"]
    return out


def speedup_ladder(records: Sequence[dict[str, Any]], variants: Sequence[str], path: Path, *, title: str,
                   limits: Limits | None = None) -> None:
    """Draws one panel per (op, dtype): grouped bars per shape, one bar per
    variant and one for torch, height = baseline time / its time (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    groups = group(records)
    baseline = variants[0]
    has_torch = any(r["torch_us"] for r in records)
    names = [*variants, "torch"] if has_torch else list(variants)
    colors = plt.get_cmap("viridis")([i / max(len(variants) - 1, 1) for i in range(len(variants))]).tolist()
    colors.append("tab:red")
    points = _roofline_points(records) if limits is not None else []
    panels = len(groups) + (1 if points else 0)
    cols = min(2, panels)
    rows = (panels + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.6 * rows), squeeze=False)
    for ax, ((op, dtype), shapes) in zip(axes.flat, groups.items(), strict=False):
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            xs, ys = [], []
            for j, entry in enumerate(shapes.values()):
                base = entry["variants"].get(baseline)
                t = entry["torch_us"] if name == "torch" else entry["variants"].get(name)
                if base and t:
                    xs.append(j + (i - (len(names) - 1) / 2) * width)
                    ys.append(base / t)
            bars = ax.bar(xs, ys, width, label=name, color=colors[i])
            ax.bar_label(bars, labels=[f"{y:.3g}" for y in ys], fontsize=6, padding=1)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}x"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(range(len(shapes)), list(shapes), fontsize=7)
        ax.set_title(f"{op} ({dtype})", fontsize=9)
        ax.set_ylabel(f"speedup over {baseline}", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    if points and limits is not None:
        _roofline_panel(list(axes.flat)[len(groups)], points, limits)
    for ax in list(axes.flat)[panels:]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=len(names))
    fig.suptitle(title, fontsize=10, x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _roofline_points(records: Sequence[dict[str, Any]]) -> list[tuple[str, float, float, float | None]]:
    """(label, ops per byte, ops/s, % of bound) of the best variant of every
    case that declares both its flops and its bytes."""
    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in records:
        if not r.get("flops") or not r.get("bytes"):
            continue
        key = (r["op"], r["dtype"], "x".join(map(str, r["shape"])))
        if key not in best or r["us"] < best[key]["us"]:
            best[key] = r
    return [(f"{op} {dtype} {shape}" + (f" ({r['level']})" if r.get("bound") == "memory" and r.get("level") else ""),
             r["flops"] / r["bytes"], r["flops"] / (r["us"] * 1e-6), r.get("pct_bound"))
            for (op, dtype, shape), r in best.items()]


def _roofline_panel(ax: Any, points: list[tuple[str, float, float, float | None]], limits: Limits) -> None:
    xs = [p[1] for p in points]
    lo, hi = min(xs) / 4, max(xs) * 4
    grid = [lo * (hi / lo) ** (i / 63) for i in range(64)]
    for b in (b for b in limits.bandwidth if not b.exact):  # one slope per cache level and DRAM
        ax.plot(grid, [b.read_Bps * x for x in grid], linestyle=":", linewidth=0.8,
                label=f"{b.level or f'{b.bytes >> 10} KiB'} read {b.read_Bps / 1e9:.0f} GB/s")
    for dtype in dict.fromkeys(p.dtype for p in limits.peaks):
        peak = limits.best_peak(dtype)
        if peak and peak.ops_per_s:
            ax.axhline(peak.ops_per_s, linewidth=0.8, color="grey")
            ax.text(grid[0], peak.ops_per_s, f" {dtype}: {peak.instruction} ({peak.variant})", fontsize=6, va="bottom")
    for label, x, y, pct in points:
        ax.plot([x], [y], marker="o", markersize=4, linestyle="none")
        ax.annotate(f"{label} {pct:.0f}%" if pct is not None else label, (x, y), fontsize=5,
                    xytext=(3, -6), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operations per byte", fontsize=8)
    ax.set_ylabel("operations per second", fontsize=8)
    ax.set_title(f"roofline ({limits.arch}, {limits.threads} threads): best variant per case", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, loc="lower right")
