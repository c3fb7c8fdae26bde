"""DDP004: shard the training data with a DistributedSampler, reshuffled every epoch."""

from __future__ import annotations

import libcst as cst

from ddpify.anatomy import Loader, call_arg
from ddpify.emit import statement, with_keyword
from ddpify.rule import ConvertContext, Example, Rule


class DistributedSamplerRule(Rule):
    """
    ## What it does
    Gives the training `DataLoader` a `sampler=DistributedSampler(dataset, shuffle=...)`
    carrying over the loader's own `shuffle=` (the two are mutually exclusive), and makes
    `<loader>.sampler.set_epoch(epoch)` the first statement of the epoch loop, before the
    loader is iterated. The epoch loop is found across the script's own functions and
    methods (`train_one_epoch(model, loader)`, `self._run_epoch(epoch)`), including resume
    loops such as `range(start_epoch, epochs)`. Validation loaders stay whole.

    ## Why is this bad?
    Without the sampler every process trains on the same batches: N GPUs do the work of
    one. Without `set_epoch` the sampler shuffles the same way every epoch.
    """

    code = "DDP004"
    name = "distributed-sampler"
    message = "shard the training DataLoader with DistributedSampler and call set_epoch"
    fix_safety = """
        Safe. A loader with its own sampler, or one whose dataset is built inline, is
        reported and nothing is converted: sharding it needs a human.
    """
    examples = (
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(dataset, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
            """
            import torch
            from torch.utils.data import DataLoader, DistributedSampler

            loader = DataLoader(dataset, sampler=DistributedSampler(dataset, shuffle=True))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                loader.sampler.set_epoch(epoch)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        loaders = anatomy.train_loaders
        if not loaders:
            where = anatomy.loaders[0].call if anatomy.loaders else anatomy.backward_calls[0]
            reason = (
                "cannot tell which DataLoader trains"
                if anatomy.loaders
                else "found no DataLoader to shard"
            )
            ctx.cannot(where, f"{reason}: every process would train on the same data")
            return
        for loader in loaders:
            self._shard(ctx, loader)
        for loader in anatomy.loaders:
            if not loader.trains:
                ctx.info(loader.call, "not a training loader: every process evaluates all of it")
        for loop in anatomy.train_loops:
            if loop.loader is None or not loop.loader.trains:
                continue
            if loop.epoch_loop is None:
                ctx.info(loop.batch_loop, "one pass over the data: no set_epoch needed")
                continue
            if loop.loader_at_epoch is None or loop.epoch_var is None:
                ctx.cannot(
                    loop.epoch_loop,
                    "no epoch counter or loader name in the epoch loop: "
                    "call `sampler.set_epoch(epoch)` there by hand",
                )
                continue
            body = loop.epoch_loop.body
            if not isinstance(body, cst.IndentedBlock):
                ctx.cannot(loop.epoch_loop, "one-line epoch loop: add set_epoch by hand")
                continue
            call = statement(f"{loop.loader_at_epoch}.sampler.set_epoch({loop.epoch_var})\n")
            ctx.plan.insert_before(body.body[0], [call])
            ctx.changed(loop.epoch_loop, "set_epoch at the start of every epoch")

    def _shard(self, ctx: ConvertContext, loader: Loader) -> None:
        call = loader.call
        dataset = call_arg(call, 0, "dataset")
        if call_arg(call, None, "sampler") or call_arg(call, None, "batch_sampler"):
            ctx.cannot(call, "the training DataLoader has its own sampler: shard it by hand")
            return
        if dataset is None:
            ctx.cannot(call, "the training DataLoader has no dataset argument")
            return
        shuffle = call_arg(call, 2, "shuffle")
        if shuffle is not None and shuffle.keyword is None:
            ctx.cannot(call, "`shuffle` passed by position: pass it by keyword first")
            return
        code = cst.Module([]).code_for_node
        dataset_code = code(dataset.value)
        if not isinstance(dataset.value, cst.Name | cst.Attribute):
            # Built inline: the loader and the sampler must share one dataset, so name it.
            dataset_code = ctx.anatomy.free_name(("dataset", "train_dataset", "train_set"))
            built: list[cst.BaseExpression] = []

            def hoist(value: cst.BaseExpression) -> cst.BaseExpression:
                built.append(value)
                return cst.Name(dataset_code)

            ctx.plan.replace(dataset.value, hoist)
            ctx.plan.insert_before(
                loader.statement,
                [lambda: statement(f"{dataset_code} = {code(built[-1])}\n")],
            )
        shuffle_code = code(shuffle.value) if shuffle is not None else "False"
        sampler = cst.parse_expression(
            f"DistributedSampler({dataset_code}, shuffle={shuffle_code})"
        )
        ctx.add_import("torch.utils.data", "DistributedSampler")

        def shard(updated: cst.Call) -> cst.Call:
            if shuffle is None:
                return with_keyword(updated, "sampler", sampler)
            # `sampler=` takes `shuffle=`'s place in the argument list.
            args = [
                arg.with_changes(keyword=cst.Name("sampler"), value=sampler)
                if arg.keyword is not None and arg.keyword.value == "shuffle"
                else arg
                for arg in updated.args
            ]
            return updated.with_changes(args=args)

        ctx.plan.replace(call, shard)
        ctx.changed(call, "training DataLoader sharded with DistributedSampler")
