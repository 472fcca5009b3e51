"""`python -m cpukern [--json]`: what this CPU has, what is built, what runs.

Needs only the standard library (it must run where NumPy cannot import,
e.g. a CPU without XSAVE)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any

from . import _dispatch, _threads
from ._select import Selection, select_variant
from ._version import __version__
from .errors import CpukernError


def report() -> dict[str, Any]:
    host = _dispatch.host()
    result: dict[str, Any] = {
        "version": __version__,
        "arch": host.arch,
        "machine": platform.machine(),
        "package": str(_dispatch.PACKAGE_DIR),  # which install answered
        "host_features": list(host.features.found),
        "missing_features": dict(host.features.not_found),
        "override": None,
        "disabled": [],
        "selected": None,
        "error": None,
        "variants": [],
        "threads": _threads.report(),  # CPUKERN_OMP_THREADS_BIND, applied when the pool starts
    }
    try:
        sel = _dispatch.selection()
    except CpukernError as exc:
        result["error"] = str(exc)
        result["override"] = os.environ.get(_dispatch.ENV_FORCE, "").strip() or None
        result["variants"] = _unforced_rows(host.features.found)
        return result
    result["selected"] = sel.selected
    result["override"] = sel.override
    result["disabled"] = list(sel.disabled)
    result["variants"] = _variant_rows(sel, selected=sel.selected)
    return result


def _unforced_rows(found: tuple[str, ...]) -> list[dict[str, Any]]:
    """What is built and what this CPU runs, as if nothing were forced or disabled."""
    try:
        sel = select_variant(_dispatch.manifest()["variants"], found, built=_dispatch.built_variants())
    except CpukernError:
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


def render(data: dict[str, Any]) -> str:
    lines = [f"cpukern {data['version']} on {data['arch']}"]
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
    threads = data["threads"]
    lines.append(
        f"threads: error: {threads['error']}" if threads["error"] else f"threads: {threads['summary']} (at first use)"
    )
    if data["selected"] is None:
        lines.append("selected: none (see the error above)")
        return "\n".join(lines)
    lines.append(f"selected: {data['selected']}" + (f" (CPUKERN_ISA={data['override']})" if data["override"] else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cpukern", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        data = report()
    except (ImportError, OSError) as exc:  # a broken install: no manifest or probe library
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(data, indent=1) if args.json else render(data))
    if data["error"]:
        print(f"error: {data['error']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
