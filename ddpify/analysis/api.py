"""The torch API the analysis recognises, by full name, and the text it leaves in a file.

Names are the qualified names LibCST's `QualifiedNameProvider` gives (`torch.utils.data.
DataLoader` however it was imported); the texts are what the check rules' prefilters
(`CheckRule.requires`) look for in a file's bytes before anything is parsed.
"""

from __future__ import annotations

import re

import libcst as cst

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
ITERABLE_DATASETS = {
    "torch.utils.data.IterableDataset",
    "torch.utils.data.dataset.IterableDataset",
    "torch.utils.data.ChainDataset",
    "torch.utils.data.dataset.ChainDataset",
}
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, ...): positions.
LOADER_POSITIONS = {"dataset": 0, "batch_size": 1, "shuffle": 2, "sampler": 3, "batch_sampler": 4}
SAMPLER_ARGUMENTS = ("sampler", "batch_sampler")
BATCH_SAMPLERS = ("torch.utils.data.BatchSampler", "torch.utils.data.sampler.BatchSampler")
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
PROCESS_STARTERS = {
    "torch.multiprocessing.spawn",
    "torch.multiprocessing.start_processes",
    "torch.multiprocessing.Process",
    "multiprocessing.Process",
}
OTHER_FRAMEWORKS = ("lightning", "pytorch_lightning", "accelerate", "deepspeed", "horovod")
# What picks the process's device; `init_process_group(device_id=...)` does it too.
SET_DEVICE = {
    "torch.cuda.set_device",
    "torch.xpu.set_device",
    "torch.accelerator.set_device_index",
    "torch.accelerator.set_device_idx",
}
LOG_SETUP = {"logging.basicConfig", "logging.getLogger", "logging.captureWarnings"}
LOG_LEVELS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "log"}
# The last parts of the names `SideEffects.of` resolves (print, torch.save, logging.*, ...).
SIDE_EFFECT_NAMES = {
    "print", "pprint", "pp", "save", "dump", "savez", "savez_compressed", "savetxt", "savemat",
    "save_image", "export", "configure", "log_value", "log_histogram", "log_images",
    *LOG_LEVELS,
}  # fmt: skip
ITER_WRAPPERS = {
    "enumerate", "tqdm", "tqdm.tqdm", "iter", "tqdm.auto.tqdm", "tqdm.notebook.tqdm",
    "progress_bar", "itertools.islice", "islice",
}  # fmt: skip
# Module attributes that behave the same on the DDP wrapper; anything else needs `.module`.
# Tensor methods that draw in place from torch's generator (`w.normal_()`).
IN_PLACE_DRAWS = ("normal_", "uniform_", "bernoulli_", "random_", "exponential_")
# Calls that draw a module's weights afresh (`head.reset_parameters()`; `nn.init.*` too).
REINITIALISE = ("reset_parameters", "_reset_parameters")
BATCH_NORMS = {"torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d"}
DDP_TRANSPARENT = {
    "module", "parameters", "named_parameters", "train", "eval", "zero_grad", "to", "cuda",
    "cpu", "modules", "named_modules", "children", "named_children", "buffers",
    "named_buffers", "requires_grad_", "training", "apply", "half", "float", "double",
    "bfloat16", "forward", "__call__",
}  # fmt: skip
# What the wrapper serves with other names: `module.`-prefixed (`named_parameters()` names a
# histogram tag, a param group's filter); the same tensors through `.module`, named as the
# single-GPU script named them.
DDP_RENAMED = {"named_parameters", "named_modules", "named_children", "named_buffers"}
# Calls that seed a global random generator, by the generator's family.
SEEDS = {
    "torch.manual_seed": "torch",
    "torch.random.manual_seed": "torch",
    "random.seed": "random",
    "numpy.random.seed": "numpy",
}
# Calls that compile or export the model they are given: TorchScript cannot script the DDP
# wrapper, and an export of it would be of the wrapper's forward.
EXPORTS = {
    "torch.jit.script", "torch.jit.trace", "torch.jit.save", "torch.onnx.export",
    "torch.export.export",
    # a quantized copy (quantization-aware training's last step, round-26 audit A qat)
    "torch.ao.quantization.convert", "torch.quantization.convert",
    "torch.ao.quantization.quantize_dynamic", "torch.quantization.quantize_dynamic",
    "torch.ao.quantization.quantize_fx.convert_fx", "torch.quantization.quantize_fx.convert_fx",
}  # fmt: skip
# Calls given the model that save it, and run no forward pass.
MODEL_SAVES = {"torch.save", "torch.jit.save"}
# DistributedDataParallel's own API: on the wrapper, never through `.module` (the bare module
# has none of it; a script testing `hasattr(model, "no_sync")` finds it on the wrapper).
DDP_OWN = {
    "no_sync", "join", "join_hook", "register_comm_hook", "require_backward_grad_sync",
    "require_forward_param_sync", "static_graph", "_set_static_graph", "process_group",
}  # fmt: skip
# Methods of models, optimizers and schedulers: a call of one of these names through an
# object other than `self` is not taken for a call of the script's own method.
TORCH_METHODS = {
    "train", "eval", "step", "zero_grad", "forward", "to", "cuda", "cpu", "update",
    "state_dict", "load_state_dict", "backward", "__call__", "apply", "reset",
}  # fmt: skip
PARAMETERS = ("parameters", "named_parameters")
# A module's methods that return the module itself (`TinyGPT(...).to(device)`).
RETURN_SELF = ("eval", "train", "cpu", "cuda", "to", "float", "half", "double", "requires_grad_")
# `torch.optim.AdamW`, not its schedulers.
OPTIMIZER_CLASS = re.compile(r"^torch\.optim\.(?!lr_scheduler|swa_utils)(\w+\.)*[A-Z]\w*$")
CUDA_LITERAL = re.compile(r"""^[rRbBuU]?(['"])cuda(:\d+)?\1$""")


def is_cuda_literal(node: cst.CSTNode) -> bool:
    """`"cuda"` or `"cuda:N"`."""
    return isinstance(node, cst.SimpleString) and bool(CUDA_LITERAL.match(node.value))


# ----- text the names above leave in a file, for the check rules' prefilters ------------
# A process group or a DDP wrap; torch.distributed; a collective.
DISTRIBUTED_TEXT = r"init_process_group|DistributedDataParallel"
TORCH_DISTRIBUTED_TEXT = "istributed"
COLLECTIVE_TEXT = "|".join(
    [*sorted(COLLECTIVES), "distributed.checkpoint", "new_group", "new_subgroups"]
)

# A rank guard (ddpify/analysis/ranks.py): a rank, a flag or a helper named on an `if` line
# (the flags' and helpers' own definitions test the rank on one too), or a decorator for
# rank 0.
_RANK_WORDS = (
    rb"rank|gpu|device_id|local_process_index|master|main_process|is_main|primary|chief"
    rb"|global_zero"
)
_GUARD_TEXT = re.compile(
    rb"\bif\b[^:]{0,300}?(?:"
    + _RANK_WORDS
    + rb")|@\s*[\w.]*(?:master|rank_zero|main_process|rank0)",
    re.IGNORECASE,
)
_LOCAL_GUARD_TEXT = re.compile(
    rb"\bif\b[^:]{0,300}?(?:local_rank|gpu|device_id|local_process_index|is_local_|rank\s*%"
    rb"|master|is_main|main_process)",
    re.IGNORECASE,
)


def may_guard_rank(source: bytes) -> bool:
    """Whether `source` can hold a rank-0 guard at all (a cheap prefilter)."""
    return _GUARD_TEXT.search(source) is not None


def may_guard_local_rank(source: bytes) -> bool:
    """Whether `source` can hold a guard on the local rank (a cheap prefilter)."""
    # A name that does not say "local" may still hold the local rank it was read from.
    return b"LOCAL_RANK" in source or _LOCAL_GUARD_TEXT.search(source) is not None


RANK_ZERO_TEXT = may_guard_rank
LOCAL_RANK_ZERO_TEXT = may_guard_local_rank

# Calls that copy the model they are given: an EMA, a teacher, the best weights kept aside.
MODEL_COPIES = {
    "copy.deepcopy",
    "torch.optim.swa_utils.AveragedModel",
    "timm.utils.ModelEma",
    "timm.utils.ModelEmaV2",
    "timm.utils.ModelEmaV3",
    "timm.utils.model_ema.ModelEma",
    "timm.utils.model_ema.ModelEmaV2",
    "timm.utils.model_ema.ModelEmaV3",
}
