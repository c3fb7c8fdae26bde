"""The anatomy of a script: the one analysis of a parsed module that every rule reads.

`Anatomy` is the module's `SourceIndex` (navigation, names, positions) with the providers
built on it, each made the first time a rule asks for it, so a check that needs only names
never builds the call graph:

- `graph` — the call graph (ddpify/analysis/calls.py);
- `values` — what names are given and where a value comes from (values.py);
- `loaders` — the DataLoaders and what they are given (loaders.py);
- `script` — the training a single-GPU script does: loops, loaders that train, entry point
  (script.py); `models` — the models it trains and where they are placed (models.py);
- `distributed` — process groups, DDP wraps, collectives (distributed.py);
- `effects` — prints, logs and file writes (effects.py);
- `ranks` — rank tests and rank-0 guards (ranks.py);
- `bindings` — which uses of a name hold the DDP wrapper (wrapped.py);
- `project` — functions imported from the script's other files (project.py);
- `streams` — training loops that draw their batches at random (streams.py);
- `whole` — a training loop that steps on the same whole tensors every time (whole.py);
- `foreign_loaders` — training loaders a helper of another project file makes (foreign.py).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import libcst as cst

from ddpify.analysis.calls import CallGraph
from ddpify.analysis.distributed import DistributedCode
from ddpify.analysis.effects import SideEffects
from ddpify.analysis.foreign import ForeignLoader, foreign_loaders
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.loaders import Loaders
from ddpify.analysis.models import Models
from ddpify.analysis.project import Project, defines_iterable
from ddpify.analysis.ranks import Ranks
from ddpify.analysis.script import TrainingScript
from ddpify.analysis.streams import RandomBatches, Streams
from ddpify.analysis.switches import Switch, loader_switches
from ddpify.analysis.values import Values
from ddpify.analysis.whole import WholeBatch, WholeBatches
from ddpify.analysis.wrapped import DdpBindings


class Anatomy(SourceIndex):
    """One parsed module and the analyses of it, each computed once and shared by every rule.
    `path` is where the module was read from, when it was read from a file."""

    def __init__(
        self, module: cst.Module, path: Path | None = None, lines: list[int] | None = None
    ) -> None:
        super().__init__(module, lines)
        self.path = path

    @cached_property
    def graph(self) -> CallGraph:
        return CallGraph(self)

    @cached_property
    def values(self) -> Values:
        return Values(self, self.graph)

    @cached_property
    def loaders(self) -> Loaders:
        return Loaders(
            self, self.graph, self.values, lambda base: defines_iterable(self.project, base)
        )

    @cached_property
    def script(self) -> TrainingScript:
        return TrainingScript(
            self, self.graph, self.values, self.loaders, self.project, self.effects
        )

    @cached_property
    def models(self) -> Models:
        return Models(self, self.graph, self.script, self.effects)

    @cached_property
    def distributed(self) -> DistributedCode:
        return DistributedCode(self, self.graph)

    @cached_property
    def effects(self) -> SideEffects:
        return SideEffects(self, self.graph, self.values)

    @cached_property
    def ranks(self) -> Ranks:
        return Ranks(self, self.graph, self.values)

    @cached_property
    def bindings(self) -> DdpBindings:
        return DdpBindings(self, self.graph, self.distributed)

    @cached_property
    def project(self) -> Project:
        return Project(self, self.path)

    @cached_property
    def streams(self) -> Streams:
        return Streams(self, self.graph, self.script)

    @cached_property
    def whole(self) -> WholeBatches:
        return WholeBatches(self, self.graph, self.values, self.script, self.models, self.project)

    @cached_property
    def switches(self) -> dict[int, Switch]:
        """Training loaders (by id) that one function makes with others, told apart by
        what its calls give a parameter (`make_loader(x, y, train=True)`)."""
        return loader_switches(self.script)

    @cached_property
    def foreign_loaders(self) -> list[ForeignLoader]:
        return foreign_loaders(self, self.script, self.project)

    @cached_property
    def split_samples(self) -> WholeBatch | None:
        """The training loop without a DataLoader whose samples the conversion splits
        between the processes: whole tensors every step, or slices of them by the loop's
        counter (`x[i:i + bs]`); None without such a loop, or when they cannot be split."""
        if self.script.train_loaders or self.streams.without_loader not in ("whole", "ordered"):
            return None
        batch = self.whole.batch
        if batch is None or batch.problem is not None or not batch.samples:
            return None
        if batch.ordered != (self.streams.without_loader == "ordered"):
            return None
        return batch

    @cached_property
    def drawn_batches(self) -> RandomBatches | None:
        """The training loop without a DataLoader that draws its batches at random, or
        makes its samples afresh every step when there are none to split."""
        if self.script.train_loaders:
            return None
        drawn = self.streams.random_batches
        if drawn is None and self.split_samples is None:
            drawn = self.streams.sampled_batches
        return drawn

    @cached_property
    def whole_batch(self) -> WholeBatch | None:
        """`split_samples` when every step trains on all of them (full batch): the effective
        batch does not change."""
        split = self.split_samples
        return split if split is not None and not split.ordered else None
