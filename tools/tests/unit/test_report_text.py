"""The runtime's text reports (pure: report data -> text) and where its errors say a request came from."""

from __future__ import annotations

from typing import Any

import pytest
from cpubuild.runtime import errors
from cpubuild.runtime.report import render, render_concise

MISSING = {f"avx512{s}": "CPUID does not report it" for s in ("f", "dq", "bw", "vl", "_vnni", "_bf16", "_fp16", "cd")}


def row(name: str, *, built: bool = True, missing: tuple[str, ...] = (), selected: bool = False, reason: str = "") -> dict[str, Any]:
    return {"name": name, "priority": 0, "built": built, "supported": not missing, "missing": list(missing),
            "selected": selected, "reason": reason or ("CPU lacks " + ", ".join(missing) if missing else "lower priority")}


def data(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "demo", "version": "1.0", "arch": "x86_64", "env_prefix": "DEMO", "error": None, "override": None,
        "host_features": ["sse2", "avx2"], "missing_features": {**MISSING, "xsave_zmm": "the OS does not enable ZMM state"},
        "selected": "avx2",
        "variants": [
            row("avx512bf16", missing=("avx512f", "avx512_bf16")),
            row("avx512", built=False, missing=("avx512f",), reason="not built into this package"),
            row("avx2", selected=True, reason="highest priority variant this CPU runs"),
            row("baseline"),
        ],
    }
    return {**base, **kw}


def test_concise_report_is_a_few_lines_whatever_the_features() -> None:
    text = render_concise(data())
    assert text.splitlines() == [
        "demo 1.0 on x86_64",
        "selected: avx2 (highest priority variant this CPU runs)",
        "built: avx512bf16, avx2, baseline; this CPU runs: avx2, baseline",
        "best it cannot run: avx512bf16, missing avx512f, avx512_bf16: CPUID does not report it",
    ]
    assert len(render(data()).splitlines()) > len(MISSING)  # --verbose: every feature line


def test_concise_report_groups_missing_features_by_reason_and_shows_the_error() -> None:
    variants = [row("avx512", missing=("avx512f", "xsave_zmm")), row("baseline", reason="none")]
    text = render_concise(data(variants=variants, selected=None, error="DEMO_ISA=avx512: this CPU cannot run it"))
    assert "error: DEMO_ISA=avx512: this CPU cannot run it" in text
    assert "selected: none (see the error above)" in text
    assert "best it cannot run: avx512, missing avx512f: CPUID does not report it; xsave_zmm: the OS does not enable ZMM state" in text


def test_concise_report_prints_the_packages_extra_lines() -> None:
    assert render_concise(data(), lambda d: [f"threads: {d['name']}"]).endswith("\nthreads: demo")


@pytest.mark.parametrize(("source", "start"), [
    (None, "DEMO_ISA=avx512: "),
    ("load_variant('avx512')", "load_variant('avx512'): "),
])
def test_errors_name_the_source_of_the_request(source: str | None, start: str) -> None:
    unsupported = errors.UnsupportedISAError("avx512", ["avx512f"], env="DEMO_ISA", source=source)
    assert str(unsupported).startswith(start + "this CPU cannot run variant 'avx512'; missing features: avx512f")
    unknown = errors.UnknownISAError("avx512", ["baseline"], known=True, env="DEMO_ISA", source=source)
    assert str(unknown).startswith(start + "'avx512' is not built into this package")
