"""The audit as one screen of text, or as JSON."""

from __future__ import annotations

from typing import Any

from .check import AuditResult, LibraryAudit

SHOWN_VIOLATIONS = 12
SHOWN_FEATURES = 6


def _role_text(lib: LibraryAudit) -> str:
    role = lib.role
    if role.kind == "variant":
        return f"variant {role.variant}"
    return {"probe": "probe", "other": "not a variant", "unmanaged": "no manifest"}[role.kind]


def _feature_counts(lib: LibraryAudit, limit: int | None = SHOWN_FEATURES) -> str:
    items = lib.scan.by_feature.most_common()
    shown = ", ".join(f"{name} {count:,} ({len(lib.scan.functions_by_feature[name])} fn)" for name, count in items[:limit])
    more = len(items) - len(items[:limit])
    return (shown + (f", +{more} more" if more else "")) or "baseline only"


def render_text(result: AuditResult) -> str:
    lines = [f"audit of {result.target}: {len(result.libraries)} libraries, {result.text_bytes / 1e6:.2f} MB of code"
             + ("" if result.manifest else " (no cpubuild manifest: what each library needs)")]
    for lib in result.libraries:
        s = lib.scan
        verdict = "" if lib.allowed is None else ("  ok" if not s.violation_count else f"  {s.violation_count:,} VIOLATIONS")
        highest = lib.highest or "baseline"
        others = f" (+ {', '.join(lib.other_features)})" if lib.other_features else ""
        lines.append(f"  {s.name}  [{_role_text(lib)}]  {s.instructions:,} instr, highest {highest}{others}{verdict}")
        lines.append(f"      {_feature_counts(lib)}")
        if lib.allowed is None and s.function_highest:
            top = sorted(s.function_highest.items(), key=lambda kv: (-_rank(lib, kv[1]), kv[0]))[:3]
            lines.append("      highest per function: " + ", ".join(f"{fn} {feat}" for fn, feat in top)
                         + (f", ... ({len(s.function_highest):,} functions need more than the baseline)" if len(s.function_highest) > 3 else ""))
        by_reason: dict[str, list[str]] = {}
        for g in s.guarded:
            by_reason.setdefault(g.guarded_by or "", []).append(g.function)
        for reason, functions in by_reason.items():
            who, _, why = reason.partition(": ") if reason.startswith("guarded by the toolchain") else ("guarded by the project", "", reason)
            lines.append(f"      {who}: {len(functions):,} instructions in {', '.join(sorted(set(functions)))} ({why})")
        for warning in lib.warnings:
            lines.append(f"      warning: {warning}")
    shown = [v for lib in result.libraries for v in lib.scan.violations][:SHOWN_VIOLATIONS]
    if shown:
        lines.append("violations (library, function, address, instruction, needs):")
        lines += [f"  {v.library}  {v.function}  0x{v.address:x}  {v.instruction}  needs {', '.join(v.features)}" for v in shown]
        if result.violations > len(shown):
            lines.append(f"  ... {result.violations - len(shown):,} more (--json lists up to 200 per library)")
    if result.manifest:
        lines.append("PASS: every library needs only what its dispatcher checks" if result.ok
                     else f"FAIL: {result.violations:,} instruction(s) need features their library's selection does not check")
    return "\n".join(lines)


def _rank(lib: LibraryAudit, feature: str) -> int:
    from .features import tables

    return tables(lib.scan.arch).rank(feature)


def render_json(result: AuditResult) -> dict[str, Any]:
    out: dict[str, Any] = {"target": result.target, "manifest": result.manifest, "ok": result.ok,
                           "violations": result.violations, "text_bytes": result.text_bytes, "libraries": []}
    for lib in result.libraries:
        s = lib.scan
        out["libraries"].append({
            "library": s.name, "arch": s.arch, "role": lib.role.kind, "variant": lib.role.variant,
            "requires": list(lib.role.requires), "allowed": list(lib.allowed) if lib.allowed is not None else None,
            "text_bytes": s.text_bytes, "instructions": s.instructions, "undecodable": s.undecodable,
            "highest": lib.highest, "other_features": lib.other_features,
            "by_feature": {name: {"instructions": count, "functions": len(s.functions_by_feature[name])}
                           for name, count in s.by_feature.most_common()},
            "function_highest": dict(sorted(s.function_highest.items())),
            "violation_count": s.violation_count, "violations": [v.as_json() for v in s.violations],
            "guarded_count": s.guarded_count, "guarded": [g.as_json() for g in s.guarded],
            "warnings": lib.warnings,
        })
    return out
