"""DDP bindings: whether a name, where it is used, holds the DDP wrapper (DDP105, DDP106 ask).

A name holds the wrapper from `name = DDP(...)` until it is bound again (`model =
model.module` ends it), within one function in source order. Elsewhere it is followed the way
Python finds it: a function's parameter through every call of the function, a global or a
closure's name through the scope that binds it, `self.model` through the methods of its class.
When that cannot be told, the answer is no: a finding must be certain.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from ddpify.analysis.api import DDP_WRAPPER
from ddpify.analysis.calls import MAX_DEPTH, CallGraph
from ddpify.analysis.distributed import DistributedCode
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.tree import dotted, is_name


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


class DdpBindings:
    """Where names are given the DDP wrapper, and which uses of a name hold it."""

    def __init__(self, index: SourceIndex, graph: CallGraph, distributed: DistributedCode) -> None:
        self.index = index
        self.graph = graph
        self.distributed = distributed

    @cached_property
    def _bindings(self) -> Bindings:
        return self._collect()

    def may_hold(self, name: str | None) -> bool:
        """A cheap first test for `holds`: False means no use of `name` holds the wrapper."""
        if name is None or not self.distributed.ddp_wraps:
            return False
        return name in self._bindings.may_wrap

    def holds(self, name: str | None, node: cst.CSTNode, depth: int = 0) -> bool:
        """Whether `name` (a dotted name), used at `node`, holds a DDP-wrapped model."""
        if depth > MAX_DEPTH or not self.may_hold(name):
            return False
        assert name is not None
        bindings = self._bindings.by_name.get(name, [])
        scope = self.index.function_of(node)
        here = [b for b in bindings if b.scope is scope]
        before = [
            b
            for b in here
            if self.index.precedes(b.node, node) and not self.index.inside(node, b.node)
        ]
        if before:
            return self._binding_holds(before[-1], depth)
        if scope is None:
            return False
        head = name.partition(".")[0]
        if head in self._caller_bound(scope):
            return self._every_call_passes_ddp(scope, name, head, depth)
        if "." not in name:
            if here or head in self.graph.parameters_of(scope):  # a local, not bound yet; `self`
                return False
            for outer in self._enclosing_scopes(scope):
                bound = [b for b in bindings if b.scope is outer]
                if bound:
                    return self._binding_holds(bound[-1], depth)
            return False
        # An attribute: what every other function that sets it leaves there (when they run is
        # not known, so all of them must leave the wrapper).
        owner = self.index.class_of(scope) if head == "self" else None
        last: dict[cst.FunctionDef | None, Binding] = {}
        for binding in bindings:
            if binding.scope is scope:
                continue
            if owner is not None and (
                binding.scope is None or self.index.class_of(binding.scope) is not owner
            ):
                continue
            last[binding.scope] = binding
        return bool(last) and all(self._binding_holds(b, depth) for b in last.values())

    def _binding_holds(self, binding: Binding, depth: int) -> bool:
        if binding.wraps:
            return True
        sources = _sources(binding.value)  # `ddp_model = model`, `best = a if ... else b`
        return bool(sources) and all(
            self.holds(source, binding.node, depth + 1) for source in sources
        )

    def _every_call_passes_ddp(
        self, function: cst.FunctionDef, name: str, parameter: str, depth: int
    ) -> bool:
        """Whether every call of `function` in the file binds `parameter` so that `name` (the
        parameter or an attribute of it) holds the wrapper; False for a function never called."""
        sites = self.graph.call_sites(function)
        for site in sites:
            argument = self.graph.bound_argument(site, function, parameter)
            if argument is None:
                return False
            if name == parameter and self._is_wrap(argument):
                continue
            passed = dotted(argument)
            if passed is None or not self.holds(passed + name[len(parameter) :], site, depth + 1):
                return False
        return bool(sites)

    def _caller_bound(self, function: cst.FunctionDef) -> set[str]:
        """The parameters the callers bind: not a method's `self` or `cls`."""
        names = self.graph.parameters_of(function)
        first = [*function.params.posonly_params, *function.params.params][:1]
        if first and self.index.class_of(function) is not None:
            names = names - {first[0].name.value}
        return names

    def _enclosing_scopes(self, function: cst.FunctionDef) -> Iterator[cst.FunctionDef | None]:
        """The functions around `function`, innermost first, then the module."""
        for ancestor in self.index.ancestors(function):
            if isinstance(ancestor, cst.FunctionDef):
                yield ancestor
        yield None

    def _is_wrap(self, value: cst.BaseExpression) -> bool:
        """`DDP(...)`, also as the argument of another call (`torch.compile(DDP(model))`)."""
        if not isinstance(value, cst.Call):
            return False
        return self.index.is_call_to(value, DDP_WRAPPER) or any(
            self._is_wrap(arg.value) for arg in value.args
        )

    def _collect(self) -> Bindings:
        """Every name the script binds, with its values in source order (`_bindings` keeps the
        result)."""
        found = Bindings()
        for statement in self.index.simple_statements:
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
                scope = self.index.function_of(small)
                for target in targets:
                    for name, value in _names_bound(target, small.value):
                        wraps = value is not None and self._is_wrap(value)
                        found.by_name.setdefault(name, []).append(
                            Binding(small, value, scope, wraps)
                        )
        found.may_wrap = self._may_wrap(found.by_name)
        return found

    def _may_wrap(self, by_name: dict[str, list[Binding]]) -> set[str]:
        names = {name for name, bindings in by_name.items() if any(b.wraps for b in bindings)}
        # (name, the name it is given): aliases (`ddp_model = model`), arguments of parameters.
        given = [
            (name, source)
            for name, bindings in by_name.items()
            for source in {s for b in bindings if not b.wraps for s in _sources(b.value)}
        ]
        for call in self.index.calls:
            for function in self.graph.callees(call):
                for parameter in self._caller_bound(function):
                    argument = self.graph.bound_argument(call, function, parameter)
                    if argument is None:
                        continue
                    if self._is_wrap(argument):
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


def _sources(value: cst.BaseExpression | None) -> list[str]:
    """The names a binding's value is another name for: `model` in `ddp_model = model`, both
    models in `best = model_a if score_a < score_b else model_b` (round-39 audit B
    alternating_two_models_per_epoch), a `None` branch left out."""
    if isinstance(value, cst.IfExp):
        branches = [_sources(b) for b in (value.body, value.orelse) if not is_name(b, "None")]
        return [] if any(not b for b in branches) else [s for b in branches for s in b]
    name = dotted(value) if value is not None else None
    return [name] if name else []
