"""DDP007: the batch-size and learning-rate semantics the user chose, made explicit."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.tree import call_arg, dotted
from ddpify.emit import WORLD_SIZE, expression
from ddpify.options import BatchMode, ScaleLR
from ddpify.rule import ConvertContext, ConvertRule, Example


class BatchAndLearningRate(ConvertRule):
    """
    ## What it does
    With `--batch global`, divides the training loader's `batch_size` by the world size so
    that the effective batch (and the right learning rate) stays what it was. With
    `--batch per-gpu` (the default, as in PyTorch's tutorial) each process keeps the
    script's batch size and the effective batch grows N times; `--scale-lr linear` or
    `--scale-lr sqrt` then scales the optimizer's `lr` by N or by the square root of N.

    ## Why is this bad?
    A per-GPU batch N times larger under an unchanged learning rate trains differently from
    the single-GPU run, silently.
    """

    code = "DDP007"
    step = 7
    name = "batch-and-lr"
    message = "batch size per process and learning rate follow --batch and --scale-lr"
    fix_safety = "Changes the optimisation only as the chosen options say."
    examples = (
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(dataset, batch_size=64)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        options = ctx.options
        for call in anatomy.calls:
            reduction = call_arg(call, None, "reduction")
            if (
                reduction is not None
                and isinstance(reduction.value, cst.SimpleString)
                and reduction.value.evaluated_value == "sum"
                and (dotted(call.func) or "").rsplit(".", 1)[-1].endswith("Loss")
            ):
                ctx.info(
                    call,
                    "a loss summed over the batch (`reduction='sum'`): DDP averages the "
                    "processes' gradients, so a step moves as far as one process's sum says, "
                    "1/world_size of the sum over the global batch; multiply the loss by "
                    "dist.get_world_size() if the global sum is wanted",
                )
        if options.batch is BatchMode.GLOBAL and anatomy.streams.random_batches is not None:
            ctx.cannot(
                anatomy.streams.random_batches.loop,
                "--batch global: batches drawn at random keep their size in every process; "
                "divide it by the world size by hand",
            )
        if options.batch is BatchMode.GLOBAL:
            for loader in anatomy.script.train_loaders:
                size = call_arg(loader.call, 1, "batch_size")
                if size is None:
                    ctx.cannot(loader.call, "no batch_size to divide by the world size")
                    continue
                ctx.plan.replace(size.value, lambda v: _scaled(v, f"// {WORLD_SIZE}"))
                ctx.changed(size, "batch size divided by the world size (--batch global)")
        if options.scale_lr is not ScaleLR.NONE:
            factor = WORLD_SIZE if options.scale_lr is ScaleLR.LINEAR else f"{WORLD_SIZE} ** 0.5"
            for optimizer in {
                id(model.optimizer_call): model.optimizer_call for model in anatomy.models.all
            }.values():
                lr = call_arg(optimizer, 1, "lr")
                if lr is None:
                    ctx.cannot(optimizer, "no lr= to scale: the optimizer's default stays")
                    continue
                ctx.plan.replace(lr.value, partial(_scaled, operation=f"* {factor}"))
                ctx.changed(
                    lr, f"learning rate scaled by {factor} (--scale-lr {options.scale_lr.value})"
                )


def _scaled(value: cst.BaseExpression, operation: str) -> cst.BaseExpression:
    code = cst.Module([]).code_for_node(value)
    simple = isinstance(
        value, cst.Name | cst.Attribute | cst.Integer | cst.Float | cst.Call | cst.Subscript
    )
    return expression(f"{code if simple else f'({code})'} {operation}")
