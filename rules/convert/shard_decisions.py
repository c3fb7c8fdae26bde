"""DDP010: a decision taken on a value computed from this process's shard is refused."""

from __future__ import annotations

import functools
import operator
import re

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import BATCH_NORMS, MODEL_COPIES
from ddpify.analysis.effects import FILE_WRITES
from ddpify.analysis.loaders import strip_iteration
from ddpify.analysis.means import batch_mean
from ddpify.analysis.project import draws_at_random
from ddpify.analysis.script import given_later, shuffles
from ddpify.analysis.tree import (
    assigned,
    call_arg,
    child_nodes,
    counted_range,
    dotted,
    is_attribute,
    is_method_call,
    is_name,
    methods,
    methods_reached,
    source_text,
    walk,
)
from ddpify.analysis.values import constant_index
from ddpify.emit import statements
from ddpify.fixes import family_seeded, take_rank_zeros
from ddpify.rule import ConvertContext, ConvertRule, Example

PLATEAU = "torch.optim.lr_scheduler.ReduceLROnPlateau"


# A mean a helper returns, monitored by an early-stopping object: averaged once,
# right after it is returned, every process monitors the whole dataset's mean.
HELPER_MEAN = Example(
    """
    import torch
    from torch.utils.data import DataLoader

    from callbacks import EarlyStopping


    def train_epoch(model, loader, optimizer):
        losses = []
        for x, y in loader:
            loss = model(x).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return sum(losses) / len(losses)


    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    early_stopping = EarlyStopping(patience=3)
    for epoch in range(epochs):
        train_loss = train_epoch(model, train_loader, optimizer)
        early_stopping(train_loss)
        if early_stopping.early_stop:
            break
    """,
    """
    import torch
    from torch.utils.data import DataLoader

    from callbacks import EarlyStopping
    import torch.distributed as dist


    def train_epoch(model, loader, optimizer):
        losses = []
        for x, y in loader:
            loss = model(x).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return sum(losses) / len(losses)


    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    early_stopping = EarlyStopping(patience=3)
    for epoch in range(epochs):
        train_loss = train_epoch(model, train_loader, optimizer)
        mean = torch.tensor(float(train_loss))
        dist.all_reduce(mean)
        train_loss = mean.item() / dist.get_world_size()  # the mean over all processes
        early_stopping(train_loss)
        if early_stopping.early_stop:
            break
    """,
)


# Early stopping on a loss estimated on batches drawn at random (nanoGPT's
# `estimate_loss()`): each process draws its own, so the estimate is averaged over them.
RANDOM_ESTIMATE = Example(
    """
    import torch


    def get_batch():
        ix = torch.randint(len(data) - 8, (4,))
        return data[ix], data[ix + 1]


    @torch.no_grad()
    def estimate_loss():
        x, y = get_batch()
        return model(x, y).item()


    optimizer = torch.optim.AdamW(model.parameters())
    best, bad = 1e9, 0
    for step in range(1000):
        if step % 100 == 0:
            val_loss = estimate_loss()
            if val_loss < best:
                best, bad = val_loss, 0
            else:
                bad += 1
                if bad >= 3:
                    break
        x, y = get_batch()
        loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """,
    """
    import torch
    import torch.distributed as dist


    def get_batch():
        ix = torch.randint(len(data) - 8, (4,))
        return data[ix], data[ix + 1]


    @torch.no_grad()
    def estimate_loss():
        x, y = get_batch()
        return model(x, y).item()


    optimizer = torch.optim.AdamW(model.parameters())
    best, bad = 1e9, 0
    for step in range(1000):
        if step % 100 == 0:
            val_loss = estimate_loss()
            mean = torch.tensor(float(val_loss))
            dist.all_reduce(mean)
            val_loss = mean.item() / dist.get_world_size()  # the mean over all processes
            if val_loss < best:
                best, bad = val_loss, 0
            else:
                bad += 1
                if bad >= 3:
                    break
        x, y = get_batch()
        loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """,
)


# A hyperparameter search drawing each trial's settings unseeded: rank 0's in every process.
DRAWN_SETTINGS = Example(
    """
    import random

    import torch


    def train(config):
        model = Net(config["hidden"])
        optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
        for x, y in loader:
            loss = model(x).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    for trial in range(10):
        config = {"lr": 10 ** random.uniform(-4, -1), "hidden": random.choice([64, 128])}
        train(config)
    """,
    """
    import random

    import torch
    import torch.distributed as dist


    def train(config):
        model = Net(config["hidden"])
        optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
        for x, y in loader:
            loss = model(x).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


    for trial in range(10):
        config = {"lr": 10 ** random.uniform(-4, -1), "hidden": random.choice([64, 128])}
        config = [config]
        dist.broadcast_object_list(config)  # every process takes rank 0's
        config = config[0]
        train(config)
    """,
)


# A time budget tested by the epoch loop's `while` (round-43 audit B while_budget).
WHILE_BUDGET = Example(
    """
    import time

    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    t0 = time.time()
    while time.time() - t0 < budget:
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
    """,
    """
    import time

    import torch
    import torch.distributed as dist

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    t0 = time.time()
    while True:
        go_on = torch.tensor(float(bool(time.time() - t0 < budget)))  # all or none go on
        dist.all_reduce(go_on, op=dist.ReduceOp.MIN)
        if not go_on.item():
            break
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
    """,
)


# A generator that trains and yields each epoch's metrics: the loop over it is the epoch
# loop, and leaving it on this process's loss is a decision taken together.
YIELDED_METRICS = Example(
    """
    import torch


    def train(model, loader, optimizer, epochs):
        for epoch in range(epochs):
            total = 0.0
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                total += loss.item()
            yield {"epoch": epoch, "loss": total / len(loader)}


    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for metrics in train(model, loader, optimizer, 10):
        if metrics["loss"] < 0.25:
            break
    """,
    """
    import torch
    import torch.distributed as dist


    def train(model, loader, optimizer, epochs):
        for epoch in range(epochs):
            total = 0.0
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                total += loss.item()
            yield {"epoch": epoch, "loss": total / len(loader)}


    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for metrics in train(model, loader, optimizer, 10):
        stop = torch.tensor(float(metrics["loss"] < 0.25))  # taken everywhere if taken in one process
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item():
            break
    """,  # noqa: E501
)


class ShardDecisions(ConvertRule):
    """
    ## What it does
    Makes every process take the same branch where a training loop's `break`, `continue` or
    `return` is decided on a value of this process's own batches (early stopping on the
    training loss, a step skipped on a NaN loss) or its own clock (a time budget, `if
    time.time() - start > budget: break`): the test becomes a flag, all-reduced with MAX
    just before the `if`, so every process takes the branch when one would; a mean of the
    batches' losses (`loss.item()`, `running / len(train_loader)`, `sum(losses) /
    len(losses)`, `np.mean(losses)`, an AverageMeter's `.avg`, a metric object's `compute()`
    of counts its `update()` adds to in the batch loop, or what a function of the
    script or of another file of its project returns when it is one: `train_loss =
    train_one_epoch(model, train_loader, ...)`, or a loss estimated on batches drawn at
    random, which each process draws apart: nanoGPT's `estimate_loss()`) tested there,
    handed to an early-stopping object, or given to a `ReduceLROnPlateau`, is averaged over
    the processes first, right after it is computed, which is the value the single-process
    script computed (or, for an estimate, one made of more batches); a mean per
    sample made of two sums (`total / n`, with `total += loss.item() * len(x)` and `n +=
    len(x)` in the batch loop) is divided after both sums are all-reduced. A `while` test
    decided on the clock (or such a value) becomes `while True:` whose first statements
    all-reduce the test with MIN and break when any process would leave; the same exits in a
    step function the batch loop calls (`if not math.isfinite(loss.item()): return None`
    in `train_step()`, before its backward pass) are shared too. An `elif` decided on such
    a value, a `while ... else:`, and a `ReduceLROnPlateau` stepped on a sum
    (`scheduler.step(running_loss)` where `running_loss += loss.item()` in the batch loop),
    are refused, naming the value; so is a tensor carried from step to step that moves with
    a statistic over the batch and feeds the next loss (DINO's center, `center = center * m
    + out.mean(dim=0) * (1 - m)`), and an object of the script's class that keeps what the
    model computed, taken out of the graph, and draws at random from it
    (improved-diffusion's loss-aware timestep sampler, `sampler.update_with_local_losses(t,
    losses.detach())`). Decided on a value computed from a loader every process reads whole
    (the validation loss), on a step counter or on the index `enumerate` gives, they are
    left as they are; but a `break` on an evaluation of a model with BatchNorm (whose
    running statistics are each process's own), or on a patience counter set on one, gets
    the flag too. A learning rate picked once before training from each process's own losses
    (an LR finder's `best_lr`) is rank 0's in every process, and so are the settings a
    hyperparameter search draws unseeded for each run of training (`config = {"lr": 10 **
    random.uniform(-4, -1)}`, then `train(config)`).

    ## Why is this bad?
    Under DDP each process sums the loss of its own shard: the values differ between
    processes, so each decides on its own when the plateau is reached, the learning rates
    part, and the replicas drift apart while the run still exits 0. A process that leaves
    the loop (or skips a backward) alone leaves the others waiting in an all-reduce it never
    joins: the job hangs. The value must be all-reduced before the decision
    (`dist.all_reduce(t, op=dist.ReduceOp.AVG)`).
    """

    code = "DDP010"
    step = 10
    name = "shard-decisions"
    message = "decisions on values computed from one process's shard are refused"
    fix_safety = """
        Safe: one small all-reduce per decision. With the flag the branch is taken in every
        process when any one would take it; the values printed stay rank 0's own.
    """
    examples = (
        WHILE_BUDGET,
        YIELDED_METRICS,
        # A stop file an operator touches: each process looks at the disk at its own moment.
        Example(
            """
            import os

            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                if os.path.exists("STOP"):
                    break
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
            """,
            """
            import os

            import torch
            import torch.distributed as dist

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                stop = torch.tensor(float(bool(os.path.exists("STOP"))))  # taken everywhere if taken in one process
                dist.all_reduce(stop, op=dist.ReduceOp.MAX)
                if stop.item():
                    break
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
            """,  # noqa: E501
        ),
        # A plateau scheduler stepped on the epoch's mean loss: averaged over the processes.
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            for epoch in range(epochs):
                running = 0.0
                for x, y in train_loader:
                    loss = model(x).sum()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    running += loss.item()
                epoch_loss = running / len(train_loader)
                plateau.step(epoch_loss)
            """,
            """
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist

            train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            for epoch in range(epochs):
                running = 0.0
                for x, y in train_loader:
                    loss = model(x).sum()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    running += loss.item()
                epoch_loss = running / len(train_loader)
                mean = torch.tensor(float(epoch_loss))
                dist.all_reduce(mean)
                epoch_loss = mean.item() / dist.get_world_size()  # the mean over all processes
                plateau.step(epoch_loss)
            """,
        ),
        # The same mean written in the call: all-reduced just before it.
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            train_dl = DataLoader(train_set, batch_size=32, shuffle=True)
            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            for epoch in range(epochs):
                tr_loss = 0.0
                for x, y in train_dl:
                    loss = model(x).sum()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    tr_loss += loss.item()
                scheduler.step(tr_loss / len(train_dl))
            """,
            """
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist

            train_dl = DataLoader(train_set, batch_size=32, shuffle=True)
            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            for epoch in range(epochs):
                tr_loss = 0.0
                for x, y in train_dl:
                    loss = model(x).sum()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    tr_loss += loss.item()
                mean = torch.tensor(float(tr_loss / len(train_dl)))
                dist.all_reduce(mean)
                scheduler.step(mean.item() / dist.get_world_size())
            """,
        ),
        # A score from evaluating the model: BatchNorm's statistics differ between the
        # processes, so every process steps on rank 0's.
        Example(
            """
            import torch

            model = UNet()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, "max")
            for epoch in range(epochs):
                for x, y in train_loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                val_score = evaluate(model, val_loader)
                scheduler.step(val_score)
            """,
            """
            import torch
            import torch.distributed as dist

            model = UNet()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, "max")
            for epoch in range(epochs):
                for x, y in train_loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                val_score = evaluate(model, val_loader)
                val_score = [val_score]
                dist.broadcast_object_list(val_score)  # every process takes rank 0's
                val_score = val_score[0]
                scheduler.step(val_score)
            """,
        ),
        # The validation loader is read whole by every process: the same value everywhere.
        Example(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            for epoch in range(epochs):
                for x, y in train_loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                val_loss = 0.0
                for x, y in val_loader:
                    val_loss += model(x).sum().item()
                scheduler.step(val_loss)
            """
        ),
        # Early stopping on the training loss: every process stops when one does.
        Example(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                running = 0.0
                for x, y in train_loader:
                    loss = model(x).sum()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    running += loss.item()
                if running / len(train_loader) < 0.01:
                    break
            """,
            """
            import torch
            import torch.distributed as dist

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                running = 0.0
                for x, y in train_loader:
                    loss = model(x).sum()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    running += loss.item()
                stop = torch.tensor(float(running / len(train_loader) < 0.01))  # taken everywhere if taken in one process
                dist.all_reduce(stop, op=dist.ReduceOp.MAX)
                if stop.item():
                    break
            """,  # noqa: E501
        ),
        HELPER_MEAN,
        DRAWN_SETTINGS,
        RANDOM_ESTIMATE,
        # A dry run's `break` on the batch index: every process counts the same batches.
        Example(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                for i, (x, y) in enumerate(train_loader):
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    if dry_run and i == 10:
                        break
            """
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        _share_drawn_settings(ctx)
        steered = _draws_steered_by_losses(anatomy)
        if steered is not None:
            call, owner = steered
            ctx.cannot(  # round-31 audit A improved_diffusion_loss_aware_sampler
                call,
                f"`{dotted(call.func)}(...)` keeps what this process's model computed (its "
                f"losses) in a `{owner}`, which draws at random from it: each process would "
                "draw from a history of its own share of the data; gather what it is given "
                "from every process (dist.all_gather) before the update, as improved-"
                "diffusion's LossAwareSampler does, by hand",
                blocking=True,
            )
        for update, carried, reduced in _carried_statistics(anatomy):
            ctx.cannot(  # round-22 audit A dino_teacher_b: DINO's center as a plain tensor
                update,
                f"`{carried}` is carried from step to step, updated with `{reduced}`, a statistic "
                "over this process's batch, and the loss is computed from it (a center, a "
                "running mean): each process would keep its own; all-reduce the statistic "
                "(dist.all_reduce, divided by the world size) before the update, by hand",
                blocking=True,
            )
        plateaus = {
            name
            for assign in anatomy.assigns
            if isinstance(assign.value, cst.Call) and anatomy.is_call_to(assign.value, (PLATEAU,))
            for target in assign.targets
            if (name := dotted(target.target)) is not None
        }
        plateau_means: list[tuple[cst.BaseStatement, str]] = []
        taken: set[str] = set()
        for call in anatomy.calls:
            if not is_method_call(call, "step") or not call.args:
                continue
            assert isinstance(call.func, cst.Attribute)
            if dotted(call.func.value) not in plateaus:
                continue
            local = _shard_value(anatomy, call.args[0].value, anatomy.function_of(call))
            if local is None:
                _evaluated_on_rank_zero(ctx, call)
            elif _is_batch_mean(anatomy, local, call):
                plateau_means.append((anatomy.statement_of(call), local))
            elif _is_mean(anatomy, call.args[0].value, anatomy.function_of(call)):
                _average_in_place(ctx, call, taken)  # `scheduler.step(tr_loss / len(dl))`
            elif local is not None:
                summed = anatomy.split_samples is None and any(  # (a full batch's: a mean)
                    isinstance(node, cst.AugAssign) and dotted(node.target) == local
                    for node in walk(anatomy.module)
                )  # not a value a helper of another file returns (round-32 audit C engine_c)
                ctx.cannot(
                    call,
                    f"ReduceLROnPlateau steps on `{local}`, "
                    f"{'summed' if summed else 'computed'} from this process's "
                    "batches only: the processes would cut the learning rate at different "
                    "epochs; give the mean loss a name of its own (`train_loss = "
                    "loss.item()`, which ddpify averages over the processes), or all-reduce "
                    "it first (dist.all_reduce) by hand",
                    blocking=True,
                )
        for node, setting in _learning_rates(anatomy):
            local = _shard_value(anatomy, setting, anatomy.function_of(node))
            if local is not None and _picked_once(ctx, node, local):
                continue
            if local is not None:
                ctx.cannot(
                    node,
                    f"the learning rate is computed from `{local}`, a value of this process's "
                    "batches only (an LR finder, a loss-based rule): every process would "
                    "pick its own and the replicas drift apart; all-reduce the value, or "
                    "broadcast rank 0's choice (dist.broadcast_object_list), by hand",
                    blocking=True,
                )
        for call, local in _losses_weighted_locally(anatomy):
            ctx.cannot(
                call,
                f"the loss is made with `{local}`, computed from this process's batches "
                "only (class weights from a per-class accuracy, a count): every process "
                "would weight its loss its own way; all-reduce what it is computed from "
                "(dist.all_reduce of the counts) before, by hand",
                blocking=True,
            )
        averaged: set[str] = set()
        for stepping, local in plateau_means:
            if local not in averaged:
                _average(ctx, stepping, local, taken)
                averaged.add(local)
        settled = _share_exits(ctx, averaged, taken)
        exits = {id(test) for test, _ in _loop_exits(anatomy)}
        for test in _decisions(anatomy):
            if id(test) in exits or _in_another_phase(anatomy, test):
                continue
            local = _shard_value(anatomy, test, anatomy.function_of(test), 0, frozenset(settled))
            if local is None or _averaged(ctx, local, test, averaged, taken, here=True):
                continue
            local = _mean_behind(anatomy, local, test)
            ctx.cannot(  # round-19 audit s34: the "bold driver" rule
                test,
                f"the learning rate (or the weights put back) is decided on `{local}`, "
                "computed from this process's batches only: the processes would decide apart "
                "and the replicas drift; all-reduce the value before the test, by hand",
                blocking=True,
            )


def _averaged(
    ctx: ConvertContext,
    local: str,
    test: cst.BaseExpression,
    averaged: set[str],
    taken: set[str],
    *,
    here: bool,
) -> bool:
    """Whether the mean `local` a decision reads is averaged over the processes: already,
    or now (the means of a dict or of a history, or, with `here`, the value itself before
    `test`'s statement); its name added to `averaged`."""
    if local in averaged:
        return True  # averaged once, the value is the same in every process
    anatomy = ctx.anatomy
    local = _mean_behind(anatomy, local, test)
    if local in averaged:
        return True
    if _average_means_in(ctx, local, test, taken) or _average_kept_means(ctx, local, test, taken):
        averaged.add(local)
        return True
    if here and _is_batch_mean(anatomy, local, test):
        _average(ctx, anatomy.statement_of(test), local, taken)
        averaged.add(local)
        return True
    return False


def _share_exits(ctx: ConvertContext, averaged: set[str], taken: set[str]) -> set[int]:
    """Every process takes the training loops' exits decided on a value of its own (a flag
    all-reduced, or the value averaged first); the `if`s whose test became a shared flag."""
    anatomy = ctx.anatomy
    settled: set[int] = set()  # `if`s whose test became a flag every process shares
    step_functions = _stepping_functions(anatomy)
    for test, exit_ in _loop_exits(anatomy):
        local = _shard_value(anatomy, test, anatomy.function_of(test), 0, frozenset(settled))
        if local is None and anatomy.function_of(test) in step_functions:
            local = _read_from_the_loss(anatomy, test)
        branch = anatomy.parent(test)
        if local is None and isinstance(branch, cst.If) and not _is_elif(anatomy, branch):
            evaluated = _evaluated_with_batchnorm(anatomy, test)
            if evaluated is not None:  # each process's BatchNorm statistics differ
                _agree(ctx, branch, exit_, evaluated, taken)
                settled.add(id(branch))
            continue
        if local is None:
            continue
        # (a mean tested by an `if`: averaged before it, the first of an `if`/`elif` chain,
        # or right after the value is computed)
        if _averaged(ctx, local, test, averaged, taken, here=isinstance(branch, cst.If)):
            continue
        local = _mean_behind(anatomy, local, test)
        if isinstance(branch, cst.If) and not _is_elif(anatomy, branch):
            if _average_inline_mean(ctx, branch, taken):
                settled.add(id(branch))
                continue
            _agree(ctx, branch, exit_, local, taken)
            settled.add(id(branch))
            continue
        if isinstance(branch, cst.While) and branch.orelse is None and branch.body.body:
            _agree_to_go_on(ctx, branch, local, taken)
            settled.add(id(branch))
            continue
        whose = (  # (round-43 audit B while_budget: a clock, not the batches)
            "read from this process's clock"
            if local.endswith("()")
            else "computed from this process's batches only"
        )
        ctx.cannot(
            test,
            f"`{exit_}` decided on `{local}`, {whose}: one process would go round the "
            "loop once more while the others wait for it in an all-reduce (a hang); "
            "all-reduce the value (or the flag) before the test, by hand",
            blocking=True,
        )
    return settled


def _picked_once(ctx: ConvertContext, node: cst.CSTNode, local: str) -> bool:
    """`best_lr = 10 ** log_lrs[i_min] / 10`, picked once from an LR finder's losses before
    training, then `SGD(model.parameters(), lr=best_lr)` (round-25 audit B
    lr_finder_then_train): each process's range test ran over its own batches and picked
    its own; every process takes rank 0's, right after it is picked. True when done so; a
    value set again while training (a loss-based rule) is not picked once."""
    anatomy = ctx.anatomy
    scope = anatomy.function_of(node)
    values = anatomy.values.values_of(local, scope)
    if len(values) != 1 or "." in local:
        return False
    made = anatomy.statement_of(values[0][0])
    training = {id(call) for call in anatomy.script.training_calls}
    if (
        not isinstance(made, cst.SimpleStatementLine)
        or len(made.body) != 1
        or not anatomy.script.after_setup(made)
        or anatomy.ranks.guard(made) is not None
        or not anatomy.precedes(made, node)
        or any(
            isinstance(loop, cst.For | cst.While)
            and anatomy.graph.reaches(loop, lambda inner: id(inner) in training)
            for loop in anatomy.ancestors(made)
        )
    ):
        return False
    take_rank_zeros(ctx.plan, made, local)
    ctx.add_import("torch.distributed", asname="dist")
    ctx.changed(
        node,
        f"the learning rate is rank 0's `{local}` in every process: each process picked "
        "its own from the losses of its own batches, and the replicas would drift apart",
    )
    return True


def _evaluated_on_rank_zero(ctx: ConvertContext, step: cst.Call) -> None:
    """`val_score = evaluate(model, val_loader)` then `scheduler.step(val_score)`: read whole
    by every process, the validation data gives every process the same score only if the
    models are the same, and BatchNorm's running statistics are not (each process updates
    them from its own last batch; a helper given `model.module` skips DDP's broadcast of
    them): every process steps with rank 0's score (milesial/Pytorch-UNet)."""
    anatomy = ctx.anatomy
    metric = step.args[0].value
    if not isinstance(metric, cst.Name):
        return
    scope = anatomy.function_of(step)
    values = anatomy.values.values_of(metric.value, scope)
    if len(values) != 1 or not isinstance(values[0][0], cst.Call):
        return
    evaluation = values[0][0]
    if not _runs_the_model(anatomy, evaluation, _models_and_copies(anatomy)):
        return
    made = anatomy.statement_of(evaluation)
    if anatomy.parent(made) is not anatomy.parent(anatomy.statement_of(step)):
        return
    take_rank_zeros(ctx.plan, made, metric.value)
    ctx.add_import("torch.distributed", asname="dist")
    ctx.changed(
        step,
        f"the scheduler steps on rank 0's `{metric.value}` in every process: each process's "
        "BatchNorm statistics differ after its own last batch, and so would the score and "
        "the epochs at which the learning rate is cut",
    )


def _agree(ctx: ConvertContext, branch: cst.If, exit_: str, local: str, taken: set[str]) -> None:
    """Take the branch in every process when one process would: the test becomes a flag,
    all-reduced with MAX before the `if` (a CPU tensor: gloo carries it on GPU nodes too)."""
    anatomy = ctx.anatomy
    in_body = _exit_in(branch.with_changes(orelse=None)) is not None
    base = ("skip" if exit_ == "continue" else "stop") if in_body else "taken"
    candidates = [base, f"{base}_flag", *(f"{base}_{n}" for n in range(2, 20))]
    flag = anatomy.free_name([name for name in candidates if name not in taken])
    taken.add(flag)
    test = branch.test
    text = anatomy.module.code_for_node(test)
    value = (
        f"float({text})"
        if isinstance(test, cst.Comparison | cst.UnaryOperation)
        else f"float(bool({text}))"
    )
    ctx.plan.insert_before(
        branch,
        statements(
            f"{flag} = torch.tensor({value})  # taken everywhere if taken in one process\n"
            f"dist.all_reduce({flag}, op=dist.ReduceOp.MAX)\n"
        ),
    )
    ctx.plan.replace(test, lambda _: cst.parse_expression(f"{flag}.item()"))
    ctx.add_import("torch")
    ctx.add_import("torch.distributed", asname="dist")
    what = "a save to this process's own file" if exit_ == SAVE else f"`{exit_}`"
    whose = (
        "this process's clock"
        if local.endswith("()")
        else "a signal this process received"
        if local.endswith(" (signal)")
        else "a value of this process's batches"
    )
    local = local.removesuffix(" (signal)")
    ctx.changed(
        branch,
        f"{what} decided on `{local}`, {whose}: every process takes it when one does (flag "
        "all-reduced with MAX)",
    )


def _agree_to_go_on(ctx: ConvertContext, loop: cst.While, local: str, taken: set[str]) -> None:
    """`while time.time() - t0 < budget and epoch < n:` (round-43 audit B while_budget):
    `while True:` whose first statements test, all-reduce with MIN and break when any
    process would leave; a `continue` comes back to the test as before."""
    anatomy = ctx.anatomy
    candidates = ["go_on", "keep_going", *(f"go_on_{n}" for n in range(2, 20))]
    flag = anatomy.free_name([name for name in candidates if name not in taken])
    taken.add(flag)
    text = anatomy.module.code_for_node(loop.test)
    ctx.plan.insert_before(
        loop.body.body[0],
        statements(
            f"{flag} = torch.tensor(float(bool({text})))  # all or none go on\n"
            f"dist.all_reduce({flag}, op=dist.ReduceOp.MIN)\n"
            f"if not {flag}.item():\n"
            "    break\n"
        ),
    )
    ctx.plan.replace(loop.test, lambda _: cst.Name("True"))
    ctx.add_import("torch")
    ctx.add_import("torch.distributed", asname="dist")
    whose = "this process's clock" if local.endswith("()") else "a value of this process's batches"
    ctx.changed(
        loop,
        f"`while` decided on `{local}`, {whose}: every process leaves the loop when one "
        "does (its test all-reduced with MIN at the top of `while True:`)",
    )


def _mean_behind(anatomy: Anatomy, name: str, test: cst.BaseExpression) -> str:
    """The batch mean a best-so-far value follows (`best_loss = avg_loss` under a test, from
    `float("inf")`): averaged, every process keeps the same best; else `name` itself."""
    scope = anatomy.function_of(test)
    given = [value for value, _ in anatomy.values.values_of(name, scope)]
    means = {
        value.value
        for value in given
        if isinstance(value, cst.Name) and _is_batch_mean(anatomy, value.value, test)
    }
    rest = [
        value
        for value in given
        if not (isinstance(value, cst.Name) and value.value in means)
        and not isinstance(value, cst.Integer | cst.Float)
        and not (isinstance(value, cst.Call) and dotted(value.func) == "float")
    ]
    return means.pop() if len(means) == 1 and not rest else name


def _is_batch_mean(anatomy: Anatomy, name: str, test: cst.BaseExpression) -> bool:
    """Whether `name` holds a mean over this process's batches, a number: `loss.item()`, or
    `running / len(train_loader)` with `running += loss.item()` in the batch loop. The mean
    of those over the processes is the value the single-process script computed. (A sum
    over `len(dataset)`, or a count, is not: averaged it would shrink by the world size.)"""
    scope = anatomy.function_of(test)
    if _divided_in_place(anatomy, name, test) is not None:
        return True  # `epoch_loss += loss.item()`, then `epoch_loss /= len(loader)` (s40)
    values = anatomy.values.values_of(name, scope)
    if len(values) != 1:
        return False
    return _is_mean(anatomy, *values[0])


def _is_mean(anatomy: Anatomy, value: cst.BaseExpression, where: cst.FunctionDef | None) -> bool:
    """`_is_batch_mean` for the value itself."""
    if is_method_call(value, "item"):
        return True
    loop = batch_mean(value, where, anatomy)
    if loop is not None and any(
        loop is trained.batch_loop for trained in anatomy.script.train_loops
    ):
        return True  # `sum(losses) / len(losses)`, `np.mean(losses)`, `meter.avg`
    if _returns_a_mean(anatomy, value) or _metric_mean(anatomy, value):
        return True
    if _returned_meter_mean(anatomy, value, where):
        return True
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide)):
        return False
    right = value.right
    if _sums_divided(anatomy, value) is not None:
        return True  # `total / n`, both summed over the batches (round-16 audit s30)
    if not (
        isinstance(right, cst.Call)
        and dotted(right.func) == "len"
        and len(right.args) == 1
        and isinstance(value.left, cst.Name | cst.Call)
    ):
        return False
    counted = right.args[0].value
    split = anatomy.split_samples
    if (
        split is not None
        and isinstance(counted, cst.Name)
        and counted.value in {samples.name for samples in split.samples}
        and is_method_call(value.left, "item")
    ):
        return True  # `loss.item() / len(X_train)`: the mean over this process's part
    if isinstance(counted, cst.Attribute) and counted.attr.value in {"dataset", "sampler"}:
        counted = counted.value  # a mean per sample (`len(loader.sampler)` after DDP011)
    loader = anatomy.loaders.loader_for(anatomy.loaders.resolve(counted, where))
    if loader is None and isinstance(counted, cst.Name):
        # `running_loss / len(train_ds)`, the training loader's dataset, made
        # `len(train_loader.sampler)` by DDP011 (round-49 audit B wrs_plateau_trainloss)
        loader = next(
            (
                trained
                for trained in anatomy.script.train_loaders
                if (given := call_arg(trained.call, 0, "dataset")) is not None
                and is_name(given.value, counted.value)
                and anatomy.function_of(trained.call) is where
            ),
            None,
        )
    if loader is None or all(loader is not trained for trained in anatomy.script.train_loaders):
        return False
    if not isinstance(value.left, cst.Name):
        return False
    running = value.left.value
    sums = _batch_sums(anatomy, running)
    return bool(sums) and all(
        any(is_method_call(inner, "item") for inner in walk(node.value)) for node in sums
    )


def _returned_meter_mean(
    anatomy: Anatomy, value: cst.BaseExpression, where: cst.FunctionDef | None
) -> bool:
    """`losses.avg`, `losses` an AverageMeter a function of the script returns whole
    (`losses, top1 = train_epoch(...)`), updated in its training batch loop (round-47 audit
    B plateau_meter)."""
    if not (isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name)):
        return False
    given = anatomy.values.values_of(value.value.value, where)
    if len(given) != 1:
        return False
    made = given[0][0]
    position = constant_index(made)
    call = made.value if position is not None and isinstance(made, cst.Subscript) else made
    callee = anatomy.graph.callee(call) if isinstance(call, cst.Call) else None
    if callee is None:
        return False
    returned = [_element(part, position) for part in anatomy.graph.returned_values(callee)]
    if not returned or not all(isinstance(part, cst.Name) for part in returned):
        return False
    for part in returned:
        assert isinstance(part, cst.Name)
        loop = batch_mean(cst.Attribute(part, value.attr), callee, anatomy)
        trained = [train.batch_loop for train in anatomy.script.train_loops]
        if loop is None or all(loop is not batch_loop for batch_loop in trained):
            return False
    return True


def _metric_mean(anatomy: Anatomy, value: cst.BaseExpression) -> bool:
    """`metric.compute()` of a metric class of the script returning a ratio of its own
    counts (`self.correct / max(self.total, 1)`) that a method the training batch loop calls
    adds to (`metric.update(out, y)`: `self.correct += ...`): a mean over this process's
    batches (round-43 audit E metric: each process kept its own best epoch)."""
    method = anatomy.graph.instance_method(value) if isinstance(value, cst.Call) else None
    owner = anatomy.class_of(method) if method is not None else None
    returned = anatomy.graph.returned_values(method) if method is not None else []
    if owner is None or len(returned) != 1:
        return False
    ratio = returned[0]
    if not (isinstance(ratio, cst.BinaryOperation) and isinstance(ratio.operator, cst.Divide)):
        return False
    counts = {
        node.attr.value
        for node in walk(ratio)
        if isinstance(node, cst.Attribute) and is_name(node.value, "self")
    }
    updates: list[cst.FunctionDef] = []
    for loop in anatomy.script.train_loops:
        for node in walk(loop.batch_loop.body):
            called = anatomy.graph.instance_method(node) if isinstance(node, cst.Call) else None
            if called is not None and anatomy.class_of(called) is owner:
                updates.append(called)
    added = {
        node.target.attr.value
        for update in updates
        for node in walk(update.body)
        if isinstance(node, cst.AugAssign)
        and isinstance(node.target, cst.Attribute)
        and is_name(node.target.value, "self")
    }
    return bool(counts) and counts <= added


def _returns_a_mean(anatomy: Anatomy, value: cst.BaseExpression) -> bool:
    """`train_one_epoch(model, loader, ...)` (or its `[0]`, unpacked from a tuple) where
    the function returns a mean over the batches of the training loader it is given: a
    function of the script, or of another file of its project (round-32 audit C
    early_stop_on_train_loss_module, engine_with_amp_scaler_and_clip_c)."""
    position = constant_index(value)
    call = value.value if position is not None and isinstance(value, cst.Subscript) else value
    if not isinstance(call, cst.Call):
        return False
    callee = anatomy.graph.callee(call)
    if callee is not None:
        picked = [_element(given, position) for given in anatomy.graph.returned_values(callee)]
        return bool(picked) and all(
            given is not None and _is_mean(anatomy, given, callee) for given in picked
        )
    helper = anatomy.project.helper(call)
    if helper is None:
        return False
    returned = helper.graph.returned_values(helper.function)
    picked = [_element(given, position) for given in returned]
    if not picked or any(given is None for given in picked):
        return False
    for given in picked:
        assert given is not None
        loop = batch_mean(given, helper.function, helper.index)
        read = strip_iteration(loop.iter) if loop is not None else None
        if not isinstance(read, cst.Name):
            return False
        argument = helper.graph.bound_argument(call, helper.function, read.value)
        loader = (
            anatomy.loaders.loader_for(anatomy.loaders.resolve(argument, anatomy.function_of(call)))
            if argument is not None
            else None
        )
        if loader is None or all(loader is not trained for trained in anatomy.script.train_loaders):
            return False
    return True


def _element(value: cst.BaseExpression, position: int | None) -> cst.BaseExpression | None:
    """`value`, or its element at `position` when it is a tuple returned."""
    if position is None:
        return value
    if isinstance(value, cst.Tuple) and position < len(value.elements):
        return value.elements[position].value
    return None


def _divided_in_place(
    anatomy: Anatomy, name: str, decision: cst.CSTNode
) -> cst.BaseStatement | None:
    """`name /= len(train_loader)` in the decision's block, before it, where the batch loops
    add `loss.item()` to `name` (round-17 audit s40): a mean over this process's batches,
    made in place. The statement that divides it."""
    statement = anatomy.statement_of(decision)
    body = list(anatomy.body_of(statement))
    if statement not in body or not _batch_sums(anatomy, name):
        return None
    if not all(
        any(is_method_call(inner, "item") for inner in walk(node.value))
        for node in _batch_sums(anatomy, name)
    ):
        return None
    for earlier in reversed(body[: body.index(statement)]):
        small = earlier.body[0] if isinstance(earlier, cst.SimpleStatementLine) else None
        if (
            isinstance(small, cst.AugAssign)
            and dotted(small.target) == name
            and isinstance(small.operator, cst.DivideAssign)
            and isinstance(small.value, cst.Call)
            and dotted(small.value.func) == "len"
            and len(small.value.args) == 1
        ):
            counted = small.value.args[0].value
            if isinstance(counted, cst.Attribute) and counted.attr.value in {"dataset", "sampler"}:
                counted = counted.value
            loader = anatomy.loaders.loader_for(
                anatomy.loaders.resolve(counted, anatomy.function_of(earlier))
            )
            trained = any(loader is t for t in anatomy.script.train_loaders)
            return earlier if loader is not None and trained else None
    return None


def _batch_sums(anatomy: Anatomy, name: str) -> list[cst.AugAssign]:
    """`name += ...` in the training batch loops."""
    return [
        node
        for loop in anatomy.script.train_loops
        for node in walk(loop.batch_loop.body)
        if isinstance(node, cst.AugAssign)
        and dotted(node.target) == name
        and isinstance(node.operator, cst.AddAssign)
    ]


def _sums_divided(anatomy: Anatomy, value: cst.BaseExpression) -> tuple[str, str] | None:
    """`(total, n)` for `total / n`, where the batch loops add a loss (`.item()`) to
    `total` and a count of samples (`len(x)`, `x.size(0)`) to `n`: a mean per sample,
    whose value over all the processes is the sum of the totals over the sum of the counts."""
    if not (
        isinstance(value, cst.BinaryOperation)
        and isinstance(value.operator, cst.Divide)
        and isinstance(value.left, cst.Name)
        and isinstance(value.right, cst.Name)
    ):
        return None
    total, count = value.left.value, value.right.value
    totals, counts = _batch_sums(anatomy, total), _batch_sums(anatomy, count)
    if not totals or not counts:
        return None
    if not all(any(is_method_call(n, "item") for n in walk(node.value)) for node in totals):
        return None
    if not all(
        (isinstance(node.value, cst.Call) and dotted(node.value.func) == "len")
        or is_method_call(node.value, "size", "numel")
        or (isinstance(node.value, cst.Subscript) and is_attribute(node.value.value, "shape"))
        or isinstance(node.value, cst.Integer)
        for node in counts
    ):
        return None
    return total, count


def _average_inline_mean(ctx: ConvertContext, branch: cst.If, taken: set[str]) -> bool:
    """`if sum(recent) / len(recent) < target: break`, a mean written in the test: averaged
    over the processes just before it, as a named mean is (round-45 audit B deque_stop
    variant_inline: a MAX flag stopped every rank when one rank's own mean was low)."""
    means = [
        node
        for node in walk(branch.test)
        if isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, cst.Divide)
        and isinstance(node.left, cst.Call)
        and is_name(node.left.func, "sum")
        and isinstance(node.right, cst.Call)
        and is_name(node.right.func, "len")
        and len(node.left.args) == 1
        and len(node.right.args) == 1
        and dotted(node.left.args[0].value) is not None
        and dotted(node.left.args[0].value) == dotted(node.right.args[0].value)
    ]
    if len(means) != 1:
        return False
    mean = means[0]
    anatomy = ctx.anatomy
    candidates = ["mean", *(f"mean_{n}" for n in range(2, 20))]
    tensor = anatomy.free_name([name for name in candidates if name not in taken])
    taken.add(tensor)
    code = cst.Module([]).code_for_node(mean)
    ctx.plan.insert_before(
        branch,
        statements(
            f"{tensor} = torch.tensor(float({code}))\n"
            f"dist.all_reduce({tensor})  # the mean over all processes\n"
        ),
    )
    averaged = f"{tensor}.item() / dist.get_world_size()"
    ctx.plan.replace(mean, lambda _: cst.parse_expression(averaged))
    ctx.add_import("torch")
    ctx.add_import("torch.distributed", asname="dist")
    ctx.changed(
        branch,
        f"`{code}`, a mean over this process's batches, is averaged over all processes "
        "before the decision: every process decides alike, as the single-process script did",
    )
    return True


def _average(ctx: ConvertContext, branch: cst.BaseStatement, local: str, taken: set[str]) -> None:
    """`local` becomes its mean over the processes just before the decision: every process
    then decides on the single-process script's value."""
    anatomy = ctx.anatomy
    candidates = ["mean", f"{local}_mean", *(f"mean_{n}" for n in range(2, 20))]
    tensor = anatomy.free_name([name for name in candidates if name not in taken])
    taken.add(tensor)
    [(value, _)] = anatomy.values.values_of(local, anatomy.function_of(branch))
    divided = _sums_divided(anatomy, value)
    if divided is not None:
        total, count = divided
        new = statements(
            f"{tensor} = torch.tensor([float({total}), float({count})])\n"
            f"dist.all_reduce({tensor})\n"
            f"{local} = ({tensor}[0] / {tensor}[1]).item()  # over all processes' samples\n"
        )
    else:
        new = statements(
            f"{tensor} = torch.tensor(float({local}))\n"
            f"dist.all_reduce({tensor})\n"
            f"{local} = {tensor}.item() / dist.get_world_size()  # the mean over all processes\n"
        )
    # Right after the value is computed, when that is in the decision's block: whatever
    # reports it (a print) then shows the mean too.
    made = _divided_in_place(anatomy, local, branch) or anatomy.statement_of(
        value.value
        if isinstance(value, cst.Subscript) and constant_index(value) is not None
        else value
    )  # (`train_loss, train_acc = train(...)` gives `train(...)[0]`, a node of its own)
    if anatomy.parent(made) is anatomy.parent(branch) and anatomy.precedes(made, branch):
        ctx.plan.insert_after(made, new)
    else:
        ctx.plan.insert_before(branch, new)
    ctx.add_import("torch")
    ctx.add_import("torch.distributed", asname="dist")
    ctx.changed(
        branch,
        f"`{local}`, a mean over this process's batches, is averaged over all processes "
        "before the decision: every process decides alike, as the single-process script did",
    )


def _average_kept_means(
    ctx: ConvertContext, local: str, test: cst.BaseExpression, taken: set[str]
) -> bool:
    """`history["loss"].append(total / n)`, every value the list (or the entries the test
    reads) keeps a mean over this process's batches: each is averaged over the processes
    as it is appended, so every process keeps, and decides on, the same history. False
    when some value is not a mean."""
    anatomy = ctx.anatomy
    keys = {
        key
        for node in walk(test)
        if isinstance(node, cst.Subscript)
        and dotted(node.value) == local
        and (key := _key_of(node)) is not None
    }
    kept = _kept_in(anatomy, local, keys or None)
    batch_loops = [loop.batch_loop for loop in anatomy.script.train_loops]
    if any(anatomy.inside(call, loop) for call, _ in kept for loop in batch_loops):
        return False  # a list of the batches' losses (`losses.append(loss.item())`): not
        # an all-reduce a step; the mean made of it is averaged where it is decided on
    if not kept or not all(
        _is_mean(anatomy, value, anatomy.function_of(call))
        or (isinstance(value, cst.Name) and _is_batch_mean(anatomy, value.value, call))
        for call, value in kept
    ):
        return False
    for call, _ in kept:
        _average_in_place(ctx, call, taken, f"before `{local}` keeps it")
    return True


def _average_means_in(
    ctx: ConvertContext, local: str, test: cst.BaseExpression, taken: set[str]
) -> bool:
    """`losses = estimate_loss()`, a dict of this process's means (nanoGPT's `out[split] =
    losses.mean()` over batches it draws): each entry becomes its mean over the processes
    right after the call, so every process decides, and keeps as its best, the same value
    (round-42 audit C gpt_inline: the MAX flag took the branch, and each process kept its
    own estimate as the best, which then rose). False when `local` is not such a dict."""
    anatomy = ctx.anatomy
    scope = anatomy.function_of(test)
    values = anatomy.values.values_of(local, scope)
    if "." in local or len(values) != 1 or not isinstance(values[0][0], cst.Call):
        return False
    call = values[0][0]
    callee = anatomy.graph.callee(call)
    returned = anatomy.graph.returned_values(callee) if callee is not None else []
    if (
        callee is None
        or not returned
        or not all(_dict_of_means(anatomy, callee, r) for r in returned)
    ):
        return False
    made = anatomy.statement_of(call)
    if not isinstance(made, cst.SimpleStatementLine) or anatomy.ranks.guard(made) is not None:
        return False
    key = anatomy.free_name([n for n in ("key", "split_name", "entry") if n not in taken])
    tensor = anatomy.free_name([n for n in ("mean", f"{local}_mean", "mean_2") if n not in taken])
    taken.update({key, tensor})
    ctx.plan.insert_after(
        made,
        statements(
            f"for {key} in {local}:  # the mean over all processes\n"
            f"    {tensor} = torch.tensor(float({local}[{key}]))\n"
            f"    dist.all_reduce({tensor})\n"
            f"    {local}[{key}] = {tensor}.item() / dist.get_world_size()\n"
        ),
    )
    ctx.add_import("torch")
    ctx.add_import("torch.distributed", asname="dist")
    ctx.changed(
        made,
        f"`{local}`, means over this process's batches, is averaged entry by entry over all "
        "processes: every process decides, and keeps as its best, the same value",
    )
    return True


def _dict_of_means(
    anatomy: Anatomy, function: cst.FunctionDef, returned: cst.BaseExpression
) -> bool:
    """`out`, returned by `function`, made `{}` and given `out[key] = <a mean>` only (a
    `.mean()` of what it collected, `.item()` of it, or a batch mean)."""
    if not isinstance(returned, cst.Name):
        return False
    made = anatomy.values.values_of(returned.value, function)
    if len(made) != 1 or not (isinstance(made[0][0], cst.Dict) and not made[0][0].elements):
        return False
    entries = [
        node.value
        for node in walk(function.body)
        if isinstance(node, cst.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0].target, cst.Subscript)
        and is_name(node.targets[0].target.value, returned.value)
    ]
    return bool(entries) and all(_a_mean(anatomy, entry, function) for entry in entries)


def _a_mean(anatomy: Anatomy, value: cst.BaseExpression, function: cst.FunctionDef) -> bool:
    while is_method_call(value, "item", "cpu", "detach"):
        value = value.func.value  # type: ignore[attr-defined]
    return is_method_call(value, "mean") or _is_mean(anatomy, value, function)


def _average_in_place(
    ctx: ConvertContext,
    step: cst.Call,
    taken: set[str],
    before: str = "before the scheduler steps on it: every process cuts the learning rate alike",
) -> None:
    """`scheduler.step(tr_loss / len(train_dl))`, a mean over this process's batches
    written in the call (round-23 audit B quickdraw_sched_b): stepped on its mean over the
    processes, all-reduced just before."""
    anatomy = ctx.anatomy
    candidates = ["mean", *(f"mean_{n}" for n in range(2, 20))]
    tensor = anatomy.free_name([name for name in candidates if name not in taken])
    taken.add(tensor)
    value = step.args[0].value
    ctx.plan.insert_before(
        anatomy.statement_of(step),
        statements(
            f"{tensor} = torch.tensor(float({source_text(value)}))\ndist.all_reduce({tensor})\n"
        ),
    )
    mean = cst.parse_expression(f"{tensor}.item() / dist.get_world_size()")
    ctx.plan.replace(value, lambda _: mean)
    ctx.add_import("torch")
    ctx.add_import("torch.distributed", asname="dist")
    ctx.changed(
        step, f"the mean over this process's batches is averaged over all processes {before}"
    )


def _is_elif(anatomy: Anatomy, branch: cst.If) -> bool:
    parent = anatomy.parent(branch)
    return isinstance(parent, cst.If) and parent.orelse is branch


def _loop_exits(anatomy: Anatomy) -> list[tuple[cst.BaseExpression, str]]:
    """Tests that decide whether a process leaves a training loop or skips a step: the test
    of an `if` in a training loop whose branch breaks, continues or returns (early stopping,
    a NaN skip), and the test of a `while` training loop."""
    loops: list[cst.For | cst.While] = []
    for train_loop in anatomy.script.train_loops:
        loops.append(train_loop.batch_loop)
        if train_loop.epoch_loop is not None:
            loops.append(train_loop.epoch_loop)
    for training in anatomy.script.foreign_training:
        if training.epoch_loop is not None and training.epoch_loop not in loops:
            loops.append(training.epoch_loop)
    stream = anatomy.streams.random_batches  # nanoGPT's `while iter_num < max_iters:`
    if stream is not None and stream.loop not in loops:
        loops.append(stream.loop)
    for step_loop, _ in anatomy.streams.step_loops():
        # `while step < n and time.time() - t0 < budget:` taking batches with `next(it)`
        if step_loop not in loops:
            loops.append(step_loop)
    loops += [loop for loop in _over_training_generators(anatomy) if loop not in loops]
    found: list[tuple[cst.BaseExpression, str]] = []
    seen: set[int] = set()
    for step in _stepping_functions(anatomy):
        # `if not math.isfinite(loss.item()): return None` before the backward pass in the
        # `train_step()` a batch loop calls (round-43 audit B step_helper_nan: one process
        # skipped DDP's all-reduce while the other waited in it)
        for node in walk(step.body):
            if isinstance(node, cst.If) and anatomy.function_of(node) is step:
                exit_ = _exit_in(node)
                if exit_ is not None and id(node.test) not in seen:
                    seen.add(id(node.test))
                    found.append((node.test, exit_))
    for loop in loops:
        if isinstance(loop, cst.While) and id(loop.test) not in seen:
            seen.add(id(loop.test))
            found.append((loop.test, "while"))
        for node in walk(loop.body):
            if not isinstance(node, cst.If) or id(node.test) in seen:
                continue
            exit_ = _exit_in(node) or (SAVE if _saves_privately(anatomy, node) else None)
            if exit_ is not None:
                seen.add(id(node.test))
                found.append((node.test, exit_))
    return found


def _over_training_generators(anatomy: Anatomy) -> list[cst.For]:
    """`for metrics in train(...):` over a generator of the script that trains and yields
    (once an epoch): leaving that loop stops the training (round-44 audit E cfg_generator)."""
    found: list[cst.For] = []
    functions = {
        id(function): function
        for train_loop in anatomy.script.train_loops
        for loop in (train_loop.epoch_loop, train_loop.batch_loop)
        if loop is not None and (function := anatomy.function_of(loop)) is not None
    }  # the batch loop's too: a generator yielding every step's loss (round-48 audit B)
    for function in functions.values():
        if not any(
            isinstance(node, cst.Yield) and anatomy.function_of(node) is function
            for node in walk(function.body)
        ):
            continue
        for site in anatomy.graph.call_sites(function):
            # also `for i, l in enumerate(train_steps(...))` (round-48 audit B c9_gen_lrfinder)
            loop = next((n for n in anatomy.ancestors(site) if isinstance(n, cst.For)), None)
            if loop is not None and strip_iteration(loop.iter) is site and loop not in found:
                found.append(loop)
    return found


def _stepping_functions(anatomy: Anatomy) -> list[cst.FunctionDef]:
    """The functions of the script, other than those the training loops are in, that make
    a backward pass and that a training batch loop calls (a `train_step(model, ...)`)."""
    batch_loops = [loop.batch_loop for loop in anatomy.script.train_loops]
    holding = {id(anatomy.function_of(loop)) for loop in batch_loops}
    found: dict[int, cst.FunctionDef] = {}

    def collect(node: cst.CSTNode) -> bool:
        function = anatomy.function_of(node)
        if (
            function is not None
            and id(function) not in holding
            and isinstance(node, cst.Call)
            and any(node is backward for backward in anatomy.script.backward_calls)
        ):
            found.setdefault(id(function), function)
        return False  # look at every node

    for loop in batch_loops:
        anatomy.graph.reaches(loop.body, collect)
    return list(found.values())


def _read_from_the_loss(anatomy: Anatomy, test: cst.BaseExpression) -> str | None:
    """The name `test` reads that the backward pass of its function is computed from (the
    loss, the outputs, the batch it is given): this process's own."""
    function = anatomy.function_of(test)
    feeding: set[int] = set()
    for backward in anatomy.script.backward_calls:
        if anatomy.function_of(backward) is function:
            feeding |= anatomy.script.loss_nodes_of(backward)
    if function is None or not feeding:
        return None
    names = {
        node.value
        for node in walk(function.body)
        if isinstance(node, cst.Name) and id(node) in feeding
    }
    return next(
        (
            node.value
            for node in walk(test)
            if isinstance(node, cst.Name)
            and node.value in names
            and not anatomy.is_attribute_name(node)
        ),
        None,
    )


def _decisions(anatomy: Anatomy) -> list[cst.BaseExpression]:
    """Tests of `if`s in a training loop whose branches change the learning rate
    (`g["lr"] *= 0.5`), put weights back (`model.load_state_dict(snapshot)`) or keep them
    to put back later (`best_state = copy.deepcopy(model.state_dict())`)."""
    loops: list[cst.For | cst.While] = []
    for train_loop in anatomy.script.train_loops:
        loops.append(train_loop.batch_loop)
        if train_loop.epoch_loop is not None:
            loops.append(train_loop.epoch_loop)
    loops += [step_loop for step_loop, _ in anatomy.streams.step_loops()]
    found: dict[int, cst.BaseExpression] = {}

    def collect(node: cst.CSTNode) -> bool:
        if isinstance(node, cst.If) and any(
            _sets_lr(inner) or is_method_call(inner, "load_state_dict") or _keeps_weights(inner)
            for part in (node.body, node.orelse)
            if part is not None
            for inner in walk(part)
        ):
            found.setdefault(id(node.test), node.test)
        return False  # look at every node

    for loop in loops:  # in the loop, and in the functions it calls (`self.adjust_lr()`)
        anatomy.graph.reaches(loop.body, collect)
    return list(found.values())


LOSS_CLASS = re.compile(r"^torch\.nn\.(modules\.loss\.)?\w+Loss$")


def _losses_weighted_locally(anatomy: Anatomy) -> list[tuple[cst.Call, str]]:
    """Loss modules made again while training from values of this process's batches
    (`nn.CrossEntropyLoss(weight=weights)` after `weights[worst] *= 1.5`, the worst class
    picked from accuracies counted over the training batches: round-45 audit E
    classweight_train, each rank weighting its own classes)."""
    loops = [loop.epoch_loop or loop.batch_loop for loop in anatomy.script.train_loops]
    found: list[tuple[cst.Call, str]] = []
    for loop in loops:
        for node in walk(loop):
            if not (
                isinstance(node, cst.Call)
                and dotted(node.func) is not None
                and any(LOSS_CLASS.match(name) for name in anatomy.qualified_names(node.func))
            ):
                continue
            for arg in node.args:
                local = _shard_value(anatomy, arg.value, anatomy.function_of(node))
                if local is not None:
                    found.append((node, local))
                    break
    return found


def _in_another_phase(anatomy: Anatomy, test: cst.BaseExpression) -> bool:
    """`phase == "val" and epoch_acc > best_acc` in a phase loop (the transfer-learning
    tutorial's best weights): decided in a phase whose loader every process reads whole."""
    for loop in anatomy.script.train_loops:
        if loop.phase_loop is None or loop.loader is None or loop.loader.train_key is None:
            continue
        phases = {n.value for n in walk(loop.phase_loop.target) if isinstance(n, cst.Name)}
        conjuncts, both = [], [test]
        while both:  # the operands of the test's top-level `and`s
            node = both.pop()
            if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
                both += [node.left, node.right]
            else:
                conjuncts.append(node)
        if anatomy.inside(test, loop.phase_loop) and any(
            isinstance(node, cst.Comparison)
            and len(node.comparisons) == 1
            and isinstance(node.comparisons[0].operator, cst.Equal)
            and isinstance(node.left, cst.Name)
            and node.left.value in phases
            and isinstance(key := node.comparisons[0].comparator, cst.SimpleString)
            and key.evaluated_value != loop.loader.train_key
            for node in conjuncts
        ):
            return True
    return False


def _keeps_weights(node: cst.CSTNode) -> bool:
    """`best_state = copy.deepcopy(model.state_dict())`: the weights kept to be put back
    later (round-43 audit E metric: each process kept those of its own best epoch, and the
    replicas parted when they were loaded)."""
    return isinstance(node, cst.Assign) and any(
        is_method_call(inner, "state_dict")
        or (isinstance(inner, cst.Call) and dotted(inner.func) in {"copy.deepcopy", "deepcopy"})
        for inner in walk(node.value)
    )


def _sets_lr(node: cst.CSTNode) -> bool:
    return any(
        isinstance(target, cst.Subscript)
        and len(target.slice) == 1
        and isinstance(target.slice[0].slice, cst.Index)
        and isinstance(target.slice[0].slice.value, cst.SimpleString)
        and target.slice[0].slice.value.evaluated_value == "lr"
        for target in assigned(node)
    )


# A branch that writes a file only its own process reads back (the best weights kept in a
# `TemporaryDirectory`): decided apart, each process would load back a different model.
SAVE = "save"


def _saves_privately(anatomy: Anatomy, branch: cst.If) -> bool:
    return any(
        isinstance(node, cst.SimpleStatementLine | cst.With)
        and anatomy.effects.of(node) in FILE_WRITES
        and anatomy.effects.private(node) is not None
        for node in walk(branch)
    )


# Calls that end the process: taken on one rank alone, the others wait for it in their next
# all-reduce until the launcher tears them down, and its message is lost (round-9 audit b12).
EXITS = {"sys.exit", "exit", "quit", "os._exit"}


def _exit_in(branch: cst.If) -> str | None:
    """`break`, `continue`, `return` or `sys.exit()` in the `if`'s own branches (not inside
    an inner loop or function, where it would leave that one)."""
    stack: list[cst.CSTNode] = [branch.body]
    if branch.orelse is not None:
        stack.append(branch.orelse)
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Break):
            return "break"
        if isinstance(node, cst.Continue):
            return "continue"
        if isinstance(node, cst.Return):
            return "return"
        if isinstance(node, cst.Call) and dotted(node.func) in EXITS:
            return f"{dotted(node.func)}()"  # the NaN check of torchvision's references
        if isinstance(node, cst.Raise) and _system_exit(node):
            return "raise SystemExit"  # the same, spelled as a raise (round-47 audit D)
        if isinstance(node, cst.For | cst.While | cst.FunctionDef | cst.ClassDef | cst.Lambda):
            continue
        stack.extend(child_nodes(node))
    return None


def _system_exit(node: cst.Raise) -> bool:
    """`raise SystemExit("nan loss")`: what `sys.exit` does."""
    raised = node.exc.func if isinstance(node.exc, cst.Call) else node.exc
    return raised is not None and dotted(raised) in {"SystemExit", "builtins.SystemExit"}


def _learning_rates(anatomy: Anatomy) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
    """Where the script sets a learning rate: `lr=` of a call (an optimizer, a scheduler's
    `max_lr=`), `group["lr"] = ...`, `group["lr"] *= ...`."""
    found: list[tuple[cst.CSTNode, cst.BaseExpression]] = []
    for call in anatomy.calls:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value in {"lr", "max_lr", "base_lr"}:
                found.append((call, arg.value))
    for assign in anatomy.assigns:
        for target in assign.targets:
            node = target.target
            if (
                isinstance(node, cst.Subscript)
                and len(node.slice) == 1
                and isinstance(node.slice[0].slice, cst.Index)
                and isinstance(node.slice[0].slice.value, cst.SimpleString)
                and node.slice[0].slice.value.evaluated_value == "lr"
            ):
                found.append((assign, assign.value))
    # `g["lr"] *= 1.05 if epoch_loss < prev else 0.5` (round-19 audit p08)
    found += [
        (node, node.value)
        for node in walk(anatomy.module)
        if isinstance(node, cst.AugAssign) and _sets_lr(node)
    ]
    return found


# Clocks: each process reads its own.
CLOCKS = {
    "time.time", "time.perf_counter", "time.monotonic", "time.process_time", "time.time_ns",
    "time.perf_counter_ns", "time.monotonic_ns", "datetime.datetime.now",
    "datetime.datetime.utcnow", "timeit.default_timer",
}  # fmt: skip


# What a process reads of the disk at its own moment (a `STOP` file an operator touches:
# one process may see it a step before another).
DISK_PROBES = {"os.path.exists", "os.path.isfile", "os.path.isdir", "os.path.lexists"}


def _shard_value(
    anatomy: Anatomy,
    expr: cst.BaseExpression,
    scope: cst.FunctionDef | None,
    depth: int = 0,
    settled: frozenset[int] = frozenset(),
) -> str | None:
    """The name in `expr` whose value comes from this process's batches, if any: summed
    over the training batch loop (`running_loss += loss.item()`) or assigned in it from the
    batch (`loss = criterion(model(x), y)`), followed through the values the names in `expr`
    are given."""
    if depth > 4:
        return None
    batch_loops: list[cst.For | cst.While] = [
        loop.batch_loop for loop in anatomy.script.train_loops
    ]
    batch_loops += [step_loop for step_loop, _ in anatomy.streams.step_loops()]
    local = _local_in_loops(anatomy, tuple(batch_loops))
    trainings = {id(training.call) for training in anatomy.script.foreign_training}
    # A comprehension's own variables are not the loop's (`sum(criterion(model(x),
    # y).item() for x, y in val_loader)`, round-20 audit A c28); one over the training
    # loader is this process's shard.
    training = {id(loader.call) for loader in anatomy.script.train_loaders}
    comprehended: set[str] = set()
    for node in walk(expr):
        if isinstance(node, cst.CompFor):
            if id(anatomy.loaders.resolve(node.iter, scope)) in training:
                return dotted(strip_iteration(node.iter)) or "the training loader"
            comprehended |= {n.value for n in walk(node.target) if isinstance(n, cst.Name)}
        if isinstance(node, cst.Lambda):
            # `lf = lambda x: (1 - x / epochs) * ...` (YOLOv5's schedule, round-28 audit A):
            # its parameter is not the batch loop's `x`
            comprehended |= {param.name.value for param in node.params.params}
    for node in walk(expr):
        if isinstance(node, cst.Call) and anatomy.is_call_to(node, CLOCKS):
            # a time budget (`if time.time() - start > budget: break`, round-16 audit s36):
            # every process reads its own clock, and they leave at different steps
            return f"{dotted(node.func)}()"
        if (
            isinstance(node, cst.Call)
            and is_name(node.func, "next")
            and len(node.args) == 1
            and id(anatomy.loaders.resolve(node.args[0].value, scope)) in training
        ):
            # `mon_x, mon_y = next(iter(train_loader))` before training, a batch kept to
            # monitor: this process's shard's (round-47 audit A c7_seedw_islice: one rank
            # ran out of patience alone)
            return source_text(node)
        if isinstance(node, cst.Call) and anatomy.is_call_to(node, DISK_PROBES):
            # `if os.path.exists("STOP"): break` (round-44 audit B stopfile_logfile: the file
            # appeared between two processes' looks, one left and the other died waiting)
            return f"{dotted(node.func)}()"
        if isinstance(node, cst.Call):
            # What a function of the script returns from its batch loop (`train_loss =
            # train_epoch(model, loader, ...)` returning `running / len(loader.dataset)`).
            callee = anatomy.graph.callee(node) or anatomy.graph.instance_method(node)
            if callee is not None and _reads_a_whole_loader(anatomy, node, callee, scope):
                continue  # `run_epoch(model, val_dl, ...)`: this call sums every batch
            for returned in anatomy.graph.returned_values(callee) if callee is not None else ():
                inner = _shard_value(anatomy, returned, callee, depth + 1, settled)
                if inner is not None:  # (a clock read in it: `budget.expired()`)
                    return (dotted(node.func) or "the call") + ("()" * inner.endswith("()"))
            if _reads_what_training_recorded(anatomy, node):
                return dotted(node.func) or "the call"
            if _evaluates_items_drawn_apart(anatomy, node, scope):
                # `acc = evaluate(enc, val_loader)` over pairs the dataset draws with
                # `random`, which the conversion seeds apart for the training items
                # (round-48 audit C siamese: the ranks' accuracies parted, one stopped alone)
                return dotted(node.func) or "the call"
            if _draws_per_process(anatomy, node):
                # nanoGPT's `estimate_loss()` over batches drawn at random, which every
                # process draws apart once converted (round-40 audit B nanogpt_es: one
                # process ran out of patience alone, the other died in its all-reduce)
                return dotted(node.func) or "the call"
        if isinstance(node, cst.Subscript) and (entry := _spelled(node)) is not None:
            # `state["patience"]` counted under `if acc > state["best"]:` (round-43 audit E
            # metricstop: one rank ran out of patience alone)
            decided = _decided_on(anatomy, entry, scope, depth, settled, node)
            if decided is not None:
                return decided
        if isinstance(node, cst.Name) and anatomy.is_attribute_name(node):
            continue  # `lr` of `opt.lr` (round-23 audit A pix2pix: a local `lr` elsewhere)
        if isinstance(node, cst.Name) and node.value in _signal_flags(anatomy):
            return f"{node.value} (signal)"  # a SIGTERM this process alone may have received
        name = dotted(node) if isinstance(node, cst.Name | cst.Attribute) else None
        if name is None or name.split(".")[0] in comprehended:
            continue
        if any(name in names for loop, names in local if _visible(anatomy, loop, scope)):
            return name
        if isinstance(node, cst.Attribute):
            fed = _fed(anatomy, node, scope, depth, settled)
            if fed is not None:
                return fed
            if name.startswith("self.") and any(
                _shard_value(anatomy, value, anatomy.function_of(call), depth + 1, settled)
                for call, value in _kept_in(anatomy, name)
            ):
                return name  # `self.history["loss"].append(loss)`, read in another method
            if name.startswith("self."):
                # `self.bad += 1` under `if loss < self.best - min_delta:` (round-50 audit E
                # c06_trainer_resume: one rank ran out of patience alone)
                decided = _decided_on(anatomy, name, scope, depth, settled, node)
                if decided is not None:
                    return decided
            continue
        for value, where in anatomy.values.values_of(name, scope):
            if given_later(anatomy, value, node):
                continue  # (round-40 audit B nanogpt_es: `iter_num = checkpoint['iter_num']`,
                # a resume before the loop, does not read the `checkpoint = {...}` it makes)
            if any(id(inner) in trainings for inner in walk(value)):
                return name  # what a helper of another file that trains returns
            if _shard_value(anatomy, value, where, depth + 1, settled) is not None:
                return name
        if isinstance(node, cst.Name) and _yielded_locally(anatomy, node, scope, depth, settled):
            return name
        if isinstance(node, cst.Name) and _changed_by_entry(anatomy, node, scope, depth, settled):
            return name
        decided = _decided_on(anatomy, name, scope, depth, settled, node)
        if decided is not None:
            return decided
        if isinstance(node, cst.Name) and any(
            _shard_value(anatomy, value, anatomy.function_of(call), depth + 1, settled)
            for call, value in _kept_in(anatomy, name)
        ):
            return name  # `history["loss"].append(total / n)`, then `history["loss"][-1]`
    return None


def _changed_by_entry(
    anatomy: Anatomy,
    name: cst.Name,
    scope: cst.FunctionDef | None,
    depth: int,
    settled: frozenset[int],
) -> bool:
    """Whether an entry of `name` is changed, in its function, at a position or by a value of
    this process's batches (`weights[worst] *= 1.5`, `worst` picked from accuracies counted
    over the training batches)."""
    for node in walk(scope.body if scope is not None else anatomy.module):
        target = (
            node.target
            if isinstance(node, cst.AugAssign)
            else node.targets[0].target
            if isinstance(node, cst.Assign) and len(node.targets) == 1
            else None
        )
        if not (
            isinstance(target, cst.Subscript)
            and is_name(target.value, name.value)
            and anatomy.function_of(node) is scope
        ):
            continue
        assert isinstance(node, cst.AugAssign | cst.Assign)
        in_batches = any(
            anatomy.inside(node, loop.batch_loop) for loop in anatomy.script.train_loops
        )
        read = [node.value, *(element.slice for element in target.slice)]
        if in_batches and any(isinstance(n, cst.Name) for part in read for n in walk(part)):
            return True  # counted over this process's batches (`hits[t] += int(t == p)`)
        for part in (*[element.slice for element in target.slice], node.value):
            if isinstance(part, cst.Index):
                part = part.value
            if isinstance(part, cst.BaseExpression) and (
                _shard_value(anatomy, part, scope, depth + 1, settled) is not None
            ):
                return True
    return False


def _yielded_locally(
    anatomy: Anatomy,
    name: cst.Name,
    scope: cst.FunctionDef | None,
    depth: int,
    settled: frozenset[int],
) -> bool:
    """Whether `name` is the target of a `for` over a generator of the script that yields
    values of this process's batches (`for metrics in train(...):` with `yield {"loss":
    total / n}` after each epoch, round-44 audit E cfg_generator: one rank stopped alone)."""
    for loop in walk(scope.body if scope is not None else anatomy.module):
        if not (
            isinstance(loop, cst.For)
            and isinstance(loop.iter, cst.Call)
            and anatomy.function_of(loop) is scope
        ):
            continue
        # `for i, l in enumerate(train_steps(...))` (round-48 audit B c6_gen_earlystop: an
        # early stop on the yielded loss left one rank alone): the item, not the count
        target: cst.BaseExpression = loop.target
        if _enumerated(loop) and isinstance(target, cst.Tuple) and len(target.elements) == 2:
            target = target.elements[1].value
        if not any(is_name(n, name.value) for n in walk(target)):
            continue
        iterated = strip_iteration(loop.iter)
        generator = anatomy.graph.callee(iterated) if isinstance(iterated, cst.Call) else None
        if generator is None:
            continue
        for node in walk(generator.body):
            if (
                isinstance(node, cst.Yield)
                and isinstance(node.value, cst.BaseExpression)
                and anatomy.function_of(node) is generator
                and _shard_value(anatomy, node.value, generator, depth + 1, settled) is not None
            ):
                return True
    return False


def _kept_in(
    anatomy: Anatomy, name: str, keys: set[str] | None = None
) -> list[tuple[cst.Call, cst.BaseExpression]]:
    """The values the script appends to the list `name`, or to one of its entries (of
    `keys`, when given: `history["loss"].append(epoch_loss)`; round-42 audit B trainer_bold:
    the learning rate halved on `history["loss"][-1] > history["loss"][-2]`, each process
    its own)."""
    kept = []
    for call in anatomy.calls:
        if not (is_method_call(call, "append") and len(call.args) == 1):
            continue
        holder = call.func.value  # type: ignore[attr-defined]
        key = _key_of(holder)
        while isinstance(holder, cst.Subscript):
            holder = holder.value
        if dotted(holder) == name and (keys is None or key in keys):
            kept.append((call, call.args[0].value))
    return kept


def _spelled(target: cst.BaseExpression) -> str | None:
    """`state` for `state`, `self.best`, and `state["patience"]` for an entry of a name at
    a constant key: how an assignment's target and a read are matched."""
    key = _key_of(target)
    if isinstance(target, cst.Subscript) and key is not None:
        held = dotted(target.value)
        return f"{held}[{key!r}]" if held is not None else None
    return dotted(target)


def _elements(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The targets a tuple target assigns (`state["best"], state["patience"] = acc, 0`)."""
    if isinstance(target, cst.Tuple | cst.List):
        return [element.value for element in target.elements]
    return [target]


def _key_of(read: cst.BaseExpression) -> str | None:
    """`"loss"` of `history["loss"]`."""
    if isinstance(read, cst.Subscript) and len(read.slice) == 1:
        index = read.slice[0].slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
            value = index.value.evaluated_value
            return value if isinstance(value, str) else None
    return None


def _draws_per_process(anatomy: Anatomy, call: cst.Call) -> bool:
    """Whether `call` runs, in a function of the script, a draw of the batches the training
    loop draws at random (`get_batch(split)`'s `torch.randint`): each process draws its own
    once converted, so what the call computes from them is this process's own."""
    if not anatomy.graph.callees(call):
        return False
    partial = _partial_shuffled_passes(anatomy)
    if partial and anatomy.graph.reaches(call, lambda node: id(node) in partial):
        return True
    stream = anatomy.streams.random_batches
    if stream is None:
        return False
    draws = {id(draw) for draw in stream.draws}
    return anatomy.graph.reaches(call, lambda node: id(node) in draws)


def _evaluates_items_drawn_apart(
    anatomy: Anatomy, call: cst.Call, scope: cst.FunctionDef | None
) -> bool:
    """Whether `call` is given a loader that does not train whose dataset, a class of the
    script, draws its items from a generator the conversion seeds apart in every process
    (its training data draws from it too): what it computes over them is this process's."""
    streams = [*anatomy.streams.drawn_items, *anatomy.streams.training_draws]
    families = {
        family for stream in streams for family in stream.families if stream.needs_seed(family)
    }
    if not families:
        return False
    for arg in call.args:
        loader = anatomy.loaders.loader_for(anatomy.loaders.resolve(arg.value, scope))
        dataset = call_arg(loader.call, 0, "dataset") if loader is not None else None
        if loader is None or loader.trains or dataset is None:
            continue
        made = [dataset.value]
        if isinstance(dataset.value, cst.Name):
            where = anatomy.function_of(loader.call)
            made = [value for value, _ in anatomy.values.values_of(dataset.value.value, where)]
        for value in made:
            owner = (
                anatomy.classes.get(dotted(value.func) or "")
                if isinstance(value, cst.Call)
                else None
            )
            getitem = (
                next((m for m in methods(owner) if m.name.value == "__getitem__"), None)
                if owner is not None
                else None
            )
            if getitem is not None and any(
                isinstance(node, cst.Call) and anatomy.streams.drawn_from(node) in families
                for node in walk(getitem.body)
            ):
                return True
    return False


def _partial_shuffled_passes(anatomy: Anatomy) -> set[int]:
    """Loops over a loader that does not train and shuffles, left after some batches
    (`if i >= max_batches: break`): the batches each process evaluates are drawn from its
    own generator (round-45 audit E stepval_unseeded: the ranks' validation losses, then
    their early stops, parted, and the run hung)."""
    found: set[int] = set()
    for loop in walk(anatomy.module):
        if not isinstance(loop, cst.For) or not any(
            isinstance(node, cst.Break) for node in walk(loop.body)
        ):
            continue
        made = anatomy.loaders.resolve(loop.iter, anatomy.function_of(loop))
        loader = anatomy.loaders.loader_for(made)
        if loader is not None and not loader.trains and shuffles(loader.call):
            found.add(id(loop))
    return found


def _signal_flags(anatomy: Anatomy) -> set[str]:
    """Global names a signal handler of the script sets (`signal.signal(signal.SIGTERM,
    handler)` with `global STOP; STOP = True` in `handler`, a cluster's preemption): the
    signal reaches each process on its own, at its own step (round-35 audit B
    signal_sigterm_checkpoint: one rank saved and left while the other went on)."""
    flags: set[str] = set()
    for call in anatomy.calls:
        if not anatomy.is_call_to(call, {"signal.signal"}) or len(call.args) < 2:
            continue
        handler = call.args[1].value
        for function in (
            anatomy.graph.defined(handler.value) if isinstance(handler, cst.Name) else []
        ):
            declared = {
                name.name.value
                for node in walk(function.body)
                if isinstance(node, cst.Global)
                for name in node.names
            }
            flags |= {
                target.value
                for node in walk(function.body)
                if isinstance(node, cst.Assign)
                for assigned in node.targets
                for target in walk(assigned.target)
                if isinstance(target, cst.Name) and target.value in declared
            }
    return flags


def _reads_what_training_recorded(anatomy: Anatomy, call: cst.Call) -> bool:
    """`finder.suggestion()` returning what the object's own training loop recorded on
    `self` (an LR finder's `self.history["loss"].append(avg)` in its `range_test` over the
    training loader, round-20 audit A c22): a value of this process's batches."""
    if not isinstance(call.func, cst.Attribute) or is_name(call.func.value, "self"):
        return False
    for method in anatomy.graph.callees(call):
        owner = anatomy.class_of(method)
        if owner is None:
            continue
        recorded = {
            target.attr.value
            for loop in anatomy.script.train_loops
            if anatomy.inside(loop.batch_loop, owner)
            for node in walk(loop.batch_loop.body)
            for target in _written(node)
            if isinstance(target, cst.Attribute) and is_name(target.value, "self")
        }
        read = {
            node.attr.value
            for returned in anatomy.graph.returned_values(method)
            for node in walk(returned)
            if isinstance(node, cst.Attribute) and is_name(node.value, "self")
        }
        for name in _locals_of(method):
            read |= {
                node.attr.value
                for value in anatomy.values.assignments(name, method)
                for node in walk(value)
                if isinstance(node, cst.Attribute) and is_name(node.value, "self")
            }
        if recorded & read:
            return True
    return False


def _written(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The object an assignment or a mutating call writes (`self.history` for
    `self.history["loss"].append(x)` and `self.best = x`), innermost subscripts and
    attributes stripped to the `self.` attribute."""
    targets = list(assigned(node))
    if isinstance(node, cst.Call) and is_method_call(node, "append", "extend", "update"):
        assert isinstance(node.func, cst.Attribute)
        targets.append(node.func.value)
    found = []
    for target in targets:
        while isinstance(target, cst.Subscript) or (
            isinstance(target, cst.Attribute) and not is_name(target.value, "self")
        ):
            target = target.value
        found.append(target)
    return found


def _locals_of(function: cst.FunctionDef) -> set[str]:
    """The plain names `function` assigns."""
    return {
        target.target.value
        for node in walk(function.body)
        if isinstance(node, cst.Assign)
        for target in node.targets
        if isinstance(target.target, cst.Name)
    }


def _fed(
    anatomy: Anatomy,
    attribute: cst.Attribute,
    scope: cst.FunctionDef | None,
    depth: int,
    settled: frozenset[int],
) -> str | None:
    """`early_stopping.early_stop` of an object the script calls with a value of this
    process's batches (`early_stopping(train_loss, model)`, Bjarten's EarlyStopping; round-14
    audit s22): its state follows that value."""
    owner = dotted(attribute.value)
    models = {name for model in anatomy.models.all for name in model.names}
    if owner is None or owner.startswith("self") or owner in models:
        return None  # `model.hyperparams`: a model is called with the batch, not fed
    if anatomy.imported(owner.split(".")[0]):
        return None  # `torch.load(...)`: a module, fed nothing (round-22 audit B ckpt_amp_clip_b)
    for call in anatomy.calls:
        called = dotted(call.func)
        if called != owner and not (called or "").startswith(f"{owner}."):
            continue
        if anatomy.function_of(call) is not scope:
            continue
        for arg in call.args:
            local = _shard_value(anatomy, arg.value, scope, depth + 1, settled)
            if local is not None:
                return local
    return None


def _reads_a_whole_loader(
    anatomy: Anatomy, call: cst.Call, callee: cst.FunctionDef, scope: cst.FunctionDef | None
) -> bool:
    """Whether `call` gives the loader its function's batch loop reads a loader that is not
    sharded (round-8 audit a07: one `run_epoch(model, loader, ..., optimizer=None)` for
    training and validation; the validation call sums the whole validation set)."""
    loops = [
        loop.batch_loop
        for loop in anatomy.script.train_loops
        if anatomy.function_of(loop.batch_loop) is callee and isinstance(loop.batch_loop, cst.For)
    ]
    training = {id(loader.call) for loader in anatomy.script.train_loaders}
    for loop in loops:
        assert isinstance(loop, cst.For)
        read = strip_iteration(loop.iter, anatomy.graph)
        if not isinstance(read, cst.Name):
            return False
        given = anatomy.graph.bound_argument(call, callee, read.value)
        made = anatomy.loaders.resolve(given, scope) if given is not None else None
        return made is not None and id(made) not in training
    return False


def _decided_on(
    anatomy: Anatomy,
    name: str,
    scope: cst.FunctionDef | None,
    depth: int,
    settled: frozenset[int],
    read: cst.CSTNode | None = None,
) -> str | None:
    """The shard value that decides what `name` is given: a patience counter reset or
    incremented under `if epoch_loss < best_loss:` follows `epoch_loss` (round-7 audit: one
    rank ran out of patience alone, and the other's next all-reduce failed). Branches in
    `settled` are taken alike by every process already (their test is an agreed flag)."""
    # a module's name is also given in the functions that declare it `global` (round-28
    # audit B so_global_patience_counter_b: `stop_training = True` set in `train()`)
    scopes = [scope, *(anatomy.values.declared_global(name) if scope is None else [])]
    for where in scopes:
        for node in walk(where.body if where is not None else anatomy.module):
            if not isinstance(node, cst.Assign | cst.AugAssign):
                continue
            targets = (
                [target.target for target in node.targets]
                if isinstance(node, cst.Assign)
                else [node.target]
            )
            if anatomy.function_of(node) is not where or not any(
                _spelled(element) == name for target in targets for element in _elements(target)
            ):
                continue  # (a nested function's)
            if read is not None and given_later(anatomy, node, read):
                continue
            for ancestor in anatomy.ancestors(node):
                if isinstance(ancestor, cst.FunctionDef | cst.For | cst.While):
                    break
                if isinstance(ancestor, cst.If) and id(ancestor) not in settled:
                    local = _shard_value(anatomy, ancestor.test, where, depth + 1, settled)
                    if local is not None:
                        return local
    return None


def _enumerated(loop: cst.For) -> bool:
    """`enumerate(loader)`, also inside a progress bar: `tqdm(enumerate(loader))`."""
    node: cst.BaseExpression = loop.iter
    for _ in range(3):
        if not isinstance(node, cst.Call):
            return False
        if dotted(node.func) == "enumerate":
            return True
        if not node.args:
            return False
        node = node.args[0].value
    return False


def _visible(anatomy: Anatomy, loop: cst.CSTNode, scope: cst.FunctionDef | None) -> bool:
    return anatomy.function_of(loop) is scope


def _local_in_loops(
    anatomy: Anatomy, loops: tuple[cst.For | cst.While, ...]
) -> list[tuple[cst.For | cst.While, set[str]]]:
    """For each training batch loop, the names it gives values drawn from the batch: its
    targets (or what it takes with `next(it)`, in a loop of steps), and, in order, what is
    assigned from them or from `.item()`, or summed in it. A counter (`step += 1`) is the
    same in every process and is not one of them."""
    found: list[tuple[cst.For | cst.While, set[str]]] = []
    for loop in loops:
        names: set[str | None] = set()
        if isinstance(loop, cst.For):
            target = loop.target
            if _enumerated(loop) and isinstance(target, cst.Tuple) and target.elements:
                # `for i, (x, y) in enumerate(loader)`: the batch, not the count
                target = cst.Tuple(list(target.elements[1:]))
            names = {dotted(node) for node in walk(target)} - {None}
        if isinstance(loop, cst.For) and counted_range(loop) is not None:
            names = set()  # `for i in range(start, n_iters)`: a step counter (round-23 nerf)
        split = anatomy.split_samples
        if split is not None and loop is split.loop:
            # No batch to take: this process's values are those of its part of the samples
            # (`loss = criterion(model(X_part), y_part)`); the counter is the same everywhere.
            names = {samples.name for samples in split.samples}
        for node in walk(loop.body):
            if (
                # `meter.update(loss.item(), n)` too: an AverageMeter returned whole and its
                # `.avg` read by the caller (round-47 audit B plateau_meter)
                is_method_call(node, "append", "extend", "update")
                and isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and any(
                    dotted(inner) in names or is_method_call(inner, "item")
                    for arg in node.args
                    for inner in walk(arg.value)
                )
            ):  # `losses.append(smoothed_loss)`: the list holds this process's values
                names.add(dotted(node.func.value))
                continue
            if isinstance(node, cst.Assign):
                targets = [t.target for t in node.targets]
            elif isinstance(node, cst.AugAssign | cst.AnnAssign):
                targets = [node.target]
            else:
                continue
            value = node.value
            if value is None or isinstance(value, cst.Integer | cst.Float):
                continue
            if isinstance(value, cst.Call) and is_name(value.func, "next"):
                # `x, y = next(it)`: a batch of a loop of steps (a `while` over `next(it)`)
                for target in targets:
                    names.update(_assigned_names(target))
                continue
            if any(
                (dotted(inner) in names)
                or (is_method_call(inner, "item") and not _over_a_whole_loader(anatomy, inner))
                for inner in walk(value)
            ):
                for target in targets:
                    names.update(_assigned_names(target))
        found.append((loop, {name for name in names if name}))
    return found


def _over_a_whole_loader(anatomy: Anatomy, node: cst.CSTNode) -> bool:
    """`node` is computed in a comprehension over a loader that does not train (`sum((model(vx)
    .argmax(1) == vy).sum().item() for vx, vy in val_loader)` in the batch loop, every
    process reading all of it: round-48 audit A best_inmem was refused as "computed from this
    process's batches"). Not with BatchNorm: its running statistics are each process's."""
    if any(anatomy.is_call_to(call, BATCH_NORMS) for call in anatomy.calls):
        return False
    for ancestor in anatomy.ancestors(node):
        if isinstance(ancestor, cst.BaseStatement):
            return False
        if isinstance(ancestor, cst.GeneratorExp | cst.ListComp | cst.SetComp):
            scope = anatomy.function_of(ancestor)
            made = anatomy.loaders.loader_for(anatomy.loaders.resolve(ancestor.for_in.iter, scope))
            if made is not None and not made.trains and ancestor.for_in.inner_for_in is None:
                return True
    return False


def _assigned_names(target: cst.BaseExpression) -> set[str]:
    """The names an assignment target gives a value: `a`, `self.x`, both of `a, b`; for
    `model.seen += n` the attribute `model.seen`, not `model` itself."""
    if isinstance(target, cst.Tuple | cst.List):
        return set().union(*(_assigned_names(element.value) for element in target.elements))
    if isinstance(target, cst.StarredElement):
        return _assigned_names(target.value)
    if isinstance(target, cst.Subscript):  # `losses[i] = ...`: the list holds it
        target = target.value
    name = dotted(target)
    return {name} if name else set()


REDUCTIONS = frozenset(
    {"mean", "sum", "std", "var", "amax", "amin", "logsumexp", "norm", "median", "max", "min"}
)
IN_PLACE = frozenset({"mul_", "add_", "sub_", "div_", "copy_", "lerp_", "addcmul_"})


# What takes a value out of the autograd graph, to keep it (a loss as a statistic).
OUT_OF_THE_GRAPH = ("detach", "item", "tolist", "cpu", "numpy")


def _draws_steered_by_losses(anatomy: Anatomy) -> tuple[cst.Call, str] | None:
    """`schedule_sampler.update_with_local_losses(t, mse.detach())` in the batch loop: a
    method of an object of the script's class, given what the model computed, that keeps it
    (writes `self.*`), where another method of the class draws at random (improved-
    diffusion's LossSecondMomentResampler; a prioritized replay buffer): the call, and the
    class."""
    models = {name for model in anatomy.models.all for name in model.names}
    for loop in anatomy.script.train_loops:
        outputs = set(models)
        grew = True
        while grew:  # names computed from a model's call, in the batch loop
            grew = False
            for node in walk(loop.batch_loop.body):
                if not isinstance(node, cst.Assign):
                    continue
                reads = {dotted(n) for n in walk(node.value) if isinstance(n, cst.Name)}
                if reads & outputs:
                    for target in node.targets:
                        for n in walk(target.target):
                            if isinstance(n, cst.Name) and n.value not in outputs:
                                outputs.add(n.value)
                                grew = True
        outputs -= models
        for call in walk(loop.batch_loop.body):
            if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)):
                continue
            if not any(
                isinstance(n, cst.Name) and n.value in outputs
                for arg in call.args
                for n in walk(arg.value)
            ) or not any(  # values kept out of the graph: statistics, not images to reuse
                is_method_call(n, *OUT_OF_THE_GRAPH) for arg in call.args for n in walk(arg.value)
            ):
                continue
            owner = _script_class_of(anatomy, call.func.value, anatomy.function_of(call))
            if owner is None:
                continue
            by_name = _class_methods(anatomy, owner)
            method = by_name.get(call.func.attr.value)
            if method is None or not _keeps(method, by_name):
                continue
            if any(draws_at_random(node) for m in by_name.values() for node in walk(m.body)):
                return call, owner.name.value
    return None


def _script_class_of(
    anatomy: Anatomy, value: cst.BaseExpression, scope: cst.FunctionDef | None
) -> cst.ClassDef | None:
    """The script's class the object `value` names was made from, if one."""
    name = dotted(value)
    if name is None:
        return None
    for made, _ in anatomy.values.values_of(name, scope):
        if isinstance(made, cst.Call) and (called := dotted(made.func)) in anatomy.classes:
            return anatomy.classes[called]
    return None


def _class_methods(anatomy: Anatomy, owner: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    """The methods of `owner` and of the script's classes it is built on."""
    found: dict[str, cst.FunctionDef] = {}
    todo = [owner]
    while todo:
        cls = todo.pop()
        for method in methods(cls):
            found.setdefault(method.name.value, method)
        todo += [
            anatomy.classes[base]
            for b in cls.bases
            if (base := dotted(b.value)) in anatomy.classes and anatomy.classes[base] is not cls
        ]
    return found


def _keeps(method: cst.FunctionDef, by_name: dict[str, cst.FunctionDef]) -> bool:
    """Whether `method`, or a method of its class it calls on `self`, writes `self.*`."""
    for reached in methods_reached(method, by_name):
        for node in walk(reached.body):
            for target in assigned(node):
                root: cst.BaseExpression = target
                while isinstance(root, cst.Subscript | cst.Attribute):
                    if isinstance(root, cst.Attribute) and is_name(root.value, "self"):
                        return True
                    root = root.value
    return False


def _carried_statistics(anatomy: Anatomy) -> list[tuple[cst.CSTNode, str, str]]:
    """A tensor the training loop carries from step to step, updated from a reduction over
    this process's batch (`center = center * 0.9 + teacher_output.mean(dim=0) * 0.1`,
    `center.mul_(m).add_(out.mean(0), alpha=1 - m)`) and read where the loss is computed
    (`loss = dino_loss(student_out, teacher_out, center)`): the single-process statistic
    is over the whole batch, each process's over its part. Per-sample state carried along
    (an RNN's hidden state) is not a reduction over the batch and is not one of them."""
    found: list[tuple[cst.CSTNode, str, str]] = []
    for loop, local in _local_in_loops(
        anatomy, tuple(loop.batch_loop for loop in anatomy.script.train_loops)
    ):
        for node in walk(loop.body):
            carried = _carried_update(node)
            if carried is None:
                continue
            name, value = carried
            if _reset_every_step(loop, name):
                continue  # `subloss = 0` then `subloss -= ...` in the step (round-24 A swav)
            reduced = next(
                (inner for inner in walk(value) if _reduces_the_batch(inner, local)), None
            )
            if reduced is None:
                continue
            if name in _feeding_the_backward(loop):
                found.append((node, name, source_text(reduced)))
    return found


def _reset_every_step(loop: cst.For | cst.While, name: str) -> bool:
    """The loop gives `name` a value of nothing it held before (`loss = 0`), every step: it
    adds up within the step, and is not carried from one step to the next."""
    return any(
        isinstance(node, cst.Assign)
        # (also unpacked: `log_p, logdet, _ = model(x)`, glow-pytorch's step loop)
        and any(
            is_name(target.target, name)
            or (
                isinstance(target.target, cst.Tuple | cst.List)
                and name in _assigned_names(target.target)
            )
            for target in node.targets
        )
        and not any(is_name(inner, name) for inner in walk(node.value))
        for node in walk(loop.body)
    )


def _feeding_the_backward(loop: cst.For | cst.While) -> set[str]:
    """The names the loop's backward pass is computed from: `loss` of `loss.backward()` (or
    `scaler.scale(loss).backward()`), then the names its assignments in the loop read."""
    fed = {
        inner.value
        for node in walk(loop.body)
        if is_method_call(node, "backward")
        and isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        for inner in walk(node.func.value)
        if isinstance(inner, cst.Name)
    }
    assigns = [node for node in walk(loop.body) if isinstance(node, cst.Assign | cst.AugAssign)]
    for _ in range(6):
        before = len(fed)
        for node in assigns:
            targets = node.targets if isinstance(node, cst.Assign) else [node]
            if any(_assigned_names(target.target) & fed for target in targets):
                fed |= {inner.value for inner in walk(node.value) if isinstance(inner, cst.Name)}
        if len(fed) == before:
            break
    return fed


def _carried_update(node: cst.CSTNode) -> tuple[str, cst.CSTNode] | None:
    """`(name, new value)` for `x = f(x, ...)`, `x += ...` and `x.mul_(m).add_(...)`."""
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        target = node.targets[0].target
        if isinstance(target, cst.Name) and any(
            is_name(inner, target.value) for inner in walk(node.value)
        ):
            return target.value, node.value
    if isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
        return node.target.value, node.value
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in IN_PLACE
    ):
        root: cst.BaseExpression = node.func.value
        while isinstance(root, cst.Call) and isinstance(root.func, cst.Attribute):
            root = root.func.value
        if isinstance(root, cst.Name):
            return root.value, node
    return None


def _reduces_the_batch(node: cst.CSTNode, local: set[str]) -> bool:
    """`out.mean(dim=0)`, `out.sum()`, `torch.mean(out, 0)` over a value of the batch: a
    reduction over every sample of the batch (no dimension, or dimension 0)."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return False
    if node.func.attr.value not in REDUCTIONS:
        return False
    if dotted(node.func.value) == "torch":
        if not node.args:
            return False
        of: cst.CSTNode = node.args[0].value
        dim = call_arg(node, 1, "dim")
    else:
        of = node.func.value
        dim = call_arg(node, 0, "dim")
    if not any(dotted(inner) in local for inner in walk(of)):
        return False
    if dim is None:
        return True
    value = dim.value
    if isinstance(value, cst.Tuple | cst.List):
        return any(
            isinstance(element.value, cst.Integer) and element.value.value == "0"
            for element in value.elements
        )
    return isinstance(value, cst.Integer) and value.value == "0"


def _evaluated_with_batchnorm(anatomy: Anatomy, test: cst.BaseExpression) -> str | None:
    """What `test` reads that an evaluation of the model computes (`val_loss =
    evaluate(model, val_loader)`, or `early_stopping.early_stop` of an object called with
    the model), or counts on one (a patience counter), in a script whose model has
    BatchNorm: read whole, the validation data gives each process another score, since each
    process's running statistics are updated by its own last batch; an early stop on it
    would leave one process alone in the loop."""
    if not any(anatomy.is_call_to(call, BATCH_NORMS) for call in anatomy.calls):
        return None
    found = _evaluated_with_batchnorm_directly(anatomy, test)
    if found is not None:
        return found
    return _counted_on_an_evaluation(anatomy, test, anatomy.function_of(test))


def _evaluated_with_batchnorm_directly(anatomy: Anatomy, test: cst.BaseExpression) -> str | None:
    """`_evaluated_with_batchnorm` of what `test` reads itself."""
    models = _models_and_copies(anatomy)
    scope = anatomy.function_of(test)

    def given_the_model(call: cst.Call) -> bool:
        return _runs_the_model(anatomy, call, models)

    for node in walk(test):
        if isinstance(node, cst.Name) and anatomy.is_attribute_name(node):
            continue
        name = dotted(node) if isinstance(node, cst.Name | cst.Attribute) else None
        if name is None:
            continue
        if isinstance(node, cst.Attribute):
            owner = dotted(node.value)
            if any(
                given_the_model(call)
                and (dotted(call.func) == owner or dotted(call.func) == f"{owner}.__call__")
                and anatomy.function_of(call) is scope
                for call in anatomy.calls
            ):
                return name
            continue
        for value, _ in anatomy.values.values_of(name, scope):
            if any(isinstance(inner, cst.Call) and given_the_model(inner) for inner in walk(value)):
                return name
    return None


def _runs_the_model(anatomy: Anatomy, call: cst.Call, models: set[str]) -> bool:
    """`evaluate(model, val_loader)`, or `model.evaluate(val_loader)`: a method of the
    model's class of the script (round-47 audit C moe_es: each rank cut its learning rate
    and kept its best weights apart)."""
    return any(
        # `evaluate(model.encoder, val_loader)`: a part of it, BatchNorm and all (round-50
        # audit B simsiam_helpers: one rank ran out of patience alone)
        (spelled := dotted(arg.value)) is not None
        and (spelled in models or any(spelled.startswith(f"{m}.") for m in models))
        for arg in call.args
    ) or (
        isinstance(call.func, cst.Attribute)
        and dotted(call.func.value) in models
        and anatomy.graph.instance_method(call) is not None
    )


def _models_and_copies(anatomy: Anatomy) -> set[str]:
    """The model's names, through `.module`, and the names of copies made of it (`self.ema
    = copy.deepcopy(self.model).eval()`, whose buffers a script then copies from the
    model's: each process's own BatchNorm statistics, round-42 audit C trainer_ema)."""
    models = set().union(*(model.names for model in anatomy.models.all))
    models |= {f"{name}.module" for name in models}
    for call in anatomy.calls:
        if not (
            anatomy.is_call_to(call, MODEL_COPIES)
            and call.args
            and dotted(call.args[0].value) in models
        ):
            continue
        holder: cst.CSTNode | None = anatomy.parent(call)
        while isinstance(holder, cst.Attribute | cst.Call):  # `.eval()`, `.to(device)`
            holder = anatomy.parent(holder)
        if isinstance(holder, cst.Assign) and len(holder.targets) == 1:
            copy = dotted(holder.targets[0].target)
            if copy is not None:
                models.add(copy)
    return models


def _counted_on_an_evaluation(
    anatomy: Anatomy, test: cst.BaseExpression, scope: cst.FunctionDef | None
) -> str | None:
    """A patience counter the test reads (`if bad_epochs >= patience: break`), set in a
    branch decided on such an evaluation (`if val_loss < best: ... else: bad_epochs += 1`):
    each process counts its own."""
    names = {node.value for node in walk(test) if isinstance(node, cst.Name)}
    body = scope.body if scope is not None else anatomy.module
    for node in walk(body):
        if isinstance(node, cst.AugAssign):
            targets = [node.target]
        elif isinstance(node, cst.Assign):
            targets = [target.target for target in node.targets]
        else:
            continue
        name = next((dotted(t) for t in targets if dotted(t) in names), None)
        if name is None or anatomy.function_of(node) is not scope:
            continue
        for branch in anatomy.ancestors(node):
            if (
                isinstance(branch, cst.If)
                and anatomy.function_of(branch) is scope
                and not any(inner is test for inner in walk(branch.test))
                and _evaluated_with_batchnorm_directly(anatomy, branch.test) is not None
            ):
                return name
    return None


# NumPy draws that make an array when given any argument (`np.random.rand(3)`), and those
# whose third positional argument is the array's size (`np.random.uniform(0, 1, 8)`).
ARRAY_WITH_ARGUMENTS = frozenset(
    {"rand", "randn", "random", "random_sample", "standard_normal", "permutation", "shuffle"}
)


def _drawn_settings(anatomy: Anatomy) -> list[tuple[cst.Call, cst.BaseStatement, str]]:
    """Single values drawn at random, unseeded, from NumPy's or Python's generator, before a
    run of training they are given to (a hyperparameter search's `config = {"lr": 10 **
    np.random.uniform(-4, -1), "hidden": random.choice([64, 128])}`, then
    `train(config)`): the draw, its statement and the name it is bound to."""
    training = {id(call) for call in anatomy.script.training_calls}
    loops = [loop.batch_loop or loop.epoch_loop for loop in anatomy.script.train_loops]
    found = []
    for call in anatomy.calls:
        family = anatomy.streams.drawn_from(call)
        if family not in {"numpy", "random"} or not _one_value(call):
            continue
        statement = anatomy.statement_of(call)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if not (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
        ):
            continue
        name = small.targets[0].target.value
        is_drawn = functools.partial(operator.is_, call)
        if any(
            loop is not None
            and (anatomy.inside(call, loop) or anatomy.graph.reaches(loop, is_drawn))
            for loop in loops
        ):
            continue  # drawn while training (noise, augmentation): each process its own
        body = list(anatomy.body_of(statement))
        later = body[body.index(statement) + 1 :]
        # read later (perhaps to build what trains, `model = Net(config)`), then a run of
        # training: a loop of steps, not the one step a draw of batch indices feeds
        read = [i for i, line in enumerate(later) if any(is_name(n, name) for n in walk(line))]
        given = bool(read) and any(
            anatomy.graph.reaches(
                line,
                lambda n: (
                    isinstance(n, cst.For | cst.While)
                    and anatomy.graph.reaches(n.body, lambda m: id(m) in training)
                ),
            )
            for line in later[read[0] :]
        )
        if given and not family_seeded(anatomy, family, call):
            found.append((call, statement, name))
    return found


def _one_value(call: cst.Call) -> bool:
    """A draw of one value (`random.choice(xs)`, `np.random.uniform(-4, -1)`), not of an
    array (`size=`, `np.random.rand(3)`)."""
    if any(arg.keyword is not None and arg.keyword.value in {"size", "k"} for arg in call.args):
        return False
    last = (dotted(call.func) or "").rsplit(".", 1)[-1]
    positional = [arg for arg in call.args if arg.keyword is None]
    if last in ARRAY_WITH_ARGUMENTS:
        return not positional
    if last == "sample":  # `random.sample(population, k)`: k of them
        return False
    if last == "choice":  # `np.random.choice(a, size)`; Python's takes one argument
        return len(positional) <= 1
    return len(positional) <= 2


def _share_drawn_settings(ctx: ConvertContext) -> None:
    """Every process takes rank 0's draws of `_drawn_settings` (round-39 audit B
    hyperparameter_tuning_tutorial_without_ray: each process drew its own trial, built a
    model of another shape and crashed at the wrap; a learning rate alone would have
    trained each replica its own way)."""
    anatomy = ctx.anatomy
    for call, statement, name in _drawn_settings(anatomy):
        if not anatomy.script.after_setup(statement):
            ctx.cannot(
                call,
                f"`{name}` is drawn at random (`{dotted(call.func)}`), unseeded, before the "
                "process group exists, and training is given it: every process would draw "
                "its own; seed the generator alike in every process first, or take rank "
                "0's by hand",
                blocking=True,
            )
            continue
        ctx.add_import("torch.distributed", asname="dist")
        if take_rank_zeros(ctx.plan, statement, name):
            ctx.changed(
                call,
                f"`{name}` is drawn at random (`{dotted(call.func)}`), unseeded, and training "
                "is given it: every process takes rank 0's, so all of them train the same "
                "settings",
            )
