"""Whether a name, where it is used, holds the DDP wrapper (DDP105, DDP106 ask it).

A name holds the wrapper from `name = DDP(...)` until it is bound again (`model =
model.module` ends it), within one function in source order. Elsewhere it is followed the way
Python finds it: a function's parameter through every call of the function, a global or a
closure's name through the scope that binds it, `self.model` through the methods of its class.
When that cannot be told, the answer is no: a finding must be certain.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from ddpify.anatomy import DDP_WRAPPER, Anatomy, dotted

# Calls followed from a function's parameter back to its arguments, and aliases followed.
MAX_DEPTH = 4


@dataclass(frozen=True)
class Binding:
    """`name = value` in `scope` (None: module level); `value` None when unknown."""

    node: cst.Assign | cst.AnnAssign
    value: cst.BaseExpression | None
    scope: cst.FunctionDef | None
    wraps: bool  # the value is `DDP(...)`, maybe inside another call (`torch.compile(DDP(m))`)


@dataclass
class Bindings:
    by_name: dict[str, list[Binding]] = field(default_factory=dict)  # in source order
    # Names that may hold the wrapper somewhere: bound to a wrap, to such a name, or
    # parameters passed one (scopes and order aside).
    may_wrap: set[str] = field(default_factory=set)


def may_hold_ddp(anatomy: Anatomy, name: str | None) -> bool:
    """A cheap first test for `holds_ddp`: False means no use of `name` holds the wrapper."""
    if name is None or not anatomy.ddp_wraps:
        return False
    return name in anatomy.ddp_bindings.may_wrap


def holds_ddp(anatomy: Anatomy, name: str | None, node: cst.CSTNode, depth: int = 0) -> bool:
    """Whether `name` (a dotted name), used at `node`, holds a DDP-wrapped model."""
    if depth > MAX_DEPTH or not may_hold_ddp(anatomy, name):
        return False
    assert name is not None
    bindings = anatomy.ddp_bindings.by_name.get(name, [])
    scope = anatomy.function_of(node)
    here = [b for b in bindings if b.scope is scope]
    before = [
        b for b in here if anatomy.precedes(b.node, node) and not anatomy.inside(node, b.node)
    ]
    if before:
        return _binding_holds(anatomy, before[-1], depth)
    if scope is None:
        return False
    head = name.partition(".")[0]
    if head in _caller_bound(anatomy, scope):
        return _every_call_passes_ddp(anatomy, scope, name, head, depth)
    if "." not in name:
        if here or head in anatomy.parameters_of(scope):  # a local, not bound yet; `self`
            return False
        for outer in _enclosing_scopes(anatomy, scope):
            bound = [b for b in bindings if b.scope is outer]
            if bound:
                return _binding_holds(anatomy, bound[-1], depth)
        return False
    # An attribute: what every other function that sets it leaves there (when they run is
    # not known, so all of them must leave the wrapper).
    owner = anatomy.class_of(scope) if head == "self" else None
    last: dict[cst.FunctionDef | None, Binding] = {}
    for binding in bindings:
        if binding.scope is scope:
            continue
        if owner is not None and (
            binding.scope is None or anatomy.class_of(binding.scope) is not owner
        ):
            continue
        last[binding.scope] = binding
    return bool(last) and all(_binding_holds(anatomy, b, depth) for b in last.values())


def _binding_holds(anatomy: Anatomy, binding: Binding, depth: int) -> bool:
    if binding.wraps:
        return True
    alias = dotted(binding.value)  # `ddp_model = model`
    return alias is not None and holds_ddp(anatomy, alias, binding.node, depth + 1)


def _every_call_passes_ddp(
    anatomy: Anatomy, function: cst.FunctionDef, name: str, parameter: str, depth: int
) -> bool:
    """Whether every call of `function` in the file binds `parameter` so that `name` (the
    parameter or an attribute of it) holds the wrapper; False for a function never called."""
    sites = anatomy.call_sites(function)
    for site in sites:
        argument = anatomy.bound_argument(site, function, parameter)
        if argument is None:
            return False
        if name == parameter and _is_wrap(anatomy, argument):
            continue
        passed = dotted(argument)
        if passed is None or not holds_ddp(
            anatomy, passed + name[len(parameter) :], site, depth + 1
        ):
            return False
    return bool(sites)


def _caller_bound(anatomy: Anatomy, function: cst.FunctionDef) -> set[str]:
    """The parameters the callers bind: not a method's `self` or `cls`."""
    names = anatomy.parameters_of(function)
    first = [*function.params.posonly_params, *function.params.params][:1]
    if first and anatomy.class_of(function) is not None:
        names = names - {first[0].name.value}
    return names


def _enclosing_scopes(
    anatomy: Anatomy, function: cst.FunctionDef
) -> Iterator[cst.FunctionDef | None]:
    """The functions around `function`, innermost first, then the module."""
    for ancestor in anatomy.ancestors(function):
        if isinstance(ancestor, cst.FunctionDef):
            yield ancestor
    yield None


def _is_wrap(anatomy: Anatomy, value: cst.BaseExpression) -> bool:
    """`DDP(...)`, also as the argument of another call (`torch.compile(DDP(model))`)."""
    if not isinstance(value, cst.Call):
        return False
    return anatomy.is_call_to(value, DDP_WRAPPER) or any(
        _is_wrap(anatomy, arg.value) for arg in value.args
    )


def collect_bindings(anatomy: Anatomy) -> Bindings:
    """Every name the script binds, with its values in source order (`Anatomy.ddp_bindings`
    keeps the result)."""
    found = Bindings()
    for statement in anatomy.simple_statements:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Assign):
                targets = [target.target for target in small.targets]
            elif isinstance(small, cst.AnnAssign) and small.value is not None:
                targets = [small.target]
            else:
                continue
            assert small.value is not None
            scope = anatomy.function_of(small)
            for target in targets:
                for name, value in _names_bound(target, small.value):
                    wraps = value is not None and _is_wrap(anatomy, value)
                    found.by_name.setdefault(name, []).append(Binding(small, value, scope, wraps))
    found.may_wrap = _may_wrap(anatomy, found.by_name)
    return found


def _may_wrap(anatomy: Anatomy, by_name: dict[str, list[Binding]]) -> set[str]:
    names = {name for name, bindings in by_name.items() if any(b.wraps for b in bindings)}
    # (name, the name it is given): aliases (`ddp_model = model`), arguments of parameters.
    given = [
        (name, source)
        for name, bindings in by_name.items()
        for source in {dotted(b.value) or "" for b in bindings if not b.wraps} - {""}
    ]
    for call in anatomy.calls:
        for function in _callees(anatomy, call):
            for parameter in _caller_bound(anatomy, function):
                argument = anatomy.bound_argument(call, function, parameter)
                if argument is None:
                    continue
                if _is_wrap(anatomy, argument):
                    names.add(parameter)
                elif (passed := dotted(argument)) is not None:
                    given.append((parameter, passed))
    for _ in range(MAX_DEPTH):
        grown = set(names)
        for name, source in given:
            if source in names:
                grown.add(name)
            # The parameter `trainer` given `self`, where `self.model` may hold the wrapper:
            # `trainer.model` may too.
            grown.update(
                name + known[len(source) :] for known in names if known.startswith(f"{source}.")
            )
        if grown == names:
            break
        names = grown
    return names


def _callees(anatomy: Anatomy, call: cst.Call) -> list[cst.FunctionDef]:
    """The script's functions `call` may reach, matched as `Anatomy.call_sites` does."""
    func = call.func
    if isinstance(func, cst.Name):
        functions = [
            f for f in anatomy.functions.get(func.value, []) if anatomy.class_of(f) is None
        ]
        owner = anatomy.classes.get(func.value)
        if owner is not None:
            functions += [
                f for f in anatomy.functions.get("__init__", []) if anatomy.class_of(f) is owner
            ]
        return functions
    if isinstance(func, cst.Attribute):
        methods = anatomy.functions.get(func.attr.value, [])
        return [f for f in methods if anatomy.class_of(f) is not None]
    return []


def _names_bound(
    target: cst.BaseExpression, value: cst.BaseExpression
) -> Iterator[tuple[str, cst.BaseExpression | None]]:
    """The dotted names `target` binds and their values (None when unpacked from a call)."""
    name = dotted(target)
    if name is not None:
        yield name, value
    elif isinstance(target, cst.Tuple | cst.List):
        values = value.elements if isinstance(value, cst.Tuple | cst.List) else None
        for index, element in enumerate(target.elements):
            inner = (
                values[index].value
                if values is not None
                and index < len(values)
                and len(values) == len(target.elements)
                else None
            )
            if inner is None:
                name = dotted(element.value)
                if name is not None:
                    yield name, None
            else:
                yield from _names_bound(element.value, inner)
