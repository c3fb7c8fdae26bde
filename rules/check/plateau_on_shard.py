"""DDP125: ReduceLROnPlateau stepped on a value summed over this process's shard only."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import COLLECTIVES, SAMPLER_ARGUMENTS
from ddpify.analysis.tree import assigned, dotted, is_attribute, walk
from ddpify.rule import CheckContext, CheckRule, Example

PLATEAU = {
    "torch.optim.lr_scheduler.ReduceLROnPlateau",
    "torch.optim.lr_scheduler.lr_scheduler.ReduceLROnPlateau",
}
DEPTH = 3
# The collectives that could make a value global (not a barrier).
GATHERING = {
    f"torch.distributed.{name}"
    for name in COLLECTIVES - {"barrier", "monitored_barrier", "scatter", "scatter_object_list"}
}


class PlateauOnShard(CheckRule):
    """
    ## What it does
    In a distributed script, finds `scheduler.step(metric)` of a `ReduceLROnPlateau` where
    `metric` is computed in a loop on a DataLoader with a sampler (a DistributedSampler: this
    process's shard) in the same function (a batch's loss, or a sum over the epoch), and
    that function makes no collective call (`dist.all_reduce`, ...) that could have made it
    global.

    ## Why is this bad?
    Each process sees its own shard's loss: the processes cut the learning rate at different
    epochs, and from then on step their replicas with different learning rates: the models
    drift apart, with no error. All-reduce the metric (sum and count) before the step, so
    that every process decides on the same, global, value.
    """

    code = "DDP125"
    name = "plateau-on-shard"
    message = (
        "ReduceLROnPlateau stepped on this process's own shard: the ranks cut the learning "
        "rate at different epochs; all-reduce the metric first"
    )
    requires = ("ReduceLROnPlateau", "sampler")
    selection = "the replicas drift apart once one rank cuts its learning rate alone."
    valid = (
        """
        import torch.distributed as dist
        from torch.optim.lr_scheduler import ReduceLROnPlateau
        from torch.utils.data import DataLoader, DistributedSampler

        loader = DataLoader(ds, sampler=DistributedSampler(ds))
        scheduler = ReduceLROnPlateau(optimizer)
        for epoch in range(epochs):
            total = torch.zeros(2)
            for x, y in loader:
                loss = step(x, y)
                total += torch.tensor([loss.item() * len(x), len(x)])
            dist.all_reduce(total)
            scheduler.step(total[0] / total[1])
        """,
        # Validation over the whole set on every rank: the same value everywhere.
        """
        import torch.distributed as dist
        from torch.optim.lr_scheduler import ReduceLROnPlateau
        from torch.utils.data import DataLoader, DistributedSampler

        dist.init_process_group("gloo")
        val_loader = DataLoader(val_ds, batch_size=64)
        scheduler = ReduceLROnPlateau(optimizer)
        for epoch in range(epochs):
            val_loss = 0.0
            for x, y in val_loader:
                val_loss += criterion(model(x), y).item()
            scheduler.step(val_loss)
        """,
    )
    invalid = (
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.optim.lr_scheduler import ReduceLROnPlateau
            from torch.utils.data import DataLoader, DistributedSampler

            model = DDP(model)
            sampler = DistributedSampler(ds)
            train_loader = DataLoader(ds, batch_size=32, sampler=sampler)
            scheduler = ReduceLROnPlateau(optimizer, patience=2)
            for epoch in range(epochs):
                sampler.set_epoch(epoch)
                running = 0.0
                for x, y in train_loader:
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    running += loss.item()
                avg_train_loss = running / len(train_loader)
                scheduler.step(avg_train_loss)
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        if not anatomy.distributed.is_distributed:
            return
        sharded = {
            loader.name
            for loader in anatomy.loaders.all
            if loader.name
            and any(anatomy.loaders.argument(loader.call, key) for key in SAMPLER_ARGUMENTS)
        }
        if not sharded:
            return
        for call in anatomy.calls:
            if not (is_attribute(call.func, "step") and len(call.args) == 1):
                continue
            assert isinstance(call.func, cst.Attribute)
            scope = anatomy.function_of(call)
            if not _is_plateau(anatomy, dotted(call.func.value), scope):
                continue
            body = scope if scope is not None else anatomy.module
            if _gathers(anatomy, body):
                continue
            if _from_a_shard(anatomy, call.args[0].value, scope, body, sharded):
                ctx.report(call)


def _is_plateau(anatomy: Anatomy, name: str | None, scope: cst.FunctionDef | None) -> bool:
    if name is None:
        return False
    return any(
        isinstance(value, cst.Call) and anatomy.is_call_to(value, PLATEAU)
        for value, _ in anatomy.values.values_of(name, scope)
    )


def _gathers(anatomy: Anatomy, body: cst.CSTNode) -> bool:
    return any(
        isinstance(node, cst.Call) and anatomy.is_call_to(node, GATHERING) for node in walk(body)
    )


def _from_a_shard(
    anatomy: Anatomy,
    value: cst.BaseExpression,
    scope: cst.FunctionDef | None,
    body: cst.CSTNode,
    sharded: set[str],
) -> bool:
    """`value` reads a name given a value (`loss = ...`, `running += ...`) in a loop over a
    sharded loader of `body`, directly or through the values given to the names it reads."""
    accumulated = _accumulated_over_shards(body, sharded)
    names, seen = [value], set()
    for _ in range(DEPTH):
        found = []
        for expression in names:
            for node in walk(expression):
                name = dotted(node) if isinstance(node, cst.Name | cst.Attribute) else None
                if name is None or name in seen:
                    continue
                seen.add(name)
                if name in accumulated:
                    return True
                found += [value for value, _ in anatomy.values.values_of(name, scope)]
        names = found
    return False


def _accumulated_over_shards(body: cst.CSTNode, sharded: set[str]) -> set[str]:
    names: set[str] = set()
    for loop in walk(body):
        if not isinstance(loop, cst.For):
            continue
        reads = {dotted(node) for node in walk(loop.iter) if isinstance(node, cst.Name)}
        if not reads & sharded:
            continue
        for node in walk(loop.body):
            names.update(filter(None, map(dotted, assigned(node))))
    return names
