"""DDP124: `requires_grad` of the wrapped model's parameters changed after the DDP wrap."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.tree import call_arg, dotted, is_attribute, is_name, walk
from ddpify.rule import CheckContext, CheckRule, Example

# Calls of the wrapped model (or a part of it) that yield its parameters.
PARAMETER_CALLS = ("parameters", "named_parameters")


class RequiresGradAfterWrap(CheckRule):
    """
    ## What it does
    Finds parameters of the DDP-wrapped model frozen or unfrozen after the wrap:
    `for p in model.module.backbone.parameters(): p.requires_grad = True`,
    `model.module.head.requires_grad_(False)`, where `model` holds the wrapper. Freezing is
    not reported when a wrap passes `find_unused_parameters=True` (or `static_graph=True`).

    ## Why is this bad?
    DDP decides when it is built which parameters it averages: those that require a
    gradient then. A parameter unfrozen afterwards is never all-reduced, so each process
    trains it on its own shard and the replicas drift apart, silently. A parameter frozen
    afterwards never gets the gradient DDP waits for: the next iteration fails with
    "Expected to have finished reduction in the prior iteration". Change `requires_grad`
    before the wrap, or wrap the model again after the change (a new `DDP(model.module)`
    for the second stage).
    """

    code = "DDP124"
    name = "requires-grad-after-wrap"
    message = (
        "requires_grad changed after the DDP wrap: DDP averages only the parameters that "
        "required grad when it was built; wrap again after the change"
    )
    requires = ("DistributedDataParallel", "requires_grad")
    selection = (
        "unfreezing after the wrap trains those parameters apart in every process (silently); "
        "freezing after it fails at the next step."
    )
    valid = (
        """
        from torch.nn.parallel import DistributedDataParallel as DDP

        for p in model.backbone.parameters():
            p.requires_grad = False
        model = DDP(model)
        """,
        # Wrapped again after the change: the second stage's DDP knows the parameters.
        """
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
        train(model)
        model = model.module
        for p in model.backbone.parameters():
            p.requires_grad = True
        model = DDP(model)
        """,
        # Freezing with find_unused_parameters: DDP tolerates the missing gradients.
        """
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, find_unused_parameters=True)
        model.module.backbone.requires_grad_(False)
        """,
    )
    invalid = (
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            for epoch in range(epochs):
                if epoch == unfreeze_at:
                    for p in model.module.backbone.parameters():
                        p.requires_grad = True
                train_one_epoch(model)
            """
        ),
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            model.module.backbone.requires_grad_(False)
            """
        ),
        # Set from a flag per stage (round-47 audit E runner_freeze: raised at step 2).
        Example(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model)
            for stage_epochs, freeze in [(1, True), (2, False)]:
                for p in model.module[0].parameters():
                    p.requires_grad = not freeze
                train(model, stage_epochs)
            """
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        tolerant = any(
            _true(call_arg(call, None, "find_unused_parameters"))
            or _true(call_arg(call, None, "static_graph"))
            for call in anatomy.distributed.ddp_wraps.values()
        )
        for node in walk(anatomy.module):
            changed = _changed(node)
            if changed is None:
                continue
            target, value = changed
            if value is False and tolerant:
                continue
            if _of_the_wrapped_model(anatomy, target, node):
                ctx.report(node)


def _true(arg: cst.Arg | None) -> bool:
    return arg is not None and isinstance(arg.value, cst.Name) and arg.value.value == "True"


def _changed(node: cst.CSTNode) -> tuple[cst.BaseExpression, bool] | None:
    """`x.requires_grad = <value>` or `x.requires_grad_(<value>)`: x, and whether it surely
    unfreezes (`True`). A computed value (`not freeze`, round-47 audit E runner_freeze) may
    freeze: a wrap that tolerates parameters without a gradient covers it."""
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        target = node.targets[0].target
        if is_attribute(target, "requires_grad") and isinstance(target, cst.Attribute):
            return target.value, is_name(node.value, "True")
    if isinstance(node, cst.Call) and is_attribute(node.func, "requires_grad_"):
        assert isinstance(node.func, cst.Attribute)
        given = node.args[0].value if node.args else cst.Name("True")
        return node.func.value, is_name(given, "True")
    return None


def _of_the_wrapped_model(anatomy: Anatomy, target: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """`target` is reached through the wrapper where `at` runs: `model.module.head`, or the
    variable of a loop over `model.module.backbone.parameters()`."""
    if isinstance(target, cst.Name):
        loop = next(
            (
                node
                for node in anatomy.ancestors(at)
                if isinstance(node, cst.For)
                and any(
                    isinstance(name, cst.Name) and name.value == target.value
                    for name in walk(node.target)
                )
            ),
            None,
        )
        if loop is None or not isinstance(loop.iter, cst.Call):
            return False
        if not is_attribute(loop.iter.func, *PARAMETER_CALLS):
            return False
        assert isinstance(loop.iter.func, cst.Attribute)
        target = loop.iter.func.value
    while isinstance(target, cst.Subscript):  # `model.module[0]`, `model.module.blocks[:4]`
        target = target.value
    name = dotted(target)
    while name:
        if anatomy.bindings.holds(name, at):
            return True
        name = name.rpartition(".")[0]
    return False
