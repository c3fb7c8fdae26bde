"""DDP014: one backward pass per forward pass of the DDP model."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import libcst as cst

from ddpify.analysis.tree import call_arg, is_method_call, is_name, walk
from ddpify.rule import ConvertContext, ConvertRule, Example


class OneBackward(ConvertRule):
    """
    ## What it does
    Two backward passes in a row through one forward pass (`loss1.backward(retain_graph=
    True)`, then `loss2.backward()`, the next statement) become one backward pass of their
    sum: `(loss1 + loss2).backward()`. The gradients are the same: a backward pass adds
    its gradients to `.grad`, and the gradient of a sum is the sum of the gradients.

    ## Why is this bad?
    DDP averages each parameter's gradient while the backward pass runs, once per forward
    pass: a second backward pass through the same forward marks the parameters ready a
    second time, and DDP stops with "Expected to mark a variable ready only once" (or
    "has been marked as ready twice") at the first step.
    """

    code = "DDP014"
    step = 14
    name = "one-backward"
    message = "two backward passes through one forward pass become one, of the losses' sum"
    fix_safety = """
        Safe: the gradients `.grad` holds after the two passes and after the one pass of the
        sum are the same. Only passes that follow each other directly are joined; anything
        between them (a look at the gradients, a step) keeps them apart.
    """
    examples = (
        # The second under a condition (an auxiliary loss from a later epoch): one pass of
        # the sum when it holds, of the first loss alone when not.
        Example(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    optimizer.zero_grad()
                    logits, rec = model(x)
                    loss_cls = criterion(logits, y)
                    loss_rec = (rec - x).pow(2).mean()
                    loss_cls.backward(retain_graph=True)
                    if epoch >= 1:
                        (0.5 * loss_rec).backward()
                    optimizer.step()
            """,
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    optimizer.zero_grad()
                    logits, rec = model(x)
                    loss_cls = criterion(logits, y)
                    loss_rec = (rec - x).pow(2).mean()
                    if epoch >= 1:
                        (loss_cls + (0.5 * loss_rec)).backward()
                    else:
                        loss_cls.backward()
                    optimizer.step()
            """,
        ),
        Example(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    optimizer.zero_grad()
                    out = model(x)
                    loss1 = criterion(out, y)
                    loss2 = out.pow(2).mean()
                    loss1.backward(retain_graph=True)
                    loss2.backward()
                    optimizer.step()
            """,
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    optimizer.zero_grad()
                    out = model(x)
                    loss1 = criterion(out, y)
                    loss2 = out.pow(2).mean()
                    (loss1 + loss2).backward()
                    optimizer.step()
            """,
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        if not anatomy.script.backward_calls:
            return
        for block in walk(anatomy.module):
            if not isinstance(block, cst.IndentedBlock | cst.Module):
                continue
            body = list(block.body)
            for first, second in itertools.pairwise(body):
                kept = _retained_backward(first)
                if kept is not None and _conditional_backward(second) is not None:
                    assert isinstance(first, cst.SimpleStatementLine)
                    assert isinstance(second, cst.If)
                    ctx.plan.replace(first, lambda _: cst.RemovalSentinel.REMOVE)
                    ctx.plan.replace(second, _branched(first, kept))
                    ctx.changed(
                        kept,
                        "a backward pass, then another under a condition, through one forward "
                        "pass: one of the losses' sum when it holds, of the first alone when "
                        "not (DDP averages the gradients once per forward pass)",
                    )
                    continue
                joined = _backward(second)
                if kept is None or joined is None:
                    continue
                assert isinstance(first, cst.SimpleStatementLine)
                ctx.plan.replace(first, lambda _: cst.RemovalSentinel.REMOVE)
                ctx.plan.replace(second, _joined(first.leading_lines, _summed(kept, joined)))
                ctx.changed(
                    kept,
                    "two backward passes through one forward pass: one of the losses' sum "
                    "(DDP averages the gradients once per forward pass)",
                )


def _backward(statement: cst.CSTNode) -> cst.Call | None:
    """`loss.backward(...)` as a statement of its own."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return None
    expr = statement.body[0]
    if isinstance(expr, cst.Expr) and is_method_call(expr.value, "backward"):
        assert isinstance(expr.value, cst.Call)
        return expr.value
    return None


def _retained_backward(statement: cst.CSTNode) -> cst.Call | None:
    """`loss.backward(retain_graph=True)` as a statement of its own, nothing else given."""
    call = _backward(statement)
    if call is None or len(call.args) != 1:
        return None
    retained = call_arg(call, None, "retain_graph")
    return call if retained is not None and is_name(retained.value, "True") else None


def _conditional_backward(statement: cst.CSTNode) -> cst.Call | None:
    """`if cond: loss.backward()`: an `if` with no `else` whose body is one backward pass."""
    if not (
        isinstance(statement, cst.If)
        and statement.orelse is None
        and isinstance(statement.body, cst.IndentedBlock)
        and len(statement.body.body) == 1
    ):
        return None
    return _backward(statement.body.body[0])


def _branched(
    first: cst.SimpleStatementLine, kept: cst.Call
) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """`if cond: (a + b).backward()` `else: a.backward()`, for `a.backward(retain_graph=True)`
    followed by `if cond: b.backward()` (round-45 audit B two_losses)."""

    def edit(branching: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(branching, cst.If) and isinstance(branching.body, cst.IndentedBlock)
        line = branching.body.body[0]
        assert isinstance(line, cst.SimpleStatementLine)
        expr = line.body[0]
        assert isinstance(expr, cst.Expr) and isinstance(expr.value, cst.Call)
        summed = line.with_changes(body=[expr.with_changes(value=_summed(kept, expr.value))])
        alone = first.with_changes(leading_lines=[], body=[cst.Expr(kept.with_changes(args=[]))])
        return branching.with_changes(
            leading_lines=[*first.leading_lines, *branching.leading_lines],
            body=branching.body.with_changes(body=[summed]),
            orelse=cst.Else(body=cst.IndentedBlock(body=[alone])),
        )

    return edit


def _joined(above: Sequence[cst.EmptyLine], call: cst.Call) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """The second backward's line, running `call`, under the first one's comments too."""

    def edit(line: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(line, cst.SimpleStatementLine)
        expr = line.body[0]
        assert isinstance(expr, cst.Expr)
        return line.with_changes(
            leading_lines=[*above, *line.leading_lines], body=[expr.with_changes(value=call)]
        )

    return edit


def _summed(kept: cst.Call, joined: cst.Call) -> cst.Call:
    """`(a + b).backward(<joined's arguments>)`."""
    assert isinstance(kept.func, cst.Attribute) and isinstance(joined.func, cst.Attribute)
    total = cst.BinaryOperation(
        left=kept.func.value,
        operator=cst.Add(),
        right=joined.func.value,
        lpar=[cst.LeftParen()],
        rpar=[cst.RightParen()],
    )
    return joined.with_changes(func=joined.func.with_changes(value=total))
