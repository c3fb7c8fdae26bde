"""DDP011: an average over the training loader's samples counts this process's samples."""

from __future__ import annotations

import re
from collections.abc import Callable

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.loaders import Loader, keyed_read
from ddpify.analysis.tree import call_arg, dotted, is_name, source_text, walk
from ddpify.rule import ConvertContext, ConvertRule, Example

# Calls whose arguments are shown, not used: an average there is what the script reports.
SHOWN = {"print", "format", "str", "tqdm.write", "write", "set_postfix", "set_description"}
LOG_METHODS = {"debug", "info", "warning", "error", "critical", "log"}


class SampleCounts(ConvertRule):
    """
    ## What it does
    In the function of a training batch loop, `len(loader.dataset)` of the loop's loader
    used to divide (`train_loss / len(train_loader.dataset)`, pytorch/examples' idiom) or
    shown in a print, a log line or a progress message becomes `len(loader.sampler)`: the
    number of samples the loader's `DistributedSampler` gives this process. A length used
    any other way (the size of an array indexed by sample) is left as it is. Sizes kept per
    key next to loaders made per key (`sizes = {x: len(sets[x]) for x in ...}` beside
    `loaders = {x: DataLoader(sets[x], ...) for x in ...}`) read at the batch loop's key
    become `len(loaders[phase].sampler)` the same way, and so does a name holding the
    dataset's length where it divides what the batch loop sums (`n_train = len(train_ds)`;
    `n` of a curriculum's `Subset(train_set, order[:n])`).

    ## Why is this bad?
    Each process sums the loss of its own samples only; divided by the whole dataset's
    length, the average rank 0 prints is 1/N of the real one, and a progress line counts to
    N times what the process reads ("[320/1024]" at the end of the epoch).
    """

    code = "DDP011"
    step = 11
    name = "sample-counts"
    message = "averages over the training data count this process's samples"
    fix_safety = """
        Safe: the printed average is rank 0's over its own shard, which estimates the
        average over all of the data; all-reduce the sum and the count for the exact one.
    """
    examples = (
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            def train(model, loader, optimizer):
                total = 0.0
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    total += loss.item()
                return total / len(loader.dataset)

            loader = DataLoader(train_ds, batch_size=32, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                average = train(model, loader, optimizer)
            """,
            """
            import torch
            from torch.utils.data import DataLoader

            def train(model, loader, optimizer):
                total = 0.0
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    total += loss.item()
                return total / len(loader.sampler)

            loader = DataLoader(train_ds, batch_size=32, shuffle=True)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                average = train(model, loader, optimizer)
            """,
        ),
        # Sizes per phase (the transfer-learning tutorial's `dataset_sizes`): the training
        # phase's count is this process's; the validation loader's sampler reads it all.
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            loaders = {x: DataLoader(sets[x], batch_size=4) for x in ["train", "val"]}
            sizes = {x: len(sets[x]) for x in ["train", "val"]}
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for phase in ["train", "val"]:
                    total = 0.0
                    for x, y in loaders[phase]:
                        loss = model(x).sum()
                        if phase == "train":
                            loss.backward()
                            optimizer.step()
                        total += loss.item()
                    print(phase, total / sizes[phase])
            """,
            """
            import torch
            from torch.utils.data import DataLoader

            loaders = {x: DataLoader(sets[x], batch_size=4) for x in ["train", "val"]}
            sizes = {x: len(sets[x]) for x in ["train", "val"]}
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for phase in ["train", "val"]:
                    total = 0.0
                    for x, y in loaders[phase]:
                        loss = model(x).sum()
                        if phase == "train":
                            loss.backward()
                            optimizer.step()
                        total += loss.item()
                    print(phase, total / len(loaders[phase].sampler))
            """,
        ),
        # The same with a literal dict of loaders, each given the dataset at its key
        # (round-30 audit B so_best_model_deepcopy_return: printed averages halved).
        Example(
            """
            import torch
            from torch.utils.data import DataLoader

            loaders = {
                "train": DataLoader(sets["train"], batch_size=4),
                "val": DataLoader(sets["val"], batch_size=4),
            }
            sizes = {x: len(sets[x]) for x in ["train", "val"]}
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for phase in ["train", "val"]:
                    total = 0.0
                    for x, y in loaders[phase]:
                        loss = model(x).sum()
                        if phase == "train":
                            loss.backward()
                            optimizer.step()
                        total += loss.item()
                    print(phase, total / sizes[phase])
            """,
            """
            import torch
            from torch.utils.data import DataLoader

            loaders = {
                "train": DataLoader(sets["train"], batch_size=4),
                "val": DataLoader(sets["val"], batch_size=4),
            }
            sizes = {x: len(sets[x]) for x in ["train", "val"]}
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for phase in ["train", "val"]:
                    total = 0.0
                    for x, y in loaders[phase]:
                        loss = model(x).sum()
                        if phase == "train":
                            loss.backward()
                            optimizer.step()
                        total += loss.item()
                    print(phase, total / len(loaders[phase].sampler))
            """,
        ),
        # A curriculum's growing subset: its length is the count the average divides by.
        Example(
            """
            import torch
            from torch.utils.data import DataLoader, Subset

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                n = pacing(epoch)
                subset = Subset(train_set, order[:n])
                loader = DataLoader(subset, batch_size=32, shuffle=True)
                running = 0.0
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = model(x).mean()
                    loss.backward()
                    optimizer.step()
                    running += loss.item() * len(y)
                print(f"{n} samples, loss {running / n:.4f}")
            """,
            """
            import torch
            from torch.utils.data import DataLoader, Subset

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                n = pacing(epoch)
                subset = Subset(train_set, order[:n])
                loader = DataLoader(subset, batch_size=32, shuffle=True)
                running = 0.0
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = model(x).mean()
                    loss.backward()
                    optimizer.step()
                    running += loss.item() * len(y)
                print(f"{n} samples, loss {running / len(loader.sampler):.4f}")
            """,
        ),
        # The validation loader is read whole by every process: its length is right.
        Example(
            """
            import torch

            def evaluate(model, loader):
                correct = 0
                with torch.no_grad():
                    for x, y in loader:
                        correct += (model(x).argmax(1) == y).sum().item()
                return correct / len(loader.dataset)
            """
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        done: set[int] = set()
        for loop in anatomy.script.train_loops:
            if loop.loader is None:
                continue
            scope = anatomy.function_of(loop.batch_loop)
            name = anatomy.script.loader_name(loop.batch_loop.iter, scope)
            read = keyed_read(loop.batch_loop.iter) if loop.loader.key_var else None
            expected = None
            if loop.phase_loop is not None and read is None:
                # `dataloaders[phase]` of a literal dict (round-23 audit B transfer_stages_b):
                # the evaluation phase's sampler counts its whole dataset
                keyed = keyed_read(loop.batch_loop.iter)
                name = f"{keyed[0]}[{keyed[1]}]" if keyed is not None else name
                if keyed is not None:  # (round-30 audit B so_best_model_deepcopy_return)
                    read, expected = keyed, _literal_datasets(anatomy, scope, keyed[0])
            elif read is not None and (given := call_arg(loop.loader.call, 0, "dataset")):
                assert loop.loader.key_var is not None
                expected = _with_variable(given.value, loop.loader.key_var)
            if read is not None:
                name = f"{read[0]}[{read[1]}]"
                for size in _sizes_by_key(anatomy, scope, expected, read):
                    if id(size) in done or not _averaged_or_shown(anatomy, size):
                        continue
                    done.add(id(size))
                    ctx.plan.replace(size, _replaced_by(_sampler_length(name)))
                    ctx.changed(size, f"counts this process's samples: len({name}.sampler)")
            if name is None:
                continue
            lengths = [(n, False) for n in _lengths(anatomy, scope, f"{name}.dataset")]
            dataset = _dataset_name(anatomy, loop.loader, scope)
            if dataset is not None:
                # `total / len(train_ds)`, the dataset the loader was given: as a divisor
                # only (`print(f"train={len(train_ds)}")` states the dataset's size), and
                # not of a sum another loop makes (round-42 audit C compile_embed: `hits`
                # counted over `DataLoader(ds)` unsharded, divided by half the data)
                lengths += [
                    (n, True)
                    for n in _lengths(anatomy, scope, dataset)
                    if not _summed_elsewhere(anatomy, n, loop.batch_loop)
                ]
            for source in _tensor_sources(anatomy, loop.loader, scope):
                # `running / len(X_train)` with `TensorDataset(torch.from_numpy(X_train), ...)`
                # (round-9 audit b10): a divisor of what the batch loop sums only.
                lengths += [
                    (n, True)
                    for n in _lengths(anatomy, scope, source)
                    if _divides_a_sum(anatomy, n, loop.batch_loop)
                ]
            for source in _index_sources(anatomy, loop.loader, scope):
                # `tot / len(tr_idx)` with `DataLoader(TabDS(train[tr_idx]), ...)` (round-26
                # audit B kaggle_tabular_embeddings): the index array picks the samples.
                lengths += [
                    (n, True)
                    for n in _lengths(anatomy, scope, source)
                    if _divides_a_sum(anatomy, n, loop.batch_loop)
                ]
            sampler = f"{name}.{loop.loader.sampler_path}"
            for length, divisor_only in lengths:
                if id(length) in done or not _averaged_or_shown(anatomy, length, divisor_only):
                    continue
                done.add(id(length))
                ctx.plan.replace(length, _measure_sampler(sampler))
                ctx.changed(length, f"counts this process's samples: len({sampler})")
            measured = [f"{name}.dataset", *([dataset] if dataset is not None else [])]
            for count in _counts_of(anatomy, scope, measured, loop.batch_loop):
                if id(count) in done:
                    continue
                done.add(id(count))
                made = _measured_only_to_divide(anatomy, scope, count)
                if made is not None:
                    # `n = len(loader.dataset)` read only to divide the loop's sums: the
                    # count itself changes, and `n` keeps its name
                    done.add(id(made))
                    ctx.plan.replace(made, _measure_sampler(sampler))
                    ctx.changed(made, f"counts this process's samples: len({sampler})")
                    continue
                ctx.plan.replace(count, _replaced_by(cst.parse_expression(f"len({sampler})")))
                ctx.changed(count, f"counts this process's samples: len({sampler})")


def _measure_sampler(path: str) -> Callable[[cst.Call], cst.Call]:
    sampler = cst.parse_expression(path)
    return lambda updated: updated.with_changes(args=[cst.Arg(sampler)])


def _dataset_name(anatomy: Anatomy, loader: Loader, scope: cst.FunctionDef | None) -> str | None:
    """The plain name of the dataset `loader` was given, when it names the same object in
    `scope`: the loader is made there, or both are module-level names."""
    dataset = call_arg(loader.call, 0, "dataset")
    if dataset is None or not isinstance(dataset.value, cst.Name):
        return None
    name = dataset.value.value
    made_in = anatomy.function_of(loader.call)
    if made_in is scope:
        return name if len(anatomy.values.assignments(name, scope)) <= 1 else None
    if (
        made_in is None
        and scope is not None
        and not anatomy.values.binds(scope, name)
        and name not in anatomy.graph.parameters_of(scope)
    ):
        return name if len(anatomy.values.assignments(name, None)) <= 1 else None
    return None


# Conversions of an array into the tensor a TensorDataset holds, row for row.
AS_TENSOR = {
    "torch.from_numpy",
    "torch.tensor",
    "torch.as_tensor",
    "torch.Tensor",
    "torch.FloatTensor",
}


def _dataset_made(anatomy: Anatomy, loader: Loader) -> cst.BaseExpression | None:
    """The dataset the loader is given, or what the one binding of its name holds."""
    dataset = call_arg(loader.call, 0, "dataset")
    if dataset is None:
        return None
    value = dataset.value
    if isinstance(value, cst.Name):
        values = anatomy.values.assignments(value.value, anatomy.function_of(loader.call))
        value = values[0] if len(values) == 1 else value
    return value


def _tensor_sources(anatomy: Anatomy, loader: Loader, scope: cst.FunctionDef | None) -> list[str]:
    """The arrays a `TensorDataset` the loader reads was made of, by the names they have in
    `scope` (`TensorDataset(torch.from_numpy(X_train), torch.from_numpy(y_train))`): each has
    as many rows as the dataset has samples."""
    made_in = anatomy.function_of(loader.call)
    value = _dataset_made(anatomy, loader)
    if value is None:
        return []
    if not (
        isinstance(value, cst.Call)
        and (dotted(value.func) or "").rsplit(".", 1)[-1] == "TensorDataset"
    ):
        return []
    found = []
    for arg in value.args:
        inner = arg.value
        while isinstance(inner, cst.Call) and len(inner.args) >= 1:
            if isinstance(inner.func, cst.Attribute) and not anatomy.is_call_to(inner, AS_TENSOR):
                inner = inner.func.value  # `X.float()`, `torch.from_numpy(X).float()`
            elif anatomy.is_call_to(inner, AS_TENSOR):
                inner = inner.args[0].value
            else:
                break
        while (
            isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and not inner.args
        ):
            inner = inner.func.value  # `.float()`
        if not isinstance(inner, cst.Name):
            continue
        if _same_object(anatomy, inner.value, made_in, scope):
            found.append(inner.value)
    return found


def _same_object(
    anatomy: Anatomy, name: str, made_in: cst.FunctionDef | None, scope: cst.FunctionDef | None
) -> bool:
    """`name`, read where the loader is made (`made_in`), names the same object in `scope`,
    where its length is taken, and is bound once."""
    if made_in is not scope and (
        made_in is not None
        or scope is None
        or anatomy.values.binds(scope, name)
        or name in anatomy.graph.parameters_of(scope)
    ):
        return False
    return len(anatomy.values.assignments(name, made_in)) <= 1


def _index_sources(anatomy: Anatomy, loader: Loader, scope: cst.FunctionDef | None) -> list[str]:
    """The index arrays that pick the samples of the dataset the loader reads, by the names
    they have in `scope`: `tr_idx` of `TabDS(train[tr_idx])` or of `Subset(full, tr_idx)`.
    Each has as many entries as the dataset has samples."""
    made_in = anatomy.function_of(loader.call)
    value = _dataset_made(anatomy, loader)
    if value is None:
        return []
    if not isinstance(value, cst.Call):
        return []
    names = []
    sampler = call_arg(loader.call, None, "sampler")
    if sampler is not None and isinstance(sampler.value, cst.Name):
        # `sampler=train_sampler`, `train_sampler = SubsetRandomSampler(train_indices)`
        given = anatomy.values.assignments(sampler.value.value, made_in)
        picked = given[0] if len(given) == 1 else None
        if (
            isinstance(picked, cst.Call)
            and picked.args
            and (dotted(picked.func) or "").endswith("SubsetRandomSampler")
        ):
            names.append(picked.args[0].value)
    indices = call_arg(value, 1, "indices")
    if (dotted(value.func) or "").rsplit(".", 1)[-1] == "Subset" and indices is not None:
        names.append(indices.value)
    for node in walk(value):
        if isinstance(node, cst.Subscript) and len(node.slice) == 1:
            index = node.slice[0].slice
            if isinstance(index, cst.Index):
                names.append(index.value)
    found = []
    for node in names:
        if (
            isinstance(node, cst.Name)
            and node.value not in found
            and _same_object(anatomy, node.value, made_in, scope)
        ):
            found.append(node.value)
    return found


def _counts_of(
    anatomy: Anatomy, scope: cst.FunctionDef | None, measured: list[str], batch_loop: cst.CSTNode
) -> list[cst.Name]:
    """A name holding the dataset's length (`n_train = len(train_ds)`, `n =
    len(loader.dataset)` (round-27 audit B blog_history_npz); `n` of `train_ds =
    Subset(full, order[:n])`, a curriculum's growing subset, round-22 audit B) where it
    divides what the batch loop sums (`running / n`). `measured`: the loader's dataset as
    the loop reads it, and the dataset's own name, when it has one."""
    counts: set[str] = set()
    made = anatomy.values.assignments(measured[-1], scope)
    if len(made) == 1 and isinstance(made[0], cst.Call):
        subset = made[0]
        indices = call_arg(subset, 1, "indices")
        if (
            (dotted(subset.func) or "").rsplit(".", 1)[-1] == "Subset"
            and indices is not None
            and isinstance(indices.value, cst.Subscript)
            and len(indices.value.slice) == 1
        ):
            part = indices.value.slice[0].slice
            if (
                isinstance(part, cst.Slice)
                and part.lower is None
                and part.step is None
                and isinstance(part.upper, cst.Name)
            ):
                counts.add(part.upper.value)
    for node in walk(scope if scope is not None else anatomy.module):
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            target = node.targets[0].target
            value = node.value
            if (
                isinstance(target, cst.Name)
                and isinstance(value, cst.Call)
                and is_name(value.func, "len")
                and len(value.args) == 1
                and dotted(value.args[0].value) in measured
            ):
                counts.add(target.value)
    return [
        node
        for node in walk(scope if scope is not None else anatomy.module)
        if isinstance(node, cst.Name)
        and node.value in counts
        and len(anatomy.values.assignments(node.value, scope)) == 1
        and anatomy.function_of(node) is scope
        and _divides_a_sum(anatomy, node, batch_loop)
    ]


def _measured_only_to_divide(
    anatomy: Anatomy, scope: cst.FunctionDef | None, count: cst.Name
) -> cst.Call | None:
    """The `len(...)` that `count`'s one binding holds, when every read of the name in
    `scope` divides (`loss_sum / n, correct / n`)."""
    made = anatomy.values.assignments(count.value, scope)
    if len(made) != 1 or not isinstance(made[0], cst.Call) or not is_name(made[0].func, "len"):
        return None
    for node in walk(scope if scope is not None else anatomy.module):
        if (
            isinstance(node, cst.Name)
            and node.value == count.value
            and anatomy.function_of(node) is scope
            and not any(node is target for target in _targets(anatomy, node))
        ):
            parent = anatomy.parent(node)
            if not (
                isinstance(parent, cst.BinaryOperation)
                and isinstance(parent.operator, cst.Divide)
                and parent.right is node
            ):
                return None
    return made[0]


def _targets(anatomy: Anatomy, name: cst.Name) -> list[cst.BaseExpression]:
    """The assignment targets of the statement `name` is in."""
    parent = anatomy.parent(name)
    if isinstance(parent, cst.AssignTarget):
        return [parent.target]
    return []


def _divides_a_sum(anatomy: Anatomy, length: cst.BaseExpression, batch_loop: cst.CSTNode) -> bool:
    """`running / len(X)` where `running` is summed (`+=`) in the batch loop."""
    parent = anatomy.parent(length)
    if not (
        isinstance(parent, cst.BinaryOperation)
        and isinstance(parent.operator, cst.Divide)
        and parent.right is length
    ):
        return False
    summed = {dotted(n) for n in walk(parent.left) if isinstance(n, cst.Name | cst.Attribute)}
    return any(
        isinstance(node, cst.AugAssign)
        and isinstance(node.operator, cst.AddAssign)
        and dotted(node.target) in summed
        for node in walk(batch_loop)
    )


def _summed_elsewhere(
    anatomy: Anatomy, length: cst.BaseExpression, batch_loop: cst.CSTNode
) -> bool:
    """`hits / len(ds)` where `hits` is summed (`+=`) only outside the batch loop: in an
    evaluation over a loader of its own, which counts the whole dataset."""
    parent = anatomy.parent(length)
    if not (isinstance(parent, cst.BinaryOperation) and parent.right is length):
        return False
    summed = {dotted(n) for n in walk(parent.left) if isinstance(n, cst.Name | cst.Attribute)}
    scope = anatomy.function_of(length)
    sums = [
        node
        for node in walk(scope if scope is not None else anatomy.module)
        if isinstance(node, cst.AugAssign)
        and isinstance(node.operator, cst.AddAssign)
        and dotted(node.target) in summed
    ]
    return bool(sums) and not any(anatomy.inside(node, batch_loop) for node in sums)


def _replaced_by(new: cst.BaseExpression) -> Callable[[cst.CSTNode], cst.BaseExpression]:
    return lambda _: new


def _sampler_length(name: str) -> cst.BaseExpression:
    return cst.parse_expression(f"len({name}.sampler)")


def _assigned_once(
    anatomy: Anatomy, name: str, scope: cst.FunctionDef | None
) -> cst.BaseExpression | None:
    """The one value `name` is given in `scope` or at module level, if it is given one."""
    values = [
        value
        for where in ((scope, None) if scope is not None else (None,))
        for value in anatomy.values.assignments(name, where)
    ]
    return values[0] if len(values) == 1 else None


def _literal_datasets(anatomy: Anatomy, scope: cst.FunctionDef | None, loaders: str) -> str | None:
    """`datasets[_]` when `loaders = {"train": DataLoader(datasets["train"], ...), "val":
    DataLoader(datasets["val"], ...)}` gives each key's loader the dataset at that key."""
    value = _assigned_once(anatomy, loaders, scope)
    if not isinstance(value, cst.Dict) or not value.elements:
        return None
    shapes = set()
    for element in value.elements:
        if not (
            isinstance(element, cst.DictElement)
            and isinstance(element.key, cst.SimpleString)
            and isinstance(element.value, cst.Call)
            and (dataset := call_arg(element.value, 0, "dataset")) is not None
            and isinstance(dataset.value, cst.Subscript)
        ):
            return None
        key = element.key.value
        code = cst.Module([]).code_for_node(dataset.value)
        if not code.endswith(f"[{key}]"):
            return None
        shapes.add(code.removesuffix(f"[{key}]") + "[_]")
    return shapes.pop() if len(shapes) == 1 else None


def _sizes_by_key(
    anatomy: Anatomy, scope: cst.FunctionDef | None, expected: str | None, read: tuple[str, str]
) -> list[cst.Subscript]:
    """`sizes[phase]` in `scope`, where `sizes = {x: len(datasets[x]) for x in ...}` measures
    the datasets (`expected`, the key written `_`) the loaders of `loaders = {x:
    DataLoader(datasets[x], ...) for x in ...}`, or of a literal dict of them, read (the
    transfer-learning tutorial's `dataset_sizes`), and `phase` is the key the batch loop
    reads the loader at."""
    if expected is None:
        return []
    found = []
    for node in walk(scope if scope is not None else anatomy.module):
        if not isinstance(node, cst.Subscript) or anatomy.function_of(node) is not scope:
            continue
        measured = keyed_read(node)
        if measured is None or measured[1] != read[1]:
            continue
        comp = _assigned_once(anatomy, measured[0], scope)
        if not isinstance(comp, cst.DictComp):
            continue
        size = comp.value
        if (
            isinstance(comp.for_in.target, cst.Name)
            and isinstance(size, cst.Call)
            and is_name(size.func, "len")
            and len(size.args) == 1
            and _with_variable(size.args[0].value, comp.for_in.target.value) == expected
        ):
            found.append(node)
    return found


def _with_variable(expr: cst.BaseExpression, variable: str) -> str:
    """The code of `expr` with the comprehension variable `variable` written as `_`."""
    code = cst.Module([]).code_for_node(expr)
    return re.sub(rf"\b{re.escape(variable)}\b", "_", code)


def _lengths(anatomy: Anatomy, scope: cst.FunctionDef | None, measured: str) -> list[cst.Call]:
    """`len(<measured>)` in `scope` (its own code, not nested functions'); `measured` may
    read a loader by its key (`len(dataloaders[phase].dataset)`, the fine-tuning tutorial's
    divisor, round-16 audit s14)."""
    return [
        node
        for node in walk(scope if scope is not None else anatomy.module)
        if isinstance(node, cst.Call)
        and is_name(node.func, "len")
        and len(node.args) == 1
        and (dotted(node.args[0].value) or source_text(node.args[0].value)) == measured
        and anatomy.function_of(node) is scope
    ]


def _averaged_or_shown(
    anatomy: Anatomy, length: cst.BaseExpression, divisor_only: bool = False
) -> bool:
    """The length divides something, or (unless `divisor_only`) is an argument of a print
    or a log line."""
    child: cst.CSTNode = length
    for parent in anatomy.ancestors(length):
        if (
            isinstance(parent, cst.BinaryOperation)
            and isinstance(parent.operator, cst.Divide | cst.FloorDivide)
            and parent.right is child
        ):
            return True
        if isinstance(parent, cst.AugAssign) and isinstance(
            parent.operator, cst.DivideAssign | cst.FloorDivideAssign
        ):
            return True
        if divisor_only:
            if isinstance(parent, cst.BaseStatement | cst.BaseSmallStatement):
                return False
            child = parent
            continue
        if isinstance(parent, cst.FormattedString):
            return _in_a_batch_loop(anatomy, length)
        if isinstance(parent, cst.Call) and child is not parent.func:
            name = dotted(parent.func) or ""
            last = name.rsplit(".", 1)[-1]
            if name in SHOWN or last in SHOWN or ("log" in name and last in LOG_METHODS):
                return _in_a_batch_loop(anatomy, length)
        if isinstance(parent, cst.BaseStatement | cst.BaseSmallStatement):
            return False
        child = parent
    return False


def _in_a_batch_loop(anatomy: Anatomy, node: cst.CSTNode) -> bool:
    """Shown inside a training batch loop (mnist's progress line, `{done}/{len(loader.
    dataset)}`): the process's share; shown anywhere else (HF's "Num examples = ..." before
    training, round-17 audit s20), the dataset's size, which stays."""
    return any(anatomy.inside(node, loop.batch_loop) for loop in anatomy.script.train_loops)
