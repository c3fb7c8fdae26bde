"""DDP010: a decision taken on a value computed from this process's shard is refused."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.tree import dotted, is_method_call, walk
from ddpify.rule import ConvertContext, ConvertRule, Example

PLATEAU = "torch.optim.lr_scheduler.ReduceLROnPlateau"


class ShardDecisions(ConvertRule):
    """
    ## What it does
    Finds a `ReduceLROnPlateau` stepped on a value the training loop accumulates from its
    batches (`scheduler.step(epoch_loss)` where `running_loss += loss.item()` in the batch
    loop) and refuses the conversion, naming the value. Stepped on a value computed from a
    loader every process reads whole (the validation loss), the scheduler is left as it is.

    ## Why is this bad?
    Under DDP each process sums the loss of its own shard: the values differ between
    processes, so each decides on its own when the plateau is reached, the learning rates
    part, and the replicas drift apart while the run still exits 0. The value must be
    all-reduced before the decision (`dist.all_reduce(t, op=dist.ReduceOp.AVG)`).
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
        if not plateaus:
            return
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


def _shard_value(
    anatomy: Anatomy, expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int = 0
) -> str | None:
    """The name in `expr` whose value the training batch loop accumulates, if any (followed
    through the values the names in `expr` are given)."""
    if depth > 2:
        return None
    batch_loops = [loop.batch_loop for loop in anatomy.script.train_loops]
    for node in walk(expr):
        name = dotted(node) if isinstance(node, cst.Name) else None
        if name is None:
            continue
        for assign in walk(scope or anatomy.module):
            # Summed over the batches (`running_loss += loss.item()`); a value assigned in
            # the loop (`val_score = evaluate(model, val_loader)`) may well be global.
            targets = [assign.target] if isinstance(assign, cst.AugAssign) else []
            if any(dotted(target) == name for target in targets) and any(
                anatomy.inside(assign, loop) for loop in batch_loops
            ):
                return name
        for value, where in anatomy.values.values_of(name, scope):
            if _shard_value(anatomy, value, where, depth + 1) is not None:
                return name
    return None
