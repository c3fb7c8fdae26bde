"""DDP106: a collective, or a forward pass through DDP, that only rank 0 runs."""

from __future__ import annotations

from ddpify.anatomy import (
    COLLECTIVE_TEXT,
    RANK_ZERO_TEXT,
    TORCH_DISTRIBUTED_TEXT,
    dotted,
)
from ddpify.lint import CheckContext
from ddpify.rule import Example, Rule


class CollectiveUnderRankGuard(Rule):
    """
    ## What it does
    Finds collectives (`barrier`, `all_reduce`, `broadcast`, `all_gather`, ...) and forward
    passes through a DDP-wrapped model that run on rank 0 only: inside `if rank == 0:`, or in
    a function that is only ever called there.

    ## Why is this bad?
    A collective completes when every rank joins it. Rank 0 waits for ranks that never come:
    the job hangs until the timeout kills it. A forward through DDP can start one.
    """

    code = "DDP106"
    name = "collective-under-rank-guard"
    message = "collective on rank 0 only: the other ranks never join it and the job hangs"
    requires = (
        TORCH_DISTRIBUTED_TEXT,
        COLLECTIVE_TEXT + "|DistributedDataParallel",
        RANK_ZERO_TEXT,
    )
    valid = (
        """
        import torch.distributed as dist

        dist.barrier()
        if dist.get_rank() == 0:
            print("saved")
        """,
    )
    invalid = (
        Example(
            """
            import torch.distributed as dist

            if dist.get_rank() == 0:
                dist.barrier()
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        wrapped = set(anatomy.ddp_wraps)
        for call in anatomy.calls:
            forward = dotted(call.func) in wrapped
            if not (forward or anatomy.may_be_collective(call)):
                continue
            # The guard first: resolving names is the costliest question to ask.
            if anatomy.rank_guard(call) is None:
                continue
            if not (forward or anatomy.is_collective(call)):
                continue
            if forward:
                ctx.report(call, "forward through the DDP model on rank 0 only: it can hang")
            else:
                ctx.report(call)
