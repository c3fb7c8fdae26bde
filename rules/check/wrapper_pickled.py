"""DDP118: `torch.save` of the DDP wrapper object itself (not a state dict)."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.tree import dotted
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class WrapperPickled(CheckRule):
    """
    ## What it does
    Finds `torch.save(model, path)` and `torch.save({"net": model, ...}, path)` where
    `model` holds the DDP wrapper: the whole wrapper object is pickled.

    ## Why is this bad?
    The file holds a `DistributedDataParallel` object: loading it needs torch's DDP and,
    to rebuild its reducer, a process group; the single-GPU script (or an export) that
    expects the model gets the wrapper. Save `model.module`, the model itself.
    """

    code = "DDP118"
    name = "wrapper-pickled"
    message = "torch.save pickles the DDP wrapper, not the model: save model.module"
    severity = Severity.WARNING
    selection = (
        "a pickled wrapper does not load where the model is expected, and not at all "
        "without a process group; saving `.module` costs nothing."
    )
    requires = ("DistributedDataParallel", "save")
    fix_safety = "Safe: `model.module` is the model the wrapper holds, with the same weights."
    valid = (
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(net)
        torch.save(model.module, "model.pt")
        torch.save({"model": model.module.state_dict()}, "ckpt.pt")
        """,
    )
    invalid = (
        Example(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(net)
            torch.save({"net": model, "epoch": epoch}, "ckpt.pt")
            """,
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(net)
            torch.save({"net": model.module, "epoch": epoch}, "ckpt.pt")
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for call in anatomy.calls:
            if not call.args or not anatomy.is_call_to(call, {"torch.save"}):
                continue
            saved = call.args[0].value
            values = (
                [
                    element.value
                    for element in saved.elements
                    if isinstance(element, cst.DictElement)
                ]
                if isinstance(saved, cst.Dict)
                else [saved]
            )
            for value in values:
                if isinstance(value, cst.Name | cst.Attribute) and anatomy.bindings.holds(
                    dotted(value), call
                ):
                    ctx.report(value, fix=partial(_fix, value=value))


def _fix(ctx: CheckContext, value: cst.BaseExpression) -> None:
    ctx.plan.replace(value, lambda updated: cst.Attribute(updated, cst.Name("module")))
