"""DDP007: the batch-size and learning-rate semantics the user chose, made explicit."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.tree import (
    call_arg,
    dotted,
    is_attribute,
    is_method_call,
    is_name,
    methods,
    source_text,
    walk,
)
from ddpify.analysis.values import MAX_STEPS
from ddpify.emit import WORLD_SIZE, expression
from ddpify.fixes import batched_sampler_call
from ddpify.options import BatchMode, ScaleLR
from ddpify.rule import ConvertContext, ConvertRule, Example


class BatchAndLearningRate(ConvertRule):
    """
    ## What it does
    With `--batch global`, divides the training loader's `batch_size` by the world size so
    that the effective batch (and the right learning rate) stays what it was. With
    `--batch per-gpu` (the default, as in PyTorch's tutorial) each process keeps the
    script's batch size and the effective batch grows N times; `--scale-lr linear` or
    `--scale-lr sqrt` then scales the optimizer's `lr` by N or by the square root of N.

    A loss summed over the batch (`reduction='sum'`, `size_average=False`, a criterion
    built with them, or the script's own loss function returning one, as pytorch/examples'
    VAE does) is multiplied by the world size where `.backward()` is called on it: DDP
    averages the processes' gradients, and N times that average is the gradient of the sum
    over the global batch, the one the single-GPU script steps on. A sum divided by the
    batch's size (`len(x)`, `x.size(0)`) is a mean and is left alone. A full batch split
    between the processes (DDP004) with a mean loss gets it weighted by the part's share,
    `len(x_part) * world_size / len(x)`: with parts of unequal size (3 samples on 2
    processes) the plain average of their means would weigh some samples twice. There a
    loss summed by hand over what the model computes for the batch (`((model(x) - y) **
    2).sum()`, `torch.sum(...)`, a criterion's `reduction='none'` summed) counts as a sum
    when every term of the loss sums; a sum of a criterion's mean or of the parameters (a
    penalty) does not.

    ## Why is this bad?
    A per-GPU batch N times larger under an unchanged learning rate trains differently from
    the single-GPU run, silently. A summed loss left as it is takes steps 1/N the size of the
    single-GPU script's at the same global batch.
    """

    code = "DDP007"
    step = 7
    name = "batch-and-lr"
    message = (
        "batch size per process and learning rate follow --batch and --scale-lr; summed "
        "losses are the global batch's sum"
    )
    fix_safety = "Changes the optimisation only as the chosen options say."
    examples = (
        # A loss summed over the batch: the gradient of the global sum.
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            criterion = torch.nn.MSELoss(reduction="sum")
            loader = DataLoader(dataset, batch_size=64)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            """
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist

            criterion = torch.nn.MSELoss(reduction="sum")
            loader = DataLoader(dataset, batch_size=64)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = criterion(model(x), y)
                (loss * dist.get_world_size()).backward()
                optimizer.step()
            """,
        ),
        # Summed by hand over what the model computes for the batch: a sum too.
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(dataset, batch_size=64)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = ((model(x) - y) ** 2).sum()
                loss.backward()
                optimizer.step()
            """,
            """
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist

            loader = DataLoader(dataset, batch_size=64)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = ((model(x) - y) ** 2).sum()
                (loss * dist.get_world_size()).backward()
                optimizer.step()
            """,
        ),
        # A mean, a criterion's mean summed, a mean plus a penalty on the weights: unchanged.
        Example(
            """
            import torch
            import torch.nn.functional as F
            from torch.utils.data import DataLoader

            loader = DataLoader(dataset, batch_size=64)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = model(x).mean()
                loss.backward()
                loss = F.mse_loss(model(x), y).sum()
                loss.backward()
                penalty = sum((p**2).sum() for p in model.parameters())
                loss = F.mse_loss(model(x), y) + 1e-4 * penalty
                loss.backward()
                optimizer.step()
            """
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        options = ctx.options
        _scale_summed_losses(ctx)
        _foreign_sums(ctx)
        _refuse_local_gradient_scales(ctx)
        _weighted_means(ctx)
        _divided_by_a_count(ctx)
        _root_of_a_mean(ctx)
        _batch_statistics(ctx)
        split = anatomy.split_samples
        if options.batch is BatchMode.GLOBAL and split is not None and split.ordered:
            ctx.cannot(
                split.loop,
                "--batch global: batches sliced by the loop's counter keep their size in "
                "every process; divide it by the world size by hand",
                blocking=True,
            )
        if options.batch is BatchMode.GLOBAL and anatomy.drawn_batches is not None:
            ctx.cannot(
                anatomy.drawn_batches.loop,
                "--batch global: batches drawn at random keep their size in every process; "
                "divide it by the world size by hand",
            )
        paired = _pairs_the_batch(anatomy) if options.batch is BatchMode.GLOBAL else None
        if paired is not None:
            ctx.cannot(
                paired,
                "--batch global: the loss compares every sample of the batch with the others "
                "(in-batch negatives, `a @ b.T`): with each process's batch world_size times "
                "smaller, each term would see world_size times fewer; gather the features "
                "from every process (all_gather) by hand, or use --batch per-gpu",
                blocking=True,
            )
        if options.batch is BatchMode.GLOBAL:
            for loader in anatomy.script.train_loaders:
                size = call_arg(loader.call, 1, "batch_size")
                batches = batched_sampler_call(anatomy, loader)
                if batches is not None:  # `sampler=BatchSampler(..., 32, False)`, or
                    size = call_arg(batches, 1, "batch_size")  # `batch_sampler=` so
                if size is None or is_name(size.value, "None"):
                    ctx.cannot(loader.call, "no batch_size to divide by the world size")
                    continue
                ctx.plan.replace(size.value, lambda v: _scaled(v, f"// {WORLD_SIZE}"))
                ctx.changed(size, "batch size divided by the world size (--batch global)")
        if anatomy.whole_batch is not None and options.scale_lr is not ScaleLR.NONE:
            ctx.info(
                anatomy.whole_batch.loop,
                f"--scale-lr {options.scale_lr.value}: every step trains on all of the "
                "samples, split between the processes, so the effective batch is unchanged "
                "and the learning rate is left as it is",
            )
        elif options.scale_lr is not ScaleLR.NONE:
            factor = WORLD_SIZE if options.scale_lr is ScaleLR.LINEAR else f"{WORLD_SIZE} ** 0.5"
            for optimizer in {
                id(model.optimizer_call): model.optimizer_call for model in anatomy.models.all
            }.values():
                lr = call_arg(optimizer, 1, "lr")
                if lr is None:
                    ctx.cannot(optimizer, "no lr= to scale: the optimizer's default stays")
                    continue
                ctx.plan.replace(lr.value, partial(_scaled, operation=f"* {factor}"))
                ctx.changed(
                    lr, f"learning rate scaled by {factor} (--scale-lr {options.scale_lr.value})"
                )


# Losses whose mean is weighted by the classes' weights (`weight=`), or over the targets not
# ignored (`ignore_index=`): divided by the sum of the batch's weights or targets, not its size.
WEIGHTED_MEANS = {
    "torch.nn.CrossEntropyLoss", "torch.nn.NLLLoss", "torch.nn.functional.cross_entropy",
    "torch.nn.functional.nll_loss",
}  # fmt: skip


FUNCTIONAL_MEANS = {"torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss"}


def _weighted_means(ctx: ConvertContext) -> None:
    """`CrossEntropyLoss(weight=class_weights)` with the mean reduction (round-17 audit
    s06): its mean is over the batch's weights, so the mean of the processes' means (what
    DDP's averaged gradients follow) is not the mean over all their samples. Reported."""
    anatomy = ctx.anatomy
    for call in anatomy.calls:
        if not anatomy.is_call_to(call, WEIGHTED_MEANS):
            continue
        # DETR's `F.cross_entropy(logits, target, self.empty_weight)`: the third (round-24
        # audit A detr_matching); a loss module's first
        functional = anatomy.is_call_to(call, FUNCTIONAL_MEANS)
        weight = call_arg(call, 2 if functional else 0, "weight")
        ignored = call_arg(call, None, "ignore_index")
        reduction = call_arg(call, None, "reduction")
        if reduction is not None and not (
            isinstance(reduction.value, cst.SimpleString)
            and reduction.value.evaluated_value == "mean"
        ):
            continue
        if weight is not None and not is_name(weight.value, "None"):
            ctx.info(
                call,
                "a mean weighted by the classes' weights (`weight=`) divides by this "
                "process's sum of weights: DDP averages the processes' means, which differs a "
                "little from the weighted mean over all their samples (reduction='sum' "
                "divided by the all-reduced sum of weights is exact)",
            )
            return
        if call.args and _masked(anatomy, call.args[0].value, anatomy.function_of(call)):
            ctx.info(  # round-19 audit s14: ELECTRA's `cross_entropy(logits[masked], ...)`
                call,
                "a mean over the positions a mask selects divides by this process's count of "
                "them: DDP averages the processes' means, which differs from the mean over "
                "all their selected positions (reduction='sum' divided by the all-reduced "
                "count is exact)",
            )
            return
        if ignored is not None:  # round-18 audit s24: padded tokens of an NER tagger
            ctx.info(
                call,
                "a mean over the targets not ignored (`ignore_index=`) divides by this "
                "process's count of them: DDP averages the processes' means, so a token of a "
                "batch with fewer weighs more than in the mean over all their tokens "
                "(reduction='sum' divided by the all-reduced count is exact)",
            )
            return


def _in_steps_and_forwards(
    anatomy: Anatomy, collect: Callable[[cst.CSTNode], bool], made_only: bool = False
) -> None:
    """Run `collect` over the training steps (and what they call) and the script's classes'
    `forward`s (only of the classes it makes, with `made_only`)."""
    for loop in anatomy.script.train_loops:
        anatomy.graph.reaches(loop.batch_loop.body, collect)
    # and the script's functions handed to the function that trains (`train(model,
    # batch_hard_triplet_loss, device, loader, optimizer)`, round-33 audit A)
    loops = [loop.batch_loop for loop in anatomy.script.train_loops]
    for call in anatomy.calls:
        handed = [
            function
            for arg in call.args
            if isinstance(arg.value, cst.Name)
            for function in anatomy.graph.defined(arg.value.value)
            if anatomy.class_of(function) is None
        ]
        if handed and any(
            anatomy.inside(loop, callee) for callee in anatomy.graph.callees(call) for loop in loops
        ):
            for function in handed:
                anatomy.graph.reaches(function.body, collect)
    made = {dotted(call.func) for call in anatomy.calls}
    for name, owner in anatomy.classes.items():
        for method in methods(owner) if name in made or not made_only else ():
            if method.name.value == "forward":
                anatomy.graph.reaches(method.body, collect)


MEAN_SQUARES = {"torch.nn.functional.mse_loss", "torch.nn.MSELoss"}


def _root_of_a_mean(ctx: ConvertContext) -> None:
    """An RMSE loss, `torch.sqrt(mse(yhat, y) + eps)` (round-26 audit B kaggle_rmse): the
    root of this process's mean. DDP averages the processes' losses' gradients, and a root
    is not linear. Reported, at the first one found in a training loop or a `forward`."""
    anatomy = ctx.anatomy
    found: list[cst.Call] = []

    def mean_square(node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.Call):
            return False
        if anatomy.is_call_to(node, MEAN_SQUARES) or (
            is_method_call(node, "mean") and not node.args
        ):
            return True
        scope = anatomy.function_of(node)
        return any(  # `self.mse(yhat, y)`, `self.mse = nn.MSELoss()`
            isinstance(end, cst.Call) and anatomy.is_call_to(end, MEAN_SQUARES)
            for end in anatomy.values.origins(node.func, scope)
        )

    def collect(node: cst.CSTNode) -> bool:
        if (
            not found
            and isinstance(node, cst.Call)
            and (anatomy.is_call_to(node, {"torch.sqrt"}) or is_method_call(node, "sqrt"))
            and any(mean_square(inner) for inner in walk(node))
        ):
            found.append(node)
        return False

    _in_steps_and_forwards(anatomy, collect, made_only=True)  # a criterion's forward
    if found:
        ctx.info(
            found[0],
            f"`{source_text(found[0])}` is the root of this process's mean (an RMSE loss): "
            "DDP averages the processes' losses' gradients, which differ a little from the "
            "root of the mean over all their samples (a root is not linear)",
        )


def _divided_by_a_count(ctx: ConvertContext) -> None:
    """DETR's `loss_bbox.sum() / num_boxes`, `num_boxes = sum(len(t["labels"]) for t in
    targets)` (round-24 audit A detr_matching): a sum over this process's batch divided by
    its own count of items, as many as its part happens to hold. DETR all-reduces the count
    first. Reported, at the first one found."""
    anatomy = ctx.anatomy
    found: list[tuple[cst.BinaryOperation, str]] = []

    def collect(node: cst.CSTNode) -> bool:
        if (
            not found
            and isinstance(node, cst.BinaryOperation)
            and isinstance(node.operator, cst.Divide)
            and _a_count(anatomy, node.right, anatomy.function_of(node))
        ):
            found.append((node, source_text(node.right)))
        return False  # look at every node

    _in_steps_and_forwards(anatomy, collect)  # a criterion's forward, where DETR has it
    if found and not any(
        note.code == ctx.rule.code and f"by `{found[0][1]}`" in note.message
        for note in ctx.notes
        if ctx.rule is not None
    ):  # (a summed loss divided by it is reported already)
        node, count = found[0]
        ctx.info(
            node,
            f"`{source_text(node)}` divides by `{count}`, this process's count of items in "
            "its batch: DDP averages the processes' quotients, so an item of a part with fewer "
            "weighs more than in the single-process loss (DETR all-reduces its count first, "
            "then divides it by the world size)",
        )


def _a_count(anatomy: Anatomy, divisor: cst.BaseExpression, scope: cst.FunctionDef | None) -> bool:
    """A count of this process's batch: `num_boxes` made by `sum(len(t["labels"]) for t in
    targets)`, or `mask.sum()` of a mask (`mask = (y != PAD).float()`: the real tokens, the
    round-25 audit B so_pad_collate_masked_loss), or a name given one of those."""
    if isinstance(divisor, cst.Name):
        values = [value for value, _ in anatomy.values.values_of(divisor.value, scope)]
        return bool(values) and all(
            _counts_items(value) or _a_count(anatomy, value, scope)
            for value in values
            if not isinstance(value, cst.Name)  # (`n = n`: followed no further)
        )
    if is_method_call(divisor, "sum") and isinstance(divisor, cst.Call):
        assert isinstance(divisor.func, cst.Attribute)
        counted = divisor.func.value
        if isinstance(counted, cst.Comparison):
            return True
        if isinstance(counted, cst.Name):
            return any(
                _a_mask(value) for value, _ in anatomy.values.values_of(counted.value, scope)
            )
    return False


def _a_mask(value: cst.BaseExpression) -> bool:
    """`y != PAD`, `(y != PAD).float()`, `attention_mask.bool()`-like casts of a comparison."""
    while is_method_call(value, "float", "long", "int", "bool", "to") and isinstance(
        value, cst.Call
    ):
        assert isinstance(value.func, cst.Attribute)
        value = value.func.value
    return isinstance(value, cst.Comparison)


def _counts_items(value: cst.BaseExpression) -> bool:
    """`sum(len(t["labels"]) for t in targets)`, also inside `max(..., 1)`."""
    return any(
        isinstance(node, cst.Call)
        and is_name(node.func, "sum")
        and any(isinstance(inner, cst.Call) and is_name(inner.func, "len") for inner in walk(node))
        for node in walk(value)
    )


def _masked(anatomy: Anatomy, value: cst.BaseExpression, scope: cst.FunctionDef | None) -> bool:
    """`logits[masked]` with `masked = ids == MASK` (or `torch.rand(...) < p`): the rows a
    boolean mask selects, as many as the batch happens to hold."""
    if not isinstance(value, cst.Subscript) or len(value.slice) != 1:
        return False
    index = value.slice[0].slice
    if not isinstance(index, cst.Index):
        return False
    if isinstance(index.value, cst.Comparison):
        return True
    name = dotted(index.value)
    return name is not None and any(
        isinstance(origin, cst.Comparison) or is_method_call(origin, "bool")
        for origin, _ in anatomy.values.values_of(name, scope)
    )


def _batch_statistics(ctx: ConvertContext) -> None:
    """A loss built from statistics over the batch (round-19 audit s05, s37: Barlow Twins'
    cross-correlation `z1.T @ z2 / n`, VICReg's variance and covariance along the batch):
    each process now computes them over its own part, and DDP's average of the processes'
    losses is not the loss of the whole batch. Reported, at the first one found."""
    anatomy = ctx.anatomy
    found: list[cst.CSTNode] = []

    def collect(node: cst.CSTNode) -> bool:
        if (
            not found
            and (_over_the_batch(node) or _by_its_named_total(anatomy, node))
            and not _against_a_weight(anatomy, node)
        ):
            found.append(node)
        return False  # look at every node

    _in_steps_and_forwards(anatomy, collect)  # the models' forward, where Barlow Twins has it
    if found:
        ctx.info(
            found[0],
            f"the loss is built from statistics over the batch, or compares its samples with "
            f"each other (`{source_text(found[0])}`): each process now computes it over its "
            "own part (a contrastive loss has only its own samples as negatives), and DDP "
            "averages the processes' losses, which is not the loss of the whole batch (the "
            "DDP versions of Barlow Twins, VICReg, CLIP and SimCLR all-reduce the statistics "
            "or all-gather the features, `torch.distributed.nn.functional.all_gather`)",
        )


def _over_the_batch(node: cst.CSTNode) -> bool:
    """`z.T @ z`, `torch.mm(z.t(), z)`: samples multiplied across the batch; `z.var(dim=0)`,
    `torch.cov(z.T)`, `torch.norm(y - x)`: a statistic along it."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        # `z.T @ z`; `img @ txt.T`, every sample against every other (CLIP's logits, SimCLR's
        # similarities, round-21 audit A: each process now has only its own as negatives)
        return _transposed(node.left) or _transposed(node.right)
    # a tensor normalised by its own total, all samples together: SwAV's Sinkhorn, `Q /=
    # torch.sum(Q)` (round-19 audit s43); not a sum divided by a count (`/ mask.sum()`)
    if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.DivideAssign):
        return _total_of(node.value) == source_text(node.target)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
        return _total_of(node.right) == source_text(node.left)
    if not isinstance(node, cst.Call):
        return False
    name = dotted(node.func) or ""
    if name in ("torch.mm", "torch.matmul") and node.args:
        return any(_transposed(arg.value) for arg in node.args[:2])
    if name in ("torch.cov", "torch.corrcoef", "torch.pdist"):
        return True
    if name == "torch.cdist" and len(node.args) >= 2:
        # `torch.cdist(e, e)`: every sample's distance to every other (a batch-hard triplet
        # miner, round-33 audit A); not to learned centres (`torch.cdist(x, self.centers)`)
        first, second = node.args[0].value, node.args[1].value
        return source_text(first) == source_text(second) or not any(
            isinstance(arg, cst.Attribute) for arg in (first, second)
        )
    if name == "torch.einsum" and node.args:
        return _einsum_across(node.args[0].value)
    if name in ("torch.norm", "torch.linalg.norm") and node.args:
        # `torch.norm(Y - X, p="fro")` of the whole batch (a spectral-convergence loss,
        # round-19 audit s31): a norm over every sample at once, not a sum of theirs
        return call_arg(node, 2, "dim") is None and isinstance(
            node.args[0].value, cst.BinaryOperation | cst.Call
        )
    if is_attribute(node.func, "var", "std"):
        dim = call_arg(node, 0, "dim")
        return dim is not None and isinstance(dim.value, cst.Integer) and dim.value.value == "0"
    return False


def _einsum_across(equation: cst.BaseExpression) -> bool:
    """`torch.einsum('nc,mc->nm', q, k)`: the first axes of two operands (their samples)
    both kept, apart, in the result: every sample against every other (MoCo v3's logits,
    round-32 audit A). Not `'nc,ck->nk'` (against a queue) nor `'nc,nc->n'` (pairwise)."""
    if not isinstance(equation, cst.SimpleString):
        return False
    text = str(equation.evaluated_value).replace(" ", "")
    inputs, _, output = text.partition("->")
    firsts = [operand[0] for operand in inputs.split(",") if operand[:1].isalpha()]
    return len(firsts) == 2 and firsts[0] != firsts[1] and all(f in output for f in firsts)


# A tensor's own attributes: not something it was read from.
TENSOR_OWN = frozenset({"T", "mT", "H", "mH", "shape", "device", "dtype", "ndim"})


def _against_a_weight(anatomy: Anatomy, node: cst.CSTNode) -> bool:
    """`x @ w.T` with `w = self.token_mix.weight * self.mask`, `z @ model.weight.T`: a layer
    written by hand, its weight transposed, not samples compared with each other. Read from
    what the transposed operand is made of in its function: an object's attribute read, not
    called (a parameter); `self.text_projection(h)` is an output, `.T` and `.shape` are the
    tensor's own."""
    if isinstance(node, cst.BinaryOperation):
        operands = [node.left, node.right]
    elif isinstance(node, cst.Call):
        operands = [arg.value for arg in node.args[:2]]
    else:
        return False
    scope = anatomy.function_of(node)
    for operand in operands:
        if not _transposed(operand):
            continue
        made: list[cst.BaseExpression] = [operand]
        for inner in walk(operand):
            if isinstance(inner, cst.Name) and not anatomy.is_attribute_name(inner):
                made += [value for value, _ in anatomy.values.values_of(inner.value, scope)]
        for expr in made:
            for inner in walk(expr):
                if not isinstance(inner, cst.Attribute) or inner.attr.value in TENSOR_OWN:
                    continue
                parent = anatomy.parent(inner)
                if not (isinstance(parent, cst.Call) and parent.func is inner):
                    return True
    return False


def _by_its_named_total(anatomy: Anatomy, node: cst.CSTNode) -> bool:
    """`sum_Q = torch.sum(Q)`, then `Q /= sum_Q`: SwAV's own Sinkhorn, its total named
    first (round-30 audit A swav_prototypes_sinkhorn converted with no note)."""
    if not (
        isinstance(node, cst.AugAssign)
        and isinstance(node.operator, cst.DivideAssign)
        and isinstance(node.value, cst.Name)
    ):
        return False
    target = source_text(node.target)
    values = anatomy.values.assignments(node.value.value, anatomy.function_of(node))
    return any(_total_of(value) == target for value in values)


def _total_of(expr: cst.BaseExpression) -> str | None:
    """What `torch.sum(q)` or `q.sum()` sums whole (every element: all samples of the batch
    together), as written; None for anything else."""
    if not isinstance(expr, cst.Call):
        return None
    if dotted(expr.func) == "torch.sum" and len(expr.args) == 1 and not expr.args[0].keyword:
        return source_text(expr.args[0].value)
    if is_attribute(expr.func, "sum") and not expr.args:
        assert isinstance(expr.func, cst.Attribute)
        return source_text(expr.func.value)
    return None


def _transposed(expr: cst.BaseExpression) -> bool:
    """`z.T`, `z.t()`, `z.transpose(0, 1)`: a batch of rows turned into columns."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "T":
        return True
    if isinstance(expr, cst.Call) and is_attribute(expr.func, "t"):
        return not expr.args
    if isinstance(expr, cst.Call) and is_attribute(expr.func, "transpose") and len(expr.args) == 2:
        return {source_text(arg.value) for arg in expr.args} == {"0", "1"}
    return False


def _scale_summed_losses(ctx: ConvertContext) -> None:
    """A loss summed over the batch (`reduction='sum'`) that reaches a backward pass is
    multiplied by the world size there: DDP averages the processes' gradients, and N times
    that average is the gradient of the sum over the global batch, what the single-GPU
    script computes at that batch."""
    anatomy = ctx.anatomy
    for backward in anatomy.script.backward_calls:
        if not isinstance(backward.func, cst.Attribute):
            continue
        loss = backward.func.value
        scope = anatomy.function_of(backward)
        found = _summed(anatomy, loss, scope, 0)
        unsummed = _unsummed_term(anatomy, backward) if found is not None else None
        if found is not None and unsummed is not None and not found[1]:
            # `F.mse_loss(..., reduction="sum") + l2 * penalty(model)`: a sum over the batch
            # plus a term that is not one; scaling all of it by N would scale the penalty too
            ctx.cannot(
                backward,
                f"the loss adds to a sum over the batch (line {anatomy.line(found[0])}) a term "
                f"that is not one (`{source_text(unsummed)}`): multiplying the loss by the "
                "world size, as DDP's average of gradients needs for the sum, would multiply "
                "that term too; multiply only the summed part by `dist.get_world_size()` by "
                "hand",
                blocking=True,
            )
            continue
        if found is None:
            _weigh_the_part(ctx, backward)
            continue
        summed, divisor = found
        line = anatomy.line(summed)
        if divisor is not None and anatomy.whole_batch is not None:
            _weigh_the_part(ctx, backward)  # a mean over this process's part
            continue
        if divisor is not None and _the_global_batch_size(ctx, divisor):
            # `crit(out, y) / BATCH_SIZE` with `batch_size=BATCH_SIZE // world_size` (round-50
            # audit D gru_s2s_tf_global: half the gradient)
            ctx.add_import("torch.distributed", asname="dist")
            ctx.plan.replace(loss, _times_world_size)
            ctx.changed(
                backward,
                f"the loss is summed over the batch (line {line}) and divided by "
                f"`{source_text(divisor)}`, the global batch's size under --batch global: "
                "multiplied by the world size, it is the mean over this process's batch, "
                "which DDP's average of gradients keeps",
            )
            continue
        if divisor is not None and _counted_in_the_batch(divisor):
            ctx.info(
                backward,
                f"the loss is summed over the batch (line {line}) and divided by "
                f"`{source_text(divisor)}`, which each process counts over its own batch: DDP "
                "averages the processes' quotients, not the quotient over the global batch, "
                "unless the counts are equal; for the single-GPU loss, divide by the count "
                "averaged over the processes (`dist.all_reduce` it, then divide by the world "
                "size), as detectron2 does for its positives",
            )
            continue
        if divisor is not None:
            ctx.info(
                backward,
                f"the loss is summed over the batch (line {line}) and divided by its size: "
                "a mean, which DDP's average of gradients keeps",
            )
            continue
        ctx.add_import("torch.distributed", asname="dist")
        ctx.plan.replace(loss, _times_world_size)
        ctx.changed(
            backward,
            f"a loss summed over the batch (line {line}) is multiplied by the world size "
            "before backward: DDP averages the processes' gradients, and N times their "
            "average is the sum over the global batch, as in the single-GPU script",
        )


def _the_global_batch_size(ctx: ConvertContext, divisor: cst.BaseExpression) -> bool:
    """With `--batch global`, `divisor` is what a training loader is given as its batch
    size, which each process now divides by the world size."""
    if ctx.options.batch is not BatchMode.GLOBAL:
        return False
    spelled = source_text(divisor)
    return any(
        (size := call_arg(loader.call, 1, "batch_size")) is not None
        and source_text(size.value) == spelled
        for loader in ctx.anatomy.script.train_loaders
    )


def _foreign_sums(ctx: ConvertContext) -> None:
    """A criterion summed over the batch handed to a helper of another file that trains
    (`train_one_epoch(model, criterion, ...)` in engine.py): its backward is there, where
    ddpify writes nothing; the loss must be multiplied by the world size there."""
    anatomy = ctx.anatomy
    for training in anatomy.script.foreign_training:
        scope = anatomy.function_of(training.call)
        for arg in training.call.args:
            built = [arg.value, *anatomy.values.origins(arg.value, scope)]
            summed = next((c for c in built if isinstance(c, cst.Call) and _sums(c)), None)
            if summed is not None:
                ctx.cannot(
                    training.call,
                    f"the criterion sums over the batch (line {anatomy.line(summed)}) and "
                    f"`{training.helper.name}()` ({training.helper.path.name}) runs its "
                    "backward pass: DDP averages the processes' gradients, so the loss must "
                    "be multiplied by `dist.get_world_size()` there, by hand",
                    blocking=True,
                )
                break


def _weigh_the_part(ctx: ConvertContext, backward: cst.Call) -> None:
    """A full batch split between the processes (DDP004), its loss a mean over this
    process's part: weighted by the part's share of the samples (`len(x_part) *
    world_size / len(x)`, 1 when the number of samples divides evenly), DDP's average of
    the processes' gradients is exactly the whole batch's (3 samples on 2 processes: parts
    of 2 and 1, whose plain means would weigh the lone sample twice)."""
    anatomy = ctx.anatomy
    whole = anatomy.whole_batch
    if whole is None or not anatomy.inside(backward, whole.loop):
        return
    if ctx.options.select is not None and "DDP004" not in ctx.options.select:
        return  # no split made, nothing to weigh
    assert isinstance(backward.func, cst.Attribute)
    name = whole.samples[0].name
    loss = backward.func.value
    values = _loss_values(anatomy, backward)
    if values and all(_sums_elements(value) for value in values):
        # `((pred - y) ** 2).sum()`: each part's sum; N times their average is the whole sum
        ctx.add_import("torch.distributed", asname="dist")
        ctx.plan.replace(loss, _times_world_size)
        ctx.changed(
            backward,
            f"the loss sums over this process's part of `{name}`: multiplied by the world "
            "size before backward, DDP's average of the gradients is the whole batch's sum's",
        )
        return
    part = anatomy.free_name([f"{name}_part"])  # as DDP004 names it
    share = f"(len({part}) * {WORLD_SIZE} / len({name}))"

    def weighed(loss: cst.BaseExpression) -> cst.BaseExpression:
        scaled = _scaled(loss, f"* {share}")
        return scaled.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])

    ctx.add_import("torch.distributed", asname="dist")
    ctx.plan.replace(backward.func.value, weighed)
    ctx.changed(
        backward,
        f"the loss is a mean over this process's part of `{name}`: weighted by the part's "
        "share of the samples (1 when their number divides by the world size), DDP's "
        "average of the gradients is the whole batch's",
    )


def _unsummed_term(anatomy: Anatomy, backward: cst.Call) -> cst.BaseExpression | None:
    """A term added to the loss (`a + b - c`, through the name the loss is given) known not
    to sum over the batch (it reads the parameters, or is a criterion's mean)."""
    scope = anatomy.function_of(backward)
    for value in _loss_values(anatomy, backward):
        terms = list(_terms(value))
        if len(terms) < 2:
            continue
        for term in terms:
            if _summed(anatomy, term, scope, 0) is None and (
                _per_sample(anatomy, term, scope, 0) is False
            ):
                return term  # a penalty on the parameters, a criterion's mean
    return None


def _terms(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The terms of a sum or difference, `a + b - c`: a, b and c."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add | cst.Subtract):
        return [*_terms(expr.left), *_terms(expr.right)]
    return [expr]


def _loss_values(anatomy: Anatomy, backward: cst.Call) -> list[cst.BaseExpression]:
    """The expressions `loss.backward()`'s loss is: itself, or what its name is given."""
    assert isinstance(backward.func, cst.Attribute)
    loss = backward.func.value
    if not isinstance(loss, cst.Name):
        return [loss]
    scope = anatomy.function_of(backward)
    return [value for value, _ in anatomy.values.values_of(loss.value, scope)]


def _sums_elements(expr: cst.BaseExpression) -> bool:
    """`x.sum()`, `torch.sum(x)`, sums of those, or one times a number: a sum over the
    samples, not a mean (`x.sum() / len(x)` is a mean)."""
    if isinstance(expr, cst.Call):
        return (
            (isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "sum")
            or dotted(expr.func) == "torch.sum"
            or _sums(expr)
        )
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, cst.Add | cst.Subtract):
            # both: `ce_mean + 1e-4 * (w ** 2).sum()` is a mean plus a penalty, which the
            # share's weighting keeps (the shares add up to one)
            return _sums_elements(expr.left) and _sums_elements(expr.right)
        if isinstance(expr.operator, cst.Multiply):
            return _sums_elements(expr.left) or _sums_elements(expr.right)
        if isinstance(expr.operator, cst.Divide):  # `((out - y) ** 2).sum() / 2`
            return _sums_elements(expr.left) and isinstance(expr.right, cst.Integer | cst.Float)
    return False


def _times_world_size(loss: cst.BaseExpression) -> cst.BaseExpression:
    """`(loss * dist.get_world_size())`, parenthesised: `.backward()` is called on it."""
    scaled = _scaled(loss, f"* {WORLD_SIZE}")
    return scaled.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _summed(
    anatomy: Anatomy, expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int
) -> tuple[cst.Call, cst.BaseExpression | None] | None:
    """The call that sums a loss over the batch (`reduction='sum'`, `size_average=False`,
    or a criterion built with them) that `expr` is computed from, followed through names and
    the script's own functions; with the count (`len(x)`, `x.size(0)`, `num_pos`) a division
    by which makes it a mean on the way, if one does."""
    if depth > MAX_STEPS:
        return None
    for node in walk(expr):
        found: tuple[cst.Call, cst.BaseExpression | None] | None = None
        if isinstance(node, cst.Call):
            if _sums(node) or _sums_by_hand(anatomy, node, scope):
                found = (node, None)
            else:
                built = [
                    origin
                    for origin in anatomy.values.origins(node.func, scope)
                    if isinstance(origin, cst.Call) and origin is not node.func
                ]
                found = next(((call, None) for call in built if _sums(call)), None)
                callee = anatomy.graph.callee(node)
                if found is None and callee is not None:
                    for value in anatomy.graph.returned_values(callee):
                        found = _summed(anatomy, value, callee, depth + 1)
                        if found is not None:
                            break
        elif isinstance(node, cst.Name) and not anatomy.is_attribute_name(node):
            # `loss = criterion(out, y)`, then `loss = loss / inputs.size(0)` (deepspeech.pytorch,
            # round-37 audit A): the rebinding that reads the name, before this use, is the
            # value used here, divisor and all; follow it first
            origins = sorted(
                anatomy.values.origins(node, scope),
                key=lambda origin: (
                    not (
                        anatomy.in_source(origin)
                        and anatomy.precedes(origin, node)
                        and any(is_name(inner, node.value) for inner in walk(origin))
                    )
                ),
            )
            for origin in origins:
                if origin is node:
                    continue
                found = _summed(anatomy, origin, anatomy.function_of(origin), depth + 1)
                if found is not None:
                    break
        if found is not None:
            return found[0], found[1] or _divisor(anatomy, node, expr)
    return None


def _sums(call: cst.Call) -> bool:
    reduction = call_arg(call, None, "reduction")
    if reduction is not None:
        value = reduction.value
        return isinstance(value, cst.SimpleString) and value.evaluated_value == "sum"
    size_average = call_arg(call, None, "size_average")
    return size_average is not None and is_name(size_average.value, "False")


def _sums_by_hand(anatomy: Anatomy, call: cst.Call, scope: cst.FunctionDef | None) -> bool:
    """`(model(x) - y).pow(2).sum()` or `torch.sum(...)`: a sum of every element of what the
    model computes for the batch, a sum over the samples. Not a sum along a dimension
    (`x.sum(1).mean()`), of a criterion's mean (`criterion(out, y).sum()`), or of the
    parameters (`(w ** 2).sum()`, a penalty)."""
    summed: cst.BaseExpression
    if dotted(call.func) == "torch.sum":
        if len(call.args) != 1 or call.args[0].keyword is not None:
            return False
        summed = call.args[0].value
    elif isinstance(call.func, cst.Attribute) and call.func.attr.value == "sum":
        if any(arg.keyword is None or arg.keyword.value == "dim" for arg in call.args):
            return False
        summed = call.func.value
    else:
        return False
    parent = anatomy.parent(call)
    if parent is not None and _over_the_batch(parent):
        return False  # the total a tensor is normalised by (`q / q.sum()`), not a loss
    holder = anatomy.parent(parent) if isinstance(parent, cst.Arg) else None
    if isinstance(holder, cst.Call) and anatomy.is_call_to(holder, {"torch.autograd.grad"}):
        # `torch.autograd.grad(energy.sum(), pos, create_graph=True)`: each sample's own
        # gradient (forces), taken through the sum; no loss (round-28 audit A nequip)
        return False
    return _per_sample(anatomy, summed, scope, 0) is True


def _per_sample(
    anatomy: Anatomy, expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int
) -> bool | None:
    """Whether `expr` holds values per sample of a model's forward pass (True), holds a
    reduced loss or the parameters (False), or neither (None)."""
    if depth > MAX_STEPS:
        return False
    models = {name for model in anatomy.models.all for name in model.names}
    per_sample: bool | None = None
    for node in walk(expr):
        if _over_the_batch(node):
            return False  # `(z.T @ z / n - I).pow(2).sum()`: summed over features (p01)
        if isinstance(node, cst.Attribute) and dotted(node.value) in models:
            parent = anatomy.parent(node)
            if not (isinstance(parent, cst.Call) and parent.func is node):
                return False  # `model.weight`: a parameter, not what the model computes
        if isinstance(node, cst.Call):
            if is_attribute(node.func, "parameters", "named_parameters", "mean", "item"):
                return False
            if dotted(node.func) in models:
                per_sample = True
                continue
            callee = anatomy.graph.callee(node)
            for value in anatomy.graph.returned_values(callee) if callee is not None else ():
                found = _per_sample(anatomy, value, callee, depth + 1)
                if found is False:
                    return False  # `l2_penalty(model)`, summing the parameters
                per_sample = per_sample or found
            criteria = [
                origin
                for origin in anatomy.values.origins(node.func, scope)
                if isinstance(origin, cst.Call) and origin is not node.func
            ]
            name = dotted(node.func) or ""
            if any(_loss_class(c) for c in criteria) or name.rsplit(".", 1)[-1].endswith(
                ("_loss", "_entropy", "nll_loss", "kl_div")
            ):
                reduction = call_arg(node, None, "reduction") or next(
                    (call_arg(c, None, "reduction") for c in criteria), None
                )
                if reduction is None or not (
                    isinstance(reduction.value, cst.SimpleString)
                    and reduction.value.evaluated_value == "none"
                ):
                    return False  # a reduced loss: a mean, or a sum `_sums` finds
                per_sample = True
        elif isinstance(node, cst.Name) and not anatomy.is_attribute_name(node):
            if _unpacked_from_model(anatomy, node.value, scope, models):
                per_sample = True  # `x_reconst, mu, log_var = model(x)`
                continue
            for origin in anatomy.values.origins(node, scope):
                if origin is node:
                    continue
                found = _per_sample(anatomy, origin, anatomy.function_of(origin), depth + 1)
                if found is False:
                    return False
                per_sample = per_sample or found
    return per_sample


def _unpacked_from_model(
    anatomy: Anatomy, name: str, scope: cst.FunctionDef | None, models: set[str]
) -> bool:
    """`name` is one of the outputs a model call is unpacked into (`recon, mu, logvar =
    model(x)`, a VAE's)."""
    return any(
        isinstance(assign.value, cst.Call)
        and dotted(assign.value.func) in models
        and anatomy.function_of(assign) is scope
        and any(
            isinstance(target.target, cst.Tuple | cst.List)
            and name in {dotted(element.value) for element in target.target.elements}
            for target in assign.targets
        )
        for assign in anatomy.assigns
    )


def _loss_class(call: cst.Call) -> bool:
    """`nn.MSELoss(...)`, `torch.nn.CrossEntropyLoss(...)`: a criterion."""
    name = dotted(call.func) or ""
    return name.rsplit(".", 1)[-1].endswith("Loss")


def _divisor(anatomy: Anatomy, node: cst.CSTNode, top: cst.CSTNode) -> cst.BaseExpression | None:
    """The count `node` is divided by, below `top`: a batch size (`len(x)`, `x.size(0)`), or
    any value not a number written in the script (`/ ntokens`, `/ batch_size`, round-14 audit
    s05): a mean of some kind, not a sum to multiply. A number (`.sum() / 2`, d2l's squared
    loss) leaves it a sum."""
    child = node
    for parent in anatomy.ancestors(node):
        if (
            isinstance(parent, cst.BinaryOperation)
            and isinstance(parent.operator, cst.Divide)
            and parent.left is child
            and not isinstance(parent.right, cst.Integer | cst.Float)
        ):
            return parent.right
        if parent is top or isinstance(parent, cst.BaseStatement | cst.BaseSmallStatement):
            return None
        child = parent
    return None


# A divisor that is the batch's size: `len(x)`, `x.size(0)`, `x.shape[0]`, `batch_size`.
BATCH_SIZE = re.compile(
    r"^len\(|\.size\(0\)$|\.shape\[0\]$|(^|_)(batch|bs|n|N|size|batch_size|num_samples)$"
)


def _counted_in_the_batch(divisor: cst.BaseExpression) -> bool:
    """A divisor that counts something in this process's batch other than its samples
    (`num_pos = labels.sum()`, `ntokens`, `mask.sum()`): not the batch's size."""
    return not BATCH_SIZE.search(source_text(divisor))


def _scaled(value: cst.BaseExpression, operation: str) -> cst.BaseExpression:
    code = cst.Module([]).code_for_node(value)
    simple = isinstance(
        value, cst.Name | cst.Attribute | cst.Integer | cst.Float | cst.Call | cst.Subscript
    )
    return expression(f"{code if simple else f'({code})'} {operation}")


def _refuse_local_gradient_scales(ctx: ConvertContext) -> None:
    """Gradients divided by hand after the backward pass by a count of this process's
    batches (fairseq's `multiply_grads(1 / sample_size)`, `p.grad.div_(mask.sum())`, round-15
    audit s34): DDP has averaged the gradients over the processes, and each process would
    divide that average by its own count: the replicas drift apart from the first step."""
    anatomy = ctx.anatomy
    for loop in anatomy.script.train_loops:
        local = {n.value for n in walk(loop.batch_loop.target) if isinstance(n, cst.Name)}
        for outer in (loop.batch_loop, loop.epoch_loop):
            for node in walk(outer.body) if outer is not None else ():
                if isinstance(node, cst.AugAssign | cst.Assign):
                    targets = (
                        [node.target]
                        if isinstance(node, cst.AugAssign)
                        else [t.target for t in node.targets]
                    )
                    local |= {n.value for t in targets for n in walk(t) if isinstance(n, cst.Name)}
        for node in walk(loop.epoch_loop or loop.batch_loop):
            factor = _gradient_scale(node)
            if factor is not None and any(
                isinstance(n, cst.Name) and n.value in local for n in walk(factor)
            ):
                ctx.cannot(
                    node,
                    f"the gradients are scaled by `{source_text(factor)}`, a value of this "
                    "process's batches, after DDP has averaged them over the processes: each "
                    "process would scale them its own way; all-reduce that value first, or "
                    "convert by hand",
                    blocking=True,
                )
                return


def _gradient_scale(node: cst.CSTNode) -> cst.BaseExpression | None:
    """`f` of `p.grad.mul_(f)`, `p.grad.data.div_(f)`, `p.grad /= f`, `p.grad *= f`."""
    if isinstance(node, cst.Call) and is_method_call(node, "mul_", "div_") and node.args:
        owner = node.func.value  # type: ignore[attr-defined]
        if is_attribute(owner, "data"):
            owner = owner.value
        return node.args[0].value if is_attribute(owner, "grad") else None
    if isinstance(node, cst.AugAssign) and isinstance(
        node.operator, cst.MultiplyAssign | cst.DivideAssign
    ):
        target = node.target
        if is_attribute(target, "data"):
            target = target.value  # type: ignore[attr-defined]
        return node.value if is_attribute(target, "grad") else None
    return None


def _pairs_the_batch(anatomy: Anatomy) -> cst.BinaryOperation | None:
    """`image_features @ text_features.T` (or `.t()`, `.transpose(...)`): a matrix of every
    sample of the batch against every other (CLIP, SimCLR), round-15 audit s11g."""
    for node in walk(anatomy.module):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
            right = node.right
            if is_attribute(right, "T", "mT") or is_method_call(right, "t", "transpose"):
                return node
    return None
