"""Batches drawn at random every step, without a DataLoader.

nanoGPT's `get_batch` (`ix = torch.randint(len(data) - block_size, (batch_size,))`), the
char-RNN tutorials' `random_training_set()` (`random.randint(...)`), `np.random.choice` over
an array: each step of the training loop draws its samples afresh, with replacement, and
the number of steps does not depend on the data's size. There is no epoch to shard: the
distributed equivalent of a DistributedSampler is a stream of draws of its own in every
process, which means random generators seeded differently in every process. torch's default
generator started from one fixed seed in every process in older releases (it draws one
from the OS in torch 2.13), so torch's draws are always given one; Python's and NumPy's
global generators start from OS entropy, so only a script that seeds them needs it.

A loop that walks over the data in order (`for i in range(0, len(x), bs)`, `x[i]`) is
not such a stream: it makes passes, and those must be sharded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import libcst as cst

from ddpify.analysis.api import IN_PLACE_DRAWS, SEEDS
from ddpify.analysis.calls import CallGraph
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.loaders import Loader
from ddpify.analysis.project import Project, draw_family, helper_draws
from ddpify.analysis.script import TrainingScript
from ddpify.analysis.tree import (
    call_arg,
    counted_range,
    dotted,
    is_method_call,
    is_name,
    methods,
    walk,
)
from ddpify.analysis.values import MAX_STEPS

# Calls that draw sample indices (or samples), and the generator family they draw from.
DRAWS = {
    "torch.randint": "torch",
    "random.randint": "random",
    "random.randrange": "random",
    "random.choice": "random",
    "random.choices": "random",
    "random.sample": "random",
    "numpy.random.randint": "numpy",
    "numpy.random.choice": "numpy",
}
# Calls that draw samples themselves (a toy distribution's points), by family.
SAMPLE_MAKERS = {
    **{f"torch.{name}": "torch" for name in ("rand", "randn", "normal", "randint")},
    **{f"numpy.random.{name}": "numpy" for name in ("rand", "randn", "normal", "uniform")},
}
# torch's draws while training (noise, timesteps, masks), functions and in-place methods.
TORCH_DRAWS = set(
    {
        "torch.randn", "torch.rand", "torch.randint", "torch.randn_like", "torch.rand_like",
        "torch.randint_like", "torch.normal", "torch.randperm", "torch.multinomial",
        "torch.bernoulli", "torch.poisson",
    }
)  # fmt: skip
# The global generators' draws of NumPy (`np.random.<name>`) and Python (`random.<name>`).
NUMPY_DRAWS = frozenset(
    {"rand", "randn", "randint", "random", "random_sample", "choice", "permutation", "shuffle",
     "beta", "uniform", "normal", "binomial", "poisson", "exponential", "gamma", "dirichlet",
     "multinomial", "lognormal", "laplace", "standard_normal", "integers"}
)  # fmt: skip
PY_DRAWS = frozenset(
    {"random", "randint", "randrange", "choice", "choices", "sample", "shuffle", "uniform",
     "gauss", "normalvariate", "betavariate", "expovariate", "triangular"}
)  # fmt: skip
# Families whose global generator may start alike in every process (torch's fixed default
# seed before 2.x releases that draw it from the OS): seeded per process either way.
ALIKE_UNSEEDED = {"torch"}
# Datasets made of a part of another one: their items are that one's.
PARTS = ("torch.utils.data.random_split", "torch.utils.data.Subset")


@dataclass
class RandomBatches:
    """A training loop that draws its batches at random on every pass."""

    loop: cst.For | cst.While  # one step per pass
    draws: list[cst.Call]
    families: set[str]
    # The families' seeding calls, by family (`torch.manual_seed(1337)`).
    seeds: dict[str, list[cst.Call]] = field(default_factory=dict)
    # Where a per-process seed goes: before the outermost loop around `loop`, in its block.
    anchor: cst.BaseStatement | None = None
    # Drawn out of the loop's sight (a module's forward, the dataset's `__getitem__`).
    hidden: bool = False
    # A draw that picks which loader the step reads (`task = random.choices(tasks)[0]`, then
    # `next(iters[task])`): it must stay alike in every process, which a seed per process of
    # its generator would undo.
    keyed_choice: cst.Call | None = None

    def needs_seed(self, family: str) -> bool:
        return family in ALIKE_UNSEEDED or bool(self.seeds.get(family))


class Streams:
    """Training loops fed by random draws instead of a DataLoader."""

    def __init__(self, index: SourceIndex, graph: CallGraph, script: TrainingScript) -> None:
        self.index = index
        self.graph = graph
        self.script = script

    @cached_property
    def random_batches(self) -> RandomBatches | None:
        """The training loop that draws its batches at random, when every backward pass
        runs in one such loop."""
        return self._stream(self._draws)

    @cached_property
    def sampled_batches(self) -> RandomBatches | None:
        """The training loop that makes its samples afresh every step with a function of
        the script's own that reads no data (`x = sample_moons(batch_size)`, a toy
        distribution, round-27 audit A realnvp_two_moons), when every backward pass runs
        in one such loop. Asked only when there are no samples to split."""
        return self._stream(lambda loop: _sampled(self, loop))

    def _stream(
        self, draws_of: Callable[[cst.For | cst.While], list[cst.Call]]
    ) -> RandomBatches | None:
        found: RandomBatches | None = None
        for backward in self.script.backward_calls:
            chain = self.graph.loops_around(backward)
            loops = [node for node, kind in chain if kind == "loop"]
            if not loops:
                return None
            loop = loops[0]
            assert isinstance(loop, cst.For | cst.While)
            if found is not None and found.loop is loop:
                continue
            if found is not None:
                return None
            anchor: cst.BaseStatement | None
            if _walks_the_data(self, loop):
                drawn = _drawn_before(self, loop)
                if drawn is None:
                    return None
                draws, anchor = drawn
            else:
                draws = draws_of(loop)
                anchor = _anchor(self, loop, draws)
            if not draws:
                return None
            families = {self._family(draw) or self._family(draw, SAMPLE_MAKERS) for draw in draws}
            found = RandomBatches(loop, draws, {family for family in families if family})
            found.anchor = anchor
        if found is not None:
            for call in self.index.calls:
                family = self.seed_family(call)
                if family in found.families and call.args:
                    found.seeds.setdefault(family, []).append(call)
        return found

    @cached_property
    def drawn_items(self) -> list[RandomBatches]:
        """Training loaders whose dataset draws each item at random and ignores the index it
        is given (a char-RNN dataset cutting a random window out of the corpus in
        `__getitem__`): the sampler's shard of indices changes nothing, every process would
        draw the same items. Like random batches, they need a stream of their own per
        process."""
        found: list[RandomBatches] = []
        loops = [(loop.batch_loop, loop.loader) for loop in self.script.train_loops]
        for batch_loop, loader in [*loops, *self.step_loops()]:
            if loader is None or any(stream.loop is batch_loop for stream in found):
                continue  # (a step loop reading two such loaders: one stream, seeded once)
            owner = self.dataset_class(loader)
            getitem = (
                next((m for m in methods(owner) if m.name.value == "__getitem__"), None)
                if owner is not None
                else None
            )
            if getitem is None or len(getitem.params.params) != 2:
                continue
            index = getitem.params.params[1].name.value
            if any(is_name(node, index) for node in walk(getitem.body)):
                continue  # the index picks the item; the draws only vary it (augmentation)
            draws = [
                node
                for node in walk(getitem.body)
                if isinstance(node, cst.Call) and self._family(node) is not None
            ]
            if not draws:
                continue
            families = {family for draw in draws if (family := self._family(draw))}
            stream = RandomBatches(batch_loop, draws, families | {"torch"})
            stream.anchor = _anchor(self, batch_loop)
            for call in self.index.calls:
                family = self.seed_family(call)
                if family in stream.families and call.args:
                    stream.seeds.setdefault(family, []).append(call)
            found.append(stream)
        return found

    @cached_property
    def training_draws(self) -> list[RandomBatches]:
        """Training loops over a loader that draw from torch's generator on every step
        (a GAN's noise, a diffusion model's timesteps): started from one seed, every
        process would draw the same noise for its different data. Each needs a stream of
        its own per process; the dataset's drawn items (`drawn_items`) are seeded there
        already."""
        return _training_draws(self, over_loaders=True)

    @cached_property
    def split_draws(self) -> list[RandomBatches]:
        """The same for training loops without a loader, over tensors each process takes its
        part of (round-44 audit A manual_perm: `xb = X[idx] + noise * np.random.randn(...)`
        drew the same noise on every rank)."""
        return _training_draws(self, over_loaders=False)

    def step_loops(self) -> list[tuple[cst.For | cst.While, Loader]]:
        """Loops of steps that take their batches with `next(...)` from the training loaders
        (`while self.step < self.train_num_steps: data = next(self.dl)`, lucidrains'
        trainers, round-14 audit s07), as loops over each of those loaders."""
        loaders = self.script.train_loaders
        # (a batch loop that reads no loader itself: `for step in range(n): x, y = next(it)`,
        # round-16 audit s42)
        batch_loops = {
            id(loop.batch_loop) for loop in self.script.train_loops if loop.loader is not None
        }
        found: dict[int, tuple[cst.For | cst.While, Loader]] = {}  # by loader
        for backward in self.script.backward_calls:
            chain = self.graph.loops_around(backward)
            if not chain or chain[0][1] != "loop" or id(chain[0][0]) in batch_loops:
                continue
            loop = chain[0][0]
            assert isinstance(loop, cst.For | cst.While)
            if any(
                isinstance(node, cst.Call) and is_name(node.func, "next") for node in walk(loop)
            ):
                # (several: FixMatch's labeled and unlabeled iterators, round-22 audit A)
                for loader in loaders:
                    found[id(loader)] = (loop, loader)
        return list(found.values())

    def drawn_from(self, call: cst.Call) -> str | None:
        """The generator family a call draws from while training: torch's (`torch.randn`,
        `x.normal_()`), NumPy's global one (`np.random.beta`) or Python's (`random.random`)."""
        if self.index.is_call_to(call, TORCH_DRAWS) or is_method_call(call, *IN_PLACE_DRAWS):
            return "torch"
        if not self.index.may_name(call, set(PY_DRAWS | NUMPY_DRAWS)):
            return None
        for name in self.index.qualified_names(call.func):
            head, _, last = name.rpartition(".")
            if head == "numpy.random" and last in NUMPY_DRAWS:
                return "numpy"
            if head == "random" and last in PY_DRAWS:
                return "random"
        return None

    def _in_workers(self, loader: Loader) -> bool:
        """Whether the loop's loader loads in worker processes (`num_workers` not 0)."""
        workers = call_arg(loader.call, 5, "num_workers")
        return workers is not None and not (
            isinstance(workers.value, cst.Integer) and workers.value.value == "0"
        )

    def _seeds(self, family: str) -> list[cst.Call]:
        return [
            call
            for call in self.index.calls
            if self.seed_family(call) == family or family in self._seeded_by_helper(call)
        ]

    def _seeded_by_helper(self, call: cst.Call) -> set[str]:
        """The families a function of another project file seeds with what it is given
        (`utils.set_seed(seed)`: `np.random.seed(seed)`, round-50 audit E c07_np_aug_fastval:
        seeded there, numpy's draws in `__getitem__` were the same in every process)."""
        project = self.script.project
        if not call.args or project is None or not project.may_be_helper(call):
            return set()
        helper = project.helper(call)
        if helper is None:
            return set()
        return {
            SEEDS[name]
            for node in walk(helper.function.body)
            if isinstance(node, cst.Call)
            for name in helper.index.qualified_names(node.func)
            if name in SEEDS
        }

    def _drawing_methods(self, loader: Loader) -> list[cst.FunctionDef]:
        """Where a training step draws from torch's generator out of sight of its loop: the
        `forward` of the script's modules (a VAE's `reparameterize`, round-8 audit a02) and
        the training dataset's `__getitem__` (random views of each item, SimCLR's
        augmentations, a03), with what they call."""
        found = []
        for owner in self.index.classes.values():
            # and the script's transforms (`__call__`: SimCLR's two random views of an item,
            # round-14 audit s14)
            found += [m for m in methods(owner) if m.name.value in ("forward", "__call__")]
        dataset_class = self.dataset_class(loader)
        if dataset_class is not None:
            found += [m for m in methods(dataset_class) if m.name.value == "__getitem__"]
        # and the loader's `collate_fn` of the script's own (random crops of a batch,
        # round-19 audit s59)
        collate = call_arg(loader.call, 7, "collate_fn")
        if collate is not None and isinstance(collate.value, cst.Name):
            found += self.graph.defined(collate.value.value)
        return found

    def _drawn_by_helpers(self, loop: cst.For | cst.While) -> set[str]:
        """The generators the step's helpers of other project files draw from (a GAN's
        noise in steps.py's `d_step(...)`, round-31 audit C)."""
        project = self.script.project
        if project is None or project.path is None:
            return set()
        found: set[str] = set()
        for node in walk(loop.body):
            if isinstance(node, cst.Call) and not self.graph.calls_script(node):
                helper = project.helper(node)
                if helper is not None:
                    found |= helper_draws(helper)
        return found

    def _foreign_families(self, loader: Loader) -> set[str]:
        """The generators drawn from by classes of another project file the training
        dataset is made of: the dataset's and its transforms' (dataset.py's `PatchDataset`,
        `random.random()` in its `__getitem__`, with transforms.py's `RandomCrop`: round-31
        audit C, both ranks cropped alike). Read from the text of its methods but `__init__`."""
        project = self.script.project
        if project is None or project.path is None or not loader.call.args:
            return set()
        scope = self.index.function_of(loader.call)
        made = self._made_by(loader.call.args[0].value, scope)
        if made is None:
            return set()
        calls = [node for node in walk(made) if isinstance(node, cst.Call)]
        for node in walk(made):  # `PatchDataset(root, transform=train_tf)`: what made it
            if isinstance(node, cst.Name) and node is not made.func:
                for value, _ in self.script.values.values_of(node.value, scope):
                    calls += [inner for inner in walk(value) if isinstance(inner, cst.Call)]
        families: set[str] = set()
        owners = _classes_made(project, calls)
        for owner in owners:
            for method in methods(owner):
                if method.name.value not in ("__init__", "__len__"):  # what it draws per item
                    families |= {
                        family for node in walk(method) if (family := draw_family(node)) is not None
                    }
        return families

    def dataset_class(self, loader: Loader) -> cst.ClassDef | None:
        """The script's own class the loader's dataset is made from (through the functions
        it is passed to), if it is one."""
        dataset = loader.call.args[0].value if loader.call.args else None
        scope = self.index.function_of(loader.call)
        made = self._made_by(dataset, scope)
        for _ in range(MAX_STEPS):
            # a part of it (`train_ds, val_ds = random_split(ds, ...)`, `Subset(ds, idx)`:
            # round-43 audit D split_workers, the augmentation its `__getitem__` draws)
            if made is None or not self.index.is_call_to(made, PARTS) or not made.args:
                break
            made = self._made_by(made.args[0].value, self.index.function_of(made))
        return self.index.classes.get(dotted(made.func) or "") if made is not None else None

    def _made_by(
        self, dataset: cst.BaseExpression | None, scope: cst.FunctionDef | None, depth: int = 0
    ) -> cst.Call | None:
        if isinstance(dataset, cst.Call):
            return dataset
        name = dotted(dataset) if dataset is not None else None
        if scope is not None and name in self.graph.parameters_of(scope) and depth < MAX_STEPS:
            # `def build_dataloader(dataset, ...)`, called `build_dataloader(Signals(128), ...)`
            passed = [
                self._made_by(
                    self.graph.bound_argument(site, scope, name),
                    self.index.function_of(site),
                    depth + 1,
                )
                for site in self.graph.call_sites(scope)
            ]
            return passed[0] if len(passed) == 1 else None
        owner = self.index.class_of(scope) if scope is not None else None
        for assign in self.index.assigns:
            where = self.index.function_of(assign)
            if name is None or len(assign.targets) != 1:
                continue
            target, value = assign.targets[0].target, assign.value
            if (
                name.startswith("self.")
                and where is not None
                and where is not scope
                and owner is not None
                and self.index.class_of(where) is owner
                and dotted(target) == name
                and depth < MAX_STEPS
            ):
                # `self.train_dataset = train_dataset` in `__init__`, read by another method
                # (minGPT's Trainer, round-22 audit A mingpt_trainer_c)
                return self._made_by(value, where, depth + 1)
            if where is not scope:
                continue
            if dotted(target) == name and isinstance(value, cst.Call):
                return value
            if (  # `train_ds, val_ds = random_split(ds, [n, m])`: a part of `ds` each
                isinstance(target, cst.Tuple)
                and isinstance(value, cst.Call)
                and self.index.is_call_to(value, PARTS)
                and any(dotted(element.value) == name for element in target.elements)
            ):
                return value
            if (  # `train_ds, val_ds = Spots(1600), Spots(320)`
                isinstance(target, cst.Tuple)
                and isinstance(value, cst.Tuple)
                and len(target.elements) == len(value.elements)
            ):
                for element, made in zip(target.elements, value.elements, strict=True):
                    if dotted(element.value) == name and isinstance(made.value, cst.Call):
                        return made.value
        return None

    @cached_property
    def without_loader(self) -> str | None:
        """How a training loop without a DataLoader or random draws gets its data, for the
        refusal: "ordered" (it slices tensors in order, `x[i:i + bs]`), "whole" (every step
        the same whole tensors: full-batch training), "stepped" (a `while` loop walking them
        by a counter of its own, `i += seq_len`), "untraced" (it iterates over something
        not traced to a DataLoader), or None when there is no such loop."""
        for backward in self.script.backward_calls:
            loops = [node for node, kind in self.graph.loops_around(backward) if kind == "loop"]
            if not loops:
                continue
            loop = loops[0]
            assert isinstance(loop, cst.For | cst.While)
            if isinstance(loop, cst.For) and counted_range(loop) is None:
                return "untraced"
            if isinstance(loop, cst.While) and stepping_counter(loop) is not None:
                return "stepped"
            return "ordered" if _walks_the_data(self, loop) else "whole"
        return None

    def _draws(self, loop: cst.For | cst.While) -> list[cst.Call]:
        """The draws a pass of `loop` makes, in it or in the functions it calls."""
        draws: list[cst.Call] = []

        def collect(node: cst.CSTNode) -> bool:
            if isinstance(node, cst.Call) and self._family(node) is not None:
                draws.append(node)
            return False  # look at every node

        self.graph.reaches(loop.body, collect)
        return draws

    def _family(self, call: cst.Call, draws: dict[str, str] = DRAWS) -> str | None:
        if not self.index.may_name(call, {name.rsplit(".", 1)[-1] for name in draws}):
            return None
        for name in self.index.qualified_names(call.func):
            if name in draws:
                return draws[name]
        return None

    def seed_family(self, call: cst.Call) -> str | None:
        """The generator family a call seeds (`torch.manual_seed`: torch), if it seeds one."""
        if not self.index.may_name(call, {"manual_seed", "seed"}):
            return None
        for name in self.index.qualified_names(call.func):
            if name in SEEDS:
                return SEEDS[name]
        return None


def _also_read(streams: Streams, loop: cst.For | cst.While) -> list[Loader]:
    """The other loaders a batch loop takes batches from with `next(...)` (an unlabeled
    loader cycled beside the labeled one, round-42 audit A semisup_cycle: the noise
    its dataset draws in `__getitem__` was alike in every process)."""
    scope = streams.index.function_of(loop)
    found: list[Loader] = []
    for node in walk(loop.body):
        if isinstance(node, cst.Call) and is_name(node.func, "next") and node.args:
            read: cst.BaseExpression = node.args[0].value
            for _ in range(3):  # `it = itertools.cycle(loader)`, `next(it)`
                made = streams.script.loaders.resolve(read, scope)
                values = streams.script.values.values_of(dotted(read) or "", scope)
                if made is not None or len(values) != 1:
                    break
                value = values[0][0]
                read = (
                    value.args[0].value
                    if isinstance(value, cst.Call)
                    and streams.index.is_call_to(value, {"itertools.cycle", "builtins.iter"})
                    and value.args
                    else value
                )
            loader = streams.script.loaders.loader_for(made)
            if loader is not None and loader not in found:
                found.append(loader)
    return found


def _training_draws(streams: Streams, *, over_loaders: bool) -> list[RandomBatches]:
    seeded = {id(stream.loop) for stream in streams.drawn_items}
    found: list[RandomBatches] = []
    loops = [(loop.batch_loop, loop.loader) for loop in streams.script.train_loops]
    readers: dict[int, list[Loader]] = {}  # a step loop's loaders, all of them
    for step_loop, reader in streams.step_loops():
        readers.setdefault(id(step_loop), []).append(reader)
    for batch_loop, loader in [*loops, *streams.step_loops()]:
        if (loader is None) == over_loaders or id(batch_loop) in seeded:
            continue
        draws: dict[str, list[cst.Call]] = {}

        def collect(node: cst.CSTNode, into: dict[str, list[cst.Call]] = draws) -> bool:
            if isinstance(node, cst.Call):
                family = streams.drawn_from(node)
                if family is not None:
                    into.setdefault(family, []).append(node)
            return False  # look at every node

        streams.graph.reaches(batch_loop.body, collect)
        # a draw that picks the loader a step reads stays alike in every process, so
        # every process counts its passes over each loader alike (round-38 audit A
        # multitask_head_per_batch_task_b: the ranks' tasks, then their shards, parted)
        keyed = [
            (family, call)
            for family, calls in draws.items()
            for call in calls
            if _chooses_a_loader(streams, call, batch_loop)
        ]
        for family, call in keyed:
            draws[family].remove(call)
            if not draws[family]:
                del draws[family]
        # Python's and NumPy's generators start from OS entropy: only a script that seeds
        # them draws alike in every process (timm's mixup λ with `np.random.beta`, b05).
        families = {f for f in draws if f == "torch" or streams._seeds(f)}
        in_sight = bool(families)
        # and out of the loop's sight, whatever it draws itself (round-18 audit s13:
        # CutMix's `np.random.beta` in the loop, RandomErasing's `random.uniform` in a
        # transform's `__call__`)
        foreign = streams._drawn_by_helpers(batch_loop)
        read = [loader, *_also_read(streams, batch_loop)] if loader is not None else []
        for each in readers.get(id(batch_loop), read):
            for method in streams._drawing_methods(each):
                streams.graph.reaches(method.body, collect)
            foreign |= streams._foreign_families(each)
        families |= {f for f in [*draws, *foreign] if streams._seeds(f)}
        hidden = bool(families) and not in_sight
        workers = loader is not None and streams._in_workers(loader)
        if (draws or foreign) and workers and streams._seeds("torch"):
            # Loader workers seed NumPy and Python from a base seed drawn from
            # torch's generator: alike on every rank unless torch's is seeded apart
            # too (round-10 audit c12, `num_workers=2`).
            families.add("torch")
        if not families:
            continue
        seeded.add(id(batch_loop))
        drawn = [call for family in sorted(families) for call in draws.get(family, [])]
        stream = RandomBatches(batch_loop, drawn, families, hidden=hidden)
        stream.keyed_choice = next((c for f, c in keyed if f in families), None)
        stream.anchor = _anchor(streams, batch_loop)
        for family in families:
            stream.seeds[family] = streams._seeds(family)
        found.append(stream)
    return found


def _anchor(
    streams: Streams, loop: cst.For | cst.While, draws: Sequence[cst.Call] = ()
) -> cst.BaseStatement | None:
    """The outermost loop around `loop`, through the calls of the function it is in
    (`for epoch in ...: train(epoch)`), or `loop` itself: the statement a per-process
    seed goes before, once (seeded again at every call, each epoch would draw the same
    numbers as the one before: round-8 audit a16). Or, when a statement before it in its
    block draws one of `draws` after the last seed, that statement: nanoGPT's first
    batch, `X, Y = get_batch('train')`, drawn before its loop (round-40 audit B nanogpt:
    the first step trained on the same batch in every process)."""
    outermost: cst.CSTNode = loop
    for node, kind in streams.graph.loops_around(loop):
        if kind == "loop":
            outermost = node
    if not isinstance(outermost, cst.BaseStatement):
        return None
    holder = streams.index.parent(outermost)
    if not draws or not isinstance(holder, cst.IndentedBlock | cst.Module):
        return outermost
    drawn = {id(draw) for draw in draws}
    anchor = outermost
    before = list(holder.body)[: list(holder.body).index(outermost)]
    for statement in reversed(before):
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            continue
        if any(
            isinstance(node, cst.Call) and streams.seed_family(node) is not None
            for node in walk(statement)
        ):
            break
        if streams.graph.reaches(statement, lambda node: id(node) in drawn):
            anchor = statement
    return anchor


def _drawn_before(
    streams: Streams, loop: cst.For | cst.While
) -> tuple[list[cst.Call], cst.BaseStatement] | None:
    """Batches drawn at random before the loop, one per step, and read by its counter:
    PyTorch's chatbot tutorial's `training_batches = [batch2TrainData(voc,
    [random.choice(pairs) for _ in range(batch_size)]) for _ in range(n_iteration)]`,
    then `training_batches[iteration - 1]` (round-27 audit A). The draws, and the
    statement that makes them (a per-process seed goes before it)."""
    if not isinstance(loop, cst.For) or counted_range(loop) is None:
        return None
    counters = {dotted(node) for node in walk(loop.target)} - {None}
    scope = streams.index.function_of(loop)
    draws: list[cst.Call] = []
    statement: cst.BaseStatement | None = None
    for node in walk(loop.body):
        if not isinstance(node, cst.Subscript) or not any(
            dotted(inner) in counters for element in node.slice for inner in walk(element)
        ):
            continue
        made = [
            assign
            for assign in streams.index.assigns
            if streams.index.function_of(assign) is scope
            and len(assign.targets) == 1
            and dotted(assign.targets[0].target) == dotted(node.value)
        ]
        comp = made[0].value if len(made) == 1 else None
        if not (
            isinstance(comp, cst.ListComp)
            and isinstance(comp.for_in.iter, cst.Call)
            and is_name(comp.for_in.iter.func, "range")  # one draw per step, not per sample
            and streams.index.precedes(made[0], loop)
        ):
            return None
        found = [
            call
            for call in walk(comp.elt)
            if isinstance(call, cst.Call) and streams._family(call) is not None
        ]
        if not found:
            return None
        draws += found
        statement = streams.index.statement_of(made[0])
    return (draws, statement) if draws and statement is not None else None


def _chooses_a_loader(streams: Streams, draw: cst.Call, loop: cst.For | cst.While) -> bool:
    """`task = random.choices(tasks, weights)[0]` whose value is the key of what a
    `next(...)` or `iter(...)` in `loop` reads (`next(iters[task])`)."""
    statement = streams.index.parent(draw)
    while statement is not None and not isinstance(statement, cst.Assign):
        if isinstance(statement, cst.BaseStatement):
            return False
        statement = streams.index.parent(statement)
    if statement is None or len(statement.targets) != 1:
        return False
    target = statement.targets[0].target
    if not isinstance(target, cst.Name):
        return False
    name = target.value
    for node in walk(loop.body):
        if (
            isinstance(node, cst.Call)
            and is_name(node.func, "next", "iter")
            and node.args
            and isinstance(node.args[0].value, cst.Subscript)
            and any(is_name(n, name) for element in node.args[0].value.slice for n in walk(element))
        ):
            return True
    return False


def stepping_counter(loop: cst.While) -> cst.AugAssign | None:
    """`i += seq_len` in `while i < train_data.size(0) - 2:` (AWD-LSTM's loop, its stride
    drawn every step), when the loop also slices by `i` or hands it to a function
    (`get_batch(train_data, i, seq_len)`): the counter walks the data."""
    tested = {node.value for node in walk(loop.test) if isinstance(node, cst.Name)}
    for node in walk(loop.body):
        if not (
            isinstance(node, cst.AugAssign)
            and isinstance(node.operator, cst.AddAssign)
            and isinstance(node.target, cst.Name)
            and node.target.value in tested
        ):
            continue
        counter = node.target.value
        for read in walk(loop.body):
            if isinstance(read, cst.SubscriptElement | cst.Arg) and any(
                isinstance(inner, cst.Name) and inner.value == counter for inner in walk(read)
            ):
                return node
    return None


def _walks_the_data(streams: Streams, loop: cst.For | cst.While) -> bool:
    """Whether the loop makes passes over the data in order: it iterates over something
    other than `range(n)`, steps through a range (`range(0, len(x), bs)`), or indexes
    with its own counter (`x[i:i + bs]`)."""
    if isinstance(loop, cst.While):
        return False
    iterable = counted_range(loop)
    counting = isinstance(loop.iter, cst.Call) and streams.index.is_call_to(
        loop.iter, {"itertools.count"}
    )  # `for batch_idx in count(1):` (pytorch/examples regression), an endless counter
    if iterable is None and not counting:
        return True
    if iterable is not None and len(iterable.args) > 2:
        return True
    counters = {dotted(node) for node in walk(loop.target)} - {None}
    for node in walk(loop.body):
        if isinstance(node, cst.SubscriptElement) and any(
            dotted(inner) in counters for inner in walk(node.slice)
        ):
            return True
    return False


def _sampled(streams: Streams, loop: cst.For | cst.While) -> list[cst.Call]:
    """The draws of the script's own functions `loop` calls that make samples from
    nothing but random numbers."""
    draws: list[cst.Call] = []
    for node in walk(loop.body):
        callee = streams.graph.callee(node) if isinstance(node, cst.Call) else None
        if callee is not None and makes_samples(streams.index, streams.graph, callee):
            draws += [
                call
                for call in walk(callee)
                if isinstance(call, cst.Call) and streams._family(call, SAMPLE_MAKERS)
            ]
        # or drawn in the loop itself, into a name the loss is computed from (a PINN's
        # collocation points, `xt_f = torch.rand(n_f, 2, requires_grad=True)`, round-38
        # audit B pinn_collocation_adam_then_lbfgs_b)
        if (
            isinstance(node, cst.Assign)
            and isinstance(node.value, cst.Call)
            and streams._family(node.value, SAMPLE_MAKERS)
            and _read_before_backward(streams, node, loop)
        ):
            draws.append(node.value)
    return draws


def _read_before_backward(streams: Streams, assign: cst.Assign, loop: cst.For | cst.While) -> bool:
    """Whether the one name `assign` binds is read in `loop` after it and before a backward
    pass of the loop: what the step trains on."""
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return False
    name = assign.targets[0].target.value
    backwards = [b for b in streams.script.backward_calls if streams.index.inside(b, loop)]
    return any(
        is_name(node, name)
        and not streams.index.inside(node, assign)
        and streams.index.precedes(assign, node)
        and any(streams.index.precedes(node, backward) for backward in backwards)
        for node in walk(loop.body)
    )


def makes_samples(index: SourceIndex, graph: CallGraph, function: cst.FunctionDef) -> bool:
    """`function` returns what it draws (SAMPLE_MAKERS), and reads no data of the
    script's: only its parameters, its locals and what the script imports or defines."""
    if index.class_of(function) is not None:
        return False
    if not any(
        isinstance(call, cst.Call) and _sample_family(index, call) for call in walk(function)
    ) or not any(isinstance(node, cst.Return) for node in walk(function.body)):
        return False
    own = set(graph.parameters_of(function))
    for node in walk(function.body):
        if isinstance(node, cst.AssignTarget | cst.For | cst.CompFor):
            bound = node.target
            own |= {n.value for n in walk(bound) if isinstance(n, cst.Name)}
    data = {
        dotted(target.target)
        for assign in index.assigns
        if index.function_of(assign) is None
        for target in assign.targets
    }
    return not any(
        isinstance(node, cst.Name)
        and node.value not in own
        and node.value in data
        and not index.is_attribute_name(node)
        for node in walk(function.body)
    )


def _sample_family(index: SourceIndex, call: cst.Call) -> str | None:
    """The generator family a call that makes samples draws from (`torch.randn`: torch)."""
    if not index.may_name(call, {name.rsplit(".", 1)[-1] for name in SAMPLE_MAKERS}):
        return None
    return next(
        (SAMPLE_MAKERS[n] for n in index.qualified_names(call.func) if n in SAMPLE_MAKERS), None
    )


def _classes_made(project: Project, calls: list[cst.Call]) -> list[cst.ClassDef]:
    """The classes of other project files that `calls` make, themselves or through a
    function of one (`transform=build_train_transform()` of transforms.py, returning
    `Compose([RandomHorizontalFlip(0.5), GaussianNoise(0.05)])`: round-36 audit C
    transforms_module_worker_init_fn, both ranks flipped alike)."""
    owners: list[cst.ClassDef] = []
    for call in calls:
        found = project.class_made(call)
        if found is not None:
            owners.append(found[0])
        elif (helper := project.helper(call)) is not None:
            owners += [
                helper.index.classes[name]
                for node in walk(helper.function.body)
                if isinstance(node, cst.Call)
                and (name := dotted(node.func) or "") in helper.index.classes
            ]
    return owners
