"""Which layers a forward that chooses from an argument runs, for the arguments it is given.

A multi-task model's `forward(self, x, task)` runs `self.cls_head` when `task == "cls"` and
`self.reg_head` otherwise; a training step that calls it once for each task before one
backward (`loss = ce(model(xa, "cls"), ya) + mse(model(xb, "reg"), yb)`) runs every layer,
so every parameter gets its gradient and DDP needs nothing more. These functions tell when
the constants a step passes are known to run every layer of the forward, and answer "not
known" for any test they cannot decide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import libcst as cst

from ddpify.analysis.ranks import exits
from ddpify.analysis.tree import walk

# A value an argument is not known to hold.
UNKNOWN = object()

Constant = object
Ancestors = Callable[[cst.CSTNode], Iterator[cst.CSTNode]]


def runs_every_layer(
    forward: cst.FunctionDef,
    steps: Sequence[Sequence[cst.Call]],
    ancestors: Ancestors,
    calls_layer: Callable[[cst.CSTNode], bool],
) -> bool:
    """Whether, in each of `steps` (the calls of the model one backward's loss is computed
    from), the constant arguments of the calls together run every layer call of `forward`
    (`calls_layer`), every test on the way there decided."""
    layers = [node for node in walk(forward.body) if calls_layer(node)]
    params = list(forward.params.params[1:])  # after self
    if not steps or not layers:
        return False
    for calls in steps:
        if not calls:
            return False
        bound = [_arguments(call, params) for call in calls]
        for layer in layers:
            runs = [_runs(forward, layer, values, ancestors) for values in bound]
            if None in runs or not any(runs):
                return False
    return True


def _arguments(call: cst.Call, params: list[cst.Param]) -> dict[str, Constant]:
    """The constants the call gives each parameter (a default when it gives none);
    UNKNOWN for any other value."""
    values: dict[str, Constant] = {}
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    for index, param in enumerate(params):
        name = param.name.value
        given: cst.BaseExpression | None = None
        if index < len(positional):
            given = positional[index].value
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == name:
                given = arg.value
        if given is None:
            given = param.default
        values[name] = _constant(given) if given is not None else UNKNOWN
    if any(arg.star for arg in call.args):
        return {name: UNKNOWN for name in values}
    return values


def _constant(node: cst.BaseExpression) -> Constant:
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    if isinstance(node, cst.Integer):
        return node.evaluated_value
    if isinstance(node, cst.Name) and node.value in {"True", "False", "None"}:
        return {"True": True, "False": False, "None": None}[node.value]
    return UNKNOWN


def _decide(test: cst.BaseExpression, values: Mapping[str, Constant]) -> bool | None:
    """The test's value for the arguments `values`; None when it is not known."""
    if isinstance(test, cst.Name) and test.value in values:
        value = values[test.value]
        return None if value is UNKNOWN else bool(value)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _decide(test.expression, values)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        first, second = _decide(test.left, values), _decide(test.right, values)
        if first is None or second is None:
            return None
        return first and second if isinstance(test.operator, cst.And) else first or second
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    target = test.comparisons[0]
    left = _operand(test.left, values)
    right = _operand(target.comparator, values)
    if left is UNKNOWN or right is UNKNOWN:
        return None
    operator = target.operator
    if isinstance(operator, cst.Equal | cst.Is):
        return left == right
    if isinstance(operator, cst.NotEqual | cst.IsNot):
        return left != right
    if isinstance(operator, cst.In | cst.NotIn) and isinstance(right, tuple):
        return (left in right) == isinstance(operator, cst.In)
    return None


def _operand(node: cst.BaseExpression, values: Mapping[str, Constant]) -> Constant:
    if isinstance(node, cst.Name) and node.value in values:
        return values[node.value]
    if isinstance(node, cst.Tuple | cst.List | cst.Set):
        items = tuple(_constant(element.value) for element in node.elements)
        return UNKNOWN if UNKNOWN in items else items
    return _constant(node)


def _runs(
    forward: cst.FunctionDef,
    node: cst.CSTNode,
    values: Mapping[str, Constant],
    ancestors: Ancestors,
) -> bool | None:
    """Whether `node` of the forward runs for the arguments `values`: every `if` it is under
    takes its side, and no `if` before it returns; None when a test is not known."""
    child = node
    known = True
    for ancestor in ancestors(node):
        if ancestor is forward:
            break
        if isinstance(ancestor, cst.If | cst.IfExp) and child is not ancestor.test:
            decided = _decide(ancestor.test, values)
            if decided is None:
                known = False
            elif decided != (child is ancestor.body):
                return False
        if isinstance(ancestor, cst.IndentedBlock):
            for earlier in ancestor.body:
                if earlier is child:
                    break
                if not (isinstance(earlier, cst.If) and earlier.orelse is None):
                    continue
                if not exits(earlier.body):
                    continue
                decided = _decide(earlier.test, values)
                if decided is None:
                    known = False
                elif decided:
                    return False
        child = ancestor
    return True if known else None
