"""Each rule's own examples are its tests: run alone, the rule turns `before` into `after`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ddpify.convert import convert_source
from ddpify.rule import CheckRule, ConvertRule, Example, all_rules, convert_rules

CASES = [
    pytest.param(rule, example, id=f"{rule.code}-{index}")
    for rule in convert_rules()
    for index, example in enumerate(rule.examples)
]


@pytest.mark.parametrize(("rule", "example"), CASES)
def test_rule_example(rule: type[ConvertRule], example: Example) -> None:
    options = replace(example.options, select=frozenset({rule.code}))
    result = convert_source(example.before.encode(), "example.py", options)
    expected = example.before if example.after is None else example.after
    assert result.output.decode() == expected
    assert not result.problems


def test_every_conversion_rule_has_an_example_and_a_documented_page() -> None:
    for rule in convert_rules():
        assert rule.code.startswith("DDP") and len(rule.code) == 6
        assert rule.message and rule.name
        page = rule.documentation()
        assert "## What it does" in page and "## Why is this bad?" in page, rule.code
        assert rule.examples, rule.code


def test_codes_and_names_are_unique() -> None:
    rules = all_rules()
    assert len({rule.code for rule in rules}) == len(rules)
    assert len({rule.name for rule in rules}) == len(rules)


def test_a_second_rule_with_a_taken_code_is_refused() -> None:
    with pytest.raises(ValueError, match="defined twice"):

        class Clash(CheckRule):
            code = convert_rules()[0].code
            name = "clash"
            message = "clash"
