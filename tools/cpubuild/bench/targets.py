"""A benchmark's targets, checked by `cpubuild bench` on the annotated records.

A target is a string (printed as is) or an object:
``{"op", "shape" (list, leading dims to match), "dtype"?, "versus", "min"? ,
"max"?, "requires"? (host features; n/a without them), "each_variant"? (one
line per timed variant instead of the best one), "variants"? (only these)}``
where `versus` is
``torch`` (torch time / the variant's time), ``baseline`` (the baseline
variant's time / best; n/a when `--variants` left the baseline out), ``copy``
(the variant's time / copy time) or ``bound`` (the variant's percentage of its
roofline bound); the variant is the best timed one unless `each_variant`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

VERSUS = ("torch", "baseline", "copy", "bound")


def _matches(record: dict[str, Any], target: dict[str, Any]) -> bool:
    shape = list(target.get("shape", []))
    return (record["op"] == target["op"] and list(record["shape"])[: len(shape)] == shape
            and target.get("dtype", record["dtype"]) == record["dtype"])


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """One target line: `label` names the case, the variant and what it is
    measured against (the same across runs); `value` is None where the figure
    is missing, `text` the whole line."""

    label: str
    value: float | None = None
    unit: str = ""
    limit: str = ""
    threshold: float | None = None  # the target's min or max
    ok: bool | None = None
    text: str

    def figure(self) -> str:
        """The value as printed; one more digit where the usual ones would
        round it onto the threshold (1.0957x against 1.1 is not "1.10x")."""
        if self.value is None:
            return "-"
        digits = 2 if self.unit == "x" else 1
        near = self.threshold is not None and self.value != self.threshold
        if near and round(self.value, digits) == round(float(self.threshold or 0), digits):
            digits += 1
        return f"{self.value:.{digits}f}{self.unit}"


def _meets(target: dict[str, Any], value: float) -> bool:
    return bool(value >= target["min"] if "min" in target else value <= target["max"])


def evaluate(target: dict[str, Any], records: Sequence[dict[str, Any]], variants: Sequence[str],
             host_features: Iterable[str], *, baseline: str | None = None) -> list[Verdict]:
    """The target's verdicts: one (the best variant), one per timed variant
    with `each_variant`, one saying why it does not apply, or none when the
    benchmark did not time its case. `baseline`: the lowest variant this host
    runs (default: the lowest timed)."""
    versus = target.get("versus")
    if versus not in VERSUS:
        return [Verdict(label=repr(target), text=f"target: {target!r}: unknown versus (known: {', '.join(VERSUS)})")]
    rows = [r for r in records if _matches(r, target)
            and ("variants" not in target or r["variant"] in target["variants"])]
    shape = "x".join(map(str, target.get("shape", []))) or "any shape"
    what = f"target: {target['op']} {target.get('dtype', '')} {shape}".replace("  ", " ")
    lacking = [f for f in target.get("requires", []) if f not in set(host_features)]
    limit = f">= {target['min']}" if "min" in target else f"<= {target.get('max')}"
    if lacking:
        text = f"{what} vs {versus} ({limit}): n/a, this host lacks {', '.join(lacking)}"
        return [Verdict(label=text, text=text)]
    if not rows:
        return []
    if target.get("each_variant") and versus != "baseline":
        return [_verdict(target, what, limit, r, rows, variants, baseline) for r in rows]
    return [_verdict(target, what, limit, min(rows, key=lambda r: r["us"]), rows, variants, baseline)]


def _verdict(target: dict[str, Any], what: str, limit: str, best: dict[str, Any], rows: Sequence[dict[str, Any]],
             variants: Sequence[str], baseline: str | None) -> Verdict:
    versus = target["versus"]
    value: float | None
    if versus == "torch":
        value, unit, name = (best["torch_us"] / best["us"] if best.get("torch_us") else None), "x", "torch"
    elif versus == "baseline":
        if baseline is not None and variants[0] != baseline:
            text = f"{what} vs {versus} ({limit}x): n/a, {baseline} was not timed (--variants)"
            return Verdict(label=text, text=text)
        base = next((r["us"] for r in rows if r["variant"] == variants[0]), None)
        value, unit, name = (base / best["us"] if base else None), "x", variants[0]
    elif versus == "copy":
        value, unit, name = (best["us"] / best["memcpy_us"] if best.get("memcpy_us") else None), "x", "copy"
    else:
        value, unit, name = best.get("pct_bound"), "%", f"its {best.get('bound') or 'roofline'} bound"
    label = f"{what} {best['variant']} vs {name}"
    if value is None:
        note = best.get("peak_note") if versus == "bound" else None
        return Verdict(label=label, text=f"{label} ({limit}{unit}): not measured" + (f" ({note})" if note else ""))
    ok = _meets(target, value)
    verdict = Verdict(label=label, value=value, unit=unit, limit=f"{limit}{unit}",
                      threshold=target.get("min", target.get("max")), ok=ok, text="")
    return replace(verdict, text=f"{label}: {verdict.figure()} ({limit}{unit}: {'met' if ok else 'MISSED'})")


def check_all(targets: Sequence[Any], records: Sequence[dict[str, Any]], variants: Sequence[str],
              host_features: Iterable[str], *, baseline: str | None = None) -> list[str]:
    return check_runs(targets, records, [], variants, host_features, baseline=baseline)


def _run_key(v: Verdict, each_variant: bool) -> str:
    """Which line of another run matches `v`: its variant's (not its whole label: a run may name another
    bound - "its memory bound" where the median's is compute - when the bandwidth beside it was slower)."""
    return v.label.split(" vs ")[0] if each_variant else ""


def check_runs(targets: Sequence[Any], median: Sequence[dict[str, Any]], runs: Sequence[Sequence[dict[str, Any]]],
               variants: Sequence[str], host_features: Iterable[str], *, baseline: str | None = None) -> list[str]:
    """The target lines on the `median` records; with two or more `runs`, each
    line judges the median of the runs' figures and prints every one of them."""
    features = list(host_features)
    out: list[str] = []
    for t in targets:
        if not isinstance(t, dict):
            out.append(str(t))
            continue
        verdicts = evaluate(t, median, variants, features, baseline=baseline)
        # each variant's line takes that variant's figures; the best variant's, each run's best
        each = bool(t.get("each_variant"))
        per_run = [{_run_key(v, each): v for v in evaluate(t, run, variants, features, baseline=baseline)} for run in runs]
        for v in verdicts:
            if len(runs) < 2 or v.value is None:
                out.append(v.text)
                continue
            figures = [run.get(_run_key(v, each)) for run in per_run]
            # a ratio is taken side by side within a run: the verdict is on the median of the runs' figures
            values = [f.value for f in figures if f is not None and f.value is not None]
            middle = replace(v, value=statistics.median(values)) if values else v
            ok = middle.value is not None and _meets(t, middle.value)
            shown = " / ".join(f.figure() if f is not None else "-" for f in figures)
            out.append(f"{v.label}: median {middle.figure()} ({v.limit}: {'met' if ok else 'MISSED'}; runs {shown})")
    return out
