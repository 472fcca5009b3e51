"""[audit] allow in isa_matrix.toml: validated with file/field/problem, carried in the manifest."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
from cpubuild.audit import AuditAllowError, parse_allow
from cpubuild.matrix import MatrixError, parse_matrix

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[3]
BASE: dict[str, Any] = tomllib.loads((REPO / "isa_matrix.toml").read_text())


def with_audit(audit: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["audit"] = audit
    return data


def test_allow_entries_reach_the_manifest() -> None:
    matrix = parse_matrix(with_audit({"allow": [{"symbol": "vendored_*", "reason": "own CPUID check"}]}))
    assert matrix.audit_allow == (("vendored_*", "own CPUID check"),)
    manifest = matrix.manifest("x86_64", ["baseline"], "_x_{variant}.so", probe="_x_probe.so", project={})
    assert manifest["audit"] == {"allow": [{"symbol": "vendored_*", "reason": "own CPUID check"}]}
    assert "audit" not in parse_matrix(copy.deepcopy(BASE)).manifest("x86_64", [], "{variant}", probe="p", project={})


@pytest.mark.parametrize(("audit", "where"), [
    ({"allow": [{"symbol": "f"}]}, "audit.allow entry #1, field 'reason': is required"),
    ({"allow": [{"symbol": "f", "reason": " "}]}, "audit.allow entry #1, field 'reason': must not be empty"),
    ({"allow": [{"symbol": "f", "reason": "r", "why": 1}]}, "field 'why': unknown key"),
    ({"allow": "f"}, "table 'audit', field 'allow': must be"),
    ({"deny": []}, "table 'audit', field 'deny': unknown key"),
])
def test_bad_allow_entries_name_file_field_and_problem(audit: Any, where: str) -> None:
    with pytest.raises(MatrixError) as info:
        parse_matrix(with_audit(audit), "isa_matrix.toml")
    assert where in str(info.value) and "isa_matrix.toml" in str(info.value)


def test_manifest_allow_is_checked_too() -> None:
    assert parse_allow([{"symbol": "a", "reason": "b"}], "m")[0].matches("a")
    assert parse_allow([{"symbol": "a_*", "reason": "b"}], "m")[0].matches("a_x")
    with pytest.raises(AuditAllowError, match="entry #1"):
        parse_allow([{"symbol": "a"}], "pkg/_manifest.json")
