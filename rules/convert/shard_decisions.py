"""DDP010: a decision taken on a value computed from this process's shard is refused."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.tree import child_nodes, dotted, is_method_call, walk
from ddpify.rule import ConvertContext, ConvertRule, Example

PLATEAU = "torch.optim.lr_scheduler.ReduceLROnPlateau"


class ShardDecisions(ConvertRule):
    """
    ## What it does
    Finds a `ReduceLROnPlateau` stepped on a value the training loop accumulates from its
    batches (`scheduler.step(epoch_loss)` where `running_loss += loss.item()` in the batch
    loop) and refuses the conversion, naming the value. It refuses the same way a
    `break`, `continue` or `return` in a training loop (early stopping on the training loss,
    a step skipped on a NaN loss) or a `while` loop's test decided on such a value. Decided
    on a value computed from a loader every process reads whole (the validation loss), on a
    step counter or on the index `enumerate` gives, they are left as they are.

    ## Why is this bad?
    Under DDP each process sums the loss of its own shard: the values differ between
    processes, so each decides on its own when the plateau is reached, the learning rates
    part, and the replicas drift apart while the run still exits 0. A process that leaves
    the loop (or skips a backward) alone leaves the others waiting in an all-reduce it never
    joins: the job hangs. The value must be all-reduced before the decision
    (`dist.all_reduce(t, op=dist.ReduceOp.AVG)`).
    """

    code = "DDP010"
    step = 10
    name = "shard-decisions"
    message = "decisions on values computed from one process's shard are refused"
    fix_safety = "No fix: the conversion stops and says which value to all-reduce."
    examples = (
        # The validation loader is read whole by every process: the same value everywhere.
        Example(
            """
            import torch

            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            for epoch in range(epochs):
                for x, y in train_loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                val_loss = 0.0
                for x, y in val_loader:
                    val_loss += model(x).sum().item()
                scheduler.step(val_loss)
            """
        ),
        # A dry run's `break` on the batch index: every process counts the same batches.
        Example(
            """
            import torch

            for epoch in range(epochs):
                for i, (x, y) in enumerate(train_loader):
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    if dry_run and i == 10:
                        break
            """
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        plateaus = {
            name
            for assign in anatomy.assigns
            if isinstance(assign.value, cst.Call) and anatomy.is_call_to(assign.value, (PLATEAU,))
            for target in assign.targets
            if (name := dotted(target.target)) is not None
        }
        for call in anatomy.calls:
            if not is_method_call(call, "step") or not call.args:
                continue
            assert isinstance(call.func, cst.Attribute)
            if dotted(call.func.value) not in plateaus:
                continue
            local = _shard_value(anatomy, call.args[0].value, anatomy.function_of(call))
            if local is not None:
                ctx.cannot(
                    call,
                    f"ReduceLROnPlateau steps on `{local}`, summed from this process's "
                    "batches only: the processes would cut the learning rate at different "
                    "epochs; all-reduce it first (dist.all_reduce) by hand",
                    blocking=True,
                )
        for test, exit_ in _loop_exits(anatomy):
            local = _shard_value(anatomy, test, anatomy.function_of(test))
            if local is None:
                continue
            what = (
                "skip a step"
                if exit_ == "continue"
                else "go round the loop once more"
                if exit_ == "while"
                else "leave the training loop"
            )
            ctx.cannot(
                test,
                f"`{exit_}` decided on `{local}`, computed from this process's batches only: "
                f"one process would {what} while the others wait for it in an all-reduce "
                "(a hang); all-reduce the value (or the flag) before the test, by hand",
                blocking=True,
            )


def _loop_exits(anatomy: Anatomy) -> list[tuple[cst.BaseExpression, str]]:
    """Tests that decide whether a process leaves a training loop or skips a step: the test
    of an `if` in a training loop whose branch breaks, continues or returns (early stopping,
    a NaN skip), and the test of a `while` training loop."""
    loops: list[cst.For | cst.While] = []
    for train_loop in anatomy.script.train_loops:
        loops.append(train_loop.batch_loop)
        if train_loop.epoch_loop is not None:
            loops.append(train_loop.epoch_loop)
    found: list[tuple[cst.BaseExpression, str]] = []
    seen: set[int] = set()
    for loop in loops:
        if isinstance(loop, cst.While) and id(loop.test) not in seen:
            seen.add(id(loop.test))
            found.append((loop.test, "while"))
        for node in walk(loop.body):
            if not isinstance(node, cst.If) or id(node.test) in seen:
                continue
            exit_ = _exit_in(node)
            if exit_ is not None:
                seen.add(id(node.test))
                found.append((node.test, exit_))
    return found


def _exit_in(branch: cst.If) -> str | None:
    """`break`, `continue` or `return` in the `if`'s own branches (not inside an inner loop
    or function, where it would leave that one)."""
    stack: list[cst.CSTNode] = [branch.body]
    if branch.orelse is not None:
        stack.append(branch.orelse)
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Break):
            return "break"
        if isinstance(node, cst.Continue):
            return "continue"
        if isinstance(node, cst.Return):
            return "return"
        if isinstance(node, cst.For | cst.While | cst.FunctionDef | cst.ClassDef | cst.Lambda):
            continue
        stack.extend(child_nodes(node))
    return None


def _shard_value(
    anatomy: Anatomy, expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int = 0
) -> str | None:
    """The name in `expr` whose value comes from this process's batches, if any: summed
    over the training batch loop (`running_loss += loss.item()`) or assigned in it from the
    batch (`loss = criterion(model(x), y)`), followed through the values the names in `expr`
    are given."""
    if depth > 2:
        return None
    batch_loops = [loop.batch_loop for loop in anatomy.script.train_loops]
    local = _local_in_loops(anatomy, tuple(batch_loops))
    for node in walk(expr):
        name = dotted(node) if isinstance(node, cst.Name | cst.Attribute) else None
        if name is None:
            continue
        if any(name in names for loop, names in local if _visible(anatomy, loop, scope)):
            return name
        if isinstance(node, cst.Attribute):
            continue
        for value, where in anatomy.values.values_of(name, scope):
            if _shard_value(anatomy, value, where, depth + 1) is not None:
                return name
    return None


def _enumerated(loop: cst.For) -> bool:
    """`enumerate(loader)`, also inside a progress bar: `tqdm(enumerate(loader))`."""
    node: cst.BaseExpression = loop.iter
    for _ in range(3):
        if not isinstance(node, cst.Call):
            return False
        if dotted(node.func) == "enumerate":
            return True
        if not node.args:
            return False
        node = node.args[0].value
    return False


def _visible(anatomy: Anatomy, loop: cst.CSTNode, scope: cst.FunctionDef | None) -> bool:
    return anatomy.function_of(loop) is scope


def _local_in_loops(anatomy: Anatomy, loops: tuple[cst.For, ...]) -> list[tuple[cst.For, set[str]]]:
    """For each training batch loop, the names it gives values drawn from the batch: its
    targets, and, in order, what is assigned from them or from `.item()`, or summed in it.
    A counter (`step += 1`) is the same in every process and is not one of them."""
    found = []
    for loop in loops:
        target = loop.target
        if _enumerated(loop) and isinstance(target, cst.Tuple) and target.elements:
            # `for i, (x, y) in enumerate(loader)`: the batch, not the count
            target = cst.Tuple(list(target.elements[1:]))
        names = {dotted(node) for node in walk(target)} - {None}
        for node in walk(loop.body):
            if isinstance(node, cst.Assign):
                targets = [t.target for t in node.targets]
            elif isinstance(node, cst.AugAssign | cst.AnnAssign):
                targets = [node.target]
            else:
                continue
            value = node.value
            if value is None or isinstance(value, cst.Integer | cst.Float):
                continue
            if any(
                (dotted(inner) in names) or is_method_call(inner, "item") for inner in walk(value)
            ) or isinstance(node, cst.AugAssign):
                for target in targets:
                    names.update(dotted(inner) for inner in walk(target) if dotted(inner))
        found.append((loop, {name for name in names if name}))
    return found
