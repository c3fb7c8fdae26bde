"""DDP108: torch.load without map_location in a distributed script."""

from __future__ import annotations

from ddpify.analysis.api import DISTRIBUTED_TEXT
from ddpify.analysis.tree import call_arg
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class LoadWithoutMapLocation(CheckRule):
    """
    ## What it does
    In a distributed script, finds `torch.load` calls without `map_location`.

    ## Why is this bad?
    Tensors load onto the device they were saved from: a checkpoint written by rank 0 from
    `cuda:0` lands on GPU 0 in every process, which runs out of memory while the other GPUs
    hold nothing. Pass `map_location` the process's device (or `"cpu"`).
    """

    code = "DDP108"
    name = "load-without-map-location"
    message = "torch.load without map_location: every rank loads onto the GPU it was saved from"
    default = False
    severity = Severity.WARNING
    selection = (
        "only checkpoints saved from a GPU move, and many scripts load weights saved "
        "on the CPU or map them later; flag it when resumes from GPU checkpoints "
        "matter."
    )
    requires = (DISTRIBUTED_TEXT, "load")
    valid = (
        """
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        state = torch.load("model.pt", map_location=device)
        dist.destroy_process_group()
        """,
    )
    invalid = (
        Example(
            """
            import torch
            import torch.distributed as dist

            dist.init_process_group("gloo")
            state = torch.load("model.pt")
            dist.destroy_process_group()
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        if not anatomy.distributed.is_distributed:
            return
        for call in anatomy.distributed.torch_load_calls:
            if call_arg(call, 1, "map_location") is None:
                ctx.report(call)
