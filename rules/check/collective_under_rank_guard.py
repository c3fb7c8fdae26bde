"""DDP106: a collective, or a forward pass through DDP, that only rank 0 runs."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import COLLECTIVE_TEXT, RANK_ZERO_TEXT, TORCH_DISTRIBUTED_TEXT
from ddpify.analysis.calls import MAX_DEPTH
from ddpify.analysis.ranks import Polarity
from ddpify.analysis.tree import dotted, is_name, walk
from ddpify.rule import CheckContext, CheckRule, Example


class CollectiveUnderRankGuard(CheckRule):
    """
    ## What it does
    Finds collectives (`barrier`, `all_reduce`, `broadcast`, `all_gather`, ...,
    `torch.distributed.checkpoint.save`/`load`, `get_state_dict`, `new_group`) and forward
    passes through a DDP-wrapped model that run on rank 0 only: under a rank-0 test however
    it is spelled (`if rank == 0:`, `if master_process:`, after `if rank != 0: return`, ...),
    or in a function that is only ever called there. Not when the other ranks make the same
    call in the `else:` or under the opposite test in the same function (the barrier pair
    that lets rank 0 go first). A forward counts when it talks to the other ranks: with
    gradients on, or when the model has buffers DDP broadcasts (BatchNorm, `register_buffer`
    in the script's own classes); under `torch.no_grad()` a model without buffers does not
    (nanoGPT's evaluation on the master process).

    ## Why is this bad?
    A collective completes when every rank joins it. Rank 0 waits for ranks that never come:
    the job hangs until the timeout kills it. A forward through DDP can start one: DDP
    broadcasts the model's buffers from rank 0 before every forward.
    """

    code = "DDP106"
    name = "collective-under-rank-guard"
    message = "collective on rank 0 only: the other ranks never join it and the job hangs"
    selection = "the job hangs at the collective."
    requires = (
        TORCH_DISTRIBUTED_TEXT,
        COLLECTIVE_TEXT + "|DistributedDataParallel|FullyShardedDataParallel",
        RANK_ZERO_TEXT,
    )
    valid = (
        # nanoGPT: rank 0 evaluates through the wrapper without gradients, and the model has
        # no buffers: DDP's forward talks to no other rank.
        """
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(torch.nn.Linear(4, 1))

        @torch.no_grad()
        def estimate_loss():
            return model(x).mean()

        if dist.get_rank() == 0:
            print(estimate_loss())
        """,
        # FSDP's full state dict gathered on every rank, saved on rank 0.
        """
        import torch
        import torch.distributed as dist
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        model = FSDP(net)
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, policy):
            state = model.state_dict()
        if dist.get_rank() == 0:
            torch.save(state, "model.pt")
        """,
        # The other ranks join in the `else:`.
        """
        import torch.distributed as dist

        if dist.get_rank() == 0:
            dist.scatter(output, scatter_list=chunks)
        else:
            dist.scatter(output)
        """,
        # Hugging Face's and YOLOv5's "rank 0 first": every rank passes one barrier each time.
        """
        from contextlib import contextmanager

        import torch.distributed as dist


        @contextmanager
        def torch_distributed_zero_first(local_rank):
            if local_rank not in [-1, 0]:
                dist.barrier()
            yield
            if local_rank == 0:
                dist.barrier()
        """,
        """
        import torch.distributed as dist

        dist.barrier()
        if dist.get_rank() == 0:
            print("saved")
        """,
        # Rank 0 evaluates the bare module, passed to a helper: no DDP forward.
        """
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        def evaluate(model, batch):
            return model(batch)

        model = DDP(model)
        if dist.get_rank() == 0:
            evaluate(model.module, batch)
        """,
        # Before the wrap, `model` is the bare module.
        """
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        if dist.get_rank() == 0:
            model(example)
        model = DDP(model)
        """,
    )
    invalid = (
        # The same with a buffer: DDP broadcasts it from rank 0 at every forward.
        Example(
            """
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.register_buffer("mask", torch.ones(4))

            model = DDP(Net())

            @torch.no_grad()
            def estimate_loss():
                return model(x).mean()

            if dist.get_rank() == 0:
                print(estimate_loss())
            """
        ),
        # FSDP gathers the full state dict from every rank, even with rank0_only=True.
        Example(
            """
            import torch
            import torch.distributed as dist
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            model = FSDP(net)
            if dist.get_rank() == 0:
                with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, policy):
                    state = model.state_dict()
                torch.save(state, "model.pt")
            """
        ),
        # metaseq: the rank test is a property of the trainer.
        Example(
            """
            import torch.distributed as dist

            class Trainer:
                @property
                def is_data_parallel_master(self):
                    return dist.get_rank() == 0

                def sync(self):
                    if self.is_data_parallel_master:
                        dist.barrier()
            """
        ),
        # A distributed checkpoint: every rank writes its own shard of it.
        Example(
            """
            import torch.distributed as dist
            import torch.distributed.checkpoint as dcp

            if dist.get_rank() == 0:
                dcp.save({"model": model.state_dict()}, checkpoint_id="checkpoints/step-100")
            """
        ),
        Example(
            """
            import torch.distributed as dist

            if dist.get_rank() == 0:
                dist.barrier()
            """
        ),
        Example(
            """
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP

            def evaluate(model, batch):
                return model(batch)

            model = DDP(model)
            if dist.get_rank() == 0:
                evaluate(model, batch)
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for call in anatomy.calls:
            if _fsdp_gather(anatomy, call):
                if anatomy.ranks.guard(call) is not None and not _other_ranks_join(anatomy, call):
                    ctx.report(call, FSDP_GATHER)
                continue
            called = dotted(call.func)
            forward = anatomy.bindings.may_hold(called)
            if not (forward or anatomy.distributed.may_be_collective(call)):
                continue
            # The guard first: resolving names is the costliest question to ask.
            if anatomy.ranks.guard(call) is None:
                continue
            forward = forward and anatomy.bindings.holds(called, call)
            if forward and not _forward_syncs(anatomy, call):
                continue  # a forward that talks to no other rank
            if not (forward or anatomy.distributed.is_collective(call)):
                continue
            if _other_ranks_join(anatomy, call):
                continue
            if forward:
                ctx.report(call, FORWARD)
            else:
                ctx.report(call)


FSDP_GATHER = (
    "FSDP state dict gathered on rank 0 only: every rank must call it (rank0_only=True keeps "
    "the result on rank 0), or the job hangs"
)
FSDP = "torch.distributed.fsdp.FullyShardedDataParallel"
FSDP_GATHERS = {"full_optim_state_dict", "optim_state_dict", "sharded_optim_state_dict"}


def _fsdp_gather(anatomy: Anatomy, call: cst.Call) -> bool:
    """A state dict FSDP (the wrapper class) gathers from every rank: `model.state_dict()` of
    a model made by `FSDP(...)`, `FSDP.optim_state_dict(model, optimizer)`, ..."""
    if not isinstance(call.func, cst.Attribute):
        return False
    method = call.func.attr.value
    if method in FSDP_GATHERS:
        return anatomy.is_call_to(call, {f"{FSDP}.{method}"})
    if method != "state_dict" or call.args:
        return False
    made = anatomy.values.origins(call.func.value, anatomy.function_of(call))
    return bool(made) and all(
        isinstance(value, cst.Call) and anatomy.is_call_to(value, {FSDP}) for value in made
    )


FORWARD = (
    "forward through the DDP model on rank 0 only: DDP syncs its buffers (or readies the "
    "backward) with ranks that never join, and the job hangs; use model.module"
)
NO_GRAD = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"}
NORMS_WITH_STATISTICS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")


def _forward_syncs(anatomy: Anatomy, call: cst.Call) -> bool:
    """Whether a forward through DDP at `call` needs the other ranks: with gradients on (the
    reducer then waits for every rank's backward), or when the wrapped model has buffers
    that DDP broadcasts from rank 0 before each forward (BatchNorm's running statistics,
    `register_buffer`). Under `torch.no_grad()` a model without buffers talks to no one
    (nanoGPT's `estimate_loss` on the master process)."""
    if not _without_grad(anatomy, call):
        return True
    wraps = list(anatomy.distributed.ddp_wraps.values())
    return any(
        _broadcasts_buffers(wrap) and wrap.args and _has_buffers(anatomy, wrap.args[0].value)
        for wrap in wraps
    )


def _without_grad(anatomy: Anatomy, node: cst.CSTNode) -> bool:
    for ancestor in anatomy.ancestors(node):
        if isinstance(ancestor, cst.With) and any(
            isinstance(item.item, cst.Call) and anatomy.is_call_to(item.item, NO_GRAD)
            for item in ancestor.items
        ):
            return True
        if isinstance(ancestor, cst.FunctionDef):
            return any(
                anatomy.is_call_to(decorator.decorator, NO_GRAD)
                if isinstance(decorator.decorator, cst.Call)
                else False
                for decorator in ancestor.decorators
            )
    return False


def _broadcasts_buffers(wrap: cst.Call) -> bool:
    for arg in wrap.args:
        if arg.keyword is not None and arg.keyword.value == "broadcast_buffers":
            return not is_name(arg.value, "False")
    return True


def _has_buffers(
    anatomy: Anatomy, expr: cst.BaseExpression, depth: int = 0, seen: set[str] | None = None
) -> bool:
    """Whether the model `expr` surely has buffers: BatchNorm layers or `register_buffer` in
    the classes the script defines for it. Models from elsewhere cannot be told: no."""
    seen = set() if seen is None else seen
    if depth > MAX_DEPTH:
        return False
    for origin in anatomy.values.origins(expr, anatomy.function_of(expr)):
        if not isinstance(origin, cst.Call):
            continue
        if isinstance(origin.func, cst.Attribute) and origin.func.attr.value in {"to", "cuda"}:
            if _has_buffers(anatomy, origin.func.value, depth + 1, seen):  # model.to(device)
                return True
            continue
        if _makes_buffers(anatomy, origin, depth, seen):
            return True
    return False


def _makes_buffers(anatomy: Anatomy, node: cst.CSTNode, depth: int, seen: set[str]) -> bool:
    for inner in walk(node):
        if not isinstance(inner, cst.Call):
            continue
        name = (dotted(inner.func) or "").rsplit(".", 1)[-1]
        if name in NORMS_WITH_STATISTICS or name == "register_buffer":
            return True
        owner = anatomy.classes.get(name)
        if owner is not None and name not in seen and depth < MAX_DEPTH:
            seen.add(name)
            if _makes_buffers(anatomy, owner, depth + 1, seen):
                return True
    return False


def _other_ranks_join(anatomy: Anatomy, call: cst.Call) -> bool:
    """The other ranks make the same call where rank 0 does not: in the `else:` of the rank
    test (`if rank == 0: dist.scatter(out, lst) else: dist.scatter(out)`), or under the
    opposite test in the same function (Hugging Face's and YOLOv5's barrier pair:
    `if local_rank not in [-1, 0]: dist.barrier()` ... `if local_rank == 0: dist.barrier()`)."""
    name = _last_name(call)
    function = anatomy.function_of(call)
    guard = anatomy.ranks.guard(call)
    if (
        isinstance(guard, cst.If)
        and guard.orelse is not None
        and anatomy.inside(call, guard.body)
        and any(_last_name(other) == name for other in walk(guard.orelse))
    ):
        return True
    for other in anatomy.calls:
        if other is call or _last_name(other) != name or anatomy.function_of(other) is not function:
            continue
        for ancestor in anatomy.ancestors(other):
            if ancestor is function:
                break
            if isinstance(ancestor, cst.If) and anatomy.inside(other, ancestor.body):
                test = anatomy.ranks.test(ancestor.test)
                if test is not None and test.polarity is Polarity.OTHERS:
                    return True
    return False


def _last_name(node: cst.CSTNode) -> str | None:
    if not isinstance(node, cst.Call):
        return None
    return (dotted(node.func) or "").rsplit(".", 1)[-1] or None
