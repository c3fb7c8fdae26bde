"""Inside a verify child process: what the harness changes in torch before the script runs.

Every change is recorded (Recorder.changed) so the report can say exactly what was done:
CUDA mapped to the CPU when there is no GPU, shuffling made sequential, dropout made the
identity, the original's training batch resized, rank 0's checkpoints written slowly (a
pause halfway, so another rank that reads one before it is complete fails every time).
BatchNorm in training mode takes its statistics over the whole global batch on both sides
(every rank's part, all-reduced, as SyncBatchNorm does; the original's whole batch, with the
same arithmetic), so that a conversion whose only difference is DDP's per-process statistics
compares equal, and the report says so.
"""

from __future__ import annotations

import builtins
import inspect
import io
import itertools
import logging
import os
import pathlib
import random
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from torch.utils.data import dataloader as dataloader_module
from torch.utils.data._utils import fetch as fetch_module

from ddpify.verify.recorder import Recorder, UpdatedByHand, sample_seed
from ddpify.verify.records import DRAWING

DROPOUTS: dict[Callable[..., Any], str] = {
    F.dropout: "F.dropout",
    F.dropout1d: "F.dropout1d",
    F.dropout2d: "F.dropout2d",
    F.dropout3d: "F.dropout3d",
    F.alpha_dropout: "F.alpha_dropout",
    F.feature_alpha_dropout: "F.feature_alpha_dropout",
    torch.dropout: "torch.dropout",
    torch.alpha_dropout: "torch.alpha_dropout",
    torch.feature_dropout: "torch.feature_dropout",
    torch.feature_alpha_dropout: "torch.feature_alpha_dropout",
}


# Sampling functions: drawn while training, each rank draws its own numbers (noticed only).
RANDOM = frozenset(
    {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
     "normal", "bernoulli", "multinomial", "poisson", "random_", "uniform_", "normal_",
     "bernoulli_", "exponential_", "geometric_", "cauchy_", "log_normal_",
     # functions whose draws run inside them, past this mode (round-26 audit A dalle_vae)
     "gumbel_softmax", "rrelu"}
)  # fmt: skip


# Draws whose numbers depend on their shape alone: made per sample for the check.
PER_SAMPLE = frozenset(
    {"rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "normal",
     "random_", "uniform_", "normal_", "exponential_", "geometric_", "cauchy_", "log_normal_",
     "bernoulli_"}
)  # fmt: skip


def global_batch_norm(
    input: torch.Tensor,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    training: bool = True,
    momentum: float | None = 0.1,
    eps: float = 1e-5,
) -> torch.Tensor:
    """`F.batch_norm` in training mode with the statistics of the global batch: summed over
    the ranks (a differentiable all-reduce, so every rank's inputs get the gradient of every
    rank's loss, as with SyncBatchNorm) when a process group of more than one runs, else the
    batch's own. Two passes (mean, then the centred squares), the same arithmetic on both
    sides of the comparison."""
    spread = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if spread:
        from torch.distributed.nn.functional import all_reduce

        def total(tensor: torch.Tensor) -> torch.Tensor:
            return all_reduce(tensor)  # type: ignore[no-any-return,no-untyped-call]
    else:

        def total(tensor: torch.Tensor) -> torch.Tensor:
            return tensor

    dims = [0, *range(2, input.dim())]
    shape = [1, -1] + [1] * (input.dim() - 2)
    count = torch.tensor([input.numel() / input.shape[1]], dtype=input.dtype, device=input.device)
    sums = total(torch.cat([input.sum(dims), count]))
    n = sums[-1]
    mean = sums[:-1] / n
    centred = input - mean.reshape(shape)
    var = total(centred.pow(2).sum(dims)) / n
    out = centred / torch.sqrt(var.reshape(shape) + eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    factor = 0.1 if momentum is None else momentum
    with torch.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
        if running_var is not None:
            unbiased = var.detach() * n / (n - 1) if float(n) > 1 else var.detach()
            running_var.mul_(1 - factor).add_(unbiased, alpha=factor)
    return out


def _positions_in(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The upper bound of a `torch.randint` draw: `randint(high, size)` or
    `randint(low, high, size)`."""
    if name != "randint":
        return None
    if "high" in kwargs:
        return kwargs["high"] if isinstance(kwargs["high"], int) else None
    bounds = list(itertools.takewhile(lambda arg: isinstance(arg, int), args))
    return bounds[-1] if bounds else None


def is_cuda(device: object) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return isinstance(device, str) and device.strip().lower().startswith("cuda")


# Casts to half precision, kept in float64 for the check.
HALVINGS = (torch.Tensor.half, torch.Tensor.bfloat16)


class CheckMode(TorchFunctionMode):
    """Sees every torch call of the script: maps CUDA to the CPU, makes dropout the identity
    and notes BatchNorm in training mode."""

    def __init__(self, recorder: Recorder, map_cuda: bool, float64: bool = False):
        super().__init__()
        self.recorder = recorder
        self.map_cuda = map_cuda
        self.float64 = float64

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        if self.float64:
            args, kwargs = self._upcast(func, args, kwargs)
            if (
                func in HALVINGS
                and args
                and isinstance(args[0], torch.Tensor)
                and args[0].is_floating_point()
            ):
                # `model.half()` (round-35 audit B manual_half_precision): float16 rounds
                # the one process's sum and the processes' average apart
                self.recorder.changed("half", ".half() / .bfloat16() keep float64")
                return args[0]
            if func is torch.Tensor.to:
                args, kwargs = self._kept_precise(args, kwargs)
        if func in DROPOUTS:
            return self._dropout(func, args, kwargs)
        if func is F.scaled_dot_product_attention and (
            kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0) or 0.0
        ):
            self.recorder.changed("dropout", "F.scaled_dot_product_attention: dropout_p set to 0")
            args, kwargs = args[:4], {**kwargs, "dropout_p": 0.0}
        if func is F.multi_head_attention_forward and (
            kwargs.get("dropout_p", args[10] if len(args) > 10 else 0.0) or 0.0
        ):
            # nn.MultiheadAttention's own dropout (a TransformerEncoderLayer's): what it calls
            # inside runs past this mode, so it is set here (round-17 audit s20)
            self.recorder.changed("dropout", "F.multi_head_attention_forward: dropout_p set to 0")
            if "dropout_p" in kwargs:
                kwargs["dropout_p"] = 0.0
            else:
                args = (*args[:10], 0.0, *args[11:])
        keyed = False
        if self.recorder.training and not self.recorder.in_loader_setup:
            name = getattr(func, "__name__", "")
            if name in RANDOM and self.recorder.in_sample:
                self.recorder.changed(
                    "keyed", f"{name} drawn for a sample: from a generator seeded by its index"
                )
            elif name in RANDOM:
                keyed = self._per_sample(name, args, kwargs)
                if not keyed:
                    self.recorder.changed("random", f"{name} drawn while training")
        if func is F.batch_norm and kwargs.get("training", args[5] if len(args) > 5 else False):
            indices = self.recorder.batch_indices
            given = args[0] if args else kwargs.get("input")
            if (
                self.recorder.training
                and indices is not None
                and isinstance(given, torch.Tensor)
                and 0 < given.shape[0] < len(indices)
            ):  # Ghost BatchNorm's virtual batches (round-26 audit A tabnet_ghost_bn)
                self.recorder.changed(
                    "ghost", "BatchNorm over parts of each batch (virtual, or ghost, batches)"
                )
            self.recorder.changed(
                "batchnorm",
                "BatchNorm in training mode: statistics over the whole global batch (every "
                "rank's part all-reduced, as SyncBatchNorm does)",
            )
            return global_batch_norm(*args, **kwargs)
        if self.map_cuda:
            if func is torch.Tensor.cuda:
                self.recorder.changed("cuda", "Tensor.cuda() / Module.cuda() stay on the CPU")
                return args[0]
            args, kwargs = self._to_cpu(func, args, kwargs)
        result = func(*args, **kwargs)
        if keyed and self._shaped_like_the_batch(result):
            self._draw_per_sample(func, args, kwargs, result)
        elif keyed:
            self.recorder.changed("random", f"{getattr(func, '__name__', '')} drawn while training")
        return result

    def _per_sample(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether a draw may be made per sample: one of the latest batch's shape (checked
        once drawn) whose numbers depend on nothing per sample (`torch.randn(b, nz)`,
        `randn_like(x)`, `t.normal_()`; not `bernoulli(p)` with a tensor `p`)."""
        if name not in PER_SAMPLE or self.recorder.batch_indices is None:
            return False
        if _positions_in(name, args, kwargs) == len(self.recorder.batch_indices):
            # `torch.randint(0, B, ...)`: positions in the batch (negatives from other
            # samples), which each rank draws over its own part (round-27 audit A cpc)
            return False
        given = [*args[1:], *kwargs.values()]
        return not any(isinstance(value, torch.Tensor) and value.dim() for value in given)

    def _shaped_like_the_batch(self, result: Any) -> bool:
        indices = self.recorder.batch_indices
        return (
            isinstance(result, torch.Tensor)
            and indices is not None
            and result.dim() > 0
            and result.shape[0] == len(indices)
        )

    def _draw_per_sample(
        self,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: torch.Tensor,
    ) -> None:
        """Replace each row of a batch-shaped draw with the first row of the same draw made
        from that sample's own generator: the original's whole batch and each rank's part
        then draw the same numbers for the same sample. What the process drew is recorded
        first, so that the ranks' own draws can be told apart (identical noise on every rank
        is a bug of the conversion)."""
        name = getattr(func, "__name__", "")
        seeds = self.recorder.draw_seeds()
        if self.recorder.torch_seeded:  # unseeded, each process starts from its own seed
            self.recorder.drawn(name, result)
        in_place = name.endswith("_")
        rows = []
        for seed in seeds:
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(seed)  # not the script's own
                if in_place:
                    fresh = torch.empty_like(args[0])
                    func(fresh, *args[1:], **kwargs)
                else:
                    fresh = func(*args, **kwargs)
            rows.append(fresh[0])
        with torch.no_grad():
            result.copy_(torch.stack(rows))
        self.recorder.changed(
            "keyed",
            f"{name} drawn for the batch: each sample's numbers from a generator seeded by its "
            "index, alike in both runs",
        )

    def _upcast(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Run in float64 (issue 13: no false alarms from rounding): the model's parameters
        are float64 (the default dtype), data the script makes float32 (`torch.from_numpy`,
        `ToTensor`) meets them here and is upcast, both runs alike. In-place calls keep
        their tensor's own dtype."""
        if getattr(func, "__name__", "").endswith("_"):
            return args, kwargs
        values = [*args, *kwargs.values()]
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        if not any(t.dtype == torch.float64 for t in tensors) or not any(
            t.dtype == torch.float32 for t in tensors
        ):
            return args, kwargs

        def up(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
                return value.double()
            return value

        return tuple(up(a) for a in args), {k: up(v) for k, v in kwargs.items()}

    def _kept_precise(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """`x.to(torch.float16)`, `x.to(device, dtype=torch.bfloat16)`: the tensor's own
        dtype instead, as `.half()` keeps it."""
        own = args[0].dtype if args and isinstance(args[0], torch.Tensor) else None
        if own is None or not own.is_floating_point:
            return args, kwargs

        def kept(value: Any) -> Any:
            if value in (torch.float16, torch.bfloat16):
                self.recorder.changed("half", ".to(float16 / bfloat16) keeps float64")
                return own
            return value

        return tuple(kept(a) for a in args), {k: kept(v) for k, v in kwargs.items()}

    def _dropout(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        name = DROPOUTS[func]
        if name.startswith("F."):
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
        else:  # torch.dropout(input, p, train)
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("train", args[2] if len(args) > 2 else True)
        if training and p:
            self.recorder.changed("dropout", f"{name} (p={p}) made the identity")
        return args[0] if args else kwargs["input"]

    def _to_cpu(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        name = getattr(func, "__name__", "")
        if name in ("to", "_parse_to"):
            # .to("cuda"), .to(torch.device("cuda:1")), .to(0): a bare int is a CUDA index
            mapped = []
            for arg in args:
                if is_cuda(arg) or (type(arg) is int and name == "_parse_to"):
                    self.recorder.changed("cuda", f".to({arg!r}) runs on the CPU")
                    arg = "cpu"
                mapped.append(arg)
            if name == "to" and len(mapped) > 1 and type(mapped[1]) is int:
                self.recorder.changed("cuda", f".to({mapped[1]!r}) runs on the CPU")
                mapped[1] = "cpu"
            args = tuple(mapped)
        device = kwargs.get("device")
        if is_cuda(device) or (name in ("to", "_parse_to") and type(device) is int):
            self.recorder.changed("cuda", f"device={device!r} is the CPU")
            kwargs["device"] = "cpu"
        return args, kwargs


def patch_cuda(recorder: Recorder) -> None:
    """No GPU here: the CUDA calls a single-GPU script makes become CPU equivalents."""

    def no_op(name: str, result: object = None) -> Callable[..., Any]:
        def call(*args: object, **kwargs: object) -> object:
            recorder.changed("cuda", f"torch.cuda.{name}() is a no-op")
            return result

        return call

    for name, result in (
        ("set_device", None),
        ("synchronize", None),
        ("empty_cache", None),
        ("current_device", 0),
        ("get_device_name", "cpu"),
        ("memory_allocated", 0),
        ("max_memory_allocated", 0),
        ("memory_reserved", 0),
        ("reset_peak_memory_stats", None),
    ):
        setattr(torch.cuda, name, no_op(name, result))

    real_load = torch.load

    def load(*args: Any, **kwargs: Any) -> Any:
        location = kwargs.get("map_location")
        if location is None or is_cuda(location) or isinstance(location, int):
            if location is not None:
                recorder.changed("cuda", f"torch.load(map_location={location!r}) loads to the CPU")
            kwargs["map_location"] = "cpu"
        return real_load(*args, **kwargs)

    torch.load = load

    real_ddp_init = nn.parallel.DistributedDataParallel.__init__

    def ddp_init(self: nn.parallel.DistributedDataParallel, *args: Any, **kwargs: Any) -> None:
        params = inspect.signature(real_ddp_init).bind(self, *args, **kwargs).arguments
        for name in ("device_ids", "output_device"):
            if params.get(name) is not None:
                recorder.changed("cuda", f"DistributedDataParallel({name}=...) dropped: CPU model")
                params[name] = None
        params.pop("self")
        extra = params.pop("kwargs", {})
        real_ddp_init(self, **params, **extra)

    nn.parallel.DistributedDataParallel.__init__ = ddp_init  # type: ignore[method-assign]


def patch_process_group(recorder: Recorder, map_cuda: bool) -> None:
    """Record the process group the script joins; nccl becomes gloo when there is no GPU."""
    real_init = dist.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> None:
        if map_cuda:
            backend = kwargs.get("backend", args[0] if args else None)
            if isinstance(backend, str) and "nccl" in backend:
                recorder.changed("cuda", f"init_process_group({backend!r}) uses gloo")
                kwargs["backend"] = "gloo"
                args = args[1:]
            if is_cuda(kwargs.get("device_id")):
                kwargs.pop("device_id")
        real_init(*args, **kwargs)
        recorder.event(
            "dist",
            backend=str(dist.get_backend()),
            world_size=dist.get_world_size(),
            rank=dist.get_rank(),
        )

    dist.init_process_group = init_process_group
    torch.distributed.distributed_c10d.init_process_group = init_process_group


def patch_spawn(recorder: Recorder) -> None:
    """A `--launcher spawn` conversion starts its own processes with `mp.spawn`, one per GPU
    (one on a CPU). The verifier has started them already, one per rank with torchrun's
    environment: `mp.spawn(worker, args=...)` runs `worker(LOCAL_RANK, *args)` in this
    process, and the worker's `init_process_group(init_method="tcp://...", rank=...,
    world_size=...)` joins the verifier's group through that environment instead."""
    import torch.multiprocessing as mp

    spawned = [False]
    patched_init = dist.init_process_group

    def spawn(
        fn: Callable[..., Any], args: tuple[Any, ...] = (), nprocs: int = 1, **_: Any
    ) -> None:
        rank, world = int(os.environ["LOCAL_RANK"]), os.environ["WORLD_SIZE"]
        recorder.changed(
            "launcher",
            f"mp.spawn(nprocs={nprocs}) runs `{getattr(fn, '__name__', fn)}` in each of the "
            f"verifier's {world} processes, given its rank, and they join one group",
        )
        spawned[0] = True
        fn(rank, *args)

    def init_process_group(*args: Any, **kwargs: Any) -> None:
        if spawned[0]:
            for key in ("init_method", "rank", "world_size", "store"):
                kwargs.pop(key, None)
        patched_init(*args, **kwargs)

    mp.spawn = spawn  # type: ignore[attr-defined,assignment]
    dist.init_process_group = init_process_group
    torch.distributed.distributed_c10d.init_process_group = init_process_group


def as_indices(index: object) -> list[int] | None:
    if isinstance(index, int):
        return [index]
    try:
        return [int(i) for i in index]  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return None


def _iterated_by_a_loop(frame: Any) -> bool:
    """Whether the code asking for the next batch is a loop's iteration (`for batch in
    loader`, through `enumerate`, `zip` or a generator such as tqdm's), or a generator's
    `yield from loader` (a disabled tqdm bar's: `tqdm(loader, disable=rank != 0)`, which
    ended no pass in the processes without the bar), not a call of `next(iterator)`, whose
    caller expects a batch and would fail on StopIteration."""
    import dis

    code: bytes = frame.f_code.co_code
    at: int = frame.f_lasti
    if not 0 <= at < len(code):
        return False
    operation = dis.opname[code[at]]
    delegating = operation in {"SEND", "YIELD_FROM"} and bool(
        frame.f_code.co_flags & inspect.CO_GENERATOR
    )
    return operation == "FOR_ITER" or delegating


def _in_the_dataset(dataset: Any, indices: list[int] | None) -> list[int] | None:
    """A `Subset`'s indices as the underlying dataset's: the conversion reads
    `DistributedSampler(Subset(ds, train_idx))` where the original read
    `SubsetRandomSampler(train_idx)` over `ds` (round-17 audit s35)."""
    while indices is not None and isinstance(dataset, Subset):
        indices = [int(dataset.indices[i]) for i in indices]
        dataset = dataset.dataset
    return indices


def _script_frames() -> tuple[tuple[str, int], ...]:
    """The file and line of each of the script's frames on the stack (not torch's, not a
    library's, not the verifier's): where a DataLoader is being made."""
    found = []
    frame = inspect.currentframe()
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(LIBRARIES) or "site-packages" in name or name.startswith("<")):
            found.append((name, frame.f_lineno))
        frame = frame.f_back
    return tuple(found)


# Where torch and ddpify are installed: their frames are not the script's.
LIBRARIES = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))


def patch_data(
    recorder: Recorder,
    resized: dict[int, int],
    added: set[int] | None = None,
    pad_for: int = 1,
    padded: int | None = None,
) -> None:
    """Number the DataLoaders, resize the original's training batches (`resized`: the batch
    size each loader, by its number, trains with), make sampling
    sequential, and record the sample indices of every batch. A loader the conversion
    added (made on one of the `added` lines of the script) takes the number of the loader
    whose dataset it reads again, or none of the original's (a negative one). With
    `pad_for` processes, the sampler of the original's training loader (number `padded`)
    repeats its first samples at the end of a pass, as a DistributedSampler pads the dataset
    to a multiple of them."""
    real_init = DataLoader.__init__
    signature = inspect.signature(real_init)
    made: list[tuple[object, int]] = []  # each loader's dataset, and its number
    # where each loader was made (the script's frames): one made again at the same place (a
    # new loader every epoch, round-17 audit s27) is the same loader, and keeps its number
    places: dict[tuple[tuple[str, int], ...], int] = {}

    def number(dataset: object) -> int:
        frame = inspect.currentframe()
        while frame is not None and frame.f_globals.get("__name__") != "__main__":
            frame = frame.f_back
        if frame is not None and frame.f_lineno in (added or ()):
            twin = next((n for seen, n in reversed(made) if seen is dataset), None)
            return twin if twin is not None else -1 - len(made)
        place = _script_frames()
        if place in places:
            return places[place]
        places[place] = recorder.next_loader()
        return places[place]

    def loader_init(self: DataLoader[Any], *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        ordinal = number(bound.arguments.get("dataset"))
        made.append((bound.arguments.get("dataset"), ordinal))
        declared = bound.arguments.get("batch_size", 1)
        batches = bound.arguments.get("batch_sampler")
        if isinstance(batches, BatchSampler):  # `batch_sampler=BatchSampler(sampler, 32, ...)`
            declared = batches.batch_size
        train_batch = resized.get(ordinal)
        if (
            train_batch is not None
            and declared is not None
            and (batches is None or isinstance(batches, BatchSampler))
            and declared != train_batch
        ):
            if isinstance(batches, BatchSampler):
                batches.batch_size = train_batch
            else:
                bound.arguments["batch_size"] = train_batch
            recorder.changed(
                "batch", f"DataLoader #{ordinal}: batch_size {declared} -> {train_batch}"
            )
        real_init(*bound.args, **bound.kwargs)
        self._ddpify_ordinal = ordinal
        if pad_for > 1 and ordinal == padded:
            _pad_like_the_ranks(recorder, self, pad_for)
        try:
            dataset_len: int | None = len(self.dataset)  # type: ignore[arg-type]
            length: int | None = len(self)
        except TypeError:
            dataset_len = length = None
        recorder.event(
            "loader",
            ordinal=ordinal,
            batch_size=self.batch_size or getattr(self.batch_sampler, "batch_size", None),
            declared_batch_size=declared,
            # a `batch_sampler=BatchSampler(sampler, ...)`'s own sampler: the loader's
            # `.sampler` is then a SequentialSampler it made itself
            sampler=sampler_name(getattr(self.batch_sampler, "sampler", self.sampler)),
            dataset_len=dataset_len,
            length=length,
        )

    DataLoader.__init__ = loader_init  # type: ignore[method-assign]

    real_random_iter = RandomSampler.__iter__

    def random_iter(self: RandomSampler) -> Iterator[int]:
        if self.replacement:  # it draws: from its generator, seeded alike (`drawing_init`)
            yield from sampled(real_random_iter(self))
            return
        recorder.changed("shuffle", "RandomSampler (shuffle=True) yields 0, 1, 2, ... in order")
        size = len(self.data_source)
        for i in range(self.num_samples):
            yield i % size
        yield from range(getattr(self, "_ddpify_pad", 0))

    real_sequential_iter = SequentialSampler.__iter__

    def sequential_iter(self: SequentialSampler) -> Iterator[int]:
        yield from real_sequential_iter(self)
        yield from range(getattr(self, "_ddpify_pad", 0))

    SequentialSampler.__iter__ = sequential_iter  # type: ignore[method-assign]

    RandomSampler.__iter__ = random_iter  # type: ignore[method-assign]

    def sampled(indices: Iterator[int]) -> Iterator[int]:
        """A drawing sampler's indices: its draws pick samples, they are not the script's
        randomness while training (noise, masks)."""
        while True:
            recorder.in_loader_setup += 1
            try:
                index = next(indices)
            except StopIteration:
                return
            finally:
                recorder.in_loader_setup -= 1
            yield index

    real_weighted_iter = WeightedRandomSampler.__iter__

    def weighted_iter(self: WeightedRandomSampler) -> Iterator[int]:
        yield from sampled(real_weighted_iter(self))

    WeightedRandomSampler.__iter__ = weighted_iter  # type: ignore[method-assign]

    for drawing in (RandomSampler, WeightedRandomSampler):
        real_drawing_init = drawing.__init__

        def drawing_init(
            self: RandomSampler | WeightedRandomSampler,
            *args: Any,
            _real: Callable[..., None] = real_drawing_init,
            **kwargs: Any,
        ) -> None:
            _real(self, *args, **kwargs)
            if draws_samples(self) and self.generator is None:
                # the conversion's is `torch.Generator().manual_seed(torch.initial_seed() +
                # rank)`: one process of it draws the original's samples
                self.generator = torch.Generator().manual_seed(torch.initial_seed())
                recorder.changed(
                    "sampler",
                    f"{type(self).__name__} draws from a generator seeded with "
                    "torch.initial_seed(), as the conversion's first process does",
                )

        drawing.__init__ = drawing_init  # type: ignore[method-assign]

    def subset_iter(self: SubsetRandomSampler) -> Iterator[int]:
        recorder.changed("shuffle", "SubsetRandomSampler yields its indices in order")
        yield from (int(i) for i in self.indices)

    SubsetRandomSampler.__iter__ = subset_iter  # type: ignore[method-assign]

    real_sampler_init = DistributedSampler.__init__

    def sampler_init(self: DistributedSampler[Any], *args: Any, **kwargs: Any) -> None:
        real_sampler_init(self, *args, **kwargs)
        self._ddpify_shuffled = self.shuffle  # type: ignore[attr-defined]
        if self.shuffle:
            recorder.changed("shuffle", "DistributedSampler(shuffle=True) runs with shuffle=False")
            self.shuffle = False

    DistributedSampler.__init__ = sampler_init  # type: ignore[method-assign]

    base = dataloader_module._BaseDataLoaderIter
    real_iter_init = base.__init__
    real_next_index: Callable[[Any], Any] = base._next_index
    real_next = base.__next__

    serials = itertools.count()

    def iter_init(self: Any, loader: DataLoader[Any]) -> None:
        recorder.in_loader_setup += 1  # its seed for workers is not the script's randomness
        try:
            real_iter_init(self, loader)
        finally:
            recorder.in_loader_setup -= 1
        self._ddpify_loader = getattr(loader, "_ddpify_ordinal", None)
        self._ddpify_dataloader = loader
        # not id(self): a peek's iterator is freed and the loop's may reuse its address
        self._ddpify_serial = next(serials)
        pending: deque[list[int] | None] = deque()
        self._ddpify_pending = pending

    def next_index(self: Any) -> Any:
        index = real_next_index(self)
        pending = getattr(self, "_ddpify_pending", None)
        if pending is not None:
            pending.append(_in_the_dataset(self._dataset, as_indices(index)))
        return index

    def next_batch(self: Any) -> Any:
        if recorder.pass_is_over(
            getattr(self, "_ddpify_loader", None), getattr(self, "_ddpify_start", 0)
        ) and (
            _iterated_by_a_loop(sys._getframe(1))
            or not getattr(getattr(self, "_ddpify_dataloader", None), "_ddpify_counted", False)
        ):
            # the epoch, shortened for the check, ends here: for a loop over the loader,
            # and for `next(it)` that catches StopIteration to start the next pass. Not
            # where the script counts its batches itself with the loader's length (`for i
            # in range(len(loader)): x, y = next(it)`, round-36 audits A crnn and B
            # dataloader_iter_next: a StopIteration crashed both runs): that pass runs on
            # until the check has its steps
            raise StopIteration
        try:
            batch = real_next(self)
        except StopIteration:
            recorder.pass_ends(getattr(self, "_ddpify_loader", None))
            raise
        # Workers prefetch indices ahead; batches still come back in order.
        pending = getattr(self, "_ddpify_pending", None)
        indices = pending.popleft() if pending else None
        serial = getattr(self, "_ddpify_serial", -1)
        recorder.batch_fetched(serial, getattr(self, "_ddpify_loader", None), indices)
        return batch

    real_loader_iter = DataLoader.__iter__

    def loader_iter(self: DataLoader[Any]) -> Any:
        """A pass starts: an iterator made, or (persistent workers) the loader's one reset."""
        iterator: Any = real_loader_iter(self)
        iterator._ddpify_start = recorder.step
        batches = getattr(self, "batch_sampler", None)
        sampler = getattr(batches, "sampler", None) or getattr(self, "sampler", None)
        recorder.pass_starts(getattr(self, "_ddpify_ordinal", None), sampler)
        return iterator

    DataLoader.__iter__ = loader_iter  # type: ignore[method-assign]

    real_loader_len = DataLoader.__len__

    def loader_len(self: DataLoader[Any]) -> int:
        """The script reads how many batches a pass has: it may count them out itself."""
        self._ddpify_counted = True
        return real_loader_len(self)

    DataLoader.__len__ = loader_len  # type: ignore[method-assign]
    base.__init__ = iter_init  # type: ignore[method-assign]
    base._next_index = next_index  # type: ignore[method-assign]
    base.__next__ = next_batch  # type: ignore[method-assign]
    _seed_each_sample(recorder)


def _pad_like_the_ranks(recorder: Recorder, loader: DataLoader[Any], processes: int) -> None:
    """A DistributedSampler pads its dataset to a multiple of the processes with its first
    samples (39 to 40 for 2): the original's training sampler, made sequential, repeats as
    many at the end of a pass, so that its last global batch is the ranks' (round-28 audit A
    riemannian_sgd_poincare: "not equivalent" of a correct conversion)."""
    batches = loader.batch_sampler
    sampler = batches.sampler if isinstance(batches, BatchSampler) else loader.sampler
    if not isinstance(sampler, RandomSampler | SequentialSampler):
        return
    if isinstance(sampler, RandomSampler) and sampler.replacement:
        return
    try:
        size = len(sampler.data_source)
    except TypeError:
        return
    pad = -size % processes
    if pad:
        sampler._ddpify_pad = pad  # type: ignore[union-attr]
        recorder.changed(
            "padding",
            f"the original's training sampler repeats its first {pad} sample(s) at the end of "
            f"each pass, as DistributedSampler pads {size} samples to {size + pad} for "
            f"{processes} processes",
        )


# NumPy's global draws whose numbers depend on their size alone: made per sample too.
NUMPY_PER_SAMPLE = (
    "rand", "randn", "random", "random_sample", "standard_normal", "normal", "uniform",
    "randint", "beta", "binomial", "poisson", "exponential", "gamma", "laplace", "lognormal",
)  # fmt: skip


class PrintedLines:
    """`sys.stdout` or `sys.stderr`, passing everything on, and telling the recorder each
    line written through it (a progress bar's redrawn line: its last state), and the lines
    another file of the script's folder wrote (`print` in engine.py, which a conversion
    leaves as it is and reports)."""

    def __init__(self, stream: Any, recorder: Recorder, script: Path | None = None) -> None:
        self._stream = stream
        self._recorder = recorder
        self._partial = ""
        # the line being written began while training, before an evaluation ended: a
        # progress line redrawn with '\r' and ended by the evaluation's first print
        # (meliketoy/wide-resnet.pytorch's `sys.stdout.write('\r| Epoch ...')`) is training's
        self._began_training = False
        self._script = script.resolve() if script is not None else None

    def write(self, text: str) -> int:
        written: int = self._stream.write(text)
        carried = bool(self._partial)
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()[-1000:]
        origin = self._origin(sys._getframe(1)) if lines else None
        for number, line in enumerate(lines):
            shown = line.rsplit("\r", 1)[-1]
            if number == 0 and carried and self._began_training:
                self._recorder.printed(shown, training=True)
            else:
                self._recorder.printed(shown)
            if origin is not None and line.strip():
                self._recorder.event("printed_elsewhere", text=line, file=origin)
        if self._partial and (lines or not carried):
            self._began_training = self._recorder.evaluated is None
        return written

    def _origin(self, frame: Any) -> str | None:
        """The file of the script's folder other than the script whose code is writing,
        past the library frames between (print, logging, tqdm); None for the script's own."""
        if self._script is None:
            return None
        folder = self._script.parent
        while frame is not None:
            path = Path(frame.f_code.co_filename)
            if path.is_absolute() and path.is_relative_to(folder) and path.suffix == ".py":
                return None if path == self._script else path.relative_to(folder).as_posix()
            frame = frame.f_back
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def patch_output(recorder: Recorder, script: Path | None = None) -> None:
    """What the script prints or logs, line by line, for the evaluation check."""
    sys.stdout = PrintedLines(sys.stdout, recorder, script)
    sys.stderr = PrintedLines(sys.stderr, recorder, script)


def patch_rnn_dropout(recorder: Recorder) -> None:
    """The dropout between a recurrent module's layers (`nn.GRU(..., dropout=0.3)`) made 0:
    it runs in the fused kernel, past the check's function mode (round-17 audit s07)."""
    real = torch.nn.RNNBase.__init__

    def init(self: torch.nn.RNNBase, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        if self.dropout:
            recorder.changed(
                "dropout", f"{type(self).__name__}(dropout={self.dropout}) between layers set to 0"
            )
            self.dropout = 0.0

    torch.nn.RNNBase.__init__ = init  # type: ignore[method-assign]


def patch_recompute(mode: CheckMode) -> None:
    """torch.utils.checkpoint runs the forward again inside the backward pass, where the
    check's function mode is not active: the recomputation would keep the dropout the mode
    took out of the forward and fail with CheckpointError (round-27 audit A
    grad_checkpointing_transformer). The checkpointed function runs under the mode both
    times."""
    import torch.utils.checkpoint as checkpointing

    real = checkpointing.checkpoint

    def checkpoint(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        def under_mode(*inner: Any, **named: Any) -> Any:
            active = _get_current_function_mode_stack()  # type: ignore[no-untyped-call]
            if any(entered is mode for entered in active):
                return function(*inner, **named)
            with mode:
                return function(*inner, **named)

        return real(under_mode, *args, **kwargs)

    checkpointing.checkpoint = checkpoint


def patch_backward(recorder: Recorder) -> None:
    """Backward passes seen, for a script that updates its parameters by hand, and the
    optimizers it makes, for one that does not."""
    real_backward = torch.autograd.backward
    real_init = torch.optim.Optimizer.__init__

    def backward(*args: Any, **kwargs: Any) -> None:
        recorder.backward_starts()
        try:
            real_backward(*args, **kwargs)
        finally:
            recorder.backward_ends()

    def init(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        if not isinstance(self, UpdatedByHand):
            recorder.optimizers_made += 1
        real_init(self, *args, **kwargs)

    torch.autograd.backward = backward
    torch.optim.Optimizer.__init__ = init  # type: ignore[method-assign]


def patch_rnn_inputs() -> None:
    """Recurrent modules cast float inputs to their float64 weights (`_weights_dtype`)."""
    for layer in (torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU):
        layer.forward = _weights_dtype(layer.forward)  # type: ignore[method-assign]


def _weights_dtype(forward: Callable[..., Any]) -> Callable[..., Any]:
    """A recurrent module's forward given float32 inputs while its weights are float64 (made
    so for the check, round-18 audit s05's `torch.from_numpy` features): the inputs cast to
    them, as the check's mode does for other operations (the module checks the dtype first)."""

    def cast(value: Any, dtype: torch.dtype) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.to(dtype)
        if isinstance(value, PackedSequence):  # a namedtuple: its data only (round-24 B)
            return value._replace(data=cast(value.data, dtype))
        if isinstance(value, tuple):  # LSTM's (h, c)
            return tuple(cast(item, dtype) for item in value)
        return value

    def run(self: torch.nn.RNNBase, input: Any, hx: Any = None) -> Any:
        weights = self._flat_weights[0] if self._flat_weights else None
        if weights is not None and weights.dtype == torch.float64:
            input, hx = cast(input, torch.float64), cast(hx, torch.float64)
        return forward(self, input, hx)

    return run


def patch_torch_seed(recorder: Recorder) -> None:
    """Note when the script seeds torch itself: only then may its processes draw alike
    (since torch 2.x an unseeded process starts from a seed of its own)."""
    real = torch.manual_seed

    def manual_seed(seed: Any) -> Any:
        recorder.torch_seeded = True
        return real(seed)

    torch.manual_seed = manual_seed
    torch.random.manual_seed = manual_seed


def skip_seeds(recorder: Recorder, script: os.PathLike[str], lines: set[int]) -> None:
    """One process of a conversion: the seeds it added on these lines of the script, to make
    each process draw apart, are skipped, so that rank 0 draws on from the script's own
    seed as the original does (and its batches match the original's)."""
    path = os.path.abspath(script)
    numpy: Any = sys.modules.get("numpy")
    seeders = [(torch, "manual_seed"), (torch.random, "manual_seed"), (random, "seed")]
    if numpy is not None:
        seeders.append((numpy.random, "seed"))
    for owner, name in seeders:
        real = getattr(owner, name)

        def seed(*args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
            caller = sys._getframe(1)
            if caller.f_lineno in lines and os.path.abspath(caller.f_code.co_filename) == path:
                recorder.changed(
                    "seeds",
                    f"one process: the conversion's seed for each process (line "
                    f"{caller.f_lineno}) skipped, so it draws on as the original does",
                )
                return None
            return _real(*args, **kwargs)

        setattr(owner, name, seed)


# Python's global generator: the draws a training step may make (teacher forcing decided by
# `random.random() < ratio`, a layer dropped at random, a random crop size).
PY_RANDOM = ("random", "uniform", "randint", "randrange", "choice", "choices", "sample",
             "shuffle", "gauss", "normalvariate")  # fmt: skip


def patch_python_random(recorder: Recorder) -> None:
    """Python's `random` while training, outside a sample's `__getitem__` (seeded per sample
    there) and the loader's set-up: noted as a draw the runs make apart (the original once
    for its whole batch, each rank for its part), not changed. Equivalence is then judged
    from one process of the conversion, which draws as the original does."""

    def noticed(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def draw(*args: Any, **kwargs: Any) -> Any:
            if recorder.training and not recorder.in_loader_setup and not recorder.in_sample:
                recorder.changed("random", f"random.{name} drawn while training")
            return real(*args, **kwargs)

        return draw

    for name in PY_RANDOM:
        setattr(random, name, noticed(name, getattr(random, name)))


def patch_numpy(recorder: Recorder) -> None:
    """NumPy's global generator while training (PyTorch-GAN's `np.random.normal(0, 1,
    (imgs.shape[0], latent_dim))`): a draw shaped like the batch is made per sample, as
    torch's are (CheckMode). The ranks' own draws are recorded for comparison only when the
    script seeds NumPy itself: unseeded, every process starts from OS entropy, and the
    harness's common seed would make them look alike."""
    numpy: Any = sys.modules.get("numpy")
    if numpy is None:
        try:
            import numpy
        except ImportError:
            return
    module = numpy.random
    real_seed = module.seed
    seeded = [False]

    def seed(*args: Any, **kwargs: Any) -> Any:
        seeded[0] = True
        return real_seed(*args, **kwargs)

    module.seed = seed

    def per_sample(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def draw(*args: Any, **kwargs: Any) -> Any:
            value = real(*args, **kwargs)
            if not recorder.training or recorder.in_loader_setup or recorder.in_sample:
                return value
            indices = recorder.batch_indices
            shaped = (
                isinstance(value, numpy.ndarray)
                and value.ndim > 0
                and indices is not None
                and value.shape[0] == len(indices)
            )
            given = [*args, *kwargs.values()]
            if not shaped or any(isinstance(v, numpy.ndarray) and v.ndim for v in given):
                recorder.changed("random", f"np.random.{name} drawn while training")
                return value
            seeds = recorder.draw_seeds()
            if seeded[0]:
                recorder.drawn(f"np.random.{name}", torch.from_numpy(numpy.array(value)))
            rows = [
                getattr(numpy.random.RandomState(seed % 2**32), name)(*args, **kwargs)[0]
                for seed in seeds
            ]
            recorder.changed(
                "keyed",
                f"np.random.{name} drawn for the batch: each sample's numbers from a generator "
                "seeded by its index, alike in both runs",
            )
            return numpy.stack(rows).astype(value.dtype, copy=False)

        return draw

    for name in NUMPY_PER_SAMPLE:
        real = getattr(module, name, None)
        if real is not None:
            setattr(module, name, per_sample(name, real))


def _seed_each_sample(recorder: Recorder) -> None:
    """A map-style dataset's samples are fetched one by one, each from generators (torch's,
    Python's, NumPy's) seeded by its index and how often it was fetched: a random crop or
    flip is then the same for a sample in the original's whole batch and in a rank's part.
    The script's own streams go on as if nothing had been drawn."""
    fetcher = fetch_module._MapDatasetFetcher
    fetched: dict[int, int] = {}

    def one(dataset: Any, index: Any) -> Any:
        if not isinstance(index, int):
            return dataset[index]
        occurrence = fetched[index] = fetched.get(index, 0) + 1
        seed = sample_seed(index, occurrence, -1)
        state = random.getstate()
        numpy: Any = sys.modules.get("numpy")
        numpy_state = numpy.random.get_state() if numpy is not None else None
        recorder.in_sample += 1
        try:
            with torch.random.fork_rng(devices=[]):
                torch.default_generator.manual_seed(seed)  # not the script's own
                random.seed(seed)
                if numpy is not None:  # not through `seed`, which notes the script's own
                    numpy.random.set_state(numpy.random.RandomState(seed % 2**32).get_state())
                return dataset[index]
        finally:
            recorder.in_sample -= 1
            random.setstate(state)
            if numpy is not None:
                numpy.random.set_state(numpy_state)

    def fetch(self: Any, possibly_batched_index: Any) -> Any:
        if self.auto_collation and not hasattr(self.dataset, "__getitems__"):
            return self.collate_fn([one(self.dataset, i) for i in possibly_batched_index])
        if not self.auto_collation:
            return self.collate_fn(one(self.dataset, possibly_batched_index))
        return real_fetch(self, possibly_batched_index)

    real_fetch: Callable[[Any, Any], Any] = fetcher.fetch
    fetcher.fetch = fetch  # type: ignore[method-assign]


SLOW_SAVE = 0.3  # seconds rank 0 pauses halfway through each checkpoint it writes


def _exists(file: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> bool:
    try:
        os.stat(file)  # not os.path.exists: patch_loads records the script's own look-ups
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        pass
    return True


def first_of_several() -> bool:
    """This process is rank 0 of a process group of more than one."""
    return dist.is_initialized() and dist.get_world_size() > 1 and dist.get_rank() == 0


def patch_loads(recorder: Recorder) -> None:
    """Record every torch.load with the map_location the script gave (before patch_cuda's
    load maps it to the CPU), and the files of the working directory the script looks for
    and does not find: what it resumes from when it runs again."""
    inner_load = torch.load

    def load(f: Any, *args: Any, **kwargs: Any) -> Any:
        location = kwargs.get("map_location", args[0] if args else None)
        recorder.loaded(f, location)
        return inner_load(f, *args, **kwargs)

    torch.load = load

    def looking(real: Callable[..., bool]) -> Callable[..., bool]:
        def find(path: Any, *args: Any, **kwargs: Any) -> bool:
            found = real(path, *args, **kwargs)
            if not found:
                recorder.looked_for(path)
            return found

        return find

    os.path.exists = looking(os.path.exists)
    os.path.isfile = looking(os.path.isfile)
    pathlib.Path.exists = looking(pathlib.Path.exists)  # type: ignore[method-assign]
    pathlib.Path.is_file = looking(pathlib.Path.is_file)  # type: ignore[method-assign]


def patch_writes(recorder: Recorder) -> None:
    """Record files opened for writing and every torch.save (which still happens)."""
    real_open = builtins.open
    real_save = torch.save

    def open_for_check(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if (
            not recorder.suppress_writes
            and isinstance(file, (str, bytes, os.PathLike))
            and any(flag in mode for flag in "wax+")
        ):
            recorder.wrote(file, mode)
            if any(flag in mode for flag in "wx") and first_of_several() and not _exists(file):
                # Rank 0 makes a new file late: another rank that reads it with no barrier
                # after the write finds it missing (round-17 audit s33: vocab.json).
                recorder.changed("writes", f"rank 0 pauses {SLOW_SAVE} s before making a file")
                time.sleep(SLOW_SAVE)
        return real_open(file, mode, *args, **kwargs)

    def save(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(obj, torch.storage.TypedStorage | torch.UntypedStorage):
            # pickling a tensor saves its storage (`broadcast_object_list` of the samples):
            # torch's own, not the script's
            real_save(obj, f, *args, **kwargs)
            return
        recorder.saved(obj, f)
        recorder.suppress_writes += 1
        try:
            if isinstance(f, (str, os.PathLike)) and first_of_several():
                slow_save(obj, f, *args, **kwargs)
            else:
                real_save(obj, f, *args, **kwargs)
        finally:
            recorder.suppress_writes -= 1

    def slow_save(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
        """Rank 0 writes in two halves with a pause between them: another rank that reads
        the file before it is complete (no barrier after the save) fails every time."""
        recorder.changed("writes", f"rank 0 pauses {SLOW_SAVE} s halfway through each torch.save")
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        data = buffer.getvalue()
        with real_open(f, "wb") as out:
            out.write(data[: len(data) // 2])
            out.flush()
            time.sleep(SLOW_SAVE)
            out.write(data[len(data) // 2 :])

    builtins.open = open_for_check
    io.open = open_for_check
    torch.save = save
    torch.serialization.save = save
    patch_log_files(recorder)


def patch_log_files(recorder: Recorder) -> None:
    """A log file a `logging.FileHandler` opens to append to (`basicConfig(filename=...)`
    at import, on every rank, before the process group exists) is written by the processes
    that log records into it, not by every one that opened it (round-29 audit A
    simclr_ntxent_two_views: "training.log written by ranks 0, 1", rank 1 wrote nothing)."""
    real_open = logging.FileHandler._open
    real_emit = logging.FileHandler.emit

    def open_quietly(self: logging.FileHandler) -> Any:
        if "a" not in self.mode:
            return real_open(self)
        recorder.suppress_writes += 1
        try:
            return real_open(self)
        finally:
            recorder.suppress_writes -= 1

    def emit(self: logging.FileHandler, record: logging.LogRecord) -> None:
        if "a" in self.mode and not getattr(self, "_ddpify_wrote", False):
            setattr(self, "_ddpify_wrote", True)  # noqa: B010
            recorder.wrote(self.baseFilename, self.mode, via="logging")
        real_emit(self, record)

    logging.FileHandler._open = open_quietly  # type: ignore[method-assign]
    logging.FileHandler.emit = emit  # type: ignore[method-assign,assignment]


def draws_samples(sampler: object) -> bool:
    """A sampler that draws its samples: `WeightedRandomSampler`, `RandomSampler(...,
    replacement=True)`."""
    return isinstance(sampler, WeightedRandomSampler) or (
        isinstance(sampler, RandomSampler) and sampler.replacement
    )


def sampler_name(sampler: object) -> str:
    return type(sampler).__name__ + (DRAWING if draws_samples(sampler) else "")
