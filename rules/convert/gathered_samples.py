"""DDP015: what the training batches leave in a list is gathered from every process."""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.script import TrainLoop
from ddpify.analysis.tree import is_method_call, is_name, walk
from ddpify.emit import statements
from ddpify.rule import ConvertContext, ConvertRule, Example

# Calls an item taken from the batch may go through and still be the batch's own data.
AS_DATA = {"tolist", "cpu", "detach", "numpy", "item", "clone", "list", "int", "str", "tuple"}

GATHER = """\
{shards} = [None] * dist.get_world_size()
dist.all_gather_object({shards}, {name})
{name} = [item for shard in {shards} for item in shard]
"""


class GatheredSamples(ConvertRule):
    """
    ## What it does
    A list made empty before a training batch loop and filled in it with the batch's own
    data (the ids of the misclassified examples, `errors.extend(batch["ids"][i] for i in
    wrong)`; the indices of hard examples) is gathered from every process right after the
    loop, when the script reads it after the loop: `dist.all_gather_object` collects each
    process's list, and every process continues with all of them, in rank order.

    ## Why is this bad?
    Each process reads its own share of the batches, so each list holds that process's
    items only: a file rank 0 writes from it lists half of them, and a loader built from it
    (hard-example mining, `Subset(train_set, hard_idx)`) differs per process, so each takes
    its own number of steps and DDP pairs up different steps, then hangs or dies (round-43
    audit A collate_hard).
    """

    code = "DDP015"
    step = 15
    name = "gathered-samples"
    message = "lists filled from the training batches are gathered from every process"
    fix_safety = """
        Safe: every process continues with every process's items, as the script did with
        all of its batches; their order is the processes' order, not the batches'. The
        samples DistributedSampler repeats to give each process as many (at most one per
        process) may appear twice. A list filled over several epochs, or from a loop that
        also reads other loaders, is left as it is.
    """
    examples = (
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=32, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                wrong_ids = []
                for x, y, ids in loader:
                    optimizer.zero_grad()
                    out = model(x)
                    criterion(out, y).backward()
                    optimizer.step()
                    wrong_ids.extend(ids[out.argmax(1) != y].tolist())
                print(len(wrong_ids), "misclassified")
            """,
            """
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist

            loader = DataLoader(train_set, batch_size=32, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                wrong_ids = []
                for x, y, ids in loader:
                    optimizer.zero_grad()
                    out = model(x)
                    criterion(out, y).backward()
                    optimizer.step()
                    wrong_ids.extend(ids[out.argmax(1) != y].tolist())
                shards = [None] * dist.get_world_size()
                dist.all_gather_object(shards, wrong_ids)
                wrong_ids = [item for shard in shards for item in shard]
                print(len(wrong_ids), "misclassified")
            """,
        ),
        # The loss of each batch is not the batch's data: averaged elsewhere (DDP010).
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_set, batch_size=32, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                losses = []
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    losses.append(loss.item())
                print(sum(losses) / len(losses))
            """,
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        done: set[str] = set()
        for loop in anatomy.script.train_loops:
            if loop.loader is None or loop.phase_loop is not None:
                continue  # (a phase loop's list holds the unsharded evaluation's items too)
            for name, filled in _filled_lists(anatomy, loop):
                key = f"{id(loop.batch_loop)}:{name}"
                if key in done:
                    continue
                done.add(key)
                shards = anatomy.free_name(["shards", "gathered_shards"])
                ctx.plan.insert_after(
                    loop.batch_loop, statements(GATHER.format(shards=shards, name=name))
                )
                ctx.add_import("torch.distributed", asname="dist")
                ctx.changed(
                    filled,
                    f"`{name}` holds this process's items of the training batches: gathered "
                    "from every process after the loop (`dist.all_gather_object`)",
                )


def _filled_lists(anatomy: Anatomy, loop: TrainLoop) -> list[tuple[str, cst.Call]]:
    """The names of lists made empty before `loop`'s batch loop, with no loop between, read
    after it, that it extends or appends to with its batch's own data; each with its
    filling call. None when it fills such a list with anything else too."""
    batch = loop.batch_loop
    targets = {n.value for n in walk(batch.target) if isinstance(n, cst.Name)}
    found: list[tuple[str, cst.Call]] = []
    for node in walk(batch.body):
        if not (
            isinstance(node, cst.Call)
            and (is_method_call(node, "append") or is_method_call(node, "extend"))
            and isinstance(node.func, cst.Attribute)
            and isinstance(node.func.value, cst.Name)
            and len(node.args) == 1
        ):
            continue
        name = node.func.value.value
        if not (_made_empty_for(anatomy, batch, name) and _read_after(anatomy, batch, name)):
            continue
        if not _batch_data(anatomy, node.args[0].value, targets):
            # the predictions next to the targets (`preds.extend(out.argmax(1).tolist())`):
            # gathering only the targets would pair them wrong; both stay the process's own
            return []
        found.append((name, node))
    return found


def _batch_data(anatomy: Anatomy, item: cst.BaseExpression, targets: set[str]) -> bool:
    """Whether `item` is the batch's own data (one of `targets`): items of it, whatever
    picks them (`ids[out.argmax(1) != y]`, `batch["ids"][i] for i in wrong`), turned into
    another kind of data (`.tolist()`), never what a model or a loss computes from it."""
    if isinstance(item, cst.Name):
        return item.value in targets
    if isinstance(item, cst.Subscript | cst.Attribute):
        return _batch_data(anatomy, item.value, targets)
    if isinstance(item, cst.GeneratorExp | cst.ListComp):
        return _batch_data(anatomy, item.elt, targets)
    if isinstance(item, cst.Tuple | cst.List):
        return bool(item.elements) and all(
            _batch_data(anatomy, element.value, targets) for element in item.elements
        )
    if not isinstance(item, cst.Call):
        return False
    if isinstance(item.func, cst.Attribute) and item.func.attr.value in AS_DATA:
        return _batch_data(anatomy, item.func.value, targets)
    return (
        is_name(item.func, *AS_DATA)
        and bool(item.args)
        and all(_batch_data(anatomy, arg.value, targets) for arg in item.args)
    )


def _made_empty_for(anatomy: Anatomy, batch: cst.For, name: str) -> bool:
    """`name = []` is the one binding of `name` in the batch loop's function, before the
    loop in a block that holds it, with no other loop between them: each pass of the batch
    loop starts from an empty list."""
    scope = anatomy.function_of(batch)
    bindings = [
        assign
        for assign in anatomy.assigns
        if anatomy.function_of(assign) is scope
        and any(is_name(target.target, name) for target in assign.targets)
    ]
    if len(bindings) != 1:
        return False
    [binding] = bindings
    value = binding.value
    empty = (isinstance(value, cst.List) and not value.elements) or (
        isinstance(value, cst.Call) and is_name(value.func, "list") and not value.args
    )
    if not empty or not anatomy.precedes(binding, batch):
        return False
    statement = anatomy.statement_of(binding)
    block = anatomy.parent(statement)
    for ancestor in anatomy.ancestors(batch):
        if ancestor is block:
            return True
        if isinstance(ancestor, cst.For | cst.While):
            return False
    return False


def _read_after(anatomy: Anatomy, batch: cst.For, name: str) -> bool:
    """Whether the batch loop's function reads `name` after the loop."""
    scope = anatomy.function_of(batch)
    return any(
        isinstance(node, cst.Name)
        and node.value == name
        and not anatomy.is_attribute_name(node)
        and anatomy.function_of(node) is scope
        and anatomy.precedes(batch, node)
        and not anatomy.inside(node, batch)
        for node in walk(scope.body if scope is not None else anatomy.module)
    )
