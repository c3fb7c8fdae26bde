"""DDP104: a checkpoint or file write that every rank runs."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.emit import RANK_ZERO, expression
from ddpify.lint import CheckContext
from ddpify.rule import Example, Rule

WRITES = {"checkpoint write", "file write"}


class UnguardedWrite(Rule):
    """
    ## What it does
    In a distributed script, finds `torch.save`, `save_pretrained` and other file writes
    that run on every rank: not under an `if` on the rank, and not in a function whose every
    call is under one. Per-rank files (a name that mentions the rank) are left alone.

    ## Why is this bad?
    N processes write the same file at the same time: at best wasted work, at worst a
    corrupt checkpoint.
    """

    code = "DDP104"
    name = "unguarded-write"
    message = "file written by every rank: guard it with `if dist.get_rank() == 0:`"
    requires = ("init_process_group",)
    fix_safety = """
        Safe when the statement runs no collective (DDP106 reports those); the fix guards
        it with the global rank.
    """
    valid = (
        """
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")


        def save(model):
            torch.save(model.module.state_dict(), "model.pt")


        if dist.get_rank() == 0:
            save(model)
        torch.save(shard, f"shard_{dist.get_rank()}.pt")
        dist.destroy_process_group()
        """,
    )
    invalid = (
        Example(
            """
            import torch
            import torch.distributed as dist

            dist.init_process_group("gloo")
            torch.save(model.module.state_dict(), "model.pt")
            dist.destroy_process_group()
            """,
            """
            import torch
            import torch.distributed as dist

            dist.init_process_group("gloo")
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), "model.pt")
            dist.destroy_process_group()
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        if not anatomy.initialises_process_group:
            return
        init = anatomy.initialises_process_group[0]
        code = cst.Module([]).code_for_node
        for node in anatomy.simple_statements:
            if anatomy.side_effect(node) not in WRITES or "rank" in code(node):
                continue
            function = anatomy.function_of(node)
            if function is None and not anatomy.precedes(init, node):
                continue
            if function is not None and not anatomy.call_sites(function):
                continue  # never called here: cannot tell on which ranks it runs
            if anatomy.rank_guard(node) is not None:
                continue
            ctx.report(node, fix=partial(_fix, statement=node))


def _fix(ctx: CheckContext, statement: cst.CSTNode) -> None:
    ctx.add_import("torch.distributed", asname="dist")
    ctx.plan.guard(statement, expression(RANK_ZERO))
