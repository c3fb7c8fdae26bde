"""Inside a verify child process: record steps, batches, writes and saves as they happen."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import torch
from torch import nn

from ddpify.verify.records import EVENTS, save_copy_name, snapshot_name

# DDP, DataParallel and torch.compile wrap a model; their parameter names gain a prefix.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


# A param group's learning rate and momentum (SGD's `momentum`, Adam's first beta): what
# learning-rate schedules change between steps.
Rates = tuple[float, float | None]


def rates_of(group: Mapping[str, Any]) -> Rates:
    momentum = group.get("momentum", (group.get("betas") or (None,))[0])
    return float(group.get("lr", float("nan"))), None if momentum is None else float(momentum)


def set_rates(group: dict[str, Any], rates: Rates) -> None:
    lr, momentum = rates
    if isinstance(group.get("lr"), torch.Tensor):
        group["lr"].fill_(lr)
    else:
        group["lr"] = lr
    if momentum is not None and "momentum" in group:
        group["momentum"] = momentum
    elif momentum is not None and "betas" in group:
        group["betas"] = (momentum, *group["betas"][1:])


class StopTraining(BaseException):
    """Raised from the optimizer hook after the last step the check needs.

    A BaseException, so a script's `except Exception:` does not swallow it, while its
    `finally:` blocks (destroy_process_group) still run; every rank raises it after the
    same step, so no rank is left waiting in a collective.
    """


Opener = Callable[..., IO[Any]]
Saver = Callable[..., None]


class Recorder:
    """Writes one process's events (see ddpify.verify.records) and parameter snapshots."""

    def __init__(
        self,
        out: Path,
        workdir: Path,
        steps: int,
        real_open: Opener,
        real_save: Saver,
        epochs: int = 1,
        train_loader: int | None = None,
    ):
        self.out = out
        self.workdir = str(workdir.resolve())
        self.steps_wanted = steps  # per pass over the training loader (an epoch)
        self.epochs_wanted = epochs
        # The DataLoader that trains: known to the original's run from the converted run's,
        # found by the converted run at its first step.
        self.train_loader = train_loader
        self._passes: dict[int, int] = {}  # iterators made, by loader
        # A loader other than the training one whose pass ran to its end since the last
        # step or pass: the lines printed now report an evaluation.
        self.evaluated: int | None = None
        self.real_open = real_open
        self.real_save = real_save
        self.pid = os.getpid()
        self.step = 0  # steps of the primary optimizer so far
        self.stopping = False
        self.suppress_writes = 0
        self.training = False  # from the first batch on
        self.in_loader_setup = 0
        self._events = real_open(out / EVENTS, "w", encoding="utf-8", buffering=1)
        self._optimizers: dict[int, int] = {}
        self._alive: list[torch.optim.Optimizer] = []  # so that ids stay unique
        self._optimizer_steps: dict[int, int] = {}
        self._names: dict[int, list[tuple[str, torch.Tensor]]] = {}
        self._fetched: list[tuple[int, int | None, list[int] | None]] = []
        # Rows the outermost module calls took since the last step, as fingerprints: the
        # samples of a step that reads no DataLoader (a full batch split between ranks).
        self._rows: list[int] = []
        self._depth = 0
        # Random draws while training (issue 13): the latest batch's dataset indices, how
        # often each index was fetched, and the batch-shaped draws since that batch came.
        self.batch_indices: list[int] | None = None
        self._seen: dict[int, int] = {}
        self._draws = 0
        self.in_sample = 0  # inside one sample's fetch (its transforms draw)
        self.torch_seeded = False  # the script seeds torch itself
        self._changes: set[tuple[str, str]] = set()
        self._loaders = 0
        self._saves = 0
        self._missing: set[str] = set()
        # The original's run: the converted run's learning rates, per (optimizer, step), set
        # on its param groups for each step (its own are put back after the step).
        self.replay: dict[tuple[int, int], tuple[Rates, ...]] = {}
        self._own_rates: dict[int, list[Rates]] = {}
        # A script with no torch.optim optimizer updates its parameters by hand between
        # backward passes (round-27 audit B course_manual_sgd_no_optimizer).
        self.optimizers_made = 0
        self._by_hand: UpdatedByHand | None = None
        self._backwards = 0  # backward passes running (a checkpoint's nested one)
        self._backward_ended: tuple[int, int] | None = None  # fetched batches, rows then

    def event(self, name: str, **fields: Any) -> None:
        if os.getpid() != self.pid:  # a forked DataLoader worker: not this process's doing
            return
        self._events.write(json.dumps({"event": name, **fields}, default=str) + "\n")

    def changed(self, kind: str, detail: str) -> None:
        """Note a change made for the check, once per distinct change."""
        if (kind, detail) not in self._changes:
            self._changes.add((kind, detail))
            self.event("changed", kind=kind, detail=detail)

    def next_loader(self) -> int:
        self._loaders += 1
        return self._loaders - 1

    def pass_starts(self, loader: int | None, sampler: object) -> None:
        """An iterator over a DataLoader is made: a pass over it starts. The pass after the
        last epoch wanted over the training loader stops the script (after everything the
        script does between epochs: evaluation, checkpoints, schedules)."""
        self.evaluated = None
        if loader is None:
            return
        number = self._passes[loader] = self._passes.get(loader, 0) + 1
        self.event(
            "pass",
            loader=loader,
            number=number,
            step=self.step,
            sampler_epoch=getattr(sampler, "epoch", None),
            shuffled=bool(getattr(sampler, "_ddpify_shuffled", False)),
        )
        if loader == self.train_loader and number > self.epochs_wanted:
            self.stopping = True
            raise StopTraining

    def pass_ends(self, loader: int | None) -> None:
        """A pass ran to its end (its iterator raised StopIteration)."""
        if loader is not None and loader != self.train_loader:
            self.evaluated = loader

    def printed(self, line: str, training: bool = False) -> None:
        """A line the script printed: kept when it reports an evaluation (not one begun
        while training, `training`, and ended after)."""
        if self.evaluated is not None and line.strip() and not training:
            self.event("reported", step=self.step, loader=self.evaluated, text=line)

    def pass_is_over(self, loader: int | None, started_at: int) -> bool:
        """Whether a pass over the training loader that started at primary step
        `started_at` has taken its steps: its iterator then ends, as an epoch's would."""
        return (
            loader is not None
            and loader == self.train_loader
            and (self.step - started_at >= self.steps_wanted)
        )

    def batch_fetched(self, iterator: int, loader: int | None, indices: list[int] | None) -> None:
        self.training = True
        self._fetched.append((iterator, loader, indices))
        self.batch_indices, self._draws = indices, 0
        for index in indices or ():
            self._seen[index] = self._seen.get(index, 0) + 1

    def draw_seeds(self) -> list[int]:
        """Seeds for the next draw shaped like the latest batch, one per sample: from its
        dataset index, how often it was fetched, and the draw's place in the step, so that
        a sample gets the same numbers whichever batch, rank or position it is in."""
        assert self.batch_indices is not None
        ordinal, self._draws = self._draws, self._draws + 1
        return [
            sample_seed(index, self._seen.get(index, 0), ordinal) for index in self.batch_indices
        ]

    def drawn(self, name: str, value: torch.Tensor) -> None:
        """What this process drew itself (before the check replaced it): ranks compare them."""
        data = value.detach().cpu().contiguous().reshape(-1)
        if data.is_floating_point():
            data = data.to(torch.float64)
        digest = hashlib.blake2b(data.numpy().tobytes(), digest_size=8).hexdigest()
        self.event("draw", step=self.step, ordinal=self._draws - 1, draw=name, digest=digest)

    def forward_starts(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        """A global forward pre-hook: the rows of the first tensor an outermost module call
        takes with gradients on (the model's forward, or DDP's), fingerprinted."""
        self._depth += 1
        if self._depth != 1 or not torch.is_grad_enabled():
            return
        if next(module.parameters(), None) is None:
            return  # a loss module (`nn.CrossEntropyLoss()`): it takes outputs, not samples
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is None or first.dim() == 0 or first.requires_grad:
            return  # computed, not data
        try:
            rows = first.detach().cpu().reshape(first.shape[0], -1)
            if rows.is_floating_point():
                rows = rows.to(torch.float32)  # float64 for the check, float32 as the data came
            data = rows.numpy()
        except RuntimeError:  # a tensor of torch.func's transforms (vmap): no storage to read
            return  # (round-18 audit s28: "could not run the original")
        self._rows.extend(
            int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=7).digest(), "big")
            for row in data
        )

    def forward_ends(self, *_: object) -> None:
        self._depth = max(0, self._depth - 1)

    def place(self, target: object) -> tuple[str, bool]:
        """A written path as the checks compare it: relative inside the working directory."""
        if isinstance(target, (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(target))
        else:
            name = getattr(target, "name", None)
            if not isinstance(name, str):
                return "<stream>", False
            path = os.path.abspath(name)
        if path == self.workdir or path.startswith(self.workdir + os.sep):
            return os.path.relpath(path, self.workdir), True
        return path, False

    def wrote(self, target: object, mode: str, via: str = "open") -> None:
        path, inside = self.place(target)
        if path.startswith("/dev/"):
            return
        self.event("write", path=path, inside=inside, mode=mode, via=via, step=self.step)

    def loaded(self, source: object, map_location: object) -> None:
        """Record a torch.load: from where, and with which map_location (None: none given)."""
        if self.suppress_writes:  # the harness's own reads, after the run
            return
        path, inside = self.place(source)
        location = None if map_location is None else repr(map_location)
        self.event("load", path=path, inside=inside, map_location=location, step=self.step)

    def looked_for(self, target: object) -> None:
        """The script looked for a file of its working directory and did not find it."""
        if isinstance(target, (str, bytes, os.PathLike)):
            path, inside = self.place(target)
            if inside and path not in self._missing:
                self._missing.add(path)
                self.event("missing", path=path)

    def saved(self, obj: object, target: object) -> None:
        """Record a torch.save: its keys, and a flattened copy for comparing values later."""
        index = self._saves
        self._saves += 1
        flat = dict(flatten(obj))
        self.keep(flat, save_copy_name(index))
        path, _ = self.place(target)
        self.event("save", path=path, index=index, keys=list(flat), step=self.step)
        self.wrote(target, "wb", via="torch.save")

    def keep(self, obj: object, name: str) -> None:
        """Save into this process's record folder, unrecorded."""
        self.suppress_writes += 1
        try:
            self.real_save(obj, self.out / name)
        finally:
            self.suppress_writes -= 1

    def _ordinal(self, optimizer: torch.optim.Optimizer) -> int:
        key = id(optimizer)
        if key not in self._optimizers:
            self._optimizers[key] = len(self._optimizers)
            self._alive.append(optimizer)
            self._names[key] = named_parameters_of(optimizer)
        return self._optimizers[key]

    def before_step(self, optimizer: torch.optim.Optimizer, *_: object) -> None:
        """The global optimizer-step pre-hook: in the original's run, step with the converted
        run's learning rates (and momenta, which one-cycle schedules move with them), so that
        the parameters compare like for like; the schedules are compared from the records.
        Only schedules that start alike are replayed: they differ in their course (a length
        sized from the data), while rates that differ at the first step are the script's."""
        ordinal = self._ordinal(optimizer)
        count = self._optimizer_steps.get(id(optimizer), 0) + 1
        replayed = self.replay.get((ordinal, count))
        groups = optimizer.param_groups
        if replayed is None or len(replayed) != len(groups):
            return
        own = [rates_of(group) for group in groups]
        if own == list(replayed):
            return
        if count == 1:  # the rates differ from the start (a scaled learning rate): a real
            self.replay = {k: v for k, v in self.replay.items() if k[0] != ordinal}
            return  # difference, not a schedule's length, and the comparison must show it
        self._own_rates[id(optimizer)] = own
        for group, rates in zip(groups, replayed, strict=True):
            set_rates(group, rates)

    def after_step(self, optimizer: torch.optim.Optimizer, *_: object) -> None:
        """The global optimizer-step post-hook: snapshot, record the batch, stop after K."""
        if self.stopping:  # the script caught StopTraining and went on: stop it again
            raise StopTraining
        self.training = True  # from the first step on, when no loader's batch came first
        self.evaluated = None
        key = id(optimizer)
        ordinal = self._ordinal(optimizer)
        count = self._optimizer_steps[key] = self._optimizer_steps.get(key, 0) + 1
        primary = ordinal == 0
        loader, indices = (None, None)
        rows: list[int] | None = None
        if primary:
            self.step = count
            loader, indices = self._take_batches()
            if self.train_loader is None and count == 1:
                self.train_loader = loader
            rows, self._rows = (self._rows or None) if loader is None else None, []
        with torch.no_grad():
            snapshot = {name: p.detach().cpu().clone() for name, p in self._names[key]}
        self.keep(snapshot, snapshot_name(ordinal, count))
        rates = [rates_of(group) for group in optimizer.param_groups if "lr" in group]
        own = self._own_rates.pop(key, None)
        if own is not None:  # the schedule goes on from the original's own rates
            for group, mine in zip(optimizer.param_groups, own, strict=True):
                set_rates(group, mine)
        self.event(
            "step",
            optimizer=ordinal,
            kind=type(optimizer).__name__,
            step=count,
            primary=primary,
            loader=loader,
            indices=indices,
            rows=rows,
            lr=[lr for lr, _ in rates],
            momentum=[momentum for _, momentum in rates],
            own_lr=[lr for lr, _ in own or rates],
        )
        if primary and count >= self.steps_wanted * self.epochs_wanted:
            self.stopping = True  # every pass took its steps, or passes never end
            raise StopTraining

    def backward_starts(self) -> None:
        """With no optimizer, the backward pass after another ends the step of the one
        before it: the update by hand came in between."""
        self._backwards += 1
        if self._backwards == 1 and self._by_hand is not None:
            self.step_by_hand()

    def backward_ends(self) -> None:
        self._backwards -= 1
        if self._backwards or self.optimizers_made:
            return
        if self._by_hand is None:
            self._by_hand = updated_by_hand()
        self._backward_ended = (len(self._fetched), len(self._rows))

    def step_by_hand(self) -> None:
        """A step of the update by hand: the batches and rows that came before the last
        backward pass ended are its own; those fetched since belong to the next."""
        if self._backward_ended is None or self._by_hand is None or self.optimizers_made:
            return
        fetched, rows = self._backward_ended
        self._backward_ended = None
        later, later_rows = self._fetched[fetched:], self._rows[rows:]
        del self._fetched[fetched:], self._rows[rows:]
        try:
            self.after_step(self._by_hand)
        finally:
            self._fetched.extend(later)
            self._rows.extend(later_rows)

    def _take_batches(self) -> tuple[int | None, list[int] | None]:
        """The batches this step trained on: those fetched since the last step from the
        iterator that produced the latest one (a peek with next(iter(loader)) is not one)."""
        if not self._fetched:
            return None, None
        iterator, loader, _ = self._fetched[-1]
        batches = [item for item in self._fetched if item[0] == iterator]
        self._fetched.clear()
        indices: list[int] = []
        for _, _, batch in batches:
            if batch is None:
                return loader, None
            indices.extend(batch)
        return loader, indices

    def end(self, reason: str, detail: str = "") -> None:
        self.event("end", reason=reason, detail=detail, steps=self.step)
        self._events.flush()


def sample_seed(index: int, occurrence: int, ordinal: int) -> int:
    """A seed for one sample's random numbers, alike in every run of the check."""
    key = f"{index}:{occurrence}:{ordinal}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=7).digest(), "big")


class UpdatedByHand(torch.optim.Optimizer):
    """The parameters a script updates by hand (`p -= lr * p.grad`, no torch.optim): its
    steps are recorded as an optimizer's would be."""

    def __init__(self, params: list[torch.Tensor]):
        super().__init__(params, {})


def updated_by_hand() -> UpdatedByHand | None:
    """The parameters the first backward pass gave gradients, of the model that holds the
    most of them (the bare one rather than its DDP wrapper), in the model's order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        modules = [obj for obj in gc.get_objects() if _is_module(obj)]
    best: list[torch.Tensor] = []
    best_key = (0, 0, 0)
    for module in modules:
        owned = list(module.parameters())
        reached = [p for p in owned if p.grad is not None]
        key = (len(reached), 0 if is_wrapper(module) else 1, -len(owned))
        if reached and key > best_key:
            best, best_key = reached, key
    return UpdatedByHand(best) if best else None


def _is_module(obj: object) -> bool:
    try:
        return isinstance(obj, nn.Module)
    except ReferenceError:  # a weak proxy whose object is gone (torch.compile keeps some)
        return False


def named_parameters_of(optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
    """The optimizer's parameters named as in the model that holds them (its wrapper's
    `module.` prefix removed); by group and position when no model holds them."""
    wanted = {id(p) for group in optimizer.param_groups for p in group["params"]}
    best: nn.Module | None = None
    best_key = (0, 0, 0)
    with warnings.catch_warnings():  # isinstance on torch's deprecated aliases warns
        warnings.simplefilter("ignore")
        modules = [obj for obj in gc.get_objects() if _is_module(obj)]
    for obj in modules:
        owned = [id(p) for p in obj.parameters()]
        covered = sum(1 for ident in owned if ident in wanted)
        # most of the optimizer's parameters, then the unwrapped model, then the smallest
        key = (covered, 0 if is_wrapper(obj) else 1, -len(owned))
        if covered and key > best_key:
            best, best_key = obj, key
    names: dict[int, str] = {}
    if best is not None:
        for name, p in best.named_parameters():
            names.setdefault(id(p), strip_wrapper_prefix(name))
    return [
        (names.get(id(p), f"param_groups.{g}.{i}"), p)
        for g, group in enumerate(optimizer.param_groups)
        for i, p in enumerate(group["params"])
    ]


def is_wrapper(module: nn.Module) -> bool:
    return isinstance(module, (nn.DataParallel, nn.parallel.DistributedDataParallel)) or hasattr(
        module, "_orig_mod"
    )


def strip_wrapper_prefix(name: str) -> str:
    stripped = True
    while stripped:
        stripped = False
        for prefix in WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, stripped = name[len(prefix) :], True
    return name


def flatten(obj: object, prefix: str = "") -> Iterator[tuple[str, object]]:
    """A saved object as (dotted key, leaf): tensors, and plain values for the rest.

    A module saved whole counts as its state_dict; a DDP wrapper's keys keep `module.`,
    which is exactly what the checkpoint check looks for.
    """
    if isinstance(obj, nn.Module):
        obj = obj.state_dict()
    if isinstance(obj, torch.Tensor):
        yield prefix, obj.detach().cpu().clone()
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from flatten(value, f"{prefix}.{i}" if prefix else str(i))
    elif obj is None or isinstance(obj, (bool, int, float, str)):
        # numpy's float64 is a float: stored as one, the copy loads with weights_only
        # (the round-34 audit's ConvNeXt checkpoint held its lr as numpy.float64)
        yield prefix, obj if type(obj) in (bool, int, float, str, type(None)) else plain(obj)
    elif type(obj).__module__ == "numpy" and getattr(obj, "shape", None) == ():
        yield prefix, plain(obj.item())  # type: ignore[attr-defined]
    elif type(obj).__module__ == "numpy" and getattr(obj, "dtype", None) is not None:
        try:
            yield prefix, torch.as_tensor(obj).clone()
        except (TypeError, RuntimeError):
            yield prefix, repr(obj)[:200]
    else:
        yield prefix, repr(obj)[:200]


def plain(value: object) -> object:
    """The builtin value of a subclass of one (numpy.float64, numpy.bool_'s item, an IntEnum)."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value if value is None else repr(value)[:200]
