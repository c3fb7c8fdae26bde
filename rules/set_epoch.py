"""DDP101: a DistributedSampler whose set_epoch is not called at the start of every epoch."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.anatomy import SAMPLER, Anatomy, TrainLoop, call_arg, dotted, strip_iteration
from ddpify.fixes import insert_set_epoch, set_epoch_problem
from ddpify.lint import CheckContext
from ddpify.rule import Example, Rule
from ddpify.tree import is_method_call, walk


class SamplerSetEpoch(Rule):
    """
    ## What it does
    Finds a training loader with a `DistributedSampler` (as `sampler=`, or inside a
    `batch_sampler=`) whose `set_epoch(epoch)` is never called in the epoch loop, or is
    called only after the epoch's iterator over the loader was created. The epoch loop is
    followed through the script's own functions and methods, resume loops included.

    ## Why is this bad?
    The sampler seeds its shuffle with the epoch number. Without `set_epoch`, every epoch
    sees the same order on every rank; called after `iter(loader)`, it takes effect one
    epoch late.
    """

    code = "DDP101"
    name = "sampler-set-epoch"
    message = "DistributedSampler without set_epoch(epoch) at the start of each epoch"
    requires = ("DistributedSampler", "backward")
    fix_safety = (
        "Safe: the fix inserts `<loader>.sampler.set_epoch(epoch)` as the epoch's first statement."
    )
    valid = (
        """
        from torch.utils.data import DataLoader, DistributedSampler

        loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
        for epoch in range(start, epochs):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
        """,
    )
    invalid = (
        Example(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
            for epoch in range(epochs):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
            """
            from torch.utils.data import DataLoader, DistributedSampler

            loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
            for epoch in range(epochs):
                loader.sampler.set_epoch(epoch)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        for loop in anatomy.train_loops:
            if loop.loader is None or loop.epoch_loop is None:
                continue
            via = _sampler_path(anatomy, loop.loader.call)
            if via is None:
                continue
            status, where = _set_epoch_status(anatomy, loop)
            if status == "late":
                assert where is not None
                ctx.report(where, "set_epoch runs after this epoch's iterator was created")
            elif status == "missing":
                fix = partial(_fix, loop=loop, via=via) if not set_epoch_problem(loop) else None
                ctx.report(loop.epoch_loop, fix=fix)


def _fix(ctx: CheckContext, loop: TrainLoop, via: str) -> None:
    insert_set_epoch(ctx.plan, loop, via)


def _sampler_path(anatomy: Anatomy, loader: cst.Call) -> str | None:
    """How the loader reaches its DistributedSampler: `sampler`, `batch_sampler.sampler`."""
    for keyword, path in (("sampler", "sampler"), ("batch_sampler", "batch_sampler.sampler")):
        arg = call_arg(loader, None, keyword)
        if arg is None:
            continue
        value = arg.value
        name = dotted(value)
        candidates = [value]
        if name:
            candidates += anatomy.assignments(name, anatomy.function_of(loader))
            candidates += anatomy.assignments(name, None)
        for candidate in candidates:
            if any(
                isinstance(node, cst.Call) and anatomy.is_call_to(node, SAMPLER)
                for node in _walk_calls(candidate)
            ):
                return path
    return None


def _walk_calls(node: cst.CSTNode) -> list[cst.CSTNode]:
    return [inner for inner in walk(node) if isinstance(inner, cst.Call)]


def _set_epoch_status(anatomy: Anatomy, loop: TrainLoop) -> tuple[str, cst.CSTNode | None]:
    """ "ok", "late" (with the call) or "missing"."""
    assert loop.epoch_loop is not None
    # Where each epoch reaches the loader: the batch loop, then the calls leading to it.
    markers: list[cst.CSTNode] = [loop.batch_loop]
    for node, kind in anatomy.loops_around(loop.batch_loop):
        if node is loop.epoch_loop:
            break
        if kind == "call":
            markers.append(node)
    iterated = dotted(strip_iteration(loop.batch_loop.iter))
    late: cst.CSTNode | None = None
    for call in anatomy.calls:
        if not is_method_call(call, "set_epoch") or anatomy.inside(call, loop.batch_loop):
            continue
        scope = anatomy.function_of(call)
        for marker in markers:
            if anatomy.function_of(marker) is not scope:
                continue
            if scope is anatomy.function_of(loop.epoch_loop) and not anatomy.inside(
                call, loop.epoch_loop
            ):
                continue
            if anatomy.precedes(call, marker) and not _iterated_before(anatomy, call, iterated):
                return "ok", None
            late = call
    if late is None:
        for call in anatomy.calls:
            if is_method_call(call, "set_epoch") and anatomy.inside(call, loop.epoch_loop):
                late = call
    return ("late", late) if late is not None else ("missing", None)


def _iterated_before(anatomy: Anatomy, call: cst.Call, iterated: str | None) -> bool:
    """An `iter(loader)` in the same function before `set_epoch`: that iterator is stale."""
    if iterated is None:
        return False
    scope = anatomy.function_of(call)
    return any(
        dotted(other.func) == "iter"
        and other.args
        and dotted(other.args[0].value) == iterated
        and anatomy.function_of(other) is scope
        and anatomy.precedes(other, call)
        for other in anatomy.calls
    )
