"""`python -m <package> [--verbose | --json]`: what this CPU has, what is built, what runs.

The default text is a few lines (the selected variant and why, what is built
and runnable, what the best variant this CPU cannot run misses); `--verbose`
adds every feature and variant line, `--json` everything.

A package's ``__main__.py`` calls :func:`main`. Needs only the standard
library: it must run where NumPy cannot import (e.g. a CPU without XSAVE).
The JSON report's keys are documented in docs/project.md; packages may add
their own (``extra``), which the text report prints after the variants.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .dispatch import DISPATCHER, Dispatcher
from .errors import DispatchError, NoVariantError
from .select import Selection, VariantStatus, env_names, select_variant

Extra = Mapping[str, Callable[[], Any]]
RenderExtra = Callable[[dict[str, Any]], list[str]]


def package_version(dispatcher: Dispatcher) -> str:
    """The installed distribution's version (else the package's __version__)."""
    dist = dispatcher.manifest().get("dist")
    if dist:
        try:
            from importlib import metadata

            return metadata.version(str(dist))
        except Exception:  # not installed as a distribution (a source tree, a copy)
            pass
    module = sys.modules.get(dispatcher.package)
    return str(getattr(module, "__version__", "unknown"))


def report(dispatcher: Dispatcher = DISPATCHER, extra: Extra | None = None) -> dict[str, Any]:
    host = dispatcher.host()
    result: dict[str, Any] = {
        "package": str(dispatcher.package_dir),  # which install answered
        "name": dispatcher.package,
        "version": package_version(dispatcher),
        "arch": host.arch,
        "machine": platform.machine(),
        "env_prefix": dispatcher.env_prefix,
        "host_features": list(host.features.found),
        "missing_features": dict(host.features.not_found),
        "override": None,
        "disabled": [],
        "selected": None,
        "error": None,
        "variants": [],
    }
    for key, fn in (extra or {}).items():
        result[key] = fn()
    try:
        sel = dispatcher.selection()
    except DispatchError as exc:
        result["error"] = str(exc)
        result["override"] = os.environ.get(dispatcher.force_env, "").strip() or None
        result["variants"] = _unforced_rows(dispatcher, host.features.found)
        return result
    result["selected"] = sel.selected
    result["override"] = sel.override
    result["disabled"] = list(sel.disabled)
    result["variants"] = _variant_rows(sel, selected=sel.selected)
    return result


def _unforced_rows(dispatcher: Dispatcher, found: tuple[str, ...]) -> list[dict[str, Any]]:
    """What is built and what this CPU runs, as if nothing were forced or disabled."""
    try:
        sel = select_variant(dispatcher.variants(), found, built=dispatcher.built_variants(),
                             env_prefix=dispatcher.env_prefix, package=dispatcher.package)
    except NoVariantError as exc:  # below the floor: still say what each variant lacks
        rows = [s for s in exc.variants if isinstance(s, VariantStatus)]
        return _variant_rows(Selection(selected="", override=None, disabled=(), variants=tuple(rows)), selected=None)
    except DispatchError:
        return []
    return _variant_rows(sel, selected=None)


def _variant_rows(sel: Selection, *, selected: str | None) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "priority": s.priority,
            "built": s.built,
            "supported": s.supported,
            "missing": list(s.missing),
            "selected": s.name == selected,
            "reason": s.reason if selected or not (s.built and s.supported) else "this CPU runs it",
        }
        for s in sel.variants
    ]


def render_concise(data: dict[str, Any], render_extra: RenderExtra | None = None) -> str:
    """The default report: a few lines, whatever the number of features."""
    lines = [f"{data['name']} {data['version']} on {data['arch']}"]
    if data["error"]:
        lines.append(f"error: {data['error']}")
    rows = data["variants"]
    selected = next((v for v in rows if v["selected"]), None)
    lines.append(f"selected: {selected['name']} ({selected['reason']})" if selected else "selected: none (see the error above)")
    built = [v["name"] for v in rows if v["built"]]
    runnable = [v["name"] for v in rows if v["built"] and v["supported"]]
    lines.append(f"built: {', '.join(built) or 'none'}; this CPU runs: {', '.join(runnable) or 'none'}")
    blocked = next((v for v in rows if v["built"] and not v["supported"]), None)  # rows: highest priority first
    if blocked is not None:
        by_reason: dict[str, list[str]] = {}
        for feature in blocked["missing"]:
            by_reason.setdefault(str(data["missing_features"].get(feature, "not found")), []).append(feature)
        why = "; ".join(f"{', '.join(features)}: {reason}" for reason, features in by_reason.items())
        lines.append(f"best it cannot run: {blocked['name']}, missing {why}")
    if render_extra is not None:
        lines += render_extra(data)
    return "\n".join(lines)


def render(data: dict[str, Any], render_extra: RenderExtra | None = None) -> str:
    """The verbose report: every feature found and not found (with why), every variant."""
    lines = [f"{data['name']} {data['version']} on {data['arch']}"]
    lines.append("features found:     " + (" ".join(data["host_features"]) or "(none)"))
    lines.append("features not found: " + (" ".join(data["missing_features"]) or "(none)"))
    for name, why in data["missing_features"].items():
        lines.append(f"  {name:<12} {why}")
    if data["error"]:
        lines.append(f"error: {data['error']}")
    lines.append("variants (highest priority first):")
    for v in data["variants"]:
        mark = "*" if v["selected"] else " "
        built = "built" if v["built"] else "absent"
        runs = "runs" if v["supported"] else "cannot run"
        lines.append(f" {mark} {v['name']:<14} {built:<7} {runs:<11} {v['reason']}")
    if render_extra is not None:
        lines += render_extra(data)
    if data["selected"] is None:
        lines.append("selected: none (see the error above)")
        return "\n".join(lines)
    forced = f" ({env_names(data['env_prefix'])[0]}={data['override']})" if data["override"] else ""
    lines.append(f"selected: {data['selected']}{forced}")
    return "\n".join(lines)


def main(
    argv: list[str] | None = None,
    *,
    dispatcher: Dispatcher = DISPATCHER,
    extra: Extra | None = None,
    render_extra: RenderExtra | None = None,
) -> int:
    prog = f"python -m {dispatcher.package_dir.name}"
    parser = argparse.ArgumentParser(prog=prog, description="What this CPU has, which variants are built, which one runs and why.")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("-v", "--verbose", action="store_true", help="every feature and every variant, with why")
    args = parser.parse_args(argv)
    try:
        data = report(dispatcher, extra)
    except (ImportError, OSError) as exc:  # a broken install: no manifest or probe library
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        print((render if args.verbose else render_concise)(data, render_extra))
    if data["error"]:
        print(f"error: {data['error']}", file=sys.stderr)
        return 1
    return 0
