"""DDP107: the local rank used to pick the one process that writes."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.anatomy import LOCAL_RANK_ZERO_TEXT, TORCH_DISTRIBUTED_TEXT
from ddpify.emit import RANK_ZERO, expression
from ddpify.lint import CheckContext
from ddpify.rule import Example, Rule


class LocalRankGuard(Rule):
    """
    ## What it does
    Finds `if local_rank == 0:` (also `gpu_id`, `LOCAL_RANK`, ...) around checkpoint or file
    writes, made there or in the script's own functions it calls.

    ## Why is this bad?
    The local rank is the process's index on its own machine: on a run over several nodes
    every node has a local rank 0, and they all write the same file.
    """

    code = "DDP107"
    name = "local-rank-guard"
    message = "local rank picks the writer: on several nodes each node writes; use the global rank"
    requires = (TORCH_DISTRIBUTED_TEXT, LOCAL_RANK_ZERO_TEXT)
    fix_safety = "Safe: on one node the global and the local rank 0 are the same process."
    valid = (
        """
        import torch
        import torch.distributed as dist

        if dist.get_rank() == 0:
            torch.save(state, "model.pt")
        """,
    )
    invalid = (
        Example(
            """
            import torch
            import torch.distributed as dist

            if local_rank == 0 and epoch % 5 == 0:
                torch.save(state, "model.pt")
            """,
            """
            import torch
            import torch.distributed as dist

            if dist.get_rank() == 0 and epoch % 5 == 0:
                torch.save(state, "model.pt")
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for node in anatomy.ifs:
            test = anatomy.rank_test(node.test)
            if test is None or test[0] != "local":
                continue
            if anatomy.writes_files(node.body):
                comparison = test[1]
                ctx.report(comparison, fix=partial(_fix, comparison=comparison))


def _fix(ctx: CheckContext, comparison: cst.Comparison) -> None:
    ctx.add_import("torch.distributed", asname="dist")
    ctx.plan.replace(comparison, lambda _: expression(RANK_ZERO))
