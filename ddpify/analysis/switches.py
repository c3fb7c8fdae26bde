"""One `DataLoader(...)` in a function of the script that makes both the training loader and
the others, told apart by what each call gives one of its parameters:

    def make_loader(x, y, train):
        return DataLoader(TensorDataset(x, y), batch_size=64, shuffle=train)

    train_loader = make_loader(x_tr, y_tr, train=True)
    val_loader = make_loader(x_va, y_va, train=False)

Only the loader the training loop reads may take the DistributedSampler: sharding the call
for every caller would have each process evaluate its part only. When every call gives the
parameter a literal, and the calls the training loops read give one the others do not,
the sampler goes where that parameter says so (`sampler=DistributedSampler(...) if train
else None`), as a human writes it (round-41 audit B c7_confusion).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from ddpify.analysis.loaders import Loader, string_value, strip_iteration
from ddpify.analysis.tree import walk
from ddpify.analysis.values import MAX_STEPS

if TYPE_CHECKING:
    from ddpify.analysis.script import TrainingScript


@dataclass(frozen=True)
class Switch:
    """The parameter that tells the training loader apart, and the calls that make it."""

    parameter: str  # `train`
    literal: str  # what the training calls give it, as written: `True`, `"train"`
    train_sites: tuple[cst.Call, ...]

    @property
    def test(self) -> str:
        """True where the loader trains: `train`, `not eval_mode`, `split == "train"`."""
        if self.literal == "True":
            return self.parameter
        if self.literal in ("False", "None"):
            return f"not {self.parameter}"
        return f"{self.parameter} == {self.literal}"

    @property
    def other(self) -> str:
        """True where it does not: `not train`, `split != "train"`."""
        if self.literal == "True":
            return f"not {self.parameter}"
        if self.literal in ("False", "None"):
            return self.parameter
        return f"{self.parameter} != {self.literal}"


def loader_switches(script: TrainingScript) -> dict[int, Switch]:
    """The switch of each training loader (by id) that has one."""
    foreign = {id(training.loader) for training in script.foreign_training}
    found = {}
    for loader in script.train_loaders:
        if loader.key_var is None and id(loader) not in foreign:
            switch = _switch(script, loader)
            if switch is not None:
                found[id(loader)] = switch
    return found


def train_sites(script: TrainingScript, loader: Loader) -> list[cst.Call] | None:
    """The calls of the function making `loader` that the training loops read it from."""
    function = script.index.function_of(loader.call)
    if function is None:
        return None
    found: list[cst.Call] = []
    for loop in script.train_loops:
        if loop.loader is not loader:
            continue
        scope = script.index.function_of(loop.batch_loop)
        sites = sites_through(script, loop.batch_loop.iter, scope, function)
        if sites is None:
            return None
        found += sites
    return found or None


def sites_through(
    script: TrainingScript,
    expr: cst.BaseExpression,
    scope: cst.FunctionDef | None,
    function: cst.FunctionDef,
    depth: int = 0,
) -> list[cst.Call] | None:
    """The calls of `function` whose result `expr` (read in `scope`) may be, followed through
    names and parameters; None when some way cannot be followed."""
    if depth > MAX_STEPS:
        return None
    graph = script.graph
    expr = strip_iteration(expr, graph)
    if isinstance(expr, cst.Call):
        return [expr] if graph.callee(expr) is function else None
    if not isinstance(expr, cst.Name):
        return None
    found: list[cst.Call] = []
    if scope is not None and expr.value in graph.parameters_of(scope):
        for site in graph.call_sites(scope):
            given = graph.bound_argument(site, scope, expr.value)
            inner = (
                sites_through(script, given, script.index.function_of(site), function, depth + 1)
                if given is not None
                else None
            )
            if inner is None:
                return None
            found += inner
        return found or None
    made = script.values.values_of(expr.value, scope)
    for value, where in made:
        inner = sites_through(script, value, where, function, depth + 1)
        if inner is None:
            return None
        found += inner
    return found or None


def _switch(script: TrainingScript, loader: Loader) -> Switch | None:
    index, graph = script.index, script.graph
    function = index.function_of(loader.call)
    if function is None or not _returns(script, function, loader.call):
        return None
    trained = train_sites(script, loader)
    sites = graph.call_sites(function)
    if trained is None or len(sites) < 2:
        return None
    read = {node.value for node in walk(loader.call) if isinstance(node, cst.Name)}

    # the parameter the loader reads (`shuffle=train`) first, then a flag or a name before
    # a number (`make_loader(x, 32, train=False)`: `train`, not the offset)
    def rank(parameter: str) -> tuple[bool, bool]:
        literal = _literal(script, function, sites[0], parameter) or "0"
        return parameter not in read, literal[0].isdigit()

    ranked = sorted(graph.parameters_of(function), key=rank)
    for parameter in ranked:
        given = {id(site): _literal(script, function, site, parameter) for site in sites}
        if None in given.values():
            continue
        literals = {given[id(site)] for site in trained}
        others = {given[id(site)] for site in sites if not any(site is t for t in trained)}
        if len(literals) == 1 and others and not literals & others:
            literal = literals.pop()
            assert literal is not None
            return Switch(parameter, literal, tuple(trained))
    return None


def _returns(script: TrainingScript, function: cst.FunctionDef, call: cst.Call) -> bool:
    """Whether `function` returns what `call` makes, and nothing else reads it there."""
    returned = script.graph.returned_values(function)
    return bool(returned) and all(
        any(end is call for end in script.values.origins(value, function)) for value in returned
    )


def _literal(
    script: TrainingScript, function: cst.FunctionDef, site: cst.Call, parameter: str
) -> str | None:
    """What `site` gives `parameter` (its default when not given), when a literal, as a
    condition spells it: `True`, `3`, `"train"` (in double quotes whatever the script's)."""
    given = script.graph.bound_argument(site, function, parameter)
    if given is None:
        given = next((p.default for p in function.params.params if p.name.value == parameter), None)
    if isinstance(given, cst.Name) and given.value in ("True", "False", "None"):
        return given.value
    if isinstance(given, cst.Integer):
        return given.value
    text = string_value(given) if isinstance(given, cst.SimpleString) else None
    if text is not None and text.isidentifier():
        return f'"{text}"'
    return None


def reads_only_others(
    script: TrainingScript, switch: Switch | None, loader: Loader, loop: cst.For | cst.CompFor
) -> bool:
    """Whether `loop` reads a loader the switch keeps without the sampler."""
    function = script.index.function_of(loader.call)
    if switch is None or function is None:
        return False
    sites = sites_through(script, loop.iter, script.index.function_of(loop), function)
    trained = {id(site) for site in switch.train_sites}
    return sites is not None and not any(id(site) in trained for site in sites)
