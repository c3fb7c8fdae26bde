"""Training loaders made in another file of the script's project: `dataloader =
get_data(args)` with `get_data` in `utils.py` (dome272's diffusion models, yunjey's image
captioning). The loader cannot take a sampler where it is made, which is not the script's
file; it can be made again where the script gets it, from its dataset and with its settings
(`DataLoader(loader.dataset, batch_size=loader.batch_size, ...)`), and that loader takes
one. What the helper's `DataLoader(...)` is given must all be accounted for: its dataset,
settings the loader keeps as attributes, and a `shuffle=` the script can spell at the call
site. Anything else (`sampler=`, `batch_sampler=`, `**kwargs`) leaves it as it is, with why.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpify.analysis.index import SourceIndex
from ddpify.analysis.loaders import keyed_read, string_value, strip_iteration
from ddpify.analysis.project import Helper, Project, draws_at_random, iterable_class
from ddpify.analysis.script import TrainingScript
from ddpify.analysis.tree import dotted, source_text, walk
from ddpify.analysis.values import MAX_STEPS

# `DataLoader(...)` keywords the loader keeps under the same attribute name.
KEPT = (
    "batch_size",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


@dataclass(frozen=True)
class ForeignLoader:
    """A training loader a helper of another project file makes and returns."""

    statement: cst.SimpleStatementLine  # `loader = get_data(args)`, in the script
    name: str  # `loader`
    site: cst.Call  # `get_data(args)`
    helper: Helper
    # The rest is known when the loader can be made again: the helper's `DataLoader(...)`,
    # the keywords to carry over as attributes, and `shuffle=` as the call site spells it.
    made: cst.Call | None = None
    kept: tuple[str, ...] = ()
    shuffle: cst.BaseExpression | None = None
    problem: str | None = None

    @property
    def where(self) -> str:
        """`get_data()` (utils.py, line 33)"""
        line = self.helper.index.line(self.made) if self.made is not None else None
        at = f", line {line}" if line is not None else ""
        return f"`{self.helper.name}()` ({self.helper.path.name}{at})"


def foreign_loaders(
    index: SourceIndex, script: TrainingScript, project: Project
) -> list[ForeignLoader]:
    """The training loops' loaders that a helper of another file makes, one per statement
    that gets one."""
    wanted: list[tuple[str | None, cst.FunctionDef | None]] = []
    for loop in script.train_loops:
        if loop.loader is not None:
            continue
        if loop.epoch_loop is not None and loop.loader_at_epoch is not None:
            wanted.append((loop.loader_at_epoch, index.function_of(loop.epoch_loop)))
        else:
            scope = index.function_of(loop.batch_loop)
            wanted.append((script.loader_name(loop.batch_loop.iter, scope), scope))
    for training in script.foreign_training:
        # the loop in another file too (`loader = get_dataloaders(bs)` from data.py, then
        # `train_one_epoch(model, loader, opt)` from engine.py: round-16 audit m01)
        if training.loader is None:
            name = _looped_argument(training.call, training.helper)
            wanted.append((name, index.function_of(training.call)))
    found: dict[int, ForeignLoader] = {}
    for name, scope in wanted:
        keyed = keyed_read(cst.parse_expression(name)) if name is not None else None
        key = string_value(keyed[1]) if keyed is not None else None
        if name is not None and keyed is not None and key is not None and "." not in keyed[0]:
            # `loaders = build_loaders(cfg)` returning `{"train": DataLoader(...), ...}`,
            # read at `loaders["train"]` (round-34 audit C src_package_build_loaders_dict)
            bound = _bound_by_call(index, keyed[0], scope)
            if bound is None or bound[2] is not None:
                continue
            statement, site, _ = bound
            helper = project.helper(site)
            if helper is not None and id(statement) not in found:
                found[id(statement)] = _made_again(index, statement, name, site, key, helper)
            continue
        if name is None or "." in name:
            continue
        bound = _bound_by_call(index, name, scope)
        if bound is None:
            continue
        statement, site, position = bound
        helper = project.helper(site)
        if helper is None or id(statement) in found:
            continue
        found[id(statement)] = _made_again(index, statement, name, site, position, helper)
    return list(found.values())


def _looped_argument(call: cst.Call, helper: Helper) -> str | None:
    """The name `call` gives the parameter of `helper` that its `for` loop runs over
    (`train_one_epoch(model, loader, opt)`, `def train_one_epoch(model, loader, opt): for x,
    y in loader:`)."""
    params = [param.name.value for param in helper.function.params.params]
    looped = {
        dotted(strip_iteration(node.iter))
        for node in walk(helper.function.body)
        if isinstance(node, cst.For)
    }
    for position, param in enumerate(params):
        if param not in looped:
            continue
        for index, arg in enumerate(call.args):
            if arg.star:
                return None
            if (arg.keyword is None and index == position) or (
                arg.keyword is not None and arg.keyword.value == param
            ):
                keyed = keyed_read(arg.value)
                if keyed is not None and string_value(keyed[1]) is not None:
                    return source_text(arg.value)  # `loaders["train"]`
                return dotted(arg.value)
    return None


def _bound_by_call(
    index: SourceIndex, name: str, scope: cst.FunctionDef | None
) -> tuple[cst.SimpleStatementLine, cst.Call, int | None] | None:
    """The one statement of `scope` that binds `name`, when it is `name = f(...)` (position
    None) or `a, name = f(...)` (its position in the tuple)."""
    bindings: list[tuple[cst.Assign, int | None]] = []
    for assign in index.assigns:
        if index.function_of(assign) is not scope:
            continue
        for target in assign.targets:
            if isinstance(target.target, cst.Name) and target.target.value == name:
                bindings.append((assign, None))
            elif isinstance(target.target, cst.Tuple | cst.List):
                names = [dotted(element.value) for element in target.target.elements]
                if name in names:
                    bindings.append((assign, names.index(name)))
    if scope is not None and name in {p.name.value for p in scope.params.params}:
        return None
    if len(bindings) != 1 or any(isinstance(n, cst.For) for n in index.ancestors(bindings[0][0])):
        return None
    assign, position = bindings[0]
    statement = index.parent(assign)
    if not isinstance(assign.value, cst.Call) or not isinstance(statement, cst.SimpleStatementLine):
        return None
    if len(statement.body) != 1:
        return None
    return statement, assign.value, position


def _made_again(
    index: SourceIndex,
    statement: cst.SimpleStatementLine,
    name: str,
    site: cst.Call,
    position: int | str | None,
    helper: Helper,
) -> ForeignLoader:
    unknown = ForeignLoader(statement, name, site, helper)
    made = returned_loader(helper, position)
    if made is None:
        return _problem(
            unknown,
            f"`{helper.name}()` ({helper.path.name}) returns something not traced to a "
            "`DataLoader(...)` it makes",
        )
    loader = ForeignLoader(statement, name, site, helper, made)
    kept: list[str] = []
    shuffle: cst.BaseExpression | None = None
    for i, arg in enumerate(made.args):
        keyword = arg.keyword.value if arg.keyword is not None else None
        if arg.star == "**":  # `**kwargs`, `{"num_workers": 1, "pin_memory": True}`
            keys = _star_keys(helper, arg.value)
            unkept = sorted(set(keys or ()) - set(KEPT))
            if keys is None or unkept:
                what = f"`{unkept[0]}=` in `**`" if unkept else f"`{arg.star}` arguments"
                return _problem(loader, f"{loader.where} is given {what}")
            kept.extend(key for key in keys if key not in kept)
            continue
        if arg.star:
            return _problem(loader, f"{loader.where} is given `{arg.star}` arguments")
        if (keyword is None and i == 0) or keyword == "dataset":
            continue
        if keyword is None:
            return _problem(loader, f"{loader.where} is given its settings by position")
        if keyword == "shuffle":
            shuffle = _at_call_site(arg.value, site, helper)
            if shuffle is None:
                return _problem(
                    loader,
                    f"the `shuffle=` of {loader.where} is not a value the script can name "
                    "where it calls the helper",
                )
        elif keyword in KEPT:
            kept.append(keyword)
        elif not (keyword in ("sampler", "batch_sampler") and dotted(arg.value) == "None"):
            return _problem(loader, f"{loader.where} is given `{keyword}=`")
    if not made.args:
        return _problem(loader, f"{loader.where} is given no dataset")
    why = _unshardable(index, helper, made, site)
    if why is not None:
        return _problem(loader, why)
    return ForeignLoader(statement, name, site, helper, made, tuple(kept), shuffle)


def _unshardable(index: SourceIndex, helper: Helper, made: cst.Call, site: cst.Call) -> str | None:
    """Why the helper's loader cannot simply take a DistributedSampler: its dataset is
    iterable (no indices to split) or draws at random for each item (every process seeded
    alike would augment alike), or the helper splits the data at random unseeded (every
    process would split it its own way)."""
    for call in walk(helper.function):
        if (
            isinstance(call, cst.Call)
            and (dotted(call.func) or "").rsplit(".", 1)[-1] == "random_split"
            and not any(arg.keyword and arg.keyword.value == "generator" for arg in call.args)
        ):
            line = helper.index.line(call)
            return (
                f"`{helper.name}()` ({helper.path.name}, line {line}) splits the data with "
                "`random_split` and no generator: every process would draw its own split"
            )
    owner = _dataset_class(index, helper, made, site)
    if owner is None:
        return None
    methods = {m.name.value: m for m in owner.body.body if isinstance(m, cst.FunctionDef)}
    if iterable_class(owner):
        return (
            f"its dataset, `{owner.name.value}`, is an IterableDataset: it has no indices to split"
        )
    getitem = methods.get("__getitem__")
    if getitem is not None and any(draws_at_random(node) for node in walk(getitem)):
        return (
            f"its dataset, `{owner.name.value}`, draws at random in `__getitem__`: every "
            "process, seeded alike, would draw alike for its items; seed each process apart"
        )
    return None


def _dataset_class(
    index: SourceIndex, helper: Helper, made: cst.Call, site: cst.Call
) -> cst.ClassDef | None:
    """The class of the helper's dataset, when it is one of the helper's file: made in the
    helper (`dataset = Numbers(n)`), or by the script and passed in (a class imported from
    the helper's file)."""
    dataset = made.args[0].value
    for _ in range(MAX_STEPS):
        if isinstance(dataset, cst.Call):
            return helper.index.classes.get(dotted(dataset.func) or "")
        if not isinstance(dataset, cst.Name):
            return None
        values = _given_in(helper, dataset.value)
        if len(values) == 1:
            dataset = values[0]
            continue
        passed = _at_call_site(dataset, site, helper, simple=False)
        if isinstance(passed, cst.Name):  # `loader = build(train_ds)`: how the script made it
            scope = index.function_of(site)
            made_here = [
                assign.value
                for assign in index.assigns
                if index.function_of(assign) is scope
                and any(dotted(t.target) == passed.value for t in assign.targets)
            ]
            passed = made_here[0] if len(made_here) == 1 else None
        if isinstance(passed, cst.Call):
            name = (dotted(passed.func) or "").rsplit(".", 1)[-1]
            return helper.index.classes.get(name) or index.classes.get(name)
        return None
    return None


def _problem(loader: ForeignLoader, why: str) -> ForeignLoader:
    return ForeignLoader(
        loader.statement, loader.name, loader.site, loader.helper, loader.made, problem=why
    )


def returned_loader(helper: Helper, position: int | str | None) -> cst.Call | None:
    """The `DataLoader(...)` call whose loader the helper returns (at `position` of the
    tuple it returns, or under the key `position` of the dict literal), made once in the
    helper itself."""
    returns = [
        node
        for node in walk(helper.function.body)
        if isinstance(node, cst.Return) and helper.index.function_of(node) is helper.function
    ]
    made: set[int] = set()
    calls: list[cst.Call] = []
    for ret in returns:
        value = ret.value
        if isinstance(position, str):
            value = _entry(value, position)
        elif position is not None:
            if not isinstance(value, cst.Tuple | cst.List) or len(value.elements) <= position:
                return None
            value = value.elements[position].value
        elif isinstance(value, cst.Tuple | cst.List):
            return None
        call = _loader_call(helper, value)
        if call is None:
            return None
        if id(call) not in made:
            made.add(id(call))
            calls.append(call)
    return calls[0] if len(calls) == 1 else None


def _entry(value: cst.BaseExpression | None, key: str) -> cst.BaseExpression | None:
    """The value a dict literal holds under the string `key`."""
    if not isinstance(value, cst.Dict):
        return None
    for element in value.elements:
        if isinstance(element, cst.DictElement) and string_value(element.key) == key:
            return element.value
    return None


def _star_keys(helper: Helper, expr: cst.BaseExpression, depth: int = 0) -> list[str] | None:
    """The keys a `**` dict of the helper may hold: a literal, `dict(k=...)`, either branch
    of `a if c else b`, or a name the helper assigns once and reads only there; None when
    it cannot be told (the loader keeps each setting, so their values need not be known)."""
    if depth > MAX_STEPS:
        return None
    if isinstance(expr, cst.Dict):
        keys = [
            string_value(element.key) if isinstance(element, cst.DictElement) else None
            for element in expr.elements
        ]
        return None if None in keys else [key for key in keys if key is not None]
    if isinstance(expr, cst.Call) and dotted(expr.func) == "dict":
        if helper.index.qualified_names(expr.func) != {"builtins.dict"}:
            return None
        if any(arg.keyword is None for arg in expr.args):
            return None
        return [arg.keyword.value for arg in expr.args if arg.keyword is not None]
    if isinstance(expr, cst.IfExp):
        body = _star_keys(helper, expr.body, depth + 1)
        orelse = _star_keys(helper, expr.orelse, depth + 1)
        return None if body is None or orelse is None else body + orelse
    if isinstance(expr, cst.Name):
        given = _given_in(helper, expr.value)
        reads = [
            node
            for node in walk(helper.function.body)
            if isinstance(node, cst.Name)
            and node.value == expr.value
            and not helper.index.is_attribute_name(node)
        ]
        spread = [
            node
            for node in reads
            if isinstance(arg := helper.index.parent(node), cst.Arg) and arg.star == "**"
        ]
        if len(given) != 1 or len(reads) != len(spread) + 1:  # bound once, read at `**`s
            return None
        return _star_keys(helper, given[0], depth + 1)
    return None


def _given_in(helper: Helper, name: str) -> list[cst.BaseExpression]:
    """The values the helper function assigns to the plain name `name`."""
    return [
        assign.value
        for assign in helper.index.assigns
        if helper.index.function_of(assign) is helper.function
        and any(isinstance(t.target, cst.Name) and t.target.value == name for t in assign.targets)
    ]


def _loader_call(helper: Helper, value: cst.BaseExpression | None) -> cst.Call | None:
    for _ in range(MAX_STEPS):
        if isinstance(value, cst.Call):
            names = helper.index.qualified_names(value.func) | {dotted(value.func) or ""}
            if any(name.rsplit(".", 1)[-1] == "DataLoader" for name in names):
                return value
            return None
        if not isinstance(value, cst.Name):
            return None
        values = _given_in(helper, value.value)
        if len(values) != 1:
            return None
        value = values[0]
    return None


def _at_call_site(
    value: cst.BaseExpression, site: cst.Call, helper: Helper, simple: bool = True
) -> cst.BaseExpression | None:
    """`value`, read in the helper, as the script can spell it at the call site: a literal
    as it is; a parameter as the argument the site binds it to, or its default (`simple`:
    only a literal or a dotted name, the same value read once more)."""
    if isinstance(value, cst.Name) and value.value in ("True", "False"):
        return value
    keep = _simple if simple else (lambda expr: expr)
    if not isinstance(value, cst.Name):
        return None
    params = helper.function.params
    ordered = [*params.posonly_params, *params.params]
    every = [*ordered, *params.kwonly_params]
    param = next((p for p in every if p.name.value == value.value), None)
    if param is None or any(arg.star for arg in site.args):
        return None
    for arg in site.args:
        if arg.keyword is not None and arg.keyword.value == value.value:
            return keep(arg.value)
    positional = [arg for arg in site.args if arg.keyword is None]
    if param in ordered and ordered.index(param) < len(positional):
        return keep(positional[ordered.index(param)].value)
    return keep(param.default) if param.default is not None else None


def _simple(value: cst.BaseExpression) -> cst.BaseExpression | None:
    """A literal or a dotted name: the same value read once more at the call site."""
    if dotted(value) is not None or isinstance(value, cst.Integer):
        return value
    return None
