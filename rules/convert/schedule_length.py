"""DDP009: a learning-rate schedule sized from the dataset follows the sharded loader."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import SAMPLER_ARGUMENTS
from ddpify.analysis.foreign import returned_loader
from ddpify.analysis.loaders import Loader
from ddpify.analysis.project import Helper
from ddpify.analysis.tree import (
    call_arg,
    dotted,
    is_method_call,
    is_name,
    methods,
    source_text,
    walk,
)
from ddpify.analysis.values import MAX_STEPS, constant_index
from ddpify.emit import WORLD_SIZE
from ddpify.fixes import batched_sampler_call, own_sampler, subset_sampler
from ddpify.options import BatchMode
from ddpify.rule import ConvertContext, ConvertRule, Example

SCHEDULERS = "torch.optim.lr_scheduler"


# A helper makes the scheduler from its parameters (round-21 audit B seed_everything): what
# its call is given is followed.
HELPER_MADE = Example(
    """
    import torch
    from torch.utils.data import DataLoader


    def cosine_with_warmup(optimizer, warmup, total):
        def f(step):
            return min(1.0, step / warmup) * max(0.0, 1 - step / total)

        return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


    def main():
        loader = DataLoader(train_ds, batch_size=bs, shuffle=True)
        total_steps = len(train_ds) // bs * epochs
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = cosine_with_warmup(optimizer, warmup=10, total=total_steps)
        for epoch in range(epochs):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
                scheduler.step()


    main()
    """,
    """
    import torch
    from torch.utils.data import DataLoader


    def cosine_with_warmup(optimizer, warmup, total):
        def f(step):
            return min(1.0, step / warmup) * max(0.0, 1 - step / total)

        return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


    def main():
        loader = DataLoader(train_ds, batch_size=bs, shuffle=True)
        total_steps = len(loader.sampler) // bs * epochs
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = cosine_with_warmup(optimizer, warmup=10, total=total_steps)
        for epoch in range(epochs):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
                scheduler.step()


    main()
    """,
)


# Sized from the fold's indices that the dataset holds as many samples as (round-22 audit B
# kaggle_tta_c): its `__len__` is its images'.
FOLD_INDICES = Example(
    """
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Images(Dataset):
        def __init__(self, images, labels):
            self.images, self.labels = images, labels

        def __len__(self):
            return len(self.images)

        def __getitem__(self, i):
            return self.images[i], self.labels[i]


    def train_fold(trn_idx, images, labels):
        loader = DataLoader(Images(images[trn_idx], labels[trn_idx]), batch_size=32, shuffle=True)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        total = len(trn_idx) // 32 * epochs
        sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=total)
        for epoch in range(epochs):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
                sched.step()


    train_fold(trn_idx, images, labels)
    """,
    """
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Images(Dataset):
        def __init__(self, images, labels):
            self.images, self.labels = images, labels

        def __len__(self):
            return len(self.images)

        def __getitem__(self, i):
            return self.images[i], self.labels[i]


    def train_fold(trn_idx, images, labels):
        loader = DataLoader(Images(images[trn_idx], labels[trn_idx]), batch_size=32, shuffle=True)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        total = len(loader.sampler) // 32 * epochs
        sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=total)
        for epoch in range(epochs):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
                sched.step()


    train_fold(trn_idx, images, labels)
    """,
)


# Kept on a config object and read by the helper that makes the scheduler (round-47
# audit B cfg_sched: the cosine ended at half its peak).
CONFIG_HELD = Example(
    """
    import torch
    from torch.utils.data import DataLoader


    def build_scheduler(optimizer, cfg):
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.total_steps)


    def main():
        cfg = Config()
        loader = DataLoader(train_ds, batch_size=cfg.batch_size, shuffle=True)
        cfg.total_steps = cfg.epochs * (len(train_ds) // cfg.batch_size)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = build_scheduler(optimizer, cfg)
        for epoch in range(cfg.epochs):
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
                sched.step()


    main()
    """,
    """
    import torch
    from torch.utils.data import DataLoader


    def build_scheduler(optimizer, cfg):
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.total_steps)


    def main():
        cfg = Config()
        loader = DataLoader(train_ds, batch_size=cfg.batch_size, shuffle=True)
        cfg.total_steps = cfg.epochs * (len(loader.sampler) // cfg.batch_size)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = build_scheduler(optimizer, cfg)
        for epoch in range(cfg.epochs):
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
                sched.step()


    main()
    """,
)


# A count returned with the loader by a function of the script: counted where it is
# returned (a variant of round-47 audit B helper_count).
RETURNED_COUNT = Example(
    """
    import math

    import torch
    from torch.utils.data import DataLoader


    def get_loaders(bs):
        train_loader = DataLoader(train_ds, batch_size=bs, shuffle=True)
        return train_loader, len(train_ds)


    loader, n_train = get_loaders(bs)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs * math.ceil(n_train / bs))
    for epoch in range(epochs):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
            sched.step()
    """,
    """
    import math

    import torch
    from torch.utils.data import DataLoader


    def get_loaders(bs):
        train_loader = DataLoader(train_ds, batch_size=bs, shuffle=True)
        return train_loader, len(train_loader.sampler)


    loader, n_train = get_loaders(bs)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs * math.ceil(n_train / bs))
    for epoch in range(epochs):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
            sched.step()
    """,
)


class ScheduleLength(ConvertRule):
    """
    ## What it does
    Finds learning-rate schedulers sized from the training data's length, such as
    `OneCycleLR(optimizer, max_lr, total_steps=epochs * len(train_ds) // bs)`, and sizes
    them from what each process now reads: `len(train_ds)` of the training loader's
    dataset (or `len(loader.dataset)`) becomes `len(loader.sampler)`, the number of samples
    the loader's `DistributedSampler` gives this process. A schedule sized from
    `len(loader)` already counts this process's batches and stays as it is. A length
    computed into a variable first (`total_steps = epochs * len(train_ds) // bs`), read by
    the scheduler or its `lr_lambda`, counts `len(loader.sampler)` when the loader is made
    before it, `math.ceil(len(train_ds) / world_size)` (the sampler's share) when it is
    made after; a helper counting it from the dataset it is given is given the sampler.
    Counted from what the training data is built from (`len(df_train)` for `train_dataset =
    ReviewDataset(reviews[df_train])`), it is refused unless that is the dataset's length:
    the indices of a `Subset(ds, idx)` or a `SubsetRandomSampler(idx)`, or of the rows
    given a `TensorDataset` or a dataset class whose `__len__` is `len(self.items)`. Hugging
    Face's `get_..._schedule...` helpers count as schedulers, and so does a learning rate
    written into the param groups by hand (`group["lr"] = get_lr(it)`), and the count of a
    `range` the training runs in (BasicSR's `total_epochs = ceil(total_iters /
    num_iter_per_epoch)`). With `--batch global` each process takes the script's steps,
    and schedules are left as they are.

    ## Why is this bad?
    Each process now takes 1/N of the single-GPU steps per epoch, while a schedule sized
    from the whole dataset still expects all of them: one-cycle and cosine schedules stop
    at a fraction of their course, at a learning rate that was never meant to be final.
    """

    code = "DDP009"
    step = 9
    name = "schedule-length"
    message = "learning-rate schedules sized from the dataset count this process's samples"
    fix_safety = "Safe: the schedule then spans the steps each process really takes."
    examples = (
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=bs, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=epochs * len(train_ds) // bs)
            for epoch in range(epochs):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    sched.step()
            """,  # noqa: E501
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=bs, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=epochs * len(loader.sampler) // bs)
            for epoch in range(epochs):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    sched.step()
            """,  # noqa: E501
        ),
        # Computed through names (Hugging Face's no_trainer scripts, with their own copy of
        # `get_cosine_schedule_with_warmup`): the length is counted where it is computed.
        Example(
            """
            import math

            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=bs, shuffle=True)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            steps_per_epoch = math.ceil(len(train_ds) / bs)
            max_steps = epochs * steps_per_epoch
            sched = get_cosine_schedule_with_warmup(optimizer, max_steps // 10, max_steps)
            for epoch in range(epochs):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    sched.step()
            """,
            """
            import math

            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=bs, shuffle=True)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            steps_per_epoch = math.ceil(len(loader.sampler) / bs)
            max_steps = epochs * steps_per_epoch
            sched = get_cosine_schedule_with_warmup(optimizer, max_steps // 10, max_steps)
            for epoch in range(epochs):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    sched.step()
            """,
        ),
        # A learning rate set by hand in the loop (nanoGPT's `get_lr`): the names its
        # function reads are followed the same way.
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=bs, shuffle=True)
            max_iters = epochs * (len(train_ds) // bs)


            def get_lr(it):
                return 0.1 * (1 - it / max_iters)


            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            it = 0
            for epoch in range(epochs):
                for x, y in loader:
                    for group in optimizer.param_groups:
                        group["lr"] = get_lr(it)
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    it += 1
            """,
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=bs, shuffle=True)
            max_iters = epochs * (len(loader.sampler) // bs)


            def get_lr(it):
                return 0.1 * (1 - it / max_iters)


            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            it = 0
            for epoch in range(epochs):
                for x, y in loader:
                    for group in optimizer.param_groups:
                        group["lr"] = get_lr(it)
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    it += 1
            """,
        ),
        HELPER_MADE,
        FOLD_INDICES,
        CONFIG_HELD,
        RETURNED_COUNT,
        # Sized from the loader: it already counts this process's batches.
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=bs, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=epochs * len(loader))
            for epoch in range(epochs):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    sched.step()
            """  # noqa: E501
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        if _kept_whole(ctx):
            return
        _sized_from_split_samples(ctx)
        loaders = [loader for loader in anatomy.script.train_loaders if loader.name]
        if not loaders:
            return
        for call in anatomy.calls:
            if not (_schedules(anatomy, call) or _stepped_to(anatomy, call)):
                continue
            seen: set[str] = set()  # the names followed, once per scheduler
            for arg in call.args:
                for length in _lengths(arg.value):
                    loader = _loader_of(length, loaders)
                    if loader is not None:
                        _resize(ctx, call, length, loader)
                    elif _source_of(anatomy, length, loaders) is not None:
                        _refuse_source(ctx, length)
                names = {dotted(n) for n in walk(arg.value) if isinstance(n, cst.Name)}
                names |= _attributes_read(anatomy, arg.value)
                names |= _read_by_function(anatomy, arg.value, anatomy.function_of(call))
                for name in sorted(n for n in names if n):
                    self._refuse_computed(ctx, call, name, loaders, seen)
                # a helper that makes the scheduler from its parameters (`def
                # cosine_with_warmup(optimizer, warmup, total): ... LambdaLR(optimizer, f)`,
                # round-21 audit B seed_everything)
                self._given(ctx, anatomy.function_of(call), names, loaders)
        for call in anatomy.calls:
            # `WarmupCosine(optimizer, steps_per_epoch=..., epochs=...)` from scheduler.py,
            # which makes a LambdaLR of them (round-31 audit C: cut short, not refused)
            if anatomy.project.makes_scheduler(call):
                seen = set()
                for arg in call.args:
                    for length in _lengths(arg.value):
                        loader = _loader_of(length, loaders)
                        if loader is not None:
                            _resize(ctx, call, length, loader)
                    for node in walk(arg.value):
                        if isinstance(node, cst.Name) and not anatomy.is_attribute_name(node):
                            self._refuse_computed(ctx, call, node.value, loaders, seen)
        for epochs in _training_ranges(anatomy):
            # `for epoch in range(total_epochs + 1)` with `total_epochs = ceil(total_iters /
            # num_iter_per_epoch)` and that from `len(train_set) / batch_size` (BasicSR):
            # iterations counted as epochs of the whole dataset (round-34 audit A basicsr
            # ran 32 of its 40 iterations)
            assert isinstance(epochs.iter, cst.Call)
            seen = set()
            for arg in epochs.iter.args:
                for node in walk(arg.value):
                    if isinstance(node, cst.Name) and not anatomy.is_attribute_name(node):
                        what = (
                            "from which the training loop's `range` (line "
                            f"{anatomy.line(epochs)}) is computed"
                        )
                        self._refuse_computed(ctx, epochs, node.value, loaders, seen, what=what)
        for assign in _hand_schedules(anatomy):
            seen = set()
            read = _read_by_schedule(anatomy, assign)
            # `self.max_iters` kept by a Trainer (round-50 audit A seg_poly: half the decay)
            read |= {name for name in _attributes_read(anatomy, assign.value) if name}
            for name in sorted(read):
                self._refuse_computed(ctx, assign, name, loaders, seen)
            # a helper that writes it from its parameters (`adjust_learning_rate(optimizer,
            # base_lr, cur_iter, max_iter)`, DeepLab's poly schedule, round-20 audit B
            # seg_poly)
            self._given(ctx, anatomy.function_of(assign), read, loaders)

    def _given(
        self,
        ctx: ConvertContext,
        function: cst.FunctionDef | None,
        read: Collection[str | None],
        loaders: list[Loader],
    ) -> None:
        """What each call of `function` gives the parameters of it a schedule reads."""
        anatomy = ctx.anatomy
        if function is None:
            return
        given = anatomy.graph.parameters_of(function) & _computed_from(
            function, {name for name in read if name is not None}
        )
        # `cfg.total_steps` read of a parameter `cfg`: what the call gives `cfg` has it set
        # (`cfg.total_steps = cfg.epochs * (len(train_ds) // cfg.batch_size)`, round-47
        # audit B cfg_sched)
        held = [
            name.split(".", 1)
            for name in read
            if name is not None and name.split(".", 1)[0] in given and "." in name
        ]
        for site in anatomy.graph.call_sites(function):
            followed: set[str] = set()
            for parameter in sorted(given):
                argument = anatomy.graph.bound_argument(site, function, parameter)
                for node in walk(argument) if argument is not None else ():
                    if isinstance(node, cst.Name) and not anatomy.is_attribute_name(node):
                        self._refuse_computed(ctx, site, node.value, loaders, followed)
                owner = dotted(argument) if argument is not None else None
                for root, attribute in held:
                    if root == parameter and owner is not None:
                        self._refuse_computed(ctx, site, f"{owner}.{attribute}", loaders, followed)

    def _refuse_computed(
        self,
        ctx: ConvertContext,
        scheduler: cst.CSTNode,
        name: str | None,
        loaders: list[Loader],
        seen: set[str] | None = None,
        depth: int = 0,
        what: str = "a learning-rate schedule's length",
    ) -> None:
        """`total = epochs * len(train_ds)`, then `OneCycleLR(..., total_steps=total)`: with
        the loader made before `total`, in its function, `total` is computed from
        `len(loader.sampler)`; else refused. Followed through the names it is computed from
        (`steps_per_epoch = ceil(len(train_ds) / bs)`, `max_steps = epochs *
        steps_per_epoch`: Hugging Face's no_trainer scripts, round-8 audit a08)."""
        seen = set() if seen is None else seen
        if name is None or name in seen or depth > MAX_STEPS:
            return
        seen.add(name)
        anatomy = ctx.anatomy
        scope = anatomy.function_of(scheduler)
        for value, _ in anatomy.values.values_of(name, scope):
            foreign = _foreign_count(anatomy, value, loaders)
            if foreign is not None:
                assert isinstance(value, cst.Subscript)
                _refuse_foreign_count(ctx, value.value, name, foreign, what)
                continue
            for part, callee in _returned_parts(anatomy, value):
                # `train_loader, n_train = get_loaders(bs)` with `get_loaders` of this file
                # returning `len(train_ds)`: counted where it is returned
                for length in _lengths(part):
                    if not _given_dataset(ctx, length, callee, value, loaders, name, what):
                        self._count(ctx, length, callee, loaders, name, what)
            if not _arithmetic(value):
                continue  # `train_loader = DataLoader(..., sampler=sampler)`: not a count
            if _refused_as_sizing(ctx, value, loaders, f"`{name}`, {what},"):
                continue
            # lengths made this process's: not followed further
            counted = [
                length
                for length in _lengths(value)
                # where the count is made (`self.max_iters` set in `__init__`, read in
                # `train()`: round-50 audit A seg_poly)
                if self._count(ctx, length, anatomy.function_of(length), loaders, name, what)
            ]
            for inner in walk(value):
                # not what a length counted here reads (`len(train_idx)`, made
                # `len(train_loader.sampler)`: `train_idx = perm[:int(0.8 * n)]` and its
                # `n = len(ds)` size no schedule, round-46 audit A subset_steps)
                if (
                    isinstance(inner, cst.Name)
                    and not anatomy.is_attribute_name(inner)
                    and not any(anatomy.inside(inner, length) for length in counted)
                ):
                    if _count_foreign_read(ctx, inner, scope, loaders, name, what):
                        continue
                    self._refuse_computed(
                        ctx, scheduler, inner.value, loaders, seen, depth + 1, what
                    )
            for held in _attributes_read(anatomy, value):
                # `self.max_iters = epochs * self.iters_per_epoch` (round-50 audit A seg_poly)
                self._refuse_computed(ctx, scheduler, held, loaders, seen, depth + 1, what)

    def _count(
        self,
        ctx: ConvertContext,
        length: cst.Call,
        scope: cst.FunctionDef | None,
        loaders: list[Loader],
        name: str,
        what: str,
    ) -> bool:
        """`len(train_ds)` in what `name` is computed from (in `scope`): made
        `len(loader.sampler)` where the loader is made before it, else refused. Whether it
        now counts this process's samples."""
        anatomy = ctx.anatomy
        loader = _loader_of(length, loaders)
        if (
            loader is not None
            and anatomy.function_of(loader.call) is scope
            and anatomy.precedes(loader.call, length)
        ):
            sampler = f"{loader.name}.{loader.sampler_path}"
            ctx.plan.replace(length, _measuring(sampler))
            ctx.changed(length, f"`{name}`, {what}, counts this process's samples: len({sampler})")
            return True
        if loader is not None and _sharded_later(anatomy, loader, length, scope):
            _share(ctx, length, f"`{name}`, {what},")  # round-47 audit B sched_before_loader
            return True
        dealt = _count_dealt(ctx, length, scope, loaders, f"`{name}`, {what},")
        if dealt is not None:
            return dealt
        if (
            (source := _source_of(anatomy, length, loaders)) is not None
            and anatomy.function_of(source.call) is scope
            and anatomy.precedes(source.call, length)
            and _counts_the_dataset(anatomy, source, length)
        ):
            # `len(trn_idx)` of `ImgDataset(images[trn_idx], ...)`, whose `__len__` is its
            # images' (round-22 audit B kaggle_tta_c): the same count
            sampler = f"{source.name}.{source.sampler_path}"
            ctx.plan.replace(length, _replaced_with(f"len({sampler})"))
            ctx.changed(length, f"`{name}`, {what}, counts this process's samples: len({sampler})")
            return True
        if loader is not None or _source_of(anatomy, length, loaders):
            ctx.cannot(
                length,
                f"`{name}`, {what}, is computed from the dataset: each process now takes 1/N "
                "of those steps; compute it from len(train_loader) by hand",
                blocking=True,
            )
        return False


def _given_dataset(
    ctx: ConvertContext,
    length: cst.Call,
    callee: cst.FunctionDef,
    value: cst.BaseExpression,
    loaders: list[Loader],
    name: str,
    what: str,
) -> bool:
    """`n = total_steps(ds, epochs, bs)` with `def total_steps(dataset, epochs, bs):
    return epochs * math.ceil(len(dataset) / bs)` (round-49 audit A
    image_cls_earlystop: the schedule ran half its length): the helper is given the
    training loader's sampler, whose length is this process's share, when it reads the
    dataset only for its length and the loader is made before; else refused."""
    anatomy = ctx.anatomy
    call = value.value if isinstance(value, cst.Subscript) else value
    measured = length.args[0].value if len(length.args) == 1 else None
    if not (
        isinstance(call, cst.Call)
        and isinstance(measured, cst.Name)
        and measured.value in anatomy.graph.parameters_of(callee)
    ):
        return False
    given = anatomy.graph.bound_argument(call, callee, measured.value)
    loader = _loader_of(cst.Call(cst.Name("len"), [cst.Arg(given)]), loaders) if given else None
    if given is None or loader is None:
        return False
    reads = [
        node
        for node in walk(callee.body)
        if isinstance(node, cst.Name)
        and node.value == measured.value
        and not anatomy.is_attribute_name(node)
    ]
    only_measured = all(
        isinstance(parent := anatomy.parent(node), cst.Arg)
        and isinstance(holder := anatomy.parent(parent), cst.Call)
        and is_name(holder.func, "len")
        for node in reads
    )
    if (
        only_measured
        and anatomy.function_of(loader.call) is anatomy.function_of(call)
        and anatomy.precedes(loader.call, call)
    ):
        sampler = f"{loader.name}.{loader.sampler_path}"
        ctx.plan.replace(given, _replaced_with(sampler))
        ctx.changed(
            given,
            f"`{name}`, {what}, is counted by `{callee.name.value}` from the length of "
            f"what it is given: it is given `{sampler}`, this process's share",
        )
        return True
    ctx.cannot(
        given,
        f"`{name}`, {what}, is counted by `{callee.name.value}` from the training "
        "dataset's length: each process now takes 1/N of those steps; give it "
        "len(train_loader.sampler) by hand",
        blocking=True,
    )
    return True


def _share(ctx: ConvertContext, length: cst.Call, what: str) -> None:
    """`len(train_ds)` of a dataset sharded after it: the DistributedSampler it gets
    pads each process's share to ceil(len / world_size) samples."""
    ctx.add_import("math")
    share = f"math.ceil({source_text(length)} / {WORLD_SIZE})"
    ctx.plan.replace(length, _replaced_with(share))
    ctx.changed(length, f"{what} counts this process's samples: {share}")


def _resize(ctx: ConvertContext, scheduler: cst.Call, length: cst.Call, loader: Loader) -> None:
    """`len(train_ds)` read by the scheduler itself: `len(loader.sampler)` where the loader is
    made before it, the share the sampler will give where it is made after; else refused."""
    anatomy = ctx.anatomy
    visible = anatomy.function_of(loader.call) is anatomy.function_of(scheduler)
    if visible and _sharded_later(anatomy, loader, length, anatomy.function_of(scheduler)):
        _share(ctx, length, "the schedule's length")
        return
    if not visible or not anatomy.precedes(loader.call, scheduler):
        ctx.cannot(
            length,
            "learning-rate schedule sized from the dataset before its loader is made: "
            "size it from the loader's sampler by hand",
            blocking=True,
        )
        return
    sampler = f"{loader.name}.{loader.sampler_path}"
    ctx.plan.replace(length, _measuring(sampler))
    ctx.changed(length, f"schedule sized from this process's samples: len({sampler})")


def _kept_whole(ctx: ConvertContext) -> bool:
    """With `--batch global` each process takes batch_size // world_size samples a step: as
    many steps as the script, and a schedule counted from the whole dataset is right as it
    is (made `len(loader.sampler)`, it ended halfway). Said once."""
    if ctx.options.batch is not BatchMode.GLOBAL:
        return False
    anatomy = ctx.anatomy
    for loader in anatomy.script.train_loaders:
        batches = batched_sampler_call(anatomy, loader)
        size = call_arg(batches or loader.call, 1, "batch_size")
        if size is None or is_name(size.value, "None"):
            return False  # a batch size DDP007 cannot divide (a batch sampler of the script's)
    first = next((call for call in anatomy.calls if _schedules(anatomy, call)), None)
    if first is not None:
        ctx.info(
            first,
            "--batch global: each process takes as many steps as the script, so schedules "
            "keep the lengths the script gives them",
        )
    return True


def _returned_parts(
    anatomy: Anatomy, value: cst.BaseExpression
) -> list[tuple[cst.BaseExpression, cst.FunctionDef]]:
    """What the script's function called in `value` returns for it: the part at that
    position for `get_loaders(bs)[2]` (of `train_loader, val_loader, n = get_loaders(bs)`),
    each with the function."""
    position = constant_index(value)
    call = value.value if isinstance(value, cst.Subscript) else value
    if not isinstance(call, cst.Call):
        return []
    callee = anatomy.graph.callee(call)
    if callee is None:
        return []
    parts: list[tuple[cst.BaseExpression, cst.FunctionDef]] = []
    for returned in anatomy.graph.returned_values(callee):
        if position is None:
            parts.append((returned, callee))
        elif isinstance(returned, cst.Tuple | cst.List) and position < len(returned.elements):
            parts.append((returned.elements[position].value, callee))
    return parts


def _attributes_read(anatomy: Anatomy, expr: cst.BaseExpression) -> set[str | None]:
    """The attributes `expr` reads whole (`cfg.total_steps`), followed as names are."""
    return {
        dotted(node)
        for node in walk(expr)
        if isinstance(node, cst.Attribute)
        and not isinstance(anatomy.parent(node), cst.Attribute | cst.Call)
        and dotted(node) is not None
    }


def _foreign_count(
    anatomy: Anatomy, value: cst.BaseExpression, loaders: list[Loader]
) -> ForeignCount | None:
    """`train_loader, val_loader, n_train = get_loaders(bs)`: what `n_train` is given, when
    `get_loaders` (another file of the project) makes the training loader, made again here
    (`DataLoader(train_loader.dataset, ...)`), and returns a length with it (`len(train_ds)`:
    round-47 audit B helper_count)."""
    position = constant_index(value)
    if position is None:
        return None
    assert isinstance(value, cst.Subscript) and isinstance(value.value, cst.Call)
    site = value.value
    helper = anatomy.project.helper(site)
    assign = anatomy.parent(site)
    if helper is None or not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    if not isinstance(target, cst.Tuple | cst.List):
        return None
    bound = [dotted(element.value) for element in target.elements]
    returned = [
        node.value.elements[position].value
        for node in walk(helper.function.body)
        if isinstance(node, cst.Return)
        and helper.index.function_of(node) is helper.function
        and isinstance(node.value, cst.Tuple | cst.List)
        and position < len(node.value.elements)
    ]
    if not any(_lengths(part) for part in returned):
        return None
    for loader in loaders:
        dataset = call_arg(loader.call, 0, "dataset")
        if loader.name not in bound or dataset is None:
            continue
        if dotted(dataset.value) != f"{loader.name}.dataset":
            continue
        made = returned_loader(helper, bound.index(loader.name))
        given = call_arg(made, 0, "dataset") if made is not None else None
        whole = f"len({dotted(given.value)})" if given is not None else None
        exact = all(source_text(part) == whole for part in returned)
        return ForeignCount(loader, helper, exact)
    return None


@dataclass(frozen=True)
class ForeignCount:
    """A length a helper of another file returns with the training loader it makes."""

    loader: Loader  # the loader made again from the helper's
    helper: Helper
    exact: bool  # `len(<its dataset>)`, the number of samples the loader has

    @property
    def where(self) -> str:
        return f"`{self.helper.name}()` ({self.helper.path.name})"


def _count_foreign_read(
    ctx: ConvertContext,
    read: cst.Name,
    scope: cst.FunctionDef | None,
    loaders: list[Loader],
    name: str,
    what: str,
) -> bool:
    """`steps_per_epoch = ceil(n_train / bs)`, `n_train` the dataset's length `get_loaders()`
    returns with the training loader, made again here: `n_train` there becomes
    `len(train_loader.sampler)`, the samples this process takes. Whether `read` was such a
    count (made this process's, or refused)."""
    anatomy = ctx.anatomy
    values = anatomy.values.values_of(read.value, scope)
    counts = [_foreign_count(anatomy, value, loaders) for value, _ in values]
    found = [count for count in counts if count is not None]
    if not found:
        return False
    count = found[0]
    if (
        len(values) == 1
        and count.exact
        and anatomy.function_of(read) is anatomy.function_of(count.loader.call)
        and anatomy.precedes(count.loader.call, read)
    ):
        sampler = f"{count.loader.name}.{count.loader.sampler_path}"
        ctx.plan.replace(read, _replaced_with(f"len({sampler})"))
        ctx.changed(read, f"`{name}`, {what}, counts this process's samples: len({sampler})")
        return True
    _refuse_foreign_count(ctx, read, read.value, count, what)
    return True


def _refuse_foreign_count(
    ctx: ConvertContext, node: cst.CSTNode, name: str, count: ForeignCount, what: str
) -> None:
    ctx.cannot(
        node,
        f"`{name}`, {what}, is a length {count.where} returns with the training loader: "
        "each process now takes 1/N of those steps; compute it from len(train_loader) by "
        "hand",
        blocking=True,
    )


def _training_ranges(anatomy: Anatomy) -> list[cst.For]:
    """The `for ... in range(...)` loops a backward pass runs in, directly or through the
    functions and methods they call."""
    found: list[cst.For] = []
    for backward in anatomy.script.backward_calls:
        for loop, kind in anatomy.graph.loops_around(backward):
            if (
                kind == "loop"
                and isinstance(loop, cst.For)
                and isinstance(loop.iter, cst.Call)
                and is_name(loop.iter.func, "range")
                and loop not in found
            ):
                found.append(loop)
    return found


# Calls a count of steps is computed with.
COUNTING = {"len", "int", "round", "max", "min", "math.ceil", "math.floor", "ceil", "floor"}


def _arithmetic(value: cst.BaseExpression) -> bool:
    """Whether `value` computes a number from names and counts (`epochs * steps_per_epoch`,
    `math.ceil(len(ds) / bs)`), not an object (a loader, a sampler)."""
    return all(
        (dotted(node.func) or "") in COUNTING for node in walk(value) if isinstance(node, cst.Call)
    )


def _measuring(what: str) -> Callable[[cst.Call], cst.Call]:
    """`len(x)` becomes `len(<what>)`."""
    argument = cst.Arg(cst.parse_expression(what))
    return lambda updated: updated.with_changes(args=[argument])


def _read_by_function(
    anatomy: Anatomy, arg: cst.BaseExpression, scope: cst.FunctionDef | None
) -> set[str]:
    """The names of the enclosing function a schedule's function reads (`LambdaLR(optimizer,
    lr_lambda)` with `def lr_lambda(step):` reading `total_steps` and `warmup_steps`)."""
    if isinstance(arg, cst.Lambda):
        body: cst.CSTNode = arg.body
        own = {param.name.value for param in arg.params.params}
    elif isinstance(arg, cst.Name):
        defined = [
            node
            for node in walk(scope.body if scope is not None else anatomy.module)
            if isinstance(node, cst.FunctionDef)
            and node.name.value == arg.value
            and anatomy.function_of(node) is scope
        ]
        if len(defined) != 1:
            return set()
        body = defined[0].body
        own = {param.name.value for param in defined[0].params.params}
    else:
        return set()
    return {
        node.value
        for node in walk(body)
        if isinstance(node, cst.Name)
        and node.value not in own
        and not anatomy.is_attribute_name(node)
    }


def _hand_schedules(anatomy: Anatomy) -> list[cst.Assign]:
    """`param_group["lr"] = lr`: a learning rate set by hand (nanoGPT's `get_lr(iter_num)`
    written into every param group); or `lr = lr0 * (1 - step / total_steps)` that a manual
    SGD step reads (`p.data.add_(p.grad, alpha=-lr)`, round-49 audit C lm_linear_decay)."""
    stepped = _manual_step_rates(anatomy)
    return [
        node
        for node in anatomy.assigns
        if any(
            isinstance(target.target, cst.Subscript)
            and len(target.target.slice) == 1
            and isinstance(target.target.slice[0].slice, cst.Index)
            and isinstance(target.target.slice[0].slice.value, cst.SimpleString)
            and target.target.slice[0].slice.value.evaluated_value == "lr"
            for target in node.targets
        )
        or (
            len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name)
            and (node.targets[0].target.value, anatomy.function_of(node)) in stepped
            and not isinstance(node.value, cst.Integer | cst.Float)
        )
    ]


def _manual_step_rates(anatomy: Anatomy) -> set[tuple[str, cst.FunctionDef | None]]:
    """The names (with their functions) a parameter update by hand scales the gradient by:
    `p.data.add_(p.grad, alpha=-lr)`, `p.data.sub_(lr * p.grad)`, `p -= lr * p.grad`."""
    scaled: list[cst.BaseExpression] = []
    for call in anatomy.calls:
        if not is_method_call(call, "add_", "sub_"):
            continue
        alpha = call_arg(call, None, "alpha")
        if alpha is not None:
            scaled.append(alpha.value)
        elif is_method_call(call, "sub_") and call.args:
            scaled.append(call.args[0].value)
    lines = [
        line for line in anatomy.simple_statements if isinstance(line, cst.SimpleStatementLine)
    ]
    for node in (small for line in lines for small in line.body):
        if not isinstance(node, cst.AugAssign):
            continue
        if isinstance(node.operator, cst.SubtractAssign) and any(
            isinstance(part, cst.Attribute) and part.attr.value == "grad"
            for part in walk(node.value)
        ):
            scaled.append(node.value)
    return {
        (name.value, anatomy.function_of(name))
        for value in scaled
        for name in walk(value)
        if isinstance(name, cst.Name) and not anatomy.is_attribute_name(name)
    }


def _read_by_schedule(anatomy: Anatomy, assign: cst.Assign) -> set[str]:
    """The names a learning rate set by hand is computed from: read in its value, in the
    values of those names, and in the script's functions they call (`lr = get_lr(it)`, with
    `get_lr` reading `lr_decay_iters = max_iters = epochs * (len(train_data) // bs)`)."""
    scope = anatomy.function_of(assign)
    expressions: list[cst.BaseExpression] = [assign.value]
    for node in walk(assign.value):
        if isinstance(node, cst.Name) and not anatomy.is_attribute_name(node):
            expressions += [value for value, _ in anatomy.values.values_of(node.value, scope)]
    names: set[str] = set()
    for expression in expressions:
        for node in walk(expression):
            if isinstance(node, cst.Name) and not anatomy.is_attribute_name(node):
                names.add(node.value)
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
                for function in anatomy.graph.callees(node):
                    names |= _read_by_function(anatomy, node.func, anatomy.function_of(function))
    return names


def _computed_from(function: cst.FunctionDef, names: set[str]) -> set[str]:
    """`names` and the names their values in `function` are computed from, transitively
    (`warmup_steps = int(warmup_epochs * steps_per_epoch)` read by an `lr_lambda`)."""
    found = set(names)
    grew = True
    while grew:
        grew = False
        for node in walk(function.body):
            if isinstance(node, cst.Assign) and any(
                dotted(target.target) in found for target in node.targets
            ):
                for inner in walk(node.value):
                    if isinstance(inner, cst.Name) and inner.value not in found:
                        found.add(inner.value)
                        grew = True
    return found


def _sized_from_split_samples(ctx: ConvertContext) -> None:
    """A schedule sized from the samples a loop slices by its counter, which DDP004 splits
    between the processes (`OneCycleLR(..., steps_per_epoch=(N + bs - 1) // bs)` with `N =
    X_train.shape[0]`, or `total_steps` from `ids.size(1)`): each process takes 1/world_size
    of those steps, so the schedule would stop part way (round-41 audit A manual_perm and
    char_rnn: the last learning rate was 80% of the maximum). Refused, naming the value."""
    anatomy = ctx.anatomy
    batch = anatomy.whole.batch
    if (
        batch is None
        or batch.problem is not None
        or not batch.ordered
        or not batch.samples
        or anatomy.streams.without_loader != "ordered"
    ):
        return
    split = {samples.name for samples in batch.samples} | set(batch.length_names)
    sized: list[tuple[cst.CSTNode, list[str]]] = [
        (call, [n.value for arg in call.args for n in walk(arg.value) if isinstance(n, cst.Name)])
        for call in anatomy.calls
        if _schedules(anatomy, call)
    ]
    # a learning rate set by hand (`lr = lr0 * (1 - step / total_steps)` of a manual SGD
    # step, round-49 audit C lm_linear_decay: the decay stopped halfway)
    sized += [
        (assign, sorted(_read_by_schedule(anatomy, assign))) for assign in _hand_schedules(anatomy)
    ]
    for call, names in sized:
        scope = anatomy.function_of(call)
        seen: set[str] = set()
        while names:
            name = names.pop()
            if name in seen or len(seen) > 50:
                continue
            seen.add(name)
            if name in split:
                ctx.cannot(
                    call,
                    f"the learning-rate schedule is sized from `{name}`, the samples the "
                    "training loop slices by its counter, which each process now takes a "
                    "part of (DDP004): it would take 1/world_size of the steps and stop part "
                    "way; size it from this process's part by hand",
                    blocking=True,
                )
                break
            for value, _ in anatomy.values.values_of(name, scope):
                # `(ids.size(1) - 1) // seq_length` too: a size of the split samples
                if _arithmetic(value) or isinstance(
                    value, cst.Call | cst.Subscript | cst.BinaryOperation
                ):
                    names += [
                        n.value
                        for n in walk(value)
                        if isinstance(n, cst.Name) and not anatomy.is_attribute_name(n)
                    ]


def _stepped_to(anatomy: Anatomy, call: cst.Call) -> bool:
    """`scheduler.step(epoch + i / iters)`: a torch scheduler told where it is, a fraction
    of an epoch counted in steps (CosineAnnealingWarmRestarts, round-45 audit B
    cosine_wr variant_dsiters: `iters = len(train_ds) // bs` ended each epoch at 0.47)."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "step" and call.args):
        return False
    holder = dotted(call.func.value)
    scope = anatomy.function_of(call)
    made = anatomy.values.values_of(holder, scope) if holder is not None else []
    return any(
        isinstance(value, cst.Call)
        and _schedules(anatomy, value)
        and not anatomy.is_call_to(value, {f"{SCHEDULERS}.ReduceLROnPlateau"})
        for value, _ in made
    )


def _schedules(anatomy: Anatomy, call: cst.Call) -> bool:
    """A learning-rate scheduler: torch's, or a `get_..._schedule...(...)` helper (Hugging
    Face's `get_linear_schedule_with_warmup`, and the scripts that copy it)."""
    if anatomy.is_call_to(call, (SCHEDULERS,)):
        return True
    last = (dotted(call.func) or "").rsplit(".", 1)[-1]
    return last.startswith("get_") and "schedule" in last


def _refuse_source(ctx: ConvertContext, length: cst.Call) -> None:
    ctx.cannot(
        length,
        f"a learning-rate schedule's length is computed from `{dotted(length.args[0].value)}`, "
        "which the training data is built from: each process now takes 1/N of those "
        "steps; compute it from len(train_loader) by hand",
        blocking=True,
    )


def _source_of(anatomy: Anatomy, length: cst.Call, loaders: list[Loader]) -> Loader | None:
    """The training loader whose dataset is built from what `len(...)` measures
    (`train_dataset = ReviewDataset(reviews[df_train], ...)` with `len(df_train)`)."""
    measured = dotted(length.args[0].value)
    if measured is None or any(loader.name == measured for loader in loaders):
        return None  # `len(train_loader)`: its batches, already this process's
    for loader in loaders:
        if _subset_indices(anatomy, loader) == measured:
            return loader
        dataset = call_arg(loader.call, 0, "dataset")
        if dataset is None:
            continue
        scope = anatomy.function_of(loader.call)
        sources = [dataset.value] + [
            value
            for node in walk(dataset.value)
            if isinstance(node, cst.Name)
            for value, _ in anatomy.values.values_of(node.value, scope)
        ]
        if any(dotted(node) == measured for source in sources for node in walk(source)):
            return loader
    return None


def _replaced_with(code: str) -> Callable[[cst.CSTNode], cst.BaseExpression]:
    new = cst.parse_expression(code)
    return lambda _: new


def _sizes_the_dataset(
    anatomy: Anatomy, value: cst.BaseExpression, loaders: list[Loader]
) -> str | None:
    """A name, attribute or subscript of `value` (a count) that also gives the number of
    samples of a training loader's dataset where it is made (`TensorDataset(torch.randn(
    cfg["n_train"], 4), ...)`, or the tensors it is given, made so one step before)."""
    read = {
        source_text(node)
        for node in walk(value)
        if isinstance(node, cst.Name | cst.Attribute | cst.Subscript)
        and not (isinstance(node, cst.Name) and anatomy.is_attribute_name(node))
        and not isinstance(anatomy.parent(node), cst.Attribute | cst.Subscript)
    }
    for loader in loaders:
        dataset = call_arg(loader.call, 0, "dataset")
        if dataset is None:
            continue
        scope = anatomy.function_of(loader.call)
        made = list(anatomy.values.origins(dataset.value, scope)) or [dataset.value]
        made += [
            origin
            for expr in list(made)
            for node in walk(expr)
            if isinstance(node, cst.Name)
            for origin in anatomy.values.origins(node, scope)
        ]
        for expr in made:
            for node in walk(expr):
                if not (isinstance(node, cst.Call) and node.args):
                    continue
                if (dotted(node.func) or "").rsplit(".", 1)[-1] in SIZED_MAKERS:
                    first = source_text(node.args[0].value)
                    if first in read:
                        return first
                # `RegressionSet(cfg.n_train, 0)`, whose `__init__` makes `randn(n, 10)`
                owner = anatomy.classes.get(dotted(node.func) or "")
                init = (
                    next((m for m in methods(owner) if m.name.value == "__init__"), None)
                    if owner is not None
                    else None
                )
                if init is None:
                    continue
                for parameter in sorted(anatomy.graph.parameters_of(init)):
                    given = anatomy.graph.bound_argument(node, init, parameter)
                    if given is None or source_text(given) not in read:
                        continue
                    if any(
                        isinstance(inner, cst.Call)
                        and inner.args
                        and (dotted(inner.func) or "").rsplit(".", 1)[-1] in SIZED_MAKERS
                        and is_name(inner.args[0].value, parameter)
                        for inner in walk(init.body)
                    ):
                        return source_text(given)
    return None


# Tensor makers whose first argument is the number of rows (samples).
SIZED_MAKERS = {
    "randn", "rand", "randint", "zeros", "ones", "empty", "full", "arange", "normal",
    "uniform", "standard_normal", "random", "randperm",
}  # fmt: skip


def _count_dealt(
    ctx: ConvertContext,
    length: cst.Call,
    scope: cst.FunctionDef | None,
    loaders: list[Loader],
    what: str,
) -> bool | None:
    """`total = 2 * len(sampler)` of a bucketing batch sampler the loader gets through
    `ShardByRank(sampler)` (round-50 audit D tf_bucket_linear: half the decay): counted as
    `len(loader.batch_sampler)`, this process's, where the loader is made before it; else
    refused. None when `length` measures no such sampler."""
    anatomy = ctx.anatomy
    dealt = _dealt_sampler(anatomy, length, loaders)
    if dealt is None:
        return None
    held, keyword = dealt
    if anatomy.function_of(held.call) is scope and anatomy.precedes(held.call, length):
        ctx.plan.replace(length, _replaced_with(f"len({held.name}.{keyword})"))
        ctx.changed(length, f"{what} counts this process's batches: len({held.name}.{keyword})")
        return True
    ctx.cannot(
        length,
        f"{what} counts the batches of the loader's own sampler, which each process now "
        "takes its share of: compute it from len(train_loader) by hand",
        blocking=True,
    )
    return False


def _refused_as_sizing(
    ctx: ConvertContext, value: cst.BaseExpression, loaders: list[Loader], what: str
) -> bool:
    """`total_steps = cfg["epochs"] * (cfg["n_train"] // bs)` with the training data made
    of `cfg["n_train"]` samples (round-50 audit E c04: half the decay): refused, naming it."""
    sizing = _sizes_the_dataset(ctx.anatomy, value, loaders)
    if sizing is None:
        return False
    ctx.cannot(
        value,
        f"{what} is computed from `{sizing}`, which also sizes the training data: each "
        "process now takes 1/N of those samples; compute it from len(train_loader) by hand",
        blocking=True,
    )
    return True


def _dealt_sampler(
    anatomy: Anatomy, length: cst.Call, loaders: list[Loader]
) -> tuple[Loader, str] | None:
    """The training loader whose own `sampler=`/`batch_sampler=` (dealt out by `ShardByRank`)
    `len(...)` measures, with the keyword it is given under."""
    measured = dotted(length.args[0].value) if len(length.args) == 1 else None
    for loader in loaders:
        held = own_sampler(anatomy, loader) if measured is not None else None
        if held is not None and dotted(held.given.value) == measured:
            return loader, held.keyword
    return None


def _subset_indices(anatomy: Anatomy, loader: Loader) -> str | None:
    """`tr_idx` of the loader's `sampler=SubsetRandomSampler(tr_idx)` that becomes a
    DistributedSampler of `Subset(dataset, tr_idx)` (round-49 audit B kfold_linear_sched:
    `num_train_steps = int(len(tr_idx) / bs * epochs)` was left whole)."""
    made = subset_sampler(anatomy, loader)
    return dotted(made.args[0].value) if made is not None else None


def _counts_the_dataset(anatomy: Anatomy, loader: Loader, length: cst.Call) -> bool:
    """Whether `len(idx)` is the length of the loader's dataset: `Subset(ds, idx)`,
    `TensorDataset(x[idx], ...)`, or a class of the script whose `__len__` is
    `len(self.items)` and that is given `items[idx]` for them."""
    measured = dotted(length.args[0].value)
    dataset = call_arg(loader.call, 0, "dataset")
    if measured is None or dataset is None:
        return False
    if _subset_indices(anatomy, loader) == measured:
        return True
    value = dataset.value
    if isinstance(value, cst.Name):
        values = anatomy.values.assignments(value.value, anatomy.function_of(loader.call))
        value = values[0] if len(values) == 1 else value
    if not isinstance(value, cst.Call):
        return False

    def indexed(arg: cst.BaseExpression | None) -> bool:
        return (
            isinstance(arg, cst.Subscript)
            and len(arg.slice) == 1
            and isinstance(arg.slice[0].slice, cst.Index)
            and dotted(arg.slice[0].slice.value) == measured
        )

    called = dotted(value.func) or ""
    if called.rsplit(".", 1)[-1] == "Subset":
        indices = call_arg(value, 1, "indices")
        return indices is not None and dotted(indices.value) == measured
    if called.rsplit(".", 1)[-1] == "TensorDataset":
        return bool(value.args) and indexed(value.args[0].value)
    owner = anatomy.classes.get(called)
    if owner is None:
        return False
    own = {method.name.value: method for method in methods(owner)}
    if "__len__" not in own or "__init__" not in own:
        return False
    body = own["__len__"].body.body
    returned = (
        body[0].body[0] if len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) else None
    )
    if not (
        isinstance(returned, cst.Return)
        and isinstance(returned.value, cst.Call)
        and is_name(returned.value.func, "len")
        and len(returned.value.args) == 1
    ):
        return False
    counted = dotted(returned.value.args[0].value)
    for node in walk(own["__init__"].body):
        if not isinstance(node, cst.Assign) or len(node.targets) != 1:
            continue
        target, given = node.targets[0].target, node.value
        pairs = (
            zip(target.elements, given.elements, strict=True)
            if isinstance(target, cst.Tuple)
            and isinstance(given, cst.Tuple)
            and len(target.elements) == len(given.elements)
            else [(target, given)]
        )
        for held_element, source_element in pairs:
            held = held_element.value if isinstance(held_element, cst.Element) else held_element
            source = (
                source_element.value if isinstance(source_element, cst.Element) else source_element
            )
            if dotted(held) == counted and isinstance(source, cst.Name):
                argument = anatomy.graph.bound_argument(value, own["__init__"], source.value)
                return indexed(argument)
    return False


def _lengths(expr: cst.BaseExpression) -> list[cst.Call]:
    """The `len(x)` calls in `expr`."""
    return [
        node
        for node in walk(expr)
        if isinstance(node, cst.Call) and is_name(node.func, "len") and len(node.args) == 1
    ]


def _sharded_later(
    anatomy: Anatomy, loader: Loader, length: cst.Call, scope: cst.FunctionDef | None
) -> bool:
    """`len(train_ds)` before `DataLoader(train_ds, ...)` of the same function, after the
    setup, with nothing between giving `train_ds` another value, the loader given no sampler
    of its own nor made per key: it gets `DistributedSampler(train_ds)`, whose share is
    ceil(len(train_ds) / world_size) samples."""
    dataset = call_arg(loader.call, 0, "dataset")
    measured = length.args[0].value if len(length.args) == 1 else None
    if not (
        dataset is not None
        and isinstance(dataset.value, cst.Name)
        and isinstance(measured, cst.Name)
        and measured.value == dataset.value.value
        and anatomy.function_of(loader.call) is scope
        and anatomy.precedes(length, loader.call)
        and anatomy.script.after_setup(anatomy.statement_of(length))
        and loader.key_var is None
        and id(loader) not in anatomy.switches
        and not any(anatomy.loaders.argument(loader.call, arg) for arg in SAMPLER_ARGUMENTS)
    ):
        return False
    name = measured.value
    return not any(
        anatomy.precedes(length, assign)
        and anatomy.precedes(assign, loader.call)
        and anatomy.function_of(assign) is scope
        for assign in anatomy.assigns
        if any(
            name in {n.value for n in walk(target.target) if isinstance(n, cst.Name)}
            for target in assign.targets
        )
    )


def _loader_of(length: cst.Call, loaders: list[Loader]) -> Loader | None:
    """The training loader whose data `len(...)` measures whole: its dataset by the name the
    loader is given it, or `<loader>.dataset`."""
    measured = dotted(length.args[0].value)
    for loader in loaders:
        dataset = call_arg(loader.call, 0, "dataset")
        names = {f"{loader.name}.dataset"}
        if dataset is not None and dotted(dataset.value):
            names.add(dotted(dataset.value) or "")
        if measured in names:
            return loader
    return None
