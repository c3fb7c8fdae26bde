"""Each check rule's own examples are its tests: valid code is not flagged, invalid code is
flagged with exactly the rule's code, and its fix gives the example's `after`."""

from __future__ import annotations

import textwrap

import pytest

from ddpify.lint import check_rules, check_source
from ddpify.rule import Example, Rule

RULES = check_rules()
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
def test_valid_code_is_not_flagged(rule: type[Rule], code: str) -> None:
    result = check_source(code.encode(), "valid.py", select=frozenset({rule.code}))
    assert result.findings == []


@pytest.mark.parametrize(("rule", "example"), INVALID)
def test_invalid_code_is_flagged_and_fixed(rule: type[Rule], example: Example) -> None:
    source = example.before.encode()
    result = check_source(source, "invalid.py", select=frozenset({rule.code}))
    assert result.findings and {finding.code for finding in result.findings} == {rule.code}
    # Checked with every rule, the example is flagged with this rule's code alone.
    everything = check_source(source, "invalid.py")
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
