"""Distributed code, for the checks: the process group, the DDP wraps, collectives, and the
functions started as processes."""

from __future__ import annotations

import re
from functools import cached_property

import libcst as cst

from ddpify.analysis.api import (
    COLLECTIVE_CALLS,
    COLLECTIVE_LAST_NAMES,
    COLLECTIVES,
    DDP_WRAPPER,
    DISTRIBUTED_MARKERS,
    PROCESS_STARTERS,
    SET_DEVICE,
)
from ddpify.analysis.calls import CallGraph
from ddpify.analysis.index import SourceIndex
from ddpify.analysis.tree import call_arg, dotted, walk

_GPU_WORDS = re.compile("cuda|nccl|device_ids", re.IGNORECASE)
GPU_TEXT = f"(?i){_GPU_WORDS.pattern}"  # for the prefilters of rules that read uses_gpu


class DistributedCode:
    """What a script does with torch.distributed."""

    def __init__(self, index: SourceIndex, graph: CallGraph) -> None:
        self.index = index
        self.graph = graph

    @cached_property
    def distributed_call(self) -> cst.Call | None:
        """A call showing the script is already distributed (process group, DDP, sampler)."""
        for call in self.index.calls:
            if self.index.is_call_to(call, DISTRIBUTED_MARKERS):
                return call
        return None

    @cached_property
    def initialises_process_group(self) -> list[cst.Call]:
        return [
            c
            for c in self.index.calls
            if self.index.is_call_to(c, {"torch.distributed.init_process_group"})
        ]

    @cached_property
    def set_device_calls(self) -> list[cst.Call]:
        """`torch.cuda.set_device(...)` and the other calls that pick the process's device."""
        return [c for c in self.index.calls if self.index.is_call_to(c, SET_DEVICE)]

    def collectives_before_set_device(self, init: cst.Call) -> list[cst.Call]:
        """Collectives after `init` and before the first `set_device` that follows it in the
        same function: with NCCL they run on GPU 0 on every rank."""
        function = self.index.function_of(init)
        later = [
            c
            for c in self.set_device_calls
            if self.index.function_of(c) is function and self.index.precedes(init, c)
        ]
        if not later:
            return []
        return [
            call
            for call in self.index.calls
            if self.index.function_of(call) is function
            and self.is_collective(call)
            and self.index.precedes(init, call)
            and self.index.precedes(call, later[0])
        ]

    @cached_property
    def uses_gpu(self) -> bool:
        """Whether the code (not its comments) names CUDA, NCCL or `device_ids`: a job that
        never does runs on CPU, with gloo (`backend=args.backend` included)."""
        if any(_GPU_WORDS.search(name) for name in self.index.names_used):
            return True
        return any(
            isinstance(node, cst.SimpleString | cst.FormattedStringText)
            and _GPU_WORDS.search(node.value)
            for node in walk(self.index.module)
        )

    @cached_property
    def process_starts(self) -> list[tuple[cst.Call, list[cst.FunctionDef]]]:
        """The calls that start processes of this file (`mp.spawn(worker, ...)`,
        `Process(target=worker)`), and the functions each runs."""
        found = []
        for call in self.index.calls:
            if not self.index.may_name(call, {"spawn", "start_processes", "Process"}):
                continue
            if not self.index.is_call_to(call, PROCESS_STARTERS):
                continue
            arg = call_arg(call, 0, "fn") or call_arg(call, None, "target")
            name = dotted(arg.value) if arg is not None else None
            found.append((call, self.graph.defined(name or "")))
        return found

    @cached_property
    def spawned_functions(self) -> list[cst.FunctionDef]:
        """Functions this file starts as processes: they run on every rank without a call
        site here."""
        return [function for _, functions in self.process_starts for function in functions]

    @cached_property
    def group_is_optional(self) -> bool:
        """The script may also run without a process group: `init_process_group` sits under
        an `if`, or a `return` can come before it in its function (`init_distributed_mode`)."""
        for init in self.initialises_process_group:
            function = self.index.function_of(init)
            for ancestor in self.index.ancestors(init):
                if isinstance(ancestor, cst.If | cst.IfExp | cst.Try):
                    return True
                if ancestor is function:
                    break
            if function is not None and any(
                isinstance(node, cst.Return)
                and self.index.function_of(node) is function
                and self.index.precedes(node, init)
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
        for call in self.index.calls:
            if self.index.is_call_to(call, DDP_WRAPPER):
                holder = self.index.parent(call)
                while isinstance(holder, cst.Arg | cst.Call):  # torch.compile(DDP(model))
                    holder = self.index.parent(holder)
                if isinstance(holder, cst.Assign) and len(holder.targets) == 1:
                    name = dotted(holder.targets[0].target)
                    if name:
                        wraps[name] = call
        return wraps

    def may_be_collective(self, call: cst.Call) -> bool:
        """Whether `call` is named like a collective (cheap; `is_collective` resolves it)."""
        return self.index.may_name(call, COLLECTIVE_LAST_NAMES)

    def is_collective(self, call: cst.Call) -> bool:
        if not self.may_be_collective(call):
            return False
        if self.index.cannot_name(call.func, ("torch.distributed",)):
            return False
        return any(
            (name.startswith("torch.distributed.") and name.rsplit(".", 1)[-1] in COLLECTIVES)
            or name in COLLECTIVE_CALLS
            for name in self.index.qualified_names(call.func)
        )

    @cached_property
    def torch_load_calls(self) -> list[cst.Call]:
        return [call for call in self.index.calls if self.index.is_call_to(call, {"torch.load"})]
