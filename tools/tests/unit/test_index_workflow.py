"""The YAML writer behind `cpubuild ci`: whatever it writes reads back the same."""

from __future__ import annotations

from cpubuild.workflow.render import structural_problems
from cpubuild.workflow.yamlout import to_yaml
from testsupport import require

SCALARS = ["", "true", "no", "On", "1.5", "0x10", ".5", "-x", "- x", "a: b", "a #b", "#x", "${{ a }}", "x:", "[a]",
           "{a}", "a,b", "@x", '"q"', "'s'", "tab\tx", "ümlaut", "a\\b", "null", "~", "*a", "&a", "!a", "%a", "`a",
           "|", ">", "a\nb\n", "a\nb", "multi\n\nline\n", "trailing ", " leading", "max,vxeh=off", 7, True, False]


def test_yaml_round_trips() -> None:
    try:
        import yaml
    except ImportError:
        require(False, "PyYAML is needed to read the YAML back")
    doc = {"scalars": {f"k{i}": v for i, v in enumerate(SCALARS)}, "list": SCALARS, "nested": [{"a": [1, {"b": {}}], "c": []}],
           "key with space": 1}
    assert yaml.safe_load(to_yaml(doc)) == doc


def test_structural_check_finds_mistakes() -> None:
    workflow = {"jobs": {"a": {"runs-on": "x", "needs": ["missing"], "steps": [{"run": "echo ${{ matrix.nope }}", "uses": "y"}]}}}
    problems = structural_problems(workflow)
    assert any("unknown job 'missing'" in p for p in problems)
    assert any("matrix.nope" in p for p in problems)
    assert any("exactly one of uses / run" in p for p in problems)
