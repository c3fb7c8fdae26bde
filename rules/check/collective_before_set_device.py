"""DDP120: a collective between init_process_group and torch.cuda.set_device."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.api import COLLECTIVE_TEXT
from ddpify.analysis.distributed import GPU_TEXT
from ddpify.analysis.tree import call_arg
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class CollectiveBeforeSetDevice(CheckRule):
    """
    ## What it does
    Finds a collective (`dist.barrier()`, `all_reduce`, `broadcast`, ...) that runs after
    `init_process_group` and before `torch.cuda.set_device(local_rank)` in the same
    function, in a job that uses GPUs (its backend is not `"gloo"`, and it names CUDA,
    NCCL or `device_ids`).

    ## Why is this bad?
    NCCL runs a collective on the process's current GPU. Before `set_device` that is GPU 0
    on every rank: the communicator is built with all ranks on one GPU, which wastes its
    memory and can hang ("using GPU 0 to perform barrier as devices used by this process
    are currently unknown"). Call `set_device` first, or pass
    `init_process_group(device_id=...)`.
    """

    code = "DDP120"
    name = "collective-before-set-device"
    message = (
        "collective before torch.cuda.set_device: with NCCL every rank runs it on GPU 0; "
        "set the device first"
    )
    severity = Severity.WARNING
    selection = (
        "a collective on an unset device is what makes the order of `set_device` and "
        "`init_process_group` matter (MoCo v3's and SimSiam's `dist.barrier()`); without "
        "one, DDP109 (opt-in) is only advice."
    )
    requires = ("init_process_group", COLLECTIVE_TEXT, GPU_TEXT)
    valid = (
        """
        import os
        import torch
        import torch.distributed as dist

        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        dist.barrier()
        dist.destroy_process_group()
        """,
        # No collective before set_device: the order is only advice (DDP109).
        """
        import os
        import torch
        import torch.distributed as dist

        dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.barrier()
        dist.destroy_process_group()
        """,
        # The device is given to the process group.
        """
        import os
        import torch
        import torch.distributed as dist

        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
        dist.barrier()
        torch.cuda.set_device(local_rank)
        """,
        """
        import torch.distributed as dist

        dist.init_process_group("gloo")
        dist.barrier()
        dist.destroy_process_group()
        """,
    )
    invalid = (
        # MoCo v3 and SimSiam (main_*.py): a barrier right after init, set_device later.
        Example(
            """
            import torch
            import torch.distributed as dist

            def main_worker(gpu, args):
                dist.init_process_group(backend="nccl", init_method=args.dist_url,
                                        world_size=args.world_size, rank=args.rank)
                dist.barrier()
                model = build_model()
                torch.cuda.set_device(gpu)
                model.cuda(gpu)
                dist.destroy_process_group()
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        found: list[cst.Call] = []
        for init in anatomy.distributed.initialises_process_group:
            backend = call_arg(init, 0, "backend")
            if (
                backend is not None
                and isinstance(backend.value, cst.SimpleString)
                and backend.value.value in ('"gloo"', "'gloo'")
            ) or call_arg(init, None, "device_id") is not None:
                continue
            for call in anatomy.distributed.collectives_before_set_device(init):
                if call not in found:
                    found.append(call)
        if found and anatomy.distributed.uses_gpu:
            for call in found:
                ctx.report(call)
