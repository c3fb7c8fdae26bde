"""Which values are means over a loop's batches (ddpify/analysis/means.py): the values a
decision may average over the processes. A sum, or a sum over the whole dataset's length,
is not one: averaged it would shrink by the world size."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from ddpify.analysis.index import SourceIndex
from ddpify.analysis.loaders import strip_iteration
from ddpify.analysis.means import batch_mean
from ddpify.analysis.tree import dotted

LOOP = """\
def train(model, loader, optimizer):
    {setup}
    for i, (x, y) in enumerate(loader):
        loss = model(x, y)
        loss.backward()
        {body}
    return {value}
"""

MEANS = [
    ("total = 0.0", "total += loss.item()", "total / len(loader)"),
    ("total, n = 0.0, 0", "total += loss.item() * len(x)\n        n += len(x)", "total / n"),
    ("total, n = 0.0, 0", "total += loss.item()\n        n += 1", "total / n"),
    ("total = 0.0", "v = loss.item()\n        total += v * x.size(0)", "total / len(loader)"),
    ("losses = []", "losses.append(loss.item())", "sum(losses) / len(losses)"),
    ("losses = []", "losses.append(loss.item())", "np.mean(losses)"),
    ("losses = []", "losses.append(loss.item())", "statistics.fmean(losses)"),
    ("meter = AverageMeter()", "meter.update(loss.item(), x.size(0))", "meter.avg"),
    ("total = 0.0", "total += loss.item()\n    total /= len(loader)\n    avg = total", "avg"),
]

NOT_MEANS = [
    ("total = 0.0", "total += loss.item()", "total"),  # a sum
    ("total = 0.0", "total += loss.item()", "total / len(loader.dataset)"),  # a sum per sample
    ("total, n = 0.0, 0", "total += loss.item()\n        n += weight", "total / n"),
    ("losses = []", "losses.append(loss)", "sum(losses) / len(losses)"),  # tensors
    ("losses = []", "losses.append(loss.item())", "max(losses)"),
    ("total = 0.0", "total += loss.item()", "total / len(other)"),
]


def _mean_of(setup: str, body: str, value: str) -> str | None:
    module = cst.parse_module(LOOP.format(setup=setup, body=body, value=value))
    index = SourceIndex(module)
    function = module.body[0]
    assert isinstance(function, cst.FunctionDef)
    returned = _returned(function)
    loop = batch_mean(returned, function, index)
    return dotted(strip_iteration(loop.iter)) if loop is not None else None


@pytest.mark.parametrize(("setup", "body", "value"), MEANS)
def test_means_over_the_batches(setup: str, body: str, value: str) -> None:
    assert _mean_of(setup, body, value) == "loader"


@pytest.mark.parametrize(("setup", "body", "value"), NOT_MEANS)
def test_sums_and_other_values_are_not_means(setup: str, body: str, value: str) -> None:
    assert _mean_of(setup, body, value) is None


def test_a_sum_added_to_in_two_loops_is_not_one_loops_mean() -> None:
    source = textwrap.dedent(
        """\
        def train(loader, other):
            total = 0.0
            for x in loader:
                total += x.item()
            for x in other:
                total += x.item()
            return total / len(loader)
        """
    )
    module = cst.parse_module(source)
    function = module.body[0]
    assert isinstance(function, cst.FunctionDef)
    assert batch_mean(_returned(function), function, SourceIndex(module)) is None


def _returned(function: cst.FunctionDef) -> cst.BaseExpression:
    last = function.body.body[-1]
    assert isinstance(last, cst.SimpleStatementLine)
    returned = last.body[0]
    assert isinstance(returned, cst.Return) and returned.value is not None
    return returned.value
