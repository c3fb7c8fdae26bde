"""The anatomy of a training script: one analysis of the original module that every rule reads.

It finds the parts a DDP conversion touches -- models and their device moves, optimizers,
data loaders and which one trains, the batch and epoch loops (following calls between the
script's own functions and methods), side effects, checkpoint loads and the entry point --
and records what it could not tell apart instead of guessing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, cast

import libcst as cst

from ddpify import tree
from ddpify.names import ImportResolver
from ddpify.ranks import Ranks, may_guard_local_rank, may_guard_rank

if TYPE_CHECKING:
    from libcst.metadata import CodeRange, MetadataWrapper

    from ddpify.wrapped import Bindings
from ddpify.tree import dotted as dotted  # the rules read it with the analysis
from ddpify.tree import is_attribute, is_lone, is_method_call, is_name, walk

DATALOADER = {"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"}
DISTRIBUTED_MARKERS = (
    "torch.distributed.init_process_group",
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.utils.data.DistributedSampler",
    "torch.utils.data.distributed.DistributedSampler",
    "torch.distributed.fsdp",
)
DATA_PARALLEL = {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel"}
DDP_WRAPPER = {
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
}
SAMPLER = {"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"}
COLLECTIVES = {
    "barrier", "all_reduce", "reduce", "broadcast", "all_gather", "gather", "scatter",
    "reduce_scatter", "all_to_all", "all_gather_object", "broadcast_object_list",
    "all_gather_into_tensor", "reduce_scatter_tensor", "gather_object", "scatter_object_list",
    "monitored_barrier",
}  # fmt: skip
# Calls every rank must make too, by their full names: distributed checkpoints (each rank
# writes its shard), state dicts gathered across ranks, new groups.
COLLECTIVE_CALLS = {
    "torch.distributed.checkpoint.save", "torch.distributed.checkpoint.load",
    "torch.distributed.checkpoint.async_save", "torch.distributed.checkpoint.save_state_dict",
    "torch.distributed.checkpoint.load_state_dict",
    "torch.distributed.checkpoint.state_dict.get_state_dict",
    "torch.distributed.checkpoint.state_dict.get_model_state_dict",
    "torch.distributed.checkpoint.state_dict.get_optimizer_state_dict",
    "torch.distributed.checkpoint.state_dict.set_state_dict",
    "torch.distributed.new_group", "torch.distributed.new_subgroups",
}  # fmt: skip
COLLECTIVE_LAST_NAMES = COLLECTIVES | {name.rsplit(".", 1)[-1] for name in COLLECTIVE_CALLS}
# Text that the names above leave in a file, for the check rules' prefilters (`requires`):
# a process group or a DDP wrap; torch.distributed; a collective; a rank guard.
DISTRIBUTED_TEXT = r"init_process_group|DistributedDataParallel"
TORCH_DISTRIBUTED_TEXT = "istributed"
COLLECTIVE_TEXT = "|".join(
    [*sorted(COLLECTIVES), "distributed.checkpoint", "new_group", "new_subgroups"]
)
RANK_ZERO_TEXT = may_guard_rank
LOCAL_RANK_ZERO_TEXT = may_guard_local_rank
# What `side_effect` calls the writes that must happen on one rank.
FILE_WRITES = frozenset({"checkpoint write", "file write"})
OTHER_FRAMEWORKS = ("lightning", "pytorch_lightning", "accelerate", "deepspeed", "horovod")
LOG_SETUP = {"logging.basicConfig", "logging.getLogger", "logging.captureWarnings"}
LOG_LEVELS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}
# The last parts of the names `side_effect` resolves (print, torch.save, logging.*, ...).
SIDE_EFFECT_NAMES = {"print", "save", "dump", "savez", *LOG_LEVELS}
ITER_WRAPPERS = {"enumerate", "tqdm", "tqdm.tqdm", "iter", "tqdm.auto.tqdm", "progress_bar"}
# Module attributes that behave the same on the DDP wrapper; anything else needs `.module`.
DDP_TRANSPARENT = {
    "module", "parameters", "named_parameters", "train", "eval", "zero_grad", "to", "cuda",
    "cpu", "modules", "named_modules", "children", "named_children", "buffers",
    "named_buffers", "requires_grad_", "training", "apply", "half", "float", "double",
    "bfloat16", "forward", "__call__",
}  # fmt: skip
CUDA_LITERAL = re.compile(r"""^[rRbBuU]?(['"])cuda(:\d+)?\1$""")


def is_cuda_literal(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.SimpleString) and bool(CUDA_LITERAL.match(node.value))


def call_arg(call: cst.Call, position: int | None, keyword: str) -> cst.Arg | None:
    """The argument passed as `keyword=` or at `position` (not counting keywords)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    if position is not None and position < len(positional):
        return positional[position]
    return None


@dataclass
class Loader:
    """A `DataLoader(...)` call and what the analysis knows of its role."""

    call: cst.Call
    statement: cst.CSTNode
    name: str | None
    trains: bool = False


@dataclass
class TrainLoop:
    """The loop over the training batches and the epoch loop around it, if any."""

    batch_loop: cst.For
    loader: Loader | None
    epoch_loop: cst.For | cst.While | None = None
    # The training loader as an expression valid inside the epoch loop, for `set_epoch`.
    loader_at_epoch: str | None = None
    epoch_var: str | None = None


@dataclass
class Model:
    """A model trained by an optimizer, all the names it goes by, and where it is placed."""

    names: set[str]
    optimizer_call: cst.Call
    placement: cst.BaseStatement | None = None
    placed_name: str | None = None
    data_parallel: list[cst.Call] = field(default_factory=list)


@dataclass
class Entry:
    """Where the process group is set up, and the statements the cleanup must follow."""

    setup_before: cst.BaseStatement | None  # insert the setup before this statement...
    setup_after: cst.BaseStatement | None  # ...or after this one (a script: its imports)
    body: Sequence[cst.BaseStatement] = ()  # the entry statements, run under try/finally
    at_module_level: bool = True


class Anatomy:
    """Facts about one parsed module, computed once and shared by every rule."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        # One read of the tree: parents, source order, and the nodes the rules ask about.
        self._parents, self._order = tree.index(self.module)
        collector = _Collector()
        collector.collect(self._order)
        self._imports = ImportResolver(collector.names, self._parents)
        self.calls = collector.calls
        self.functions = collector.functions
        self.classes = collector.classes
        self.imports = collector.imports
        self.import_aliases = collector.aliases
        # Gathered in the same pass, so that rules need not walk the whole tree again.
        self.ifs = collector.ifs
        self.assigns = collector.assigns
        self.simple_statements = collector.simple_statements
        self._annotated_assigns = collector.annotated_assigns
        self._call_sites: dict[cst.FunctionDef, list[cst.Call]] = {}

    # LibCST's metadata is resolved on first use: most files never need any. Positions are
    # for reports; name resolution only for calls whose name could match (`_may_name`).
    @cached_property
    def wrapper(self) -> MetadataWrapper:
        # Made when first needed: a file without findings whose names the imports settle
        # never needs LibCST's metadata.
        from libcst.metadata import MetadataWrapper

        return MetadataWrapper(self.module, unsafe_skip_copy=True)

    @cached_property
    def _positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        from libcst.metadata import PositionProvider

        return self.wrapper.resolve(PositionProvider)

    @cached_property
    def _qualified(self) -> Mapping[cst.CSTNode, object]:
        from libcst.metadata import QualifiedNameProvider

        return self.wrapper.resolve(QualifiedNameProvider)

    # ----- navigation -------------------------------------------------------------------
    def line(self, node: cst.CSTNode) -> int:
        return self._positions[node].start.line

    def position(self, node: cst.CSTNode) -> tuple[int, int]:
        """Line and column of `node`'s start, both counted from 1."""
        start = self._positions[node].start
        return start.line, start.column + 1

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self._parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self._parents.get(node)
        while current is not None:
            yield current
            current = self._parents.get(current)

    def function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                return ancestor
        return None

    def class_of(self, function: cst.FunctionDef) -> cst.ClassDef | None:
        parent = self.parent(function)
        grand = self.parent(parent) if parent is not None else None
        return grand if isinstance(grand, cst.ClassDef) else None

    def statement_of(self, node: cst.CSTNode) -> cst.BaseStatement:
        """The statement (in a block's body) that contains `node`."""
        previous = node
        for ancestor in [node, *self.ancestors(node)]:
            if isinstance(ancestor, cst.BaseStatement):
                holder = self.parent(ancestor)
                if isinstance(holder, cst.IndentedBlock | cst.Module):
                    return ancestor
            previous = ancestor
        raise ValueError(f"no statement holds {previous}")

    def body_of(self, statement: cst.BaseStatement) -> Sequence[cst.BaseStatement]:
        holder = self.parent(statement)
        assert isinstance(holder, cst.IndentedBlock | cst.Module)
        return holder.body

    def qualified_names(self, node: cst.CSTNode) -> set[str]:
        """What `node` names, as LibCST's QualifiedNameProvider says; settled by the imports
        alone when they can (ddpify/names.py), which spares the module's scope analysis."""
        spelled = dotted(node)
        if spelled is not None:
            resolved = self._imports.resolve(spelled)
            if resolved is not None:
                return resolved
        return self.provider_qualified_names(node)

    def provider_qualified_names(self, node: cst.CSTNode) -> set[str]:
        names = self._qualified.get(node, ())
        from libcst.metadata.base_provider import LazyValue  # type: ignore[attr-defined]

        if isinstance(names, LazyValue):
            names = names()
        assert isinstance(names, set | frozenset | tuple)
        return {name.name for name in names}

    def is_call_to(self, call: cst.Call, names: set[str] | tuple[str, ...]) -> bool:
        """Whether `call` calls one of `names` (or something inside one of them)."""
        if isinstance(names, set) and not self._may_name(
            call, {n.rsplit(".", 1)[-1] for n in names}
        ):
            return False  # cheap: name resolution is the costliest analysis of a file
        if self._imports.cannot_name(call.func, names, self._scope_names):
            return False
        return any(
            name in names or name.startswith(tuple(f"{n}." for n in names))
            for name in self.qualified_names(call.func)
        )

    @cached_property
    def _scope_names(self) -> set[str]:
        return set(self.functions) | set(self.classes)

    def _may_name(self, call: cst.Call, last_parts: set[str]) -> bool:
        """Whether the called name, or what it was imported as, can end in `last_parts`."""
        func = call.func
        spelled = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
        return spelled in last_parts or self.import_aliases.get(spelled) in last_parts

    def precedes(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        return self._order[first] < self._order[second]

    def inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        return node is container or any(a is container for a in self.ancestors(node))

    # ----- the script as a whole --------------------------------------------------------
    @cached_property
    def module_names(self) -> set[str]:
        """Names the script binds at module level (its globals)."""
        from libcst.metadata import ScopeProvider

        scope = self.wrapper.resolve(ScopeProvider).get(self.module)
        return {assignment.name for assignment in scope.assignments} if scope else set()

    @cached_property
    def names_used(self) -> set[str]:
        """Every identifier in the file, for picking a new name that cannot clash."""
        return {node.value for node in walk(self.module) if isinstance(node, cst.Name)}

    def free_name(self, candidates: Sequence[str]) -> str:
        """The first candidate the file never uses, else the last one numbered."""
        for name in candidates:
            if name not in self.names_used:
                return name
        numbered = (f"{candidates[-1]}_{n}" for n in range(2, 1000))
        return next(name for name in numbered if name not in self.names_used)

    @cached_property
    def uses_torch(self) -> bool:
        return any(name == "torch" or name.startswith("torch.") for name in self.imports)

    @cached_property
    def other_framework(self) -> str | None:
        for name in self.imports:
            if name.split(".")[0] in OTHER_FRAMEWORKS:
                return name.split(".")[0]
        return None

    @cached_property
    def distributed_call(self) -> cst.Call | None:
        """A call showing the script is already distributed (process group, DDP, sampler)."""
        for call in self.calls:
            if self.is_call_to(call, DISTRIBUTED_MARKERS):
                return call
        return None

    @cached_property
    def backward_calls(self) -> list[cst.Call]:
        return [
            call
            for call in self.calls
            if is_attribute(call.func, "backward") and not self.other_framework
        ]

    @cached_property
    def optimizer_calls(self) -> list[cst.Call]:
        pattern = re.compile(r"^torch\.optim\.(?!lr_scheduler|swa_utils)(\w+\.)*[A-Z]\w*$")
        return [
            call
            for call in self.calls
            if any(pattern.match(name) for name in self.qualified_names(call.func))
        ]

    @cached_property
    def is_training_script(self) -> bool:
        # Cheapest first: the optimizer check is the only one that needs name resolution.
        return (
            bool(self.backward_calls)
            and self.uses_torch
            and any(_passes_parameters(call) for call in self.calls)
            and bool(self.optimizer_calls)
        )

    # ----- call graph -------------------------------------------------------------------
    def call_sites(self, function: cst.FunctionDef) -> list[cst.Call]:
        """Calls in this file that reach `function` (by name; methods through any object)."""
        found = self._call_sites.get(function)
        if found is None:
            name = function.name.value
            owner = self.class_of(function)
            if owner is None:
                candidates = self._calls_by_name.get(name, [])
            else:
                candidates = self._calls_by_attribute.get(name, [])
                if name == "__init__":
                    candidates = [*candidates, *self._calls_by_name.get(owner.name.value, [])]
            found = [site for site in candidates if not self.inside(site, function)]
            self._call_sites[function] = found
        return found

    @cached_property
    def _calls_by_name(self) -> dict[str, list[cst.Call]]:
        """`f(...)` calls by `f`, in source order."""
        by_name: dict[str, list[cst.Call]] = {}
        for call in self.calls:
            if isinstance(call.func, cst.Name):
                by_name.setdefault(call.func.value, []).append(call)
        return by_name

    @cached_property
    def _calls_by_attribute(self) -> dict[str, list[cst.Call]]:
        """`x.f(...)` calls by `f`, in source order."""
        by_attribute: dict[str, list[cst.Call]] = {}
        for call in self.calls:
            if isinstance(call.func, cst.Attribute):
                by_attribute.setdefault(call.func.attr.value, []).append(call)
        return by_attribute

    def bound_argument(
        self, call: cst.Call, function: cst.FunctionDef, parameter: str
    ) -> cst.BaseExpression | None:
        params = [p.name.value for p in function.params.params]
        if self.class_of(function) is not None and params and params[0] in {"self", "cls"}:
            params = params[1:]
        position = params.index(parameter) if parameter in params else None
        arg = call_arg(call, position, parameter)
        return arg.value if arg is not None else None

    def parameters_of(self, function: cst.FunctionDef) -> set[str]:
        params = function.params
        every = [*params.posonly_params, *params.params, *params.kwonly_params]
        return {p.name.value for p in every}

    def loops_around(self, node: cst.CSTNode, depth: int = 0) -> list[tuple[cst.CSTNode, str]]:
        """Loops enclosing `node`, innermost first, continuing through the call sites of the
        function it is in. Each loop comes with the name its loader is known by there is
        left to the caller: this only returns the chain of (loop, via) pairs."""
        chain: list[tuple[cst.CSTNode, str]] = []
        previous = node
        function = None
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.For | cst.While) and previous is ancestor.body:
                chain.append((ancestor, "loop"))
            if isinstance(ancestor, cst.FunctionDef):
                function = ancestor
                break
            previous = ancestor
        if function is not None and depth < 4:
            sites = self.call_sites(function)
            if sites:
                chain.append((sites[0], "call"))
                chain.extend(self.loops_around(sites[0], depth + 1))
        return chain

    # ----- resolving names to values ----------------------------------------------------
    def values_of(
        self, name: str, scope: cst.FunctionDef | None
    ) -> list[tuple[cst.BaseExpression, cst.FunctionDef | None]]:
        """The values the script gives the dotted name `name` read in `scope`, each with the
        function it is given in: `self.x` in any method of the class; otherwise in `scope`,
        else (unless `name` is one of its parameters) at module level."""
        if name.startswith("self."):
            owner = self.class_of(scope) if scope is not None else None
            methods = owner.body.body if owner is not None else ()
            return [
                (value, method)
                for method in methods
                if isinstance(method, cst.FunctionDef)
                for value in self.assignments(name, method)
            ]
        if scope is not None:
            found = self.assignments(name, scope)
            if found or name.partition(".")[0] in self.parameters_of(scope):
                return [(value, scope) for value in found]
        return [(value, None) for value in self.assignments(name, None)]

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

    @cached_property
    def _assignments_by_scope(
        self,
    ) -> dict[cst.CSTNode | None, list[cst.Assign | cst.AnnAssign]]:
        """Assignments (plain and annotated) by the function they are in, in source order."""
        by_scope: dict[cst.CSTNode | None, list[cst.Assign | cst.AnnAssign]] = {}
        nodes: list[cst.Assign | cst.AnnAssign] = [*self.assigns, *self._annotated_assigns]
        for node in sorted(nodes, key=self._order.__getitem__):
            by_scope.setdefault(self.function_of(node), []).append(node)
        return by_scope

    def resolve_loader(
        self, expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int = 0
    ) -> cst.Call | None:
        """The `DataLoader(...)` call that `expr` (in `scope`) evaluates to, if traceable."""
        if depth > 6:
            return None
        expr = strip_iteration(expr)
        if (
            isinstance(expr, cst.Subscript)
            and isinstance(expr.value, cst.Call)
            and len(expr.slice) == 1
            and isinstance(expr.slice[0].slice, cst.Index)
            and isinstance(expr.slice[0].slice.value, cst.Integer)
        ):
            callee = self.local_function(expr.value)
            index = int(expr.slice[0].slice.value.value)
            for value in self.returned_values(callee) if callee is not None else []:
                if isinstance(value, cst.Tuple) and index < len(value.elements):
                    found = self.resolve_loader(value.elements[index].value, callee, depth + 1)
                    if found is not None:
                        return found
            return None
        if isinstance(expr, cst.Call):
            if self.is_call_to(expr, DATALOADER):
                return expr
            callee = self.local_function(expr)
            if callee is not None:
                for value in self.returned_values(callee):
                    found = self.resolve_loader(value, callee, depth + 1)
                    if found is not None:
                        return found
            return None
        name = dotted(expr)
        if name is None:
            return None
        if name.startswith("self.") and scope is not None:
            owner = self.class_of(scope)
            if owner is None:
                return None
            for method in _methods(owner):
                for value in self.assignments(name, method):
                    found = self.resolve_loader(value, method, depth + 1)
                    if found is not None:
                        return found
            return None
        if scope is not None and name in self.parameters_of(scope):
            for site in self.call_sites(scope):
                argument = self.bound_argument(site, scope, name)
                if argument is not None:
                    found = self.resolve_loader(argument, self.function_of(site), depth + 1)
                    if found is not None:
                        return found
            return None
        for where in (scope, None) if scope is not None else (None,):
            for value in self.assignments(name, where):
                found = self.resolve_loader(value, where, depth + 1)
                if found is not None:
                    return found
        return None

    def local_function(self, call: cst.Call) -> cst.FunctionDef | None:
        if isinstance(call.func, cst.Name):
            candidates = self.functions.get(call.func.value, [])
            return candidates[0] if len(candidates) == 1 else None
        return None

    def returned_values(self, function: cst.FunctionDef) -> list[cst.BaseExpression]:
        values: list[cst.BaseExpression] = []
        for node in walk(function):
            if (
                isinstance(node, cst.Return)
                and node.value is not None
                and self.function_of(node) is function
            ):
                values.append(node.value)
        return values

    # ----- the parts of a training script ----------------------------------------------
    @cached_property
    def loaders(self) -> list[Loader]:
        found = []
        for call in self.calls:
            if self.is_call_to(call, DATALOADER):
                statement = self.statement_of(call)
                name = None
                parent = self.parent(call)
                if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
                    name = dotted(parent.targets[0].target)
                found.append(Loader(call, statement, name))
        return found

    def loader_for(self, call: cst.Call | None) -> Loader | None:
        return next((loader for loader in self.loaders if loader.call is call), None)

    @cached_property
    def train_loops(self) -> list[TrainLoop]:
        """One entry per distinct batch loop that runs a backward pass."""
        loops: list[TrainLoop] = []
        seen: set[cst.CSTNode] = set()
        for backward in self.backward_calls:
            chain = self.loops_around(backward)
            batch_index = next((i for i, (node, kind) in enumerate(chain) if kind == "loop"), None)
            if batch_index is None:
                continue
            batch_loop = chain[batch_index][0]
            if not isinstance(batch_loop, cst.For) or batch_loop in seen:
                continue
            seen.add(batch_loop)
            scope = self.function_of(batch_loop)
            loader = self.loader_for(self.resolve_loader(batch_loop.iter, scope))
            train = TrainLoop(batch_loop, loader)
            # The epoch loop: the next loop out, and the loader's name as seen from there.
            expression: str | None = dotted(strip_iteration(batch_loop.iter))
            function = scope
            for node, kind in chain[batch_index + 1 :]:
                if kind == "call":
                    assert isinstance(node, cst.Call)
                    expression = self._name_at_call_site(expression, function, node)
                    function = self.function_of(node)
                    continue
                assert isinstance(node, cst.For | cst.While)
                train.epoch_loop = node
                train.loader_at_epoch = expression
                train.epoch_var = self._epoch_variable(node)
                break
            loops.append(train)
        return loops

    def _name_at_call_site(
        self, name: str | None, function: cst.FunctionDef | None, site: cst.Call
    ) -> str | None:
        if name is None or function is None:
            return name
        head = name.split(".")[0]
        if head in self.parameters_of(function) and head != "self":
            argument = self.bound_argument(site, function, head)
            base = dotted(argument) if argument is not None else None
            return base + name[len(head) :] if base else None
        if head == "self":
            caller = self.function_of(site)
            same_class = caller is not None and self.class_of(caller) is self.class_of(function)
            via_self = isinstance(site.func, cst.Attribute) and is_name(site.func.value, "self")
            return name if same_class and via_self else None
        return name  # a global

    def _epoch_variable(self, loop: cst.For | cst.While) -> str | None:
        if isinstance(loop, cst.For):
            return loop.target.value if isinstance(loop.target, cst.Name) else None
        for node in walk(loop.body):
            if (
                isinstance(node, cst.AugAssign)
                and isinstance(node.operator, cst.AddAssign)
                and isinstance(node.target, cst.Name)
                and "epoch" in node.target.value
            ):
                return node.target.value
        return None

    @cached_property
    def train_loaders(self) -> list[Loader]:
        """Loaders that feed a backward pass; by name and `shuffle=` when not traceable."""
        traced = [loop.loader for loop in self.train_loops if loop.loader is not None]
        if traced:
            for loader in traced:
                loader.trains = True
            return list({id(loader): loader for loader in traced}.values())
        if len(self.loaders) == 1:
            self.loaders[0].trains = True
            return list(self.loaders)
        guessed = [loader for loader in self.loaders if _looks_like_training(loader)]
        for loader in guessed:
            loader.trains = True
        return guessed

    @cached_property
    def models(self) -> list[Model]:
        models: list[Model] = []
        for optimizer in self.optimizer_calls:
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
        for node in walk(self.module):
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
            for node in walk(self.module):
                if isinstance(node, cst.Assign) and len(node.targets) == 1:
                    target = dotted(node.targets[0].target)
                    source = _moved_value(node.value)
                    if target is None:
                        continue
                    base = dotted(source) if source is not None else None
                    if base in model.names or (target in model.names and source is not None):
                        model.names.add(target)
                        if source is not node.value:
                            moves.append((self.statement_of(node), target))
                    if isinstance(node.value, cst.Call) and self.is_call_to(
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
                        moves.append((self.statement_of(node), name))
        for call in self.calls:
            if self.is_call_to(call, DATA_PARALLEL):
                inner = call_arg(call, 0, "module")
                if inner is not None and dotted(inner.value) in model.names:
                    model.data_parallel.append(call)
        unique = {id(statement): (statement, name) for statement, name in moves}
        if unique:
            statement, name = max(unique.values(), key=lambda item: self.line(item[0]))
            model.placement, model.placed_name = self._unconditional(statement), name
            return
        # Never moved (a CPU script): wrap right after it is built, before the optimizer.
        scope = self.function_of(model.optimizer_call)
        built = [
            node
            for node in walk(scope or self.module)
            if isinstance(node, cst.Assign)
            and len(node.targets) == 1
            and dotted(node.targets[0].target) in model.names
            and self.function_of(node) is scope
            and self.precedes(node, model.optimizer_call)
        ]
        if built:
            last = built[-1]
            model.placement = self.statement_of(last)
            model.placed_name = dotted(last.targets[0].target)

    def _unconditional(self, statement: cst.BaseStatement) -> cst.BaseStatement:
        """The statement itself, or the `if`/`with`/`try` it sits in (the outermost below its
        function or loop), so that what is inserted after it runs on every path."""
        anchor = statement
        for ancestor in self.ancestors(statement):
            if isinstance(ancestor, cst.FunctionDef | cst.For | cst.While | cst.Module):
                break
            if isinstance(ancestor, cst.If | cst.With | cst.Try):
                anchor = ancestor
        return anchor

    @cached_property
    def main_guard(self) -> cst.If | None:
        for statement in self.module.body:
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
        return any(
            self.function_of(loop.batch_loop) is None
            or (loop.epoch_loop is not None and self.function_of(loop.epoch_loop) is None)
            for loop in loops
        ) or (not loops and not self.functions)

    @cached_property
    def entry(self) -> Entry | None:
        """Where to set up the process group: before the statement that starts training."""
        if self.trains_at_module_level:
            last_import = None
            for statement in self.module.body:
                if is_lone(statement, (cst.Import, cst.ImportFrom)):
                    last_import = statement
                elif not _is_docstring(statement):
                    break
            if last_import is None:
                return Entry(setup_before=self.module.body[0], setup_after=None)
            return Entry(setup_before=None, setup_after=last_import)
        block: Sequence[cst.BaseStatement] = self.module.body
        if self.main_guard is not None and isinstance(self.main_guard.body, cst.IndentedBlock):
            block = self.main_guard.body.body
        local = set(self.functions) | set(self.classes)
        for index, candidate in enumerate(block):
            if isinstance(candidate, cst.FunctionDef | cst.ClassDef | cst.If):
                continue
            for node in walk(candidate):
                if (
                    isinstance(node, cst.Call)
                    and isinstance(node.func, cst.Name)
                    and node.func.value in local
                ):
                    return Entry(
                        setup_before=candidate,
                        setup_after=None,
                        body=block[index:],
                        at_module_level=block is self.module.body,
                    )
        return None

    def after_setup(self, node: cst.CSTNode) -> bool:
        """Whether `node` runs once the process group exists (functions are called later)."""
        entry = self.entry
        if entry is None:
            return False
        if self.function_of(node) is not None:
            return True
        anchor = entry.setup_after or entry.setup_before
        assert anchor is not None
        if entry.setup_after is not None:
            return self.line(node) > self.line(anchor)
        return self.line(node) >= self.line(anchor)

    def runs_after(self, anchor: cst.CSTNode, node: cst.CSTNode, name: str) -> bool:
        """Whether `node`, a use of `name`, runs after `anchor` (where `name` was rebound):
        later in the same function, or in another function that does not bind `name` itself
        (that one holds the object from before)."""
        scope = self.function_of(node)
        if scope is self.function_of(anchor):
            return self.precedes(anchor, node) and not self.inside(node, anchor)
        return scope is not None and not self.binds(scope, name)

    def binds(self, scope: cst.FunctionDef, name: str) -> bool:
        return any(
            isinstance(node, cst.Assign)
            and any(dotted(target.target) == name for target in node.targets)
            and self.function_of(node) is scope
            for node in walk(scope)
        )

    # ----- distributed code (for the checks) ---------------------------------------------
    @cached_property
    def initialises_process_group(self) -> list[cst.Call]:
        return [
            c for c in self.calls if self.is_call_to(c, {"torch.distributed.init_process_group"})
        ]

    @cached_property
    def spawned_functions(self) -> list[cst.FunctionDef]:
        """Functions this file starts as processes (`mp.spawn(worker, ...)`,
        `Process(target=worker)`): they run on every rank without a call site here."""
        starters = {
            "torch.multiprocessing.spawn",
            "torch.multiprocessing.start_processes",
            "torch.multiprocessing.Process",
            "multiprocessing.Process",
        }
        found = []
        for call in self.calls:
            if not self._may_name(call, {"spawn", "start_processes", "Process"}):
                continue
            if not self.is_call_to(call, starters):
                continue
            arg = call_arg(call, 0, "fn") or call_arg(call, None, "target")
            name = dotted(arg.value) if arg is not None else None
            found += self.functions.get(name or "", [])
        return found

    @cached_property
    def group_is_optional(self) -> bool:
        """The script may also run without a process group: `init_process_group` sits under
        an `if`, or a `return` can come before it in its function (`init_distributed_mode`)."""
        for init in self.initialises_process_group:
            function = self.function_of(init)
            for ancestor in self.ancestors(init):
                if isinstance(ancestor, cst.If | cst.IfExp | cst.Try):
                    return True
                if ancestor is function:
                    break
            if function is not None and any(
                isinstance(node, cst.Return)
                and self.function_of(node) is function
                and self.precedes(node, init)
                for node in walk(function.body)
            ):
                return True
        return False

    @cached_property
    def is_distributed(self) -> bool:
        """The script sets up a process group or wraps a model in DDP."""
        return bool(self.initialises_process_group or self.ddp_wraps)

    @cached_property
    def ddp_wraps(self) -> dict[str, cst.Call]:
        """Names that hold a DDP-wrapped model, and the wrapping call."""
        wraps = {}
        for call in self.calls:
            if self.is_call_to(call, DDP_WRAPPER):
                holder = self.parent(call)
                while isinstance(holder, cst.Arg | cst.Call):  # torch.compile(DDP(model))
                    holder = self.parent(holder)
                if isinstance(holder, cst.Assign) and len(holder.targets) == 1:
                    name = dotted(holder.targets[0].target)
                    if name:
                        wraps[name] = call
        return wraps

    def may_be_collective(self, call: cst.Call) -> bool:
        """Whether `call` is named like a collective (cheap; `is_collective` resolves it)."""
        return self._may_name(call, COLLECTIVE_LAST_NAMES)

    def is_collective(self, call: cst.Call) -> bool:
        if not self.may_be_collective(call):
            return False
        if self._imports.cannot_name(call.func, ("torch.distributed",), self._scope_names):
            return False
        return any(
            (name.startswith("torch.distributed.") and name.rsplit(".", 1)[-1] in COLLECTIVES)
            or name in COLLECTIVE_CALLS
            for name in self.qualified_names(call.func)
        )

    @cached_property
    def ddp_bindings(self) -> Bindings:
        """Where names are given the DDP wrapper (ddpify/wrapped.py)."""
        from ddpify.wrapped import collect_bindings

        return collect_bindings(self)

    @cached_property
    def ranks(self) -> Ranks:
        """Rank tests and rank-0 guards (ddpify/ranks.py)."""
        return Ranks(self)

    def writes_files(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Whether `node` writes a checkpoint or file, itself or in the script's own
        functions and methods that it calls (two calls deep)."""
        for inner in walk(node):
            if (
                isinstance(inner, cst.SimpleStatementLine | cst.With)
                and self.side_effect(inner) in FILE_WRITES
            ):
                return True
            if isinstance(inner, cst.Call) and depth < 2:
                name = (
                    inner.func.attr.value
                    if isinstance(inner.func, cst.Attribute)
                    else (inner.func.value if isinstance(inner.func, cst.Name) else None)
                )
                for function in self.functions.get(name or "", []):
                    if self.writes_files(function.body, depth + 1):
                        return True
        return False

    def rank_guard(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """What runs `node` on rank 0 only (an `if`, an early exit, a decorator, guarded call
        sites), or None."""
        return self.ranks.guard(node)

    @cached_property
    def torch_load_calls(self) -> list[cst.Call]:
        return [call for call in self.calls if self.is_call_to(call, {"torch.load"})]

    def side_effect(self, statement: cst.BaseStatement) -> str | None:
        """What the statement writes or prints, when that should happen on one rank only."""
        if isinstance(statement, cst.With):
            for item in statement.items:
                if isinstance(item.item, cst.Call) and _opens_for_writing(item.item):
                    return "file write"
            return None
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        expr = statement.body[0]
        if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
            return None
        call = expr.value
        func = call.func
        # What the call's spelling shows first: names are resolved only when it shows nothing.
        if isinstance(func, cst.Attribute):
            base = (dotted(func.value) or "").lower()
            attr = func.attr.value
            if attr in LOG_LEVELS and ("log" in base or base == "self.logger"):
                return "logging"
            if attr.startswith("add_") and "writer" in base:
                return "TensorBoard write"
            if base == "wandb" and attr == "log":
                return "wandb log"
            if attr in {"save_pretrained", "save_model", "save_checkpoint"}:
                return "checkpoint write"
            if attr in {"write_text", "write_bytes", "savefig", "to_csv"}:
                return "file write"
        if not self._may_name(call, SIDE_EFFECT_NAMES):
            return None
        names = self.qualified_names(func)
        if "builtins.print" in names or "print" in names:
            return "print"
        if "torch.save" in names:
            return "checkpoint write"
        if any(name.startswith("logging.") for name in names) and not names & LOG_SETUP:
            return "logging"
        if any(name in {"json.dump", "numpy.save", "numpy.savez"} for name in names):
            return "file write"
        return None


def path_names(write: cst.CSTNode) -> set[str]:
    """The names in the arguments that say where a write goes: all but the object saved."""
    if isinstance(write, cst.With):
        calls = [item.item for item in write.items if isinstance(item.item, cst.Call)]
        return set().union(*(root_names(call.args[0]) for call in calls if call.args))
    assert isinstance(write, cst.SimpleStatementLine)
    expr = write.body[0]
    if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
        return set()
    args = expr.value.args
    where = args[1:] if len(args) > 1 else args
    return set().union(*(root_names(arg) for arg in where))


def root_names(node: cst.CSTNode) -> set[str]:
    """Names read in `node` (not attribute or keyword names) and strings: `path` and
    `".tmp"` in `os.replace(path + ".tmp", path)`."""
    labels = {
        id(label)
        for inner in walk(node)
        for label in (
            (inner.attr,)
            if isinstance(inner, cst.Attribute)
            else (inner.keyword,)
            if isinstance(inner, cst.Arg)
            else ()
        )
    }
    return {
        inner.value
        for inner in walk(node)
        if isinstance(inner, cst.Name | cst.SimpleString)
        and id(inner) not in labels
        and inner.value not in _PATH_MODULES
    }


_PATH_MODULES = frozenset({"torch", "os", "shutil", "json", "np", "numpy", "pathlib", "Path"})


PARAMETERS = ("parameters", "named_parameters")


def _passes_parameters(call: cst.Call) -> bool:
    """`f(model.parameters(), ...)` or `f([{"params": m.parameters()}])`: an optimizer's shape."""
    return any(
        is_method_call(node, *PARAMETERS) for arg in call.args[:1] for node in walk(arg.value)
    )


def strip_iteration(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`loader` from `enumerate(loader)`, `tqdm(loader, ...)`, `iter(loader)`."""
    while (
        isinstance(expr, cst.Call)
        and dotted(expr.func) in ITER_WRAPPERS
        and expr.args
        and expr.args[0].keyword is None
    ):
        expr = expr.args[0].value
    return expr


def _moved_value(value: cst.BaseExpression) -> cst.BaseExpression:
    """`x` from `x.to(...)` / `x.cuda()`; the value itself when it is not a device move."""
    if (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in {"to", "cuda"}
    ):
        return value.func.value
    return value


def _values_for(
    target: cst.BaseExpression, value: cst.BaseExpression, name: str
) -> list[cst.BaseExpression]:
    if dotted(target) == name:
        return [value]
    if isinstance(target, cst.Tuple | cst.List):
        for index, element in enumerate(target.elements):
            if dotted(element.value) == name:
                if isinstance(value, cst.Tuple | cst.List) and index < len(value.elements):
                    return [value.elements[index].value]
                return [
                    cst.Subscript(value, [cst.SubscriptElement(cst.Index(cst.Integer(str(index))))])
                ]
    return []


def _looks_like_training(loader: Loader) -> bool:
    text = " ".join(
        filter(None, [loader.name, dotted(loader.call.args[0].value) if loader.call.args else None])
    ).lower()
    if any(word in text for word in ("val", "test", "eval", "dev")):
        return False
    shuffle = call_arg(loader.call, 2, "shuffle")
    return "train" in text or (shuffle is not None and is_name(shuffle.value, "True"))


def _is_docstring(statement: cst.BaseStatement) -> bool:
    if not is_lone(statement, cst.Expr):
        return False
    assert isinstance(statement, cst.SimpleStatementLine)
    return isinstance(cast(cst.Expr, statement.body[0]).value, cst.SimpleString)


def _opens_for_writing(call: cst.Call) -> bool:
    if dotted(call.func) != "open":
        return False
    mode = call_arg(call, 1, "mode")
    return (
        mode is not None
        and isinstance(mode.value, cst.SimpleString)
        and any(flag in mode.value.evaluated_value for flag in "wax")
    )


def _methods(owner: cst.ClassDef) -> list[cst.FunctionDef]:
    return [node for node in owner.body.body if isinstance(node, cst.FunctionDef)]


class _Collector:
    """Gathers, from the nodes in source order, the ones the analysis asks about."""

    def __init__(self) -> None:
        self.calls: list[cst.Call] = []
        self.functions: dict[str, list[cst.FunctionDef]] = {}
        self.classes: dict[str, cst.ClassDef] = {}
        self.imports: set[str] = set()
        self.aliases: dict[str, str] = {}
        self.ifs: list[cst.If] = []
        self.assigns: list[cst.Assign] = []
        self.simple_statements: list[cst.SimpleStatementLine | cst.With] = []
        self.names: dict[str, list[cst.Name]] = {}
        self.annotated_assigns: list[cst.AnnAssign] = []

    def collect(self, nodes: Iterable[cst.CSTNode]) -> None:
        for node in nodes:
            kind = type(node)
            if kind is cst.Name:
                name = cast(cst.Name, node)
                self.names.setdefault(name.value, []).append(name)
            elif kind is cst.Call:
                self.calls.append(cast(cst.Call, node))
            elif kind is cst.SimpleStatementLine or kind is cst.With:
                self.simple_statements.append(cast(cst.SimpleStatementLine | cst.With, node))
            elif kind is cst.Assign:
                self.assigns.append(cast(cst.Assign, node))
            elif kind is cst.If:
                self.ifs.append(cast(cst.If, node))
            elif kind is cst.AnnAssign:
                self.annotated_assigns.append(cast(cst.AnnAssign, node))
            elif isinstance(node, cst.FunctionDef):
                self.functions.setdefault(node.name.value, []).append(node)
            elif isinstance(node, cst.ClassDef):
                self.classes[node.name.value] = node
            elif isinstance(node, cst.Import):
                for alias in node.names:
                    self.imports.add(cst.Module([]).code_for_node(alias.name))
                    self._alias(alias)
            elif isinstance(node, cst.ImportFrom):
                if node.module is not None and not node.relative:
                    self.imports.add(cst.Module([]).code_for_node(node.module))
                if not isinstance(node.names, cst.ImportStar):
                    for alias in node.names:
                        self._alias(alias)

    def _alias(self, alias: cst.ImportAlias) -> None:
        """`DDP` -> `DistributedDataParallel` for `... import DistributedDataParallel as DDP`."""
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            imported = cst.Module([]).code_for_node(alias.name).rsplit(".", 1)[-1]
            self.aliases[alias.asname.name.value] = imported
