"""DDP109: init_process_group without torch.cuda.set_device before it."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.api import SET_DEVICE
from ddpify.analysis.distributed import GPU_TEXT
from ddpify.analysis.tree import call_arg
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class SetDeviceOrder(CheckRule):
    """
    ## What it does
    Finds an `init_process_group` that may use NCCL (its backend is not `"gloo"`) with no
    `torch.cuda.set_device(local_rank)` in the script, or with `set_device` only after it
    in the same function. `torch.accelerator.set_device_index`, `torch.xpu.set_device` and
    `init_process_group(device_id=...)` count as setting it. A script whose code never
    names CUDA, NCCL or `device_ids` is a CPU job: it has no device to set. When a
    collective runs in between, DDP120 reports it instead.

    ## Why is this bad?
    Until `set_device`, every process's current GPU is GPU 0: NCCL creates its context
    there for every rank, which wastes memory on GPU 0 and can hang the first collective.
    """

    code = "DDP109"
    name = "set-device-order"
    message = "call torch.cuda.set_device(local_rank) before init_process_group"
    # Code that never names CUDA, NCCL or `device_ids` is a CPU job (gloo): no device to set.
    default = False
    severity = Severity.NOTE
    selection = (
        "the order matters only when a collective runs before `set_device` (NCCL then "
        "guesses the device), which DDP120 reports by default; most scripts run none in "
        "between, and nanoGPT keeps this order."
    )
    requires = ("init_process_group", GPU_TEXT)
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
        # The device-agnostic API of PyTorch's current tutorials.
        """
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device(f"{torch.accelerator.current_accelerator()}:{local_rank}")
        torch.accelerator.set_device_index(local_rank)
        dist.init_process_group(backend=dist.get_default_backend_for_device(device))
        model = DDP(model.to(device), device_ids=[local_rank])
        dist.destroy_process_group()
        """,
        """
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        local_rank = int(os.environ["LOCAL_RANK"])
        torch.xpu.set_device(local_rank)
        dist.init_process_group("xccl")
        model = DDP(model.to(f"xpu:{local_rank}"), device_ids=[local_rank])
        dist.destroy_process_group()
        """,
        """
        import os
        import torch
        import torch.distributed as dist

        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
        dist.destroy_process_group()
        """,
        # A CPU job (the backend an option, gloo by default): there is no device to set.
        """
        import argparse
        import torch.distributed as dist

        parser = argparse.ArgumentParser()
        parser.add_argument("--backend", default="gloo", choices=["gloo", "mpi"])
        args = parser.parse_args()
        dist.init_process_group(backend=args.backend)  # no CUDA, no NCCL: CPU only
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
        # The backend is an option, but the model goes to a GPU: NCCL is likely.
        Example(
            """
            import argparse
            import torch.distributed as dist

            parser = argparse.ArgumentParser()
            parser.add_argument("--backend")
            args = parser.parse_args()
            dist.init_process_group(backend=args.backend)
            model = model.cuda()
            dist.destroy_process_group()
            """
        ),
        Example(
            """
            import os
            import torch
            import torch.distributed as dist

            dist.init_process_group("nccl")
            torch.accelerator.set_device_index(int(os.environ["LOCAL_RANK"]))
            dist.destroy_process_group()
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        set_device = anatomy.distributed.set_device_calls
        found: dict[cst.Call, str] = {}
        for init in anatomy.distributed.initialises_process_group:
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
                found[init] = "init_process_group without torch.cuda.set_device(local_rank)"
                continue
            scope = anatomy.function_of(init)
            same_scope = [c for c in set_device if anatomy.function_of(c) is scope]
            if anatomy.distributed.collectives_before_set_device(init):
                continue  # DDP120's: a collective runs on GPU 0 in between
            if same_scope and all(anatomy.precedes(init, c) for c in same_scope):
                late = same_scope[0]  # once, also after two inits
                spelled = min(anatomy.qualified_names(late.func) & SET_DEVICE, default="set_device")
                found[late] = f"{spelled} after init_process_group"
        if found and anatomy.distributed.uses_gpu:
            for node, message in found.items():
                ctx.report(node, message)
