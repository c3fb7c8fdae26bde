"""DDP102: in a distributed script, a training DataLoader without a DistributedSampler."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import DISTRIBUTED_TEXT, SAMPLER_ARGUMENTS
from ddpify.analysis.loaders import Loader
from ddpify.analysis.tree import call_arg, walk
from ddpify.fixes import shard_loader, shard_problem
from ddpify.rule import CheckContext, CheckRule, Example


class LoaderWithoutSampler(CheckRule):
    """
    ## What it does
    In a script that sets up a process group or wraps a model in DDP, finds the
    DataLoader that feeds the backward pass when it has no `sampler=` or `batch_sampler=`
    (with or without `shuffle=True`), also none in the `**kwargs` dict it is given. Loaders
    only evaluated on are left alone, and so are loaders given a `**kwargs` that cannot be
    followed, and loaders over an IterableDataset (it takes no sampler: it shards itself).

    ## Why is this bad?
    Every process iterates the whole dataset in the same order: N GPUs train on the same
    batches, and an epoch takes as long as on one GPU.
    """

    code = "DDP102"
    name = "loader-without-sampler"
    message = "training DataLoader without DistributedSampler: every rank trains on the same data"
    selection = (
        "every process trains on the whole dataset: N times the work for the gradient "
        "of one process, with no error."
    )
    requires = ("DataLoader", "backward", DISTRIBUTED_TEXT)
    fix_safety = """
        Safe: `sampler=DistributedSampler(dataset, shuffle=...)` takes over the loader's
        `shuffle`. The epoch loop then needs `set_epoch` (DDP101 fixes that next). A
        `shuffle` set in a `**kwargs` dict is left to a human: no fix.
    """
    valid = (
        # Sharded by hand already: a DistributedSampler on top would leave each rank 1/N of it.
        """
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader, Subset

        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        shard = Subset(dataset, range(rank, len(dataset), world))
        loader = DataLoader(shard, batch_size=8, shuffle=True)
        model = DDP(model)
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        dist.destroy_process_group()
        """,
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
        # pytorch/examples' mnist: the sampler in the loader's kwargs dict.
        """
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler

        model = DDP(model)
        train_kwargs = {"batch_size": 64, "sampler": DistributedSampler(dataset)}
        if use_cuda:
            train_kwargs.update({"num_workers": 1, "pin_memory": True})
        loader = DataLoader(dataset, **train_kwargs)
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        """,
        # Kwargs from the caller: they may hold a sampler.
        """
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader

        def train(model, dataset, loader_kwargs):
            model = DDP(model)
            for x, y in DataLoader(dataset, **loader_kwargs):
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
        """,
        # An IterableDataset that shards its stream by rank takes no sampler.
        """
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader, IterableDataset

        class TokenStream(IterableDataset):
            def __iter__(self):
                yield from shard(dist.get_rank())

        class ShuffledTokenStream(TokenStream):
            pass

        model = DDP(model)
        stream = ShuffledTokenStream()
        for x, y in DataLoader(stream, batch_size=8):
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
        # The DistributedSampler the script already imports is reused.
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader
            from torch.utils.data.distributed import DistributedSampler as Sharded

            model = DDP(model)
            loader = DataLoader(train_set, shuffle=True)
            val_loader = DataLoader(val_set, sampler=Sharded(val_set, shuffle=False))
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """,
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader
            from torch.utils.data.distributed import DistributedSampler as Sharded

            model = DDP(model)
            loader = DataLoader(train_set, sampler=Sharded(train_set, shuffle=True))
            val_loader = DataLoader(val_set, sampler=Sharded(val_set, shuffle=False))
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """,
        ),
        # A kwargs dict without a sampler: the sampler goes before it.
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader

            model = DDP(model)
            kwargs = {"batch_size": 64}
            kwargs["num_workers"] = 2
            loader = DataLoader(data, **kwargs)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """,
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader, DistributedSampler

            model = DDP(model)
            kwargs = {"batch_size": 64}
            kwargs["num_workers"] = 2
            loader = DataLoader(data, sampler=DistributedSampler(data, shuffle=False), **kwargs)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """,
        ),
        # `shuffle` in the kwargs dict: no fix (the dict may serve other loaders).
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.utils.data import DataLoader

            model = DDP(model)
            train_kwargs = dict(batch_size=64, shuffle=True)
            loader = DataLoader(dataset, **train_kwargs)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        if not anatomy.distributed.is_distributed:
            return
        seen: set[int] = set()
        for loop in anatomy.script.train_loops:
            loader = loop.loader
            if loader is None or id(loader) in seen:
                continue
            seen.add(id(loader))
            samplers = [anatomy.loaders.argument(loader.call, key) for key in SAMPLER_ARGUMENTS]
            # Given one, or maybe given one in a `**kwargs` that cannot be followed.
            if any(passed is None or passed for passed in samplers):
                continue
            dataset = call_arg(loader.call, 0, "dataset")
            scope = anatomy.function_of(loader.call)
            if dataset is not None and anatomy.loaders.is_iterable_dataset(dataset.value, scope):
                continue  # it takes no sampler: the dataset shards itself, or should
            if dataset is not None and _sharded_by_rank(anatomy, dataset.value, scope):
                continue  # `Subset(full, range(rank, n, world_size))`: sharded already
            problem = shard_problem(anatomy, loader)
            ctx.report(loader.call, fix=partial(_fix, loader=loader) if problem is None else None)


def _sharded_by_rank(
    anatomy: Anatomy, dataset: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int = 0
) -> bool:
    """The dataset is built from the rank (`Subset(ds, range(rank, n, world))`, `ds[rank::n]`,
    `ds.shard(num_shards=n, index=rank)`): each rank has its own part already."""
    for node in walk(dataset):
        if isinstance(node, cst.Name | cst.Attribute | cst.Call) and anatomy.ranks.rank_kind(node):
            return True
        if isinstance(node, cst.Name) and depth < 3:
            for value, where in anatomy.values.values_of(node.value, scope):
                if _sharded_by_rank(anatomy, value, where, depth + 1):
                    return True
    return False


def _fix(ctx: CheckContext, loader: Loader) -> None:
    shard_loader(ctx.plan, ctx.anatomy, loader, ctx)
