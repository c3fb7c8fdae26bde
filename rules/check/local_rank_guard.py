"""DDP107: the local rank used to pick the one process that writes."""

from __future__ import annotations

from functools import partial

from ddpify.analysis.api import LOCAL_RANK_ZERO_TEXT, TORCH_DISTRIBUTED_TEXT
from ddpify.analysis.ranks import Polarity
from ddpify.guards import fix_test, misnamed, writes_in_local_guards
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class LocalRankGuard(CheckRule):
    """
    ## What it does
    Finds `if local_rank == 0:` (also `local_rank in [-1, 0]`, `gpu_id`, `LOCAL_RANK`,
    `rank % ngpus_per_node == 0`, a flag set from one of these, ...) around checkpoint or
    file writes, made there or in the script's own functions it calls.

    ## Why is this bad?
    The local rank is the process's index on its own machine: on a run over several nodes
    every node has a local rank 0, and they all write the same file.
    """

    code = "DDP107"
    name = "local-rank-guard"
    message = "local rank picks the writer: on several nodes each node writes; use the global rank"
    default = False
    severity = Severity.WARNING
    selection = (
        "on one node the local rank is the global rank, and writing once per node is what "
        "PyTorch's own DDP tutorials and the imagenet example do on purpose (a snapshot on "
        "every node's disk for restarts); it races only on several nodes sharing a "
        "filesystem."
    )
    requires = (TORCH_DISTRIBUTED_TEXT, LOCAL_RANK_ZERO_TEXT)
    fix_safety = """
        Safe: on one node the global and the local rank 0 are the same process. The fix
        replaces a test written in place (not a flag or helper set elsewhere), with
        `not dist.is_initialized() or dist.get_rank() == 0` where the script can also run
        without a process group.
    """
    valid = (
        # A cache each node builds on its own disk, then every process reads.
        """
        import torch
        import torch.distributed as dist

        if local_rank == 0 and not os.path.exists(path):
            torch.save(features, path)
        dist.barrier()
        features = torch.load(path, map_location="cpu", weights_only=True)
        """,
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
        # Hugging Face's older examples: -1 is the run without a process group.
        Example(
            """
            import torch
            import torch.distributed as dist

            if args.local_rank in [-1, 0] and step % args.save_steps == 0:
                torch.save(state, "model.pt")
            """,
            """
            import torch
            import torch.distributed as dist

            if (not dist.is_initialized() or dist.get_rank() == 0) and step % args.save_steps == 0:
                torch.save(state, "model.pt")
            """,
        ),
        # pytorch/examples' imagenet: the first process of each node writes.
        Example(
            """
            import torch
            import torch.distributed as dist

            if args.rank % ngpus_per_node == 0:
                torch.save(state, "checkpoint.pth.tar")
            """,
            """
            import torch
            import torch.distributed as dist

            if dist.get_rank() == 0:
                torch.save(state, "checkpoint.pth.tar")
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        for _, test in writes_in_local_guards(ctx.anatomy):
            if misnamed(test):
                continue  # a global-named local rank is DDP116's (on by default)
            fix = None
            if test.direct and test.polarity is Polarity.ZERO:
                fix = partial(fix_test, test=test)
            ctx.report(test.node, fix=fix)
