"""DDP105: `state_dict()` of the DDP wrapper, whose keys all start with `module.`."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.tree import dotted, is_attribute
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class StateDictPrefix(CheckRule):
    """
    ## What it does
    Finds `model.state_dict()` where `model` holds the DDP wrapper: from `model = DDP(...)`
    until `model` is bound again (`model = model.module` ends it); in a function, a
    parameter that every call of the function passes the wrapper to.

    ## Why is this bad?
    The wrapper's keys are the model's with a `module.` prefix: the checkpoint does not load
    into the bare model (single-GPU inference, fine-tuning) without renaming every key.
    """

    code = "DDP105"
    name = "state-dict-prefix"
    message = "state_dict() of the DDP wrapper: keys get a `module.` prefix; use model.module"
    default = False
    severity = Severity.WARNING
    selection = (
        "resume checkpoints saved from the wrapper and loaded back into it are consistent "
        "(DINO, Barlow Twins do it on purpose, and strip `module.` in their evaluation "
        "scripts); flag it when the checkpoint must load into the bare model. Loading the "
        "bare module's keys into the wrapper, a certain crash, is DDP115 (on by default)."
    )
    requires = ("DistributedDataParallel", "state_dict")
    fix_safety = "Safe: `model.module.state_dict()` holds the same tensors under plain keys."
    valid = (
        """
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
        state = model.module.state_dict()
        """,
        # One branch may be the bare model: nothing certain to flag.
        """
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(net)
        best = model if use_ddp else net
        state = best.state_dict()
        """,
        # Before the wrap.
        """
        from torch.nn.parallel import DistributedDataParallel as DDP

        initial = model.state_dict()
        model = DDP(model)
        """,
        # A helper's parameter is not the script's `model`: here it gets the bare module.
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        def save_checkpoint(model, path):
            torch.save(model.state_dict(), path)

        model = DDP(model)
        save_checkpoint(model.module, "best.pt")
        """,
        # Unwrapped once training is done.
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        def main(model):
            model = DDP(model)
            train(model)
            model = model.module  # done training
            torch.save(model.state_dict(), "model.pt")
        """,
        # `self.model` of a class that never wraps it.
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        class Trainer:
            def __init__(self, model):
                self.model = DDP(model)

        class Exporter:
            def __init__(self, model):
                self.model = model

            def export(self):
                torch.save(self.model.state_dict(), "model.pt")

        Exporter(net).export()
        """,
    )
    invalid = (
        # The better of two wrapped models (round-39 audit B alternating_two_models_per_epoch).
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            model_a = DDP(net_a)
            model_b = DDP(net_b)
            best = model_a if score_a < score_b else model_b
            state = best.state_dict()
            """,
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            model_a = DDP(net_a)
            model_b = DDP(net_b)
            best = model_a if score_a < score_b else model_b
            state = best.module.state_dict()
            """,
        ),
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
        # Every call of the helper passes it the wrapper.
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            def snapshot(net):
                return {"model": net.state_dict()}

            model = DDP(model)
            state = snapshot(model)
            """,
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            def snapshot(net):
                return {"model": net.module.state_dict()}

            model = DDP(model)
            state = snapshot(model)
            """,
        ),
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            class Trainer:
                def __init__(self, model):
                    self.model = model
                    self.model = DDP(self.model)

                def snapshot(self):
                    return {"model": self.model.state_dict()}
            """,
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            class Trainer:
                def __init__(self, model):
                    self.model = model
                    self.model = DDP(self.model)

                def snapshot(self):
                    return {"model": self.model.module.state_dict()}
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for call in anatomy.calls:
            func = call.func
            if not is_attribute(func, "state_dict"):
                continue
            assert isinstance(func, cst.Attribute)
            if anatomy.bindings.holds(dotted(func.value), call):
                ctx.report(func, fix=partial(_fix, value=func.value))


def _fix(ctx: CheckContext, value: cst.BaseExpression) -> None:
    ctx.plan.replace(value, lambda updated: cst.Attribute(updated, cst.Name("module")))
