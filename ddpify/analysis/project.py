"""The script's own project: functions it imports from files beside it, and what they do
with a model they are given.

A training script often hands its model to a helper in another file of its repository:
`evaluate(model, val_loader)` from `evaluate.py`, `compute_loss(outputs, targets, model)`
from `utils/loss.py`. Once the model is wrapped, such a helper gets the DDP wrapper, which
serves `forward`, `parameters()`, `train()` and the like but not the model's own
attributes: `net.n_classes` raises AttributeError. A helper is found the way Python finds
it when the script runs: a module beside the script, or in the package the script sits in
(up to `MAX_PARENTS` folders up). Only its text is read: nothing is imported.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import cast

import libcst as cst

from ddpify.analysis.api import (
    COLLECTIVE_LAST_NAMES,
    DDP_TRANSPARENT,
    IN_PLACE_DRAWS,
    MODEL_COPIES,
)
from ddpify.analysis.calls import CallGraph
from ddpify.analysis.effects import opens_for_writing
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.tree import (
    assigned,
    call_arg,
    catches,
    dotted,
    is_lone,
    is_method_call,
    is_name,
    methods,
    methods_reached,
    source_text,
    walk,
)

# How many folders above the script a package root is looked for in (`repo/pkg/train.py`
# importing `pkg.utils.loss`).
MAX_PARENTS = 3
# How many calls deep a model is followed from the script into its project's functions.
MAX_DEPTH = 3
# Marks, among the attributes a helper reads of a model, that it calls the model.
RUNS = "()"
# Contexts under which a forward pass records no graph.
NO_GRAD = ("no_grad", "inference_mode")


@dataclass(frozen=True)
class Helper:
    """A function of the script's project, defined in another of its files."""

    function: cst.FunctionDef
    graph: CallGraph  # of the helper's own file
    path: Path

    @property
    def index(self) -> SourceIndex:
        return self.graph.index

    @property
    def name(self) -> str:
        return self.function.name.value


@dataclass(frozen=True)
class ModelUse:
    """What a helper does with a model it is given."""

    helper: Helper
    # Attributes it reads or sets that the DDP wrapper does not serve (`n_classes`).
    attributes: tuple[str, ...]
    # It runs the model with autograd on, or calls backward: it may train it.
    trains: bool
    # It runs the model at all (a forward pass: every process must take part).
    runs: bool = False


@dataclass(frozen=True)
class HelperEffects:
    """What a helper (and the functions of its project it calls) does that DDP cares about."""

    trains: bool  # calls `.backward()`
    writes: tuple[str, ...]  # calls that write files (`torch.save`, `open(.., "w")`)
    prints: bool  # print or logging calls
    exits: tuple[str, ...]  # `break`/`continue`/`return` taken on a test inside a loop


# torch's learning-rate schedulers, by their class name (and the base of its own ones).
LR_SCHEDULERS = {
    "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR",
    "ExponentialLR", "SequentialLR", "PolynomialLR", "CosineAnnealingLR", "ChainedScheduler",
    "CyclicLR", "OneCycleLR", "CosineAnnealingWarmRestarts", "LRScheduler", "_LRScheduler",
}  # fmt: skip

# Methods that change the container they are called on.
MUTATORS = ("append", "extend", "update", "add", "pop", "clear", "insert", "setdefault", "remove")

# `torch.optim.AdamW`, not its schedulers.
_OPTIMIZER = re.compile(r"^(torch\.)?optim\.(?!lr_scheduler|swa_utils)(\w+\.)*[A-Z]\w*$")

# Calls that write files, by their last name, and calls that print or log.
WRITES = {
    "save", "savefig", "save_image", "savetxt", "to_csv", "copyfile", "rename", "unlink",
    "FileHandler",  # a log file, opened (and, with mode="w", truncated) when it is made
    "savez", "savez_compressed", "savemat", "tofile", "write_text", "write_bytes", "imwrite",
    "imsave", "mimsave", "to_parquet", "to_pickle", "to_feather", "to_excel", "copy2", "move",
    "rmtree", "symlink", "export", "export_chrome_trace", "export_stacks",
}  # fmt: skip
PRINTS = {"print", "info", "warning", "debug", "log", "write_line"}


class Project:
    """The script's own modules, as far as they can be found from the script's path."""

    def __init__(self, index: SourceIndex, path: Path | None) -> None:
        self.index = index
        self.path = path

    @cached_property
    def roots(self) -> list[Path]:
        """Folders a module of the project may be imported from: the script's own first."""
        if self.path is None:
            return []
        folder = self.path.resolve().parent
        return [folder, *list(folder.parents)[:MAX_PARENTS]]

    def shown(self, path: Path) -> str:
        """`path` as reports show it: relative to the script's folder."""
        if self.path is None:
            return str(path)
        return os.path.relpath(path, self.path.resolve().parent)

    @cached_property
    def imported(self) -> set[str]:
        """Names the script binds by importing a module or package of its own project (one
        found under its roots): only calls through these can reach a helper."""
        names = set()
        for node in walk(self.index.module):
            if isinstance(node, cst.Import):
                for alias in node.names:
                    top = cst.Module([]).code_for_node(alias.name).split(".")[0]
                    if self._local(top):
                        names.add(alias.evaluated_alias or top)
            elif isinstance(node, cst.ImportFrom) and node.module is not None:
                top = cst.Module([]).code_for_node(node.module).split(".")[0]
                if node.relative or not self._local(top):
                    continue
                if isinstance(node.names, cst.ImportStar):
                    names.add("*")
                else:
                    names.update(
                        alias.evaluated_alias or alias.evaluated_name for alias in node.names
                    )
        return names

    def may_be_helper(self, call: cst.Call) -> bool:
        """Cheap: whether the called name starts with a name imported from the project."""
        name = dotted(self._aliased(call.func))
        if name is None or not self.imported:
            return False
        return name.split(".")[0] in self.imported or "*" in self.imported

    def _aliased(self, func: cst.BaseExpression) -> cst.BaseExpression:
        """What a name called stands for when the module gives it another name once
        (Informer's `Exp = Exp_Informer`, then `exp = Exp(args)`): that name; else `func`."""
        if not isinstance(func, cst.Name):
            return func
        return self._aliases.get(func.value, func)

    @cached_property
    def _aliases(self) -> dict[str, cst.BaseExpression]:
        given: dict[str, list[cst.BaseExpression]] = {}
        for assign in self.index.assigns:
            if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
                given.setdefault(assign.targets[0].target.value, []).append(assign.value)
        return {
            name: values[0]
            for name, values in given.items()
            if len(values) == 1
            and isinstance(values[0], cst.Name | cst.Attribute)
            and self.index.parent(self.index.statement_of(values[0])) is self.index.module
        }

    def _local(self, top: str) -> bool:
        return any((root / f"{top}.py").is_file() or (root / top).is_dir() for root in self.roots)

    def helper(self, call: cst.Call) -> Helper | None:
        """The function of another project file that `call` calls, when one is found (or
        the method of an object of a class of one: `called_instance`)."""
        if not self.may_be_helper(call):
            return self.called_instance(call)
        for qualified in self.index.qualified_names(call.func):
            found = _find(qualified, self.roots)
            if found is not None:
                return found
        name = dotted(call.func)
        for module in self._starred if name is not None and "." not in name else ():
            found = _find(f"{module}.{name}", self.roots)
            if found is not None:
                return found
        return self.called_instance(call)

    @cached_property
    def _starred(self) -> list[str]:
        """Modules of the project the script imports everything from (`from utils import *`,
        dome272's diffusion models): where a name it never imports by name may come from."""
        return [
            source_text(node.module)
            for node in walk(self.index.module)
            if isinstance(node, cst.ImportFrom)
            and isinstance(node.names, cst.ImportStar)
            and node.module is not None
            and not node.relative
            and self._local(source_text(node.module).split(".")[0])
        ]

    def class_made(self, call: cst.Call) -> tuple[cst.ClassDef, Path] | None:
        """The class of another project file that `call` makes (`EncoderCNN(256)`)."""
        if not self.may_be_helper(call):
            return None
        for qualified in self.index.qualified_names(call.func):
            found = _definition(qualified, self.roots)
            if found is not None and isinstance(found[0], cst.ClassDef):
                return found[0], found[2]
        return None

    def called_instance(self, call: cst.Call) -> Helper | None:
        """The method of a project class (in another file) that `call` calls on an object
        of it: `__call__` for `early_stopping(valid_loss, model)` with `early_stopping =
        EarlyStopping(...)` imported from `pytorchtools.py` (Bjarten's early-stopping-pytorch,
        round-23 audit B pytorchtools_es_b), `save` for `checkpointer.save(model, epoch)`."""
        if not self.imported:
            return None
        func = call.func
        if isinstance(func, cst.Name):
            instance, wanted = func.value, "__call__"
        elif isinstance(func, cst.Attribute) and (held := dotted(func.value)) is not None:
            # `self.ema.update(self.model)` with `self.ema = EMA(self.model)` made once
            # (round-49 audit D ema_trainer: the wrapper's `module.` keys, KeyError)
            instance, wanted = held, func.attr.value
        else:
            return None
        made = self._objects_made.get(instance)
        return self.method_of(made, wanted) if made is not None else None

    def method_of(self, made: cst.Call, wanted: str) -> Helper | None:
        """The method `wanted` of the project class whose object `made` makes."""
        found = self._class_of(made)
        if found is None:
            return None
        method = next((m for m in methods(found[0]) if m.name.value == wanted), None)
        return Helper(method, found[1], found[2]) if method is not None else None

    def _class_of(self, made: cst.Call) -> tuple[cst.ClassDef, CallGraph, Path] | None:
        """The project class whose object `made` makes: `Vocab(...)`, or a class method
        that makes one (`CharTokenizer.from_file(path)`, round-33 audit C
        text_dataset_collate_module)."""
        for func in (made.func, made.func.value if isinstance(made.func, cst.Attribute) else None):
            for qualified in self.index.qualified_names(func) if func is not None else ():
                found = _definition(qualified, self.roots)
                if found is not None and isinstance(found[0], cst.ClassDef):
                    return found[0], found[1], found[2]
        return None

    def runs(self, call: cst.Call) -> Helper | None:
        """The code of another project file `call` runs: a function, a method of an object
        of a project class, a class method (`CharTokenizer.from_file(path)`), or the
        `__init__` of a class it makes (`TextDataset(path, tokenizer)`)."""
        helper = self.helper(call)
        if helper is not None or not self.may_be_helper(call):
            return helper
        found = self._class_of(call)
        if found is None:
            return None
        owner, graph, path = found
        made = any(  # the class itself is called
            qualified
            for qualified in self.index.qualified_names(call.func)
            if _definition(qualified, self.roots) is not None
        )
        wanted = "__init__" if made else cast(cst.Attribute, call.func).attr.value
        method = next((m for m in methods(owner) if m.name.value == wanted), None)
        return Helper(method, graph, path) if method is not None else None

    def reaches(self, call: cst.Call, predicate: Callable[[cst.CSTNode], bool]) -> bool:
        """Whether the code of another project file `call` runs (`runs`), or a project
        function it calls, has a node `predicate` holds for."""
        helper = self.runs(call)
        return helper is not None and any(
            predicate(node) for reached in _reached(helper) for node in walk(reached.function)
        )

    @cached_property
    def _objects_made(self) -> dict[str, cst.Call]:
        """Names assigned once, from a call of a name imported from the project (`checkpointer
        = Checkpointer("ckpts")`): objects whose methods may be the project's."""
        made: dict[str, list[cst.BaseExpression]] = {}
        for assign in self.index.assigns:
            if len(assign.targets) == 1 and (name := dotted(assign.targets[0].target)):
                made.setdefault(name, []).append(assign.value)
        return {
            name: values[0]
            for name, values in made.items()
            if len(values) == 1
            and isinstance(values[0], cst.Call)
            and self.may_be_helper(values[0])
        }

    def keeps_state(self, call: cst.Call) -> bool:
        """Whether the script reads an attribute of the object whose method `call` calls
        (`early_stopping.early_stop`), or keeps what the call returns: its state is every
        process's concern, so the call cannot go on rank 0 alone."""
        func = call.func
        target = func.value if isinstance(func, cst.Attribute) else func
        name = dotted(target)
        if not _alone_on_its_line(self.index, call):
            return True
        for node in walk(self.index.module):
            if isinstance(node, cst.Attribute) and dotted(node.value) == name:
                parent = self.index.parent(node)
                if not (isinstance(parent, cst.Call) and parent.func is node):
                    return True
        return False

    def one_pass_over(self, call: cst.Call) -> cst.BaseExpression | None:
        """The argument `call` hands an object of a project class (in another file) that
        makes one pass over it: its `__init__` takes `iter(...)` of that parameter, and no
        method makes another (apex's `data_prefetcher(train_loader)`, round-33 audit C
        prefetcher_module_next). Each such object starts a pass."""
        made = self.class_made(call)
        return _one_pass_over(made[0], call) if made is not None else None

    def changes_the_object(self, call: cst.Call) -> bool:
        """Whether the method of a project object `call` runs (`called_instance`) changes
        the object (`self.counter += 1`, `self.history.append(...)`, directly or through
        another of its methods): `tokenizer.save(path)` does not, and can run on rank 0
        alone though the object is read everywhere; `early_stopping(loss, model)` does."""
        method = self.called_instance(call)
        return method is not None and _changes_self(method)

    def draws(self, call: cst.Call) -> bool | None:
        """Whether the function or class of another project file that `call` calls or makes
        draws at random (in itself, or in what its file's functions it calls); None when
        `call` is not found in the project (a library's, or nothing ddpify can read)."""
        if not self.may_be_helper(call):
            return None
        for qualified in self.index.qualified_names(call.func):
            found = _definition(qualified, self.roots)
            if found is not None:
                return found[1].reaches(found[0], draws_at_random)
        return None

    def trainer_class(self, call: cst.Call) -> Path | None:
        """The file of the project class `call` makes (`Trainer(model, ...)`), when the class
        trains: a method of it, or of a base class of the project, calls backward."""
        if not self.may_be_helper(call):
            return None
        for qualified in self.index.qualified_names(self._aliased(call.func)):
            found = _definition(qualified, self.roots)
            if found is not None:
                owner, graph, path = found
                if isinstance(owner, cst.ClassDef):
                    return path if _class_trains(owner, graph, path) else None
        return None

    def trainer_base(self, owner: cst.ClassDef) -> Path | None:
        """The file of a base class of `owner` (a class of the script) that a file of the
        project defines and that trains in its own methods (SpeechBrain's `Brain`, whose
        `fit` runs `fit_batch`'s backward pass)."""
        for base in owner.bases:
            for qualified in self.index.qualified_names(self._aliased(base.value)):
                found = _definition(qualified, self.roots)
                if found is not None:
                    made, graph, path = found
                    if isinstance(made, cst.ClassDef) and _class_trains(made, graph, path):
                        return path
        return None

    def training_elsewhere(self) -> tuple[cst.Call, Path] | None:
        """For a script in which no training is found: a call of a function or class of
        another project file that loops, from whose file a file of the project that runs a
        backward pass is imported (StyleGAN2-ADA's `training_loop.training_loop(**c)`, its
        loss in training/loss.py built by name, round-33 audit D): the call and that file.
        The training is there, out of ddpify's reach."""
        for call in self.index.calls:
            if self.may_be_helper(call):
                for qualified in self.index.qualified_names(self._aliased(call.func)):
                    trains = _loops_into_training(_definition(qualified, self.roots))
                    if trains is not None:
                        return call, trains
        return None

    def closure(self, made: cst.Call) -> Helper | None:
        """The function a helper of another file makes and returns, when `made` calls one
        ("Deep Learning with PyTorch Step-by-Step"'s `train_step_fn =
        make_train_step(model, loss_fn, optimizer)`, its `perform_train_step` nested in it):
        what a call of the name it is given runs."""
        maker = self.helper(made) if self.may_be_helper(made) else None
        if maker is None:
            return None
        nested = {
            node.name.value: node
            for node in maker.function.body.body
            if isinstance(node, cst.FunctionDef)
        }
        for value in maker.graph.returned_values(maker.function):
            if isinstance(value, cst.Name) and value.value in nested:
                return Helper(nested[value.value], maker.graph, maker.path)
        return None

    def makes_scheduler(self, call: cst.Call) -> bool:
        """Whether `call` runs a function of another project file that makes a torch
        learning-rate scheduler (scheduler.py's `WarmupCosine(optimizer, steps_per_epoch,
        epochs)` returning a LambdaLR), or makes an object of a class of one built on one."""
        if not self.may_be_helper(call):
            return False
        made = self.class_made(call)
        if made is not None:
            return any(
                (dotted(base.value) or "").rsplit(".", 1)[-1] in LR_SCHEDULERS
                for base in made[0].bases
            )
        helper = self.helper(call)
        return (
            helper is not None
            and helper.index.class_of(helper.function) is None
            and any(
                isinstance(node, cst.Call)
                and (dotted(node.func) or "").rsplit(".", 1)[-1] in LR_SCHEDULERS
                for node in walk(helper.function.body)
            )
        )

    def optimized_parameter(self, call: cst.Call) -> str | None:
        """The parameter of the function of another project file `call` runs whose
        parameters the optimizer it returns trains (optim.py's `build_optimizer(model,
        cfg)`: `AdamW(groups, ...)` over `model.named_parameters()`, round-32 audit C
        optim_factory_module); None unless every value it returns is a `torch.optim`
        optimizer made over that one parameter's parameters."""
        helper = self.helper(call) if self.may_be_helper(call) else None
        return _optimized_parameter(helper) if helper is not None else None

    def writer_class(self, call: cst.Call) -> bool:
        """Whether `call` makes an object of a project class (in another file) that makes a
        TensorBoard writer or opens a file for writing when it is made (YOLOv3's `Logger`):
        its methods write, so the object belongs on rank 0."""
        if not self.may_be_helper(call):
            return False
        for qualified in self.index.qualified_names(call.func):
            found = _definition(qualified, self.roots)
            if found is not None and isinstance(found[0], cst.ClassDef):
                init = next((m for m in methods(found[0]) if m.name.value == "__init__"), None)
                return init is not None and _makes_a_writer(init)
            if found is not None and isinstance(found[0], cst.FunctionDef):
                # utils.py's `get_logger(name, log_file)` adding a FileHandler to the
                # logger it returns (round-32 audit C: rank 1 truncated train.log)
                # (a writer it makes, not files it writes: a dataset it downloads and
                # returns, predictions it dumps, are not writers)
                function = found[0]
                maker = Helper(function, found[1], found[2])
                return any(
                    isinstance(node, cst.Return) and node.value is not None
                    for node in walk(function.body)
                ) and (
                    _makes_a_writer(function, opened=False)
                    or any(  # logger.py's `init()` making a `Run` that opens its files
                        (constructor := _object_method(maker, node)) is not None
                        and constructor.name == "__init__"
                        and _makes_a_writer(constructor.function)
                        for node in walk(function.body)
                        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name)
                    )
                )
        return False

    def model_use(self, call: cst.Call, argument: cst.Arg) -> ModelUse | None:
        """What the helper `call` calls does with the model passed as `argument`; None when
        `call` calls no function of the project, or the helper does nothing with it."""
        helper = self.helper(call)
        if helper is None:
            return None
        parameter = _parameter(helper.function, call, argument)
        if parameter is None:
            return None
        attributes: set[str] = set()
        trains = _follow(helper, parameter, attributes, depth=0)
        runs = RUNS in attributes
        return ModelUse(helper, tuple(sorted(attributes - {RUNS})), trains, runs)

    def shows_outputs(self, call: cst.Call, use: ModelUse) -> bool:
        """`save_some_examples(gen, val_loader, epoch, folder)`, a call on its own line: a
        helper that runs the model without training it and writes files (images of what it
        makes). It belongs on rank 0 with the bare model, whose forward waits for no one."""
        if not (_alone_on_its_line(self.index, call) and use.runs) or use.trains:
            return False
        effects = self.effects(use.helper)
        return bool(effects.writes) and not effects.trains

    def effects(self, helper: Helper) -> HelperEffects:
        """What `helper` does, through the functions it calls, `MAX_DEPTH` deep."""
        found: dict[str, set[str]] = {"trains": set(), "writes": set(), "prints": set()}
        exits: set[str] = set()
        _scan(helper, found, exits)
        return HelperEffects(
            bool(found["trains"]), tuple(sorted(found["writes"])), bool(found["prints"]),
            tuple(sorted(exits)),
        )  # fmt: skip


# What a helper that only shows text calls besides its prints: builtins that format and
# count, and modules that tell the time or do arithmetic.
SHOWING = {
    "len", "int", "float", "str", "round", "min", "max", "abs", "range", "enumerate",
    "format", "repr", "sum", "divmod", "isinstance", "zip", "sorted", "list", "tuple", "bool",
}  # fmt: skip
SHOWING_MODULES = ("time.", "math.", "datetime.", "sys.stdout.", "sys.stderr.")
# Methods of strings, numbers and the helper's own lists.
SHOWING_METHODS = {
    "format", "join", "ljust", "rjust", "center", "strip", "rstrip", "lstrip", "split",
    "replace", "upper", "lower", "item", "append", "extend",
}  # fmt: skip


def only_prints(helper: Helper, script: SourceIndex) -> bool:
    """Whether `helper` (and what of its project it calls) does nothing but show text:
    prints, `sys.stdout.write`, formatting and arithmetic, and globals of its own module
    that the script never names (kuangliu's `progress_bar(batch_idx, len(loader), msg)` and
    its clock). Such a call, on a line of its own, runs on rank 0 alone and changes nothing
    the other processes need."""
    shows = False
    for reached in _reached(helper):
        if helper.index.class_of(reached.function) is not None and _changes_self(reached):
            # an object's method may change what the object keeps; one that only reads it
            # shows it (a `StepLogger.tick(step, loss)` printing every `self.every` steps,
            # round-49 audit A swag_helpers: printed by every rank)
            return False
        for node in walk(reached.function.body):
            if (
                isinstance(node, cst.Global)
                and {name.name.value for name in node.names} & script.names_used
            ):
                return False
            if not isinstance(node, cst.Call):
                continue
            name = dotted(node.func) or ""
            func = node.func
            last = func.attr.value if isinstance(func, cst.Attribute) else name  # `"".join`
            if last in PRINTS or name in {"sys.stdout.write", "sys.stderr.write"}:
                shows = True
            elif (
                name in SHOWING
                or name.startswith(SHOWING_MODULES)
                or _callee(reached, node) is not None
                or (
                    isinstance(func, cst.Attribute)
                    and last in SHOWING_METHODS
                    and (last not in {"append", "extend"} or _local(reached, func.value))
                )
            ):
                continue
            else:
                return False
    return shows


def _local(helper: Helper, value: cst.BaseExpression) -> bool:
    """`value` is a name the helper's function assigns (a list of its own, `L = []`)."""
    return isinstance(value, cst.Name) and any(
        isinstance(node, cst.Assign)
        and any(is_name(target.target, value.value) for target in node.targets)
        for node in walk(helper.function.body)
    )


def foreign_base(project: Project, owner: cst.ClassDef) -> tuple[str, Path] | None:
    """A base class of `owner` that a file of the project defines and whose methods call
    methods `owner` defines (`BaseTrainer` of trainer/base.py, whose `train()` runs
    `self._train_epoch(epoch)`): its name and file."""
    own = {m.name.value for m in methods(owner)}
    if not project.imported:
        return None
    for base in owner.bases:
        name = dotted(base.value)
        if name is None or name.split(".")[0] not in project.imported:
            continue
        for qualified in project.index.qualified_names(base.value):
            found = _definition(qualified, project.roots)
            if (
                found is not None
                and isinstance(found[0], cst.ClassDef)
                and any(
                    isinstance(node, cst.Call)
                    and isinstance(node.func, cst.Attribute)
                    and is_name(node.func.value, "self")
                    and node.func.attr.value in own
                    for node in walk(found[0].body)
                )
            ):
                return found[0].name.value, found[2]
    return None


def _alone_on_its_line(index: SourceIndex, call: cst.Call) -> bool:
    """`call` is a statement of its own (`save(model, epoch)`), its result kept by nothing."""
    statement = index.statement_of(call)
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and is_lone(statement, cst.Expr)
        and cast(cst.Expr, statement.body[0]).value is call
    )


def _scan(helper: Helper, found: dict[str, set[str]], exits: set[str]) -> None:
    for reached in _reached(helper):
        for node in walk(reached.function.body):
            if isinstance(node, cst.Call):
                name = dotted(node.func) or ""
                last = name.rsplit(".", 1)[-1]
                if is_method_call(node, "backward"):
                    found["trains"].add(name)
                elif last in WRITES or (
                    last == "open" and opens_for_writing(node, reached.function)
                ):
                    found["writes"].add(name)
                elif last in PRINTS:
                    found["prints"].add(name)
            elif isinstance(node, cst.If) and _in_loop(reached, node):
                for branch in walk(node.body):
                    if isinstance(branch, cst.Break | cst.Continue | cst.Return):
                        exits.add(type(branch).__name__.lower())


def _optimized_parameter(helper: Helper) -> str | None:
    """`Project.optimized_parameter` for the function `helper` is."""
    if helper.index.class_of(helper.function) is not None:
        return None
    made = [
        _made_optimizer(helper, value) for value in helper.graph.returned_values(helper.function)
    ]
    if not made or any(optimizer is None for optimizer in made):
        return None
    given = {
        first.value.value
        for optimizer in made
        if optimizer is not None
        and (first := call_arg(optimizer, 0, "params")) is not None
        and isinstance(first.value, cst.Name)
    }
    parameters = {param.name.value for param in helper.function.params.params}
    if len(given) == 1 and given <= parameters:
        # `build_optimizer(params, cfg)` returning `AdamW(params, ...)`, called with
        # `model.parameters()` (round-37 audit C scheduler_module_from_loader_len)
        return given.pop()
    return _parameters_of_one(helper.function)


def _parameters_of_one(function: cst.FunctionDef) -> str | None:
    """The one parameter of `function` whose `.parameters()` (or `.named_parameters()`) it
    reads, if it reads only one's."""
    roots = {
        (dotted(node.func.value) or "").split(".")[0]  # type: ignore[attr-defined]
        for node in walk(function.body)
        if is_method_call(node, "parameters", "named_parameters", "modules", "named_modules")
    }  # (YOLOv5's `for v in model.modules(): v.named_parameters(recurse=False)`: `v` local)
    given = roots & {param.name.value for param in function.params.params}
    return given.pop() if len(given) == 1 else None


def _made_optimizer(helper: Helper, value: cst.BaseExpression) -> cst.Call | None:
    """The `torch.optim` optimizer `value`, returned by `helper`, is: the call itself or the
    one call a name it returns is given."""
    if isinstance(value, cst.Name):  # every value the name is given (YOLOv5's if/elif)
        given = [
            assign.value
            for assign in helper.index.assigns
            if helper.index.function_of(assign) is helper.function
            and any(dotted(target.target) == value.value for target in assign.targets)
        ]
        made = [
            _made_optimizer(helper, one) if isinstance(one, cst.Call) else None for one in given
        ]
        return made[0] if made and all(made) else None
    if not isinstance(value, cst.Call):
        return None
    chosen = value.func
    if (
        isinstance(chosen, cst.Call)
        and is_name(chosen.func, "getattr")
        and chosen.args
        and "torch.optim"
        in helper.index.qualified_names(chosen.args[0].value) | {dotted(chosen.args[0].value)}
    ):
        # `getattr(torch.optim, cfg.pop("type"))(model.parameters(), **cfg)`: an mmcv-like
        # builder (round-38 audit C config_py_file_runpy_loaded)
        return value
    named = helper.index.qualified_names(value.func) | {dotted(value.func) or ""}
    return value if any(_OPTIMIZER.match(name) for name in named) else None


def runs_collective(project: Project, call: cst.Call) -> bool:
    """Whether the function or method of another project file `call` runs (or what
    its file's functions it calls) runs a collective: a torchmetrics-like metric whose
    `compute()` all-reduces its states (round-35 audit C metric_collection_sync)."""
    helper = project.helper(call)
    if helper is None:
        return False
    if helper.graph.reaches(helper.function, _runs_a_collective):
        return True
    # a method it calls by name on objects it holds (`m.compute()` for the metrics of
    # a collection), defined in a file beside its own: any of that name there
    called = {
        node.func.attr.value
        for node in walk(helper.function)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
    }
    for path in sorted(helper.path.parent.glob("*.py")):
        graph = _read(path)
        if graph is None:
            continue
        for name in sorted(called):
            if any(graph.reaches(f, _runs_a_collective) for f in graph.defined(name)):
                return True
    return False


def sets_up_process_group(project: Project, call: cst.Call) -> Path | None:
    """The file of the function of another project file that `call` calls, when it (or
    what its file's functions it calls) sets up a process group: DeiT's and DETR's
    `utils.init_distributed_mode(args)`, which does when torchrun launched it."""
    if not project.may_be_helper(call):
        return None
    for qualified in project.index.qualified_names(call.func):
        found = _definition(qualified, project.roots)
        if found is not None and found[1].reaches(found[0], _inits_process_group):
            return found[2]
    return None


def trains_by_name(project: Project) -> tuple[cst.CSTNode, Path, Path] | None:
    """For a script in which no training is found: an import of a package of the
    project that loads its modules by name (`importlib.import_module("models." + name
    + "_model")`, CycleGAN's `create_model(opt)`), one of which runs a backward pass:
    the import, the package's `__init__.py` and that module."""
    roots = project.roots
    for statement in walk(project.index.module) if roots else ():
        if not isinstance(statement, cst.Import | cst.ImportFrom):
            continue
        for path in _imported_files(statement, roots[0] / "_", roots):
            graph = _read(path) if path.name == "__init__.py" else None
            if graph is None or not any(
                isinstance(node, cst.Call) and (dotted(node.func) or "").endswith("import_module")
                for node in walk(graph.index.module)
            ):
                continue
            for module in sorted(path.parent.glob("*.py")):
                found = _read(module)
                if found is not None and any(
                    is_method_call(node, "backward") for node in walk(found.index.module)
                ):
                    return statement, path, module
    return None


def _runs_a_collective(node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.Call):
        return False
    name = dotted(node.func) or ""
    head, _, last = name.rpartition(".")
    return head in {"dist", "torch.distributed"} and last in COLLECTIVE_LAST_NAMES


def _inits_process_group(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and (dotted(node.func) or "").endswith("init_process_group")


def _one_pass_over(owner: cst.ClassDef, call: cst.Call) -> cst.BaseExpression | None:
    """`Project.one_pass_over` for the class `call` makes."""
    found = passes_over(owner, call)
    return found[0] if found is not None and not found[1] else None


def passes_over(owner: cst.ClassDef, call: cst.Call) -> tuple[cst.BaseExpression, set[str]] | None:
    """The argument `call` hands the class `owner` (script's or project's) whose `__init__`
    takes `iter(...)` of it, and the methods that take `iter(...)` of it again (BasicSR's
    `CPUPrefetcher.reset()`: `self.loader = iter(self.ori_loader)`, round-34 audit A
    basicsr): the making, and each call of those methods, starts a pass."""
    init = next((m for m in methods(owner) if m.name.value == "__init__"), None)
    if init is None:
        return None
    params = [param.name.value for param in init.params.params][1:]  # after `self`
    given: str | None = None
    again: dict[str, str | None] = {}
    for method in methods(owner):
        for node in walk(method.body):
            if not (isinstance(node, cst.Call) and is_name(node.func, "iter") and node.args):
                continue
            read = node.args[0].value
            if method is init and isinstance(read, cst.Name) and read.value in params:
                if given is not None:
                    return None
                given = read.value
            elif method is not init and (dotted(read) or "").startswith("self."):
                again[method.name.value] = dotted(read)
            else:
                return None
    if given is None:
        return None
    stored = {  # `self.ori_loader = loader`
        dotted(node.targets[0].target)
        for node in walk(init.body)
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and is_name(node.value, given)
    }
    if not set(again.values()) <= stored:
        return None
    argument = call_arg(call, params.index(given), given)
    return (argument.value, set(again)) if argument is not None else None


def _changes_self(method: Helper) -> bool:
    """`Project.changes_the_object` for the method it runs."""
    owner = method.index.class_of(method.function)
    by_name = {m.name.value: m for m in methods(owner)} if owner is not None else {}
    for reached in methods_reached(method.function, by_name):
        for node in walk(reached.body):
            targets = [node.target] if isinstance(node, cst.AnnAssign) else assigned(node)
            if any((dotted(_root(t)) or "").startswith("self") for t in targets):
                return True
            if (
                is_method_call(node, *MUTATORS)
                and isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and (dotted(node.func.value) or "").startswith("self.")
            ):
                return True
    return False


def _root(target: cst.BaseExpression) -> cst.BaseExpression:
    """`self.scores` of `self.scores[k]`."""
    while isinstance(target, cst.Subscript):
        target = target.value
    return target


def _reached(helper: Helper) -> list[Helper]:
    """`helper` and the functions of the project it calls, `MAX_DEPTH` deep, once each."""
    found: list[Helper] = []
    seen: set[int] = set()
    todo = [(helper, 0)]
    while todo:
        current, depth = todo.pop()
        if id(current.function) in seen:
            continue
        seen.add(id(current.function))
        found.append(current)
        if depth + 1 < MAX_DEPTH:
            for node in walk(current.function.body):
                callee = _callee(current, node) if isinstance(node, cst.Call) else None
                if callee is not None:
                    todo.append((callee, depth + 1))
    return found


def repasses(helper: Helper) -> tuple[Helper, cst.CSTNode] | None:
    """Where `helper` (or a project function it calls) may start another pass over data it
    is given: a `for` loop that trains inside another loop (`def fit(model, loader,
    epochs): for epoch in range(epochs): for x, y in loader: ...`), or `iter(...)` made in
    a loop or when an iterator runs out (`except StopIteration: it = iter(loader)`, round-31
    audit C step_loop_in_train_lib). With the helper it is in; None when it makes one pass.
    """
    return _repasses(helper, depth=0, seen=set(), looped=False)


def generator_repasses(helper: Helper) -> cst.CSTNode | None:
    """The loop of a generator (`helper` yields) that starts a new pass over what it is
    given each time round an outer loop: `def infiniteloop(dataloader): while True: for x, _
    in iter(dataloader): yield x` (pytorch-gan-collections' source/utils.py)."""
    if not any(isinstance(node, cst.Yield) for node in walk(helper.function.body)):
        return None
    for node in walk(helper.function.body):
        if isinstance(node, cst.For) and _in_loop(helper, node):
            return node
    found = repasses(helper)
    return found[1] if found is not None else None


def _repasses(
    helper: Helper, depth: int, seen: set[int], looped: bool
) -> tuple[Helper, cst.CSTNode] | None:
    """`repasses`; `looped`: `helper` is called in a loop (trainer.py's `fit()` calling
    `_run_epoch(model, train_loader, ...)` every epoch, round-32 audit C)."""
    if id(helper.function) in seen:
        return None
    seen.add(id(helper.function))
    for node in walk(helper.function.body):
        again = looped or _in_loop(helper, node)
        if isinstance(node, cst.For) and again and _trains_in(node):
            return helper, node
        if (
            isinstance(node, cst.Call)
            and is_name(node.func, "iter")
            and node.args
            and (again or _on_stop_iteration(helper, node))
        ):
            return helper, node
        if isinstance(node, cst.Call) and depth + 1 < MAX_DEPTH:
            callee = _callee(helper, node)
            found = _repasses(callee, depth + 1, seen, again) if callee is not None else None
            if found is not None:
                return found
    return None


def _trains_in(loop: cst.For) -> bool:
    return any(is_method_call(node, "backward", "step") for node in walk(loop.body))


def _on_stop_iteration(helper: Helper, node: cst.CSTNode) -> bool:
    """Whether `node` runs in an `except` clause that catches StopIteration (or anything)."""
    for ancestor in helper.index.ancestors(node):
        if ancestor is helper.function:
            return False
        if isinstance(ancestor, cst.ExceptHandler) and catches(
            ancestor, {None, "StopIteration", "Exception", "BaseException"}
        ):
            return True
    return False


# What draws from a global generator: `np.random.<x>(...)`, `random.<x>(...)`, `torch.rand*`,
# and tensors' in-place draws (`w.normal_()`).
_DRAW_PREFIXES = ("np.random.", "numpy.random.", "random.", "torch.rand", "torch.normal")


def draws_at_random(node: cst.CSTNode) -> bool:
    """Whether `node` is a call that draws from a global generator, read from its text (a
    file of the project is only read, its imports not resolved)."""
    if not isinstance(node, cst.Call):
        return False
    if (dotted(node.func) or "").startswith(_DRAW_PREFIXES):
        return True
    return isinstance(node.func, cst.Attribute) and node.func.attr.value in IN_PLACE_DRAWS


def _makes_a_writer(function: cst.FunctionDef, *, opened: bool = True) -> bool:
    """Whether `function` makes a TensorBoard writer or a logging FileHandler, or (with
    `opened`) opens a file to write."""
    return any(
        isinstance(node, cst.Call)
        and (
            (dotted(node.func) or "").rsplit(".", 1)[-1] in ("SummaryWriter", "FileHandler")
            or (opened and dotted(node.func) == "open" and opens_for_writing(node, function))
        )
        for node in walk(function.body)
    )


def defines_iterable(project: Project, base: cst.BaseExpression) -> bool:
    """Whether `base`, a base class a class of the script names, is an IterableDataset of
    another project file (round-41 audit A iterable: `class MyStream(Stream)` with `Stream`
    from streams.py was given a DistributedSampler, TypeError: no len())."""
    if not project.imported:
        return False
    for qualified in project.index.qualified_names(base):
        found = _definition(qualified, project.roots)
        if found is not None and isinstance(found[0], cst.ClassDef):
            return iterable_class(found[0])
    return False


def iterable_class(owner: cst.ClassDef) -> bool:
    """Whether a dataset class read from a project file's text is an IterableDataset (by
    its base's name, or an `__iter__` without `__getitem__`): it has no indices to split."""
    bases = {(dotted(base.value) or "").rsplit(".", 1)[-1] for base in owner.bases}
    own = {m.name.value for m in methods(owner)}
    return "IterableDataset" in bases or ("__iter__" in own and "__getitem__" not in own)


def draw_family(node: cst.CSTNode) -> str | None:
    """The generator a call read from a project file's text draws from ("torch", "numpy",
    "random"), if it draws from a global one."""
    if not draws_at_random(node):
        return None
    assert isinstance(node, cst.Call)
    name = dotted(node.func) or ""
    if name.startswith(("np.random.", "numpy.random.")):
        return "numpy"
    if name.startswith("random."):
        return "random"
    return "torch"


def helper_draws(helper: Helper) -> set[str]:
    """The generators `helper` (and the project functions it calls) draws from."""
    return {
        family
        for reached in _reached(helper)
        for node in walk(reached.function.body)
        if (family := draw_family(node)) is not None
    }


def _in_loop(helper: Helper, node: cst.CSTNode) -> bool:
    for ancestor in helper.index.ancestors(node):
        if ancestor is helper.function:
            return False
        if isinstance(ancestor, cst.For | cst.While):
            return True
    return False


def _follow(helper: Helper, parameter: str, attributes: set[str], depth: int) -> bool:
    """Collect into `attributes` what `helper` (and the project functions it hands the model
    on to) reads of `parameter` past the wrapper; whether any of them may train with it."""
    trains = False
    function = helper.function
    for node in walk(function.body):
        if isinstance(node, cst.Attribute) and dotted(node.value) == parameter:
            if node.attr.value not in DDP_TRANSPARENT:
                attributes.add(node.attr.value)
        elif isinstance(node, cst.Call):
            called = dotted(node.func) == parameter
            if called:
                attributes.add(RUNS)
            if (called and not _without_grad(helper, node)) or is_method_call(node, "backward"):
                trains = True
            for arg in node.args:
                if dotted(arg.value) != parameter or depth + 1 >= MAX_DEPTH:
                    continue
                inner = _callee(helper, node)
                inner_parameter = inner and _parameter(inner.function, node, arg)
                if inner is not None and inner_parameter:
                    trains |= _follow(inner, inner_parameter, attributes, depth + 1)
    return trains


def _callee(helper: Helper, call: cst.Call) -> Helper | None:
    """The function `call`, in a helper's file, calls: one of that file or of its project."""
    function = helper.graph.callee(call)
    if function is not None and helper.index.class_of(function) is None:
        return Helper(function, helper.graph, helper.path)
    owner = helper.index.class_of(helper.function)
    if (
        function is not None
        and owner is not None
        and helper.index.class_of(function) is owner
        and isinstance(call.func, cst.Attribute)
        and is_name(call.func.value, "self")
    ):  # `self.save_checkpoint(...)` in a method of the same class
        return Helper(function, helper.graph, helper.path)
    made = _object_method(helper, call)
    if made is not None:
        return made
    roots = [helper.path.parent, *list(helper.path.parent.parents)[:MAX_PARENTS]]
    for qualified in helper.index.qualified_names(call.func):
        found = _find(qualified, roots)
        if found is not None:
            return found
    return None


def _object_method(helper: Helper, call: cst.Call) -> Helper | None:
    """The method of a class of the helper's file that `call` runs: `Run(project, name,
    config)` runs `Run.__init__`; `_run.finish()` runs `Run.finish` when the file gives
    the name `_run` only objects of `Run` (a wandb-like logger.py's module-level run,
    round-33 audit C jsonl_run_logger_module)."""
    index = helper.index
    func = call.func
    if isinstance(func, cst.Name) and func.value in index.classes:
        owner, wanted = index.classes[func.value], "__init__"
    elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
        given = [
            assign.value
            for assign in index.assigns
            if any(dotted(target.target) == func.value.value for target in assign.targets)
            and not is_name(assign.value, "None")
        ]
        names = {dotted(value.func) for value in given if isinstance(value, cst.Call)}
        if len(given) != 1 or len(names) != 1 or (name := names.pop()) not in index.classes:
            return None
        owner, wanted = index.classes[name], func.attr.value
    else:
        return None
    if index.parent(owner) is not index.module:
        return None
    method = next((m for m in methods(owner) if m.name.value == wanted), None)
    return Helper(method, helper.graph, helper.path) if method is not None else None


def _without_grad(helper: Helper, call: cst.Call) -> bool:
    """Whether `call` runs under `torch.no_grad()`/`inference_mode()`: a `with` around it in
    its function, or a decorator of the function."""
    for decorator in helper.function.decorators:
        text = dotted(
            decorator.decorator.func
            if isinstance(decorator.decorator, cst.Call)
            else decorator.decorator
        )
        if text and text.rsplit(".", 1)[-1] in NO_GRAD:
            return True
    for ancestor in helper.index.ancestors(call):
        if ancestor is helper.function:
            break
        if isinstance(ancestor, cst.With):
            for item in ancestor.items:
                context = item.item
                func = context.func if isinstance(context, cst.Call) else context
                text = dotted(func)
                if text and text.rsplit(".", 1)[-1] in NO_GRAD:
                    return True
    return False


def copies_model(project: Project, call: cst.Call, argument: cst.Arg) -> Helper | None:
    """The code of another project file `call` runs when it deep-copies what `argument`
    gives it (YOLOv5's `ModelEMA(model)`, `self.ema = deepcopy(model).eval()` in its
    `__init__`, round-33 audit C ema_module_yolov5_style: a copy of the wrapper, whose
    `module.` keys `update(model.module)` did not find)."""
    helper = project.runs(call)
    if helper is None:
        return None
    parameter = _parameter(helper.function, call, argument)
    copier = _built_on_a_copier(helper)
    copies = [
        node.args[0].value
        for node in walk(helper.function.body)
        if isinstance(node, cst.Call)
        and (
            (dotted(node.func) or "").rsplit(".", 1)[-1] == "deepcopy"
            # `super().__init__(model, device, ema_avg, use_buffers=True)` of torchvision's
            # `ExponentialMovingAverage(AveragedModel)` (round-49 audit E tv_refs: made from
            # the wrapper, its checkpoint keys were `module.module.*`)
            or (copier and is_method_call(node, "__init__") and _of_super(node))
        )
        and node.args
        and is_name(node.args[0].value, parameter or "")
    ]
    # and only copies it: an object that also keeps the model (`self.model = model`) may
    # run it for the loss, which the bare model would compute without averaging gradients
    reads = [
        node
        for node in walk(helper.function.body)
        if is_name(node, parameter or "") and not helper.index.is_attribute_name(node)  # type: ignore[arg-type]
    ]
    only_copied = len(reads) == len(copies) and all(
        any(read is copy for copy in copies) for read in reads
    )
    return helper if parameter is not None and copies and only_copied else None


def _built_on_a_copier(helper: Helper) -> bool:
    """The helper is the `__init__` of a class built on a library class that copies the
    model it is given (`AveragedModel`, timm's `ModelEma*`)."""
    block = helper.index.parent(helper.function)
    owner = helper.index.parent(block) if block is not None else None
    return (
        helper.name == "__init__"
        and isinstance(owner, cst.ClassDef)
        and any(helper.index.library_names(base.value) & MODEL_COPIES for base in owner.bases)
    )


def _of_super(call: cst.Call) -> bool:
    """`super().__init__(...)`."""
    func = call.func
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Call)
        and is_name(func.value.func, "super")
    )


def read_when_made(
    project: Project, call: cst.Call, argument: cst.Arg
) -> tuple[Helper, str] | None:
    """The `__init__` of a project class (in another file) that `call` makes, with the
    first attribute the DDP wrapper does not serve that it reads of what `argument` gives
    it, when it only reads it there (YOLOv5's `ComputeLoss(model)`: `h = model.hyp`, `m =
    de_parallel(model)`, round-33 audit D yolov5_train_utils died on `.hyp`). Not when it
    keeps it (`self.model = model`), whose other methods may run it."""
    if project.helper(call) is not None or project.class_made(call) is None:
        return None
    init = project.runs(call)
    parameter = _parameter(init.function, call, argument) if init is not None else None
    if init is None or parameter is None:
        return None
    index = init.index
    wanted: list[str] = []
    for node in walk(init.function.body):
        if not (isinstance(node, cst.Name) and node.value == parameter) or index.is_attribute_name(
            node
        ):
            continue
        parent = index.parent(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            if parent.attr.value not in DDP_TRANSPARENT:
                wanted.append(parent.attr.value)
            continue
        holder = index.parent(parent) if isinstance(parent, cst.Arg) else None
        statement = index.statement_of(node)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if (  # `m = de_parallel(model)`: a local made from it
            isinstance(holder, cst.Call)
            and isinstance(small, cst.Assign)
            and all(isinstance(target.target, cst.Name) for target in small.targets)
        ):
            continue
        return None
    return (init, wanted[0]) if wanted else None


def _parameter(function: cst.FunctionDef, call: cst.Call, argument: cst.Arg) -> str | None:
    """The name of `function`'s parameter that `argument` of `call` binds."""
    params = function.params
    if argument.keyword is not None:
        every = (*params.posonly_params, *params.params, *params.kwonly_params)
        names = {param.name.value for param in every}
        return argument.keyword.value if argument.keyword.value in names else None
    if argument.star:
        return None
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    if any(arg.star for arg in call.args[: call.args.index(argument)]):
        return None
    position = positional.index(argument)
    ordered = [*params.posonly_params, *params.params]
    if ordered and ordered[0].name.value == "self":
        ordered = ordered[1:]  # a method of an object (`checkpointer.save(model, epoch)`)
    if position >= len(ordered):
        return None
    return ordered[position].name.value


def _find(qualified: str, roots: list[Path]) -> Helper | None:
    """The module-level function `qualified` (`pkg.utils.loss.compute_loss`) names, in a
    file under one of `roots`."""
    found = _definition(qualified, roots)
    if found is None:
        return None
    function, graph, path = found
    return Helper(function, graph, path) if isinstance(function, cst.FunctionDef) else None


Definition = tuple[cst.FunctionDef | cst.ClassDef, CallGraph, Path]


def _definition(qualified: str, roots: list[Path], depth: int = 0) -> Definition | None:
    """The module-level function or class `qualified` names, in a file under one of
    `roots`; through a package's re-exports (`from .trainer import *` in its
    `__init__.py`), `MAX_DEPTH` deep."""
    module_name, _, name = qualified.lstrip(".").rpartition(".")
    if not module_name or qualified.startswith(".") or depth >= MAX_DEPTH:
        return None  # a relative import: the script is not run as a file
    for path in _module_files(module_name, roots):
        graph = _read(path)
        if graph is None:
            continue
        index = graph.index
        for function in graph.defined(name):
            if index.class_of(function) is None and index.function_of(function) is None:
                return function, graph, path
        owner = index.classes.get(name)
        if owner is not None and index.parent(owner) is index.module:
            return owner, graph, path
        return _reexported(name, graph, path, depth)
    return None


def _reexported(name: str, graph: CallGraph, path: Path, depth: int) -> Definition | None:
    """`name` imported into the module at `path` from a sibling (`from .x import name`,
    `from .x import *`)."""
    for statement in graph.index.module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if not isinstance(small, cst.ImportFrom) or small.module is None:
                continue
            if not isinstance(small.names, cst.ImportStar) and name not in {
                alias.evaluated_name for alias in small.names
            }:
                continue
            module = cst.Module([]).code_for_node(small.module)
            if small.relative:
                base = path.parent
                for _ in range(len(small.relative) - 1):
                    base = base.parent
                found = _definition(f"{module}.{name}", [base], depth + 1)
            else:
                found = _definition(f"{module}.{name}", [path.parent], depth + 1)
            if found is not None:
                return found
    return None


def _class_trains(owner: cst.ClassDef, graph: CallGraph, path: Path, depth: int = 0) -> bool:
    """Whether a method of the class, or of a base class of the project, calls backward."""
    if any(is_method_call(node, "backward") for node in walk(owner.body)):
        return True
    if depth >= MAX_DEPTH:
        return False
    roots = [path.parent, *list(path.parent.parents)[:MAX_PARENTS]]
    for base in owner.bases:
        for qualified in graph.index.qualified_names(base.value):
            found = _definition(qualified, roots)
            if (
                found is not None
                and isinstance(found[0], cst.ClassDef)
                and _class_trains(found[0], found[1], found[2], depth + 1)
            ):
                return True
    return False


def _loops_into_training(found: Definition | None) -> Path | None:
    """The project file that runs a backward pass, reached from the function or class
    `found`, when it loops (`Project.training_elsewhere`)."""
    if found is None or not any(isinstance(node, cst.For | cst.While) for node in walk(found[0])):
        return None
    return _backward_imported(found[2], set(), found[0])


def _backward_imported(
    path: Path, seen: set[Path], called: cst.CSTNode | None = None, depth: int = 0
) -> Path | None:
    """The file of the project that runs a backward pass: `path` when `called` (the
    function or class the script calls, in it) does, or one of the project files it
    imports, `MAX_DEPTH` deep (any of its functions). Another function of `path` that
    trains does not count: a `predict()` beside a `train_one_epoch()` is not training."""
    if path in seen or depth > MAX_DEPTH:
        return None
    seen.add(path)
    graph = _read(path)
    if graph is None:
        return None
    if any(is_method_call(node, "backward") for node in walk(called or graph.index.module)):
        return path
    roots = [path.parent, *list(path.parent.parents)[:MAX_PARENTS]]
    for statement in walk(graph.index.module):
        if not isinstance(statement, cst.Import | cst.ImportFrom):
            continue
        for imported in _imported_files(statement, path, roots):
            found = _backward_imported(imported, seen, depth=depth + 1)
            if found is not None:
                return found
    return None


def _imported_files(
    statement: cst.Import | cst.ImportFrom, path: Path, roots: list[Path]
) -> Iterator[Path]:
    """The project files `statement`, in the file at `path`, imports: the module, and the
    submodules it names (`from training import loss`, `from . import loss`)."""
    if isinstance(statement, cst.Import):
        for alias in statement.names:
            yield from _module_files(source_text(alias.name), roots)
        return
    module = source_text(statement.module) if statement.module is not None else ""
    if statement.relative:
        base = path.parent
        for _ in range(len(statement.relative) - 1):
            base = base.parent
        search = [base]
    else:
        search = roots
    names = [] if isinstance(statement.names, cst.ImportStar) else statement.names
    for name in [module] * bool(module) + [
        f"{module}.{alias.evaluated_name}".lstrip(".") for alias in names
    ]:
        yield from _module_files(name, search)


def _module_files(module_name: str, roots: list[Path]) -> Iterator[Path]:
    relative = Path(*module_name.split("."))
    for root in roots:
        for candidate in (root / relative.with_suffix(".py"), root / relative / "__init__.py"):
            if candidate.is_file():
                yield candidate


_READ: dict[tuple[Path, int, int], CallGraph] = {}


def _read(path: Path) -> CallGraph | None:
    """The call graph of the module at `path` (read once per version of the file), or None
    if it cannot be read."""
    try:
        stat = path.stat()
        key = (path, stat.st_mtime_ns, stat.st_size)
        if key not in _READ:
            _READ[key] = CallGraph(SourceIndex(cst.parse_module(path.read_bytes())))
    except (OSError, cst.ParserSyntaxError):
        return None
    return _READ[key]
