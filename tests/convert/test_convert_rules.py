"""Each rule's own examples are its tests: run alone, the rule turns `before` into `after`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ddpify.convert import convert_source
from ddpify.options import ConvertOptions
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


def test_a_class_given_the_wrapped_model_that_saves_its_state_dict_is_refused() -> None:
    """SimCLR's layout: the model reaches `self.model` through `**kwargs`; its state_dict
    would carry `module.` keys, so the conversion stops and names the line."""
    source = b"""import torch


class SimCLR:
    def __init__(self, *args, **kwargs):
        self.model = kwargs["model"].to("cpu")
        self.optimizer = kwargs["optimizer"]

    def train(self, loader):
        for epoch in range(2):
            for x in loader:
                loss = self.model(x).sum()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            torch.save({"state_dict": self.model.state_dict(),
                        "optimizer": self.optimizer.state_dict()}, "ckpt.pt")


def main():
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    simclr = SimCLR(model=model, optimizer=optimizer)
    simclr.train(loader)


if __name__ == "__main__":
    main()
"""
    result = convert_source(source, "simclr.py", ConvertOptions())
    assert result.refused and result.output == source
    held = [note for note in result.notes if note.blocking and note.code == "DDP003"]
    assert [note.line for note in held] == [16], result.notes
    assert "`self.model` may hold the DDP-wrapped `model`" in held[0].message
