"""Building the code ddpify writes: snippets parsed into nodes that take the script's style."""

from __future__ import annotations

from typing import TypeVar, cast

import libcst as cst

ItemT = TypeVar("ItemT", bound=cst.Arg | cst.ImportAlias)

# Expressions the emitted code shares, so every rule writes them the same way.
RANK_ZERO = "dist.get_rank() == 0"
# The same where the script may also run as one process without a process group.
RANK_ZERO_OR_NO_GROUP = "not dist.is_initialized() or dist.get_rank() == 0"
WORLD_SIZE = "dist.get_world_size()"
FALLBACK_DEVICE = 'torch.device("cuda" if torch.cuda.is_available() else "cpu")'
# Before `destroy_process_group()` when `main()` returns: a DDP model it made can outlive the
# call in a reference cycle, and freed at exit, after its process group, gloo aborts the
# process ("terminate called without an active exception"; the round-7 denoiser with both
# cores busy, the two versions alternated: 2 runs in 25 without this line, none in 25 with it).
COLLECT_CYCLES = "gc.collect()  # free DDP models left in reference cycles first\n"
# The comments on the DataLoaders the conversion adds: `ddpify verify` tells them apart by
# these (they have no twin in the original).
MADE_AGAIN = "made again here, to take a DistributedSampler"
FOR_EVALUATION = "# every sample, for evaluation"
# The comment on the seeds the conversion adds so that each process draws its own batches
# (`torch.manual_seed(1337 + dist.get_rank())`): verify's one-process run skips them.
DRAWS_OF_ITS_OWN = "# every process draws"


def statements(code: str) -> list[cst.BaseStatement]:
    """Statements from a snippet written with four-space indents.

    Parsed without an explicit indent or newline, they render with the target module's own
    (two-space indents and CRLF endings stay so)."""
    return list(cst.parse_module(code).body)


def statement(code: str) -> cst.BaseStatement:
    (only,) = statements(code)
    return only


def expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def rank_zero_test(no_group: bool = False, in_operation: bool = False) -> cst.BaseExpression:
    """The test for global rank 0; `no_group`: also true when there is no process group;
    `in_operation`: parenthesised, to stand inside an `and`/`or`."""
    if not no_group:
        return expression(RANK_ZERO)
    test = expression(RANK_ZERO_OR_NO_GROUP)
    if in_operation:
        test = test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return test


def with_keyword(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call:
    """`call` with `keyword=value` appended, following the call's own comma style."""
    new = cst.Arg(
        value=value,
        keyword=cst.Name(keyword),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )
    return call.with_changes(args=appended(list(call.args), [new]))


def appended(items: list[ItemT], new: list[ItemT]) -> list[ItemT]:
    """`items + new` for a comma-separated list, keeping its layout: with a trailing comma
    (one item per line, say), the new items take the same comma as the last old one."""
    if not items or not new:
        return [*items, *new]
    last = items[-1]
    if not isinstance(last.comma, cst.Comma):
        return [*items, *new]
    between = items[-2].comma if len(items) > 1 else last.comma
    assert isinstance(between, cst.Comma)
    ending = last.comma
    restyled = [cast(ItemT, item.with_changes(comma=between)) for item in new[:-1]]
    restyled.append(cast(ItemT, new[-1].with_changes(comma=ending)))
    return [*items[:-1], cast(ItemT, last.with_changes(comma=between)), *restyled]


def unindented_blank_lines(node: cst.BaseStatement) -> cst.BaseStatement:
    """A statement moved into a deeper block keeps its blank lines blank: without this, a
    blank line above it takes the new block's indentation (a line of spaces)."""
    assert isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement)
    lines = [
        line if line.comment is not None else line.with_changes(indent=False)
        for line in node.leading_lines
    ]
    return node.with_changes(leading_lines=lines)
