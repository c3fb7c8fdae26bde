"""DDP104: a checkpoint or file write that every rank runs."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.effects import FILE_WRITES, path_names, root_names, with_names
from ddpify.analysis.ranks import Polarity
from ddpify.analysis.tree import dotted, is_name, walk
from ddpify.emit import rank_zero_test
from ddpify.rule import CheckContext, CheckRule, Example, Severity


class UnguardedWrite(CheckRule):
    """
    ## What it does
    In a distributed script, finds `torch.save`, `save_pretrained` and other file writes
    that run on every rank. A write is on rank 0 only under a test of the rank, however it is
    spelled (`rank == 0`, `local_rank in [-1, 0]`, a flag such as `master_process`, a helper
    such as `is_main_process()`, the `else:` of `rank != 0`), after an early `if rank != 0:
    return`, in a function decorated to run on rank 0 (`@master_only`) or whose every call is
    guarded, or through an object made on rank 0 only (`if saver is not None:`). Functions
    started by `mp.spawn` run on every rank. Per-rank files (a name that reads the rank) are
    left alone.

    ## Why is this bad?
    N processes write the same file at the same time: at best wasted work, at worst a
    corrupt checkpoint.
    """

    code = "DDP104"
    name = "unguarded-write"
    message = "file written by every rank: guard it with `if dist.get_rank() == 0:`"
    severity = Severity.WARNING
    selection = (
        "processes writing one path race: the file can be torn or hold another rank's "
        "numbers. Private paths (with the rank in them, temporary folders) are not "
        "flagged."
    )
    requires = ("init_process_group",)
    fix_safety = """
        Safe: the fix guards the write, and the statements right after it that use the same
        path (`os.replace(tmp, path)`), with the global rank (`not dist.is_initialized() or
        dist.get_rank() == 0` when the script can also run without a process group). No fix
        is offered when one of those statements runs a collective or a forward pass.
    """
    valid = (
        # YOLOv5: hyperparameter evolution is ruled out under DDP next to the set-up.
        """
        import torch.distributed as dist

        if LOCAL_RANK != -1:
            assert not opt.evolve, "--evolve is not compatible with DDP"
            dist.init_process_group("nccl")
        if not opt.evolve:
            train(opt)
        else:
            with open("evolve_population.yaml", "w") as f:
                f.write(population)
        """,
        # detectron2: the other ranks wait while rank 0 creates the file if it is missing;
        # then they find it and skip the write.
        """
        import json
        import os

        import torch.distributed as dist

        def build_cache(path):
            if get_local_rank() != 0:
                dist.barrier()
            if not os.path.exists(path):
                with open(path, "w") as f:
                    json.dump(index, f)
            if get_local_rank() == 0:
                dist.barrier()

        dist.init_process_group("gloo")
        build_cache("cache.json")
        """,
        """
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")


        def save(model):
            torch.save(model.module.state_dict(), "model.pt")


        if dist.get_rank() == 0:
            save(model)
        torch.save(shard, f"shard_{dist.get_rank()}.pt")
        dist.destroy_process_group()
        """,
        # nanoGPT: a flag; the one-process run sets it to True.
        """
        import os
        import torch
        import torch.distributed as dist

        ddp = int(os.environ.get("RANK", -1)) != -1
        if ddp:
            dist.init_process_group("nccl")
            ddp_rank = int(os.environ["RANK"])
            master_process = ddp_rank == 0
        else:
            master_process = True
        if master_process:
            torch.save(checkpoint, "ckpt.pt")
        """,
        # torchvision's references: helpers in the script.
        """
        import torch
        import torch.distributed as dist


        def get_rank():
            return dist.get_rank() if dist.is_initialized() else 0


        def is_main_process():
            return get_rank() == 0


        def save_on_master(*args, **kwargs):
            if is_main_process():
                torch.save(*args, **kwargs)


        dist.init_process_group("gloo")
        save_on_master(model.module.state_dict(), "model.pt")
        """,
        # An early exit, and the `else` of a test for the other ranks.
        """
        import json
        import torch
        import torch.distributed as dist


        def save(state, path, rank):
            if rank != 0:
                return
            torch.save(state, path)


        def write_metrics(history):
            if not dist.get_rank() == 0:
                pass
            else:
                with open("metrics.json", "w") as f:
                    json.dump(history, f)


        dist.init_process_group("gloo")
        save(state, "model.pt", dist.get_rank())
        write_metrics(history)
        """,
        # mmcv's @master_only, and an object made on rank 0 only (timm's saver).
        """
        import functools
        import torch
        import torch.distributed as dist


        def master_only(func):
            @functools.wraps(func)
            def wrapper(*args, **kwargs):
                if dist.get_rank() == 0:
                    return func(*args, **kwargs)

            return wrapper


        @master_only
        def save_checkpoint(model, path):
            torch.save(model.module.state_dict(), path)


        class Saver:
            def save_checkpoint(self, state):
                torch.save(state, "last.pt")


        dist.init_process_group("gloo")
        save_checkpoint(model, "model.pt")
        saver = None
        if dist.get_rank() == 0:
            saver = Saver()
        if saver is not None:
            saver.save_checkpoint(state)
        """,
    )
    invalid = (
        Example(
            """
            import torch
            import torch.distributed as dist

            dist.init_process_group("gloo")
            torch.save(model.module.state_dict(), "model.pt")
            dist.destroy_process_group()
            """,
            """
            import torch
            import torch.distributed as dist

            dist.init_process_group("gloo")
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), "model.pt")
            dist.destroy_process_group()
            """,
        ),
        # A write then a rename: both move under the guard, or rank 1 renames nothing.
        Example(
            """
            import os
            import torch
            import torch.distributed as dist


            def worker(rank, world_size):
                dist.init_process_group("gloo", rank=rank, world_size=world_size)
                torch.save(state, "last.pt.tmp")
                os.replace("last.pt.tmp", "last.pt")
                print("saved")
                dist.destroy_process_group()


            torch.multiprocessing.spawn(worker, args=(2,), nprocs=2)
            """,
            """
            import os
            import torch
            import torch.distributed as dist


            def worker(rank, world_size):
                dist.init_process_group("gloo", rank=rank, world_size=world_size)
                if dist.get_rank() == 0:
                    torch.save(state, "last.pt.tmp")
                    os.replace("last.pt.tmp", "last.pt")
                print("saved")
                dist.destroy_process_group()


            torch.multiprocessing.spawn(worker, args=(2,), nprocs=2)
            """,
        ),
        # The script also runs as one process without a group: the guard must work there.
        Example(
            """
            import torch
            import torch.distributed as dist

            if distributed:
                dist.init_process_group("gloo")
            torch.save(model.state_dict(), "model.pt")
            if distributed:
                dist.destroy_process_group()
            """,
            """
            import torch
            import torch.distributed as dist

            if distributed:
                dist.init_process_group("gloo")
            if not dist.is_initialized() or dist.get_rank() == 0:
                torch.save(model.state_dict(), "model.pt")
            if distributed:
                dist.destroy_process_group()
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        if not anatomy.distributed.initialises_process_group:
            return
        init = anatomy.distributed.initialises_process_group[0]
        reported: list[cst.CSTNode] = []
        for node in anatomy.simple_statements:
            if anatomy.effects.of(node) not in FILE_WRITES or _per_rank(anatomy, node):
                continue
            if anatomy.effects.private(node) or not _writes_content(node):
                continue
            if any(anatomy.inside(node, outer) for outer in reported):
                continue  # the `with open(...)` around it is reported already
            function = anatomy.function_of(node)
            if function is None and not anatomy.precedes(init, node):
                continue
            if (
                function is not None
                and not anatomy.graph.call_sites(function)
                and function not in anatomy.distributed.spawned_functions
            ):
                continue  # never called here: cannot tell on which ranks it runs
            if function is not None and _reported_at_its_calls(anatomy, function):
                continue
            if anatomy.ranks.guard(node) is not None or _rank_zero_first(anatomy, node):
                continue
            if _single_process_branch(anatomy, node):
                continue
            run = _statements_to_guard(anatomy, node)
            reported += [node, *run]  # the rename after a save is part of this finding
            ctx.report(node, fix=partial(_fix, statements=run) if run else None)


def _single_process_branch(anatomy: Anatomy, write: cst.CSTNode) -> bool:
    """The write runs on a branch the distributed set-up rules out: YOLOv5's `assert not
    opt.evolve, "--evolve is not compatible with DDP"` next to `init_process_group`, then the
    write under `if not opt.evolve: ... else:` (or `if opt.evolve:`)."""
    code = cst.Module([]).code_for_node
    ruled_out = set()
    for init in anatomy.distributed.initialises_process_group:
        block = anatomy.parent(anatomy.statement_of(init))
        for statement in getattr(block, "body", ()):
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                test = small.test if isinstance(small, cst.Assert) else None
                if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                    ruled_out.add(code(test.expression))
    if not ruled_out:
        return False
    previous: cst.CSTNode = write
    for ancestor in anatomy.ancestors(write):
        if isinstance(ancestor, cst.If):
            test = ancestor.test
            negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
            if previous is ancestor.body and code(test) in ruled_out:
                return True
            if (
                negated
                and previous is ancestor.orelse
                and isinstance(test, cst.UnaryOperation)
                and code(test.expression) in ruled_out
            ):
                return True
        previous = ancestor
    return False


def _rank_zero_first(anatomy: Anatomy, write: cst.CSTNode) -> bool:
    """detectron2's "rank 0 first" pair: the other ranks wait at a barrier
    (`if get_local_rank() != 0: synchronize()`) while rank 0 creates the file if it is
    missing (`if not os.path.exists(path):`), then find it there and skip the write."""
    missing = None
    for ancestor in anatomy.ancestors(write):
        if isinstance(ancestor, cst.If) and _tests_missing(ancestor.test):
            missing = ancestor
            break
    if missing is None:
        return False
    for ancestor in [missing, *anatomy.ancestors(missing)]:
        if not isinstance(ancestor, cst.BaseStatement) or isinstance(
            anatomy.parent(ancestor), cst.If
        ):
            continue
        holder = anatomy.parent(ancestor)
        if not isinstance(holder, cst.IndentedBlock | cst.Module):
            continue
        for sibling in holder.body[: list(holder.body).index(ancestor)]:
            if not isinstance(sibling, cst.If) or sibling.orelse is not None:
                continue
            test = anatomy.ranks.test(sibling.test)
            if test is not None and test.polarity is Polarity.OTHERS and _waits(anatomy, sibling):
                return True
    return False


def _tests_missing(test: cst.BaseExpression) -> bool:
    """`not os.path.exists(path)`, `not path.is_file()`, ..."""
    if not (isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)):
        return False
    call = test.expression
    name = dotted(call.func) if isinstance(call, cst.Call) else None
    return (name or "").rsplit(".", 1)[-1] in {"exists", "isfile", "is_file", "isdir", "is_dir"}


def _waits(anatomy: Anatomy, guard: cst.If) -> bool:
    """The block waits for the other ranks (a barrier, here or in a function it calls)."""
    return anatomy.graph.reaches(
        guard.body,
        lambda node: (
            isinstance(node, cst.Call)
            and (dotted(node.func) or "").rsplit(".", 1)[-1] in {"barrier", "monitored_barrier"}
        ),
    )


def _reported_at_its_calls(anatomy: Anatomy, function: cst.FunctionDef) -> bool:
    """Every call of `function` is itself a write (`saver.save_checkpoint(...)`): the finding
    and its fix belong there, not in the body too."""
    sites = anatomy.graph.call_sites(function)
    return bool(sites) and all(
        anatomy.effects.of(anatomy.statement_of(site)) in FILE_WRITES for site in sites
    )


def _per_rank(anatomy: Anatomy, statement: cst.CSTNode) -> bool:
    """A file per rank: its name reads the rank (`f"shard_{rank}.pt"`), maybe through a
    name the path is computed from (DiT's `index = i * world_size + rank + total`, then
    `f"{index:06d}.png"`)."""

    def reads_rank(node: cst.CSTNode) -> bool:
        return any(
            isinstance(inner, cst.Name | cst.Attribute | cst.Call)
            and anatomy.ranks.rank_kind(inner) is not None
            for inner in walk(node)
        )

    if reads_rank(statement):
        return True
    scope = anatomy.function_of(statement)
    return any(
        reads_rank(value)
        for name in path_names(statement)
        if name.isidentifier()
        for value, _ in anatomy.values.values_of(name, scope)
    )


def _writes_content(write: cst.CSTNode) -> bool:
    """`with open(path, "w") as f:` writes through `f`; opened only to hold a lock
    (`fcntl.flock(f, ...)`), it writes nothing."""
    if not isinstance(write, cst.With):
        return True
    handles = set(with_names(write))
    if not handles:
        return True
    for node in walk(write.body):
        if not isinstance(node, cst.Call):
            continue
        func = node.func
        if isinstance(func, cst.Attribute) and is_name(func.value, *handles):
            if func.attr.value in {"write", "writelines", "truncate"}:
                return True
        elif any(is_name(arg.value, *handles) for arg in node.args) and not (
            dotted(func) or ""
        ).startswith("fcntl."):
            return True
    return False


def _statements_to_guard(anatomy: Anatomy, write: cst.CSTNode) -> list[cst.BaseStatement]:
    """The write and the statements right after it that use the path it wrote
    (`os.replace(tmp, path)` after `torch.save(state, tmp)`): guarding the write alone would
    leave them failing on the other ranks. Empty when one of them must run on every rank (a
    collective, a forward pass): then there is no safe fix."""
    paths = path_names(write)
    assert isinstance(write, cst.BaseStatement)
    body = list(anatomy.body_of(write))
    end = start = body.index(write)
    while end + 1 < len(body) and paths & root_names(body[end + 1]):
        end += 1
    run = body[start : end + 1]
    wrapped = set(anatomy.distributed.ddp_wraps)
    for statement in run:
        for node in walk(statement):
            if isinstance(node, cst.Call) and (
                anatomy.distributed.is_collective(node) or dotted(node.func) in wrapped
            ):
                return []
    return run


def _fix(ctx: CheckContext, statements: list[cst.BaseStatement]) -> None:
    ctx.add_import("torch.distributed", asname="dist")
    for statement in statements:
        ctx.plan.guard(statement, rank_zero_test(ctx.anatomy.distributed.group_is_optional))
