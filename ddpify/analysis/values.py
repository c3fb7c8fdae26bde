"""Value tracing: what the script assigns to a name, and the expressions a value may come
from, through names, `self.` attributes, parameters and the script's own functions."""

from __future__ import annotations

from functools import cached_property

import libcst as cst

from ddpify.analysis.calls import CallGraph
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.tree import dotted, walk

Scope = cst.FunctionDef | None
# How many names, attributes, arguments and returns `origins` follows.
MAX_STEPS = 6


class Values:
    """The values names are given, and where a value comes from."""

    def __init__(self, index: SourceIndex, graph: CallGraph) -> None:
        self.index = index
        self.graph = graph

    def values_of(self, name: str, scope: Scope) -> list[tuple[cst.BaseExpression, Scope]]:
        """The values the script gives the dotted name `name` read in `scope`, each with the
        function it is given in: `self.x` in any method of the class; otherwise in `scope`,
        else (unless `name` is one of its parameters) at module level."""
        if name.startswith("self."):
            owner = self.index.class_of(scope) if scope is not None else None
            methods = owner.body.body if owner is not None else ()
            return [
                (value, method)
                for method in methods
                if isinstance(method, cst.FunctionDef)
                for value in self.assignments(name, method)
            ]
        if scope is not None:
            found = self.assignments(name, scope)
            if found or name.partition(".")[0] in self.graph.parameters_of(scope):
                return [(value, scope) for value in found]
        found_at_module = [(value, None) for value in self.assignments(name, None)]
        # `global best_loss, stop_training` in `train()`: its assignments are the module's
        # names too (round-28 audit B so_global_patience_counter_b)
        return found_at_module + [
            (value, function)
            for function in self.declared_global(name)
            for value in self.assignments(name, function)
        ]

    def attribute_values(
        self, expr: cst.BaseExpression, scope: Scope, depth: int = 0
    ) -> list[tuple[cst.BaseExpression, Scope]]:
        """The values an attribute read `obj.attr` may hold when `obj` is an object of one of
        the script's classes (followed as `origins` does) whose methods set `self.attr`, each
        with the method it is set in: a fastai-style `self.dls.train`, with `dls =
        DataLoaders(train_loader, valid_loader)` keeping `self.train = train` (round-43
        audit A learner)."""
        if not isinstance(expr, cst.Attribute) or depth > MAX_STEPS:
            return []
        found: list[tuple[cst.BaseExpression, Scope]] = []
        seen: set[str] = set()
        for made in self.origins(expr.value, scope, depth + 1):
            owner_name = dotted(made.func) if isinstance(made, cst.Call) else None
            owner = self.index.classes.get(owner_name or "")
            if owner is None or owner_name in seen:
                continue
            seen.add(owner_name or "")
            for method in owner.body.body:
                if isinstance(method, cst.FunctionDef):
                    name = f"self.{expr.attr.value}"
                    found += [(value, method) for value in self.assignments(name, method)]
        return found

    def declared_global(self, name: str) -> list[cst.FunctionDef]:
        """The functions that assign the module's `name` (`global name`)."""
        return self._declared_global.get(name, [])

    @cached_property
    def _declared_global(self) -> dict[str, list[cst.FunctionDef]]:
        found: dict[str, list[cst.FunctionDef]] = {}
        for node in walk(self.index.module):
            if isinstance(node, cst.Global):
                function = self.index.function_of(node)
                if function is None:
                    continue
                for item in node.names:
                    found.setdefault(item.name.value, []).append(function)
        return found

    def assignments(self, name: str, scope: cst.CSTNode | None) -> list[cst.BaseExpression]:
        """Values assigned to `name` (a dotted name) in `scope` (a function, or the module)."""
        values: list[cst.BaseExpression] = []
        for node in self._assignments_by_scope.get(scope, ()):
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    values.extend(_values_for(target.target, node.value, name))
            elif isinstance(node, cst.AnnAssign) and node.value is not None:
                values.extend(_values_for(node.target, node.value, name))
        return values

    def origins(
        self, expr: cst.BaseExpression, scope: Scope, depth: int = 0
    ) -> list[cst.BaseExpression]:
        """The expressions `expr` (read in `scope`) may have been computed by: followed
        through the names it was assigned, `self.` attributes set in any method of the class,
        the arguments bound to a parameter at the call sites, and what the script's own
        functions return. Empty when it cannot be followed (a parameter never bound, an
        unknown name)."""
        if depth > MAX_STEPS:
            return []
        graph = self.graph
        position = constant_index(expr)
        if position is not None:  # `a, b = make()` reads `make()[1]`: what make returns there
            assert isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Call)
            callee = graph.callee(expr.value)
            if callee is None:
                return [expr]
            return [
                end
                for value in graph.returned_values(callee)
                if isinstance(value, cst.Tuple) and position < len(value.elements)
                for end in self.origins(value.elements[position].value, callee, depth + 1)
            ]
        if isinstance(expr, cst.Call):
            callee = graph.callee(expr)
            if callee is None:
                return [expr]
            return [
                end
                for value in graph.returned_values(callee)
                for end in self.origins(value, callee, depth + 1)
            ]
        name = dotted(expr)
        if name is None:
            return [expr]
        if scope is not None and name in graph.parameters_of(scope):
            ends = []
            for site in graph.call_sites(scope):
                argument = graph.bound_argument(site, scope, name)
                if argument is not None:
                    ends += self.origins(argument, self.index.function_of(site), depth + 1)
            return ends
        given = self.values_of(name, scope) or self.attribute_values(expr, scope, depth)
        return [end for value, where in given for end in self.origins(value, where, depth + 1)]

    def runs_after(
        self,
        anchor: cst.CSTNode,
        node: cst.CSTNode,
        name: str,
        depth: int = 0,
        *,
        some: bool = False,
        same: frozenset[str] = frozenset(),
    ) -> bool:
        """Whether `node`, a use of `name`, runs after `anchor` (where `name` was rebound):
        later in the same function, or in another function that does not bind `name` itself
        (that one holds the object from before). A parameter holds what every call of its
        function in this file gives it: `copy.deepcopy(model)` in an EMA's `__init__` called
        as `ModelEma(model)` before the rebinding holds the object from before. With `some`,
        whether it may run after: one call of its function is enough (`set_trainable(model,
        True)` at some epoch, after the same helper froze it before the wrap). `same`: names
        of the object rebound at `anchor`; `name = other` for one of them gives it no new
        object (`raw = model` after the wrap, round-16 probe)."""
        index = self.index
        scope = index.function_of(node)
        if scope is index.function_of(anchor):
            if some and self._called_back(anchor, node):
                return True
            return (
                index.precedes(anchor, node)
                and not index.inside(node, anchor)
                and not self._made_anew(name, scope, anchor, node, same)
            )
        returned = self._returned_after(anchor, node, name, scope, depth, some)
        if returned is not None:
            return returned
        if scope is not None and self.binds(scope, name):
            # `self.model = model` in a Trainer's `__init__`, then `copy.deepcopy(
            # self.model)` (lucidrains' EMA, round-31 audit A): it holds what `model` does
            alias = self._alias_before(scope, name, node, same)
            if alias is None or depth >= MAX_STEPS:
                return False
            return self.runs_after(anchor, node, alias, depth + 1, some=some, same=same)
        if scope is None:
            return False
        sites = self.graph.call_sites(scope) if name in self.graph.parameters_of(scope) else []
        if not sites and index.function_of(anchor) is None:
            later = self._bound_again(name, anchor, same)
            if later:  # a global given another object after `anchor` (a reloaded model)
                return self._called_before(scope, later, some=some)
        if not sites or depth >= MAX_STEPS:
            return True
        after = [
            given is not None
            and self.runs_after(anchor, site, given, depth + 1, some=some, same=same)
            for site in sites
            for given in [dotted(self.graph.bound_argument(site, scope, name))]
        ]
        return any(after) if some else all(after)

    def _returned_after(
        self,
        anchor: cst.CSTNode,
        node: cst.CSTNode,
        name: str,
        scope: Scope,
        depth: int,
        some: bool,
    ) -> bool | None:
        """When the last value `name` is given before `node` in its own function (or at
        module level) is what one of the script's functions returns (`model, hist =
        train_one(lr)`, round-10 audit c11): whether that return runs after `anchor`. None
        when `name` is not given such a value there."""
        index = self.index
        last: cst.BaseExpression | None = None
        for assign in self._assignments_by_scope.get(scope, ()):
            if assign.value is None or not index.precedes(assign, node):
                continue
            if index.inside(node, assign):
                continue
            targets = (
                [target.target for target in assign.targets]
                if isinstance(assign, cst.Assign)
                else [assign.target]
            )
            for target in targets:
                for value in _values_for(target, assign.value, name):
                    last = value
        if last is None or depth >= MAX_STEPS:
            return None
        if isinstance(last, cst.Name) and last.value != name and index.in_source(last):
            # `best_loss, best_model = loss, model` after `loss, model = train(lr)` (round-41
            # audit B c6_hpsearch: `best_model.state_dict()` kept the wrapper's keys)
            return self.runs_after(anchor, last, last.value, depth + 1, some=some)
        position = constant_index(last)
        call = last.value if isinstance(last, cst.Subscript) and position is not None else last
        callee = self.graph.callee(call) if isinstance(call, cst.Call) else None
        if callee is None:
            return None
        after = []
        for value in self.graph.returned_values(callee):
            if position is not None:
                if not (isinstance(value, cst.Tuple) and position < len(value.elements)):
                    return None
                value = value.elements[position].value
            returned = dotted(value)
            if returned is None:
                return None
            after.append(self.runs_after(anchor, value, returned, depth + 1, some=some))
        if not after:
            return None
        return any(after) if some else all(after)

    def _made_anew(
        self,
        name: str,
        scope: Scope,
        anchor: cst.CSTNode,
        node: cst.CSTNode,
        same: frozenset[str] = frozenset(),
    ) -> bool:
        """Whether `name` is given a new object between `anchor` and `node` (`model =
        Net()` to reload saved weights), not one made from itself (`model = compile(model)`)."""
        index = self.index
        for assign in self._assignments_by_scope.get(scope, ()):
            if not (index.precedes(anchor, assign) and index.precedes(assign, node)):
                continue
            if index.inside(assign, anchor) or index.inside(node, assign):
                continue
            if _gives_new_object(assign, name, same):
                return True
        return False

    def _alias_before(
        self, scope: cst.FunctionDef, name: str, node: cst.CSTNode, same: frozenset[str]
    ) -> str | None:
        """The other name of the object (one of `same`) that `name` is last given before
        `node` in `scope` by a plain `name = other`, when that is its last binding there."""
        index = self.index
        last: cst.Assign | cst.AnnAssign | None = None
        for assign in self._assignments_by_scope.get(scope, ()):
            targets = assign.targets if isinstance(assign, cst.Assign) else [assign]
            if any(dotted(t.target) == name for t in targets) and index.precedes(assign, node):
                last = assign
        if last is None or not isinstance(last.value, cst.Name):
            return None
        other = last.value.value
        return other if other in same and other != name else None

    def _called_back(self, anchor: cst.CSTNode, node: cst.CSTNode) -> bool:
        """`node` in a lambda made before `anchor` and handed to a call (`LambdaLR(opt,
        lambda step: rate(step, model.d_model))`, the Annotated Transformer, round-21 audit
        B annotated_tf_b): the call may keep it and run it later, after `anchor` too."""
        index = self.index
        for ancestor in index.ancestors(node):
            if isinstance(ancestor, cst.Lambda):
                made_before = index.precedes(ancestor, anchor) or index.inside(ancestor, anchor)
                return made_before and isinstance(index.parent(ancestor), cst.Arg)
            if isinstance(ancestor, cst.BaseStatement):
                return False
        return False

    def _bound_again(
        self, name: str, anchor: cst.CSTNode, same: frozenset[str]
    ) -> list[cst.Assign | cst.AnnAssign]:
        """Module-level statements after `anchor` that give the global `name` a new object
        (`model = torch.load(f)` after training, pytorch/examples' word language model)."""
        index = self.index
        found = []
        for assign in self._assignments_by_scope.get(None, ()):
            if not index.precedes(anchor, assign) or index.inside(assign, anchor):
                continue
            if _gives_new_object(assign, name, same):
                found.append(assign)
        return found

    def _called_before(
        self,
        function: cst.FunctionDef,
        later: list[cst.Assign | cst.AnnAssign],
        *,
        some: bool,
    ) -> bool:
        """Whether the calls of `function` run before the first of `later` rebinds the global
        it reads (all of them; with `some`, one). A call from inside a function cannot be
        placed in time: it counts as both."""
        first = later[0]
        before = []
        for site in self.graph.call_sites(function):
            if self.index.function_of(site) is not None:
                before += [True, False]
            else:
                before.append(self.index.precedes(site, first))
        if not before:
            return some
        return any(before) if some else all(before)

    def binds(self, scope: cst.FunctionDef, name: str) -> bool:
        return any(
            isinstance(node, cst.Assign)
            and any(dotted(target.target) == name for target in node.targets)
            and self.index.function_of(node) is scope
            for node in walk(scope)
        )

    @cached_property
    def _assignments_by_scope(self) -> dict[cst.CSTNode | None, list[cst.Assign | cst.AnnAssign]]:
        """Assignments (plain and annotated) by the function they are in, in source order."""
        index = self.index
        by_scope: dict[cst.CSTNode | None, list[cst.Assign | cst.AnnAssign]] = {}
        nodes: list[cst.Assign | cst.AnnAssign] = [*index.assigns, *index.annotated_assigns]
        for node in sorted(nodes, key=index.order):
            by_scope.setdefault(index.function_of(node), []).append(node)
        return by_scope


def constant_index(expr: cst.BaseExpression) -> int | None:
    """`N` for `f(...)[N]`."""
    if (
        isinstance(expr, cst.Subscript)
        and isinstance(expr.value, cst.Call)
        and len(expr.slice) == 1
        and isinstance(expr.slice[0].slice, cst.Index)
        and isinstance(expr.slice[0].slice.value, cst.Integer)
    ):
        return int(expr.slice[0].slice.value.value)
    return None


def _values_for(
    target: cst.BaseExpression, value: cst.BaseExpression, name: str
) -> list[cst.BaseExpression]:
    if dotted(target) == name:
        return [value]
    if isinstance(target, cst.Tuple | cst.List):
        for index, element in enumerate(target.elements):
            nested = isinstance(element.value, cst.Tuple | cst.List)
            if dotted(element.value) != name and not nested:
                continue
            if isinstance(value, cst.Tuple | cst.List) and index < len(value.elements):
                part = value.elements[index].value
            else:
                part = cst.Subscript(
                    value, [cst.SubscriptElement(cst.Index(cst.Integer(str(index))))]
                )
            if not nested:
                return [part]
            # `(x_train, y_train), (x_val, y_val) = make_data()` (round-46 audit B seed_data)
            found = _values_for(element.value, part, name)
            if found:
                return found
    return []


def _gives_new_object(assign: cst.Assign | cst.AnnAssign, name: str, same: frozenset[str]) -> bool:
    """Whether `assign` gives `name` a new object (`model = Net()`, `model = torch.load(f)`),
    not one made from itself (`model = compile(model)`) nor another name of the same one
    (`raw = model`)."""
    targets = (
        [target.target for target in assign.targets]
        if isinstance(assign, cst.Assign)
        else [assign.target]
    )
    if assign.value is None or not any(dotted(target) == name for target in targets):
        return False
    if dotted(assign.value) in same - {name}:
        return False
    return not any(dotted(inner) == name for inner in walk(assign.value))
