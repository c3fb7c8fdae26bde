"""Each check rule's own examples are its tests: valid code is not flagged, invalid code is
flagged with exactly the rule's code, and its fix gives the example's `after`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ddpify.check import check_source
from ddpify.rule import CheckRule, Example, Severity, check_rules

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RULES = check_rules()
ALL = frozenset({"ALL"})
VALID = [
    pytest.param(rule, textwrap.dedent(code).lstrip("\n"), id=f"{rule.code}-valid-{index}")
    for rule in RULES
    for index, code in enumerate(rule.valid)
]
INVALID = [
    pytest.param(rule, example, id=f"{rule.code}-invalid-{index}")
    for rule in RULES
    for index, example in enumerate(rule.invalid)
]


@pytest.mark.parametrize(("rule", "code"), VALID)
def test_valid_code_is_not_flagged(rule: type[CheckRule], code: str) -> None:
    result = check_source(code.encode(), "valid.py", select=frozenset({rule.code}))
    assert result.findings == []


@pytest.mark.parametrize(("rule", "example"), INVALID)
def test_invalid_code_is_flagged_and_fixed(rule: type[CheckRule], example: Example) -> None:
    source = example.before.encode()
    result = check_source(source, "invalid.py", select=frozenset({rule.code}))
    assert result.findings and {finding.code for finding in result.findings} == {rule.code}
    # Checked with every rule, the example is flagged with this rule's code alone.
    everything = check_source(source, "invalid.py", select=frozenset({"ALL"}))
    assert {finding.code for finding in everything.findings} == {rule.code}
    fixed = check_source(source, "invalid.py", select=frozenset({rule.code}), fix=True)
    if example.after is None:
        assert fixed.fixed is None
    else:
        assert fixed.fixed is not None and fixed.fixed.decode() == example.after
        assert fixed.findings == []


def test_every_check_rule_has_valid_and_invalid_examples() -> None:
    assert RULES
    for rule in RULES:
        assert rule.valid and rule.invalid, rule.code
        page = rule.documentation()
        assert "## What it does" in page and "## Why is this bad?" in page


def test_every_check_rule_says_whether_it_is_on_by_default_and_why() -> None:
    for rule in RULES:
        page = rule.documentation()
        assert rule.selection.strip(), rule.code
        on = "On by default" if rule.default else f"Opt-in (`--extend-select {rule.code}`)"
        assert f"## Default\n{on}, severity {rule.severity.value}: " in page, rule.code
        # Advice is never on by default.
        assert not (rule.default and rule.severity is Severity.NOTE), rule.code


# The text prefilter (`CheckRule.requires`) only ever skips work: it never changes a result.

PREFILTER_CASES = sorted(
    path
    for folder in ("check/broken", "convert", "verify")
    for path in (FIXTURES / folder).rglob("*.py")
)


def every_example() -> list[str]:
    return [textwrap.dedent(code).lstrip("\n") for rule in RULES for code in rule.valid] + [
        example.before for rule in RULES for example in rule.invalid
    ]


def test_every_check_rule_has_a_text_prefilter() -> None:
    for rule in RULES:
        assert rule.requires, rule.code
        for example in rule.invalid:
            assert rule.may_apply(example.before.encode()), rule.code


def test_the_prefilter_never_changes_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = [path.read_bytes() for path in PREFILTER_CASES]
    sources += [code.encode() for code in every_example()]
    filtered = [check_source(source, "x.py", select=ALL).findings for source in sources]
    # It does skip: most rules have nothing to look at in most of these files.
    skipped = sum(not rule.may_apply(source) for source in sources for rule in RULES)
    assert skipped > len(sources) * len(RULES) // 2
    monkeypatch.setattr(CheckRule, "may_apply", classmethod(lambda cls, source, lowered=None: True))
    unfiltered = [check_source(source, "x.py", select=ALL).findings for source in sources]
    assert sum(map(len, unfiltered)) > 10
    assert filtered == unfiltered
