"""DDP012: gradient accumulation all-reduces only on the micro-batches that step."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.models import Model
from ddpify.analysis.script import TrainLoop
from ddpify.analysis.tree import dotted, is_attribute, is_method_call, is_name, walk
from ddpify.emit import unindented_blank_lines
from ddpify.rule import ConvertContext, ConvertRule, Example

# Comparisons whose negation is the flipped operator, for the `with` line to read "no sync
# unless stepping" in the script's own terms.
FLIPPED: dict[type[cst.BaseCompOp], type[cst.BaseCompOp]] = {
    cst.Equal: cst.NotEqual,
    cst.NotEqual: cst.Equal,
    cst.LessThan: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.LessThan,
    cst.GreaterThan: cst.LessThanEqual,
    cst.LessThanEqual: cst.GreaterThan,
}
# What a step's condition may be made of to be read twice (at the `with` and at the `if`)
# with the same result: names, numbers and arithmetic, `len(...)`.
PURE = (
    cst.Name,
    cst.Attribute,
    cst.Integer,
    cst.Float,
    cst.BinaryOperation,
    cst.UnaryOperation,
    cst.Comparison,
    cst.ComparisonTarget,
    cst.BooleanOperation,
    cst.LeftParen,
    cst.RightParen,
    cst.Arg,
    cst.BaseBinaryOp,
    cst.BaseUnaryOp,
    cst.BaseCompOp,
    cst.BaseBooleanOp,
)


class NoSyncAccumulation(ConvertRule):
    """
    ## What it does
    In a batch loop that accumulates gradients (`loss.backward()` on every batch,
    `optimizer.step()` under `if (i + 1) % accum_steps == 0:`), runs the forward and backward
    passes of the batches that do not step under the DDP model's `no_sync()`:
    `with model.no_sync() if (i + 1) % accum_steps != 0 else contextlib.nullcontext():`
    around the statements from the model's forward to the backward. The batches that step
    all-reduce the gradients accumulated since the last step, once.

    It rewrites only what it can read whole: one backward and one optimizer step in the
    loop, the step under one `if` in the backward's block, a condition made of names,
    numbers and `len(...)` that the forward and backward do not change, and the model called
    (or handed to a function) in that block. Otherwise the report says where the loop is,
    and every backward all-reduces, which is correct but slower.

    ## Why is this bad?
    DDP all-reduces every parameter's gradient at every backward. With accumulation over
    `k` micro-batches, `k - 1` of those all-reduces are wasted: the sum is what counts, and
    the all-reduce of the stepping batch averages it across processes just the same.
    """

    code = "DDP012"
    step = 12
    name = "no-sync-accumulation"
    message = "micro-batches that do not step skip DDP's all-reduce (`model.no_sync()`)"
    fix_safety = """
        Safe: DDP all-reduces the gradients accumulated under `no_sync()` at the next
        backward outside it, so every optimizer step sees the same averaged gradient as
        without it (up to floating-point rounding).
    """
    examples = (
        Example(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for i, (x, y) in enumerate(loader):
                    x = x.to(device)
                    # scaled so the accumulated gradient is the mean
                    loss = criterion(model(x), y) / accum_steps
                    loss.backward()
                    if (i + 1) % accum_steps == 0:
                        optimizer.step()
                        optimizer.zero_grad()
            """,
            """
            import torch
            import contextlib

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for i, (x, y) in enumerate(loader):
                    x = x.to(device)
                    with model.no_sync() if (i + 1) % accum_steps != 0 else contextlib.nullcontext():
                        # scaled so the accumulated gradient is the mean
                        loss = criterion(model(x), y) / accum_steps
                        loss.backward()
                    if (i + 1) % accum_steps == 0:
                        optimizer.step()
                        optimizer.zero_grad()
            """,  # noqa: E501
        ),
        # Every batch steps: nothing accumulates.
        Example(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            """,
        ),
        # An optimizer step or an update by hand (the word language model's): every batch
        # steps either way.
        Example(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=lr)
            for x, y in loader:
                model.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                if use_optimizer:
                    optimizer.step()
                else:
                    for p in model.parameters():
                        p.data.add_(p.grad, alpha=-lr)
            """,
        ),
        # The condition reads what the forward computes: it cannot be known before it.
        Example(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                if loss.item() < 1.0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        for loop in anatomy.script.train_loops:
            if not _accumulates(anatomy, loop):
                continue
            span = _span(anatomy, loop)
            if isinstance(span, str):
                ctx.info(
                    loop.batch_loop,
                    f"gradient accumulation: every backward all-reduces ({span}); "
                    "`with model.no_sync():` around the micro-batches that do not step "
                    "saves that traffic",
                )
                continue
            first, last, name, test = span
            item = cst.parse_expression(
                f"{name}.no_sync() if {_negated(test)} else contextlib.nullcontext()"
            )
            ctx.plan.wrap_span(first, last, _with_item(item))
            ctx.add_import("contextlib")
            ctx.changed(
                first,
                f"the micro-batches that do not step accumulate under `{name}.no_sync()`: "
                "one all-reduce per optimizer step",
            )


def _with_item(
    item: cst.BaseExpression,
) -> Callable[[list[cst.BaseStatement]], list[cst.BaseStatement]]:
    def wrap(body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        first = body[0]
        assert isinstance(first, cst.SimpleStatementLine | cst.BaseCompoundStatement)
        # Blank lines stay above the `with`, the comments on the first statement with it.
        lines = list(first.leading_lines)
        split = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
        inner = cst.IndentedBlock(
            body=[
                unindented_blank_lines(first.with_changes(leading_lines=lines[split:])),
                *map(unindented_blank_lines, body[1:]),
            ]
        )
        return [cst.With(items=[cst.WithItem(item)], body=inner, leading_lines=lines[:split])]

    return wrap


def _negated(test: cst.BaseExpression) -> str:
    code = cst.Module([]).code_for_node
    if (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and type(test.comparisons[0].operator) in FLIPPED
        and not test.lpar
    ):
        target = test.comparisons[0]
        operator = FLIPPED[type(target.operator)]()
        return code(test.with_changes(comparisons=[target.with_changes(operator=operator)]))
    return f"not ({code(test)})"


def _steps(loop: TrainLoop) -> list[cst.CSTNode]:
    """The optimizer steps of the batch loop (a scheduler's step is not one), and the
    updates it makes by hand (`for p in model.parameters(): p.data.add_(p.grad, alpha=-lr)`,
    the word language model's without `--use-optimizer`)."""
    return [
        node
        for node in walk(loop.batch_loop.body)
        if (
            is_method_call(node, "step") and "sched" not in (dotted(node.func.value) or "")  # type: ignore[attr-defined]
        )
        or _updates_by_hand(node)
    ]


def _updates_by_hand(node: cst.CSTNode) -> bool:
    """`for p in <...>.parameters():` whose body reads `.grad` and writes in place."""
    if not (
        isinstance(node, cst.For)
        and isinstance(node.iter, cst.Call)
        and is_attribute(node.iter.func, "parameters")
    ):
        return False
    inner = list(walk(node.body))
    return any(is_attribute(n, "grad") for n in inner) and any(
        isinstance(n, cst.AugAssign)
        or (
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value.endswith("_")
            and not n.func.attr.value.startswith("_")
        )
        for n in inner
    )


def _steps_either_way(anatomy: Anatomy, condition: cst.If, steps: list[cst.CSTNode]) -> bool:
    """`if use_optimizer: optimizer.step() else: <update by hand>`: a step on both branches
    of `condition`, so it does not decide whether the batch steps."""
    orelse = condition.orelse
    return (
        isinstance(orelse, cst.Else)
        and any(anatomy.inside(step, condition.body) for step in steps)
        and any(anatomy.inside(step, orelse) for step in steps)
    )


def _backwards(loop: TrainLoop) -> list[cst.CSTNode]:
    return [
        node
        for node in walk(loop.batch_loop.body)
        if isinstance(node, cst.Call) and is_attribute(node.func, "backward")
    ]


def _accumulates(anatomy: Anatomy, loop: TrainLoop) -> bool:
    """Whether the loop's optimizer step is conditional while a backward pass is not under
    the same condition: gradients accumulate over batches. `if phase == "train":
    loss.backward(); optimizer.step()` (the transfer-learning tutorial) and an AMP if/else
    with a backward and a step in each branch step after every backward."""
    if anatomy.graph.reaches(loop.batch_loop.body, lambda node: is_attribute(node, "no_sync")):
        return False  # the script already skips the synchronisation itself
    backwards = _backwards(loop)
    steps = _steps(loop)
    for step in steps:
        conditions = [
            a
            for a in _between(anatomy, step, loop.batch_loop)
            if isinstance(a, cst.If) and not _steps_either_way(anatomy, a, steps)
        ]
        if any(
            not all(condition in anatomy.ancestors(backward) for condition in conditions)
            for backward in backwards
        ):
            return True
    return False


def _span(
    anatomy: Anatomy, loop: TrainLoop
) -> tuple[cst.BaseStatement, cst.BaseStatement, str, cst.BaseExpression] | str:
    """The statements to run under `no_sync()` (from the model's forward to the backward),
    the model's name there and the step's condition; or why they cannot be told."""
    backwards, steps = _backwards(loop), _steps(loop)
    if len(backwards) != 1 or len(steps) != 1:
        return f"{len(backwards)} backward passes and {len(steps)} optimizer steps in the loop"
    conditions = [a for a in _between(anatomy, steps[0], loop.batch_loop) if isinstance(a, cst.If)]
    if len(conditions) != 1:
        return "the optimizer step is under more than one condition"
    stepping = conditions[0]
    block = anatomy.body_of(stepping)
    backward = anatomy.statement_of(backwards[0])
    if backward not in block or block.index(backward) > block.index(stepping):
        return "the backward pass is not in the block of the step's condition, before it"
    if not all(isinstance(node, PURE) or _is_len(node) for node in walk(stepping.test)):
        return "the step's condition calls something"
    end = block.index(backward)
    start, name = _first_forward(anatomy, block[: end + 1])
    if name is None:
        return "the model's forward is not in the backward's block"
    read = {node.value for node in walk(stepping.test) if isinstance(node, cst.Name)}
    changed = _assigned(block[start : block.index(stepping)])
    if read & changed:
        changed_name = sorted(read & changed)[0]
        return f"the forward and backward change `{changed_name}`, which the step's condition reads"
    return block[start], backward, name, stepping.test


def _first_forward(
    anatomy: Anatomy, statements: Sequence[cst.BaseStatement]
) -> tuple[int, str | None]:
    """The first statement that calls a trained model, or hands it to a function, and the
    model's name there."""
    models: list[Model] = anatomy.models.all
    for index, statement in enumerate(statements):
        for node in walk(statement):
            if not isinstance(node, cst.Call):
                continue
            for expression in [node.func, *(arg.value for arg in node.args)]:
                name = dotted(expression)
                if name is not None and any(name in model.names for model in models):
                    return index, name
    return 0, None


def _is_len(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and is_name(node.func, "len")


def _assigned(statements: Sequence[cst.BaseStatement]) -> set[str]:
    names: set[str] = set()
    for statement in statements:
        for node in walk(statement):
            target: cst.CSTNode | None = None
            if isinstance(node, cst.AssignTarget | cst.AnnAssign | cst.AugAssign | cst.For):
                target = node.target
            elif isinstance(node, cst.NamedExpr | cst.AsName):
                target = node.target if isinstance(node, cst.NamedExpr) else node.name
            if target is not None:
                names |= {n.value for n in walk(target) if isinstance(n, cst.Name)}
    return names


def _between(anatomy: Anatomy, node: cst.CSTNode, top: cst.CSTNode) -> list[cst.CSTNode]:
    chain = []
    for ancestor in anatomy.ancestors(node):
        if ancestor is top:
            break
        chain.append(ancestor)
    return chain
