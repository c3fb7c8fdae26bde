"""Edits shared by the converter's rules and the checker's fixes: one implementation each."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import BATCH_SAMPLERS, SAMPLER, SAMPLER_ARGUMENTS
from ddpify.analysis.loaders import Loader
from ddpify.analysis.project import iterable_class
from ddpify.analysis.script import TrainLoop
from ddpify.analysis.splits import per_process_draw, runs_first, surely_runs
from ddpify.analysis.tree import call_arg, dotted, is_name, methods, source_text, walk
from ddpify.edits import EditPlan
from ddpify.emit import statement, with_keyword


class Importer(Protocol):
    def add_import(
        self, module: str, obj: str | None = None, asname: str | None = None
    ) -> None: ...


def take_rank_zeros(plan: EditPlan, after: cst.BaseStatement, name: str) -> bool:
    """After `after`, every process takes rank 0's value of `name`, broadcast as an object:
    a value each process would draw or compute for itself (a clock, a random draw). Once:
    a value two rules or two uses ask for (an LR finder's `best_lr` given to the optimizer
    and to its OneCycleLR, round-36 audit B) is broadcast once: False when it already was."""
    shared = f"dist.broadcast_object_list({name})"
    if any(shared in cst.Module([]).code_for_node(s) for s in plan.after.get(after, ())):
        return False
    plan.insert_after(after, rank_zeros(name))
    return True


def rank_zeros(name: str) -> list[cst.BaseStatement]:
    """`name` made rank 0's in every process: a list of one, broadcast as an object."""
    return [
        statement(f"{name} = [{name}]\n"),
        statement(f"dist.broadcast_object_list({name})  # every process takes rank 0's\n"),
        statement(f"{name} = {name}[0]\n"),
    ]


def set_epoch_problem(loop: TrainLoop) -> str | None:
    """Why `set_epoch` cannot be inserted into this loop automatically, if it cannot."""
    if loop.epoch_loop is None:
        return "one pass over the data: no epoch loop to call set_epoch in"
    if loop.loader_at_epoch is None or loop.epoch_var is None:
        return "no epoch counter or loader name in the epoch loop: call set_epoch there by hand"
    if not isinstance(loop.epoch_loop.body, cst.IndentedBlock):
        return "one-line epoch loop: add set_epoch by hand"
    return None


def insert_set_epoch(plan: EditPlan, loop: TrainLoop, via: str = "sampler") -> None:
    """`<loader>.<via>.set_epoch(<epoch>)` as the epoch loop's first statement."""
    assert set_epoch_problem(loop) is None and loop.epoch_loop is not None
    body = loop.epoch_loop.body
    assert isinstance(body, cst.IndentedBlock)
    if via == "sampler" and loop.loader is not None:
        via = loop.loader.sampler_path
    call = statement(f"{loop.loader_at_epoch}.{via}.set_epoch({loop.epoch_var})\n")
    # A loader made anew in the epoch (`loader = DataLoader(...)` or `make_loader(epoch)`
    # inside the loop, round-10 audit c10), also under an `if` (a curriculum's loader made
    # again when its stage changes, round-43 audit D curriculum: `set_epoch` first in the
    # loop ran on the `None` it started as): after it is made, before its batch loop.
    # Only what names the loader makes it: not `self.best = loss` after a `self.train_epoch()`
    # whose batch loop is in another method (round-46 audit E trainer_es2: set_epoch went
    # last in the loop, after the epoch it was for).
    at_epoch = loop.loader_at_epoch or ""
    root = re.split(r"[.\[]", at_epoch)[0]
    made = None
    for line in body.body:
        if any(node is loop.batch_loop for node in walk(line)):
            break
        if any(
            isinstance(small, cst.Assign | cst.AnnAssign)
            and any(
                _names_a_part(target.target, root, at_epoch)
                for target in (small.targets if isinstance(small, cst.Assign) else [small])
            )
            for small in walk(line)
        ):
            made = line
    if made is not None:
        plan.insert_after(made, [call])
    else:
        plan.insert_before(body.body[0], [call])


def _names_a_part(target: cst.BaseExpression, root: str, loader: str) -> bool:
    """Whether assigning `target` gives the loader `loader` (rooted at `root`) anew: the
    root name itself (`loader, sampler = make(...)`), or the loader or an object it is read
    from (`self.train_loader`, `self.data` for `self.data.loader`)."""
    for node in walk(target):
        name = dotted(node) if isinstance(node, cst.Attribute | cst.Name) else None
        if name is None:
            continue
        if name == root and "." not in name and root != "self":
            return True
        if name != root and (name == loader or loader.startswith((name + ".", name + "["))):
            return True
    return False


def _iterable_of_the_project(
    anatomy: Anatomy, dataset: cst.BaseExpression, scope: cst.FunctionDef | None
) -> bool:
    """Whether `dataset` is made by an IterableDataset class of another project file
    (data.py's `SineStream`, round-32 audit C: a DistributedSampler crashed on its len)."""
    return any(
        isinstance(end, cst.Call)
        and (made := anatomy.project.class_made(end)) is not None
        and iterable_class(made[0])
        for end in anatomy.values.origins(dataset, scope)
    )


def shard_problem(anatomy: Anatomy, loader: Loader) -> str | None:
    """Why the loader cannot be given a DistributedSampler automatically, if it cannot."""
    call = loader.call
    if loader.key_var is not None and loader.train_key is None:
        return (
            "the training DataLoader is made for several keys in a comprehension, and no "
            'loop reads it at one training key (`loaders["train"]`, or `loaders[phase]` '
            'under `if phase == "train"`): give the training key\'s loader a '
            "DistributedSampler by hand"
        )
    samplers = [anatomy.loaders.argument(call, name) for name in SAMPLER_ARGUMENTS]
    if any(samplers):
        if loader.key_var is None and (
            plain_sampler(anatomy, loader) is not None
            or none_sampler(anatomy, loader) is not None
            or batched_sampler(anatomy, loader) is not None
            or subset_sampler(anatomy, loader) is not None
            or drawing_sampler(anatomy, loader) is not None
        ):
            return None
        return "the training DataLoader has its own sampler: shard it by hand"
    if None in samplers:
        return (
            "the training DataLoader takes `*args` or `**kwargs` that cannot be followed: "
            "give it a DistributedSampler by hand"
        )
    dataset = call_arg(call, 0, "dataset")
    if dataset is None:
        return "the training DataLoader has no dataset argument"
    if not _names_value(dataset.value) and _in_own_scope(anatomy, call):
        # The dataset would be named in a statement of its own, outside the comprehension
        # or lambda whose variables it reads.
        return (
            "the training DataLoader's dataset is built inside a comprehension or lambda: "
            "build it first, then give the loader a DistributedSampler by hand"
        )
    if anatomy.loaders.is_iterable_dataset(
        dataset.value, anatomy.function_of(call)
    ) or _iterable_of_the_project(anatomy, dataset.value, anatomy.function_of(call)):
        return (
            "the training DataLoader reads an IterableDataset, which takes no sampler: "
            "shard it by rank in its `__iter__`"
        )
    single = anatomy.loaders.one_sample(dataset.value, anatomy.function_of(call))
    if single is not None:
        return (
            f"the training dataset holds one sample (`{single}.__len__` returns 1): a "
            "DistributedSampler gives every process that same sample, and every process "
            "would train on the same data; split the sample itself by rank by hand (its "
            "rows, an image's pixels)"
        )
    shuffle = anatomy.loaders.argument(call, "shuffle") or []
    if any(not passed.direct for passed in shuffle) and (
        loader.key_var is not None or _shuffle_dict(anatomy, call) is None
    ):
        return (
            "`shuffle` is set in a `**kwargs` dict other than a variable read only by this "
            "loader: replace it with the sampler by hand"
        )
    if any(isinstance(p.where, cst.Arg) and p.where.keyword is None for p in shuffle):
        return "`shuffle` passed by position: pass it by keyword first"
    return None


def shard_loader(plan: EditPlan, anatomy: Anatomy, loader: Loader, importer: Importer) -> None:
    """`sampler=DistributedSampler(dataset, shuffle=<the loader's shuffle>)` in place of
    `shuffle=` (the two are mutually exclusive)."""
    assert shard_problem(anatomy, loader) is None
    call = loader.call
    plain = plain_sampler(anatomy, loader) or batched_sampler(anatomy, loader)
    if plain is not None:
        _replace_sampler(plan, anatomy, plain, importer)
        return
    unset = none_sampler(anatomy, loader)
    if unset is not None:
        made, shuffled = unset
        sampler_name = distributed_sampler_name(anatomy, call, importer)
        dataset_code = cst.Module([]).code_for_node(call.args[0].value)
        sampler = cst.parse_expression(f"{sampler_name}({dataset_code}, shuffle={shuffled})")
        plan.replace(made, lambda _: sampler)
        return
    subset = subset_sampler(anatomy, loader)
    if subset is not None:
        _sample_the_subset(plan, anatomy, loader, subset, importer)
        return
    dataset = call_arg(call, 0, "dataset")
    shuffle = call_arg(call, 2, "shuffle")
    assert dataset is not None
    code = cst.Module([]).code_for_node
    dataset_code = code(dataset.value)
    if not _names_value(dataset.value):
        # Built inline: the loader and the sampler must share one dataset, so name it.
        dataset_code = anatomy.free_name(("dataset", "train_dataset", "train_set"))
        built: list[cst.BaseExpression] = []

        def hoist(value: cst.BaseExpression) -> cst.BaseExpression:
            built.append(value)
            return cst.Name(dataset_code)

        plan.replace(dataset.value, hoist)
        hoisted: list[cst.BaseStatement | Callable[[], cst.BaseStatement]] = [
            lambda: statement(f"{dataset_code} = {code(built[-1])}\n")
        ]
        if any(split.draw is dataset.value for split in anatomy.script.split_draws):
            # a class of the script that draws its samples when it is made, unseeded
            # (DDP004 reports it): every process takes rank 0's
            hoisted += rank_zeros(dataset_code)
        plan.insert_before(loader.statement, hoisted)
    shuffle_code = code(shuffle.value) if shuffle is not None else "False"
    holder = _shuffle_dict(anatomy, call)
    if holder is not None:
        # The dict's `shuffle` goes to the sampler; DataLoader refuses both at once.
        shuffle_code = f'{holder.value}.pop("shuffle", False)'
    sampler_name = distributed_sampler_name(anatomy, call, importer)
    seeded = _seed_given(anatomy, call)
    sampler = cst.parse_expression(
        f"{sampler_name}({dataset_code}, shuffle={shuffle_code}{seeded})"
    )
    if loader.key_var is not None:
        _shard_one_key(plan, loader, sampler, shuffle)
        return
    switch = anatomy.switches.get(id(loader))
    if switch is not None:  # `make_loader(x, y, train)`: where `train` is true
        _shard_one_key(plan, loader, sampler, shuffle, (switch.test, switch.other))
        return

    def shard(updated: cst.Call) -> cst.Call:
        if shuffle is None:
            return before_double_star(with_keyword(updated, "sampler", sampler))
        # `sampler=` takes `shuffle=`'s place in the argument list.
        args = [
            arg.with_changes(keyword=cst.Name("sampler"), value=sampler)
            if arg.keyword is not None and arg.keyword.value == "shuffle"
            else arg
            for arg in updated.args
        ]
        return updated.with_changes(args=args)

    plan.replace(call, shard)


def _shard_one_key(
    plan: EditPlan,
    loader: Loader,
    sampler: cst.BaseExpression,
    shuffle: cst.Arg | None,
    tests: tuple[str, str] | None = None,
) -> None:
    """A loader made per key in a comprehension (`{x: DataLoader(...) for x in ["train",
    "val"]}`): the training key's loader gets the sampler, the others keep their
    `shuffle=`: `shuffle=x != "train", sampler=DistributedSampler(...) if x == "train" else
    None`. `tests`: the conditions for a loader a function's parameter tells apart
    (`train` and `not train`)."""
    key, train = loader.key_var, loader.train_key
    test, others = tests or (f'{key} == "{train}"', f'{key} != "{train}"')
    chosen = cst.parse_expression(f"0 if {test} else None")
    assert isinstance(chosen, cst.IfExp)
    chosen = chosen.with_changes(body=sampler)

    def shard(updated: cst.Call) -> cst.Call:
        if shuffle is None:
            return before_double_star(with_keyword(updated, "sampler", chosen))
        args: list[cst.Arg] = []
        for arg in updated.args:
            if arg.keyword is not None and arg.keyword.value == "shuffle":
                value = arg.value
                written = cst.Module([]).code_for_node(value)
                if is_name(value, "True"):
                    kept = cst.parse_expression(others)
                elif written == test:  # `shuffle=train`: never with the sampler
                    kept = cst.Name("False")
                else:
                    kept = cst.parse_expression(f"{written} and {others}")
                comma = arg.comma
                if not isinstance(comma, cst.Comma):
                    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                args.append(arg.with_changes(value=kept, comma=comma))
                args.append(
                    cst.Arg(
                        chosen,
                        keyword=cst.Name("sampler"),
                        equal=arg.equal,
                        comma=arg.comma,
                        whitespace_after_arg=arg.whitespace_after_arg,
                    )
                )
                continue
            args.append(arg)
        return updated.with_changes(args=args)

    plan.replace(loader.call, shard)


# Samplers that draw with replacement, and whether they do by default.
DRAWING_SAMPLERS = {
    "torch.utils.data.RandomSampler": False,
    "torch.utils.data.sampler.RandomSampler": False,
    "torch.utils.data.WeightedRandomSampler": True,
    "torch.utils.data.sampler.WeightedRandomSampler": True,
}
PER_PROCESS_GENERATOR = "torch.Generator().manual_seed(torch.initial_seed() + dist.get_rank())"


def drawing_sampler(anatomy: Anatomy, loader: Loader) -> cst.Call | None:
    """The sampler the loader is given, made in one place, when it draws with replacement
    (`RandomSampler(ds, replacement=True, num_samples=...)`, `WeightedRandomSampler(weights,
    n)`) from the global generator (no generator of its own): nothing to split, only a
    stream to make different in every process."""
    made = _given_sampler(anatomy, loader)
    if made is None:
        return None
    default = next(
        (v for n, v in DRAWING_SAMPLERS.items() if n in anatomy.qualified_names(made.func)), None
    )
    given = call_arg(made, None, "generator")
    if default is None or (given is not None and not isinstance(given.value, cst.Name)):
        return None
    replacement = call_arg(made, None, "replacement")
    replaces = default if replacement is None else is_name(replacement.value, "True")
    # `RandomSampler(ds, num_samples=k)`: a random subset of k every pass, drawn the same
    # way (round-47 audit A c3_randsub was refused)
    subset = replacement is None and call_arg(made, 2, "num_samples") is not None
    return made if (replaces or subset) and not any(arg.star for arg in made.args) else None


def draw_per_process(plan: EditPlan, sampler: cst.Call) -> None:
    """The sampler draws from a generator seeded with the script's torch seed plus the rank,
    or its own generator's seed plus the rank."""
    give_generator(plan, sampler, cst.parse_expression(per_process_generator(sampler)))


def give_generator(plan: EditPlan, sampler: cst.Call, generator: cst.BaseExpression) -> None:
    """`generator=` of the sampler set to `generator`: in place of the one it is given."""
    given = call_arg(sampler, None, "generator")
    if given is not None:
        plan.replace(given.value, lambda _: generator)
    else:
        plan.replace(sampler, lambda updated: with_keyword(updated, "generator", generator))


def per_process_generator(sampler: cst.Call) -> str:
    """A generator for the sampler seeded apart in every process: from torch's seed, or from
    the seed of the generator it is given (`generator=g`, seeded with `--seed`: round-46
    audit A weighted_gen was refused)."""
    given = call_arg(sampler, None, "generator")
    if given is None:
        return PER_PROCESS_GENERATOR
    own = cst.Module([]).code_for_node(given.value)
    return f"torch.Generator().manual_seed({own}.initial_seed() + dist.get_rank())"


PLAIN_SAMPLERS = {
    "torch.utils.data.RandomSampler": "True",
    "torch.utils.data.sampler.RandomSampler": "True",
    "torch.utils.data.SequentialSampler": "False",
    "torch.utils.data.sampler.SequentialSampler": "False",
}


def plain_sampler(anatomy: Anatomy, loader: Loader) -> cst.Call | None:
    """The `RandomSampler(dataset)` or `SequentialSampler(dataset)` the loader is given as
    `sampler=` (torchvision's references build it in `load_data()`), made in one place with
    the dataset alone: a DistributedSampler with the same shuffle takes its place."""
    made = _given_sampler(anatomy, loader)
    if made is None or not anatomy.is_call_to(made, tuple(PLAIN_SAMPLERS)):
        return None
    only = call_arg(made, 0, "data_source")
    return made if only is not None and len(made.args) == 1 else None


def _seed_given(anatomy: Anatomy, call: cst.Call) -> str:
    """`, seed=<seed>` when the function that makes the loader seeds torch, itself or
    through a function of the script (`set_seed(seed)`), with one of its parameters, before
    (`def main(seed)`, called once per seed of a sweep): the original's order changes with
    that seed, and so must the sampler's, whose own seed is 0 whatever torch's is (round-37
    audit B seed_sweep_main_loop: three runs, one order)."""
    generator = call_arg(call, None, "generator")
    made = generator.value if generator is not None else None
    if (  # `generator=torch.Generator().manual_seed(args.seed)` (round-45 audit A genshuffle)
        isinstance(made, cst.Call)
        and made.args
        and isinstance(made.func, cst.Attribute)
        and made.func.attr.value == "manual_seed"
        and isinstance(made.func.value, cst.Call)
        and anatomy.is_call_to(made.func.value, {"torch.Generator"})
    ):
        seed_code = cst.Module([]).code_for_node(made.args[0].value)
        return "" if seed_code == "0" else f", seed={seed_code}"
    scope = anatomy.function_of(call)
    seeds: list[cst.BaseExpression] = []
    for seed in anatomy.calls:
        if not (seed.args and anatomy.function_of(seed) is scope and anatomy.precedes(seed, call)):
            continue
        if anatomy.is_call_to(seed, {"torch.manual_seed"}):
            seeds.append(seed.args[0].value)
            continue
        helper = anatomy.graph.callee(seed)  # `set_seed(seed)`, seeding torch with its own
        for inner in walk(helper.body) if helper is not None else ():
            given = inner.args[0].value if isinstance(inner, cst.Call) and inner.args else None
            if (
                isinstance(inner, cst.Call)
                and anatomy.is_call_to(inner, {"torch.manual_seed"})
                and isinstance(given, cst.Name)
                and given.value in anatomy.graph.parameters_of(helper)  # type: ignore[arg-type]
            ):
                bound = anatomy.graph.bound_argument(seed, helper, given.value)  # type: ignore[arg-type]
                if bound is not None:
                    seeds.append(bound)
    last = seeds[-1] if seeds else None
    if not isinstance(last, cst.Name):
        return ""  # a seed the process takes once (`args.seed`, a number): one order a run
    if scope is not None and last.value in anatomy.graph.parameters_of(scope):
        return f", seed={last.value}"
    if any(  # `for seed in args.seeds: set_seed(seed); loader = DataLoader(...)` (round-48
        # audit E seeds: every seed's run read the same orders)
        kind == "loop"
        and isinstance(loop, cst.For)
        and anatomy.function_of(loop) is scope
        and any(is_name(target, last.value) for target in walk(loop.target))
        for loop, kind in anatomy.graph.loops_around(call)
    ):
        return f", seed={last.value}"
    return ""


def none_sampler(anatomy: Anatomy, loader: Loader) -> tuple[cst.Name, bool] | None:
    """`train_sampler = None`, then `DataLoader(train_dataset, shuffle=(train_sampler is None),
    sampler=train_sampler)`: pytorch/examples' imagenet layout with its distributed branch
    taken out (CutMix-PyTorch's ImageNet loader; corpus, session 21). The `None` becomes
    `DistributedSampler(train_dataset, shuffle=<what the loader shuffled>)` and the test
    turns `shuffle` off by itself. The `None`, and whether the loader shuffled."""
    call = loader.call
    passed = anatomy.loaders.argument(call, "sampler") or []
    if len(passed) != 1 or anatomy.loaders.argument(call, "batch_sampler"):
        return None
    given = passed[0].value
    scope = anatomy.function_of(call)
    origins = (
        [value for value, _ in anatomy.values.values_of(given.value, scope)]
        if isinstance(given, cst.Name)
        else []
    )
    dataset = call_arg(call, 0, "dataset")
    if not (
        isinstance(given, cst.Name)
        and len(origins) == 1
        and is_name(origins[0], "None")
        and dataset is not None
        and isinstance(dataset.value, cst.Name)
        and all(
            anatomy.precedes(value, origins[0])
            for value, _ in anatomy.values.values_of(dataset.value.value, scope)
        )
    ):
        return None
    unset = origins[0]
    assert isinstance(unset, cst.Name)
    shuffle = call_arg(call, 2, "shuffle")
    if shuffle is None:
        return unset, False
    test = shuffle.value
    if (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, cst.Is)
        and is_name(test.left, given.value)
        and is_name(test.comparisons[0].comparator, "None")
    ):
        return unset, True
    return None


def batched_sampler_call(anatomy: Anatomy, loader: Loader) -> cst.Call | None:
    """The `BatchSampler(...)` the loader is given directly, made in one place, as its
    `batch_sampler=` or as its `sampler=` with `batch_size=None`."""
    if loader.batched_by is None:
        return None
    passed = anatomy.loaders.argument(loader.call, loader.batched_by) or []
    other = "sampler" if loader.batched_by == "batch_sampler" else "batch_sampler"
    if len(passed) != 1 or not passed[0].direct or anatomy.loaders.argument(loader.call, other):
        return None
    batches = anatomy.values.origins(passed[0].value, anatomy.function_of(loader.call))
    if len(batches) != 1 or not isinstance(batches[0], cst.Call):
        return None
    return batches[0] if anatomy.is_call_to(batches[0], BATCH_SAMPLERS) else None


def batched_sampler(anatomy: Anatomy, loader: Loader) -> cst.Call | None:
    """The `RandomSampler(dataset)` (or `SequentialSampler`) inside the loader's
    `batch_sampler=BatchSampler(sampler, batch_size, drop_last=True)` (torchvision's
    detection reference), or its `sampler=BatchSampler(...)` with `batch_size=None` (a
    dataset whose `__getitem__` takes a list of indices), each made in one place, the batch
    sampler given directly: a DistributedSampler takes the inner one's place, as torchvision
    does under DDP."""
    batch = batched_sampler_call(anatomy, loader)
    inner = call_arg(batch, 0, "sampler") if batch is not None else None
    if batch is None or inner is None:
        return None
    made = anatomy.values.origins(inner.value, anatomy.function_of(batch))
    if len(made) != 1 or not isinstance(made[0], cst.Call):
        return None
    sampler = made[0]
    if not anatomy.is_call_to(sampler, tuple(PLAIN_SAMPLERS)) or len(sampler.args) != 1:
        return None
    return sampler if call_arg(sampler, 0, "data_source") is not None else None


SUBSET_SAMPLERS = (
    "torch.utils.data.SubsetRandomSampler",
    "torch.utils.data.sampler.SubsetRandomSampler",
)


def subset_sampler(anatomy: Anatomy, loader: Loader) -> cst.Call | None:
    """The `SubsetRandomSampler(train_idx)` the loader is given as `sampler=` (a train/valid
    split by indices of one dataset, Udacity's CIFAR-10 notebook), made with the indices
    alone, in the loader's function, after the loader's dataset (a name) is last bound: a
    DistributedSampler of `Subset(dataset, train_idx)` takes its place, and the loader reads
    that subset (`sampler.dataset`)."""
    made = _given_sampler(anatomy, loader)
    if made is None or not anatomy.is_call_to(made, SUBSET_SAMPLERS):
        return None
    dataset = call_arg(loader.call, 0, "dataset")
    scope = anatomy.function_of(loader.call)
    passed = anatomy.loaders.argument(loader.call, "sampler") or []
    keyword = made.args[0].keyword if len(made.args) == 1 else None
    if (
        len(made.args) != 1
        or (keyword is not None and keyword.value != "indices")
        # named, so the loader can read it; or made inline of indices read twice alike
        # (`sampler=SubsetRandomSampler(range(NUM_TRAIN))`, round-24 audit B cs231n)
        or not (isinstance(passed[0].value, cst.Name) or _pure_indices(made.args[0].value))
        or dataset is None
        or not isinstance(dataset.value, cst.Name)
        or anatomy.function_of(made) is not scope
        or not (anatomy.precedes(made, loader.call) or anatomy.inside(made, loader.call))
    ):
        return None
    name = dataset.value.value
    bound = [
        node
        for node in anatomy.assigns
        if anatomy.function_of(node) is scope
        and any(dotted(target.target) == name for target in node.targets)
    ]
    # a parameter of the function is bound before it runs (`def run_fold(fold, tr_idx,
    # va_idx, dataset, args)`, round-49 audit B kfold_linear_sched, refused)
    given = scope is not None and name in anatomy.graph.parameters_of(scope)
    if not (bound or given) or not all(anatomy.precedes(node, made) for node in bound):
        return None
    return made


def _sample_the_subset(
    plan: EditPlan, anatomy: Anatomy, loader: Loader, made: cst.Call, importer: Importer
) -> None:
    """`SubsetRandomSampler(idx)` becomes `DistributedSampler(Subset(dataset, idx),
    shuffle=True)` and the loader reads `<sampler>.dataset`, the subset it indexes."""
    dataset = call_arg(loader.call, 0, "dataset")
    assert dataset is not None
    sampler_name = distributed_sampler_name(anatomy, made, importer)
    importer.add_import("torch.utils.data", "Subset")
    indices = source_text(made.args[0].value)
    sampler = cst.parse_expression(
        f"{sampler_name}(Subset({source_text(dataset.value)}, {indices}), shuffle=True)"
    )
    plan.replace(made, lambda _: sampler)
    passed = anatomy.loaders.argument(loader.call, "sampler") or []
    if isinstance(passed[0].value, cst.Name):
        given = f"{source_text(passed[0].value)}.dataset"
    else:  # made inline: the loader reads the same subset of its own
        given = f"Subset({source_text(dataset.value)}, {indices})"
    plan.replace(dataset.value, lambda _: cst.parse_expression(given))


def _pure_indices(indices: cst.BaseExpression) -> bool:
    """Indices that are the same each time they are read: a name, `range(...)` or
    `list(range(...))` of names and numbers."""
    if isinstance(indices, cst.Name):
        return True
    if isinstance(indices, cst.Call) and is_name(indices.func, "list") and len(indices.args) == 1:
        indices = indices.args[0].value
    return (
        isinstance(indices, cst.Call)
        and is_name(indices.func, "range")
        and all(_plain(arg.value) for arg in indices.args)
    )


def _plain(value: cst.BaseExpression) -> bool:
    """A number, a name, `args.n`, or arithmetic of them: read twice, the same."""
    if isinstance(value, cst.Integer | cst.Name):
        return True
    if isinstance(value, cst.Attribute):
        return dotted(value) is not None
    if isinstance(value, cst.BinaryOperation):
        return _plain(value.left) and _plain(value.right)
    return False


def own_sampler(anatomy: Anatomy, loader: Loader) -> OwnSampler | None:
    """The loader's `sampler=` or `batch_sampler=`, given directly and made in one place by a
    class of the script's own (or of another file of its project) whose `__iter__` ends (a
    bucketing batch sampler, a balanced sampler) or yields forever (Detectron2's
    TrainingSampler)."""
    given = [
        (keyword, passed)
        for keyword in SAMPLER_ARGUMENTS
        for passed in anatomy.loaders.argument(loader.call, keyword) or []
    ]
    if len(given) != 1 or not given[0][1].direct or not isinstance(given[0][1].where, cst.Arg):
        return None
    keyword, passed = given[0]
    origins = anatomy.values.origins(passed.value, anatomy.function_of(loader.call))
    if len(origins) != 1 or not isinstance(origins[0], cst.Call):
        return None
    name = dotted(origins[0].func)
    made = anatomy.classes.get(name) if name is not None else None
    if made is None:  # a sampler class of another file (round-34 audit C's sampler.py)
        found = anatomy.project.class_made(origins[0])
        made = found[0] if found is not None else None
    passes = _passes(made) if made is not None else None
    if made is None or passes is None:
        return None
    assert isinstance(passed.where, cst.Arg)
    return OwnSampler(keyword, passed.where, made.name.value, endless=passes == "endless")


@dataclass(frozen=True)
class OwnSampler:
    """A sampler of the script's own class given to a loader: the keyword it is given as,
    the argument, the class's name, and whether its `__iter__` yields forever."""

    keyword: str
    given: cst.Arg
    made: str
    endless: bool


def _passes(made: cst.ClassDef) -> str | None:
    """ "ends" for a class with `__len__` whose `__iter__` runs out; "endless" for one whose
    `__iter__`, or a method of the class it calls (Detectron2's TrainingSampler: `yield from
    islice(self._infinite_indices(), ...)`), loops `while True`, cycles or counts with
    itertools; None otherwise."""
    found = {function.name.value: function for function in methods(made)}
    passes = found.get("__iter__")
    if passes is None:
        return None
    called = {
        node.func.attr.value
        for node in walk(passes)
        if isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and is_name(node.func.value, "self")
    }
    for function in [passes, *(found[name] for name in sorted(called) if name in found)]:
        for node in walk(function):
            if isinstance(node, cst.While) and (
                is_name(node.test, "True") or isinstance(node.test, cst.Integer)
            ):
                return "endless"
            if isinstance(node, cst.Call) and dotted(node.func) in ENDLESS:
                return "endless"
    return "ends" if "__len__" in found else None


ENDLESS = {"cycle", "count", "itertools.cycle", "itertools.count", "repeat", "itertools.repeat"}


def _given_sampler(anatomy: Anatomy, loader: Loader) -> cst.Call | None:
    """The one call that makes the loader's `sampler=` (and no `batch_sampler=`)."""
    passed = anatomy.loaders.argument(loader.call, "sampler") or []
    if len(passed) != 1 or anatomy.loaders.argument(loader.call, "batch_sampler"):
        return None
    origins = anatomy.values.origins(passed[0].value, anatomy.function_of(loader.call))
    return origins[0] if len(origins) == 1 and isinstance(origins[0], cst.Call) else None


def _replace_sampler(plan: EditPlan, anatomy: Anatomy, made: cst.Call, importer: Importer) -> None:
    shuffle = next(
        value
        for name, value in PLAIN_SAMPLERS.items()
        if name in anatomy.qualified_names(made.func)
    )
    sampler_name = distributed_sampler_name(anatomy, made, importer)
    dataset = cst.Module([]).code_for_node(made.args[0].value)
    sampler = cst.parse_expression(f"{sampler_name}({dataset}, shuffle={shuffle})")
    plan.replace(made, lambda _: sampler)


def _shuffle_dict(anatomy: Anatomy, call: cst.Call) -> cst.Name | None:
    """The `**name` dict that may hold the loader's `shuffle` (pytorch/examples' mnist sets it
    in `cuda_kwargs`, merged into `train_kwargs`), when nothing reads the dict after the
    loader is made: the sampler can then take `shuffle` out of it (`name.pop("shuffle",
    False)`). None when `shuffle` is passed otherwise too, or the dict is read again."""
    loaders = anatomy.loaders
    scope = anatomy.function_of(call)
    holders = []
    for arg in call.args:
        if arg.star != "**":
            continue
        entries = loaders.dict_entries(arg.value, scope) or []
        if any(key == "shuffle" for key, _ in entries):
            holders.append(arg.value)
    direct = any(passed.direct for passed in loaders.argument(call, "shuffle") or [])
    if direct or len(holders) != 1 or not isinstance(holders[0], cst.Name):
        return None
    return None if loaders.read_after(holders[0]) else holders[0]


def _names_value(expr: cst.BaseExpression) -> bool:
    """`data`, `self.data`, `datasets["train"]`, `splits[phase]`: an expression that reads a
    value without computing one, so the sampler may spell it again."""
    if isinstance(expr, cst.Name | cst.Attribute):
        return dotted(expr) is not None
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
        key = expr.slice[0].slice
        return (
            _names_value(expr.value)
            and isinstance(key, cst.Index)
            and isinstance(key.value, cst.Name | cst.SimpleString | cst.Integer)
        )
    return False


def _in_own_scope(anatomy: Anatomy, node: cst.CSTNode) -> bool:
    """Whether `node` sits in a comprehension or lambda, whose variables no statement sees."""
    return any(
        isinstance(
            ancestor, cst.ListComp | cst.SetComp | cst.DictComp | cst.GeneratorExp | cst.Lambda
        )
        for ancestor in anatomy.ancestors(node)
    )


def distributed_sampler_name(anatomy: Anatomy, user: cst.CSTNode, importer: Importer) -> str:
    """The name `user` can call DistributedSampler by: the script's own import, else
    `DistributedSampler`, imported."""
    name = imported_sampler(anatomy, user)
    if name is None:
        name = "DistributedSampler"
        importer.add_import("torch.utils.data", "DistributedSampler")
    return name


def imported_sampler(anatomy: Anatomy, user: cst.CSTNode) -> str | None:
    """The name a module-level `from torch.utils.data[.distributed] import DistributedSampler
    [as ...]` binds for `user`, if the script has one."""
    at_module_level = anatomy.function_of(user) is None
    for line in anatomy.module.body:
        if not isinstance(line, cst.SimpleStatementLine):
            continue
        if at_module_level and not anatomy.precedes(line, user):
            break
        for small in line.body:
            if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                continue
            if small.relative or small.module is None:
                continue
            module = cst.Module([]).code_for_node(small.module)
            for alias in small.names:
                if f"{module}.{cst.Module([]).code_for_node(alias.name)}" in SAMPLER:
                    return alias.evaluated_alias or alias.evaluated_name
    return None


def before_double_star(call: cst.Call) -> cst.Call:
    """`call` with its last argument moved before its `**kwargs`, where people write it."""
    stars = [index for index, arg in enumerate(call.args) if arg.star == "**"]
    if not stars or stars[0] == len(call.args) - 1:
        return call
    args = list(call.args)
    last = args.pop()
    first_star = stars[0]
    comma = args[first_star - 1].comma if first_star > 0 else cst.MaybeSentinel.DEFAULT
    if not isinstance(comma, cst.Comma):
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    args.insert(first_star, last.with_changes(comma=comma))
    args[-1] = args[-1].with_changes(comma=last.comma)
    return call.with_changes(args=args)


def without_keyword(call: cst.Call, keyword: str) -> cst.Call:
    """`call` without its `keyword=` argument; the comma before a dropped last one goes too."""
    args = [arg for arg in call.args if not (arg.keyword and arg.keyword.value == keyword)]
    if len(args) == len(call.args) or not args:
        return call.with_changes(args=args)
    if call.args[-1].keyword is not None and call.args[-1].keyword.value == keyword:
        args[-1] = args[-1].with_changes(comma=call.args[-1].comma)
    return call.with_changes(args=args)


# Calls that keep the order of what they are given: a set's order becomes theirs.
ORDERING = {"list", "tuple", "enumerate"}
SET_OPERATORS = (cst.Subtract, cst.BitOr, cst.BitAnd, cst.BitXor)


def orders_a_set(anatomy: Anatomy, call: cst.Call) -> bool:
    """`list(set(...))`, `tuple({...})`, `enumerate(set(a) - set(b))`, one argument."""
    if not (isinstance(call.func, cst.Name) and call.func.value in ORDERING):
        return False
    if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        return False
    if anatomy.qualified_names(call.func) - {f"builtins.{call.func.value}"}:
        return False  # the script's own `list`
    holder = anatomy.parent(anatomy.parent(call) or call)
    if isinstance(holder, cst.Call) and is_name(holder.func, "sorted"):
        return False  # `sorted(list(set(text)))`: ordered already
    return _is_set(anatomy, call.args[0].value, anatomy.function_of(call))


def _is_set(
    anatomy: Anatomy, expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int = 0
) -> bool:
    """A set display or comprehension, `set(...)`, set operations on one, or a name only
    ever given one (`vocab = set(words)`, then `enumerate(vocab)`: round-11 audit p04)."""
    if isinstance(expr, cst.SetComp | cst.Set):
        return True
    if isinstance(expr, cst.Call):
        return is_name(expr.func, "set") or is_name(expr.func, "frozenset")
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, SET_OPERATORS):
        return _is_set(anatomy, expr.left, scope, depth) or _is_set(
            anatomy, expr.right, scope, depth
        )
    if isinstance(expr, cst.Name) and depth < 3:
        values = anatomy.values.values_of(expr.value, scope)
        return bool(values) and all(
            _is_set(anatomy, value, where, depth + 1) for value, where in values
        )
    return False


def loops_over_a_set(anatomy: Anatomy, loop: cst.For | cst.CompFor) -> bool:
    """`for w in vocab:` (or `[... for w in vocab]`) with `vocab` a set: the order the body
    numbers or lists its items in differs in every process (round-14 audit m02: `for w in
    words: word_to_id[w] = len(word_to_id)`). A set comprehension's order does not matter."""
    if isinstance(loop, cst.CompFor) and isinstance(anatomy.parent(loop), cst.SetComp):
        return False
    if isinstance(loop.iter, cst.Call) and is_name(loop.iter.func, "sorted"):
        return False
    return _is_set(anatomy, loop.iter, anatomy.function_of(loop))


def sort_the_loop(plan: EditPlan, loop: cst.For | cst.CompFor) -> None:
    """`for w in vocab:` becomes `for w in sorted(vocab):`."""
    plan.replace(loop.iter, _sorted)


def sort_the_set(plan: EditPlan, call: cst.Call) -> None:
    """`list(s)` becomes `sorted(s)`; `enumerate(s)`, `tuple(s)` get `sorted(s)` inside."""
    if is_name(call.func, "list"):
        plan.replace(call, lambda node: node.with_changes(func=cst.Name("sorted")))
    else:
        plan.replace(call.args[0].value, _sorted)


def _sorted(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.BaseExpression)
    return cst.Call(cst.Name("sorted"), [cst.Arg(node)])


def family_seeded(anatomy: Anatomy, family: str, before: cst.CSTNode) -> bool:
    """A seed of `family`'s global generator with a value every process has alike, run
    before `before`."""
    return any(
        anatomy.streams.seed_family(call) == family
        and bool(call.args)
        and per_process_draw(anatomy, call.args[0].value) is None
        and runs_before(anatomy, call, before)
        and surely_runs(anatomy, call, anatomy.graph)  # not `if args.seed is not None:`
        for call in anatomy.calls
    )


def runs_before(anatomy: Anatomy, node: cst.CSTNode, later: cst.CSTNode) -> bool:
    """`node` runs first: compared where both are reached in one function (see
    `runs_first`)."""
    return runs_first(anatomy, anatomy.graph, node, later)
