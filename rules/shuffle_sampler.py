"""DDP103: `shuffle=True` together with `sampler=`, which DataLoader refuses."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.anatomy import call_arg
from ddpify.fixes import without_keyword
from ddpify.lint import CheckContext
from ddpify.rule import Example, Rule
from ddpify.tree import is_name


class ShuffleWithSampler(Rule):
    """
    ## What it does
    Finds `DataLoader(..., sampler=..., shuffle=True)`.

    ## Why is this bad?
    `sampler` and `shuffle` are mutually exclusive: the loader raises `ValueError` when it
    is built. A `DistributedSampler` shuffles by itself (`shuffle=True` is its default).
    """

    code = "DDP103"
    name = "shuffle-with-sampler"
    message = "shuffle=True with sampler=: DataLoader raises; the sampler does the shuffling"
    requires = ("DataLoader", r"shuffle\s*=\s*True", "sampler")
    fix_safety = "Safe: the loader could not be built before; `shuffle=True` is dropped."
    valid = (
        """
        from torch.utils.data import DataLoader, DistributedSampler

        loader = DataLoader(dataset, sampler=DistributedSampler(dataset), shuffle=False)
        """,
    )
    invalid = (
        Example(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            loader = DataLoader(dataset, sampler=DistributedSampler(dataset), shuffle=True)
            """,
            """
            from torch.utils.data import DataLoader, DistributedSampler

            loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        for loader in ctx.anatomy.loaders:
            shuffle = call_arg(loader.call, None, "shuffle")
            sampler = call_arg(loader.call, None, "sampler")
            if shuffle is None or sampler is None or not is_name(shuffle.value, "True"):
                continue
            ctx.report(shuffle, fix=partial(_fix, call=loader.call))


def _fix(ctx: CheckContext, call: cst.Call) -> None:
    ctx.plan.replace(call, lambda updated: without_keyword(updated, "shuffle"))
