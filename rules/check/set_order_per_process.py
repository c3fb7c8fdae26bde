"""DDP121: an order taken from a set, in distributed code: every process has its own."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.fixes import orders_a_set, sort_the_set
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class SetOrderPerProcess(CheckRule):
    """
    ## What it does
    Finds `enumerate(set(words))`, `list(set(words))` and `tuple(...)` of a set (made by
    `set(...)`, a comprehension, set operations, or a name only ever given one) in a script
    that runs distributed.

    ## Why is this bad?
    A set of strings is ordered by their hashes, and Python salts string hashes anew in
    every process (`PYTHONHASHSEED`): each process numbers the same vocabulary its own way
    (`word_dict = {w: i for i, w in enumerate(set(words))}`), feeds the one model
    different ids for the same words, and DDP averages gradients that do not belong
    together, with no error. Sort the set: one order every process agrees on.
    """

    code = "DDP121"
    name = "set-order-per-process"
    message = "an order taken from a set differs in every process (string hashes): sort it"
    severity = Severity.WARNING
    selection = (
        "a set of numbers has one order everywhere, but a set of strings, the common case "
        "(vocabularies, class names), has one per process; sorting costs nothing."
    )
    requires = ("init_process_group|DistributedDataParallel", "set")
    fix_safety = "Safe for strings, numbers and tuples of them; the order was arbitrary."
    valid = (
        """
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(net)
        vocab = sorted(set(words))
        word_dict = {w: i for i, w in enumerate(vocab)}
        """,
    )
    invalid = (
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(net)
            classes = set(labels)
            class_ids = {c: i for i, c in enumerate(classes)}
            """,
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(net)
            classes = set(labels)
            class_ids = {c: i for i, c in enumerate(sorted(classes))}
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        if not (anatomy.distributed.initialises_process_group or anatomy.distributed.ddp_wraps):
            return
        for call in anatomy.calls:
            if orders_a_set(anatomy, call):
                ctx.report(call, fix=partial(_fix, call=call))


def _fix(ctx: CheckContext, call: cst.Call) -> None:
    sort_the_set(ctx.plan, call)
