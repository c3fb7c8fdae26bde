"""The script's call graph: who calls a function, what a call reaches, the loops around a
call, and what a function returns or is given.

It is the only place that matches calls to the script's own functions and methods. A
function is reached by name: `f()` reaches the script's functions named `f` (and the
`__init__` of its class `f`), `x.f()` its methods named `f`, whatever `x` is. A call of a
value taken from a list, tuple, set or dict of the script's functions (`random.choice(AUGS)(x)`,
`ops[i](x)`, `for op in AUGS: op(x)`) reaches every function (and lambda) that container
holds. Every answer that follows calls stops `MAX_DEPTH` calls away.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import libcst as cst

from ddpify.analysis.api import TORCH_METHODS
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.tree import call_arg, dotted, is_name, methods, source_text, walk

# How many calls (and hops through flags, helpers and aliases) an answer follows; past
# that, "cannot tell".
MAX_DEPTH = 4
# What binds a function's first arguments, leaving the function called later.
PARTIALS = ("functools.partial", "partial")
# What calls the function it is given, with arguments of its own: absl's `app.run(main)`
# (`main(argv)`, after parsing the flags), fire's `fire.Fire(main)` (the command line's).
RUNNERS = frozenset({"absl.app.run", "fire.Fire"})


class CallGraph:
    """Calls between the script's own functions and methods."""

    def __init__(self, index: SourceIndex) -> None:
        self.index = index
        # `held_callees` by (scope, name)
        self._held: dict[tuple[int, str], list[cst.CSTNode]] = {}
        self._call_sites: dict[cst.FunctionDef, list[cst.Call]] = {}

    def call_sites(self, function: cst.FunctionDef) -> list[cst.Call]:
        """Calls in this file that reach `function` (by name; methods through any object)."""
        found = self._call_sites.get(function)
        if found is None:
            name = function.name.value
            owner = self.index.class_of(function)
            if owner is None:
                candidates = self._calls_by_name.get(name, [])
            else:
                candidates = self._calls_by_attribute.get(name, [])
                if name == "__init__":
                    candidates = [*candidates, *self._calls_by_name.get(owner.name.value, [])]
                if name == "__call__":
                    candidates = [*candidates, *self._calls_of_instances.get(owner.name.value, [])]
            found = [
                site
                for site in candidates
                if not self.index.inside(site, function) and self._super_may_reach(site, owner)
            ]
            self._call_sites[function] = found
        return found

    def callers(self, function: cst.FunctionDef | None, depth: int = 0) -> list[cst.Call]:
        """The calls of `function`, and of the functions those are in, `MAX_DEPTH` deep. A
        method is called through `self` in its own class, or through any object (a callback
        list's `cb.on_epoch_start(epoch)`) unless it shares its name with a method of torch's
        objects: `model.train()` is not a call of `Trainer.train`."""
        if function is None or depth >= MAX_DEPTH:
            return []
        owner = self.index.class_of(function)
        sites: list[cst.Call] = []
        for site in self.call_sites(function):
            caller = self.index.function_of(site)
            through_self = (
                isinstance(site.func, cst.Attribute)
                and is_name(site.func.value, "self")
                and caller is not None
                and self.index.class_of(caller) is owner
            )
            if owner is not None and not through_self and function.name.value in TORCH_METHODS:
                continue
            sites.append(site)
            sites += self.callers(caller, depth + 1)
        return sites

    def callees(self, call: cst.Call) -> list[cst.FunctionDef]:
        """The script's functions `call` may reach, matched as `call_sites` does."""
        index = self.index
        func = call.func
        run = self.runs(call)
        if run is not None:
            return [f for f in index.functions.get(run, []) if index.class_of(f) is None]
        if isinstance(func, cst.Name):
            functions = [
                f for f in index.functions.get(func.value, []) if index.class_of(f) is None
            ]
            owner = index.classes.get(func.value)
            if owner is not None:
                functions += [
                    f for f in index.functions.get("__init__", []) if index.class_of(f) is owner
                ]
            return functions + self._called_instance(call)
        if isinstance(func, cst.Attribute):
            methods = index.functions.get(func.attr.value, [])
            return [
                f
                for f in methods
                if (owner := index.class_of(f)) is not None and self._super_may_reach(call, owner)
            ] + self._called_instance(call)
        return []

    def _called_instance(self, call: cst.Call) -> list[cst.FunctionDef]:
        """`__call__` of the script's classes whose instances `call` calls by name."""
        return [
            method
            for method in self.index.functions.get("__call__", [])
            if (owner := self.index.class_of(method)) is not None
            and any(site is call for site in self._calls_of_instances.get(owner.name.value, []))
        ]

    @cached_property
    def _calls_of_instances(self) -> dict[str, list[cst.Call]]:
        return _calls_of_instances(self.index)

    def _super_may_reach(self, call: cst.Call, owner: cst.ClassDef | None) -> bool:
        """`super().__init__()` reaches only a method of the calling class's bases (GPT's
        `super().__init__()` is nn.Module's, not the script's `Trainer.__init__`: round-22
        audit A mingpt_trainer_c); every other call, as its name matches."""
        func = call.func
        if not (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Call)
            and is_name(func.value.func, "super")
        ):
            return True
        caller = self.index.function_of(call)
        calling = self.index.class_of(caller) if caller is not None else None
        if owner is None or calling is None:
            return False
        seen: set[str] = set()
        todo = [calling]
        while todo:  # the bases of its bases too, as far as the script defines them
            for base in todo.pop().bases:
                name = dotted(base.value)
                if name is not None and name not in seen:
                    seen.add(name)
                    if (defined := self.index.classes.get(name)) is not None:
                        todo.append(defined)
        return owner.name.value in seen

    @cached_property
    def _instances(self) -> dict[str, str]:
        return _instance_classes(self.index)

    def instance_method(self, call: cst.Call) -> cst.FunctionDef | None:
        """The method `call` calls on an object of one of the script's classes that a name
        holds (`budget.expired()` with `budget = Budget(seconds)`, round-43 audit B
        budget_helper: a time budget read through a method)."""
        func = call.func
        holder = dotted(func.value) if isinstance(func, cst.Attribute) else None
        if holder is None or holder == "self" or not isinstance(func, cst.Attribute):
            return None
        made = self._instances.get(holder.removeprefix("self."))
        owner = self.index.classes.get(made) if made is not None else None
        if owner is None:
            return None
        return next((m for m in methods(owner) if m.name.value == func.attr.value), None)

    def callee(self, call: cst.Call) -> cst.FunctionDef | None:
        """The one function of this file a call surely reaches by name (`f()`, `self.f()`):
        the only definition of that name."""
        func = call.func
        if isinstance(func, cst.Name):
            name = func.value
        elif isinstance(func, cst.Attribute) and is_name(func.value, "self"):
            name = func.attr.value
        else:
            return None
        definitions = self.index.functions.get(name, [])
        return definitions[0] if len(definitions) == 1 else None

    def defined(self, name: str) -> list[cst.FunctionDef]:
        """The script's functions and methods named `name` (a decorator, a spawned worker)."""
        return self.index.functions.get(name, [])

    def calls_script(self, call: cst.Call) -> bool:
        """Whether `call` is `f()` for a function or class the script defines (or runs one
        of its functions: `app.run(main)`)."""
        func = call.func
        return (isinstance(func, cst.Name) or self.runs(call) is not None) and (
            (name := self.runs(call) or dotted(func)) in self.index.functions
            or name in self.index.classes
        )

    def runs(self, call: cst.Call) -> str | None:
        """`main` for `app.run(main)` (`RUNNERS`) given a function of the script's."""
        if not (self._runner_names and self.index.may_name(call, self._runner_names)):
            return None
        given = call.args[0].value if call.args and call.args[0].keyword is None else None
        if not isinstance(given, cst.Name) or given.value not in self.index.functions:
            return None
        return given.value if self.index.qualified_names(call.func) & RUNNERS else None

    @cached_property
    def _runner_names(self) -> set[str]:
        """The last parts of `RUNNERS`' names, when the script imports any of their modules."""
        imported = " ".join(
            source_text(node) for node in walk(self.index.module)
            if isinstance(node, cst.Import | cst.ImportFrom)
        )  # fmt: skip
        return {"run", "Fire"} if "absl" in imported or "fire" in imported else set()

    def reaches(
        self,
        node: cst.CSTNode,
        found: Callable[[cst.CSTNode], bool],
        depth: int = 0,
        seen: dict[int, int] | None = None,
    ) -> bool:
        """Whether `found` holds for a node under `node`, or under a function it calls
        (`MAX_DEPTH` calls deep). A function is searched again only when reached in fewer
        calls than before (`seen`: the fewest so far), so a query costs each function at
        most `MAX_DEPTH` searches, however many calls lead to it."""
        seen = {} if seen is None else seen
        for inner in walk(node):
            if found(inner):
                return True
            if isinstance(inner, cst.Call) and depth < MAX_DEPTH:
                bodies = [function.body for function in self.callees(inner)]
                for body in bodies or self.held_callees(inner):
                    if seen.get(id(body), MAX_DEPTH + 1) <= depth + 1:
                        continue
                    seen[id(body)] = depth + 1
                    if self.reaches(body, found, depth + 1, seen):
                        return True
        return False

    def held_callees(self, call: cst.Call) -> list[cst.CSTNode]:
        """The bodies of the functions and lambdas `call` may run when what it calls was
        taken from a container of them: `AUGS[i](x)`, or `op(x)` with `op` bound (assigned,
        or a loop's target) from an expression that names the container
        (`op = random.choice(AUGS)`, `for name, fn in HOOKS.items()`), in the call's own
        function (round-19 audit s16: RandAugment-style ops, one drawing torch noise)."""
        containers = self._containers
        if not containers:
            return []
        func = call.func
        if isinstance(func, cst.Subscript):
            return containers.get(dotted(func.value) or "", [])
        if not isinstance(func, cst.Name) or func.value in self.index.functions:
            return []
        scope = self.index.function_of(call) or self.index.module
        key = (id(scope), func.value)
        if key not in self._held:  # asked for every call of `len`, `criterion`...: once
            self._held[key] = self._bound_from_containers(scope, func.value)
        return self._held[key]

    def _bound_from_containers(self, scope: cst.CSTNode, name: str) -> list[cst.CSTNode]:
        """What the containers named where `name` is bound in `scope` hold."""
        containers = self._containers
        held: list[cst.CSTNode] = []
        for node in walk(scope):
            if isinstance(node, cst.Assign):
                targets = [target.target for target in node.targets]
                source: cst.CSTNode = node.value
            elif isinstance(node, cst.For):
                targets, source = [node.target], node.iter
            else:
                continue
            if not any(is_name(n, name) for t in targets for n in walk(t)):
                continue
            for part in walk(source):
                held += containers.get(dotted(part) or "", [])
        return held

    @cached_property
    def _containers(self) -> dict[str, list[cst.CSTNode]]:
        """Lists, tuples, sets and dicts that hold the script's functions or lambdas, by
        the name they are assigned to (`AUGS = [flip, add_noise]`, `self.hooks =
        {"eval": evaluate}`), each with the bodies of what it holds; a function in
        `functools.partial(f, ...)` counts."""
        index = self.index
        found: dict[str, list[cst.CSTNode]] = {}
        for assign in index.assigns:
            value = assign.value
            if isinstance(value, cst.Dict):
                elements = [e.value for e in value.elements if isinstance(e, cst.DictElement)]
            elif isinstance(value, (cst.List, cst.Tuple, cst.Set)):
                elements = [e.value for e in value.elements]
            else:
                continue
            held: list[cst.CSTNode] = []
            for element in elements:
                if isinstance(element, cst.Call) and dotted(element.func) in PARTIALS:
                    element = element.args[0].value if element.args else element
                if isinstance(element, cst.Lambda):
                    held.append(element.body)
                elif isinstance(element, cst.Name):
                    held += [
                        f.body
                        for f in index.functions.get(element.value, [])
                        if index.class_of(f) is None
                    ]
            for target in assign.targets:
                name = dotted(target.target)
                if held and name:
                    found.setdefault(name, []).extend(held)
        return found

    def loops_around(self, node: cst.CSTNode, depth: int = 0) -> list[tuple[cst.CSTNode, str]]:
        """The loops enclosing `node`, innermost first, continuing through the call site of
        the function it is in that is in the most loops (the first of those): a chain of
        (loop, "loop") and (call, "call") pairs."""
        chain: list[tuple[cst.CSTNode, str]] = []
        previous = node
        function = None
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, cst.For | cst.While) and previous is ancestor.body:
                chain.append((ancestor, "loop"))
            if isinstance(ancestor, cst.FunctionDef):
                function = ancestor
                break
            previous = ancestor
        if function is not None and depth < MAX_DEPTH:
            sites = self.call_sites(function)
            if sites:
                # the call in the most loops: a step function called for a few profiled or
                # warm-up steps first, then in the epoch loop (round-18 audit s20), is the
                # epoch loop's
                site = max(sites, key=self._loops_in_its_function)
                chain.append((site, "call"))
                chain.extend(self.loops_around(site, depth + 1))
        return chain

    def _loops_in_its_function(self, node: cst.CSTNode) -> int:
        count = 0
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                break
            count += isinstance(ancestor, cst.For | cst.While)
        return count

    def returned_values(self, function: cst.FunctionDef) -> list[cst.BaseExpression]:
        """What `function` itself returns (not its nested functions)."""
        values: list[cst.BaseExpression] = []
        for node in walk(function):
            if (
                isinstance(node, cst.Return)
                and node.value is not None
                and self.index.function_of(node) is function
            ):
                values.append(node.value)
        return values

    def bound_argument(
        self, call: cst.Call, function: cst.FunctionDef, parameter: str
    ) -> cst.BaseExpression | None:
        """The argument `call` gives `function`'s `parameter`."""
        if self.runs(call) is not None:
            return None  # `app.run(main)` gives `main` its own arguments
        params = [p.name.value for p in function.params.params]
        if self.index.class_of(function) is not None and params and params[0] in {"self", "cls"}:
            params = params[1:]
        position = params.index(parameter) if parameter in params else None
        arg = call_arg(call, position, parameter)
        return arg.value if arg is not None else None

    def passed_through(self, call: cst.Call) -> cst.BaseExpression | None:
        """The iterable `call` gives a generator of the script that yields each of its items
        once, in order (torchvision's `metric_logger.log_every(data_loader, print_freq)`:
        `for obj in iterable: ... yield obj`); None for any other call."""
        owner = self.index.classes.get(dotted(call.func) or "")
        if owner is not None:  # `Bar(loader)`, its `__iter__` walking what it was given
            return _passed_through_object(self, call, owner)
        callees = self.callees(call)
        passing = passing_loop(callees[0]) if len(callees) == 1 else None
        if passing is None:
            return None
        return self.bound_argument(call, callees[0], passing[1])

    @staticmethod
    def parameters_of(function: cst.FunctionDef) -> set[str]:
        params = function.params
        every = [*params.posonly_params, *params.params, *params.kwonly_params]
        return {p.name.value for p in every}

    @cached_property
    def _calls_by_name(self) -> dict[str, list[cst.Call]]:
        """`f(...)` calls by `f`, in source order."""
        by_name: dict[str, list[cst.Call]] = {}
        for call in self.index.calls:
            if isinstance(call.func, cst.Name):
                by_name.setdefault(call.func.value, []).append(call)
            run = self.runs(call)
            if run is not None:
                by_name.setdefault(run, []).append(call)
        return by_name

    @cached_property
    def _calls_by_attribute(self) -> dict[str, list[cst.Call]]:
        """`x.f(...)` calls by `f`, in source order."""
        by_attribute: dict[str, list[cst.Call]] = {}
        for call in self.index.calls:
            if isinstance(call.func, cst.Attribute):
                by_attribute.setdefault(call.func.attr.value, []).append(call)
        return by_attribute


def _calls_of_instances(index: SourceIndex) -> dict[str, list[cst.Call]]:
    """For each of the script's classes with a `__call__`, the calls of a name (or a `self.`
    attribute) the script gives an instance of it, matched by name wherever it is called
    (timm's `loss_scaler = NativeScaler()`, called as `loss_scaler(loss, optimizer, ...)`
    in the `train_one_epoch` it is handed to: round-22 audit A timm_channels_last)."""
    callable_classes = {
        owner.name.value
        for method in index.functions.get("__call__", [])
        if (owner := index.class_of(method)) is not None
    }
    if not callable_classes:
        return {}
    names: dict[str, str] = {}  # the name an instance is given -> its class
    for assign in index.assigns:
        value = assign.value
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)):
            continue
        if value.func.value not in callable_classes:
            continue
        for target in assign.targets:
            name = dotted(target.target)
            if name is not None:
                names[name.removeprefix("self.")] = value.func.value
    found: dict[str, list[cst.Call]] = {}
    for call in index.calls:
        called = dotted(call.func)
        if called is None or called in index.functions or called in index.classes:
            continue
        owner_name = names.get(called.removeprefix("self."))
        if owner_name is not None:
            found.setdefault(owner_name, []).append(call)
    return found


# nn.Module methods that return the module itself.
RETURN_SELF = frozenset({"to", "cuda", "cpu", "train", "eval", "float", "double", "half"})


def _instance_classes(index: SourceIndex) -> dict[str, str]:
    """The names (and `self.` attributes, by their attribute) the script binds to objects of
    one of its classes, and that class, for a name never bound otherwise."""
    names: dict[str, str | None] = {}
    for assign in index.assigns:
        value = assign.value
        while (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in RETURN_SELF
        ):  # `MoENet().to(device)`: the same object (round-47 audit C moe_es)
            value = value.func.value
        made = (
            value.func.value
            if isinstance(value, cst.Call)
            and isinstance(value.func, cst.Name)
            and value.func.value in index.classes
            else None
        )
        for target in assign.targets:
            name = dotted(target.target)
            if name is not None:
                key = name.removeprefix("self.")
                names[key] = made if names.get(key, made) == made else None
    return {name: made for name, made in names.items() if made is not None}


def _passed_through_object(
    graph: CallGraph, call: cst.Call, owner: cst.ClassDef
) -> cst.BaseExpression | None:
    """The iterable a class of the script is made with, when its `__iter__` yields each
    item of it once, in order, as tqdm does (`for obj in self.iterable: yield obj`, or
    `yield from self.iterable` when the bar is disabled): `__init__` keeps the parameter
    in that attribute (round-41, corpus Cutout's `tqdm(loader, disable=...)`)."""
    body = owner.body.body if isinstance(owner.body, cst.IndentedBlock) else ()
    by_name = {line.name.value: line for line in body if isinstance(line, cst.FunctionDef)}
    init, iterate = by_name.get("__init__"), by_name.get("__iter__")
    if init is None or iterate is None:
        return None
    walked = _iterated_attribute(iterate)
    if walked is None:
        return None
    kept = {
        value.value
        for node in walk(init.body)
        if isinstance(node, cst.Assign) and len(node.targets) == 1
        for target, value in _pairs(node.targets[0].target, node.value)
        if dotted(target) == f"self.{walked}" and isinstance(value, cst.Name)
    }
    if len(kept) != 1:
        return None
    return graph.bound_argument(call, init, kept.pop())


def _pairs(
    target: cst.BaseExpression, value: cst.BaseExpression
) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """What each target of an assignment is given: `self.a, self.b = a, b` pairs them."""
    if isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple):
        if len(target.elements) == len(value.elements):
            return [
                (t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)
            ]
        return []
    return [(target, value)]


def _iterated_attribute(function: cst.FunctionDef) -> str | None:
    """The attribute of `self` an `__iter__` yields every item of, once and in order: each
    yield is `yield from self.a`, or `yield x` in the body of a `for x in self.a` of the
    method; None for anything else."""
    walked: set[str] = set()
    yields = [node for node in walk(function.body) if isinstance(node, cst.Yield)]
    if not yields:
        return None
    loops = [node for node in walk(function.body) if isinstance(node, cst.For)]
    for found in yields:
        if isinstance(found.value, cst.From):
            read = dotted(found.value.item)
        else:
            loop = next(
                (
                    loop
                    for loop in loops
                    if isinstance(loop.body, cst.IndentedBlock)
                    and any(
                        isinstance(line, cst.SimpleStatementLine)
                        and any(
                            isinstance(small, cst.Expr) and small.value is found
                            for small in line.body
                        )
                        for line in loop.body.body
                    )
                ),
                None,
            )
            if loop is None or found.value is None or not loop.target.deep_equals(found.value):
                return None
            read = dotted(loop.iter)
        if read is None or not read.startswith("self.") or read.count(".") != 1:
            return None
        walked.add(read.removeprefix("self."))
    return walked.pop() if len(walked) == 1 else None


def passing_loop(function: cst.FunctionDef) -> tuple[cst.For, str] | None:
    """The loop of a generator that yields each item of one of its parameters once, in
    order (`for i, obj in enumerate(iterable): yield obj; ...`), and that parameter."""
    yields = [node for node in walk(function.body) if isinstance(node, cst.Yield)]
    loops = [
        node
        for node in function.body.body
        if isinstance(node, cst.For) and isinstance(node.body, cst.IndentedBlock)
    ]
    if len(yields) != 1 or len(loops) != 1 or loops[0].orelse is not None:
        return None
    loop = loops[0]
    iterable = loop.iter
    if isinstance(iterable, cst.Call) and is_name(iterable.func, "enumerate") and iterable.args:
        iterable = iterable.args[0].value
    if not isinstance(iterable, cst.Name):
        return None
    target: cst.BaseExpression = loop.target
    if isinstance(target, cst.Tuple) and loop.iter is not iterable:
        target = target.elements[-1].value  # `for i, obj in enumerate(iterable)`
    # The yield is a statement of the loop's own body, of the loop's item.
    assert isinstance(loop.body, cst.IndentedBlock)
    in_body = any(
        isinstance(line, cst.SimpleStatementLine)
        and any(isinstance(small, cst.Expr) and small.value is yields[0] for small in line.body)
        for line in loop.body.body
    )
    item = yields[0].value
    if not in_body or item is None or not target.deep_equals(item):
        return None
    return loop, iterable.value
