"""DDP123: DDP's own methods (`no_sync`, `join`, comm hooks) called on `model.module`."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.tree import dotted, is_attribute
from ddpify.rule import CheckContext, CheckRule, Example

# Methods of DistributedDataParallel that the module it wraps does not have.
DDP_METHODS = frozenset({"no_sync", "join", "join_hook", "register_comm_hook"})


class DdpApiThroughModule(CheckRule):
    """
    ## What it does
    Finds `model.module.no_sync()`, `model.module.join()` and
    `model.module.register_comm_hook(...)` where `model` holds the DDP wrapper.

    ## Why is this bad?
    These are methods of `DistributedDataParallel`, not of the model it wraps: through
    `.module` they raise AttributeError at the first accumulation step (or the first uneven
    input). Call them on the wrapper: `with model.no_sync():`.
    """

    code = "DDP123"
    name = "ddp-api-through-module"
    message = "DDP's own method called on model.module (AttributeError): call it on the wrapper"
    requires = ("DistributedDataParallel", r"\.module\.(no_sync|join|register_comm_hook)")
    selection = "the call raises AttributeError the first time it runs."
    fix_safety = "Safe: the method exists on the wrapper, and only there."
    valid = (
        """
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
        with model.no_sync():
            loss.backward()
        """,
        # A model of the script's own with a method of that name, never wrapped.
        """
        net = Net()
        net.module.join()
        """,
    )
    invalid = (
        Example(
            """
            import contextlib
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            for step, (x, y) in enumerate(loader):
                sync = (step + 1) % accum == 0
                with contextlib.nullcontext() if sync else model.module.no_sync():
                    loss = criterion(model(x), y) / accum
                    loss.backward()
            """,
            """
            import contextlib
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            for step, (x, y) in enumerate(loader):
                sync = (step + 1) % accum == 0
                with contextlib.nullcontext() if sync else model.no_sync():
                    loss = criterion(model(x), y) / accum
                    loss.backward()
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for call in anatomy.calls:
            method = call.func
            if not (isinstance(method, cst.Attribute) and method.attr.value in DDP_METHODS):
                continue
            inner = method.value
            if is_attribute(inner, "module"):
                assert isinstance(inner, cst.Attribute)
                if anatomy.bindings.holds(dotted(inner.value), call):
                    ctx.report(inner, fix=partial(_fix, inner=inner))


def _fix(ctx: CheckContext, inner: cst.Attribute) -> None:
    ctx.plan.replace(inner, lambda updated: updated.value)
