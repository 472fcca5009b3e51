"""The speedup ladder: per op, for every shape, how much faster each variant
(lowest priority first) and torch eager run than the baseline variant."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def group(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """(op, dtype) -> shape label -> {"variants": {name: us}, "torch_us", "memcpy_us"} in record order."""
    out: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in records:
        shapes = out.setdefault((r["op"], r["dtype"]), {})
        entry = shapes.setdefault("x".join(map(str, r["shape"])), {"variants": {}, "torch_us": r["torch_us"],
                                                                   "memcpy_us": r["memcpy_us"]})
        entry["variants"][r["variant"]] = r["us"]
    return out


def speedup_ladder(records: Sequence[dict[str, Any]], variants: Sequence[str], path: Path, *, title: str) -> None:
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
    cols = min(2, len(groups))
    rows = (len(groups) + cols - 1) // cols
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
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=len(names))
    fig.suptitle(title, fontsize=10, x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
