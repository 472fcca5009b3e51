"""The audit as a gate: `cpubuild wheel` runs it on the wheel it made,
`cpubuild publish` on every wheel it is given (unless --no-audit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import CpubuildError
from .check import AuditResult, audit_target
from .report import render_text


class AuditFailedError(CpubuildError):
    """A library holds instructions its dispatcher does not check for."""


def require_clean(wheel: Path, *, symbol_dirs: tuple[Path, ...] = ()) -> AuditResult:
    """Audit `wheel`; raise AuditFailedError (with the report) on a violation.
    A wheel without ELF libraries (pure Python, macOS) passes: nothing to decode."""
    result = audit_target(wheel, allow_empty=True, symbol_dirs=symbol_dirs)
    if not result.ok:
        raise AuditFailedError(
            f"{wheel.name}: the instruction audit found {result.violations:,} instructions that need CPU features "
            f"their library's selection does not check (cpubuild audit {wheel.name}; docs/audit.md)",
            detail=render_text(result))
    return result


def summary(result: AuditResult) -> dict[str, Any]:
    """What a build's JSON summary says about the audit."""
    return {
        "ok": result.ok,
        "libraries": len(result.libraries),
        "highest": {lib.scan.name: lib.highest for lib in result.libraries},
        "guarded": sum(lib.scan.guarded_count for lib in result.libraries),
        "warnings": [w for lib in result.libraries for w in lib.warnings],
    }
