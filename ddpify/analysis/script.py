"""The parts of a single-GPU training script a conversion touches: the backward passes and
optimizers that make it one, the batch and epoch loops (followed through calls between the
script's own functions and methods), the loaders that train, and the entry point."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import cast

import libcst as cst

from ddpify.analysis.api import OPTIMIZER_CLASS, PARAMETERS, RETURN_SELF
from ddpify.analysis.calls import CallGraph
from ddpify.analysis.effects import SideEffects
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.loaders import (
    Loader,
    Loaders,
    keyed_read,
    literal_strings,
    read_as,
    string_value,
    strip_iteration,
)
from ddpify.analysis.project import Helper, HelperEffects, Project
from ddpify.analysis.splits import DrawnSplit, drawn_splits
from ddpify.analysis.tree import (
    call_arg,
    dotted,
    is_attribute,
    is_lone,
    is_method_call,
    is_name,
    source_text,
    walk,
)
from ddpify.analysis.values import MAX_STEPS, Values


@dataclass
class TrainLoop:
    """The loop over the training batches and the epoch loop around it, if any."""

    batch_loop: cst.For
    loader: Loader | None
    epoch_loop: cst.For | cst.While | None = None
    # The training loader as an expression valid inside the epoch loop, for `set_epoch`.
    loader_at_epoch: str | None = None
    epoch_var: str | None = None
    # `for phase in ["train", "val"]` between the epoch loop and a batch loop over
    # `loaders[phase]` (the transfer-learning tutorial): the loop, not an epoch loop.
    phase_loop: cst.For | None = None
    # `for (a, b) in zip(loader_a, loader_b)`: the loaders read along with `loader`, and their
    # names as seen from the epoch loop (None where they cannot be named there).
    also: list[Loader] = field(default_factory=list)
    also_at_epoch: list[str | None] = field(default_factory=list)
    # The loaders other calls of the loop's function give it (a pretraining stage, then a
    # fine-tuning one): the epoch loop is in the function too, and its set_epoch theirs.
    given: list[Loader] = field(default_factory=list)


@dataclass
class ForeignTraining:
    """A call of a function in another file of the script's project that trains (torchvision
    references' `train_one_epoch(model, criterion, optimizer, data_loader, ...)` from
    `engine.py`): the batch loop is there, the loader and the epoch loop here."""

    call: cst.Call
    helper: Helper
    effects: HelperEffects
    loader: Loader | None = None
    loader_name: str | None = None  # the loader as the call is given it
    epoch_loop: cst.For | cst.While | None = None
    epoch_var: str | None = None


@dataclass
class Entry:
    """Where the process group is set up, and the statements the cleanup must follow."""

    setup_before: cst.BaseStatement | None  # insert the setup before this statement...
    setup_after: cst.BaseStatement | None  # ...or after this one (a script: its imports)
    body: Sequence[cst.BaseStatement] = ()  # the entry statements, run under try/finally
    at_module_level: bool = True


class TrainingScript:
    """The training a script does, as one process."""

    def __init__(
        self,
        index: SourceIndex,
        graph: CallGraph,
        values: Values,
        loaders: Loaders,
        project: Project | None = None,
        effects: SideEffects | None = None,
    ) -> None:
        self.index = index
        self.graph = graph
        self.values = values
        self.loaders = loaders
        self.project = project
        self.effects = effects or SideEffects(index, graph, values)

    @cached_property
    def foreign_training(self) -> list[ForeignTraining]:
        """Calls of the project's functions in other files that run a backward pass."""
        return _foreign_training(self)

    @cached_property
    def trainer_classes(self) -> list[tuple[cst.Call, Path]]:
        """Objects made from a class of another project file that trains in its own methods
        (pytorch-template's `Trainer(model, criterion, optimizer, ...)`), with its file."""
        return _trainer_classes(self)

    @cached_property
    def training_calls(self) -> list[cst.Call]:
        """The calls that train: backward passes, and calls of helpers of other files that
        run them."""
        return [*self.backward_calls, *(training.call for training in self.foreign_training)]

    @cached_property
    def backward_calls(self) -> list[cst.Call]:
        return [
            call
            for call in self.index.calls
            if is_attribute(call.func, "backward") and not self.index.other_framework
        ]

    @cached_property
    def loss_nodes(self) -> set[int]:
        """The ids of the nodes of every expression a backward pass's loss is computed from:
        followed through the names it is assigned from and what the script's own functions
        return (`loss = criterion(model.head(h), y)`, `loss = model.training_step(batch)`)."""
        return _loss_nodes(self.index, self.graph, self.values, self.backward_calls)

    def loss_nodes_of(self, backward: cst.Call) -> set[int]:
        """`loss_nodes` for one backward pass."""
        return _loss_nodes(self.index, self.graph, self.values, [backward])

    @cached_property
    def split_draws(self) -> list[DrawnSplit]:
        """Unseeded random draws the training loaders' data is built from (a permutation
        that splits train from validation): each process would draw its own."""
        found: list[DrawnSplit] = []
        for loader in self.train_loaders:
            dataset = call_arg(loader.call, 0, "dataset")
            if dataset is not None:
                found += drawn_splits(self.index, self.values, dataset.value, self.effects)
            for made in _sampler_arguments(self, loader):  # `SubsetRandomSampler(train_idx)`
                found += drawn_splits(self.index, self.values, made)
        unique = {(id(split.statement), split.names): split for split in found}
        for split in _drawn_evaluation_sets(self):  # the training data's draws stay so
            unique.setdefault((id(split.statement), split.names), split)
        return list(unique.values())

    @cached_property
    def optimizer_calls(self) -> list[cst.Call]:
        """The calls that make an optimizer; for one made in a method of the model's class
        over `self.parameters()` and returned, the calls of that method instead."""
        found: list[cst.Call] = []
        for call in self.made_optimizers:
            found += self.optimizer_factories.get(call, [call])
        return found + self.manual_updates

    @cached_property
    def made_optimizers(self) -> list[cst.Call]:
        pattern = OPTIMIZER_CLASS
        own = _own_optimizers(self.index, pattern)
        return [
            call
            for call in self.index.calls
            if any(pattern.match(name) for name in self.index.qualified_names(call.func))
            or _chosen_by_name(self.index, call)
            or _passed_in_class(self, call)
            or (isinstance(call.func, cst.Name) and call.func.value in own)
            or id(call) in self.foreign_optimizers
        ]

    @cached_property
    def foreign_optimizers(self) -> dict[int, cst.BaseExpression]:
        """Optimizers a function of another project file makes over the parameters of a
        model it is given (`optimizer = build_optimizer(model, cfg)`, round-32 audit C
        optim_factory_module): by call, the model given."""
        return _foreign_optimizers(self)

    @cached_property
    def optimizer_factories(self) -> dict[cst.Call, list[cst.Call]]:
        """Optimizers made in a method of the model's own class over `self.parameters()` and
        returned (nanoGPT's `optimizer = model.configure_optimizers(...)`, round-15 audit
        s02), and the calls of that method from outside the class: each stands for the
        optimizer of the model it is called on."""
        return _optimizer_factories(self)

    @cached_property
    def manual_updates(self) -> list[cst.Call]:
        """Updates made by hand, without an optimizer: `for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)` (PyTorch's char-RNN tutorial), `p -= lr * p.grad`.
        The `model.parameters()` call stands for the optimizer."""
        found = []
        for node in walk(self.index.module):
            if not (isinstance(node, cst.For) and is_method_call(node.iter, *PARAMETERS)):
                continue
            target = dotted(node.target)
            if target is not None and any(
                is_attribute(inner, "grad") and dotted(inner.value) == target  # type: ignore[attr-defined]
                for inner in walk(node.body)
            ):
                assert isinstance(node.iter, cst.Call)
                found.append(node.iter)
        return found

    @cached_property
    def is_training_script(self) -> bool:
        # Cheapest first: the optimizer check is the only one that needs name resolution.
        trains_here = (
            bool(self.backward_calls)
            and self.index.uses_torch
            and bool(self.optimizer_calls)
            and (
                any(_passes_parameters(call) for call in self.index.calls)
                or any(self.builds_from_parameters(call) for call in self.optimizer_calls)
                or bool(raw_optimizers(self))
            )
        )
        # Or it hands its training to a helper of another of its files.
        return trains_here or (
            self.index.uses_torch and bool(self.foreign_training or self.trainer_classes)
        )

    def parameter_sources(self, optimizer: cst.Call) -> list[cst.BaseExpression]:
        """The expressions an optimizer's `params` may come from: the argument itself, and
        what a name it reads was built from (`groups = [{"params": [p for n, p in
        model.named_parameters() if ...]}]`, Hugging Face's no-decay groups)."""
        model = self.foreign_optimizers.get(id(optimizer))
        if model is not None:  # `build_optimizer(model, cfg)`: over `model.parameters()`
            return [cst.Call(func=cst.Attribute(value=model, attr=cst.Name("parameters")))]
        if any(optimizer in sites for sites in self.optimizer_factories.values()):
            # `model.configure_optimizers(...)`: what the method reads as `self.parameters()`
            assert isinstance(optimizer.func, cst.Attribute)
            parameters = cst.Attribute(value=optimizer.func.value, attr=cst.Name("parameters"))
            return [cst.Call(func=parameters)]
        return self.given_parameters(optimizer)

    def given_parameters(self, optimizer: cst.Call) -> list[cst.BaseExpression]:
        return _given_parameters(self, optimizer)

    def builds_from_parameters(self, optimizer: cst.Call) -> bool:
        return any(
            is_method_call(node, *PARAMETERS)
            for source in self.parameter_sources(optimizer)
            for node in walk(source)
        )

    @cached_property
    def train_loops(self) -> list[TrainLoop]:
        """One entry per distinct batch loop that runs a backward pass."""
        loops: list[TrainLoop] = []
        seen: set[cst.CSTNode] = set()
        for backward in [*self.backward_calls, *_stepping_helpers(self)]:
            chain = self.graph.loops_around(backward)
            batch_index = _batch_loop_index(self, chain)
            if batch_index is None:
                continue
            batch_loop = chain[batch_index][0]
            if not isinstance(batch_loop, cst.For) or batch_loop in seen:
                continue
            seen.add(batch_loop)
            scope = self.index.function_of(batch_loop)
            loader = self.loaders.loader_for(self.loaders.resolve(batch_loop.iter, scope))
            if loader is None:
                loader = _branch_that_trains(self, batch_loop, backward, scope)
            rest = chain[batch_index + 1 :]
            literal = None
            if loader is None:
                literal = _literal_phase_loader(self, batch_loop, backward, rest, scope)
            zipped = (
                _zipped(self.loaders, batch_loop.iter, scope)
                if loader is None and literal is None
                else []
            )
            if zipped:
                loader = zipped[0][0]
            train = TrainLoop(batch_loop, loader)
            train.also = [extra for extra, _ in zipped[1:]]
            # The epoch loop: the next loop out, and the loader's name as seen from there.
            expression = self.loader_name(batch_loop.iter, scope) if not zipped else zipped[0][1]
            others = [name for _, name in zipped[1:]]
            if literal is not None:
                train.loader, train.phase_loop, expression = literal
                rest = rest[1:]
            elif loader is not None and loader.key_var is not None:
                expression, rest = _training_key(self.index, train, loader, backward, rest)
            function = scope
            for node, kind in rest:
                if kind == "call":
                    assert isinstance(node, cst.Call)
                    expression = self._name_at_call_site(expression, function, node, loader)
                    others = [self._name_at_call_site(n, function, node) for n in others]
                    function = self.index.function_of(node)
                    continue
                assert isinstance(node, cst.For | cst.While)
                train.epoch_loop = node
                train.loader_at_epoch = expression
                train.also_at_epoch = others
                train.epoch_var = epoch_variable(node, self.graph)
                break
            train.given = _given_elsewhere(self, train)
            loops.append(train)
        return loops

    def loader_name(
        self, iterable: cst.BaseExpression, scope: cst.FunctionDef | None
    ) -> str | None:
        """The name the batch loop's loader goes by where the loop is: `loader` for `for x in
        loader` and `enumerate(loader)`, and also for `pbar` or `batches` made by `pbar =
        tqdm(loader)` or `batches = iter(loader)` (the wrapper has no sampler)."""
        expr = strip_iteration(iterable, self.graph)
        for _ in range(MAX_STEPS):
            name = dotted(expr)
            keyed = keyed_read(expr)
            if name is None and keyed is not None and string_value(keyed[1]) is not None:
                return f"{keyed[0]}[{keyed[1]}]"  # `loaders["train"]`
            if name is None:
                return None
            values = self.values.assignments(name, scope)
            inner = strip_iteration(values[0], self.graph) if len(values) == 1 else None
            if inner is None or inner is values[0]:
                return name
            expr = inner
        return None

    def _name_at_call_site(
        self,
        name: str | None,
        function: cst.FunctionDef | None,
        site: cst.Call,
        loader: Loader | None = None,
    ) -> str | None:
        """`name`, read in `function`, as the caller at `site` names it: a parameter's
        argument, `self.x` via the same object, a local's value, a global as it is."""
        if name is None or function is None:
            return name
        head = re.split(r"[.\[]", name)[0]
        local = self.values.assignments(head, function) if head != "self" else []
        if local and head not in self.graph.parameters_of(function):
            text = _local_value(self.loaders, local, head, function, loader)
            if text is None:
                return None  # a local of the callee: no name in the caller
            return self._name_at_call_site(text + name[len(head) :], function, site)
        if head in self.graph.parameters_of(function) and head != "self":
            argument = self.graph.bound_argument(site, function, head)
            # a name, or one read by key: `run_epoch(model, loaders["train"], ...)`
            base = read_as(argument) if argument is not None else None
            return base + name[len(head) :] if base else None
        if head == "self":
            caller = self.index.function_of(site)
            same_class = caller is not None and self.index.class_of(caller) is self.index.class_of(
                function
            )
            via_self = isinstance(site.func, cst.Attribute) and is_name(site.func.value, "self")
            return name if same_class and via_self else None
        return name  # a global

    @cached_property
    def train_loaders(self) -> list[Loader]:
        """Loaders that feed a backward pass; by name and `shuffle=` when not traceable."""
        traced = [loop.loader for loop in self.train_loops if loop.loader is not None]
        traced += [extra for loop in self.train_loops for extra in [*loop.also, *loop.given]]
        traced += [t.loader for t in self.foreign_training if t.loader is not None]
        if traced:
            traced += _drawn_for_the_loss(self)
            traced += [other for loader in traced for other in alternatives(self, loader)]
            for loader in traced:
                loader.trains = True
            return list({id(loader): loader for loader in traced}.values())
        if len(self.loaders.all) == 1 and not _named_to_evaluate(self.loaders.all[0]):
            self.loaders.all[0].trains = True
            return list(self.loaders.all)
        drawn = list({id(loader): loader for loader in _drawn_for_the_loss(self)}.values())
        if drawn:  # `x, y = next(data_iter)` in a step loop (detectron2's do_train)
            for loader in drawn:
                loader.trains = True
            return drawn
        guessed = [
            loader
            for loader in self.loaders.all
            if _looks_like_training(loader)
            and not _made_to_evaluate(self.index, loader)
            and not _evaluates(self, self.index.function_of(loader.call))
        ]
        for loader in guessed:
            loader.trains = True
        return guessed

    @cached_property
    def main_guard(self) -> cst.If | None:
        for statement in self.index.module.body:
            test = statement.test if isinstance(statement, cst.If) else None
            if (
                isinstance(test, cst.Comparison)
                and is_name(test.left, "__name__")
                and len(test.comparisons) == 1
                and isinstance(test.comparisons[0].operator, cst.Equal)
                and isinstance(test.comparisons[0].comparator, cst.SimpleString)
            ):
                assert isinstance(statement, cst.If)
                return statement
        return None

    @cached_property
    def trains_at_module_level(self) -> bool:
        """A tutorial-style script: the training loop is module-level code."""
        loops = self.train_loops
        return (
            any(
                self.index.function_of(loop.batch_loop) is None
                or (loop.epoch_loop is not None and self.index.function_of(loop.epoch_loop) is None)
                for loop in loops
            )
            or (not loops and not self.index.functions)
            or (
                # nanoGPT's `while iter_num < max_iters:` at module level, around the backward
                # (under `if __name__ == "__main__":`, makemore's, the guard is the entry)
                not loops
                and self.main_guard is None
                and any(self.index.function_of(call) is None for call in self.backward_calls)
            )
        )

    @cached_property
    def entry(self) -> Entry | None:
        """Where to set up the process group: before the statement that starts training."""
        if self.trains_at_module_level:
            last_import = None
            for statement in self.index.module.body:
                if is_lone(statement, (cst.Import, cst.ImportFrom)):
                    last_import = statement
                elif not _is_docstring(statement):
                    break
            if last_import is None:
                return Entry(setup_before=self.index.module.body[0], setup_after=None)
            return Entry(setup_before=None, setup_after=last_import)
        block: Sequence[cst.BaseStatement] = self.index.module.body
        if self.main_guard is not None and isinstance(self.main_guard.body, cst.IndentedBlock):
            block = self.main_guard.body.body
        at_module_level = block is self.index.module.body
        for position, candidate in enumerate(block):
            if isinstance(candidate, cst.FunctionDef | cst.ClassDef):
                continue
            # `if args.inference: inference(args) else: main(args)` in the main block
            # (pytorch/examples' language translation): set up before the `if`, so that every
            # branch, training or not, runs the converted functions with a group
            branching = isinstance(candidate, cst.If) and not at_module_level
            if isinstance(candidate, cst.If) and not (branching and self._trains(candidate)):
                continue
            for node in walk(candidate):
                if isinstance(node, cst.Call) and self.graph.calls_script(node):
                    return Entry(
                        setup_before=_first_needing_group(self, block[:position]) or candidate,
                        setup_after=None,
                        body=block[position:],
                        at_module_level=at_module_level,
                    )
        return None

    def _trains(self, statement: cst.BaseStatement) -> bool:
        """Whether `statement` runs a backward pass, itself or through the script's calls."""
        training = {id(call) for call in self.training_calls}
        return self.graph.reaches(statement, lambda node: id(node) in training)

    def after_setup(self, node: cst.CSTNode) -> bool:
        """Whether `node` runs once the process group exists (functions are called later)."""
        entry = self.entry
        if entry is None:
            return False
        if self.index.function_of(node) is not None:
            return True
        anchor = entry.setup_after or entry.setup_before
        assert anchor is not None
        if entry.setup_after is not None:
            return self.index.line(node) > self.index.line(anchor)
        return self.index.line(node) >= self.index.line(anchor)


def _loss_nodes(
    index: SourceIndex, graph: CallGraph, values: Values, backward_calls: list[cst.Call]
) -> set[int]:
    found: set[int] = set()

    def collect(expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int) -> None:
        if depth > MAX_STEPS or id(expr) in found:
            return
        for node in walk(expr):
            found.add(id(node))
            if isinstance(node, cst.Name):
                if index.is_attribute_name(node):
                    continue
                for origin in values.origins(node, scope):
                    if origin is not node and not given_later(index, origin, node):
                        collect(origin, index.function_of(origin), depth + 1)
                        for item in _stored_items(index, node.value, index.function_of(origin)):
                            collect(item, index.function_of(item), depth + 1)
            elif isinstance(node, cst.Call):
                callee = graph.callee(node)
                if callee is not None:
                    for value in graph.returned_values(callee):
                        collect(value, callee, depth + 1)

    for backward in backward_calls:
        if isinstance(backward.func, cst.Attribute):
            collect(backward.func.value, index.function_of(backward), 0)
    return found


def _sampler_arguments(script: TrainingScript, loader: Loader) -> list[cst.BaseExpression]:
    """What the loader's `sampler=` is made from (`train_idx` of `SubsetRandomSampler(
    train_idx)`)."""
    scope = script.index.function_of(loader.call)
    return [
        arg.value
        for passed in script.loaders.argument(loader.call, "sampler") or []
        for made in script.values.origins(passed.value, scope)
        if isinstance(made, cst.Call)
        for arg in made.args
    ]


def _first_needing_group(
    script: TrainingScript, statements: Sequence[cst.BaseStatement]
) -> cst.BaseStatement | None:
    """The first of `statements` (those before the call that starts training) that makes
    a training loader, an optimizer or moves something to a device: the sampler and the
    DDP wrap it will get need the process group, so the setup goes before it."""
    needing = {id(loader.call) for loader in script.train_loaders}
    for loader in script.train_loaders:  # `train_sampler = SubsetRandomSampler(...)` first,
        # then `DataLoader(ds, sampler=train_sampler)`: it becomes a DistributedSampler
        # (round-24 audit B x_cs231n_assignment_b2 made it before the set-up)
        for keyword in ("sampler", "batch_sampler"):
            given = call_arg(loader.call, None, keyword)
            if given is not None and isinstance(given.value, cst.Name):
                scope = script.index.function_of(loader.call)
                needing |= {id(v) for v, _ in script.values.values_of(given.value.value, scope)}
    needing |= {id(call) for call in script.optimizer_calls}
    needing |= {id(split.draw) for split in script.split_draws}  # rank 0's draw is shared
    for statement in statements:
        if script.effects.writes_files(statement):
            # guarded on rank 0, and waited for where it is read (round-16 audit s14:
            # `if not os.path.exists(weights): torch.save(...)` before the set-up had
            # run in every process at once)
            return statement
        for node in walk(statement):
            if id(node) in needing or is_method_call(node, "to", "cuda"):
                return statement
    return None


def _given_parameters(script: TrainingScript, optimizer: cst.Call) -> list[cst.BaseExpression]:
    """`TrainingScript.parameter_sources` of an optimizer made here."""
    if optimizer in script.manual_updates:
        return [optimizer]  # `model.parameters()` updated by hand
    params = call_arg(optimizer, 0, "params")
    if params is None:
        return []
    scope = script.index.function_of(optimizer)
    found = [params.value]
    seen: set[str] = set()
    frontier = [params.value]
    for _ in range(3):  # `groups = [{"params": [p for n, p in named if ...]}]`, `named =
        # list(model.named_parameters())` (Hugging Face's no-decay groups): a few steps
        names = {
            dotted(node) for expr in frontier for node in walk(expr) if isinstance(node, cst.Name)
        } - seen
        seen |= {name for name in names if name is not None}
        frontier = [
            origin
            for name in names
            if name is not None
            for origin in script.values.origins(cst.Name(name), scope)
        ]
        frontier += _filled_by_hand(script.index, {n for n in names if n is not None}, scope)
        found += frontier
    # and the calls that made them, whose own returned values `origins` gives instead
    # (`groups = param_groups_lrd(model, ...)`, MAE's layer decay, round-18 audit s32)
    made: list[cst.BaseExpression] = [
        value
        for name in seen
        for value, _ in script.values.values_of(name, scope)
        if isinstance(value, cst.Call)
    ]
    return found + _handed_parameters(script, found + made)


def _chosen(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The lists `(no_decay if cond else decay)` may be (Swin's `set_weight_decay` in one
    line, round-30 audit A swin_window_attention_ape_b): each branch, or `expr` itself."""
    if isinstance(expr, cst.IfExp):
        return _chosen(expr.body) + _chosen(expr.orelse)
    return [expr]


def _filled_by_hand(
    index: SourceIndex, names: set[str], scope: cst.FunctionDef | None
) -> list[cst.BaseExpression]:
    """What lists of `names` are filled with in `scope` (`g0.append(v.weight)`), and what
    loops over them take them from (`for k, v in model.named_modules()`): parameter groups
    sorted by hand, YOLOv5's `g0, g1, g2` and Barlow Twins' `param_weights, param_biases`
    (round-24 audit A)."""
    found: list[cst.BaseExpression] = []
    for call in index.calls:
        if (
            is_method_call(call, "append", "extend")
            and isinstance(call.func, cst.Attribute)
            and any(dotted(held) in names for held in _chosen(call.func.value))
            and index.function_of(call) is scope
        ):
            found += [arg.value for arg in call.args]
    body = scope.body if scope is not None else index.module
    for node in walk(body):
        if (
            isinstance(node, cst.For)
            and index.function_of(node) is scope
            and any(dotted(target) in names for target in walk(node.target))
        ):
            found.append(node.iter)
    return found


def _foreign_training(script: TrainingScript) -> list[ForeignTraining]:
    """`TrainingScript.foreign_training`."""
    if script.project is None or script.project.path is None or script.index.other_framework:
        return []
    found = []
    for call in script.index.calls:
        if script.graph.calls_script(call) or not call.args:
            continue
        helper = script.project.helper(call) or _closure_called(script, call)
        if helper is None:
            continue
        effects = script.project.effects(helper)
        if not effects.trains:
            continue
        training = ForeignTraining(call, helper, effects)
        scope = script.index.function_of(call)
        for arg in call.args:
            loader = script.loaders.loader_for(script.loaders.resolve(arg.value, scope))
            if loader is not None:
                training.loader, training.loader_name = loader, read_as(arg.value)
                break
        chain = script.graph.loops_around(call)
        if chain and chain[0][1] == "loop":
            loop = chain[0][0]
            assert isinstance(loop, cst.For | cst.While)
            training.epoch_loop = loop
            training.epoch_var = epoch_variable(loop, script.graph)
        found.append(training)
    return found


def _foreign_optimizers(script: TrainingScript) -> dict[int, cst.BaseExpression]:
    """`TrainingScript.foreign_optimizers`."""
    if script.project is None or script.project.path is None:
        return {}
    found: dict[int, cst.BaseExpression] = {}
    for call in script.index.calls:
        if script.graph.calls_script(call) or not call.args:
            continue
        method = _method_called(script, call)
        if method is not None and _makes_its_own_optimizer(method):
            # `optimizer = model.configure_optimizers(...)` with `model = GPT(config)` of
            # model.py (nanoGPT's layout, round-42 audit C gpt_cfgopt: refused)
            found[id(call)] = call.func.value  # type: ignore[attr-defined]
            continue
        parameter = script.project.optimized_parameter(call)
        helper = script.project.helper(call) if parameter is not None else None
        if helper is None or parameter is None:
            continue
        model = helper.graph.bound_argument(call, helper.function, parameter)
        if is_method_call(model, *PARAMETERS):  # `build_optimizer(model.parameters(), cfg)`
            model = model.func.value  # type: ignore[union-attr]
        if isinstance(model, cst.Name | cst.Attribute):
            found[id(call)] = model
    return found


def _method_called(script: TrainingScript, call: cst.Call) -> Helper | None:
    """The method of a project class `call` calls on an object the script made once
    (`model.configure_optimizers(...)` with `model = GPT(config).to(device)`)."""
    func = call.func
    if script.project is None or not (
        isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
    ):
        return None
    values = script.values.values_of(func.value.value, script.index.function_of(call))
    if len(values) != 1:
        return None
    made = values[0][0]
    while is_method_call(made, *RETURN_SELF):
        made = made.func.value  # type: ignore[attr-defined]
    if not isinstance(made, cst.Call) or not script.project.may_be_helper(made):
        return None
    return script.project.method_of(made, func.attr.value)


def _makes_its_own_optimizer(method: Helper) -> bool:
    """A method of a project class that returns a `torch.optim` optimizer it makes over the
    object's own parameters (`self.named_parameters()`, `self.parameters()`)."""
    body = method.function.body
    made = [
        call
        for call in walk(body)
        if isinstance(call, cst.Call)
        and any(OPTIMIZER_CLASS.match(name) for name in method.index.qualified_names(call.func))
    ]
    own = any(
        is_method_call(node, *PARAMETERS) and is_name(node.func.value, "self")  # type: ignore[attr-defined]
        for node in walk(body)
    )
    returns = [node for node in walk(body) if isinstance(node, cst.Return) and node.value]
    return bool(made) and own and bool(returns)


def _optimizer_factories(script: TrainingScript) -> dict[cst.Call, list[cst.Call]]:
    """`TrainingScript.optimizer_factories`."""
    index = script.index
    found: dict[cst.Call, list[cst.Call]] = {}
    for call in script.made_optimizers:
        method = index.function_of(call)
        owner = index.class_of(method) if method is not None else None
        if method is None or owner is None or not _returns(script, method, call):
            continue
        roots = {
            (dotted(node.func.value) or "").split(".")[0]  # type: ignore[attr-defined]
            for source in script.given_parameters(call)
            for node in walk(source)
            if is_method_call(node, *PARAMETERS)
        }
        if roots != {"self"}:
            continue
        sites = [
            site
            for site in script.graph.call_sites(method)
            if isinstance(site.func, cst.Attribute)
            and not index.inside(site, owner)
            and dotted(site.func.value) not in (None, "self")
        ]
        if sites:
            found[call] = sites
    return found


def _returns(script: TrainingScript, method: cst.FunctionDef, call: cst.Call) -> bool:
    """Whether `method` returns what `call` makes (itself, or a name given it)."""
    for value in script.graph.returned_values(method):
        if value is call:
            return True
        if isinstance(value, cst.Name) and any(
            origin is call for origin in script.values.origins(value, method)
        ):
            return True
    return False


def _own_optimizers(index: SourceIndex, pattern: re.Pattern[str]) -> set[str]:
    """The script's optimizer classes (davda54's SAM, `class SGDW(torch.optim.SGD)`)."""
    return {
        name
        for name, owner in index.classes.items()
        if any(
            pattern.match(qualified)
            for base in owner.bases
            for qualified in index.qualified_names(base.value)
        )
    }


def _chosen_by_name(index: SourceIndex, call: cst.Call) -> bool:
    """`getattr(optim, args.optim)(model.parameters(), lr=lr)`: an optimizer class of
    `torch.optim` chosen by its name (locuslab's TCN)."""
    chooser = call.func
    return (
        isinstance(chooser, cst.Call)
        and is_name(chooser.func, "getattr")
        and len(chooser.args) == 2
        and "torch.optim" in index.qualified_names(chooser.args[0].value)
    )


def _passed_in_class(script: TrainingScript, call: cst.Call) -> bool:
    """`self.opt_func(self.model.parameters(), lr=lr)`: an optimizer class of `torch.optim`
    handed in (fastai's `Learner(..., opt_func=Adam)`, round-43 audit A learner), called on a
    model's parameters. Every value the callee may hold (what the script's calls give the
    parameter, and its default when a call leaves it out) names such a class."""
    name = dotted(call.func)
    params = call_arg(call, 0, "params")
    if name is None or params is None or not is_method_call(params.value, *PARAMETERS):
        return False
    if name in script.index.functions or name in script.index.classes:
        return False
    scope = script.index.function_of(call)
    held = [value for value, _ in script.values.values_of(name, scope)] or [call.func]
    found: list[cst.BaseExpression] = []
    for value in held:
        where = script.index.function_of(value)
        parameter = dotted(value)
        if where is None or parameter not in script.graph.parameters_of(where):
            found.append(value)
            continue
        default = next((p.default for p in where.params.params if p.name.value == parameter), None)
        for site in script.graph.call_sites(where):
            given = script.graph.bound_argument(site, where, parameter or "")
            if given is None and default is None:
                return False
            found.append(given if given is not None else default)  # type: ignore[arg-type]
    return bool(found) and all(
        any(OPTIMIZER_CLASS.match(q) for q in script.index.qualified_names(value))
        for value in found
    )


def raw_optimizers(script: TrainingScript) -> list[cst.Call]:
    """Optimizers of `torch.optim` given tensors of the script's own, not a module's
    parameters (makemore's MLP: `SGD([C, W1, b1, W2, b2])`): training, with nothing for
    DDP to wrap."""
    return [
        call
        for call in script.optimizer_calls
        if call not in script.manual_updates
        and call_arg(call, 0, "params") is not None
        and not script.builds_from_parameters(call)
    ]


def alternatives(script: TrainingScript, loader: Loader) -> list[Loader]:
    """The other `DataLoader(...)` calls the training loader's name is given in the same
    function, one per branch (CutMix-PyTorch's `train_loader = DataLoader(...)` for CIFAR-100,
    for CIFAR-10 and for ImageNet, under `if args.dataset == ...`; corpus, session 21): the
    loop reads whichever ran, so each trains."""
    if loader.name is None or not isinstance(loader.statement, cst.SimpleStatementLine):
        return []
    scope = script.index.function_of(loader.call)
    return [
        other
        for other in script.loaders.all
        if other is not loader
        and other.name == loader.name
        and other.key_var is None
        and isinstance(other.statement, cst.SimpleStatementLine)
        and script.index.function_of(other.call) is scope
        and (
            exclusive(script.index, loader.call, other.call)
            # made again over a new subset each epoch, shuffled as the first (hard-example
            # mining, round-44 audit D hardneg): the loop reads each in turn
            or (shuffles(loader.call) and shuffles(other.call))
        )
    ]


def shuffles(call: cst.Call) -> bool:
    """`DataLoader(..., shuffle=True)` with no sampler of its own."""
    shuffle = call_arg(call, 2, "shuffle")
    return (
        shuffle is not None
        and is_name(shuffle.value, "True")
        and call_arg(call, None, "sampler") is None
        and call_arg(call, None, "batch_sampler") is None
    )


def exclusive(index: SourceIndex, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether `first` and `second` are in different branches of one `if`/`elif`/`else`,
    and run once: in no loop of their function (a loader made in order for the first epoch
    and shuffled after, SortaGrad, is made again every epoch)."""
    if any(
        isinstance(a, cst.For | cst.While) and index.function_of(a) is index.function_of(node)
        for node in (first, second)
        for a in index.ancestors(node)
    ):
        return False
    for branch in index.ancestors(first):
        if isinstance(branch, cst.If) and index.inside(second, branch):
            # the innermost `if` holding both (an `elif` is its parent's `orelse`)
            return index.inside(first, branch.body) != index.inside(second, branch.body)
    return False


def given_later(index: SourceIndex, origin: cst.CSTNode, read: cst.CSTNode) -> bool:
    """Whether `origin`, a value given to the name `read` reads, is given after it in the
    same function and no loop runs both (`codes = model.encoder(data)` after training, in
    a function that read another `codes` before: round-11 audit d13)."""
    if index.function_of(origin) is not index.function_of(read):
        return False
    try:
        if not index.precedes(read, origin):
            return False
    except KeyError:  # made outside the tree (`make()[1]` for `a, b = make()`)
        return False
    return not any(
        isinstance(loop, cst.For | cst.While) and index.inside(origin, loop)
        for loop in index.ancestors(read)
    )


def _handed_parameters(
    script: TrainingScript, sources: list[cst.BaseExpression]
) -> list[cst.BaseExpression]:
    """`param_groups(model, wd)`, a function of the script that builds the groups from
    its argument's `named_parameters()` (round-8 audit a08), or of another file of its
    project (round-49 audit E lrd_onecycle, MAE's `param_groups_lrd` in lr_decay.py: refused
    as "tensors of the script's own"): `model.parameters()` stands for what it returns (a
    node made here, outside the tree, read for its names only)."""
    found: list[cst.BaseExpression] = []
    for source in sources:
        for call in walk(source):
            if not isinstance(call, cst.Call):
                continue
            graph = script.graph
            function = graph.callee(call)
            helper = script.project.helper(call) if function is None and script.project else None
            if helper is not None:
                graph, function = helper.graph, helper.function
            if function is None:
                continue
            for parameter in sorted(graph.parameters_of(function)):
                if not any(
                    is_method_call(node, *PARAMETERS) and dotted(node.func.value) == parameter  # type: ignore[attr-defined]
                    for node in walk(function.body)
                ):
                    continue
                given = graph.bound_argument(call, function, parameter)
                if given is not None and dotted(given) is not None:
                    found.append(
                        cst.Call(func=cst.Attribute(value=given, attr=cst.Name("parameters")))
                    )
    return found


def _stored_items(
    index: SourceIndex, name: str, scope: cst.FunctionDef | None
) -> list[cst.BaseExpression]:
    """What `scope` puts into the container `name` holds: `losses["seg"] = ce(out, y)`,
    `losses.append(...)` (a loss dict built one task at a time)."""
    found: list[cst.BaseExpression] = []
    for node in walk(scope.body if scope is not None else index.module):
        if index.function_of(node) is not scope:
            continue
        if isinstance(node, cst.Assign | cst.AugAssign) and node.value is not None:
            targets = (
                [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            )
            if any(isinstance(t, cst.Subscript) and is_name(t.value, name) for t in targets):
                found.append(node.value)
        elif (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in {"append", "extend", "update"}
            and is_name(node.func.value, name)
        ):
            found += [arg.value for arg in node.args]
    return found


def _drawn_for_the_loss(script: TrainingScript) -> list[Loader]:
    """Loaders a training step draws a batch from with `next(...)` for its loss (an
    auxiliary task's `next(aux_batches)` with `aux_batches = itertools.cycle(loader)`):
    they train too."""
    found = []
    loops = [loop.epoch_loop or loop.batch_loop for loop in script.train_loops]
    loops += [loop.batch_loop for loop in script.train_loops]  # (the epoch loop may call it)
    for call in script.index.calls:
        if not (is_name(call.func, "next") and call.args) or id(call) not in script.loss_nodes:
            continue
        if not any(script.index.inside(call, loop) for loop in loops):
            continue  # `src, _ = next(iter(valid_loader))` after training: a sample shown
        if not any(
            script.index.precedes(call, backward)
            and script.index.function_of(backward) is script.index.function_of(call)
            for backward in script.backward_calls
        ) or without_gradients(script.index, call):
            continue  # an evaluation batch after the epoch's training, reusing its names
        scope = script.index.function_of(call)
        source = call.args[0].value
        for _ in range(MAX_STEPS):
            values = script.values.assignments(dotted(source) or "", scope)
            remade = {  # `it = iter(loader)`, made again when it runs out (FixMatch's)
                source_text(value.args[0].value)
                for value in values
                if isinstance(value, cst.Call) and is_name(value.func, "iter") and value.args
            }
            if (
                len(values) > 1
                and len(remade) == 1
                and len(values)
                == sum(
                    isinstance(value, cst.Call) and is_name(value.func, "iter") for value in values
                )
            ):
                values = values[:1]
            if len(values) != 1:
                break
            source = values[0]
            if isinstance(source, cst.Call) and script.index.is_call_to(
                source, {"itertools.cycle"}
            ):
                source = source.args[0].value if source.args else source
        loader = script.loaders.loader_for(script.loaders.resolve(source, scope))
        if loader is not None:
            found.append(loader)
    return found


def without_gradients(index: SourceIndex, node: cst.CSTNode) -> bool:
    """Whether `node` runs under `with torch.no_grad():` (or `inference_mode()`), or in a
    function decorated with one (`@torch.no_grad()`)."""
    function = index.function_of(node)
    decorated = function is not None and any(
        (
            dotted(
                decorator.decorator.func
                if isinstance(decorator.decorator, cst.Call)
                else decorator.decorator
            )
            or ""
        ).endswith(("no_grad", "inference_mode"))
        for decorator in function.decorators
    )
    return decorated or any(
        isinstance(ancestor, cst.With)
        and any(
            isinstance(item.item, cst.Call)
            and (dotted(item.item.func) or "").endswith(("no_grad", "inference_mode"))
            for item in ancestor.items
        )
        for ancestor in index.ancestors(node)
    )


def _closure_called(script: TrainingScript, call: cst.Call) -> Helper | None:
    """The function of another file a call of a name runs, when the name is given what a
    helper of that file makes and returns (`train_step_fn = make_train_step(model, ...)`,
    then `train_step_fn(x, y)` in the batch loop: round-32 audit C's closure trained on
    every sample of an unsharded copy of the loader, taken for an evaluation)."""
    if script.project is None or not isinstance(call.func, cst.Name):
        return None
    scope = script.index.function_of(call)
    for value, _ in script.values.values_of(call.func.value, scope):
        if isinstance(value, cst.Call):
            found = script.project.closure(value)
            if found is not None:
                return found
    return None


def _stepping_helpers(script: TrainingScript) -> list[cst.Call]:
    """Calls of helpers of other files that train on the batch they are given (steps.py's
    `d_step(netD, netG, optimizerD, real, ...)` in the script's batch loop, round-31 audit
    C gan_models_and_train_step_module): where a batch loop's backward pass is."""
    return [training.call for training in script.foreign_training if training.loader is None]


def _batch_loop_index(
    script: TrainingScript,
    chain: list[tuple[cst.CSTNode, str]],
) -> int | None:
    """Which of the loops around a backward pass reads the batches: the innermost that
    iterates a DataLoader of the script (`for net, opt in zip(nets, optimizers)` inside
    it trains several models on one batch), else the innermost loop."""
    loops = [i for i, (_, kind) in enumerate(chain) if kind == "loop"]
    for i in loops:
        node = chain[i][0]
        if isinstance(node, cst.For) and script.loaders.resolve(
            node.iter, script.index.function_of(node)
        ):
            return i
        if any(kind == "call" for _, kind in chain[:i]):
            break  # past a call: the loops out there are the caller's
    return loops[0] if loops else None


def _branch_that_trains(
    script: TrainingScript, batch_loop: cst.For, backward: cst.Call, scope: cst.FunctionDef | None
) -> Loader | None:
    """The loader of `loader = self.train_loader if train else self.val_loader` (one
    `_run_epoch(epoch, train)` for both, round-21 audit B trainer_class) that the loop
    reads when its backward pass runs: the branch whose test the backward's `if train:`
    repeats (or negates)."""
    name = dotted(strip_iteration(batch_loop.iter, script.graph))
    values = script.values.assignments(name, scope) if name is not None else []
    if (
        len(values) != 1
        or not isinstance(values[0], cst.IfExp)
        or not script.index.inside(backward, batch_loop)
    ):
        return None
    choice = values[0]
    test = source_text(choice.test)
    for ancestor in script.index.ancestors(backward):
        if ancestor is batch_loop:
            break
        if not isinstance(ancestor, cst.If) or not script.index.inside(backward, ancestor.body):
            continue
        if source_text(ancestor.test) == test:
            branch = choice.body
        elif source_text(ancestor.test) == f"not {test}":
            branch = choice.orelse
        else:
            continue
        return script.loaders.loader_for(script.loaders.resolve(branch, scope))
    return None


def _local_value(
    loaders: Loaders,
    values: list[cst.BaseExpression],
    head: str,
    function: cst.FunctionDef,
    loader: Loader | None,
) -> str | None:
    """The name a local `head` of `function` is given (`loader = self.train_loader`, or the
    branch of `self.train_loader if train else self.val_loader`) that is the training
    `loader`, as text."""
    for value in values:
        options = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
        for option in options:
            text = dotted(option)
            if text is None or text.split(".")[0] == head:
                continue
            made = loaders.loader_for(loaders.resolve(option, function))
            if loader is None or made is loader:
                return text
    return None


def _zipped(
    loaders: Loaders, iterable: cst.BaseExpression, scope: cst.FunctionDef | None
) -> list[tuple[Loader, str | None]]:
    """`zip(loader_a, loader_b)` (also inside `enumerate`): each loader and its name, when
    every argument is one of the script's DataLoaders; else nothing."""
    zipped = strip_iteration(iterable, loaders.graph)
    if not (isinstance(zipped, cst.Call) and is_name(zipped.func, "zip") and len(zipped.args) > 1):
        return []
    found = []
    for arg in zipped.args:
        value = arg.value
        if (  # `zip(cycle(labeled_loader), unlabeled_loader)` (Mean Teacher, round-34 A)
            isinstance(value, cst.Call)
            and dotted(value.func) in ("cycle", "itertools.cycle")
            and len(value.args) == 1
        ):
            value = value.args[0].value
        loader = None if arg.star else loaders.loader_for(loaders.resolve(value, scope))
        if loader is None:
            return []
        found.append((loader, dotted(value)))
    return found


def _training_key(
    index: SourceIndex,
    train: TrainLoop,
    loader: Loader,
    backward: cst.Call,
    rest: list[tuple[cst.CSTNode, str]],
) -> tuple[str | None, list[tuple[cst.CSTNode, str]]]:
    """For a loader made per key (`loaders = {x: DataLoader(...) for x in ["train",
    "val"]}`), which key trains, read where the batch loop reads it: `loaders["train"]`,
    or `loaders[phase]` inside `for phase in ["train", "val"]` with the backward pass
    under `if phase == "train"`. Sets `loader.train_key` and `train.phase_loop`; returns
    the training loader as an expression (`loaders["train"]`) and the loops around the
    phase loop. Nothing is set when the key cannot be told."""
    read = keyed_read(train.batch_loop.iter)
    if read is None:
        return None, rest
    base, key = read
    text = string_value(key)
    if text is not None:
        return _keep_key(loader, text, base), rest
    found = _phase_that_trains(index, key, backward, rest)
    if found is None or not set(literal_strings(found[0].iter)) <= set(loader.keys):
        return None, rest
    phases, text = found
    train.phase_loop = phases
    return _keep_key(loader, text, base), rest[1:]


def _phase_that_trains(
    index: SourceIndex,
    key: str,
    backward: cst.Call,
    rest: list[tuple[cst.CSTNode, str]],
) -> tuple[cst.For, str] | None:
    """`for phase in ["train", "val"]`, the next loop out, and the key the backward pass is
    under (`if phase == "train":`)."""
    if not rest or rest[0][1] != "loop":
        return None
    phases = rest[0][0]
    if not (isinstance(phases, cst.For) and is_name(phases.target, key)):
        return None
    for ancestor in index.ancestors(backward):
        if ancestor is phases:
            break
        test = ancestor.test if isinstance(ancestor, cst.If) else None
        if (
            isinstance(test, cst.Comparison)
            and is_name(test.left, key)
            and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)
            and isinstance(test.comparisons[0].comparator, cst.SimpleString)
        ):
            text = string_value(test.comparisons[0].comparator)
            if text is not None and text in literal_strings(phases.iter):
                return phases, text
    return None


def _literal_phase_loader(
    script: TrainingScript,
    batch_loop: cst.For,
    backward: cst.Call,
    rest: list[tuple[cst.CSTNode, str]],
    scope: cst.FunctionDef | None,
) -> tuple[Loader, cst.For, str] | None:
    """`for x, y in dataloaders[phase]` with `dataloaders = {"train": DataLoader(...), "val":
    DataLoader(...)}`, a literal (round-23 audit B transfer_stages_b, the fine-tuning
    tutorial's `train_model` given one): the loader of the key that trains, the phase loop,
    and the loader as `dataloaders["train"]`."""
    read = keyed_read(batch_loop.iter)
    if read is None or not read[1].isidentifier():
        return None
    found = _phase_that_trains(script.index, read[1], backward, rest)
    if found is None:
        return None
    phases, text = found
    expression = f'{read[0]}["{text}"]'
    loader = script.loaders.loader_for(
        script.loaders.resolve(cst.parse_expression(expression), scope)
    )
    return (loader, phases, expression) if loader is not None else None


def _keep_key(loader: Loader, key: str, base: str) -> str | None:
    if key not in loader.keys or loader.train_key not in (None, key):
        loader.train_key = None  # two loops train on different keys: not told apart
        return None
    loader.train_key = key
    return f'{base}["{key}"]'


def _passes_parameters(call: cst.Call) -> bool:
    """`f(model.parameters(), ...)` or `f([{"params": m.parameters()}])`: an optimizer's shape."""
    return any(
        is_method_call(node, *PARAMETERS) for arg in call.args[:1] for node in walk(arg.value)
    )


def _drawn_evaluation_sets(script: TrainingScript) -> list[DrawnSplit]:
    """A validation set drawn unseeded (a class of the script drawing it when it is made,
    `Subset(pool, np.random.permutation(n)[:k])`): alike in every process too, or each
    would evaluate (and decide on: early stopping, round-42 audit A weighted_imbalance,
    hung) a set of its own."""
    found: list[DrawnSplit] = []
    for loader in script.loaders.all:
        dataset = call_arg(loader.call, 0, "dataset")
        if dataset is not None and loader not in script.train_loaders:
            found += [
                split
                if dotted(split.draw.func) in script.index.classes
                else replace(split, evaluates=True)
                for split in drawn_splits(script.index, script.values, dataset.value)
            ]
    return found


def _evaluates(script: TrainingScript, function: cst.FunctionDef | None) -> bool:
    """A function named for an evaluation (`val`, `validate`, `evaluate`, `test`) that
    runs no backward pass, itself or through what it calls: crnn.pytorch's `val(net,
    dataset, criterion)` makes its own shuffled loader (round-36 audit A
    crnn_ctc_label_converter: sharded as a training one, rank 0 printed half the test
    set's accuracy)."""
    if function is None:
        return False
    name = function.name.value.lower()
    if not name.startswith(("val", "eval", "test")):
        return False
    backward = {id(call) for call in script.backward_calls}
    return not script.graph.reaches(function.body, lambda node: id(node) in backward)


def _made_to_evaluate(index: SourceIndex, loader: Loader) -> bool:
    """A loader made in a function that runs without gradients (`@torch.no_grad()`,
    `@torch.inference_mode()` on it, makemore's `evaluate`) or under `with
    torch.no_grad():`: it cannot feed a backward pass."""
    if without_gradients(index, loader.call):
        return True
    function = index.function_of(loader.call)
    return function is not None and any(
        (
            dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or ""
        ).endswith(("no_grad", "inference_mode"))
        for d in function.decorators
    )


def _named_to_evaluate(loader: Loader) -> bool:
    """`valid_loader = DataLoader(valid_dataset, ...)`: named, or made over a dataset named,
    for evaluation (clovaai's validation loader shuffles, round-38 audit C: taken for the
    training loader, the only one the script makes)."""
    text = " ".join(
        filter(None, [loader.name, dotted(loader.call.args[0].value) if loader.call.args else None])
    ).lower()
    return any(word in text for word in ("val", "test", "eval", "dev"))


def _looks_like_training(loader: Loader) -> bool:
    text = " ".join(
        filter(None, [loader.name, dotted(loader.call.args[0].value) if loader.call.args else None])
    ).lower()
    if _named_to_evaluate(loader):
        return False
    shuffle = call_arg(loader.call, 2, "shuffle")
    return "train" in text or (shuffle is not None and is_name(shuffle.value, "True"))


def epoch_variable(loop: cst.For | cst.While, graph: CallGraph | None = None) -> str | None:
    """The name that counts an epoch loop's passes: its target, or `epoch += 1` in it (or,
    for `self.epoch` tested by a `while`, in the methods it calls)."""
    if isinstance(loop, cst.For) and isinstance(loop.target, cst.Tuple):
        # `for idx, epoch in enumerate(range(1, epochs + 1))`: either counts the passes
        names = [e.value.value for e in loop.target.elements if isinstance(e.value, cst.Name)]
        if len(names) != len(loop.target.elements):
            return None
        named = [name for name in names if "epoch" in name]
        if named:
            return named[0]
        counted = isinstance(loop.iter, cst.Call) and is_name(loop.iter.func, "enumerate")
        return names[0] if counted else None
    if isinstance(loop, cst.For):
        if not isinstance(loop.target, cst.Name):
            return None
        return loop.target.value if _counts(loop.target.value, loop.iter) else None
    grown = [
        node.target.value
        for node in walk(loop.body)
        if isinstance(node, cst.AugAssign)
        and isinstance(node.operator, cst.AddAssign)
        and isinstance(node.target, cst.Name)
    ]
    named = [name for name in grown if "epoch" in name]
    if named:
        return named[0]
    # `while iteration < max_iter:` with `iteration += 1` in it (detectron2's loops): the
    # counter the loop tests grows every pass, so it tells the passes apart too
    test = loop.test
    if isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name):
        return test.left.value if test.left.value in grown else None
    # `while self.epoch < max_epochs: self.train(loader)`, `self.epoch += 1` at the end of
    # `train` (mmcv's EpochBasedRunner, round-24 audit A mmcv_runner_hooks)
    counter = dotted(test.left) if isinstance(test, cst.Comparison) else None
    if graph is None or counter is None or not counter.startswith("self."):
        return None

    def grows(node: cst.CSTNode) -> bool:
        return (
            isinstance(node, cst.AugAssign)
            and isinstance(node.operator, cst.AddAssign)
            and dotted(node.target) == counter
        )

    return counter if graph.reaches(loop.body, grows) else None


INTEGER_RANGES = {"range", "trange", "count", "itertools.count"}


def _counts(name: str, iterable: cst.BaseExpression) -> bool:
    """Whether a `for` target can be given to `set_epoch`, an int that changes every pass:
    named for the epoch, or taken from a range of ints (through a progress bar too). Not
    `for lr in (1.0, 0.1)` (a float seed raises), nor what an unknown iterable yields."""
    if "epoch" in name.lower():
        return True
    while isinstance(iterable, cst.Call) and dotted(iterable.func) in {"tqdm", "tqdm.tqdm"}:
        if not iterable.args:
            return False
        iterable = iterable.args[0].value
    if isinstance(iterable, cst.Call):
        return dotted(iterable.func) in INTEGER_RANGES
    if isinstance(iterable, cst.List | cst.Tuple):
        return bool(iterable.elements) and all(
            isinstance(element.value, cst.Integer) for element in iterable.elements
        )
    return False


def grads_by_hand(script: TrainingScript) -> cst.CSTNode | None:
    """`p.grad = ...` in a script that makes an optimizer and runs no backward pass
    (per-sample gradients with torch.func, DP-SGD, round-15 audit s27): where the first
    gradient is set."""
    if script.backward_calls or not script.optimizer_calls:
        return None
    return next(
        (
            target
            for node in script.index.assigns
            for target in node.targets
            if is_attribute(target.target, "grad")
        ),
        None,
    )


def grads_set_after_backward(script: TrainingScript) -> cst.AssignTarget | None:
    """`p.grad = (clipped_sum + noise) / batch` in a script that runs backward passes
    (DP-SGD by hand, round-26 audit A dp_sgd_microbatch; gradient surgery): a gradient
    the script sets itself, from more than the gradient DDP averaged (`p.grad = p.grad /
    n` is only that one, and `p.grad = None` sets none). Where it is set."""
    if not script.backward_calls or not script.optimizer_calls:
        return None
    for node in script.index.assigns:
        for target in node.targets:
            if not is_attribute(target.target, "grad") or is_name(node.value, "None"):
                continue
            own = dotted(target.target)
            reads_own = any(dotted(n) == own for n in walk(node.value))
            zeros = isinstance(node.value, cst.Call) and (dotted(node.value.func) or "").rsplit(
                ".", 1
            )[-1] in {"zeros_like", "zeros", "empty_like"}
            if not reads_own and not zeros:
                return target
    return None


def steps_in_backward(script: TrainingScript) -> cst.Call | None:
    """`p.register_post_accumulate_grad_hook(hook)` (or `register_hook`) with a hook of the
    script's that steps an optimizer (PyTorch's "fuse the optimizer step into the backward
    pass" tutorial, round-27 audit A): the step runs inside the backward pass, on each
    gradient as it is made, before DDP has averaged it. Where the hook is registered."""
    for call in script.index.calls:
        if is_method_call(call, "register_post_accumulate_grad_hook"):
            return call
        hook = call.args[0].value if is_method_call(call, "register_hook") and call.args else None
        if isinstance(hook, cst.Name) and any(
            is_method_call(node, "step")
            for function in script.graph.defined(hook.value)
            for node in walk(function)
        ):
            return call
    return None


def line_search(script: TrainingScript) -> cst.Call | None:
    """`torch.optim.LBFGS(model.parameters(), ...)` whose `.step(closure)` the script calls,
    with a backward pass somewhere: L-BFGS evaluates the closure as often as its line search
    asks for, on each process's own loss (round-41 audit A lbfgs)."""
    if not script.backward_calls:
        return None
    for call in script.index.calls:
        if not script.index.is_call_to(call, {"torch.optim.LBFGS", "torch.optim.lbfgs.LBFGS"}):
            continue
        if not any(
            is_method_call(node, *PARAMETERS) for arg in call.args[:1] for node in walk(arg)
        ):
            continue
        parent = script.index.parent(call)
        if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1):
            continue
        name = dotted(parent.targets[0].target)
        if any(
            is_method_call(step, "step") and step.args and dotted(step.func.value) == name  # type: ignore[attr-defined]
            for step in script.index.calls
        ):
            return call
    return None


def unknown_step(script: TrainingScript) -> cst.Call | None:
    """`optimizer.step()` in a function that runs a backward pass, when no optimizer the
    script makes is found (built by a helper of another file, a factory given as an
    argument, `getattr(torch.optim, name)(...)`): a training script whose optimizer the
    analysis cannot see."""
    if script.optimizer_calls or not script.backward_calls or not script.index.uses_torch:
        return None
    scopes = {id(script.index.function_of(backward)) for backward in script.backward_calls}
    return next(
        (
            call
            for call in script.index.calls
            if is_method_call(call, "step")
            and dotted(call.func.value) is not None  # type: ignore[attr-defined]
            and id(script.index.function_of(call)) in scopes
        ),
        None,
    )


def _is_docstring(statement: cst.BaseStatement) -> bool:
    if not is_lone(statement, cst.Expr):
        return False
    assert isinstance(statement, cst.SimpleStatementLine)
    return isinstance(cast(cst.Expr, statement.body[0]).value, cst.SimpleString)


def _trainer_classes(script: TrainingScript) -> list[tuple[cst.Call, Path]]:
    """`TrainingScript.trainer_classes`."""
    if script.project is None or script.project.path is None or script.index.other_framework:
        return []
    found = []
    for call in script.index.calls:
        if call.args and not script.graph.calls_script(call):
            path = script.project.trainer_class(call)
            if path is not None:
                found.append((call, path))
        elif call.args and (owner := script.index.classes.get(dotted(call.func) or "")):
            # a class of the script whose base, of another file, trains (a SpeechBrain
            # recipe's `SpkIdBrain(Brain)`: round-38 audit C speechbrain_brain_class_stages
            # was "not a training script", left as it was)
            path = script.project.trainer_base(owner)
            if path is not None:
                found.append((call, path))
    return found


def iterated_argument(
    script: TrainingScript, function: cst.FunctionDef, site: cst.Call, loop: cst.For
) -> cst.BaseExpression | None:
    """What `site` gives the parameter of `function` that `loop` iterates over."""
    iterable = strip_iteration(loop.iter, script.graph)
    if not isinstance(iterable, cst.Name) or iterable.value not in script.graph.parameters_of(
        function
    ):
        return None
    return script.graph.bound_argument(site, function, iterable.value)


def site_trains(
    script: TrainingScript, function: cst.FunctionDef, site: cst.Call, loop: cst.For
) -> bool:
    """Whether the call `site` of `function` may run the backward pass in `loop`: not when
    the backward is under `if optimizer is not None:` (`if train:`, `if phase == "train":`)
    and the call gives that parameter None, False or another string, or leaves it at such a
    default (round-8 audit a07's `run_epoch(model, val_dl)`), also through a local the
    test names (`train = optimizer is not None`)."""
    defaults = {
        param.name.value: param.default
        for param in [*function.params.params, *function.params.kwonly_params]
    }
    for node in walk(loop.body):
        if not (isinstance(node, cst.Call) and is_method_call(node, "backward")):
            continue
        for guard in script.index.ancestors(node):
            if guard is loop:
                break
            if not isinstance(guard, cst.If) or not script.index.inside(node, guard.body):
                continue
            test, wanted = guard.test, None
            if isinstance(test, cst.Name) and test.value not in defaults:
                # `train = optimizer is not None`, then `if train:` (round-21 audit A graph_cls)
                values = script.values.assignments(test.value, function)
                test = values[0] if len(values) == 1 else test
            if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
                operator = test.comparisons[0].operator
                comparator = test.comparisons[0].comparator
                if isinstance(operator, cst.IsNot) and is_name(comparator, "None"):
                    test = test.left
                elif isinstance(operator, cst.Equal) and isinstance(comparator, cst.SimpleString):
                    test, wanted = test.left, comparator.evaluated_value
            if not isinstance(test, cst.Name) or test.value not in defaults:
                continue
            given = script.graph.bound_argument(site, function, test.value)
            given = defaults[test.value] if given is None else given
            if wanted is None and (is_name(given, "None") or is_name(given, "False")):
                return False
            if (
                wanted is not None
                and isinstance(given, cst.SimpleString)
                and given.evaluated_value != wanted
            ):
                return False
    return True


def _given_elsewhere(script: TrainingScript, train: TrainLoop) -> list[Loader]:
    """The other loaders the calls of the batch loop's function give it to train on, when
    its epoch loop is there too (`train(model, pre_loader, ...)`, then `train(new_model,
    ft_loader, ...)`: round-45 audit C twostage): the set_epoch that goes in that loop is
    each one's. With the epoch loop at a call site, only that site's loader would get it."""
    function = script.index.function_of(train.batch_loop)
    if (
        function is None
        or train.loader is None
        or train.epoch_loop is None
        or script.index.function_of(train.epoch_loop) is not function
    ):
        return []
    found: list[Loader] = []
    for made in loaders_given(script, train):
        loader = script.loaders.loader_for(made)
        if loader is not None and loader is not train.loader and loader not in found:
            found.append(loader)
    return found


def loaders_given(script: TrainingScript, train: TrainLoop) -> list[cst.Call | None]:
    """The `DataLoader(...)` each call of the batch loop's function that trains gives it to
    iterate (None where it does not trace), in the order of the calls."""
    function = script.index.function_of(train.batch_loop)
    if function is None:
        return []
    given: list[cst.Call | None] = []
    for site in script.graph.call_sites(function):
        argument = iterated_argument(script, function, site, train.batch_loop)
        if argument is None or not site_trains(script, function, site, train.batch_loop):
            continue
        given.append(script.loaders.resolve(argument, script.index.function_of(site)))
    return given
