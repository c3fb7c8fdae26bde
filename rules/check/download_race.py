"""DDP119: every rank downloads into the same folder at once (`download=True`)."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import TORCH_DISTRIBUTED_TEXT
from ddpify.analysis.tree import dotted, is_name, walk
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class DownloadRace(CheckRule):
    """
    ## What it does
    In a script that sets up a process group, finds a call with `download=True` (a
    torchvision dataset, a hub model) that every rank runs with no barrier before it in
    its function: not on rank 0 first.

    ## Why is this bad?
    Every process downloads and extracts the same archive into the same folder at once:
    N times the traffic, and a process can read an archive another one is still writing.
    Torchvision's references and Hugging Face's scripts let the main process go first:
    `if rank != 0: dist.barrier()`, the download, then `if rank == 0: dist.barrier()`.
    """

    code = "DDP119"
    name = "download-race"
    message = (
        "every rank downloads into the same folder at once: let rank 0 download first, the "
        "others after a barrier"
    )
    severity = Severity.WARNING
    selection = (
        "the processes race on one archive; it goes unnoticed only when the files are "
        "already there from an earlier run."
    )
    requires = (TORCH_DISTRIBUTED_TEXT, "download")
    valid = (
        """
        import torch.distributed as dist
        from torchvision import datasets

        dist.init_process_group("nccl")
        if dist.get_rank() != 0:
            dist.barrier()
        train_set = datasets.MNIST("data", train=True, download=True)
        if dist.get_rank() == 0:
            dist.barrier()
        """,
        # Downloaded on rank 0, then made everywhere after a barrier.
        """
        import torch.distributed as dist
        from torchvision import datasets

        def main():
            dist.init_process_group("nccl")
            if dist.get_rank() == 0:
                datasets.MNIST("data", download=True)
            dist.barrier()
            train_set = datasets.MNIST("data", download=True)
        """,
    )
    invalid = (
        Example(
            """
            import torch.distributed as dist
            from torchvision import datasets

            def main():
                dist.init_process_group("gloo")
                train_set = datasets.MNIST("data", train=True, download=True)
                dist.destroy_process_group()
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        if not anatomy.distributed.initialises_process_group:
            return
        for call in anatomy.calls:
            downloads = any(
                arg.keyword is not None
                and arg.keyword.value == "download"
                and not is_name(arg.value, "False", "None")
                for arg in call.args
            )
            if not downloads or anatomy.ranks.guard(call) is not None:
                continue
            if not _barrier_before(anatomy, call):
                ctx.report(call)


def _barrier_before(anatomy: Anatomy, call: cst.Call) -> bool:
    """A barrier earlier in the call's function: rank 0 went first, or everyone waited."""
    function = anatomy.function_of(call)
    scope: cst.CSTNode = function if function is not None else anatomy.module
    return any(
        isinstance(node, cst.Call)
        and (dotted(node.func) or "").rsplit(".", 1)[-1] in {"barrier", "synchronize"}
        and anatomy.precedes(node, call)
        for node in walk(scope)
    )
