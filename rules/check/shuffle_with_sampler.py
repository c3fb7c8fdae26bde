"""DDP103: `shuffle=True` together with `sampler=`, which DataLoader refuses."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.tree import is_name
from ddpify.fixes import without_keyword
from ddpify.rule import CheckContext, CheckRule, Example


class ShuffleWithSampler(CheckRule):
    """
    ## What it does
    Finds `DataLoader(..., sampler=..., shuffle=True)`, either of them also given through a
    `**kwargs` dict built in the script (`kwargs = {"shuffle": True}`, `kwargs.update(...)`,
    `kwargs["sampler"] = ...`).

    ## Why is this bad?
    `sampler` and `shuffle` are mutually exclusive: the loader raises `ValueError` when it
    is built. A `DistributedSampler` shuffles by itself (`shuffle=True` is its default).
    """

    code = "DDP103"
    name = "shuffle-with-sampler"
    message = "shuffle=True with sampler=: DataLoader raises; the sampler does the shuffling"
    # `shuffle=True`, `"shuffle": True`, `kwargs["shuffle"] = True`, `setdefault("shuffle", True)`
    selection = "the DataLoader raises ValueError when it is built."
    requires = ("DataLoader", r"shuffle[\"']?\s*(?:[=:,]|\]\s*=)\s*True", "sampler")
    fix_safety = """
        Safe: the loader could not be built before; `shuffle=True` is dropped. One set in a
        `**kwargs` dict is reported without a fix: the dict may serve other loaders.
    """
    valid = (
        """
        from torch.utils.data import DataLoader, DistributedSampler

        loader = DataLoader(dataset, sampler=DistributedSampler(dataset), shuffle=False)
        """,
        """
        from torch.utils.data import DataLoader, DistributedSampler

        kwargs = {"batch_size": 64, "shuffle": True}
        train_loader = DataLoader(dataset, **kwargs)
        val_loader = DataLoader(val_set, sampler=DistributedSampler(val_set), batch_size=64)
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
        # Through a kwargs dict: reported, not fixed (the dict may serve other loaders).
        Example(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            train_kwargs = {"batch_size": 64, "sampler": DistributedSampler(dataset)}
            if use_cuda:
                train_kwargs.update({"num_workers": 1, "shuffle": True})
            loader = DataLoader(dataset, **train_kwargs)
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for loader in anatomy.loaders.all:
            samplers = anatomy.loaders.argument(loader.call, "sampler")
            shuffles = anatomy.loaders.argument(loader.call, "shuffle")
            if not samplers or not shuffles:
                continue
            if all(is_name(sampler.value, "None") for sampler in samplers):
                continue
            # A dict's `shuffle` set to anything else on some path may be what wins.
            if not all(is_name(shuffle.value, "True") for shuffle in shuffles):
                continue
            for shuffle in shuffles:
                # Only the call's own `shuffle=True` is dropped: a `**kwargs` dict may serve
                # other loaders too.
                fixable = (
                    shuffle.direct
                    and isinstance(shuffle.where, cst.Arg)
                    and shuffle.where.keyword is not None
                )
                ctx.report(shuffle.where, fix=partial(_fix, call=loader.call) if fixable else None)


def _fix(ctx: CheckContext, call: cst.Call) -> None:
    ctx.plan.replace(call, lambda updated: without_keyword(updated, "shuffle"))
