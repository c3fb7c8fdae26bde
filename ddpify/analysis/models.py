"""The models a script trains: each one's names, the optimizer that trains it, and where it
goes to its device (where the DDP wrap belongs)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from ddpify.analysis.api import DATA_PARALLEL, PARAMETERS
from ddpify.analysis.calls import CallGraph
from ddpify.analysis.effects import SideEffects
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.script import TrainingScript
from ddpify.analysis.tree import assigned, call_arg, dotted, is_method_call, is_name, methods, walk
from ddpify.analysis.values import MAX_STEPS


@dataclass
class Model:
    """A model trained by an optimizer, all the names it goes by, and where it is placed."""

    names: set[str]
    optimizer_call: cst.Call
    placement: cst.BaseStatement | None = None
    placed_name: str | None = None
    # Other plain names given the same object before the wrap (`model_without_ddp = model`):
    # they stay the bare model.
    bare: set[str] = field(default_factory=set)
    # `model_without_ddp = model` after the wrap (torchvision's references), used only for
    # what the bare model has: it becomes `model_without_ddp = model.module`.
    unwrapped_aliases: list[cst.Assign] = field(default_factory=list)
    data_parallel: list[cst.Call] = field(default_factory=list)
    # The other name of the same object where it is moved: `model` in `m = model.to(device)`
    # (`Module.to` returns the module itself), which the script may go on using.
    alias: str | None = None
    # The functions (None: module level) it is handed in from, when the optimizer is made in
    # a function it is handed to (`train(rnn, data)`): where it may be built.
    handed_from: list[cst.FunctionDef | None] = field(default_factory=list)
    # Where the model, built again after the wrap for a second round of training, is
    # wrapped again (WrapModel sets it): what reads the name after it holds a wrapper too.
    rewrapped: cst.BaseStatement | None = None


# A model's submodules, walked to sort its parameters into groups by hand (YOLOv5's
# `for k, v in model.named_modules(): ... g0.append(v.weight)`).
SUBMODULES = ("modules", "named_modules")


class Models:
    """The trained models and their placement."""

    def __init__(
        self, index: SourceIndex, graph: CallGraph, script: TrainingScript, effects: SideEffects
    ) -> None:
        self.index = index
        self.graph = graph
        self.script = script
        self.effects = effects

    @cached_property
    def all(self) -> list[Model]:
        models: list[Model] = []
        for optimizer in self.script.optimizer_calls:
            sources = self.script.parameter_sources(optimizer)
            for given, node in ((source, n) for source in sources for n in walk(source)):
                if is_method_call(node, *PARAMETERS, *SUBMODULES):
                    assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                    owner = node.func.value
                    while isinstance(owner, cst.Subscript):  # `model.body[:4].parameters()`
                        owner = owner.value
                    owner = _comprehended(self.script, owner, given, optimizer)
                    name = self._model_root(dotted(owner))
                    if name is None or any(name in model.names for model in models):
                        continue
                    models.append(Model({name}, optimizer))
        # `model.fc` (assigned anew: a swapped head) beside `model`: one model, wrapped once
        # (round-18 audit s21 wrapped both, DDP inside DDP)
        roots = {name for model in models for name in model.names}
        models = [
            model
            for model in models
            if not any(name.startswith(root + ".") for name in model.names for root in roots)
        ]
        for model in models:
            model.names |= self._handed_in(model)
            self._find_placement(model)
            model.names |= self._returned(model.names, model.optimizer_call)
            model.names |= self._through_parameters(model.names)
        return models

    def _through_parameters(self, names: set[str]) -> set[str]:
        """`trainer.model` in a callback's `def on_epoch_end(self, trainer, epoch)` that every
        call gives the Trainer (`cb.on_epoch_end(self, epoch)` in a method that holds the model
        as `self.model`): the model's name through a parameter (round-17 audit s12)."""
        found: set[str] = set()
        for functions in self.index.functions.values():
            for function in functions:
                sites = self.graph.call_sites(function)
                if not sites:
                    continue
                for param in self.graph.parameters_of(function):
                    if param == "self":
                        continue
                    given = {
                        dotted(self.graph.bound_argument(site, function, param)) for site in sites
                    }
                    if len(given) != 1 or None in given:
                        continue
                    base = given.pop() or ""
                    found |= {
                        param + name[len(base) :]
                        for name in names
                        if name.startswith(base + ".") and name.count(".") == base.count(".") + 1
                    }
        return found - names

    def _returned(self, names: set[str], optimizer: cst.Call | None = None) -> set[str]:
        """The names given the model by calling a function of the script that returns it:
        `net, hist = train_one(lr)` where `train_one` ends `return model, hist` (round-10
        audit c11, whose caller saved the returned wrapper whole)."""
        found: set[str] = set()
        for assign in self.index.assigns:
            if len(assign.targets) != 1 or not isinstance(assign.value, cst.Call):
                continue
            callee = self.graph.callee(assign.value)
            if callee is None:
                continue
            target = assign.targets[0].target
            if optimizer is not None and _makes_its_own(self, callee, optimizer, names):
                continue  # a factory: each call makes another object (round-34 audit A)
            for value in self.graph.returned_values(callee):
                if dotted(value) in names and dotted(target) is not None:
                    found.add(dotted(target) or "")
                elif isinstance(value, cst.Tuple) and isinstance(target, cst.Tuple | cst.List):
                    if len(value.elements) != len(target.elements):
                        continue
                    for returned, element in zip(value.elements, target.elements, strict=True):
                        if dotted(returned.value) in names and dotted(element.value) is not None:
                            found.add(dotted(element.value) or "")
        return found - names

    def _handed_in(self, model: Model) -> set[str]:
        """The names a model made elsewhere is handed in by, when the optimizer is made in a
        function of it (`def trainIters(encoder, decoder, ...)` making `SGD(encoder.
        parameters())`, PyTorch's seq2seq tutorial): followed through the calls of the
        function while every call hands in the same name (one object, wrapped where it is
        built); several objects through one parameter stay unfollowed."""
        found: set[str] = set()
        [name] = model.names
        scope = self.index.function_of(model.optimizer_call)
        for _ in range(MAX_STEPS):
            if scope is None or name not in self.graph.parameters_of(scope):
                break
            if any(
                isinstance(node, cst.Assign)
                and any(dotted(t.target) == name for t in node.targets)
                and self.index.function_of(node) is scope
                for node in walk(scope.body)
            ):
                break  # rebound in the function: built there
            sites = self.graph.call_sites(scope)
            given = {dotted(self.graph.bound_argument(site, scope, name)) for site in sites}
            callers = {id(self.index.function_of(site)) for site in sites}
            if len(given) != 1 or None in given or len(callers) != 1:
                break
            name = given.pop() or ""
            found.add(name)
            scope = self.index.function_of(sites[0])
            model.handed_from.append(scope)
        return found

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
        """`model` for `model.backbone` (param groups): the part the script assigns; and for
        `backbone`, given only a part of another module (`backbone, head = model[0],
        model[1]`, round-17 audit s16), that module: the one the script runs."""
        whole = run_whole(self.index, self.script)
        while (
            name
            and "." in name
            and (name not in self.assigned_names or name.rsplit(".", 1)[0] in whole)
        ):
            name = name.rsplit(".", 1)[0]
        for _ in range(MAX_STEPS):
            if not name or "." in name:
                break
            given = {
                dotted(_part_of(value))
                for value, _ in self.values_of_name(name)
                if value is not None
            }
            if len(given) != 1 or None in given:
                break
            name = given.pop()
        return name

    def values_of_name(self, name: str) -> list[tuple[cst.BaseExpression | None, object]]:
        """What `name` is given, in any scope: by plain assignments and tuple pairs."""
        found: list[tuple[cst.BaseExpression | None, object]] = []
        for node in self.index.assigns:
            if len(node.targets) == 1 and dotted(node.targets[0].target) == name:
                found.append((node.value, node))
            for target, value in pairs_of(node):
                if dotted(target) == name:
                    found.append((value, node))
        return found

    def _find_placement(self, model: Model) -> None:
        """Grow the model's names through assignments and find where it goes to its device."""
        moves: list[tuple[cst.BaseStatement, str]] = []
        for _ in range(3):  # names flow `model` -> `self.model` -> ...: a few rounds suffice
            for node in walk(self.index.module):
                for target_node, value in pairs_of(node):
                    # `self.model, self.save_dir = model, save_dir` (a checkpointer's
                    # `__init__`, round-9 audit b04): each pair as its own assignment
                    target = dotted(target_node)
                    if target is not None and dotted(value) in model.names:
                        model.names.add(target)
                    elif (
                        target in model.names
                        and isinstance(value, cst.Name)
                        and value.value not in {"None", "True", "False"}
                    ):
                        # `self.dls, self.model = dls, model` (a fastai-like Learner, round-30
                        # audit A): one object, as for `self.model = model`
                        model.names.add(value.value)
                    moved = moved_value(value)
                    if target in model.names and moved is not value and moved is not None:
                        # `netG, netD = G().to(device), D().to(device)`: wrapped after it
                        moves.append((self.index.statement_of(node), target))
                if isinstance(node, cst.Assign) and len(node.targets) == 1:
                    target = dotted(node.targets[0].target)
                    source = moved_value(node.value)
                    if target is None:
                        continue
                    base = dotted(source) if source is not None else None
                    if base in model.names or (target in model.names and source is not None):
                        model.names.add(target)
                        if base is not None and source is node.value and "." not in base:
                            model.names.add(base)  # `model_without_ddp = model`: one object
                        if source is not node.value:
                            moves.append((self.index.statement_of(node), target))
                    if isinstance(node.value, cst.Call) and self.index.is_call_to(
                        node.value, DATA_PARALLEL
                    ):
                        inner = call_arg(node.value, 0, "module")
                        if inner is not None and dotted(inner.value) in model.names:
                            model.names.add(target)
                elif isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
                    source = moved_value(node.value)
                    if source is not node.value and dotted(source) in model.names:
                        name = dotted(source)
                        assert name is not None
                        moves.append((self.index.statement_of(node), name))
        model.data_parallel += _data_parallel_calls(self.index, model)
        moves = _moves_of_this_one(self, model, moves)
        unique = {id(statement): (statement, name) for statement, name in moves}
        # The instance the optimizer trains: the last move before the optimizer is made, in
        # its function, when there is one (a model made again after training, to reload the
        # saved weights, stays bare); else the last move of all.
        scope = self.index.function_of(model.optimizer_call)
        before = {
            key: (statement, name)
            for key, (statement, name) in unique.items()
            if self.index.function_of(statement) is scope
            and self.index.precedes(statement, model.optimizer_call)
        }
        if before:
            unique = before
        elif self._built(model, scope) and all(
            _builds_anew(statement) and self.index.function_of(statement) is scope
            for statement, _ in unique.values()
        ):
            # built (on the CPU) and trained before; moved only as a new object made after
            # the optimizer, to reload the saved weights (round-16 audit p12): wrapped
            # where the trained one is built
            unique = {}
        if unique:
            statement, name = max(unique.values(), key=lambda item: self.index.line(item[0]))
            model.placement, model.placed_name = (
                self._unconditional(statement, model.optimizer_call),
                name,
            )
            model.alias = _moved_alias(statement, name)
            model.placement = self._after_initialisation(model.placement, model.names)
            model.bare = self._bare_aliases(model)
            return
        # Never moved (a CPU script): wrap right after it is built, before the optimizer; a
        # global model updated by hand in a function, right after it is built.
        scope = self.index.function_of(model.optimizer_call)
        built = self._built(model, scope)
        if not built and scope is not None and model.optimizer_call in self.script.manual_updates:
            built = self._built(model, None)
        for caller in model.handed_from:  # `rnn = CharRNN(...)`, then `train(rnn, data)`
            if not built:
                built = self._built(model, caller)
        owner = self.index.class_of(scope) if scope is not None and not built else None
        if owner is not None and model.placed_name is None:
            # `self.model = nn.Linear(4, 2)` in `__init__`, the optimizer made in another
            # method (a stage runner, seen in the round-47 audit): built when the object is
            init = next((m for m in methods(owner) if m.name.value == "__init__"), None)
            if init is not None:
                built = [(node, name) for node, name in self._built(model, init) if "." in name]
        if built:
            last, name = built[-1]
            model.placement = self._after_initialisation(self.index.statement_of(last), model.names)
            model.placed_name = name

    def _bare_aliases(self, model: Model) -> set[str]:
        """Names assigned the model by `b = a` in the placement's block, before the wrap."""
        assert model.placement is not None
        holder = self.index.parent(model.placement)
        if not isinstance(holder, cst.IndentedBlock | cst.Module):
            return set()
        bare = set()
        for statement in holder.body:
            if statement is model.placement:
                break
            if _is_alias(statement, model.names):
                assert isinstance(statement, cst.SimpleStatementLine)
                assign = statement.body[0]
                assert isinstance(assign, cst.Assign)
                target = dotted(assign.targets[0].target)
                if target is not None and target != model.placed_name:
                    bare.add(target)
        return bare | _aliases_after_the_wrap(self, model, holder)

    def _built(self, model: Model, scope: cst.FunctionDef | None) -> list[tuple[cst.Assign, str]]:
        """Assignments of the model in `scope` that come before its optimizer (or, at module
        level for an optimizer in a function, anywhere), and the model's name in each: also
        one of several built in one line (`netG_A, netG_B, netD_A, netD_B = G(), G(), D(),
        D()`, CycleGAN, round-15 audit s03)."""
        optimizer = model.optimizer_call
        found: list[tuple[cst.Assign, str]] = []
        aliases: list[tuple[cst.Assign, str]] = []
        for node in walk(scope or self.index.module):
            if not (
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and self.index.function_of(node) is scope
                and (
                    self.index.precedes(node, optimizer)
                    or self.index.function_of(optimizer) is not scope
                )
            ):
                continue
            name = dotted(node.targets[0].target)
            if name in model.names and dotted(node.value) in model.names:
                aliases.append((node, name))  # `model_without_ddp = model`: another name
                continue
            if name in model.names:
                found.append((node, name))
                continue
            for target, value in pairs_of(node):
                name = dotted(target)
                built = isinstance(value, cst.Call)  # not a part of another module
                if name in model.names and isinstance(target, cst.Name) and built:
                    found.append((node, name))
        # An alias is the placement only where nothing builds the model (a Trainer's
        # `self.model = model`, given the model it trains)
        return found or aliases

    def _after_initialisation(
        self, placement: cst.BaseStatement, names: set[str]
    ) -> cst.BaseStatement:
        """The last statement right after `placement`, in its block, that still changes the
        model (`model.apply(init_fn)`, a checkpoint loaded, layers frozen or replaced, a
        set-up that gives it back): DDP copies rank 0's weights and hooks the parameters
        needing a gradient when it wraps. The scan stops where the script trains, rebinds
        the model or hands it to what may keep it (`trainer = Trainer(model)`)."""
        holder = self.index.parent(placement)
        if not isinstance(holder, cst.IndentedBlock | cst.Module):
            return placement
        body = list(holder.body)
        start = next(i for i, statement in enumerate(body) if statement is placement)
        backward = set(self.script.training_calls)
        last = placement
        for later in body[start + 1 :]:
            if self.graph.reaches(later, lambda node: node in backward):
                break
            if _is_alias(later, names):
                continue  # `model_without_ddp = model` (DeiT): the alias stays the bare model
            if _set_up_again(self.index, later, names):
                last = later  # `model, optimizer = fabric.setup(model, optimizer)`
                continue
            if _binds(later, names) or _hands_over(later, names):
                break
            if self._changes_model(later, names):
                last = later
        return last

    def _changes_model(self, statement: cst.BaseStatement, names: set[str]) -> bool:
        """Whether `statement` may change the model: it names the model other than to hand
        its parameters to an optimizer (`model.parameters()`) or to print or log it."""
        if self.effects.of(statement) in {"print", "logging"}:
            return False
        if (
            isinstance(statement, cst.For)
            and _writes_in_place(statement.body)
            and any(_names_model(node, names) for node in walk(statement.iter))
        ):
            # `for name, p in model.named_parameters(): nn.init.uniform_(p.data, ...)` (round-20
            # audit A c18b): the parameters handed out are changed
            return True
        parameters = {
            id(node.func.value)
            for node in walk(statement)
            if isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in PARAMETERS
        }
        return any(
            _names_model(node, names) and id(node) not in parameters for node in walk(statement)
        )

    def _unconditional(
        self, statement: cst.BaseStatement, optimizer: cst.Call
    ) -> cst.BaseStatement:
        """The statement itself, or the `if`/`with`/`try` it sits in (the outermost below its
        function or loop), so that what is inserted after it runs on every path; never past
        the block that also makes the optimizer (a teacher built and trained under `if not
        os.path.exists(ckpt):`, round-16 audit s04: wrapped after the block, it had trained
        bare)."""
        anchor = statement
        for ancestor in self.index.ancestors(statement):
            if isinstance(ancestor, cst.FunctionDef | cst.For | cst.While | cst.Module):
                break
            if ancestor is self.script.main_guard:
                break  # the `if __name__ == "__main__":` block is where the script runs
            if self.index.inside(optimizer, ancestor):
                break
            if isinstance(ancestor, cst.If | cst.With | cst.Try):
                anchor = ancestor
        return anchor


def _set_up_again(index: SourceIndex, statement: cst.BaseStatement, names: set[str]) -> bool:
    """`model, optimizer = fabric.setup(model, optimizer)` (a Fabric-like set-up of the
    script's, which moves the model to its device: round-32 audit A), `model, opt =
    amp.initialize(model, opt)`: the model given back by a call it is handed to. The wrap
    goes after it. (Not `torch.compile`, which compiles the wrapper, nor DataParallel.)"""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return False
    assign = statement.body[0]
    if not (isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Call)):
        return False
    call = assign.value
    if index.is_call_to(call, {"torch.compile", *DATA_PARALLEL}):
        return False
    given = {dotted(arg.value) for arg in call.args} & names
    targets = {
        dotted(element.value) if isinstance(target.target, cst.Tuple) else None
        for target in assign.targets
        for element in (target.target.elements if isinstance(target.target, cst.Tuple) else [])
    } | {dotted(target.target) for target in assign.targets}
    return bool(given & targets)


def run_whole(index: SourceIndex, script: TrainingScript) -> set[str]:
    """The names the losses call whole (`outputs = model(inputs)`): a part of one trained
    alone (a swapped head, `model.fc = nn.Linear(...)` and `SGD(model.fc.parameters())`)
    is that model, wrapped whole, so its checkpoint keys carry no `module.` inside
    (round-29 audit B so_freeze_backbone_new_fc wrapped `model.fc`: `fc.module.weight`)."""
    losses = script.loss_nodes
    return {
        name
        for call in index.calls
        if id(call) in losses and (name := dotted(call.func)) is not None
    }


def _writes_in_place(body: cst.CSTNode) -> bool:
    """Whether `body` calls an in-place method or function (`uniform_`, `nn.init.zeros_`,
    `requires_grad_`) or assigns to an attribute or an item (`p.requires_grad = False`)."""
    for node in walk(body):
        if isinstance(node, cst.Call):
            name = dotted(node.func) or ""
            if name.endswith("_") and not name.endswith("__"):
                return True
        targets = assigned(node)
        if any(isinstance(target, cst.Attribute | cst.Subscript) for target in targets):
            return True
    return False


def pairs_of(node: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The (target, value) pairs of a tuple assignment `a, b = x, y`."""
    if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
        return []
    target, value = node.targets[0].target, node.value
    if not (
        isinstance(target, cst.Tuple | cst.List)
        and isinstance(value, cst.Tuple | cst.List)
        and len(target.elements) == len(value.elements)
    ):
        return []
    return [(t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)]


def _data_parallel_calls(index: SourceIndex, model: Model) -> list[cst.Call]:
    """The `nn.DataParallel(...)` calls around the model: of one of its names, or around
    where it is made (`model = nn.DataParallel(Net()).cuda()`, akamaster's trainer.py)."""
    found = []
    for call in index.calls:
        if not index.is_call_to(call, DATA_PARALLEL):
            continue
        inner = call_arg(call, 0, "module")
        made = index.statement_of(call)
        assigned = made.body[0] if isinstance(made, cst.SimpleStatementLine) else None
        if inner is not None and (
            dotted(inner.value) in model.names
            or (
                isinstance(assigned, cst.Assign)
                and moved_value(assigned.value) is call
                and len(assigned.targets) == 1
                and dotted(assigned.targets[0].target) in model.names
            )
        ):
            found.append(call)
    return found


def moved_value(value: cst.BaseExpression) -> cst.BaseExpression:
    """`x` from `x.to(...)` / `x.cuda()`; the value itself when it is not a device move."""
    if (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in {"to", "cuda"}
    ):
        return value.func.value
    return value


def _part_of(value: cst.BaseExpression) -> cst.BaseExpression | None:
    """`model` for `model[0]` or `model.backbone`: the module a part is read from; None for
    anything else (a new module, a call)."""
    if isinstance(value, cst.Subscript | cst.Attribute):
        return value.value if isinstance(value.value, cst.Name) else None
    return None


def _builds_anew(statement: cst.BaseStatement) -> bool:
    """`net = Net().to(device)`: what is moved is made in the same statement."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    small = statement.body[0]
    if not isinstance(small, cst.Assign):
        return False
    moved = moved_value(small.value)
    return moved is not small.value and isinstance(moved, cst.Call)


def _moved_alias(statement: cst.BaseStatement, name: str) -> str | None:
    """`model` for `m = model.to(device)`: the moved object's other name."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return None
    for small in statement.body:
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            source = moved_value(small.value)
            alias = dotted(source) if source is not small.value else None
            if dotted(small.targets[0].target) == name and alias and alias != name:
                return alias
    return None


def holds_model(value: cst.BaseExpression, names: set[str]) -> bool:
    """`[net_a, net_b]`, `{"G": netG}`, `(model, "name")`: a container literal with the model
    object itself among its elements."""
    for node in walk(value):
        if isinstance(node, cst.List | cst.Tuple | cst.Set):
            if any(_names_model(element.value, names) for element in node.elements):
                return True
        elif isinstance(node, cst.Dict) and any(
            isinstance(element, cst.DictElement) and _names_model(element.value, names)
            for element in node.elements
        ):
            return True
    return False


def _names_model(node: cst.CSTNode, names: set[str]) -> bool:
    return isinstance(node, cst.Name | cst.Attribute) and dotted(node) in names


def _aliases_after_the_wrap(
    models: Models, model: Model, holder: cst.IndentedBlock | cst.Module
) -> set[str]:
    """After the wrap, before training, a name the script uses only for what the bare model
    has (`model_without_ddp = model`, then its state dict and EMA copy: round-22 audit A
    tv_cls_ref): it is given `.module` (`model.unwrapped_aliases`)."""
    bare = set()
    backward = set(models.script.training_calls)
    body = list(holder.body)
    start = next(i for i, statement in enumerate(body) if statement is model.placement)
    for statement in body[start + 1 :]:
        if models.graph.reaches(statement, lambda node: node in backward):
            break
        if not _is_alias(statement, model.names):
            continue
        assert isinstance(statement, cst.SimpleStatementLine)
        assign = statement.body[0]
        assert isinstance(assign, cst.Assign)
        target = dotted(assign.targets[0].target)
        if target not in (None, model.placed_name) and _only_bare(models, target, statement):
            assert target is not None
            bare.add(target)
            model.unwrapped_aliases.append(assign)
    return bare


def _only_bare(models: Models, name: str, statement: cst.BaseStatement) -> bool:
    """Whether `name`, bound at `statement`, is never run (`name(x)`), rebound or handed to
    the script's own functions in its function: only read for what it has."""
    scope = models.index.function_of(statement)
    uses = [
        node
        for node in walk(scope.body if scope is not None else models.index.module)
        if isinstance(node, cst.Name) and node.value == name
    ]
    for use in uses:
        parent = models.index.parent(use)
        if isinstance(parent, cst.Attribute) and parent.value is use:
            continue  # `model_without_ddp.state_dict()`
        if isinstance(parent, cst.AssignTarget) and models.index.inside(use, statement):
            continue
        if isinstance(parent, cst.Arg):
            call = models.index.parent(parent)
            if isinstance(call, cst.Call) and not models.graph.calls_script(call):
                continue  # `ExponentialMovingAverage(model_without_ddp, ...)`
            if isinstance(call, cst.Call) and not any(
                models.graph.reaches(f.body, lambda n: n in set(models.script.training_calls))
                for f in models.graph.callees(call)
            ):
                continue
        return False
    return True


def _is_alias(statement: cst.CSTNode, names: set[str]) -> bool:
    """`b = a` for two plain names of the model: a second name for the same object."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    assign = statement.body[0]
    return (
        isinstance(assign, cst.Assign)
        and len(assign.targets) == 1
        and isinstance(assign.targets[0].target, cst.Name)
        and isinstance(assign.value, cst.Name)
        and assign.targets[0].target.value in names
        and assign.value.value in names
    )


def _binds(statement: cst.CSTNode, names: set[str]) -> bool:
    """`model = ...` (or `for model in ...`, `with ... as model`): a new object from here on.
    `model.fc = ...` changes the model, and does not count."""
    for node in walk(statement):
        targets: list[cst.BaseExpression] = []
        if isinstance(node, cst.Assign):
            targets = [target.target for target in node.targets]
        elif isinstance(node, cst.AnnAssign | cst.AugAssign | cst.For):
            targets = [node.target]
        elif isinstance(node, cst.AsName) and isinstance(node.name, cst.BaseExpression):
            targets = [node.name]
        for target in targets:
            elements = (
                [element.value for element in target.elements]
                if isinstance(target, cst.Tuple | cst.List)
                else [target]
            )
            if any(dotted(element) in names for element in elements):
                return True
    return False


# Copies of the model (an EMA, an averaged model, a teacher): made from the bare module, so
# that their state dicts carry no `module.` prefix.
COPIES = re.compile(r"(^|\.)(deepcopy|\w*ema\w*|AveragedModel)$", re.IGNORECASE)


def _hands_over(statement: cst.CSTNode, names: set[str]) -> bool:
    """A call given the model object itself whose result is kept (`trainer = Trainer(model)`,
    `ema = ModelEma(model)`), or a container holding it (`nets = [net_a, net_b]`): what it
    keeps would be the bare model, not the wrapper."""
    for node in walk(statement):
        if isinstance(node, cst.Assign | cst.AnnAssign) and node.value is not None:
            if holds_model(node.value, names):
                return True
            for inner in walk(node.value):
                if (
                    isinstance(inner, cst.Call)
                    and any(_names_model(arg.value, names) for arg in inner.args)
                    and not COPIES.search(dotted(inner.func) or "")
                ):
                    return True
    return False


def _comprehended(
    script: TrainingScript, owner: cst.BaseExpression, source: cst.CSTNode, optimizer: cst.Call
) -> cst.BaseExpression:
    """What a comprehension's variable runs over, when it holds parts of one object:
    `[p for m in grp for p in m.parameters()] for grp, lr in zip(groups, lrs)` with
    `groups = model.layer_groups()` (ULMFiT's discriminative learning rates, round-27 audit
    A) is `model`. `owner` itself otherwise."""
    name = owner
    for _ in range(4):
        if not isinstance(name, cst.Name):
            return owner
        looped = next(
            (
                (comp, element)
                for comp in walk(source)
                if isinstance(comp, cst.CompFor)
                for element in _bound_at(comp.target, name.value)
            ),
            None,
        )
        if looped is None:
            break
        comp, position = looped
        iterable = comp.iter
        if position is not None:  # `for grp, lr in zip(groups, lrs)`
            if not (isinstance(iterable, cst.Call) and is_name(iterable.func, "zip")):
                return owner
            if position >= len(iterable.args):
                return owner
            iterable = iterable.args[position].value
        name = iterable
    if name is owner or not isinstance(name, cst.Name):
        return owner
    values = script.values.assignments(name.value, script.index.function_of(optimizer))
    made = values[0] if len(values) == 1 else None
    if (
        isinstance(made, cst.Call)
        and isinstance(made.func, cst.Attribute)
        and not is_method_call(made, *PARAMETERS, *SUBMODULES)
        and dotted(made.func.value) is not None
    ):
        return made.func.value  # `model.layer_groups()`: parts of `model`
    return owner


def _bound_at(target: cst.BaseExpression, name: str) -> list[int | None]:
    """Where a comprehension's target binds `name`: [None] for the whole target, [i] for
    the i-th of a tuple, [] when it does not."""
    if is_name(target, name):
        return [None]
    if isinstance(target, cst.Tuple):
        return [i for i, element in enumerate(target.elements) if is_name(element.value, name)]
    return []


def _moves_of_this_one(
    models: Models, model: Model, moves: list[tuple[cst.BaseStatement, str]]
) -> list[tuple[cst.BaseStatement, str]]:
    """The moves of `model` itself. A name moved in another function taking it as a
    parameter is another variable (`def test(model): model.to(device)` beside `def
    train(model)`, round-8 a04), and so is one moved in a factory that returns it
    (`create_model(ema=False)` making the student and the EMA teacher, round-34 audit A
    mean_teacher_ema_consistency_b: the wrap went after its `return`): it is wrapped
    where the trained one is made."""
    home = models.index.function_of(model.optimizer_call)
    return [
        (statement, name)
        for statement, name in moves
        if "." in name
        or (where := models.index.function_of(statement)) is None
        or where is home
        or (
            name not in models.graph.parameters_of(where)
            and not _returns_name(models.graph.returned_values(where), name)
        )
    ]


def _makes_its_own(
    models: Models, callee: cst.FunctionDef, optimizer: cst.Call, names: set[str]
) -> bool:
    """Whether `callee` builds what it returns under one of `names` itself, a local of
    its own, and makes no optimizer for it (`create_model(ema=False)` called for the
    student and again for the EMA teacher): each call returns another object, which
    only shares the name."""
    if models.index.function_of(optimizer) is callee:
        return False  # `net, hist = train_one(lr)`: the trained model, returned
    returned = {dotted(value) for value in models.graph.returned_values(callee)}
    return any(
        name is not None
        and "." not in name
        and name not in models.graph.parameters_of(callee)
        and models.script.values.assignments(name, callee)
        for name in returned & names
    )


def _returns_name(returned: list[cst.BaseExpression], name: str) -> bool:
    return any(isinstance(value, cst.Name) and value.value == name for value in returned)
