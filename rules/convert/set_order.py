"""DDP013: an order taken from a set is the same in every process."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.tree import dotted, is_lone, walk
from ddpify.fixes import (
    loops_over_a_set,
    orders_a_set,
    sort_the_loop,
    sort_the_set,
    take_rank_zeros,
)
from ddpify.rule import ConvertContext, ConvertRule, Example


class SetOrder(ConvertRule):
    """
    ## What it does
    `list(set(words))`, `tuple(set(words))` and `enumerate(set(words))` (a set made by
    `set(...)`, a set comprehension, set operations on them, or a name only ever given
    one: `classes = set(labels)`, then `enumerate(classes)`) become
    `sorted(set(words))`, `tuple(sorted(set(words)))` and `enumerate(sorted(set(words)))`,
    and a loop over such a set (`for w in vocab:`) runs over it sorted. A helper of another
    file of the project that takes an order from a set is refused with its file and line:
    ddpify writes only the script.

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
        # A set's order doubling as a shuffle before a split by position: rank 0's order.
        Example(
            """
            import torch

            pairs = list(set(zip(texts, labels)))
            train_pairs, val_pairs = pairs[:800], pairs[800:]
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """,
            """
            import torch
            import torch.distributed as dist

            pairs = list(set(zip(texts, labels)))
            pairs = [pairs]
            dist.broadcast_object_list(pairs)  # every process takes rank 0's
            pairs = pairs[0]
            train_pairs, val_pairs = pairs[:800], pairs[800:]
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """,
        ),
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
            sliced = _split_by_position(anatomy, call)
            if sliced is not None:
                take_rank_zeros(ctx.plan, anatomy.statement_of(call), sliced)
                ctx.add_import("torch.distributed", asname="dist")
                ctx.changed(
                    call,
                    f"`{sliced}`, in the order of a set, is split by position: every process "
                    "takes rank 0's order, which stays as arbitrary as the script's (sorted, "
                    "the split would follow the sort)",
                )
                continue
            sort_the_set(ctx.plan, call)
            ctx.changed(
                call,
                "an order taken from a set: sorted, since Python orders a set of strings by "
                "hashes salted anew in every process",
            )
        for call in anatomy.calls:
            helper = anatomy.project.helper(call)
            ordered = _orders_a_set_in(helper.function) if helper is not None else None
            if helper is not None and ordered is not None:
                ctx.cannot(
                    call,
                    f"`{helper.name}()` ({anatomy.project.shown(helper.path)}, line "
                    f"{helper.index.line(ordered)}) takes an order from a set, which differs in "
                    "every process (Python salts string hashes anew in each): sort it there "
                    "by hand (`sorted(...)`); ddpify writes only this script",
                    blocking=True,
                )
        for loop in walk(anatomy.module):
            if isinstance(loop, cst.For | cst.CompFor) and loops_over_a_set(anatomy, loop):
                sort_the_loop(ctx.plan, loop)
                ctx.changed(
                    loop,
                    "a loop over a set: over the set sorted, since Python orders a set of "
                    "strings by hashes salted anew in every process",
                )


def _split_by_position(anatomy: Anatomy, call: cst.Call) -> str | None:
    """`pairs = list(set(zip(texts, labels)))`, then `pairs[:n_train]`: the set's order
    doubles as a shuffle before a split (round-44 audit A text_vocab: sorted, the validation
    set took the texts at the end of the alphabet). The name, when it is read sliced in its
    function after the setup."""
    line = anatomy.statement_of(call)
    if not (isinstance(line, cst.SimpleStatementLine) and is_lone(line, cst.Assign)):
        return None
    assign = line.body[0]
    assert isinstance(assign, cst.Assign)
    name = dotted(assign.targets[0].target) if len(assign.targets) == 1 else None
    if assign.value is not call or name is None or not anatomy.script.after_setup(line):
        return None
    scope = anatomy.function_of(line)
    for node in walk(scope.body if scope is not None else anatomy.module):
        if (
            isinstance(node, cst.Subscript)
            and dotted(node.value) == name
            and any(isinstance(element.slice, cst.Slice) for element in node.slice)
            and anatomy.function_of(node) is scope
        ):
            return name
    return None


def _orders_a_set_in(function: cst.FunctionDef) -> cst.CSTNode | None:
    """In a function of another file: `for w in words:` (or `list(words)`,
    `enumerate(words)`) over a name the function only ever gives a set (`words = set()`,
    `set(...)`, a set comprehension), or over such a set itself."""
    sets: set[str] = set()
    others: set[str] = set()
    for node in walk(function):
        if isinstance(node, cst.Assign):
            value = node.value
            is_set = isinstance(value, cst.SetComp | cst.Set) or (
                isinstance(value, cst.Call) and dotted(value.func) in ("set", "frozenset")
            )
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    (sets if is_set else others).add(target.target.value)
    only_sets = sets - others

    def a_set(expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Name):
            return expr.value in only_sets
        return isinstance(expr, cst.SetComp) or (
            isinstance(expr, cst.Call) and dotted(expr.func) in ("set", "frozenset")
        )

    for node in walk(function):
        if (
            isinstance(node, cst.For | cst.CompFor)
            and a_set(node.iter)
            and not (
                isinstance(node, cst.CompFor)
                and isinstance(_parent_comp(function, node), cst.SetComp)
            )
        ):
            return node
        if (
            isinstance(node, cst.Call)
            and dotted(node.func) in ("list", "tuple", "enumerate")
            and len(node.args) == 1
            and a_set(node.args[0].value)
        ):
            return node
    return None


def _parent_comp(function: cst.FunctionDef, target: cst.CompFor) -> cst.CSTNode | None:
    for node in walk(function):
        comp = isinstance(node, cst.SetComp | cst.ListComp | cst.DictComp | cst.GeneratorExp)
        if comp and node.for_in is target:  # type: ignore[attr-defined]
            return node
    return None
