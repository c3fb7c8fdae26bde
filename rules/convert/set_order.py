"""DDP013: an order taken from a set is the same in every process."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.tree import is_name
from ddpify.edits import EditPlan
from ddpify.rule import ConvertContext, ConvertRule, Example

# Calls that keep the order of what they are given: a set's order becomes theirs.
ORDERING = {"list", "tuple", "enumerate"}
SET_OPERATORS = (cst.Subtract, cst.BitOr, cst.BitAnd, cst.BitXor)


class SetOrder(ConvertRule):
    """
    ## What it does
    `list(set(words))`, `tuple(set(words))` and `enumerate(set(words))` (a set made by
    `set(...)`, a set comprehension, set operations on them, or a name only ever given
    one: `classes = set(labels)`, then `enumerate(classes)`) become
    `sorted(set(words))`, `tuple(sorted(set(words)))` and `enumerate(sorted(set(words)))`.

    ## Why is this bad?
    A set of strings is ordered by their hashes, and Python salts string hashes anew in
    every process (`PYTHONHASHSEED`). Under torchrun each process would number the same
    vocabulary differently (`word_dict = {w: i for i, w in enumerate(set(words))}`, the
    nlp-tutorial idiom): the processes feed one model different ids for the same words and
    average gradients that do not belong together, with no error. In the single-GPU script
    the order was arbitrary already; sorted, it is one order every process agrees on.
    """

    code = "DDP013"
    step = 13
    name = "set-order"
    message = "orders taken from a set are sorted, the same in every process"
    fix_safety = """
        Safe for sets of strings, numbers and tuples of them. A set of objects that cannot
        be compared (`sorted` raises TypeError) is an error at start-up, not a silent one.
    """
    examples = (
        Example(
            """
            import torch

            words = " ".join(sentences).split()
            vocab = list(set(words))
            word_dict = {w: i for i, w in enumerate(set(words))}
            classes = set(labels)
            class_ids = {c: i for i, c in enumerate(classes)}
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """,
            """
            import torch

            words = " ".join(sentences).split()
            vocab = sorted(set(words))
            word_dict = {w: i for i, w in enumerate(sorted(set(words)))}
            classes = set(labels)
            class_ids = {c: i for i, c in enumerate(sorted(classes))}
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """,
        ),
        # Already ordered, or not an order: left as it is.
        Example(
            """
            import torch

            vocab = sorted(set(words))
            chars = sorted(list(set(text)))
            count = len(set(words))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """,
            None,
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        for call in anatomy.calls:
            if not orders_a_set(anatomy, call):
                continue
            sort_the_set(ctx.plan, call)
            ctx.changed(
                call,
                "an order taken from a set: sorted, since Python orders a set of strings by "
                "hashes salted anew in every process",
            )


def orders_a_set(anatomy: Anatomy, call: cst.Call) -> bool:
    """`list(set(...))`, `tuple({...})`, `enumerate(set(a) - set(b))`, one argument."""
    if not (isinstance(call.func, cst.Name) and call.func.value in ORDERING):
        return False
    if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        return False
    if anatomy.qualified_names(call.func) - {f"builtins.{call.func.value}"}:
        return False  # the script's own `list`
    holder = anatomy.parent(anatomy.parent(call) or call)
    if isinstance(holder, cst.Call) and is_name(holder.func, "sorted"):
        return False  # `sorted(list(set(text)))`: ordered already
    return _is_set(anatomy, call.args[0].value, anatomy.function_of(call))


def _is_set(
    anatomy: Anatomy, expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int = 0
) -> bool:
    """A set display or comprehension, `set(...)`, set operations on one, or a name only
    ever given one (`vocab = set(words)`, then `enumerate(vocab)`: round-11 audit p04)."""
    if isinstance(expr, cst.SetComp | cst.Set):
        return True
    if isinstance(expr, cst.Call):
        return is_name(expr.func, "set") or is_name(expr.func, "frozenset")
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, SET_OPERATORS):
        return _is_set(anatomy, expr.left, scope, depth) or _is_set(
            anatomy, expr.right, scope, depth
        )
    if isinstance(expr, cst.Name) and depth < 3:
        values = anatomy.values.values_of(expr.value, scope)
        return bool(values) and all(
            _is_set(anatomy, value, where, depth + 1) for value, where in values
        )
    return False


def sort_the_set(plan: EditPlan, call: cst.Call) -> None:
    """`list(s)` becomes `sorted(s)`; `enumerate(s)`, `tuple(s)` get `sorted(s)` inside."""
    if is_name(call.func, "list"):
        plan.replace(call, lambda node: node.with_changes(func=cst.Name("sorted")))
    else:
        plan.replace(call.args[0].value, _sorted)


def _sorted(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.BaseExpression)
    return cst.Call(cst.Name("sorted"), [cst.Arg(node)])
