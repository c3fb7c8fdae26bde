"""DDP116: a name that says "global rank" holding the local rank, picking the writer."""

from __future__ import annotations

from functools import partial

from ddpify.analysis.api import LOCAL_RANK_ZERO_TEXT, TORCH_DISTRIBUTED_TEXT
from ddpify.analysis.ranks import Polarity
from ddpify.guards import fix_test, misnamed, writes_in_local_guards
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class MisnamedRank(CheckRule):
    """
    ## What it does
    Finds a rank-0 test that guards file writes on a name that says "global rank"
    (`global_rank`, `rank`, `world_rank`) but is read from the local rank
    (`self.global_rank = int(os.environ["LOCAL_RANK"])`).

    ## Why is this bad?
    The name says one process in the job writes; the value makes it one process per node.
    On several nodes every node's first process writes the same checkpoint: the script does
    not do what its author wrote. Read `RANK` (or ask `dist.get_rank()`).
    """

    code = "DDP116"
    name = "misnamed-rank"
    message = (
        "a global rank read from LOCAL_RANK picks the writer: on several nodes each node "
        "writes; use the global rank"
    )
    severity = Severity.WARNING
    selection = (
        "the name says one writer in the job and the value gives one per node: not a "
        "choice (that is DDP107, opt-in) but a slip."
    )
    requires = (TORCH_DISTRIBUTED_TEXT, LOCAL_RANK_ZERO_TEXT)
    fix_safety = """
        Safe: `dist.get_rank() == 0` is what the name promised; on one node it picks the same
        process.
    """
    valid = (
        # Named as what it is: a writer per node on purpose (DDP107's, opt-in).
        """
        import os

        import torch
        import torch.distributed as dist

        local_rank = int(os.environ["LOCAL_RANK"])
        if local_rank == 0:
            torch.save(state, "model.pt")
        """,
        # A global rank read from RANK.
        """
        import os

        import torch
        import torch.distributed as dist

        global_rank = int(os.environ["RANK"])
        if global_rank == 0:
            torch.save(state, "model.pt")
        """,
    )
    invalid = (
        Example(
            """
            import os

            import torch
            import torch.distributed as dist


            class Trainer:
                def __init__(self):
                    self.global_rank = int(os.environ["LOCAL_RANK"])

                def save(self, state):
                    if self.global_rank == 0:
                        torch.save(state, "model.pt")
            """,
            """
            import os

            import torch
            import torch.distributed as dist


            class Trainer:
                def __init__(self):
                    self.global_rank = int(os.environ["LOCAL_RANK"])

                def save(self, state):
                    if dist.get_rank() == 0:
                        torch.save(state, "model.pt")
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        for _, test in writes_in_local_guards(ctx.anatomy):
            if not misnamed(test):
                continue
            fix = None
            if test.direct and test.polarity is Polarity.ZERO:
                fix = partial(fix_test, test=test)
            ctx.report(test.node, fix=fix)
