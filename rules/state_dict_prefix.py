"""DDP105: `state_dict()` of the DDP wrapper, whose keys all start with `module.`."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.anatomy import dotted
from ddpify.lint import CheckContext
from ddpify.rule import Example, Rule
from ddpify.tree import is_attribute


class StateDictPrefix(Rule):
    """
    ## What it does
    Finds `model.state_dict()` where `model` holds the DDP wrapper.

    ## Why is this bad?
    The wrapper's keys are the model's with a `module.` prefix: the checkpoint does not load
    into the bare model (single-GPU inference, fine-tuning) without renaming every key.
    """

    code = "DDP105"
    name = "state-dict-prefix"
    message = "state_dict() of the DDP wrapper: keys get a `module.` prefix; use model.module"
    requires = ("DistributedDataParallel", "state_dict")
    fix_safety = "Safe: `model.module.state_dict()` holds the same tensors under plain keys."
    valid = (
        """
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
        state = model.module.state_dict()
        """,
    )
    invalid = (
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            state = model.state_dict()
            """,
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            state = model.module.state_dict()
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for name, wrap in anatomy.ddp_wraps.items():
            anchor = anatomy.statement_of(wrap)
            for call in anatomy.calls:
                func = call.func
                if not is_attribute(func, "state_dict"):
                    continue
                assert isinstance(func, cst.Attribute)
                if dotted(func.value) == name and anatomy.runs_after(anchor, call, name):
                    ctx.report(func, fix=partial(_fix, value=func.value))


def _fix(ctx: CheckContext, value: cst.BaseExpression) -> None:
    ctx.plan.replace(value, lambda updated: cst.Attribute(updated, cst.Name("module")))
