"""Means over a loop's batches, written the ways scripts write them.

A decision on the training loss (early stopping, a plateau scheduler, the best checkpoint)
reads a mean over the epoch's batches. Under DDP each process computes it over its own
shard; with the same number of batches in every process (what DistributedSampler gives),
the mean of those means over the processes is the single-process script's value, so
averaging it before the decision makes every process decide alike, on the right value.
Only a mean can be averaged: a sum (or a sum divided by the whole dataset's length) would
shrink by the world size. This module says which loop a value is the mean over, reading
the function's text alone, so that it serves the script's own functions and a helper of
another file (`train_loss = train_one_epoch(model, loader, ...)` from `engine.py`) alike.
"""

from __future__ import annotations

import libcst as cst

from ddpify.analysis.index import SourceIndex
from ddpify.analysis.loaders import strip_iteration
from ddpify.analysis.tree import dotted, is_attribute, is_method_call, walk

# `np.mean(losses)`, `np.average(losses)`, `statistics.mean(losses)`, `mean(losses)`.
MEAN_CALLS = {"mean", "average", "fmean"}
# How many names a value is followed through (`avg = total / n; return avg`).
MAX_NAMES = 3


def batch_mean(
    value: cst.BaseExpression, scope: cst.FunctionDef | None, index: SourceIndex, depth: int = 0
) -> cst.For | None:
    """The `for` loop over batches whose mean `value` (read in `scope`) is, when it is one:

    - `total / len(loader)` with `total += loss.item()` in a loop over `loader`, or
      `total /= len(loader)` in place;
    - `total / n` with `total += ...item()...` and `n += 1` (a count of batches) or
      `n += len(x)`, `x.size(0)`, `x.shape[0]` (of samples, with the loss weighted alike);
    - `sum(losses) / len(losses)`, `np.mean(losses)`, `statistics.mean(losses)` with
      `losses.append(loss.item())` in the loop;
    - `meter.avg` with `meter.update(loss.item(), ...)` in the loop (an AverageMeter).
    """
    if isinstance(value, cst.Name):
        if depth >= MAX_NAMES:
            return None
        divided = _divided_in_place(value.value, scope, index)
        if divided is not None:
            return divided
        given = _assigned(value.value, scope, index)
        return batch_mean(given[0], scope, index, depth + 1) if len(given) == 1 else None
    if is_attribute(value, "avg") and isinstance(value, cst.Attribute):
        name = dotted(value.value)
        return _loop_adding(name, scope, index, "update") if name is not None else None
    if isinstance(value, cst.Call) and _last(value.func) in MEAN_CALLS and len(value.args) == 1:
        name = dotted(value.args[0].value)
        return _loop_adding(name, scope, index, "append") if name is not None else None
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide)):
        return None
    left, right = value.left, value.right
    if isinstance(left, cst.Call) and dotted(left.func) == "sum" and len(left.args) == 1:
        listed = dotted(left.args[0].value)
        if listed is not None and _length_of(right) == listed:
            return _loop_adding(listed, scope, index, "append")
        return None
    total = dotted(left)
    loop = _loop_adding(total, scope, index, "+=") if total is not None else None
    if loop is None:
        return None
    if _length_of(right) == dotted(strip_iteration(loop.iter)):
        return loop  # `total / len(loader)`: per batch
    count = dotted(right)
    return loop if count is not None and _counts(count, loop) else None


def _last(func: cst.BaseExpression) -> str | None:
    name = dotted(func)
    return name.rpartition(".")[2] if name is not None else None


def _length_of(expr: cst.BaseExpression) -> str | None:
    """`x` of `len(x)`."""
    if isinstance(expr, cst.Call) and dotted(expr.func) == "len" and len(expr.args) == 1:
        return dotted(expr.args[0].value)
    return None


def _own(node: cst.CSTNode, scope: cst.FunctionDef | None, index: SourceIndex) -> bool:
    return index.function_of(node) is scope


def _assigned(
    name: str, scope: cst.FunctionDef | None, index: SourceIndex
) -> list[cst.BaseExpression]:
    return [
        assign.value
        for assign in index.assigns
        if _own(assign, scope, index)
        and any(dotted(target.target) == name for target in assign.targets)
    ]


def _has_item(node: cst.CSTNode, scope: cst.FunctionDef | None, index: SourceIndex) -> bool:
    """Whether `node` reads a number out of a tensor: `loss.item()`, or a name given one in
    `scope` (`loss_value = loss.item()`, then `running += loss_value * x.size(0)`)."""
    for inner in walk(node):
        if is_method_call(inner, "item"):
            return True
        if isinstance(inner, cst.Name) and any(
            is_method_call(given, "item") for given in _assigned(inner.value, scope, index)
        ):
            return True
    return False


def _loop_adding(
    name: str, scope: cst.FunctionDef | None, index: SourceIndex, how: str
) -> cst.For | None:
    """The one `for` loop of `scope` whose body adds a number (`.item()`) to `name`: with
    `name += ...` (how "+="), `name.append(...)` or `name.update(...)`."""
    loops: set[int] = set()
    found: cst.For | None = None
    root = scope if scope is not None else index.module
    for node in walk(root):
        if how == "+=":
            adds = (
                isinstance(node, cst.AugAssign)
                and isinstance(node.operator, cst.AddAssign)
                and dotted(node.target) == name
                and _has_item(node.value, scope, index)
            )
        else:
            adds = (
                isinstance(node, cst.Call)
                and is_method_call(node, how)
                and isinstance(node.func, cst.Attribute)
                and dotted(node.func.value) == name
                and bool(node.args)
                and _has_item(node.args[0].value, scope, index)
            )
        if not adds or not _own(node, scope, index):
            continue
        loop = next((a for a in index.ancestors(node) if isinstance(a, cst.For)), None)
        if loop is None or not _own(loop, scope, index):
            return None
        loops.add(id(loop))
        found = loop
    return found if len(loops) == 1 else None


def _counts(name: str, loop: cst.For) -> bool:
    """`name += 1`, `len(x)`, `x.size(0)`, `x.shape[0]` in `loop`: a count of its batches or
    samples, and nothing else added to it there."""
    adds = [
        node
        for node in walk(loop.body)
        if isinstance(node, cst.AugAssign) and dotted(node.target) == name
    ]
    return bool(adds) and all(
        isinstance(node.operator, cst.AddAssign)
        and (
            isinstance(node.value, cst.Integer)
            or _length_of(node.value) is not None
            or is_method_call(node.value, "size", "numel")
            or (isinstance(node.value, cst.Subscript) and is_attribute(node.value.value, "shape"))
        )
        for node in adds
    )


def _divided_in_place(
    name: str, scope: cst.FunctionDef | None, index: SourceIndex
) -> cst.For | None:
    """`total /= len(loader)` (or `/= n`, a count) in `scope`, after the loop adds to it."""
    for node in index.simple_statements:
        for small in node.body if isinstance(node, cst.SimpleStatementLine) else ():
            if (
                isinstance(small, cst.AugAssign)
                and isinstance(small.operator, cst.DivideAssign)
                and dotted(small.target) == name
                and _own(node, scope, index)
            ):
                loop = _loop_adding(name, scope, index, "+=")
                if loop is None or not index.precedes(loop, node):
                    return None
                if _length_of(small.value) == dotted(strip_iteration(loop.iter)):
                    return loop
                count = dotted(small.value)
                return loop if count is not None and _counts(count, loop) else None
    return None
