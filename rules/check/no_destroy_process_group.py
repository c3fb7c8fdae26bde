"""DDP111: a process group that is never destroyed."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.tree import dotted
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class NoDestroyProcessGroup(CheckRule):
    """
    ## What it does
    Finds scripts that call `init_process_group` but never `destroy_process_group`.

    ## Why is this bad?
    Exiting with the group alive leaks NCCL resources, prints warnings at exit, and can
    abort the interpreter while its communicator threads still run. Destroy it when
    training ends (in a `finally:`), after the DDP model is released.
    """

    code = "DDP111"
    name = "no-destroy-process-group"
    message = "init_process_group without destroy_process_group when training ends"
    default = False
    severity = Severity.NOTE
    selection = (
        "the process exits anyway; PyTorch warns at exit, and long-running launchers "
        "may still want it."
    )
    requires = ("init_process_group",)
    valid = (
        """
        import atexit

        import torch.distributed as dist

        dist.init_process_group("gloo")
        atexit.register(dist.destroy_process_group)
        train()
        """,
        """
        import torch.distributed as dist

        dist.init_process_group("gloo")
        try:
            train()
        finally:
            dist.destroy_process_group()
        """,
    )
    invalid = (
        Example(
            """
            import torch.distributed as dist

            dist.init_process_group("gloo")
            train()
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        destroys = [
            c
            for c in anatomy.calls
            if anatomy.is_call_to(c, {"torch.distributed.destroy_process_group"})
            # `atexit.register(dist.destroy_process_group)`: handed over to be called.
            or any(
                "torch.distributed.destroy_process_group" in anatomy.qualified_names(arg.value)
                for arg in c.args
                if isinstance(arg.value, cst.Name | cst.Attribute)
                and (dotted(arg.value) or "").endswith("destroy_process_group")
            )
        ]
        if anatomy.distributed.initialises_process_group and not destroys:
            ctx.report(anatomy.distributed.initialises_process_group[0])
