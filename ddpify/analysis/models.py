"""The models a script trains: each one's names, the optimizer that trains it, and where it
goes to its device (where the DDP wrap belongs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from ddpify.analysis.api import DATA_PARALLEL, PARAMETERS
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.script import TrainingScript
from ddpify.analysis.tree import call_arg, dotted, is_method_call, walk


@dataclass
class Model:
    """A model trained by an optimizer, all the names it goes by, and where it is placed."""

    names: set[str]
    optimizer_call: cst.Call
    placement: cst.BaseStatement | None = None
    placed_name: str | None = None
    data_parallel: list[cst.Call] = field(default_factory=list)


class Models:
    """The trained models and their placement."""

    def __init__(self, index: SourceIndex, script: TrainingScript) -> None:
        self.index = index
        self.script = script

    @cached_property
    def all(self) -> list[Model]:
        models: list[Model] = []
        for optimizer in self.script.optimizer_calls:
            params = call_arg(optimizer, 0, "params")
            if params is None:
                continue
            for node in walk(params.value):
                if is_method_call(node, *PARAMETERS):
                    assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                    name = self._model_root(dotted(node.func.value))
                    if name is None or any(name in model.names for model in models):
                        continue
                    models.append(Model({name}, optimizer))
        for model in models:
            self._find_placement(model)
        return models

    @cached_property
    def assigned_names(self) -> set[str]:
        """Every dotted name the file assigns to (`model`, `self.model`, `args`...)."""
        names = set()
        for node in walk(self.index.module):
            if isinstance(node, cst.AssignTarget | cst.AnnAssign):
                for target in walk(node.target):
                    name = dotted(target) if isinstance(target, cst.BaseExpression) else None
                    if name:
                        names.add(name)
            elif isinstance(node, cst.Param):
                names.add(node.name.value)
        return names

    def _model_root(self, name: str | None) -> str | None:
        """`model` for `model.backbone` (param groups): the part the script assigns."""
        while name and "." in name and name not in self.assigned_names:
            name = name.rsplit(".", 1)[0]
        return name

    def _find_placement(self, model: Model) -> None:
        """Grow the model's names through assignments and find where it goes to its device."""
        moves: list[tuple[cst.BaseStatement, str]] = []
        for _ in range(3):  # names flow `model` -> `self.model` -> ...: a few rounds suffice
            for node in walk(self.index.module):
                if isinstance(node, cst.Assign) and len(node.targets) == 1:
                    target = dotted(node.targets[0].target)
                    source = _moved_value(node.value)
                    if target is None:
                        continue
                    base = dotted(source) if source is not None else None
                    if base in model.names or (target in model.names and source is not None):
                        model.names.add(target)
                        if source is not node.value:
                            moves.append((self.index.statement_of(node), target))
                    if isinstance(node.value, cst.Call) and self.index.is_call_to(
                        node.value, DATA_PARALLEL
                    ):
                        inner = call_arg(node.value, 0, "module")
                        if inner is not None and dotted(inner.value) in model.names:
                            model.names.add(target)
                elif isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
                    source = _moved_value(node.value)
                    if source is not node.value and dotted(source) in model.names:
                        name = dotted(source)
                        assert name is not None
                        moves.append((self.index.statement_of(node), name))
        for call in self.index.calls:
            if self.index.is_call_to(call, DATA_PARALLEL):
                inner = call_arg(call, 0, "module")
                if inner is not None and dotted(inner.value) in model.names:
                    model.data_parallel.append(call)
        unique = {id(statement): (statement, name) for statement, name in moves}
        if unique:
            statement, name = max(unique.values(), key=lambda item: self.index.line(item[0]))
            model.placement, model.placed_name = self._unconditional(statement), name
            return
        # Never moved (a CPU script): wrap right after it is built, before the optimizer.
        scope = self.index.function_of(model.optimizer_call)
        built = [
            node
            for node in walk(scope or self.index.module)
            if isinstance(node, cst.Assign)
            and len(node.targets) == 1
            and dotted(node.targets[0].target) in model.names
            and self.index.function_of(node) is scope
            and self.index.precedes(node, model.optimizer_call)
        ]
        if built:
            last = built[-1]
            model.placement = self.index.statement_of(last)
            model.placed_name = dotted(last.targets[0].target)

    def _unconditional(self, statement: cst.BaseStatement) -> cst.BaseStatement:
        """The statement itself, or the `if`/`with`/`try` it sits in (the outermost below its
        function or loop), so that what is inserted after it runs on every path."""
        anchor = statement
        for ancestor in self.index.ancestors(statement):
            if isinstance(ancestor, cst.FunctionDef | cst.For | cst.While | cst.Module):
                break
            if isinstance(ancestor, cst.If | cst.With | cst.Try):
                anchor = ancestor
        return anchor


def _moved_value(value: cst.BaseExpression) -> cst.BaseExpression:
    """`x` from `x.to(...)` / `x.cuda()`; the value itself when it is not a device move."""
    if (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in {"to", "cuda"}
    ):
        return value.func.value
    return value
