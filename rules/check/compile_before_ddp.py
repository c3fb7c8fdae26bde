"""DDP113: torch.compile applied before the DDP wrap."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.api import DDP_WRAPPER
from ddpify.analysis.tree import call_arg, dotted
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class CompileBeforeDDP(CheckRule):
    """
    ## What it does
    Finds `model = torch.compile(model)` followed by `DDP(model, ...)`.

    ## Why is this bad?
    DDP then wraps an already compiled module, so TorchDynamo cannot split the graph at
    DDP's gradient buckets to overlap communication with the backward pass (its
    DDPOptimizer): gradients are synchronised after the backward instead of during it, or
    the compile falls back. PyTorch recommends compiling the wrapped model:
    `model = torch.compile(DDP(model, ...))`.
    """

    code = "DDP113"
    name = "compile-before-ddp"
    message = "torch.compile before the DDP wrap: compile the DDP-wrapped model instead"
    default = False
    severity = Severity.NOTE
    selection = (
        "both orders work: PyTorch recommends compiling the DDP-wrapped model "
        "(DDPOptimizer splits the graph at bucket boundaries), but compiling first is "
        "also supported."
    )
    requires = ("DistributedDataParallel", "compile")
    valid = (
        """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = torch.compile(DDP(model))
        """,
    )
    invalid = (
        Example(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = torch.compile(model)
            model = DDP(model)
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        compiled: dict[str, cst.Call] = {}
        for call in anatomy.calls:
            if anatomy.is_call_to(call, {"torch.compile"}) and call.args:
                name = dotted(call.args[0].value)
                if name:
                    compiled[name] = call
        for call in anatomy.calls:
            if not anatomy.is_call_to(call, DDP_WRAPPER):
                continue
            module = call_arg(call, 0, "module")
            name = dotted(module.value) if module is not None else None
            earlier = compiled.get(name or "")
            if earlier is not None and anatomy.precedes(earlier, call):
                ctx.report(earlier)
