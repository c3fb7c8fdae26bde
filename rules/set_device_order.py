"""DDP109: init_process_group without torch.cuda.set_device before it."""

from __future__ import annotations

import libcst as cst

from ddpify.anatomy import call_arg
from ddpify.lint import CheckContext
from ddpify.rule import Example, Rule


class SetDeviceOrder(Rule):
    """
    ## What it does
    Finds an `init_process_group` that may use NCCL (its backend is not `"gloo"`) with no
    `torch.cuda.set_device(local_rank)` in the script, or with `set_device` only after it
    in the same function. `init_process_group(device_id=...)` counts as setting it.

    ## Why is this bad?
    Until `set_device`, every process's current GPU is GPU 0: NCCL creates its context
    there for every rank, which wastes memory on GPU 0 and can hang the first collective.
    """

    code = "DDP109"
    name = "set-device-order"
    message = "call torch.cuda.set_device(local_rank) before init_process_group"
    requires = ("init_process_group",)
    valid = (
        """
        import os
        import torch
        import torch.distributed as dist

        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        dist.destroy_process_group()
        """,
        """
        import torch.distributed as dist

        dist.init_process_group("gloo")
        dist.destroy_process_group()
        """,
    )
    invalid = (
        Example(
            """
            import os
            import torch
            import torch.distributed as dist

            dist.init_process_group("nccl")
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            dist.destroy_process_group()
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        set_device = [c for c in anatomy.calls if anatomy.is_call_to(c, {"torch.cuda.set_device"})]
        for init in anatomy.initialises_process_group:
            backend = call_arg(init, 0, "backend")
            if (
                backend is not None
                and isinstance(backend.value, cst.SimpleString)
                and backend.value.value in ('"gloo"', "'gloo'")
            ):
                continue
            if call_arg(init, None, "device_id") is not None:
                continue
            if not set_device:
                ctx.report(init, "init_process_group without torch.cuda.set_device(local_rank)")
                continue
            scope = anatomy.function_of(init)
            same_scope = [c for c in set_device if anatomy.function_of(c) is scope]
            if same_scope and all(anatomy.precedes(init, c) for c in same_scope):
                ctx.report(same_scope[0], "torch.cuda.set_device after init_process_group")
