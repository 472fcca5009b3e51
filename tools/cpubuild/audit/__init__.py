"""`cpubuild audit`: proves, instruction by instruction, that each library of
a wheel needs only the CPU features its dispatcher checks before loading it
(docs/audit.md). Decoding: iced-x86 (x86_64), capstone (aarch64, s390x);
which instruction needs which feature: hardware/audit_features.toml."""

from __future__ import annotations

from .check import AuditAllowError, AuditInputError, AuditResult, audit_target, parse_allow
from .elf import NotAuditableError
from .report import render_json, render_text
from .scan import Allow

__all__ = ["Allow", "AuditAllowError", "AuditInputError", "AuditResult", "NotAuditableError", "audit_target",
           "parse_allow", "render_json", "render_text"]
