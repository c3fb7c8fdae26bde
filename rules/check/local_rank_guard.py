"""DDP107: the local rank used to pick the one process that writes."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import LOCAL_RANK_ZERO_TEXT, TORCH_DISTRIBUTED_TEXT
from ddpify.analysis.effects import FILE_WRITES, path_names, root_names
from ddpify.analysis.ranks import Polarity, RankTest
from ddpify.analysis.tree import dotted, walk
from ddpify.emit import rank_zero_test
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class LocalRankGuard(CheckRule):
    """
    ## What it does
    Finds `if local_rank == 0:` (also `local_rank in [-1, 0]`, `gpu_id`, `LOCAL_RANK`,
    `rank % ngpus_per_node == 0`, a flag set from one of these, ...) around checkpoint or
    file writes, made there or in the script's own functions it calls.

    ## Why is this bad?
    The local rank is the process's index on its own machine: on a run over several nodes
    every node has a local rank 0, and they all write the same file.
    """

    code = "DDP107"
    name = "local-rank-guard"
    message = "local rank picks the writer: on several nodes each node writes; use the global rank"
    default = False
    severity = Severity.WARNING
    selection = (
        "on one node the local rank is the global rank, and writing once per node is what "
        "PyTorch's own DDP tutorials and the imagenet example do on purpose (a snapshot on "
        "every node's disk for restarts); it races only on several nodes sharing a "
        "filesystem."
    )
    requires = (TORCH_DISTRIBUTED_TEXT, LOCAL_RANK_ZERO_TEXT)
    fix_safety = """
        Safe: on one node the global and the local rank 0 are the same process. The fix
        replaces a test written in place (not a flag or helper set elsewhere), with
        `not dist.is_initialized() or dist.get_rank() == 0` where the script can also run
        without a process group.
    """
    valid = (
        # A cache each node builds on its own disk, then every process reads.
        """
        import torch
        import torch.distributed as dist

        if local_rank == 0 and not os.path.exists(path):
            torch.save(features, path)
        dist.barrier()
        features = torch.load(path, map_location="cpu", weights_only=True)
        """,
        """
        import torch
        import torch.distributed as dist

        if dist.get_rank() == 0:
            torch.save(state, "model.pt")
        """,
    )
    invalid = (
        # Named like the global rank, read from LOCAL_RANK: where the value comes from decides.
        Example(
            """
            import os

            import torch
            import torch.distributed as dist


            class Trainer:
                def __init__(self):
                    self.global_rank = int(os.environ["LOCAL_RANK"])

                def save(self, state):
                    if self.global_rank == 0:
                        torch.save(state, "model.pt")
            """,
            """
            import os

            import torch
            import torch.distributed as dist


            class Trainer:
                def __init__(self):
                    self.global_rank = int(os.environ["LOCAL_RANK"])

                def save(self, state):
                    if dist.get_rank() == 0:
                        torch.save(state, "model.pt")
            """,
        ),
        Example(
            """
            import torch
            import torch.distributed as dist

            if local_rank == 0 and epoch % 5 == 0:
                torch.save(state, "model.pt")
            """,
            """
            import torch
            import torch.distributed as dist

            if dist.get_rank() == 0 and epoch % 5 == 0:
                torch.save(state, "model.pt")
            """,
        ),
        # Hugging Face's older examples: -1 is the run without a process group.
        Example(
            """
            import torch
            import torch.distributed as dist

            if args.local_rank in [-1, 0] and step % args.save_steps == 0:
                torch.save(state, "model.pt")
            """,
            """
            import torch
            import torch.distributed as dist

            if (not dist.is_initialized() or dist.get_rank() == 0) and step % args.save_steps == 0:
                torch.save(state, "model.pt")
            """,
        ),
        # pytorch/examples' imagenet: the first process of each node writes.
        Example(
            """
            import torch
            import torch.distributed as dist

            if args.rank % ngpus_per_node == 0:
                torch.save(state, "checkpoint.pth.tar")
            """,
            """
            import torch
            import torch.distributed as dist

            if dist.get_rank() == 0:
                torch.save(state, "checkpoint.pth.tar")
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for node in anatomy.ifs:
            test = anatomy.ranks.test(node.test)
            if test is None or test.kind != "local":
                continue
            # The branch that runs on (local) rank 0: the body, or the `else` of `!= 0`.
            branch = node.body if test.polarity is Polarity.ZERO else node.orelse
            if branch is None or not anatomy.effects.writes_files(branch):
                continue
            if _node_cache(anatomy, node, branch):
                continue
            fix = None
            if test.direct and test.polarity is Polarity.ZERO:
                fix = partial(_fix, test=test)
            ctx.report(test.node, fix=fix)


def _node_cache(anatomy: Anatomy, guard: cst.If, branch: cst.CSTNode) -> bool:
    """`if local_rank == 0: torch.save(x, path)`, then a barrier, then every rank reads `path`:
    a cache each node builds for its own processes. On a node-local disk one writer per node
    is the point, and the global rank would leave the other nodes without the file."""
    written: set[str] = set()
    for statement in walk(branch):
        if (
            isinstance(statement, cst.SimpleStatementLine | cst.With)
            and anatomy.effects.of(statement) in FILE_WRITES
        ):
            written |= path_names(statement)
    if not written:
        return False
    body = list(anatomy.body_of(guard))
    waited = False
    for statement in body[body.index(guard) + 1 :]:
        for call in walk(statement):
            if not isinstance(call, cst.Call):
                continue
            name = (dotted(call.func) or "").rsplit(".", 1)[-1]
            if name in {"barrier", "monitored_barrier"}:
                waited = True
            elif waited and name in READS and any(root_names(arg) & written for arg in call.args):
                return True
    return False


READS = frozenset({"load", "open", "read_text", "read_bytes", "load_state_dict", "from_file"})


def _fix(ctx: CheckContext, test: RankTest) -> None:
    ctx.add_import("torch.distributed", asname="dist")
    needs_parentheses = isinstance(ctx.anatomy.parent(test.node), cst.BooleanOperation)
    ctx.plan.replace(
        test.node,
        lambda _: rank_zero_test(
            test.admits_no_group or ctx.anatomy.distributed.group_is_optional, needs_parentheses
        ),
    )
