"""What one process of a verify run recorded: the harness writes it, the checks read it.

The harness appends one JSON object per line to `events.jsonl` as things happen (and
flushes), so a process that is killed still leaves everything up to that moment. Nothing
here imports torch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVENTS = "events.jsonl"
STACK = "stack.txt"
STDOUT = "stdout.txt"
STDERR = "stderr.txt"
COMPARISON = "comparison.json"


def snapshot_name(optimizer: int, step: int) -> str:
    """The file holding an optimizer's parameters after one of its steps."""
    return f"opt{optimizer}_step{step}.pt"


def save_copy_name(index: int) -> str:
    """The file holding a flattened copy of the process's index-th torch.save."""
    return f"save{index}.pt"


_WRAPPED_KEY = re.compile(r"(^|\.)module\.")


def unwrapped_keys(original: Iterable[str], converted: Iterable[str]) -> dict[str, str] | None:
    """The original's checkpoint keys under the conversion's names when they differ only by
    the `module.` a DataParallel wrapper gave them (`state_dict.module.bn1.weight`, saved from
    `nn.DataParallel(model)`, against `state_dict.bn1.weight` from the bare model the
    conversion saves, as it reports: akamaster/pytorch_resnet_cifar10); None otherwise."""
    mine, theirs = set(original), set(converted)
    renamed = {key: _WRAPPED_KEY.sub(r"\1", key, count=1) for key in mine}
    if mine == theirs or set(renamed.values()) != theirs or len(renamed) != len(theirs):
        return None
    return renamed


_OBJECT_ID = re.compile(r"(?<![^.])\d{9,}(?![^.])")


def by_position(keys: Sequence[str]) -> dict[str, str]:
    """Each checkpoint key with the object ids in it (`slow_state.139827980988688.slow_param`:
    a Lookahead wrapper keys its state by `id(param)`, different in every process, round-38
    audit A lookahead_optimizer_wrapper) named by the order they first come in instead."""
    order: dict[str, str] = {}

    def numbered(found: re.Match[str]) -> str:
        return order.setdefault(found.group(0), f"<id {len(order)}>")

    return {key: _OBJECT_ID.sub(numbered, key) for key in keys}


def as_named_by(mine: Sequence[str], theirs: Sequence[str]) -> dict[str, str]:
    """Each of `mine`'s paths under the name the other run gives the same file, where the two
    name it differently with the time or a process id in it (a run folder stamped with the
    date, TensorBoard's `events.out.tfevents.<time>.<host>.<pid>.0`): a path of one shape
    (every run of digits as `#`) that only one side writes, the one such path on each side;
    several such paths on each side, as many, paired in the order they were first written
    when each pair differs only in runs of six digits or more (a clock: "Training with
    PyTorch"'s `model_{timestamp}_{epoch}`), never in a step or epoch number. Every other
    path keeps its name."""
    names = {path: path for path in mine}
    unmatched = [path for path in dict.fromkeys(mine) if path not in set(theirs)]
    missing = [path for path in dict.fromkeys(theirs) if path not in set(mine)]
    for shape in dict.fromkeys(map(_shape, unmatched)):
        alike = [path for path in unmatched if _shape(path) == shape]
        other = [path for path in missing if _shape(path) == shape]
        pairs = list(zip(alike, other, strict=False))
        if len(alike) == len(other) and (len(pairs) == 1 or all(map(_by_clock, pairs))):
            names.update(pairs)
    return names


def _by_clock(pair: tuple[str, str]) -> bool:
    """Whether two paths of one shape differ only in runs of six digits or more."""
    mine, theirs = (re.findall(r"\d+", path) for path in pair)
    return all(a == b or min(len(a), len(b)) >= 6 for a, b in zip(mine, theirs, strict=True))


def _shape(path: str) -> str:
    """A path with every run of digits as `#`."""
    return re.sub(r"\d+", "#", path)


# Appended to a sampler's name in the records when it draws its samples at random (with
# replacement, or by weights): nothing to shard, every process draws a stream of its own.
DRAWING = " (draws)"


@dataclass(frozen=True)
class LoaderRecord:
    """A DataLoader the script created, numbered in creation order."""

    ordinal: int
    batch_size: int | None
    declared_batch_size: int | None  # what the script asked for, before --train-batch
    sampler: str
    dataset_len: int | None
    length: int | None  # batches per epoch: len(loader)

    @property
    def draws(self) -> bool:
        """Its sampler draws the samples (`WeightedRandomSampler`, with replacement)."""
        return self.sampler.endswith(DRAWING)


@dataclass(frozen=True)
class StepRecord:
    """One optimizer step, with the sample indices of the batches it trained on."""

    optimizer: int  # in the order optimizers first stepped
    kind: str  # the optimizer's class: Adam, SGD, ...
    step: int  # that optimizer's own count, from 1
    primary: bool  # the first optimizer to step: its steps are the ones counted
    loader: int | None
    indices: tuple[int, ...] | None
    lr: tuple[float, ...]  # what the step used
    # The script's own rates for the step: in the original's run they differ from `lr` where
    # the converted run's were replayed.
    own_lr: tuple[float, ...] = ()
    momentum: tuple[float | None, ...] = ()  # SGD's momentum or Adam's first beta, per group
    # Without a DataLoader: fingerprints of the rows the model's outermost calls took with
    # gradients on since the last step (a full batch the ranks split).
    rows: tuple[int, ...] | None = None


@dataclass(frozen=True)
class WriteRecord:
    """A file opened for writing (or a torch.save to a path)."""

    path: str  # relative to the working directory when inside it, else absolute
    inside: bool  # inside the run's working directory
    mode: str
    via: str  # "open" or "torch.save"
    step: int  # primary steps taken before the write


@dataclass(frozen=True)
class SaveRecord:
    """A torch.save: where to, the flattened keys of what was saved, and its copy's index."""

    path: str
    index: int
    keys: tuple[str, ...]
    step: int


@dataclass(frozen=True)
class LoadRecord:
    """A torch.load of a path: where from, and the map_location the script gave."""

    path: str  # as WriteRecord's
    inside: bool
    map_location: str | None  # its repr; None when the script gave none
    step: int


@dataclass(frozen=True)
class DrawRecord:
    """A batch-shaped random draw while training, as the process drew it itself."""

    step: int  # primary steps taken before it
    ordinal: int  # its place among the batch's draws
    name: str
    digest: str


@dataclass(frozen=True)
class PassRecord:
    """A pass over a DataLoader started (an iterator over it made)."""

    loader: int
    number: int  # from 1, per loader
    step: int  # primary steps taken before it
    sampler_epoch: int | None  # a DistributedSampler's epoch as the pass starts
    shuffled: bool  # the sampler was made to shuffle (the check turns that off)


@dataclass(frozen=True)
class ReportRecord:
    """A line printed (stdout or stderr) right after a pass over a loader other than the
    training one ran to its end: what an evaluation reports."""

    step: int  # primary steps taken before it
    loader: int  # the loader evaluated
    text: str


@dataclass(frozen=True)
class Change:
    """Something the harness changed (or noticed and left alone) to make the check possible."""

    kind: str
    detail: str


@dataclass
class ProcessRecord:
    """Everything one process recorded, in order."""

    loaders: list[LoaderRecord] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    writes: list[WriteRecord] = field(default_factory=list)
    saves: list[SaveRecord] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    draws: list[DrawRecord] = field(default_factory=list)
    passes: list[PassRecord] = field(default_factory=list)
    reports: list[ReportRecord] = field(default_factory=list)
    loads: list[LoadRecord] = field(default_factory=list)
    # Files of the working directory the script looked for (os.path.exists, Path.exists...)
    # and did not find: a script that finds its checkpoint there next time resumes from it.
    missing: list[str] = field(default_factory=list)
    # Lines another file of the script's folder printed (engine.py's), by that file.
    elsewhere: dict[str, str] = field(default_factory=dict)
    started: bool = False
    cuda: bool = False
    backend: str | None = None
    world_size: int | None = None
    dist_rank: int | None = None
    end_reason: str | None = None  # "steps", "finished", "exit", "error"; None: never ended
    end_detail: str = ""
    stop_step: int | None = None

    @property
    def primary_steps(self) -> list[StepRecord]:
        return [step for step in self.steps if step.primary]

    def loader(self, ordinal: int | None) -> LoaderRecord | None:
        # the last: a loader made again by the conversion shares its twin's number
        return next((item for item in reversed(self.loaders) if item.ordinal == ordinal), None)

    @classmethod
    def read(cls, folder: Path) -> ProcessRecord:
        record = cls()
        path = folder / EVENTS
        if not path.exists():
            return record
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:  # the last line of a process killed mid-write
                continue
            if isinstance(event, dict):
                record._add(event)
        return record

    def _add(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start":
            self.started = True
            self.cuda = bool(event.get("cuda"))
        elif kind == "loader":
            self.loaders.append(
                LoaderRecord(
                    ordinal=int(event["ordinal"]),
                    batch_size=event.get("batch_size"),
                    declared_batch_size=event.get("declared_batch_size"),
                    sampler=str(event.get("sampler")),
                    dataset_len=event.get("dataset_len"),
                    length=event.get("length"),
                )
            )
        elif kind == "step":
            indices = event.get("indices")
            self.steps.append(
                StepRecord(
                    optimizer=int(event["optimizer"]),
                    kind=str(event.get("kind", "")),
                    step=int(event["step"]),
                    primary=bool(event["primary"]),
                    loader=event.get("loader"),
                    indices=None if indices is None else tuple(int(i) for i in indices),
                    lr=tuple(float(lr) for lr in event.get("lr", ())),
                    own_lr=tuple(float(lr) for lr in event.get("own_lr", event.get("lr", ()))),
                    momentum=tuple(
                        None if m is None else float(m) for m in event.get("momentum", ())
                    ),
                    rows=None if event.get("rows") is None else tuple(event["rows"]),
                )
            )
        elif kind == "write":
            self.writes.append(
                WriteRecord(
                    path=str(event["path"]),
                    inside=bool(event["inside"]),
                    mode=str(event["mode"]),
                    via=str(event["via"]),
                    step=int(event["step"]),
                )
            )
        elif kind == "save":
            self.saves.append(
                SaveRecord(
                    path=str(event["path"]),
                    index=int(event["index"]),
                    keys=tuple(str(key) for key in event["keys"]),
                    step=int(event["step"]),
                )
            )
        elif kind == "load":
            location = event.get("map_location")
            self.loads.append(
                LoadRecord(
                    path=str(event["path"]),
                    inside=bool(event["inside"]),
                    map_location=None if location is None else str(location),
                    step=int(event["step"]),
                )
            )
        elif kind == "missing":
            self.missing.append(str(event["path"]))
        elif kind == "printed_elsewhere":
            self.elsewhere[str(event["text"])] = str(event["file"])
        elif kind == "draw":
            self.draws.append(
                DrawRecord(
                    step=int(event["step"]),
                    ordinal=int(event["ordinal"]),
                    name=str(event["draw"]),
                    digest=str(event["digest"]),
                )
            )
        elif kind == "pass":
            epoch = event.get("sampler_epoch")
            self.passes.append(
                PassRecord(
                    loader=int(event["loader"]),
                    number=int(event["number"]),
                    step=int(event["step"]),
                    sampler_epoch=int(epoch) if isinstance(epoch, int) else None,
                    shuffled=bool(event.get("shuffled")),
                )
            )
        elif kind == "reported":
            self.reports.append(
                ReportRecord(int(event["step"]), int(event["loader"]), str(event["text"]))
            )
        elif kind == "changed":
            self.changes.append(Change(str(event["kind"]), str(event["detail"])))
        elif kind == "dist":
            self.backend = event.get("backend")
            self.world_size = event.get("world_size")
            self.dist_rank = event.get("rank")
        elif kind == "end":
            self.end_reason = str(event["reason"])
            self.end_detail = str(event.get("detail", ""))
            self.stop_step = event.get("steps")
