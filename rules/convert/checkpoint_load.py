"""DDP006: torch.load maps a checkpoint onto the process's own device."""

from __future__ import annotations

import re
from collections.abc import Sequence

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import MODEL_SAVES
from ddpify.analysis.effects import FILE_WRITES, opens_for_writing
from ddpify.analysis.tree import call_arg, dotted, is_method_call, is_name, walk
from ddpify.emit import expression, statement, with_keyword
from ddpify.fixes import take_rank_zeros
from ddpify.rule import ConvertContext, ConvertRule, Example


class CheckpointLoad(ConvertRule):
    """
    ## What it does
    Adds `map_location=device` (the process's own device) and `weights_only=True` to
    `torch.load` calls that lack them. A load of the file a `torch.save` earlier in the same
    function wrote (on rank 0 only, DDP005) is preceded by `dist.barrier()`, reached by
    every rank, as in PyTorch's DDP tutorial; so is a load after the training loop of its
    function, or after a call in its function that trains (`fit(model, ...)`), in a script
    that saves checkpoints (the best model, reloaded at the end). So is the first read
    (`open(path)`, `np.load`, `pd.read_csv`...), before training, of a file a statement
    before it wrote by the same path: a data file the script makes, then loads.

    A path every process computes for itself but must agree on is rank 0's
    (`dist.broadcast_object_list` right after it is computed): one built from the clock or a
    random draw that a load reads back, and a folder picked by looking at the disk (a helper
    of the script that tests `exists()` or lists a folder: YOLOv5's `increment_path` takes
    the next free `runs/exp{n}`), assigned to a name ending in `dir`, `path` or `folder`.

    ## Why is this bad?
    A checkpoint saved from `cuda:0` loads back onto `cuda:0` in every process: GPU 0 holds
    N copies and runs out of memory, the other GPUs hold none. `weights_only=True` is
    torch's default since 2.6; spelling it out keeps older versions from unpickling
    arbitrary objects. Without the barrier the other ranks read a file rank 0 has not
    finished writing, or not started.
    """

    code = "DDP006"
    step = 6
    name = "checkpoint-load"
    message = "torch.load gets map_location (the process's device) and weights_only"
    fix_safety = """
        `weights_only=True` refuses checkpoints that pickle arbitrary Python objects (an
        `argparse.Namespace`, say); such a load then fails loudly, never silently.
    """
    examples = (
        # A config file written, then read back, in the `__main__` block before training.
        Example(
            """
            import json

            import torch


            def main(cfg):
                optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()


            if __name__ == "__main__":
                with open("config.json", "w") as f:
                    json.dump({"lr": 0.1}, f)
                with open("config.json") as f:
                    cfg = json.load(f)
                main(cfg)
            """,
            """
            import json

            import torch
            import torch.distributed as dist


            def main(cfg):
                optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()


            if __name__ == "__main__":
                with open("config.json", "w") as f:
                    json.dump({"lr": 0.1}, f)
                dist.barrier()
                with open("config.json") as f:
                    cfg = json.load(f)
                main(cfg)
            """,
        ),
        # A data file the script writes (on rank 0, DDP005), then reads back.
        Example(
            """
            import csv
            import torch
            from torch.utils.data import DataLoader


            def write_csv(path, n):
                with open(path, "w") as f:
                    csv.writer(f).writerows([[i, i % 2] for i in range(n)])


            def main():
                write_csv("data/train.csv", 100)
                rows = list(csv.reader(open("data/train.csv")))
                loader = DataLoader(make_dataset(rows), batch_size=8, shuffle=True)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    model(x).sum().backward()
                    optimizer.step()


            main()
            """,
            """
            import csv
            import torch
            from torch.utils.data import DataLoader
            import torch.distributed as dist


            def write_csv(path, n):
                with open(path, "w") as f:
                    csv.writer(f).writerows([[i, i % 2] for i in range(n)])


            def main():
                write_csv("data/train.csv", 100)
                dist.barrier()
                rows = list(csv.reader(open("data/train.csv")))
                loader = DataLoader(make_dataset(rows), batch_size=8, shuffle=True)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    model(x).sum().backward()
                    optimizer.step()


            main()
            """,
        ),
        # Saved (by rank 0 once DDP005 guards it), then read back by every rank.
        Example(
            """
            import torch

            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            torch.save(model.state_dict(), "model.pt")
            model = Net()
            model.load_state_dict(torch.load("model.pt"))
            """,
            """
            import torch
            import torch.distributed as dist

            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
                optimizer.step()
            torch.save(model.state_dict(), "model.pt")
            model = Net()
            dist.barrier()
            model.load_state_dict(torch.load("model.pt", map_location=device, weights_only=True))
            """,
        ),
        Example(
            """
            import torch

            def main():
                model = Net().to(device)
                state = torch.load("model.pt")
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()

            main()
            """,
            """
            import torch

            def main():
                model = Net().to(device)
                state = torch.load("model.pt", map_location=device, weights_only=True)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()

            main()
            """,
        ),
        # A run folder picked by testing what exists (YOLOv5's increment_path): rank 0's.
        Example(
            """
            import os

            import torch


            def next_run_dir(root):
                n = 1
                while os.path.exists(f"{root}/run{n}"):
                    n += 1
                return f"{root}/run{n}"


            def main():
                run_dir = next_run_dir("runs")
                os.makedirs(run_dir)
                model = Net()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                torch.save(model.state_dict(), os.path.join(run_dir, "model.pt"))


            main()
            """,
            """
            import os

            import torch
            import torch.distributed as dist


            def next_run_dir(root):
                n = 1
                while os.path.exists(f"{root}/run{n}"):
                    n += 1
                return f"{root}/run{n}"


            def main():
                run_dir = next_run_dir("runs")
                run_dir = [run_dir]
                dist.broadcast_object_list(run_dir)  # every process takes rank 0's
                run_dir = run_dir[0]
                os.makedirs(run_dir)
                model = Net()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                torch.save(model.state_dict(), os.path.join(run_dir, "model.pt"))


            main()
            """,
        ),
    )

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        for call in anatomy.distributed.torch_load_calls:
            added = []
            if call_arg(call, 1, "map_location") is None:
                # RNG states must stay CPU byte tensors (`torch.set_rng_state` rejects others)
                cpu = _holds_rng_states(anatomy, call)
                added.append(("map_location", expression('"cpu"') if cpu else ctx.device(call)))
            if call_arg(call, None, "weights_only") is None:
                added.append(("weights_only", expression("True")))
            if not added:
                continue

            def extend(updated, added=tuple(added)):  # type: ignore[no-untyped-def]
                for keyword, value in added:
                    updated = with_keyword(updated, keyword, value)
                return updated

            ctx.plan.replace(call, extend)
            ctx.changed(call, f"torch.load gets {' and '.join(k for k, _ in added)}")
        shared: set[cst.Assign] = set()
        waits = [
            *(_opened_at(anatomy, call) for call in _loads(anatomy)),
            *(anatomy.statement_of(call) for call in _helpers_reading_after_training(anatomy)),
        ]
        reads = _reads_what_rank_zero_wrote(anatomy) + _reads_back(anatomy, waits)
        reads = list({id(read): read for read in reads}.values())
        for call in _loads(anatomy):
            if _reads_what_was_just_saved(anatomy, call):
                opened = _opened_at(anatomy, call)
                if not _waited_just_before(anatomy, opened, reads):
                    ctx.plan.insert_before(opened, [statement("dist.barrier()\n")])
                ctx.add_import("torch.distributed", asname="dist")
                ctx.changed(call, "every rank waits for rank 0's save before it loads the file")
                path = call_arg(call, 0, "f")
                assert path is not None
                for assign in _drawn_per_process(anatomy, path.value, anatomy.function_of(call)):
                    if assign not in shared:
                        shared.add(assign)
                        _share(ctx, assign)
        for assign in _paths_found_on_disk(anatomy):
            if assign not in shared:
                shared.add(assign)
                _share(
                    ctx,
                    assign,
                    "is picked by looking at the disk (the next free run folder), which each "
                    "process does at its own moment",
                )
        for read in reads:
            ctx.plan.insert_before(read, [statement("dist.barrier()\n")])
            ctx.add_import("torch.distributed", asname="dist")
            ctx.changed(read, "every rank waits for rank 0's write before it reads the file back")
        for call in _helpers_reading_after_training(anatomy):
            ctx.plan.insert_before(anatomy.statement_of(call), [statement("dist.barrier()\n")])
            ctx.add_import("torch.distributed", asname="dist")
            ctx.changed(
                call,
                f"every rank waits for rank 0's saves before `{dotted(call.func)}()` reads "
                "the checkpoints back",
            )


def _waited_just_before(
    anatomy: Anatomy, opened: cst.CSTNode, reads: list[cst.BaseStatement]
) -> bool:
    """Whether a barrier for a read goes right before `opened` in its block, with nothing
    that writes between (`best_epoch = int(path.read_text())`, then the best weights'
    `torch.load`: one barrier for both)."""
    if not isinstance(opened, cst.BaseStatement) or not isinstance(
        anatomy.parent(opened), cst.IndentedBlock | cst.Module
    ):
        return False
    body = list(anatomy.body_of(opened))
    for earlier in reversed(body[: body.index(opened)]):
        if any(read is earlier for read in reads):
            return True
        if anatomy.effects.writes_files(earlier):
            return False
    return False


def _opened_at(anatomy: Anatomy, call: cst.Call) -> cst.CSTNode:
    """The statement the barrier goes before: the load's, or the `with open(path) as f:`
    that opens the file it reads (pytorch/examples' word language model): rank 1 opening
    it before rank 0 has written it would not find it."""
    path = call_arg(call, 0, "f")
    if path is not None and isinstance(path.value, cst.Name):
        for ancestor in anatomy.ancestors(call):
            if isinstance(ancestor, cst.With) and any(
                item.asname is not None and dotted(item.asname.name) == path.value.value
                for item in ancestor.items
            ):
                return ancestor
        found = _found_on_disk(anatomy, call, path.value)
        if found is not None:
            return found
    return anatomy.statement_of(call)


def _found_on_disk(anatomy: Anatomy, call: cst.Call, path: cst.Name) -> cst.CSTNode | None:
    """The statement before the load, in a block around it, that finds the file it reads by
    looking at the disk (`best_file = sorted(glob.glob("best_*.pt"))[-1]`): rank 1 looking
    before rank 0 has written the file would not find it (round-41 audit B c9_bestglob:
    IndexError, the barrier came after the glob)."""
    scope = anatomy.function_of(call)
    for value, where in anatomy.values.values_of(path.value, scope):
        if where is not scope or not anatomy.precedes(value, call):
            continue
        if not any(_probes(anatomy, node) for node in walk(value)):
            continue
        statement_ = anatomy.statement_of(value)
        block = anatomy.parent(statement_)
        if block is not None and anatomy.inside(call, block):
            return statement_
    return None


# Modules whose values differ between processes that compute them "at the same time".
PER_PROCESS = ("time.", "datetime.", "uuid.", "random.", "tempfile.", "socket.gethostname")


def _drawn_per_process(
    anatomy: Anatomy, expr: cst.BaseExpression, scope: cst.FunctionDef | None, depth: int = 0
) -> list[cst.Assign]:
    """The assignments `name = <clock or random draw>` the path `expr` is built from
    (`run_dir = os.path.join(runs, time.strftime(...))`): each process draws its own, so
    rank 0 would write where the others do not read."""
    found: list[cst.Assign] = []
    if depth > 3:
        return found
    for node in walk(expr):
        if not isinstance(node, cst.Name):
            continue
        for value, where in anatomy.values.values_of(node.value, scope):
            assign = anatomy.parent(value)
            drawn = any(
                isinstance(inner, cst.Call)
                and any(
                    name.startswith(PER_PROCESS) for name in anatomy.qualified_names(inner.func)
                )
                for inner in walk(value)
            )
            if drawn and isinstance(assign, cst.Assign) and len(assign.targets) == 1:
                found.append(assign)
            elif not drawn:
                found += _drawn_per_process(anatomy, value, where, depth + 1)
    return found


def _share(
    ctx: ConvertContext,
    assign: cst.Assign,
    why: str = "differs between processes (a clock or a random draw)",
) -> None:
    """Every process takes rank 0's value, right where it is drawn."""
    name = cst.Module([]).code_for_node(assign.targets[0].target)
    take_rank_zeros(ctx.plan, ctx.anatomy.statement_of(assign), name)
    ctx.add_import("torch.distributed", asname="dist")
    ctx.changed(
        assign,
        f"`{name}` {why}: every process takes rank 0's, so the others read the files rank 0 writes",
    )


# What looks at the disk, by name and by method (`Path.exists()`).
PROBES = {
    "os.path.exists", "os.path.isdir", "os.path.isfile", "os.listdir", "os.scandir",
    "glob.glob", "glob.iglob",
}  # fmt: skip
PROBE_METHODS = ("exists", "is_dir", "is_file", "iterdir", "glob")
# The names a path goes by (`save_dir`, `opt.save_dir`, `run_path`, `log_folder`).
PATH_NAME = re.compile(r"(dir|path|folder)$", re.IGNORECASE)


def _paths_found_on_disk(anatomy: Anatomy) -> list[cst.Assign]:
    """`opt.save_dir = str(increment_path(Path(opt.project) / opt.name))` (YOLOv5, round-21
    audit A yolo_train_b): a helper of the script picks the path by testing what exists, so
    every process may pick another (rank 1 made an empty `exp2/` beside rank 0's `exp/`).
    Assignments of a path name, run by every process in the straight line of their function
    after the process group is set up."""
    found = []
    for assign in anatomy.assigns:
        if len(assign.targets) != 1:
            continue
        target = cst.Module([]).code_for_node(assign.targets[0].target)
        if not PATH_NAME.search(target) or not anatomy.script.after_setup(assign):
            continue
        if not _in_straight_line(anatomy, anatomy.statement_of(assign)):
            continue
        if any(
            anatomy.graph.reaches(function.body, lambda node: _probes(anatomy, node))
            for node in walk(assign.value)
            if isinstance(node, cst.Call)
            for function in anatomy.graph.callees(node)
        ):
            found.append(assign)
    return found


def _probes(anatomy: Anatomy, node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and (
        anatomy.is_call_to(node, PROBES) or is_method_call(node, *PROBE_METHODS)
    )


def _in_straight_line(anatomy: Anatomy, statement: cst.BaseStatement) -> bool:
    """Whether every process runs `statement` when it runs its function (or the module): no
    loop, branch or `try` around it but the module's `if __name__ == "__main__":`."""
    for ancestor in anatomy.ancestors(statement):
        if isinstance(ancestor, cst.FunctionDef | cst.Module):
            return True
        if isinstance(ancestor, cst.If) and ancestor is anatomy.script.main_guard:
            continue
        if not isinstance(ancestor, cst.IndentedBlock):
            return False
    return True


# What reads back files written while training: loads, and listings of a folder.
LOADS = {"torch.load", "torch.jit.load"}
LISTINGS = {"glob.glob", "glob.iglob", "os.listdir", "os.scandir", "os.walk"}


def _loads(anatomy: Anatomy) -> list[cst.Call]:
    return [call for call in anatomy.calls if anatomy.is_call_to(call, LOADS)]


def _helpers_reading_after_training(anatomy: Anatomy) -> list[cst.Call]:
    """Calls of the script's functions, after training in their own function, that load
    files or list a folder (fairseq's checkpoint averaging: `last_n_checkpoints(dir, n)`
    globs the folder, `average_checkpoints(paths)` loads each, round-15 audit s35), in a
    script that saves on rank 0: the first of each function waits for those saves."""
    project = anatomy.project
    if not any(
        anatomy.is_call_to(call, MODEL_SAVES)
        or ((helper := project.helper(call)) is not None and project.effects(helper).writes)
        for call in anatomy.calls
    ):  # (a student project's `utils.save_checkpoint(state, is_best)`, round-26 audit B)
        return []
    found: dict[int, cst.Call] = {}
    for call in anatomy.calls:
        if (
            anatomy.ranks.guard(call) is not None
            or not _reads_checkpoints(anatomy, call)
            or not _after_training(anatomy, call)
        ):
            continue
        scope = id(anatomy.function_of(call))
        if scope not in found or anatomy.precedes(call, found[scope]):
            found[scope] = call
    return list(found.values())


def _reads_checkpoints(anatomy: Anatomy, call: cst.Call) -> bool:
    """`call` runs a function of the script, or of another file of its project (`ckpt =
    load_checkpoint(path, model)` from `utils.py`), that loads files or lists a folder."""
    if any(
        anatomy.graph.reaches(
            function.body,
            lambda node: isinstance(node, cst.Call) and anatomy.is_call_to(node, LOADS | LISTINGS),
        )
        for function in anatomy.graph.callees(call)
    ):
        return True
    helper = anatomy.project.helper(call)
    return helper is not None and helper.graph.reaches(
        helper.function.body,
        lambda node: isinstance(node, cst.Call) and helper.index.is_call_to(node, LOADS | LISTINGS),
    )


# Readers of a file by its path, besides `open(path)` for reading (torch.load is `_loads`').
READS = {
    "numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile", "pandas.read_csv",
    "pandas.read_parquet", "pandas.read_json", "pandas.read_pickle", "pandas.read_table",
    "PIL.Image.open",
}  # fmt: skip


def _reads_what_rank_zero_wrote(anatomy: Anatomy) -> list[cst.BaseStatement]:
    """Statements, before the training in its function (or at module level), that read a
    file a statement before them wrote (by the same path: a string, or a name), when that
    write is rank 0's (DDP005): a data file the script makes, then loads (a Kaggle kernel
    writing its own `data/train.csv`, round-23 audit B titanic_tabular: rank 1 read it before
    rank 0 had written it). The barrier goes before the first such read."""
    scopes: dict[int, cst.FunctionDef | None] = {}
    for loop in anatomy.script.train_loops:
        scope = anatomy.function_of(loop.epoch_loop or loop.batch_loop)
        scopes[id(scope)] = scope
        for site in anatomy.graph.callers(scope):
            # and the functions that call it (a config file written and read back in the
            # `__main__` block before `main(cfg)`: round-44 audit E cfg_generator)
            caller = anatomy.function_of(site)
            scopes[id(caller)] = caller
    found: list[cst.BaseStatement] = []
    training = _training(anatomy)
    for scope in scopes.values():
        body: Sequence[cst.CSTNode] = scope.body.body if scope is not None else anatomy.module.body
        guard = anatomy.script.main_guard
        if scope is None and guard is not None and guard in body:
            body = [*body[: list(body).index(guard)], *guard.body.body]
        written: set[str] = set()
        for statement_ in body:
            if not isinstance(statement_, cst.BaseStatement) or isinstance(
                statement_, cst.FunctionDef | cst.ClassDef
            ):
                continue
            if anatomy.graph.reaches(statement_, lambda node: node in training):
                # the training's own writes and reads are followed elsewhere; after it, a
                # file written and read back (`np.savetxt(p, ...)`, then `np.loadtxt(p)`:
                # round-48 audit D json_resume) again
                written = set()
                continue
            if not anatomy.script.after_setup(statement_) or anatomy.ranks.guard(statement_):
                continue
            paths = _paths_given(statement_)
            if (
                written
                and paths & written
                and anatomy.graph.reaches(statement_, lambda node: _reads_a_file(anatomy, node))
            ):
                found.append(statement_)
                written = set()
            if anatomy.effects.writes_files(statement_) and not _written_when_missing(
                anatomy, statement_
            ):
                written |= paths
    return found


def _reads_back(anatomy: Anatomy, waits: list[cst.CSTNode]) -> list[cst.BaseStatement]:
    """The first statement after a training loop, in its block, that reads a file (`pickle.
    load(open(path, "rb"))`, `np.loadtxt(path)`), when the training writes files (rank 0's,
    DDP005) and no wait for them comes first (round-42 audit B outdir_plots: rank 1 read a
    stale history.pkl, then found no preds file)."""
    found: list[cst.BaseStatement] = []
    training = _training(anatomy)
    for loop in anatomy.script.train_loops:
        outer = loop.epoch_loop or loop.batch_loop
        if not anatomy.effects.writes_files(outer):
            continue
        body = list(anatomy.body_of(outer))
        at = next((i for i, node in enumerate(body) if node is outer), None)
        if at is None:
            continue
        for later in body[at + 1 :]:
            if any(wait is later or anatomy.inside(wait, later) for wait in waits):
                break  # a wait already there (a torch.load's barrier)
            if anatomy.graph.reaches(later, lambda node: node in training):
                break
            if anatomy.ranks.guard(later) is None and anatomy.graph.reaches(
                later, lambda node: _reads_a_file(anatomy, node)
            ):
                found.append(later)
                break
    return list({id(statement_): statement_ for statement_ in found}.values())


def _written_when_missing(anatomy: Anatomy, statement_: cst.BaseStatement) -> bool:
    """`if not os.path.exists(path):` with the writes in its own body: a cache DDP005 has
    rank 0 make first while the others wait at a barrier of their own (the writes of a
    helper it calls are guarded in the helper, with no such barrier)."""
    return (
        isinstance(statement_, cst.If)
        and any(
            isinstance(node, cst.Call)
            and (dotted(node.func) or "").rsplit(".", 1)[-1] in ("exists", "isfile", "isdir")
            for node in walk(statement_.test)
        )
        and any(
            isinstance(node, cst.SimpleStatementLine | cst.With)
            and anatomy.effects.of(node) in FILE_WRITES
            for node in walk(statement_.body)
        )
    )


def _training(anatomy: Anatomy) -> set[cst.CSTNode]:
    return {
        *anatomy.script.training_calls,
        *(loop.batch_loop for loop in anatomy.script.train_loops),
    }


def _paths_given(statement_: cst.BaseStatement) -> set[str]:
    """The strings in `statement_` itself (not in the functions it calls) that look like
    paths (`"data/train.csv"`, also in a loop's list of files), and the names given as
    arguments of its calls."""
    found: set[str] = set()
    for node in walk(statement_):
        if isinstance(node, cst.SimpleString):
            text = node.evaluated_value
            if isinstance(text, str) and ("." in text or "/" in text) and not text.split()[1:]:
                found.add(text)
        if not isinstance(node, cst.Call):
            continue
        for arg in node.args:
            value = arg.value
            if isinstance(value, cst.Name | cst.Attribute) and (name := dotted(value)):
                found.add(name)
    return found


def _reads_a_file(anatomy: Anatomy, node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.Call):
        return False
    if dotted(node.func) == "open":
        return not opens_for_writing(node)
    if is_method_call(node, "read_text", "read_bytes"):
        return True  # a pathlib path's (round-45 audit D c2_outputs_path)
    return anatomy.is_call_to(node, READS)


def _reads_what_was_just_saved(anatomy: Anatomy, load: cst.Call) -> bool:
    """Whether `load` reads the path a `torch.save` earlier in the same function, or in
    another function, wrote (the same path expression): the save runs on rank 0 only
    (DDP005), so the other ranks must wait for it."""
    path = call_arg(load, 0, "f")
    if path is None or anatomy.ranks.guard(load) is not None:
        return False
    if anatomy.effects.private_path(path.value, anatomy.function_of(load)):
        return False  # this process's own file, which it wrote itself
    saves = [call for call in anatomy.calls if anatomy.is_call_to(call, MODEL_SAVES)]
    if (saves or _saved_by_helpers(anatomy)) and _after_training(anatomy, load):
        return True  # the best checkpoint reloaded at the end: saved wherever training saves
    code = cst.Module([]).code_for_node
    for save in saves:
        written = call_arg(save, 1, "f")
        if written is None or code(written.value) != code(path.value):
            continue
        if anatomy.function_of(save) is anatomy.function_of(load):
            if anatomy.precedes(save, load):
                return True
        elif anatomy.script.after_setup(load):
            # Saved by another function (`pretrain()` writes the encoder `finetune()`
            # loads): whichever runs first, a barrier where every rank loads costs a sync.
            return True
    return False


def _saved_by_helpers(anatomy: Anatomy) -> bool:
    """Whether the script calls a helper of another project file that saves with
    `torch.save` (`save_checkpoint(state, is_best)` of `utils.py`, put on rank 0 by DDP005:
    round-44 audit E proj_engine)."""
    for call in anatomy.calls:
        if anatomy.graph.calls_script(call):
            continue
        helper = anatomy.project.helper(call)
        if helper is not None and set(anatomy.project.effects(helper).writes) & MODEL_SAVES:
            return True
    return False


def _after_training(anatomy: Anatomy, load: cst.Call) -> bool:
    """Whether `load` runs after a training loop of its own function is done, or after a
    call in its function that trains (`history = fit(model, ...)`, then the best weights)."""
    function = anatomy.function_of(load)
    backward = set(anatomy.script.training_calls)
    statement = anatomy.statement_of(load)
    for earlier in anatomy.body_of(statement):
        if earlier is statement:
            break
        if anatomy.graph.reaches(earlier, lambda node: node in backward):
            return True
    for loop in anatomy.script.train_loops:
        outer = loop.epoch_loop or loop.batch_loop
        for candidate in (outer, loop.batch_loop):
            if (
                anatomy.function_of(candidate) is function
                and anatomy.precedes(candidate, load)
                and not anatomy.inside(load, candidate)
            ):
                return True
    return False


# Calls that restore a generator's state from a CPU byte tensor.
RNG_SETTERS = {
    "torch.set_rng_state",
    "torch.random.set_rng_state",
    "torch.cuda.set_rng_state",
    "torch.cuda.set_rng_state_all",
    "torch.cuda.random.set_rng_state",
    "torch.cuda.random.set_rng_state_all",
}


def _holds_rng_states(anatomy: Anatomy, call: cst.Call) -> bool:
    """What `call` loads restores a random generator's state (`r = torch.load(...)`, then
    `torch.set_rng_state(r["torch"])`, round-27 audit A): moved to a GPU by
    `map_location=device`, the state is refused ("RNG state must be a torch.ByteTensor")."""
    parent = anatomy.parent(call)
    if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1):
        return False
    target = parent.targets[0].target
    if not isinstance(target, cst.Name):
        return False
    scope = anatomy.function_of(call)
    # and the names taken from it (`rng_state = checkpoint["rng_state"]`, kuangliu-style
    # mixup's resume, round-35 audit C augment_module_mixup_cutmix_b)
    names = {target.value} | {
        assign.targets[0].target.value
        for assign in anatomy.assigns
        if anatomy.function_of(assign) is scope
        and len(assign.targets) == 1
        and isinstance(assign.targets[0].target, cst.Name)
        and any(is_name(n, target.value) for n in walk(assign.value))
    }
    return any(
        anatomy.is_call_to(setter, RNG_SETTERS)
        and anatomy.function_of(setter) is scope
        and any(is_name(n, *names) for arg in setter.args for n in walk(arg.value))
        for setter in anatomy.calls
    )
