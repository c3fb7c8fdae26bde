"""DDP008: with `--launcher spawn`, the script starts its own processes with mp.spawn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar, cast

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.tree import walk
from ddpify.emit import COLLECT_CYCLES, statement, statements, unindented_blank_lines
from ddpify.options import ConvertOptions, Launcher
from ddpify.rule import ConvertContext, ConvertRule, Example

StatementT = TypeVar("StatementT", bound=cst.SimpleStatementLine | cst.BaseCompoundStatement)

WORKER = """\
def {worker}(local_rank, world_size, port{params}):
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
{device}    dist.init_process_group(
        "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo",
        init_method=f"tcp://127.0.0.1:{{port}}",
        rank=local_rank,
        world_size=world_size,
    )
    try:
        pass
    finally:
        {collect}dist.destroy_process_group()
"""
FREE_PORT = '''\
def free_port():
    """A TCP port nobody listens on, where the processes meet."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
'''
SPAWN = """\
world_size = max(torch.cuda.device_count(), 1)  # a process per GPU; one on a CPU
mp.spawn({worker}, args=(world_size, free_port(){args}), nprocs=world_size)
"""
DEVICE = '    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")\n'
GUARD = 'if __name__ == "__main__":\n    pass\n'


class SpawnEntry(ConvertRule):
    """
    ## What it does
    With `--launcher spawn`, the script launches itself: `python train.py` starts one process
    per visible GPU (one on a machine without) with `torch.multiprocessing.spawn`. Each
    process pins its GPU, joins a process group at a free port chosen at run time, runs the
    training and destroys the group. Module-level training code moves into a function, so
    the spawned children, which import the script, do not run it again; values the
    `__main__` block computes first (parsed arguments, say) are passed to the workers.

    Spawn runs on one machine; for several, use torchrun (the default).

    ## Why is this bad?
    Launched with `mp.spawn`, code at module level runs again in every child, and a
    hard-coded port collides with any other job on the machine.
    """

    code = "DDP008"
    step = 8
    name = "spawn-entry"
    message = "with --launcher spawn, start one process per GPU with mp.spawn"
    fix_safety = """
        A script whose functions read globals that only the `__main__` block or the
        module-level training code sets is reported and not converted: the spawned
        processes would not have them.
    """
    examples = (
        Example(
            """
            import torch


            def main(epochs):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()


            if __name__ == "__main__":
                epochs = 3
                main(epochs)
            """,
            '''
            import torch
            import gc
            import socket
            import torch.distributed as dist
            import torch.multiprocessing as mp


            def main(epochs):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()


            def worker(local_rank, world_size, port, epochs):
                if torch.cuda.is_available():
                    torch.cuda.set_device(local_rank)
                dist.init_process_group(
                    "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo",
                    init_method=f"tcp://127.0.0.1:{port}",
                    rank=local_rank,
                    world_size=world_size,
                )
                try:
                    main(epochs)
                finally:
                    gc.collect()  # free DDP models left in reference cycles first
                    dist.destroy_process_group()


            def free_port():
                """A TCP port nobody listens on, where the processes meet."""
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", 0))
                    return sock.getsockname()[1]


            if __name__ == "__main__":
                epochs = 3
                world_size = max(torch.cuda.device_count(), 1)  # a process per GPU; one on a CPU
                mp.spawn(worker, args=(world_size, free_port(), epochs), nprocs=world_size)
            ''',
            ConvertOptions(launcher=Launcher.SPAWN),
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        if ctx.options.launcher is not Launcher.SPAWN:
            return
        anatomy = ctx.anatomy
        entry = anatomy.script.entry
        assert entry is not None
        ctx.add_import("socket")
        ctx.add_import("torch")
        ctx.add_import("torch.distributed", asname="dist")
        ctx.add_import("torch.multiprocessing", asname="mp")
        if anatomy.script.trains_at_module_level:
            self._script(ctx)
        else:
            self._entry_call(ctx)

    def _script(self, ctx: ConvertContext) -> None:
        """Module-level training: it all moves into the worker."""
        anatomy = ctx.anatomy
        entry = anatomy.script.entry
        assert entry is not None
        if anatomy.script.main_guard is not None:
            ctx.cannot(
                anatomy.script.main_guard,
                "module-level training beside a __main__ block",
                blocking=True,
            )
            return
        anchor = entry.setup_after
        moved = [
            s
            for s in anatomy.module.body
            if (anchor is None or anatomy.precedes(anchor, s))
            and s is not anchor
            and not isinstance(s, cst.FunctionDef | cst.ClassDef)
            and not _is_import(s)
        ]
        if _read_by_functions(ctx, _assigned(moved), anatomy.module.body, moved):
            return
        worker = anatomy.free_name(("main", "train", "run"))
        stash: list[cst.BaseStatement] = []
        for node in moved:
            ctx.plan.move(node, stash)
        ctx.plan.append_to_module(
            [
                lambda: _worker(worker, [], stash, "device" not in anatomy.module_names),
                lambda: _spaced(cst.ensure_type(statement(FREE_PORT), cst.FunctionDef)),
                lambda: _guard(statements(SPAWN.format(worker=worker, args=""))),
            ]
        )
        ctx.changed(moved[0], f"module-level training moved into `{worker}()` for mp.spawn")

    def _entry_call(self, ctx: ConvertContext) -> None:
        """`main()` (or similar) under `if __name__ == "__main__":` runs in each worker."""
        anatomy = ctx.anatomy
        entry = anatomy.script.entry
        assert entry is not None
        block = list(anatomy.body_of(entry.body[0]))
        earlier = block[: block.index(entry.body[0])]
        passed = [name for name in _assigned(earlier) if _reads(entry.body, name)]
        guard_only = _assigned(earlier) if not entry.at_module_level else []
        if _read_by_functions(ctx, guard_only, anatomy.module.body, []):
            return
        worker = anatomy.free_name(("worker", "run_worker", "ddp_worker"))
        ctx.add_import("gc")
        args = "".join(f", {name}" for name in passed)
        stash: list[cst.BaseStatement] = []

        def spawn(body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
            stash.extend(body)
            launch = statements(SPAWN.format(worker=worker, args=args))
            if entry.at_module_level:
                return [
                    _worker(worker, passed, stash, collect=True),
                    _spaced(cst.ensure_type(statement(FREE_PORT), cst.FunctionDef)),
                    _guard(launch),
                ]
            return launch

        ctx.plan.wrap_rest_of_block(entry.body[0], spawn)
        if not entry.at_module_level:
            guard = anatomy.script.main_guard
            assert guard is not None
            ctx.plan.insert_before(
                guard,
                [
                    lambda: _worker(worker, passed, stash, collect=True),
                    lambda: _spaced(cst.ensure_type(statement(FREE_PORT), cst.FunctionDef)),
                ],
                above_comments=True,
            )
        ctx.changed(entry.body[0], f"runs in `{worker}` in each process started by mp.spawn")


def _worker(
    name: str,
    passed: Sequence[str],
    body: list[cst.BaseStatement],
    device: bool = False,
    collect: bool = False,
) -> cst.FunctionDef:
    """The spawned function around `body`; `collect` when `body` calls the function that makes
    the model, whose DDP wrapper may outlive the call in a reference cycle."""
    params = "".join(f", {p}" for p in passed)
    code = WORKER.format(
        worker=name,
        params=params,
        device=DEVICE if device else "",
        collect=COLLECT_CYCLES + "        " if collect else "",
    )
    function = cst.ensure_type(statement(code), cst.FunctionDef)
    assert isinstance(function, cst.FunctionDef)
    try_statement = function.body.body[-1]
    assert isinstance(try_statement, cst.Try)
    moved = [_indented(node, first=index == 0) for index, node in enumerate(body)]
    new_try = try_statement.with_changes(body=try_statement.body.with_changes(body=moved))
    body_block = function.body.with_changes(body=[*function.body.body[:-1], new_try])
    return _spaced(function.with_changes(body=body_block))


def _indented(node: cst.BaseStatement, first: bool) -> cst.BaseStatement:
    """A statement moved into a block: its blank lines stay blank (no indentation), and the
    first keeps only its comments."""
    node = unindented_blank_lines(node)
    assert isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement)
    if first:
        return node.with_changes(
            leading_lines=[line for line in node.leading_lines if line.comment is not None]
        )
    return node


def _spaced(node: StatementT) -> StatementT:
    """Two blank lines above, as between top-level definitions."""
    return cast(StatementT, node.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))


def _guard(body: list[cst.BaseStatement]) -> cst.If:
    guard = statement(GUARD)
    assert isinstance(guard, cst.If) and isinstance(guard.body, cst.IndentedBlock)
    new = guard.with_changes(body=guard.body.with_changes(body=body))
    return new.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])


def _is_import(node: cst.BaseStatement) -> bool:
    return isinstance(node, cst.SimpleStatementLine) and all(
        isinstance(part, cst.Import | cst.ImportFrom) for part in node.body
    )


def _assigned(block: Sequence[cst.BaseStatement]) -> list[str]:
    """Names the statements bind, in order of first binding."""
    names: dict[str, None] = {}
    for node in (n for s in block for n in walk(s)):
        targets: list[cst.CSTNode] = []
        if isinstance(node, cst.AssignTarget | cst.AugAssign | cst.AnnAssign | cst.For):
            targets = [node.target]
        elif isinstance(node, cst.AsName):
            targets = [node.name]
        elif isinstance(node, cst.ImportAlias) and node.asname is None:
            names.setdefault(cst.Module([]).code_for_node(node.name).split(".")[0])
        for target in targets:
            for name in walk(target):
                if isinstance(name, cst.Name):
                    names.setdefault(name.value)
    return list(names)


def _reads(block: Sequence[cst.BaseStatement], name: str) -> bool:
    return any(isinstance(n, cst.Name) and n.value == name for s in block for n in walk(s))


def _read_by_functions(
    ctx: ConvertContext,
    names: Sequence[str],
    body: Sequence[cst.BaseStatement],
    moved: Sequence[cst.BaseStatement],
) -> bool:
    """Report (and return True) when a function or class reads one of `names` as a global."""
    anatomy: Anatomy = ctx.anatomy
    wanted = set(names)
    for statement_ in body:
        if statement_ in moved:
            continue
        for node in walk(statement_):
            if not isinstance(node, cst.FunctionDef):
                continue
            local = set(_assigned([node])) | anatomy.graph.parameters_of(node)
            for name in walk(node.body):
                if isinstance(name, cst.Name) and name.value in wanted - local:
                    ctx.cannot(
                        name,
                        f"`{node.name.value}` reads the global `{name.value}`, which the "
                        "spawned processes would not have: use torchrun, or pass it in",
                        blocking=True,
                    )
                    return True
    return False
