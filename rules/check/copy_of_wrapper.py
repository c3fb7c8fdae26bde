"""DDP122: an EMA, teacher or averaged copy made from the DDP wrapper instead of the model."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.api import MODEL_COPIES
from ddpify.analysis.tree import dotted
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class CopyOfWrapper(CheckRule):
    """
    ## What it does
    Finds `copy.deepcopy(model)`, `AveragedModel(model)` and timm's `ModelEma*(model)` where
    `model` holds the DDP wrapper: an exponential moving average, a mean teacher or an SWA
    model made from the wrapper rather than from the model it wraps.

    ## Why is this bad?
    The copy is a `DistributedDataParallel` too (or holds one): its `state_dict()` keys
    carry `module.` (`module.module.` for `AveragedModel`), so the EMA checkpoint does not
    load into the bare model, and a deep copy of the wrapper is a second DDP instance over
    the same process group. timm and PyTorch's SWA recipe make the copy from the bare model:
    `ModelEmaV2(model.module)` or before the wrap.
    """

    code = "DDP122"
    name = "copy-of-wrapper"
    message = "EMA/teacher/averaged copy of the DDP wrapper: copy model.module"
    severity = Severity.WARNING
    selection = (
        "a copy of the wrapper saves `module.`-prefixed keys and duplicates DDP's machinery; "
        "copying `.module` is what the libraries that make such copies ask for."
    )
    requires = ("DistributedDataParallel", "deepcopy|AveragedModel|ModelEma")
    fix_safety = "Safe: `model.module` holds the same weights, without the wrapper."
    valid = (
        """
        import copy
        from torch.nn.parallel import DistributedDataParallel as DDP

        ema = copy.deepcopy(model)
        model = DDP(model)
        teacher = copy.deepcopy(model.module)
        """,
        # A class of the script's own (yolov5's ModelEMA unwraps the model itself).
        """
        from torch.nn.parallel import DistributedDataParallel as DDP

        class ModelEMA:
            def __init__(self, model):
                self.ema = de_parallel(model)

        model = DDP(model)
        ema = ModelEMA(model)
        """,
    )
    invalid = (
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.optim.swa_utils import AveragedModel

            model = DDP(model)
            swa_model = AveragedModel(model)
            """,
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from torch.optim.swa_utils import AveragedModel

            model = DDP(model)
            swa_model = AveragedModel(model.module)
            """,
        ),
        Example(
            """
            import copy
            from torch.nn.parallel import DistributedDataParallel as DDP

            student = DDP(student, device_ids=[local_rank])
            teacher = copy.deepcopy(student)
            """,
            """
            import copy
            from torch.nn.parallel import DistributedDataParallel as DDP

            student = DDP(student, device_ids=[local_rank])
            teacher = copy.deepcopy(student.module)
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for call in anatomy.calls:
            if not call.args or call.args[0].keyword is not None:
                continue
            value = call.args[0].value
            if (
                isinstance(value, cst.Name | cst.Attribute)
                and anatomy.is_call_to(call, MODEL_COPIES)
                and anatomy.bindings.holds(dotted(value), call)
            ):
                ctx.report(value, fix=partial(_fix, value=value))


def _fix(ctx: CheckContext, value: cst.BaseExpression) -> None:
    ctx.plan.replace(value, lambda updated: cst.Attribute(updated, cst.Name("module")))
