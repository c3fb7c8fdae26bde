"""What a DataLoader is given, for the sampler rules and their fixes: its arguments followed
through `**kwargs` dicts, the values a name or attribute was assigned, and whether its
dataset is an IterableDataset (which takes no sampler)."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpify.anatomy import Anatomy, call_arg, dotted
from ddpify.tree import is_method_call, walk

ITERABLE_DATASETS = {
    "torch.utils.data.IterableDataset",
    "torch.utils.data.dataset.IterableDataset",
    "torch.utils.data.ChainDataset",
    "torch.utils.data.dataset.ChainDataset",
}
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, ...): positions.
LOADER_POSITIONS = {"dataset": 0, "batch_size": 1, "shuffle": 2, "sampler": 3, "batch_sampler": 4}
SAMPLER_ARGUMENTS = ("sampler", "batch_sampler")
# Methods of a dict that leave its keys as they are.
_READS = {"get", "items", "keys", "values", "copy", "__getitem__", "__contains__"}
Scope = cst.FunctionDef | None


@dataclass(frozen=True)
class Passed:
    """A value a call is given for a parameter, and the node that gives it: the call's own
    `Arg`, or, through `**kwargs`, a dict entry, a `kwargs["key"] = ...` or `update(...)`."""

    value: cst.BaseExpression
    where: cst.CSTNode
    direct: bool = False  # the call's own argument, not a `**` dict's entry


def loader_argument(anatomy: Anatomy, call: cst.Call, parameter: str) -> list[Passed] | None:
    """What the `DataLoader(...)` call `call` may be given as `parameter` (by keyword, by
    position, or in a `**` dict): empty when certainly nothing, None when a `*args` or a
    `**kwargs` that cannot be followed may hold it."""
    arg = call_arg(call, LOADER_POSITIONS.get(parameter), parameter)
    found = [Passed(arg.value, arg, direct=True)] if arg is not None else []
    for star in call.args:
        if star.star == "*":
            return None
        if star.star == "**":
            entries = dict_entries(anatomy, star.value, anatomy.function_of(call))
            if entries is None:
                return None
            found += [passed for key, passed in entries if key == parameter]
    return found


def dict_entries(
    anatomy: Anatomy, expr: cst.BaseExpression, scope: Scope, depth: int = 0
) -> list[tuple[str, Passed]] | None:
    """The keys a dict expression (a literal, `dict(...)`, or a name of one) may hold and
    their values, or None when it cannot be told: a key that is not a string, a `**` inside,
    a name bound some other way or handed to code that may change it."""
    if depth > 3:
        return None
    if isinstance(expr, cst.Dict):
        entries = []
        for element in expr.elements:
            if not isinstance(element, cst.DictElement):
                return None
            key = _string(element.key)
            if key is None:
                return None
            entries.append((key, Passed(element.value, element)))
        return entries
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "dict":
        if anatomy.qualified_names(expr.func) != {"builtins.dict"}:
            return None
        if any(arg.keyword is None for arg in expr.args):
            return None
        return [(arg.keyword.value, Passed(arg.value, arg)) for arg in expr.args if arg.keyword]
    if isinstance(expr, cst.Name):
        return _name_entries(anatomy, expr.value, scope, depth)
    return None


def _name_entries(
    anatomy: Anatomy, name: str, scope: Scope, depth: int
) -> list[tuple[str, Passed]] | None:
    """Every key the dict variable `name` is given anywhere in the scope that binds it (in
    any order: a key set on one path only still counts)."""
    if scope is not None and not anatomy.assignments(name, scope):
        if name in anatomy.parameters_of(scope):
            return None
        scope = None
    if len(anatomy.assignments(name, scope)) != 1:
        return None  # bound twice: which dict reaches the call depends on the path
    entries: list[tuple[str, Passed]] = []
    for node in walk(scope if scope is not None else anatomy.module):
        if not isinstance(node, cst.Name) or node.value != name:
            continue
        function = anatomy.function_of(node)
        if function is not scope and (function is None or anatomy.binds(function, name)):
            continue  # another function's own variable of that name
        found = _use_entries(anatomy, node, function, depth)
        if found is None:
            return None
        entries += found
    return entries


def _use_entries(
    anatomy: Anatomy, node: cst.Name, scope: Scope, depth: int
) -> list[tuple[str, Passed]] | None:
    """The keys one use of a dict variable gives it; None for a use that may do anything."""
    parent = anatomy.parent(node)
    holder = anatomy.parent(parent) if parent is not None else None
    if (isinstance(parent, cst.Attribute) and parent.attr is node) or (
        isinstance(parent, cst.Arg) and parent.keyword is node
    ):
        return []  # `x.name`, `f(name=...)`: not the variable
    if isinstance(parent, cst.AssignTarget) and isinstance(holder, cst.Assign):
        return dict_entries(anatomy, holder.value, scope, depth + 1)
    if isinstance(parent, cst.AnnAssign) and parent.target is node and parent.value is not None:
        return dict_entries(anatomy, parent.value, scope, depth + 1)
    if isinstance(parent, cst.Arg) and (
        parent.star == "**" or (is_method_call(holder, "update") and not parent.keyword)
    ):
        return []  # read: `f(**kwargs)`, `other.update(kwargs)`
    if isinstance(parent, cst.Subscript) and parent.value is node:
        if isinstance(holder, cst.AssignTarget):  # kwargs["sampler"] = ...
            assign = anatomy.parent(holder)
            key = _subscript_key(parent)
            if key is None or not isinstance(assign, cst.Assign):
                return None
            return [(key, Passed(assign.value, parent))]
        if isinstance(holder, cst.Del | cst.AugAssign):
            return None
        return []  # a read
    if isinstance(parent, cst.Attribute) and parent.value is node:
        method = parent.attr.value
        if not isinstance(holder, cst.Call) or holder.func is not parent:
            return None
        if method in _READS:
            return []
        if method == "update":
            entries = []
            for arg in holder.args:
                if arg.keyword is not None:
                    entries.append((arg.keyword.value, Passed(arg.value, arg)))
                    continue
                if arg.star:
                    return None
                found = dict_entries(anatomy, arg.value, scope, depth + 1)
                if found is None:
                    return None
                entries += found
            return entries
        if method == "setdefault" and len(holder.args) == 2:
            key = _string(holder.args[0].value)
            return None if key is None else [(key, Passed(holder.args[1].value, holder))]
        return None
    return None


def _subscript_key(subscript: cst.Subscript) -> str | None:
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return None
    return _string(subscript.slice[0].slice.value)


def _string(node: cst.BaseExpression | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def origins(
    anatomy: Anatomy, expr: cst.BaseExpression, scope: Scope, depth: int = 0
) -> list[cst.BaseExpression]:
    """The expressions `expr` (read in `scope`) may have been computed by: followed through
    the names it was assigned, `self.` attributes set in any method of the class, the
    arguments bound to a parameter at the call sites, and what the script's own functions
    return. Empty when it cannot be followed (a parameter never bound, an unknown name)."""
    if depth > 6:
        return []
    if isinstance(expr, cst.Call):
        callee = anatomy.local_function(expr)
        if callee is None:
            return [expr]
        return [
            end
            for value in anatomy.returned_values(callee)
            for end in origins(anatomy, value, callee, depth + 1)
        ]
    name = dotted(expr)
    if name is None:
        return [expr]
    if scope is not None and name in anatomy.parameters_of(scope):
        ends = []
        for site in anatomy.call_sites(scope):
            argument = anatomy.bound_argument(site, scope, name)
            if argument is not None:
                ends += origins(anatomy, argument, anatomy.function_of(site), depth + 1)
        return ends
    return [
        end
        for value, where in anatomy.values_of(name, scope)
        for end in origins(anatomy, value, where, depth + 1)
    ]


def is_iterable_dataset(anatomy: Anatomy, dataset: cst.BaseExpression, scope: Scope) -> bool:
    """Whether `dataset` is built by a class of the script that derives (directly or through
    the script's other classes) from torch's IterableDataset, or by one of torch's own."""
    for end in origins(anatomy, dataset, scope):
        if not isinstance(end, cst.Call):
            continue
        if anatomy.qualified_names(end.func) & ITERABLE_DATASETS:
            return True
        name = dotted(end.func)
        owner = anatomy.classes.get(name) if name else None
        if owner is not None and _derives_from_iterable(anatomy, owner, set()):
            return True
    return False


def _derives_from_iterable(anatomy: Anatomy, owner: cst.ClassDef, seen: set[str]) -> bool:
    seen.add(owner.name.value)
    for base in owner.bases:
        if base.keyword is not None or base.star:
            continue
        if anatomy.qualified_names(base.value) & ITERABLE_DATASETS:
            return True
        name = dotted(base.value)
        parent = anatomy.classes.get(name) if name and name not in seen else None
        if parent is not None and _derives_from_iterable(anatomy, parent, seen):
            return True
    return False
