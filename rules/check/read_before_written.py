"""DDP117: every rank loads a file rank 0 saves, with nothing making them wait for it."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import RANK_ZERO_TEXT, TORCH_DISTRIBUTED_TEXT
from ddpify.analysis.tree import call_arg, dotted
from ddpify.emit import statement
from ddpify.rule import CheckContext, CheckRule, Example


class ReadBeforeWritten(CheckRule):
    """
    ## What it does
    Finds a `torch.load` that every rank runs of a path that a `torch.save` under a rank-0
    guard wrote earlier in the same function, with no barrier (or other collective) in
    between: the best checkpoint reloaded for the test set, a fold's weights read back.

    ## Why is this bad?
    Rank 0 is still writing while the others read: they load a file that is not there yet,
    a half-written one (`PytorchStreamReader failed`), or last epoch's. PyTorch's DDP
    tutorial saves on rank 0, calls `dist.barrier()`, then loads on every rank.
    """

    code = "DDP117"
    name = "read-before-written"
    message = (
        "every rank loads a file rank 0 saves, with no barrier in between: the others may "
        "read it before it is written"
    )
    selection = "the other ranks race rank 0's write: a crash or stale weights, by timing."
    requires = (TORCH_DISTRIBUTED_TEXT, RANK_ZERO_TEXT, "load")
    fix_safety = """
        Safe: the barrier goes right before the load, which every rank runs; each rank
        reaches it once per load.
    """
    valid = (
        """
        import torch
        import torch.distributed as dist

        def main():
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), "best.pt")
            dist.barrier()
            model.module.load_state_dict(torch.load("best.pt", map_location="cpu"))
        """,
        # Each rank reads what it wrote itself.
        """
        import torch
        import torch.distributed as dist

        def main():
            torch.save(state, f"shard_{dist.get_rank()}.pt")
            state = torch.load(f"shard_{dist.get_rank()}.pt")
        """,
    )
    invalid = (
        Example(
            """
            import torch
            import torch.distributed as dist

            def main():
                if dist.get_rank() == 0:
                    torch.save(model.module.state_dict(), "best.pt")
                model.module.load_state_dict(torch.load("best.pt", map_location="cpu"))
            """,
            """
            import torch
            import torch.distributed as dist

            def main():
                if dist.get_rank() == 0:
                    torch.save(model.module.state_dict(), "best.pt")
                dist.barrier()
                model.module.load_state_dict(torch.load("best.pt", map_location="cpu"))
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for load in anatomy.distributed.torch_load_calls:
            if anatomy.ranks.guard(load) is not None:
                continue
            if _saved_by_rank_zero_unawaited(anatomy, load):
                ctx.report(load, fix=partial(_fix, line=anatomy.statement_of(load)))


def _saved_by_rank_zero_unawaited(anatomy: Anatomy, load: cst.Call) -> bool:
    """A guarded `torch.save` of the same path earlier in `load`'s function, and no
    collective between the two."""
    path = call_arg(load, 0, "f")
    if path is None:
        return False
    code = cst.Module([]).code_for_node
    function = anatomy.function_of(load)
    for save in anatomy.calls:
        if not anatomy.is_call_to(save, {"torch.save"}):
            continue
        written = call_arg(save, 1, "f")
        if written is None or code(written.value) != code(path.value):
            continue
        if anatomy.function_of(save) is not function or not anatomy.precedes(save, load):
            continue
        if anatomy.ranks.guard(save) is None or _waits_between(anatomy, save, load):
            continue
        return True
    return False


def _waits_between(anatomy: Anatomy, save: cst.Call, load: cst.Call) -> bool:
    """A collective runs after the save and before the load (in place or in a function it
    calls), or the load sits in a loop that goes round again after the save (not followed:
    treated as waiting)."""
    for call in anatomy.calls:
        if not (anatomy.precedes(save, call) and anatomy.precedes(call, load)):
            continue
        if anatomy.graph.reaches(call, lambda node: _collective(anatomy, node)):
            return True
    save_loops = {id(loop) for loop, _ in anatomy.graph.loops_around(save)}
    return any(id(loop) not in save_loops for loop, _ in anatomy.graph.loops_around(load))


def _collective(anatomy: Anatomy, node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.Call):
        return False
    name = (dotted(node.func) or "").rsplit(".", 1)[-1]
    return name in {"barrier", "monitored_barrier"} or anatomy.distributed.is_collective(node)


def _fix(ctx: CheckContext, line: cst.CSTNode) -> None:
    ctx.add_import("torch.distributed", asname="dist")
    ctx.plan.insert_before(line, [statement("dist.barrier()\n")])
