"""DDP112: BatchNorm in a DDP model with no SyncBatchNorm conversion."""

from __future__ import annotations

from ddpify.rule import CheckContext, CheckRule, Example, Severity

BATCHNORM = {"torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d"}


class BatchNormWithoutSync(CheckRule):
    """
    ## What it does
    Finds a DDP wrap in a script that builds `nn.BatchNorm*d` layers and never calls
    `nn.SyncBatchNorm.convert_sync_batchnorm`.

    ## Why is this bad?
    Each process normalises with the statistics of its own slice of the batch, and the
    running statistics of the ranks drift apart: with small per-GPU batches, training and
    evaluation differ from the single-GPU run. Convert the model before wrapping it (CUDA
    only), or keep per-rank statistics on purpose and silence this with `# noqa: DDP112`.
    """

    code = "DDP112"
    name = "batchnorm-without-sync"
    message = "BatchNorm in a DDP model: statistics are per process; consider SyncBatchNorm"
    default = False
    severity = Severity.NOTE
    selection = (
        "per-process BatchNorm statistics are a choice many correct DDP scripts make "
        "on purpose (large per-GPU batches, speed)."
    )
    requires = ("DistributedDataParallel", "BatchNorm")
    valid = (
        """
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        model = DDP(model)
        """,
    )
    invalid = (
        Example(
            """
            from torch import nn
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
            model = DDP(model)
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        if not anatomy.distributed.ddp_wraps:
            return
        batchnorm = any(anatomy.is_call_to(c, BATCHNORM) for c in anatomy.calls)
        converted = any(
            anatomy.is_call_to(c, {"torch.nn.SyncBatchNorm.convert_sync_batchnorm"})
            for c in anatomy.calls
        )
        if batchnorm and not converted:
            ctx.report(next(iter(anatomy.distributed.ddp_wraps.values())))
