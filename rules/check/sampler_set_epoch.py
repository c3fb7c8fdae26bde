"""DDP101: a DistributedSampler whose set_epoch is not called at the start of every epoch."""

from __future__ import annotations

from functools import partial

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import ITER_WRAPPERS, SAMPLER, SAMPLER_ARGUMENTS
from ddpify.analysis.loaders import Loader, strip_iteration
from ddpify.analysis.script import TrainLoop
from ddpify.analysis.tree import dotted, is_method_call, is_name, walk
from ddpify.fixes import insert_set_epoch, set_epoch_problem
from ddpify.rule import CheckContext, CheckRule, Example


class SamplerSetEpoch(CheckRule):
    """
    ## What it does
    Finds a training loader with a `DistributedSampler` (as `sampler=`, inside a
    `batch_sampler=`, or in a `**kwargs` dict) whose `set_epoch(epoch)` is never called in
    the epoch loop, or is called only after the iterator the epoch draws its batches from
    was made (`batch_iter = iter(loader)`, then `set_epoch`, then `for x in batch_iter` or
    `next(batch_iter)`). The epoch loop is followed through the script's own functions and
    methods, resume loops and hooks such as `self.on_epoch_start(epoch)` included. A
    `set_epoch` on another loader's sampler (the validation one) does not count; one on a
    receiver that cannot be traced does.

    ## Why is this bad?
    The sampler seeds its shuffle with the epoch number. Without `set_epoch`, every epoch
    sees the same order on every rank; called after `iter(loader)`, it takes effect one
    epoch late (with worker processes, which draw the order when the iterator is made).
    Peeking at a batch with `next(iter(loader))` before `set_epoch` is harmless: the
    `for x in loader` loop makes a fresh iterator.
    """

    code = "DDP101"
    name = "sampler-set-epoch"
    message = "DistributedSampler without set_epoch(epoch) at the start of each epoch"
    selection = (
        "every epoch then shuffles in the order of epoch 0 on every process; nothing "
        "fails, the model silently trains on less varied data."
    )
    requires = ("DistributedSampler", "backward")
    fix_safety = (
        "Safe: the fix inserts `<loader>.sampler.set_epoch(epoch)` as the epoch's first statement."
    )
    valid = (
        # The generator tells the sampler of every new pass.
        """
        from torch.utils.data import DataLoader, DistributedSampler

        def batches(loader):
            epoch = 0
            while True:
                loader.sampler.set_epoch(epoch)
                for batch in loader:
                    yield batch
                epoch += 1

        loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
        data = batches(loader)
        for step in range(1000):
            x, y = next(data)
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        """,
        """
        from torch.utils.data import DataLoader, DistributedSampler

        loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
        for epoch in range(start, epochs):
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
        """,
        # The PyTorch tutorial's Trainer peeks at a batch for its log line: the loop below
        # makes a fresh iterator, after set_epoch.
        """
        from torch.utils.data import DataLoader, DistributedSampler

        loader = DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset))
        for epoch in range(epochs):
            batch_size = len(next(iter(loader))[0])
            loader.sampler.set_epoch(epoch)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
        """,
        """
        from torch.utils.data import DataLoader, DistributedSampler

        loader = DataLoader(dataset, sampler=DistributedSampler(dataset), num_workers=2)
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            batch_iter = iter(loader)
            for x, y in batch_iter:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
        """,
        # A hook of the epoch loop, called before the method that holds the batch loop.
        """
        from torch.utils.data import DataLoader, DistributedSampler

        class Trainer:
            def __init__(self, dataset):
                self.sampler = DistributedSampler(dataset)
                self.loader = DataLoader(dataset, sampler=self.sampler)

            def on_epoch_start(self, epoch):
                self.sampler.set_epoch(epoch)

            def run_epoch(self):
                for x, y in self.loader:
                    loss = self.model(x).sum()
                    loss.backward()
                    self.optimizer.step()

            def fit(self, epochs):
                for epoch in range(epochs):
                    self.on_epoch_start(epoch)
                    self.run_epoch()
        """,
        # pytorch/examples' mnist: the sampler given in a kwargs dict.
        """
        from torch.utils.data import DataLoader, DistributedSampler

        sampler = DistributedSampler(dataset)
        train_kwargs = {"batch_size": 64, "sampler": sampler}
        train_kwargs.update({"num_workers": 1, "pin_memory": True})
        loader = DataLoader(dataset, **train_kwargs)
        for epoch in range(1, epochs + 1):
            sampler.set_epoch(epoch)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
        """,
        # A receiver that cannot be traced may be the training sampler: not reported.
        """
        from torch.utils.data import DataLoader, DistributedSampler

        loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
        for epoch in range(epochs):
            samplers[0].set_epoch(epoch)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
        """,
    )
    invalid = (
        # torchtitan-style: a generator loops over the loader forever, no pass reshuffles.
        Example(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            def batches(loader):
                while True:
                    for batch in loader:
                        yield batch

            loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
            data = batches(loader)
            for step in range(1000):
                x, y = next(data)
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            """
        ),
        Example(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
            for epoch in range(epochs):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
            """
            from torch.utils.data import DataLoader, DistributedSampler

            loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
            for epoch in range(epochs):
                loader.sampler.set_epoch(epoch)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
        ),
        # The iterator the epoch draws from was made before set_epoch.
        Example(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, sampler=sampler, num_workers=2)
            for epoch in range(epochs):
                batch_iter = iter(loader)
                sampler.set_epoch(epoch)
                for x, y in batch_iter:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """
        ),
        Example(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            sampler = DistributedSampler(dataset)
            loader = DataLoader(dataset, sampler=sampler, num_workers=2)
            for epoch in range(epochs):
                data_iter = iter(loader)
                sampler.set_epoch(epoch)
                for step in range(steps_per_epoch):
                    x, y = next(data_iter)
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """
        ),
        # Only the validation sampler is told the epoch.
        Example(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            train_sampler = DistributedSampler(train_set)
            val_sampler = DistributedSampler(val_set, shuffle=False)
            loader = DataLoader(train_set, sampler=train_sampler)
            val_loader = DataLoader(val_set, sampler=val_sampler)
            for epoch in range(epochs):
                val_sampler.set_epoch(epoch)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
            """
            from torch.utils.data import DataLoader, DistributedSampler

            train_sampler = DistributedSampler(train_set)
            val_sampler = DistributedSampler(val_set, shuffle=False)
            loader = DataLoader(train_set, sampler=train_sampler)
            val_loader = DataLoader(val_set, sampler=val_sampler)
            for epoch in range(epochs):
                loader.sampler.set_epoch(epoch)
                val_sampler.set_epoch(epoch)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
        ),
        # The sampler in a kwargs dict, never told the epoch.
        Example(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            train_kwargs = {"batch_size": 64}
            train_kwargs["sampler"] = DistributedSampler(dataset)
            loader = DataLoader(dataset, **train_kwargs)
            for epoch in range(epochs):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
            """
            from torch.utils.data import DataLoader, DistributedSampler

            train_kwargs = {"batch_size": 64}
            train_kwargs["sampler"] = DistributedSampler(dataset)
            loader = DataLoader(dataset, **train_kwargs)
            for epoch in range(epochs):
                loader.sampler.set_epoch(epoch)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
        ),
    )

    def check(self, ctx: CheckContext) -> None:
        anatomy = ctx.anatomy
        judged: set[cst.Call] = set()
        for loop in anatomy.script.train_loops:
            if loop.epoch_loop is None:
                continue
            # A loop that pulls its batches with `next(batch_iter)` (`for step in range(n)`)
            # is judged for a late set_epoch only: what else resets that iterator is not
            # followed.
            loader = loop.loader or _loader_pulled_by_next(anatomy, loop)
            if loader is None:
                continue
            via = _sampler_path(anatomy, loader.call)
            if via is None:
                continue
            judged.add(loader.call)
            status, where = _set_epoch_status(anatomy, loop, loader)
            if status == "late":
                assert where is not None
                ctx.report(where, "set_epoch runs after this epoch's iterator was created")
            elif status == "missing" and loop.loader is not None:
                fix = partial(_fix, loop=loop, via=via) if not set_epoch_problem(loop) else None
                ctx.report(loop.epoch_loop, fix=fix)
        for loader in anatomy.loaders.all:
            if loader.call in judged or _sampler_path(anatomy, loader.call) is None:
                continue
            repeated = _passes_repeated_by_hand(anatomy, loader.call)
            if repeated is not None and not _any_set_epoch(anatomy, loader.call):
                ctx.report(repeated, REPEATED)


# torchtitan's `while True: for batch in loader: yield batch`, a step loop's `iter(loader)`.
REPEATED = (
    "DistributedSampler without set_epoch: every pass over the loader made here repeats "
    "the first pass's order"
)


def _passes_repeated_by_hand(anatomy: Anatomy, loader: cst.Call) -> cst.CSTNode | None:
    """A pass over `loader` (`for ... in loader`, `iter(loader)`) made again and again by a
    loop around it that is not an epoch loop the script's training loops know."""
    for node in walk(anatomy.module):
        if isinstance(node, cst.For):
            source = node.iter
        elif isinstance(node, cst.Call) and is_name(node.func, "iter") and node.args:
            source = node.args[0].value
        else:
            continue
        if anatomy.loaders.resolve(source, anatomy.function_of(node)) is not loader:
            continue
        around = anatomy.graph.loops_around(node)
        if around and around[0][1] == "loop" and _endless(around[0][0]):
            return node
    return None


def _endless(loop: cst.CSTNode) -> bool:
    """`while True:`: a loop that only a `return`, a `break` or the consumer ends."""
    return isinstance(loop, cst.While) and is_name(loop.test, "True")


def _any_set_epoch(anatomy: Anatomy, loader: cst.Call) -> bool:
    samplers = _training_samplers(anatomy, loader)
    return any(
        is_method_call(call, "set_epoch")
        and _may_reach_training_sampler(anatomy, call, loader, samplers)
        for call in anatomy.calls
    )


def _fix(ctx: CheckContext, loop: TrainLoop, via: str) -> None:
    insert_set_epoch(ctx.plan, loop, via)


def _sampler_path(anatomy: Anatomy, loader: cst.Call) -> str | None:
    """How the loader reaches its DistributedSampler: `sampler`, `batch_sampler.sampler`."""
    for keyword, path in (("sampler", "sampler"), ("batch_sampler", "batch_sampler.sampler")):
        for passed in anatomy.loaders.argument(loader, keyword) or []:
            if _sampler_calls(anatomy, passed.value, anatomy.function_of(passed.value)):
                return path
    return None


def _sampler_calls(
    anatomy: Anatomy, expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int = 0
) -> set[cst.Call]:
    """The `DistributedSampler(...)` calls that `expr` may be (or wrap, as a BatchSampler
    does), followed through names, attributes, parameters and the script's functions."""
    found: set[cst.Call] = set()
    for end in anatomy.values.origins(expr, scope):
        for node in walk(end):
            if not isinstance(node, cst.Call):
                continue
            if anatomy.is_call_to(node, SAMPLER):
                found.add(node)
            elif depth < 2:  # BatchSampler(train_sampler, ...)
                for arg in node.args:
                    if dotted(arg.value):
                        found |= _sampler_calls(
                            anatomy, arg.value, anatomy.function_of(arg.value), depth + 1
                        )
    return found


def _training_samplers(anatomy: Anatomy, loader: cst.Call) -> set[cst.Call]:
    return {
        sampler
        for keyword in SAMPLER_ARGUMENTS
        for passed in anatomy.loaders.argument(loader, keyword) or []
        for sampler in _sampler_calls(anatomy, passed.value, anatomy.function_of(passed.value))
    }


def _may_reach_training_sampler(
    anatomy: Anatomy, call: cst.Call, loader: cst.Call, samplers: set[cst.Call]
) -> bool:
    """Whether `<receiver>.set_epoch()` may be the training sampler's: False only when the
    receiver is traced to another DistributedSampler (the validation loader's, say)."""
    assert isinstance(call.func, cst.Attribute)
    receiver = call.func.value
    scope = anatomy.function_of(call)
    if isinstance(receiver, cst.Attribute) and receiver.attr.value == "sampler":
        owner = receiver.value  # `loader.sampler`, `loader.batch_sampler.sampler`
        if isinstance(owner, cst.Attribute) and owner.attr.value == "batch_sampler":
            owner = owner.value
        other = anatomy.loaders.resolve(owner, scope)
        if other is None or other is loader:
            return True
        reached = _training_samplers(anatomy, other)
    else:
        reached = _sampler_calls(anatomy, receiver, scope)
    return not (reached and samplers and reached.isdisjoint(samplers))


def _loader_pulled_by_next(anatomy: Anatomy, loop: TrainLoop) -> Loader | None:
    """The loader whose iterator the batch loop pulls from with `next(...)`."""
    scope = anatomy.function_of(loop.batch_loop)
    for call in _next_calls(anatomy, loop):
        loader = anatomy.loaders.loader_for(anatomy.loaders.resolve(call.args[0].value, scope))
        if loader is not None:
            return loader
    return None


def _next_calls(anatomy: Anatomy, loop: TrainLoop) -> list[cst.Call]:
    scope = anatomy.function_of(loop.batch_loop)
    return [
        call
        for call in anatomy.calls
        if is_name(call.func, "next")
        and call.args
        and anatomy.inside(call, loop.batch_loop)
        and anatomy.function_of(call) is scope
    ]


def _set_epoch_status(
    anatomy: Anatomy, loop: TrainLoop, loader: Loader
) -> tuple[str, cst.CSTNode | None]:
    """ "ok", "late" (with the call) or "missing"."""
    assert loop.epoch_loop is not None
    # Where each epoch reaches the loader: the batch loop, then the calls leading to it.
    markers: list[cst.CSTNode] = [loop.batch_loop]
    for node, kind in anatomy.graph.loops_around(loop.batch_loop):
        if node is loop.epoch_loop:
            break
        if kind == "call":
            markers.append(node)
    marker_scopes = {anatomy.function_of(marker) for marker in markers}
    samplers = _training_samplers(anatomy, loader.call)
    late: cst.CSTNode | None = None
    candidates = [
        call
        for call in anatomy.calls
        if is_method_call(call, "set_epoch")
        and not anatomy.inside(call, loop.batch_loop)
        and _may_reach_training_sampler(anatomy, call, loader.call, samplers)
    ]
    for call in candidates:
        # Where the call runs: in place, or, in a hook of its own (`on_epoch_start`), where
        # that is called.
        places: list[cst.CSTNode] = [call]
        if anatomy.function_of(call) not in marker_scopes:
            places += anatomy.graph.callers(anatomy.function_of(call))
        for place in places:
            if anatomy.inside(place, loop.batch_loop):
                continue  # a hook of every step, not of the epoch
            scope = anatomy.function_of(place)
            for marker in markers:
                if anatomy.function_of(marker) is not scope:
                    continue
                if scope is anatomy.function_of(loop.epoch_loop) and not anatomy.inside(
                    place, loop.epoch_loop
                ):
                    continue
                if anatomy.precedes(place, marker) and not _stale_iterator(
                    anatomy, loop, loader, place, marker
                ):
                    return "ok", None
                late = call
    if late is None:
        for call in candidates:
            if anatomy.inside(call, loop.epoch_loop):
                late = call
    return ("late", late) if late is not None else ("missing", None)


def _stale_iterator(
    anatomy: Anatomy, loop: TrainLoop, loader: Loader, place: cst.CSTNode, marker: cst.CSTNode
) -> bool:
    """Whether the batch loop draws from an iterator over the loader made this epoch before
    `place` (`batch_iter = iter(loader)`, then set_epoch, then `for x in batch_iter` or
    `next(batch_iter)`): it drew its order with the previous epoch's seed. A loop over the
    loader itself makes a fresh iterator, whatever was peeked before."""
    if marker is not loop.batch_loop:
        return False
    assert loop.epoch_loop is not None
    scope = anatomy.function_of(loop.batch_loop)
    names = {dotted(strip_iteration(loop.batch_loop.iter, anatomy.graph))}
    names |= {dotted(call.args[0].value) for call in _next_calls(anatomy, loop)}
    for name in names - {None}:
        assert name is not None
        made = [
            value
            for value in anatomy.values.assignments(name, scope)
            if anatomy.parent(value) is not None  # not made up for `a, b = pair`
            and anatomy.precedes(value, marker)
            and (
                scope is not anatomy.function_of(loop.epoch_loop)
                or anatomy.inside(value, loop.epoch_loop)
            )
        ]
        if (
            made
            and _makes_iterator(made[-1])
            and anatomy.loaders.resolve(made[-1], scope) is loader.call
            and anatomy.precedes(made[-1], place)
        ):
            return True
    return False


def _makes_iterator(value: cst.BaseExpression) -> bool:
    """`iter(loader)`, `enumerate(loader)`, `tqdm(enumerate(loader))`: the loader's iterator
    is made here and now (`tqdm(loader)` makes it only when iterated)."""
    innermost = None
    while (
        isinstance(value, cst.Call)
        and dotted(value.func) in ITER_WRAPPERS
        and value.args
        and value.args[0].keyword is None
    ):
        innermost = dotted(value.func)
        value = value.args[0].value
    return innermost in {"iter", "enumerate"}
