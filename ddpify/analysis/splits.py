"""Random draws the training data is built from: a split each process would draw for itself.

`perm = np.random.permutation(len(data))`, then `Subset(data, perm[n_val:])` (or
`random.shuffle(pairs)` before `pairs[:1200]` becomes the training set): with its generator
unseeded, every process draws its own permutation, so the DistributedSampler splits a
different training set in each process. Together they train on some samples twice, miss
others, and train on what another process validates on. The fix is to take rank 0's draw.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from ddpify.analysis.api import SEEDS
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.tree import call_arg, dotted, is_name, methods, walk
from ddpify.analysis.values import MAX_STEPS, Values

if TYPE_CHECKING:
    from ddpify.analysis.calls import CallGraph
    from ddpify.analysis.effects import SideEffects

# Draws that permute or pick samples, by the generator family they draw from.
PERMUTATIONS = {
    "numpy.random.permutation": "numpy",
    "numpy.random.choice": "numpy",
    "torch.randperm": "torch",
    "random.sample": "random",
}
# Draws the samples themselves may be made of (`series = np.sin(t) + 0.1 *
# np.random.randn(n)`, round-22 audit B2 window_lstm), by family.
SAMPLE_DRAWS = {
    **PERMUTATIONS,
    **{f"numpy.random.{name}": "numpy" for name in (
        "randn", "rand", "normal", "uniform", "randint", "random", "standard_normal")},
    **{f"torch.{name}": "torch" for name in ("randn", "rand", "randint", "normal")},
}  # fmt: skip
# Calls that shuffle their argument in place.
SHUFFLES = {"random.shuffle": "random", "numpy.random.shuffle": "numpy"}
# Values each process draws for itself: a number from an unseeded generator, the clock, the
# process id (`manualSeed = random.randint(1, 10000)`, pytorch/examples' dcgan).
PER_PROCESS = {
    name: "drawn"
    for name in (
        "random.randint", "random.randrange", "random.random", "random.getrandbits",
        "numpy.random.randint", "numpy.random.rand", "numpy.random.random", "torch.randint",
        "torch.seed", "torch.initial_seed", "time.time", "time.time_ns", "os.getpid",
        "secrets.randbelow", "secrets.randbits",
    )
}  # fmt: skip

# Draws that may choose what a step does (which task's loader it reads next), by family.
CHOICES = {
    **{f"random.{name}": "random" for name in (
        "choice", "choices", "random", "randint", "randrange", "sample", "uniform")},
    **{f"numpy.random.{name}": "numpy" for name in ("choice", "rand", "randint", "random")},
    **{f"torch.{name}": "torch" for name in ("randint", "rand", "multinomial")},
}  # fmt: skip


def unseeded_choice(index: SourceIndex, graph: CallGraph) -> cst.Call | None:
    """A draw (see CHOICES) from a generator the script never seeds before it: every
    process draws its own value."""
    for call in index.calls:
        family = _family(index, call, CHOICES)
        if (
            family is not None
            and not _seeded_by_generator(call)
            and not _seeded_before(index, family, call, graph)
        ):
            return call
    return None


@dataclass(frozen=True)
class DrawnSplit:
    """A draw the training data is built from, and the name that holds what it drew."""

    draw: cst.Call
    statement: cst.BaseStatement  # rank 0's value is shared right after it
    # The names that hold what it drew (`perm`; `X, y` for a tuple of names); none when it
    # is not assigned to plain names.
    names: tuple[str, ...]
    # For a seeded draw: a draw from its generator before it that rank 0 alone makes.
    parted_by: cst.Call | None = None
    evaluates: bool = False  # the data an evaluation loader reads, not the training data


@dataclass(frozen=True)
class DrawnSeed:
    """`name = <a per-process draw>`, then a generator seeded with `name`: every process
    would seed its own, and draw its own splits and initial weights from it."""

    draw: cst.Call
    statement: cst.BaseStatement  # rank 0's value is shared right after it
    name: str


def drawn_seeds(index: SourceIndex) -> list[DrawnSeed]:
    """The seeds drawn per process that seed a global generator (`random.seed`,
    `np.random.seed`, `torch.manual_seed`) later in the same scope."""
    found: dict[int, DrawnSeed] = {}
    for call in index.calls:
        if not call.args or _family(index, call, SEEDS) is None:
            continue
        name = dotted(call.args[0].value)
        scope = index.function_of(call)
        for assign in index.assigns:
            draw = per_process_draw(index, assign.value)
            if (
                name is not None
                and draw is not None
                and len(assign.targets) == 1
                and dotted(assign.targets[0].target) == name
                and index.function_of(assign) is scope
                and index.precedes(assign, call)
            ):
                found[id(assign)] = DrawnSeed(draw, index.statement_of(assign), name)
    return list(found.values())


def per_process_draw(index: SourceIndex, expr: cst.BaseExpression) -> cst.Call | None:
    """A call in `expr` whose value differs in every process (see PER_PROCESS)."""
    return next(
        (
            node
            for node in walk(expr)
            if isinstance(node, cst.Call) and _family(index, node, PER_PROCESS) is not None
        ),
        None,
    )


def drawn_splits(
    index: SourceIndex,
    values: Values,
    dataset: cst.BaseExpression,
    effects: SideEffects | None = None,
) -> list[DrawnSplit]:
    """The unseeded draws `dataset` (a training loader's dataset argument) is built from,
    followed through the names it reads; and the seeded ones whose generator rank 0 alone
    draws from before them (see `rank_zero_draw`)."""
    found: list[DrawnSplit] = []
    seen: set[tuple[str, int]] = set()

    def visit(expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int) -> None:
        if depth > MAX_STEPS:
            return
        for node in walk(expr):
            callee = values.graph.callee(node) if isinstance(node, cst.Call) else None
            if callee is not None:  # `X_train, ... = train_test_split(X, y)` of the script
                for returned in values.graph.returned_values(callee):
                    visit(returned, callee, depth + 1)
            drawn = _drawn_when_made(index, values.graph, node)
            if drawn is not None:
                found.append(drawn)
            if not isinstance(node, cst.Name) or index.is_attribute_name(node):
                continue
            key = (node.value, id(scope))
            if key in seen:
                continue
            seen.add(key)
            for call in index.calls:
                family = _family(index, call, SHUFFLES) or _from_the_os(values, call, "shuffle")
                if (
                    family is not None
                    and call.args
                    and dotted(call.args[0].value) == node.value
                    and index.function_of(call) is scope
                    and not _seeded_before(index, family, call, values.graph)
                ):
                    found.append(DrawnSplit(call, index.statement_of(call), (node.value,)))
            graph = values.graph
            if scope is not None and node.value in graph.parameters_of(scope):
                # `def get_data(train_ds, valid_ds, bs)`: what its calls give it (round-42
                # audit A nnreally: unseeded data reached the loader through a parameter)
                for site in graph.call_sites(scope):
                    given = graph.bound_argument(site, scope, node.value)
                    if given is not None:
                        visit(given, index.function_of(site), depth + 1)
                continue
            for value, where in values.values_of(node.value, scope):
                draw = next(
                    (
                        inner
                        for inner in walk(value)
                        if isinstance(inner, cst.Call)
                        and (_family(index, inner, SAMPLE_DRAWS) or _from_the_os(values, inner))
                    ),
                    None,
                )
                if draw is None:
                    visit(value, where, depth + 1)
                    continue
                family = _family(index, draw, SAMPLE_DRAWS) or _from_the_os(values, draw)
                assert family is not None
                parted_by = (
                    rank_zero_draw(index, values.graph, effects, family, draw)
                    if effects is not None
                    else None
                )
                if parted_by is None and (
                    _seeded_before(index, family, draw, values.graph) or _seeded_by_generator(draw)
                ):
                    continue
                assign = next(
                    (a for a in index.ancestors(draw) if isinstance(a, cst.Assign)), None
                )  # (`x, y = torch.randn(64, 4), torch.randn(64, 1)`: the value is one element)
                target = (
                    assign.targets[0].target
                    if isinstance(assign, cst.Assign) and len(assign.targets) == 1
                    else None
                )
                elements = (
                    [e.value for e in target.elements]
                    if isinstance(target, cst.Tuple)
                    else [target]
                )
                names = tuple(e.value for e in elements if isinstance(e, cst.Name))
                if len(names) != len(elements):
                    names = ()
                found.append(DrawnSplit(draw, index.statement_of(draw), names, parted_by))

    visit(dataset, index.function_of(dataset), 0)
    # one per statement and names: `x = torch.randn(n, 8); y = torch.randn(n, 1)` are two
    # (round-47 audit E: only `y` was shared), `x, y = torch.randn(...), torch.randn(...)` one
    unique = {(id(split.statement), split.names): split for split in found}
    return list(unique.values())


# A NumPy Generator's draws (`rng.permutation(n)`, `rng.normal(size=...)`).
GENERATOR_DRAWS = frozenset(
    {"permutation", "permuted", "choice", "shuffle", "integers", "random", "normal",
     "standard_normal", "uniform", "beta", "binomial", "poisson", "exponential", "gamma",
     "multivariate_normal", "dirichlet", "lognormal", "laplace", "multinomial"}
)  # fmt: skip
# The family of a generator seeded from the OS when it is made: no seed makes it alike.
FROM_THE_OS = "os entropy"


def _from_the_os(values: Values, call: cst.Call, method: str | None = None) -> str | None:
    """`FROM_THE_OS` for a draw from a NumPy Generator made without a seed,
    `np.random.default_rng()` (round-46 audit A subset_unseeded: each rank drew its own
    train/validation split; concat_unseeded_data: its own data), also through a name or a
    parameter it is given to."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value not in GENERATOR_DRAWS:
        return None
    if method is not None and func.attr.value != method:
        return None
    base = func.value
    if isinstance(base, cst.Call) and not values.index.may_name(base, {"default_rng"}):
        return None
    if not isinstance(base, cst.Call | cst.Name | cst.Attribute):
        return None
    scope = values.index.function_of(call)
    made = values.origins(base, scope)
    unseeded = bool(made) and all(
        isinstance(end, cst.Call)
        and values.index.qualified_names(end.func) & {"numpy.random.default_rng"}
        and (not end.args or (end.args[0].keyword is None and is_name(end.args[0].value, "None")))
        for end in made
    )
    return FROM_THE_OS if unseeded else None


def _drawn_when_made(index: SourceIndex, graph: CallGraph, node: cst.CSTNode) -> DrawnSplit | None:
    """`train_ds = SynthDataset(800)` of a class of the script whose `__init__` draws its
    samples unseeded (the DataParallel tutorial's `RandomDataset`; round-36 audit B
    class_weights_counted_from_loader_b: every rank built and sharded a data set of its
    own): the dataset made, assigned to a name, is the draw to share."""
    if not isinstance(node, cst.Call):
        return None
    owner = index.classes.get(dotted(node.func) or "")
    init = next((m for m in methods(owner) if m.name.value == "__init__"), None) if owner else None
    if init is None:
        return None
    for inner in walk(init.body):
        if not isinstance(inner, cst.Call):
            continue
        family = _family(index, inner, SAMPLE_DRAWS)
        if (
            family is None
            or _seeded_by_generator(inner)
            or _seeded_before(index, family, node, graph)
        ):
            continue
        statement = index.statement_of(node)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        names: tuple[str, ...] = ()
        if (
            isinstance(small, cst.Assign)
            and small.value is node
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
        ):
            names = (small.targets[0].target.value,)
        return DrawnSplit(node, statement, names)
    return None


def _family(index: SourceIndex, call: cst.Call, table: dict[str, str]) -> str | None:
    if not index.may_name(call, {name.rsplit(".", 1)[-1] for name in table}):
        return None
    return next((table[n] for n in index.qualified_names(call.func) if n in table), None)


def _seeded_before(
    index: SourceIndex, family: str, draw: cst.Call, graph: CallGraph | None = None
) -> bool:
    """A seed of the draw's generator family set before it (any value the script computes
    alike in every process: a number, `args.seed`; a seed drawn per process into a name is
    shared from rank 0 by the conversion, see `drawn_seeds`): before the draw, or, for a
    draw in a function, before a call of it (`make_dataset()` defined above the
    `torch.manual_seed(0)` of the `main()` that calls it)."""
    function = index.function_of(draw)
    points: list[cst.CSTNode] = [draw]
    if graph is not None and function is not None:
        points += graph.call_sites(function)
    return any(
        _family(index, call, SEEDS) == family
        and bool(call.args)
        and per_process_draw(index, call.args[0].value) is None
        and (
            runs_first(index, graph, call, draw)
            if graph is not None
            else any(index.precedes(call, point) for point in points)
        )
        and surely_runs(index, call, graph)
        for call in index.calls
    )


def runs_first(
    index: SourceIndex, graph: CallGraph, first: cst.CSTNode, later: cst.CSTNode
) -> bool:
    """Whether `first` runs before `later`, compared where both are reached in one function:
    themselves, or the calls of the functions they are in. A seed in `set_seed()`, defined
    above `build_data()`, runs after the data is drawn when `main()` calls `build_data()`
    first (round-46 audit B seed_data: every rank trained on a data set of its own). Where
    no such pair is found, the order in the file."""
    pairs = [
        (a, b)
        for a in _reached_from(index, graph, first)
        for b in _reached_from(index, graph, later)
        if a is not b and index.function_of(a) is index.function_of(b)
    ]
    if not pairs:
        return index.precedes(first, later)
    return any(index.precedes(a, b) for a, b in pairs)


def _reached_from(index: SourceIndex, graph: CallGraph, node: cst.CSTNode) -> list[cst.CSTNode]:
    """`node`, the calls of its function, the calls of theirs (three levels up)."""
    found, frontier = [node], [node]
    for _ in range(3):
        frontier = [
            site
            for inner in frontier
            if (function := index.function_of(inner)) is not None
            for site in graph.call_sites(function)
        ]
        found += frontier
    return found


def surely_runs(index: SourceIndex, node: cst.CSTNode, graph: CallGraph | None = None) -> bool:
    """Whether `node` runs whenever the script does: under no `if` but the main guard,
    and, in a function of the script, called somewhere so too. `if args.seed is not None:
    torch.manual_seed(args.seed)`, with `--seed` None by default, may not (round-42 audit A
    refs_engine: the data, drawn unseeded, was taken for seeded and not shared)."""
    for ancestor in index.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            if graph is None:
                return True
            sites = graph.call_sites(ancestor)
            return any(surely_runs(index, site) for site in sites) if sites else True
        if isinstance(ancestor, cst.If | cst.IfExp) and not _main_guard(ancestor):
            return False
    return True


def _main_guard(node: cst.CSTNode) -> bool:
    """`if __name__ == "__main__":`"""
    test = node.test if isinstance(node, cst.If) else None
    return (
        isinstance(test, cst.Comparison)
        and isinstance(test.left, cst.Name)
        and test.left.value == "__name__"
    )


def rank_zero_draw(
    index: SourceIndex,
    graph: CallGraph,
    effects: SideEffects,
    family: str,
    draw: cst.Call,
) -> cst.Call | None:
    """A draw from `draw`'s generator family, after the seed and before `draw`, in a
    statement the conversion runs on rank 0 alone (a write: `torch.save(Net().state_dict(),
    "pretrained.pth")` draws the new model's weights): after it, rank 0's generator is ahead
    of the others', so a seeded draw is no longer alike in every process (round-29 audit B
    so_freeze_backbone_new_fc: each process trained on a synthetic dataset of its own)."""
    scope = index.function_of(draw)
    seeds = [
        call
        for call in index.calls
        if _family(index, call, SEEDS) == family
        and index.function_of(call) is scope
        and index.precedes(call, draw)
    ]
    if not seeds:
        return None
    for call in index.calls:
        if (
            index.function_of(call) is scope
            and index.precedes(call, draw)
            and all(index.precedes(seed, call) for seed in seeds)
            and _draws(index, graph, call, family)
        ):
            statement = index.statement_of(call)
            if effects.of(statement) is not None and effects.private(statement) is None:
                return call
    return None


def _draws(index: SourceIndex, graph: CallGraph, call: cst.Call, family: str) -> bool:
    """Whether `call` draws from `family`'s global generator: a draw of SAMPLE_DRAWS or
    CHOICES, or, for torch's, a module made (its initial weights): one of torch.nn's, or a
    class of the script's."""
    if family in (_family(index, call, SAMPLE_DRAWS), _family(index, call, CHOICES)):
        return True
    if family != "torch":
        return False
    if graph.calls_script(call):
        return isinstance(call.func, cst.Name) and call.func.value in index.classes
    return any(
        name.rsplit(".", 1)[-1][:1].isupper()
        and (
            name.startswith("torch.nn.")  # a layer of torch's
            or name.split(".", 1)[0] not in sys.stdlib_module_names | {"torch", "numpy"}
        )  # a class imported from another file of the project (`from model import Net`)
        for name in index.qualified_names(call.func)
    )


def _seeded_by_generator(draw: cst.Call) -> bool:
    """`torch.randperm(n, generator=g)`: its own generator, seeded where it is made."""
    return call_arg(draw, None, "generator") is not None
