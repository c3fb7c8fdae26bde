"""DDP114: nn.DataParallel, which DistributedDataParallel replaces."""

from __future__ import annotations

from ddpify.analysis.api import DATA_PARALLEL
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class DataParallelUsed(CheckRule):
    """
    ## What it does
    Finds `nn.DataParallel`.

    ## Why is this bad?
    DataParallel runs one process that scatters every batch from GPU 0 and gathers the
    outputs back: GPU 0 is the bottleneck, Python's GIL serialises the replicas, and it
    cannot span machines. PyTorch recommends DistributedDataParallel even on one machine;
    `ddpify script.py` converts the script.
    """

    code = "DDP114"
    name = "data-parallel"
    message = "nn.DataParallel: use DistributedDataParallel (`ddpify` converts the script)"
    default = False
    severity = Severity.NOTE
    selection = (
        "`nn.DataParallel` may be a deliberate single-process fallback; the "
        "conversion itself is `ddpify`'s job."
    )
    requires = ("DataParallel", r"(?<!Distributed)DataParallel")
    valid = (
        """
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
        """,
    )
    invalid = (
        Example(
            """
            from torch import nn

            model = nn.DataParallel(model)
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        for call in ctx.anatomy.calls:
            if ctx.anatomy.is_call_to(call, DATA_PARALLEL):
                ctx.report(call)
