"""DDP102: in a distributed script, a training DataLoader without a DistributedSampler."""

from __future__ import annotations

from functools import partial

from ddpify.anatomy import DISTRIBUTED_TEXT, Loader, call_arg
from ddpify.fixes import shard_loader, shard_problem
from ddpify.lint import CheckContext
from ddpify.rule import Example, Rule


class LoaderWithoutSampler(Rule):
    """
    ## What it does
    In a script that sets up a process group or wraps a model in DDP, finds the
    DataLoader that feeds the backward pass when it has no `sampler=` or `batch_sampler=`
    (with or without `shuffle=True`). Loaders only evaluated on are left alone.

    ## Why is this bad?
    Every process iterates the whole dataset in the same order: N GPUs train on the same
    batches, and an epoch takes as long as on one GPU.
    """

    code = "DDP102"
    name = "loader-without-sampler"
    message = "training DataLoader without DistributedSampler: every rank trains on the same data"
    requires = ("DataLoader", "backward", DISTRIBUTED_TEXT)
    fix_safety = """
        Safe: `sampler=DistributedSampler(dataset, shuffle=...)` takes over the loader's
        `shuffle`. The epoch loop then needs `set_epoch` (DDP101 fixes that next).
    """
    valid = (
        """
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader, DistributedSampler

        model = DDP(model)
        loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
        val_loader = DataLoader(val_set, batch_size=64)
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        """,
    )
    invalid = (
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader

            model = DDP(model)
            loader = DataLoader(dataset, shuffle=True)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """,
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader, DistributedSampler

            model = DDP(model)
            loader = DataLoader(dataset, sampler=DistributedSampler(dataset, shuffle=True))
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        if not anatomy.is_distributed:
            return
        seen: set[int] = set()
        for loop in anatomy.train_loops:
            loader = loop.loader
            if loader is None or id(loader) in seen:
                continue
            seen.add(id(loader))
            if call_arg(loader.call, None, "sampler") or call_arg(
                loader.call, None, "batch_sampler"
            ):
                continue
            fix = partial(_fix, loader=loader) if shard_problem(loader) is None else None
            ctx.report(loader.call, fix=fix)


def _fix(ctx: CheckContext, loader: Loader) -> None:
    shard_loader(ctx.plan, ctx.anatomy, loader, ctx)
