"""DDP005: prints, logs and file writes happen once, on global rank 0."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import cast

import libcst as cst

from ddpify.analysis.anatomy import Anatomy
from ddpify.analysis.api import EXPORTS, MODEL_SAVES
from ddpify.analysis.effects import FILE_WRITES, mode_flags, opens_for_writing
from ddpify.analysis.project import PRINTS, Helper, only_prints, runs_collective
from ddpify.analysis.ranks import exits
from ddpify.analysis.tree import call_arg, dotted, is_lone, is_method_call, is_name, walk
from ddpify.analysis.values import MAX_STEPS
from ddpify.emit import RANK_ZERO, expression, statement, statements, with_keyword
from ddpify.fixes import rank_zeros
from ddpify.options import Launcher
from ddpify.rule import ConvertContext, ConvertRule, Example


class RankZeroSideEffects(ConvertRule):
    """
    ## What it does
    Runs `print`, logging calls, `torch.save`, TensorBoard and wandb logging, and
    `with open(..., "w")` blocks on global rank 0 only: `if dist.get_rank() == 0:`.
    Neighbouring statements share one guard. `dist.get_rank()` is the *global* rank, so a
    run over several nodes still writes once (a `LOCAL_RANK == 0` guard writes once per
    node, into the same file). A `tqdm` progress bar gets `disable=dist.get_rank() != 0`:
    one bar, rank 0's, instead of one per process drawn over each other. A dataset made
    with `download=True` is made by rank 0 first while the others wait at a barrier, then
    by them (they find the files): HF's and torchvision's "main process first". So is a
    call of the script's own function or class whose writes are now rank 0's and which
    reads files too (a dataset that writes its cache when the folder is missing, then
    lists it). A `logging.FileHandler` gets `delay=True` (the file is opened at its first
    record, which only rank 0 writes), unless it is made where it is added, and is added,
    like `basicConfig(filename=...)`, on rank 0 only. `wandb.init(...)` gets `mode=None if
    dist.get_rank() == 0 else "disabled"`: the other processes' runs, and all they log
    through them, do nothing.

    A statement that runs a collective or a forward pass through the wrapped model is never
    guarded: the other ranks would wait for rank 0 forever. A print or log line that shows
    what such a call computes (`print(f"acc {accuracy(model, loader)}")`) computes it first,
    into a variable, on every rank, and prints on rank 0; anything else is reported. A
    model built again after training (to reload the best weights) is a bare module: a
    print that runs it goes on rank 0. A call of a helper of another file that writes files,
    or that does nothing but print (kuangliu's `progress_bar(...)` from `utils.py`), goes on
    rank 0 when it is given no model. A helper of another file that writes files and is
    given the model, called where it cannot go on rank 0 alone (its result is kept, or it
    is an object whose state every process reads: an imported `EarlyStopping` saving the
    best checkpoint), is refused, naming the file.

    ## Why is this bad?
    N processes print every line N times and write every checkpoint N times, concurrently,
    into the same file.
    """

    code = "DDP005"
    step = 5
    name = "rank-zero-side-effects"
    message = "print, log and write files on global rank 0 only"
    fix_safety = (
        "Safe: only statements free of collectives and forward passes are guarded; the calls "
        "a print shows that run them are computed before it, on every rank."
    )
    examples = (
        # Compute, then print: the evaluation runs the wrapped model on every rank.
        Example(
            """
            import torch

            model = Net().to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                print(f"epoch {epoch} accuracy {accuracy(model, val_loader):.3f}")
            """,
            """
            import torch

            model = Net().to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                accuracy_result = accuracy(model, val_loader)
                if dist.get_rank() == 0:
                    print(f"epoch {epoch} accuracy {accuracy_result:.3f}")
            """,
        ),
        # A TensorBoard writer handed to the training function (PyTorch's TensorBoard
        # tutorial): made on rank 0 only, None on the others, so the name exists everywhere.
        Example(
            """
            import torch
            from torch.utils.tensorboard import SummaryWriter

            def train_one_epoch(model, loader, optimizer, writer, epoch):
                for i, (x, y) in enumerate(loader):
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    writer.add_scalar("loss", loss.item(), epoch * len(loader) + i)

            def main():
                writer = SummaryWriter("runs/demo")
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for epoch in range(3):
                    train_one_epoch(model, loader, optimizer, writer, epoch)
                writer.close()

            main()
            """,
            """
            import torch
            from torch.utils.tensorboard import SummaryWriter
            import torch.distributed as dist

            def train_one_epoch(model, loader, optimizer, writer, epoch):
                for i, (x, y) in enumerate(loader):
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    if dist.get_rank() == 0:
                        writer.add_scalar("loss", loss.item(), epoch * len(loader) + i)

            def main():
                writer = SummaryWriter("runs/demo") if dist.get_rank() == 0 else None
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for epoch in range(3):
                    train_one_epoch(model, loader, optimizer, writer, epoch)
                if dist.get_rank() == 0:
                    writer.close()

            main()
            """,
        ),
        # A wandb run: disabled on the other ranks, so nothing they log through it counts.
        Example(
            """
            import torch
            import wandb

            def main():
                run = wandb.init(project="demo")
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    run.log({"loss": loss.item()})

            main()
            """,
            """
            import torch
            import wandb
            import torch.distributed as dist

            def main():
                run = wandb.init(project="demo", mode=None if dist.get_rank() == 0 else "disabled")
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                    run.log({"loss": loss.item()})

            main()
            """,
        ),
        # A PIL image saved: a file write, found by what made the image.
        Example(
            """
            import torch
            from PIL import Image

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                image = Image.fromarray(grid).convert("RGB")
                image.save(f"sample_{epoch}.png")
                layers.save("layers.txt")
            """,
            """
            import torch
            from PIL import Image

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                image = Image.fromarray(grid).convert("RGB")
                if dist.get_rank() == 0:
                    image.save(f"sample_{epoch}.png")
                layers.save("layers.txt")
            """,
        ),
        # The model run inside a comprehension: the whole value shown is computed first.
        Example(
            """
            import torch

            model = Net().to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                print("val", sum(model(x).sum().item() for x, y in val) / len(val))
            """,
            """
            import torch

            model = Net().to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                value_result = sum(model(x).sum().item() for x, y in val) / len(val)
                if dist.get_rank() == 0:
                    print("val", value_result)
            """,
        ),
        # A model built again after training (the best weights reloaded for a test) is a
        # bare module: a print that runs it needs no other rank and goes on rank 0.
        Example(
            """
            import torch

            model = Net().to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            model = Net().to(device)
            print(f"test accuracy {evaluate(model, test_loader):.3f}")
            """,
            """
            import torch

            model = Net().to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            model = Net().to(device)
            if dist.get_rank() == 0:
                print(f"test accuracy {evaluate(model, test_loader):.3f}")
            """,
        ),
        # One progress bar: rank 0's (the others still iterate, silently).
        Example(
            """
            import torch
            from tqdm import tqdm

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                for x, y in tqdm(loader, desc=f"epoch {epoch}"):
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
            """
            import torch
            from tqdm import tqdm
            import torch.distributed as dist

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                for x, y in tqdm(loader, desc=f"epoch {epoch}", disable=dist.get_rank() != 0):
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
            """,
        ),
        Example(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                print(f"epoch {epoch}: {loss.item():.4f}")
                torch.save(model.state_dict(), "model.pt")
            """,
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(3):
                for x, y in loader:
                    loss = model(x).sum()
                    loss.backward()
                    optimizer.step()
                if dist.get_rank() == 0:
                    print(f"epoch {epoch}: {loss.item():.4f}")
                    torch.save(model.state_dict(), "model.pt")
            """,
        ),
    )

    def prepare(self, ctx: ConvertContext) -> None:
        _split_shared_lines(ctx)

    def convert(self, ctx: ConvertContext) -> None:
        anatomy = ctx.anatomy
        model_names = set().union(*(model.names for model in anatomy.models.all))
        guarded: list[cst.CSTNode] = []
        taken: set[str] = set()  # names given to values computed before a print
        for node in anatomy.simple_statements:
            kind = anatomy.effects.of(node)
            if (
                kind is None
                or anatomy.ranks.guard(node) is not None
                or any(anatomy.inside(node, outer) for outer in guarded)
            ):
                continue
            if not anatomy.script.after_setup(node):
                _before_setup(ctx, node, kind, guarded)
                continue
            private = anatomy.effects.private(node) if kind in FILE_WRITES else None
            if private:
                ctx.info(
                    node,
                    f"{kind} on every rank: it goes where only this process looks (made by "
                    f"`{private}`), and each process reads back its own",
                )
                continue
            blocker = _must_run_everywhere(anatomy, node, model_names)
            # (a write too: `np.save(path, model(x).numpy())`, round-19 audit s26, s31)
            if blocker and blocker in MODEL_RUNS:
                shown = _hoist_model_runs(ctx, node, model_names, taken)
                if shown:
                    ctx.plan.guard(node, expression(RANK_ZERO))
                    guarded.append(node)
                    ctx.changed(
                        node,
                        f"{kind} on rank 0 only; what it shows ({shown}) is computed first, "
                        f"on every rank, since it runs {RUNS.get(blocker, 'the model')}",
                    )
                    continue
            if blocker and isinstance(node, cst.With) and _devnull_with(ctx, node):
                continue  # `with open(...) as log:` around the training (round-15 s33)
            if blocker:
                ctx.cannot(
                    node,
                    f"{kind} not guarded: it runs {blocker}, which every rank must",
                    blocking=kind not in {"print", "logging"},  # else a file of two writers
                )
                continue
            ctx.plan.guard(node, expression(RANK_ZERO))
            guarded.append(node)
            ctx.changed(node, f"{kind} on rank 0 only")
        _one_line_blocks(ctx, model_names, guarded)
        _one_line_suites(ctx, model_names, guarded)
        _rank_zero_first(ctx, guarded)
        for run in anatomy.calls:
            if (
                anatomy.is_call_to(run, {"wandb.init"})
                and call_arg(run, None, "mode") is None
                and anatomy.script.after_setup(run)
            ):
                ctx.plan.replace(
                    run,
                    lambda updated: with_keyword(
                        updated, "mode", expression('None if dist.get_rank() == 0 else "disabled"')
                    ),
                )
                ctx.add_import("torch.distributed", asname="dist")
                ctx.changed(
                    run,
                    "wandb run on rank 0 only: the others' is disabled, and whatever they "
                    "log through it does nothing",
                )
        for line in _log_files_set_up(anatomy, guarded):
            ctx.plan.guard(line, expression(RANK_ZERO))
            guarded.append(line)
            ctx.changed(line, "log file set up on rank 0 only")
        for handler in _file_handlers(anatomy):
            if any(anatomy.inside(handler, node) for node in guarded):
                continue  # made on rank 0 only: it opens (and makes) the file as it did
            ctx.plan.replace(
                handler, lambda updated: with_keyword(updated, "delay", expression("True"))
            )
            ctx.changed(handler, "log file opened at its first record: rank 0's only")
        _writers_on_rank_zero(ctx, guarded)
        _attribute_writers_on_rank_zero(ctx, guarded)
        for bar in _progress_bars(anatomy):
            ctx.add_import("torch.distributed", asname="dist")
            ctx.plan.replace(
                bar, lambda updated: with_keyword(updated, "disable", expression(NOT_RANK_ZERO))
            )
            ctx.changed(bar, "progress bar shown on rank 0 only")
        helped = _guard_helpers(ctx, model_names) + _folders_made_on_rank_zero(ctx, model_names)
        _foreign_writers(ctx, [*guarded, *helped], model_names)
        _foreign_training(ctx)
        _kept_open(ctx)


# Rank 0 before the process group exists: the rank torchrun gives each process.
LAUNCHED_RANK_ZERO = 'int(os.environ.get("RANK", 0)) == 0'


def _before_setup(
    ctx: ConvertContext, node: cst.CSTNode, kind: str, guarded: list[cst.CSTNode]
) -> None:
    """A print or log line that runs before the process group is set up (`logging.info(f"Using
    device {device}")` at the top of the `__main__` block, round-9 audit b09; a warning
    printed at import): under torchrun every process runs it; on rank 0 only, read from the
    `RANK` torchrun sets (0 with plain `python`). A spawned worker re-imports the module
    without it: left as is there."""
    if kind not in {"print", "logging"} or ctx.options.launcher is not Launcher.TORCHRUN:
        return
    if ctx.anatomy.function_of(node) is not None or ctx.anatomy.script.entry is None:
        return
    ctx.plan.guard(node, expression(LAUNCHED_RANK_ZERO))
    guarded.append(node)
    ctx.add_import("os")
    ctx.changed(node, f"{kind} before the process group exists: on rank 0 only (torchrun's RANK)")


def _foreign_training(ctx: ConvertContext) -> None:
    """Training in a helper of another file: its writes, exits and prints are reported."""
    anatomy = ctx.anatomy
    for training in anatomy.script.foreign_training:
        where = f"`{training.helper.name}()` ({anatomy.project.shown(training.helper.path)})"
        if training.effects.writes:
            ctx.cannot(
                training.call,
                f"{where} trains and writes files (`{training.effects.writes[0]}`): "
                "every process would write them; put the writes under "
                "`if dist.get_rank() == 0:` in that file by hand",
                blocking=True,
            )
        if training.effects.exits:
            ctx.cannot(
                training.call,
                f"{where} leaves or skips steps of its loop on a test "
                f"(`{training.effects.exits[0]}`): if the test reads this process's own "
                "values (its loss), make every process take the same branch there",
            )
        if training.effects.prints and not training.effects.writes:
            ctx.info(
                training.call,
                f"{where} prints on every process: put its prints under "
                "`if dist.get_rank() == 0:` in that file if once is wanted",
            )


def _kept_open(ctx: ConvertContext) -> None:
    """A file opened for writing and kept open all run: rank 0's, os.devnull elsewhere."""
    anatomy = ctx.anatomy
    for assign in anatomy.assigns:
        value = assign.value
        if isinstance(value, cst.IfExp):
            # `tracker = open(path, "a") if args.with_tracking else None` (Hugging Face's
            # no_trainer scripts, round-49 audit A translation_generate: both ranks wrote it)
            opened = [
                branch
                for branch in (value.body, value.orelse)
                if isinstance(branch, cst.Call) and opens_for_writing(branch)
            ]
            value = opened[0] if len(opened) == 1 else value
        if isinstance(value, cst.Call) and not opens_for_writing(value):
            # `csv.writer(open("metrics.csv", "w"))`: the handle is the writer's
            value = next(
                (
                    arg.value
                    for arg in value.args
                    if isinstance(arg.value, cst.Call) and opens_for_writing(arg.value)
                ),
                value,
            )
        if (
            isinstance(value, cst.Call)
            and opens_for_writing(value, anatomy.function_of(assign))
            and anatomy.ranks.guard(assign) is None
        ):
            # Its writes are spread over the run (`csv.writer(f).writerow(...)` each
            # epoch): guarding them one by one is not enough, and not guarding them
            # leaves every rank writing the same file. The other ranks write to
            # os.devnull instead, through the same handle.
            if _devnull_elsewhere(ctx, assign, value):
                continue
            early = "" if anatomy.script.after_setup(assign) else " before the process group exists"
            ctx.cannot(
                assign,
                f"a file opened for writing{early} and kept open: every process would write "
                "it; open it and write to it on rank 0 only by hand",
                blocking=True,
            )


def _split_shared_lines(ctx: ConvertContext) -> None:
    """A write or print on a line of several statements (`fig.savefig(p); plt.close(fig)`,
    round-15 audit s03b) goes on a line of its own, each statement on its own line, so that
    it can be guarded alone."""
    anatomy = ctx.anatomy
    for line in anatomy.simple_statements:
        if (
            isinstance(line, cst.SimpleStatementLine)
            and len(line.body) > 1
            and any(anatomy.effects.of_part(small) for small in line.body)
        ):
            ctx.plan.replace(line, _one_statement_a_line)
            ctx.changed(line, "statements split one to a line, to guard the write alone")


def _one_statement_a_line(line: cst.SimpleStatementLine) -> cst.FlattenSentinel[cst.BaseStatement]:
    """`a(); b()  # note` as `a()` and `b()  # note`, on lines of their own."""
    parts = [small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for small in line.body]
    return cst.FlattenSentinel(
        [
            cst.SimpleStatementLine(
                body=[small],
                leading_lines=line.leading_lines if i == 0 else (),
                trailing_whitespace=(
                    line.trailing_whitespace if i == len(parts) - 1 else cst.TrailingWhitespace()
                ),
            )
            for i, small in enumerate(parts)
        ]
    )


def _devnull_with(ctx: ConvertContext, block: cst.With) -> bool:
    """`with open("results.jsonl", "w") as log:` around code every rank runs (a search's
    trials train the model): rank 0 opens the file, the others os.devnull."""
    opened = [
        item.item
        for item in block.items
        if isinstance(item.item, cst.Call) and opens_for_writing(item.item)
    ]
    return len(opened) == 1 and _devnull_elsewhere(ctx, block, opened[0])


def _devnull_elsewhere(
    ctx: ConvertContext, assign: cst.Assign | cst.With, opened: cst.Call
) -> bool:
    """`log = open("metrics.csv", "w")` kept open for the run becomes `open(...) if
    dist.get_rank() == 0 else open(os.devnull, "w")`: one line, and every write through the
    handle (`csv.writer(log)`, `print(..., file=log)`) lands once. Not for a file the process
    also reads back (`"w+"`), or for one only this process looks at. Opened at import, before
    the set-up (`LOG_FILE = open(OUT / "train.log", "a")` over a `main()`, round-45 audit D c6),
    rank 0 is the one torchrun calls 0; a spawned worker re-imports the module without it."""
    anatomy = ctx.anatomy
    by_path = isinstance(opened.func, cst.Attribute)  # `(out / "log.txt").open("a")`
    flags = "".join(mode_flags(opened, anatomy.function_of(assign)))
    rank_zero = RANK_ZERO
    if not anatomy.script.after_setup(assign):
        if anatomy.function_of(assign) is not None or ctx.options.launcher is not Launcher.TORCHRUN:
            return False
        rank_zero = LAUNCHED_RANK_ZERO
    if (
        "+" in flags
        or _synced_to_disk(anatomy)
        or anatomy.effects.private(anatomy.statement_of(assign)) is not None
        or call_arg(opened, None, "file") is not None
    ):
        return False
    code = cst.Module([]).code_for_node
    rest = ", ".join(code(arg).rstrip(", ") for arg in opened.args[0 if by_path else 1 :])
    elsewhere = f"open(os.devnull, {rest})"
    # a branch of `open(...) if args.with_tracking else None` keeps its own parentheses
    inner = isinstance(anatomy.parent(opened), cst.IfExp)
    ctx.plan.replace(
        opened,
        lambda updated: cst.IfExp(
            test=expression(rank_zero),
            body=updated,
            orelse=expression(elsewhere),
            lpar=[cst.LeftParen()] if inner else [],
            rpar=[cst.RightParen()] if inner else [],
        ),
    )
    ctx.add_import("os")
    if rank_zero == RANK_ZERO:
        ctx.add_import("torch.distributed", asname="dist")
    ctx.changed(
        assign,
        "a file kept open for the run: rank 0 writes it, the other processes write to "
        "os.devnull through the same handle",
    )
    return True


def _synced_to_disk(anatomy: Anatomy) -> bool:
    """The script calls `os.fsync(f.fileno())`, which os.devnull refuses (EINVAL: round-19
    audit s51's Tee logger, rank 1 ended with exit code 120)."""
    return any(anatomy.is_call_to(call, {"os.fsync", "os.fdatasync"}) for call in anatomy.calls)


def _rank_zero_first(ctx: ConvertContext, guarded: list[cst.CSTNode]) -> None:
    """Rank 0 runs what prepares files (or downloads) first, the others after a barrier."""
    anatomy = ctx.anatomy
    for first, last in _preparing_runs(anatomy, guarded):
        wrapped = _wraps_inside(anatomy, first, last)
        if wrapped is not None:
            ctx.cannot(
                first,
                f"rank 0 would write the files this reads first, but `{wrapped}` is "
                "wrapped in DDP (a collective) between the write and the read: the others "
                "would wait at the barrier while rank 0 waits in the wrap; make the model "
                "after the files, or order them by hand",
                blocking=True,
            )
            continue
        ctx.add_import("torch.distributed", asname="dist")
        _before_the_run(ctx, first, FIRST_PREPARE)
        ctx.plan.insert_after(last, [statement(THEN_THE_OTHERS)], first=True)
        ctx.changed(
            first,
            "rank 0 writes the files this call reads first, while the others wait; then "
            "they run it and find them (assumes one folder for all processes: one node "
            "or a shared filesystem)",
        )
        _continue_rank_zeros_draws(ctx, first, last)
    for first, last in _download_runs(anatomy):
        ctx.add_import("torch.distributed", asname="dist")
        _before_the_run(ctx, first, FIRST_DOWNLOAD)
        ctx.plan.insert_after(last, [statement(THEN_THE_OTHERS)], first=True)
        ctx.changed(
            first,
            "rank 0 downloads first while the others wait, then they find the files "
            "(assumes one data folder for all processes: one node or a shared "
            "filesystem; with a disk per node, test the local rank instead)",
        )


# How a seeded global generator's state is read and set, by family.
GENERATOR_STATES = {
    "numpy": ("numpy", "{m}.random.get_state()", "{m}.random.set_state({s}[0])"),
    "random": ("random", "{m}.getstate()", "{m}.setstate({s}[0])"),
    "torch": ("torch", "{m}.get_rng_state()", "{m}.set_rng_state({s}[0])"),
}


def _continue_rank_zeros_draws(ctx: ConvertContext, first: cst.CSTNode, last: cst.CSTNode) -> None:
    """The files rank 0 writes first are drawn from a seeded global generator (Kaggle-style
    synthetic data, `np.random.rand` under `if not os.path.exists(csv)`): the others skip
    those draws once they find the files, and a split drawn after it (`np.random.shuffle(
    idx)`) would differ between the processes (round-21 audit B kaggle_img). Every process
    continues from rank 0's generator state, as the single process did."""
    anatomy = ctx.anatomy
    assert isinstance(first, cst.BaseStatement) and isinstance(last, cst.BaseStatement)
    body = list(anatomy.body_of(first))
    run = body[body.index(first) : body.index(last) + 1]
    families: set[str] = set()

    def collect(node: cst.CSTNode) -> bool:
        family = anatomy.streams.drawn_from(node) if isinstance(node, cst.Call) else None
        if family is not None:
            families.add(family)
        return False  # look at every node

    for line in run:
        anatomy.graph.reaches(line, collect)
    seeded = {
        family
        for family in families
        if any(
            anatomy.streams.seed_family(call) == family and anatomy.precedes(call, first)
            for call in anatomy.calls
        )
    }
    lines = []
    for family in sorted(seeded):
        module, get, put = GENERATOR_STATES[family]
        spelled = next(
            (alias for alias, full in anatomy.import_aliases.items() if full == module), module
        )
        if spelled == module and module not in anatomy.imports:
            ctx.add_import(module)
        state = anatomy.free_name([f"{family}_state"])
        lines += [
            f"{state} = [{get.format(m=spelled)}]\n",
            f"dist.broadcast_object_list({state})  # every process draws on from rank 0's\n",
            f"{put.format(m=spelled, s=state)}\n",
        ]
    if lines:
        ctx.plan.insert_after(last, statements("".join(lines)))
        shown = ", ".join(sorted(seeded))
        ctx.changed(
            first,
            f"what rank 0 writes first is drawn at random ({shown}, seeded): the others, "
            "which skip those draws, go on from rank 0's generator state",
        )


def _before_the_run(ctx: ConvertContext, first: cst.CSTNode, barrier: str) -> None:
    """The barrier that opens a "rank 0 first" run: before what other rules insert above
    `first` (a dataset DDP004 names there), except the process group's set-up when the
    run is the first statement that needs it (nanoGPT's `prepare()`, round-15 audit s02b:
    the barrier had come before `init_process_group`)."""
    entry = ctx.anatomy.script.entry
    setup_here = entry is not None and entry.setup_before is first
    ctx.plan.insert_before(first, [statement(barrier)], outermost=not setup_here)


def _wraps_inside(anatomy: Anatomy, first: cst.CSTNode, last: cst.CSTNode) -> str | None:
    """The model DDP003 wraps after a statement from `first` up to, not including, `last`
    (the wrap after `last` itself comes after the closing barrier)."""
    holder = anatomy.parent(first)
    if not isinstance(holder, cst.IndentedBlock | cst.Module) or anatomy.parent(last) is not holder:
        return None
    block: list[cst.CSTNode] = list(holder.body)
    inside = {id(node) for node in block[block.index(first) : block.index(last)]}
    return next(
        (
            model.placed_name
            for model in anatomy.models.all
            if model.placement is not None and id(model.placement) in inside
        ),
        None,
    )


FIRST_DOWNLOAD = """\
if dist.get_rank() != 0:
    dist.barrier()  # rank 0 downloads first; the others then find the files
"""
FIRST_PREPARE = """\
if dist.get_rank() != 0:
    dist.barrier()  # rank 0 writes the files first; the others then find them
"""
THEN_THE_OTHERS = """\
if dist.get_rank() == 0:
    dist.barrier()
"""


# Calls that read what is on disk: a folder's listing, a file's existence or contents.
READS = {
    "listdir", "scandir", "walk", "glob", "iglob", "exists", "isdir", "isfile", "load",
    "loadtxt", "read_csv", "imread", "read_text", "read_bytes", "iterdir", "rglob",
    "memmap", "fromfile", "read_parquet", "read_pickle", "read_feather", "read_excel",
}  # fmt: skip


def _preparing_runs(
    anatomy: Anatomy, guarded: list[cst.CSTNode]
) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """Runs of neighbouring statements, made once by every process after the set-up (in no
    loop, under no rank test), that call a function or class of the script whose files
    this rule now writes on rank 0 and which also reads files (a dataset that writes its
    cache when it is missing, then lists it): the others would read before rank 0 wrote."""
    runs: list[tuple[cst.CSTNode, cst.CSTNode]] = []
    previous: cst.CSTNode | None = None
    blocks = [node for node in anatomy.ifs if not isinstance(anatomy.parent(node), cst.If)]
    candidates: list[cst.CSTNode] = [*anatomy.simple_statements, *blocks]  # not `elif`s
    for node in sorted(candidates, key=anatomy.order):
        if isinstance(node, cst.SimpleStatementLine) and _downloads(node):
            continue  # a download has its own "rank 0 first"
        if not isinstance(node, cst.SimpleStatementLine | cst.If):
            continue
        if any(anatomy.inside(node, run[0]) for run in runs):
            continue  # inside an `if` that runs rank 0 first as a whole
        if not _prepares(anatomy, node, guarded):
            continue
        if not anatomy.script.after_setup(node) or anatomy.ranks.guard(node) is not None:
            continue
        if any(kind == "loop" for _, kind in anatomy.graph.loops_around(node)):
            continue
        body = anatomy.body_of(node)
        position = list(body).index(node)
        if runs and previous is not None and position and body[position - 1] is previous:
            runs[-1] = (runs[-1][0], node)
        else:
            runs.append((node, node))
        previous = node
    return runs


def _reads_files(node: cst.CSTNode) -> bool:
    """`np.loadtxt(path)`, `os.listdir(folder)`, `open(path)` to read, ...: a call that reads
    what a path holds."""
    if not isinstance(node, cst.Call):
        return False
    if is_name(node.func, "open") and node.args:  # round-21 audit B char_rnn's read_file()
        mode = call_arg(node, 1, "mode")
        text = (
            mode.value.evaluated_value if mode and isinstance(mode.value, cst.SimpleString) else "r"
        )
        return isinstance(text, str) and not any(flag in text for flag in "wax+")
    return (dotted(node.func) or "").rsplit(".", 1)[-1] in READS


def _read_later(anatomy: Anatomy, statement: cst.CSTNode) -> bool:
    """Whether a statement after `statement`, in its block, reads files (`np.loadtxt(path)`
    after `if not os.path.exists(path): make_csv(path)`, round-11 audit d03)."""
    assert isinstance(statement, cst.BaseStatement)
    function = anatomy.function_of(statement)
    for outer in anatomy.ancestors(statement):  # after the `if not os.path.exists(...)` too
        if outer is function:
            break
        if isinstance(outer, cst.If | cst.With | cst.Try) and _read_after(anatomy, outer):
            return True
    return _read_after(anatomy, statement)


def _read_after(anatomy: Anatomy, statement: cst.BaseStatement) -> bool:
    body = list(anatomy.body_of(statement))
    # through the script's functions and classes too (`SentimentDataset(texts, vocab_path)`
    # reading the vocab.json `build_vocab` wrote: round-17 audit s33)
    # and through the project's other files (`CharTokenizer.from_file(train_path)` reading
    # the corpus `generate_corpus` wrote: round-33 audit C text_dataset_collate_module)
    return any(
        anatomy.graph.reaches(later, _reads_files)
        or any(
            anatomy.project.reaches(call, _reads_files)
            for call in walk(later)
            if isinstance(call, cst.Call)
        )
        for later in body[body.index(statement) + 1 :]
    )


def _prepares(
    anatomy: Anatomy, line: cst.SimpleStatementLine | cst.If, guarded: list[cst.CSTNode]
) -> bool:
    backward = {id(call) for call in anatomy.script.backward_calls}
    placed = {id(model.placement) for model in anatomy.models.all if model.placement is not None}
    if anatomy.graph.reaches(
        line,
        lambda node: (
            id(node) in backward
            or (id(node) in placed and node is not line)  # the wrap goes after `line`
            or (isinstance(node, cst.Call) and _trains_elsewhere(anatomy, node))
        ),
    ):
        # It trains (`main()`), or makes the model DDP wraps, a collective every rank must
        # join (round-19 audit p1: rank 1 waited at the barrier, rank 0 in the wrap): data
        # is prepared inside it, if anywhere.
        return False
    function = anatomy.function_of(line)
    if (
        isinstance(line, cst.If)
        and any(anatomy.inside(node, line) and _writes_files(anatomy, node) for node in guarded)
        and _read_later(anatomy, line)
        # (not `if args.eval_only: ...; np.save(...); return`: what comes after never
        # reads what the block writes; round-43 audit B ckpt_rotate: rank 0 returned
        # before its barrier, and the others waited at theirs)
        and not (line.orelse is None and exits(line.body))
        and (function is None or anatomy.graph.reaches(function.body, lambda n: id(n) in backward))
    ):
        # `if not os.path.exists(f): np.savez(f, ...)`, then `np.load(f)`, where the script
        # trains (round-12 audit e13); a helper's own `if` is run rank 0 first by its caller
        return True
    for call in walk(line):
        if not isinstance(call, cst.Call):
            continue
        # (a class of another file too: `CachedCorpus(path)` writing its cache in `__init__`
        # when it is missing, round-35 audit C dataset_cache_text_vocab_b: two ranks wrote it)
        helper = anatomy.project.runs(call)
        if (
            helper is not None
            and isinstance(line, cst.SimpleStatementLine)
            and isinstance(line.body[0], cst.Assign)
        ):
            # A helper of another file that writes files and gives back what it made
            # (`train_set = get_training_set()` downloading BSDS300 when it is missing);
            # not one that makes a writer, made on rank 0 alone (`get_logger(name, log)`)
            effects = anatomy.project.effects(helper)
            if (
                effects.writes
                and not effects.trains
                and not anatomy.project.writer_class(call)
                and not _only_shown(anatomy, line)
            ):
                return True
        if not anatomy.graph.calls_script(call):
            continue
        for function in anatomy.graph.callees(call):
            writes = any(
                anatomy.inside(node, function) and _writes_files(anatomy, node) for node in guarded
            )
            reads = any(_reads_files(node) for node in walk(function.body))
            if writes and (reads or _read_later(anatomy, line)):
                return True
    return False


def _writes_files(anatomy: Anatomy, node: cst.CSTNode) -> bool:
    """Whether a guarded statement (or block) writes files, not only prints or logs: an
    evaluation that prints its accuracy prepares nothing (round-22 audit B2 so_globals'
    `test()` before training was run rank 0 first)."""
    return any(
        anatomy.effects.of(line) in FILE_WRITES
        for line in walk(node)
        if isinstance(line, cst.SimpleStatementLine | cst.With)  # `with open(p, "w") as f:`
    )


def _trains_elsewhere(anatomy: Anatomy, call: cst.Call) -> bool:
    """A call of a helper in another file of the project that trains (`train_one_epoch`)."""
    helper = anatomy.project.helper(call)
    return helper is not None and anatomy.project.effects(helper).trains


def _download_runs(anatomy: Anatomy) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """Runs of neighbouring statements that download into a folder (`datasets.MNIST(root,
    download=True)`), made by every process at once after the set-up: the first and the
    last statement of each run. Every process runs them, so each passes one barrier."""
    runs: list[tuple[cst.CSTNode, cst.CSTNode]] = []
    previous: cst.CSTNode | None = None
    for node in anatomy.simple_statements:
        if not (isinstance(node, cst.SimpleStatementLine) and _downloads(node)):
            continue
        if not anatomy.script.after_setup(node) or anatomy.ranks.guard(node) is not None:
            continue
        body = anatomy.body_of(node)
        position = list(body).index(node)
        if runs and previous is not None and position and body[position - 1] is previous:
            runs[-1] = (runs[-1][0], node)
        else:
            runs.append((node, node))
        previous = node
    return runs


def _downloads(statement: cst.SimpleStatementLine) -> bool:
    return any(
        isinstance(node, cst.Arg)
        and node.keyword is not None
        and node.keyword.value == "download"
        and not is_name(node.value, "False", "None")
        for node in walk(statement)
    )


FILE_HANDLERS = {
    "logging.FileHandler", "logging.handlers.RotatingFileHandler",
    "logging.handlers.TimedRotatingFileHandler", "logging.handlers.WatchedFileHandler",
}  # fmt: skip


def _file_handlers(anatomy: Anatomy) -> list[cst.Call]:
    """`logging.FileHandler(path)` made on every rank after the set-up: it opens (`"w"`:
    truncates) the file at once, in every process. `delay=True` opens it at the first
    record, which only rank 0 writes."""
    return [
        call
        for call in anatomy.calls
        if anatomy.is_call_to(call, FILE_HANDLERS)
        and not any(arg.keyword is not None and arg.keyword.value == "delay" for arg in call.args)
        and len(call.args) < 4  # filename, mode, encoding: delay is the fourth
        and not any(arg.star for arg in call.args)
        and anatomy.script.after_setup(call)
        and anatomy.ranks.guard(call) is None
    ]


def _log_files_set_up(anatomy: Anatomy, guarded: list[cst.CSTNode]) -> list[cst.CSTNode]:
    """`logging.basicConfig(filename=...)` and `logger.addHandler(<file handler>)` after the
    set-up on every rank: the log file is rank 0's; the others keep logging's defaults."""
    handlers = {
        dotted(assign.targets[0].target)
        for assign in anatomy.assigns
        if len(assign.targets) == 1
        and isinstance(assign.value, cst.Call)
        and anatomy.is_call_to(assign.value, FILE_HANDLERS)
    }
    found: list[cst.CSTNode] = []
    for line in anatomy.simple_statements:
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            continue
        expr = line.body[0]
        if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
            continue
        call = expr.value
        sets_up = (
            anatomy.is_call_to(call, {"logging.basicConfig"})
            and any(
                arg.keyword is not None and arg.keyword.value == "filename" for arg in call.args
            )
        ) or (
            isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "addHandler"
            and len(call.args) == 1
            and (
                dotted(call.args[0].value) in handlers
                or (
                    isinstance(call.args[0].value, cst.Call)
                    and anatomy.is_call_to(call.args[0].value, FILE_HANDLERS)
                )
            )
        )
        if (
            (sets_up or _configures_a_log_file(anatomy, call))
            and anatomy.script.after_setup(line)
            and anatomy.ranks.guard(line) is None
            and not any(anatomy.inside(line, outer) for outer in guarded)
        ):
            found.append(line)
    return found


def _configures_a_log_file(anatomy: Anatomy, call: cst.Call) -> bool:
    """`logging.config.dictConfig(LOGGING)` with a handler given a `filename` (round-45 audit
    D c5_dictconfig: every rank opened, and truncated, run/train.log)."""
    if not anatomy.is_call_to(call, {"logging.config.dictConfig"}) or not call.args:
        return False
    config = call.args[0].value
    scope = anatomy.function_of(call)
    given = (
        [config, *anatomy.values.origins(config, scope)]
        if isinstance(config, cst.Name)
        else [config]
    )
    return any(
        isinstance(node, cst.SimpleString) and node.evaluated_value == "filename"
        for value in given
        for node in walk(value)
    )


PROGRESS_BARS = {
    "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm", "tqdm.trange",
    "tqdm.auto.trange",
}  # fmt: skip
NOT_RANK_ZERO = "dist.get_rank() != 0"


def _progress_bars(anatomy: Anatomy) -> list[cst.Call]:
    """`tqdm(loader)` made after the set-up, on every rank: one bar per process, drawn over
    each other. `disable=` keeps rank 0's (the others still count their batches)."""
    return [
        call
        for call in anatomy.calls
        if anatomy.is_call_to(call, PROGRESS_BARS)
        and not any(arg.keyword is not None and arg.keyword.value == "disable" for arg in call.args)
        and anatomy.script.after_setup(call)
        and anatomy.ranks.guard(call) is None
    ]


def _only_shown(anatomy: Anatomy, line: cst.SimpleStatementLine) -> bool:
    """`cm = save_confusion(preds, targets, path)` whose names are read after it, in its
    function, only by prints and log lines (`print(cm)`, round-34 audit C
    visualization_confusion_npy_at_end): what it gives back is only shown, so the whole
    line can run on rank 0 (it was run on every rank, rank 0 first)."""
    assign = line.body[0]
    if not isinstance(assign, cst.Assign) or not isinstance(assign.value, cst.Call):
        return False
    names = {
        node.value
        for target in assign.targets
        for node in walk(target.target)
        if isinstance(node, cst.Name)
    }
    if not names or not all(
        isinstance(target.target, cst.Name | cst.Tuple) for target in assign.targets
    ):
        return False
    scope = anatomy.function_of(line)
    for node in walk(scope.body if scope is not None else anatomy.module):
        if not (isinstance(node, cst.Name) and node.value in names) or anatomy.inside(node, line):
            continue
        if anatomy.function_of(node) is not scope:
            continue
        statement = anatomy.statement_of(node)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        shown = (
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and (dotted(small.value.func) or "").rsplit(".", 1)[-1] in PRINTS
        )
        if not shown:
            return False
    return True


def _helpers_that_write(
    anatomy: Anatomy, models: set[str]
) -> list[tuple[cst.SimpleStatementLine, Helper, str]]:
    """Statements that call a helper of another project file (`save_checkpoint(state,
    is_best)` from `utils.py`) that writes files and neither trains nor runs a model it is
    given, or runs it only to write what it makes (`save_some_examples(gen, ...)`, given the
    bare model by DDP003): the whole call goes on rank 0."""
    found = []
    for line in anatomy.simple_statements:
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            continue
        expr = line.body[0]
        if isinstance(expr, cst.Assign) and _only_shown(anatomy, line):
            expr = cst.Expr(expr.value)  # `cm = save_confusion(...)`, then `print(cm)`
        if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
            continue
        call = expr.value
        if anatomy.graph.calls_script(call) or anatomy.ranks.guard(line) is not None:
            continue
        if not anatomy.script.after_setup(line):
            continue
        helper = anatomy.project.helper(call)
        if helper is None:
            continue
        if anatomy.project.keeps_state(call) and anatomy.project.changes_the_object(call):
            continue  # (refused: `_foreign_writers`)
        effects = anatomy.project.effects(helper)
        if not effects.writes or effects.trains:
            continue
        uses = [
            anatomy.project.model_use(call, arg) for arg in call.args if dotted(arg.value) in models
        ]
        if any(
            use is None or (use.runs and not anatomy.project.shows_outputs(call, use))
            for use in uses
        ):
            continue
        if any(
            anatomy.distributed.is_collective(node)
            for node in walk(line)
            if isinstance(node, cst.Call)
        ):
            continue
        found.append((line, helper, ", ".join(f"`{w}`" for w in effects.writes)))
    return found


def _guard_helpers(ctx: ConvertContext, models: set[str]) -> list[cst.CSTNode]:
    """Calls of helpers of other project files that write files or only print, put on rank
    0; the statements guarded."""
    anatomy = ctx.anatomy
    helped: list[cst.CSTNode] = []
    waited: set[cst.CSTNode] = set()  # the statements a barrier follows
    found = [
        (line, helper, f"writes files ({writes})")
        for line, helper, writes in _helpers_that_write(anatomy, models)
    ] + [(line, helper, "only prints") for line, helper in _helpers_that_print(anatomy, models)]
    for line, helper, what in found:
        where = f"`{helper.name}()` ({anatomy.project.shown(helper.path)})"
        ctx.plan.guard(line, expression(RANK_ZERO))
        helped.append(line)
        ctx.changed(line, f"{where} {what}: on rank 0 only")
        writes = anatomy.project.effects(helper).writes
        if (
            what != "only prints"
            and any(write.rsplit(".", 1)[-1] not in LOGS_AND_FIGURES for write in writes)
            and _before_training(anatomy, line)
        ):
            # data a helper prepares (round-37 audit C download_if_missing_data_module:
            # `prepare_data(root)` writing the npz files the dataset then loads)
            point = _after_the_disk_tests(anatomy, line)
            if point not in waited:
                waited.add(point)
                ctx.plan.insert_after(point, [statement(WAIT_FOR_RANK_ZERO)])
            ctx.changed(line, "the other processes wait for what it writes before going on")
    return helped


def _folders_made_on_rank_zero(ctx: ConvertContext, models: set[str]) -> list[cst.CSTNode]:
    """`exp_dir = utils.make_exp_dir(args)`, a helper of another file that makes a folder
    (`os.makedirs(d)`, no `exist_ok`) and returns it, often named from the clock (round-50
    audit E c05_utils_expdir_helper: rank 1 died with FileExistsError, or made a folder of
    its own a second later): rank 0 makes it, and every process takes rank 0's value."""
    anatomy = ctx.anatomy
    done: list[cst.CSTNode] = []
    for line in anatomy.simple_statements:
        if not (isinstance(line, cst.SimpleStatementLine) and is_lone(line, cst.Assign)):
            continue
        assign = cast(cst.Assign, line.body[0])
        target = assign.targets[0].target if len(assign.targets) == 1 else None
        call = assign.value
        if not (isinstance(target, cst.Name) and isinstance(call, cst.Call)):
            continue
        if anatomy.ranks.guard(line) is not None or not anatomy.script.after_setup(line):
            continue
        if anatomy.graph.calls_script(call) or any(
            isinstance(node, cst.Name) and node.value in models for node in walk(call)
        ):
            continue
        helper = anatomy.project.helper(call)
        if helper is None or anatomy.project.effects(helper).trains:
            continue
        if not any(
            isinstance(node, cst.Call)
            and (dotted(node.func) or "").rsplit(".", 1)[-1] in {"makedirs", "mkdir"}
            and not any(
                arg.keyword is not None
                and arg.keyword.value == "exist_ok"
                and is_name(arg.value, "True")
                for arg in node.args
            )
            for node in walk(helper.function.body)
        ):
            continue
        ctx.add_import("torch.distributed", asname="dist")
        ctx.plan.replace(
            call,
            lambda updated: cst.IfExp(
                test=expression(RANK_ZERO), body=updated, orelse=cst.Name("None")
            ),
        )
        ctx.plan.insert_after(line, rank_zeros(target.value))
        where = f"`{helper.name}()` ({anatomy.project.shown(helper.path)})"
        ctx.changed(
            line,
            f"{where} makes a folder: rank 0 makes it, and every process takes its "
            f"`{target.value}`",
        )
        done.append(line)
    return done


# What an `if` asks of the disk: its answer changes while rank 0 writes.
DISK_TESTS = {"exists", "isfile", "isdir", "is_file", "is_dir", "listdir", "glob", "scandir"}


def _after_the_disk_tests(anatomy: Anatomy, line: cst.CSTNode) -> cst.CSTNode:
    """Where the others wait for what `line` writes on rank 0: right after it, or after the
    outermost `if` around it (in its function) that asks the disk whether the files are
    there (`if not os.path.exists("gen/train.txt"): synthesize(...)`, round-49 audit C
    lm_earlystop_gen: a process that saw rank 0's new file skipped the barrier inside, and
    rank 0 waited there for ever)."""
    point = line
    for ancestor in anatomy.ancestors(line):
        if isinstance(ancestor, cst.FunctionDef | cst.ClassDef):
            break
        if isinstance(ancestor, cst.If) and any(
            isinstance(node, cst.Call)
            and (dotted(node.func) or "").rsplit(".", 1)[-1] in DISK_TESTS
            for node in walk(ancestor.test)
        ):
            point = ancestor
    return point


WAIT_FOR_RANK_ZERO = "dist.barrier()  # the others wait for the files rank 0 writes\n"
# What a helper writes that nothing reads back: a log file set up, a figure.
LOGS_AND_FIGURES = {"FileHandler", "savefig", "save_image", "imsave", "imwrite", "mimsave"}


def _before_training(anatomy: Anatomy, line: cst.CSTNode) -> bool:
    """`line` runs once, outside any loop, before a backward pass of its function."""
    function = anatomy.function_of(line)
    if any(isinstance(a, cst.For | cst.While) for a in anatomy.ancestors(line)):
        return False
    starts: list[cst.CSTNode] = [
        *(loop.batch_loop for loop in anatomy.script.train_loops),
        *(training.call for training in anatomy.script.foreign_training),
    ]
    # and the calls that reach them (`train_loss = run_epoch(model, train_data, ...)` in
    # `main()`, round-49 audit C lm_earlystop_gen: the data a helper wrote before it was
    # read by the others before it was there)
    reached, depth = list(starts), 0
    while reached and depth < MAX_STEPS:
        functions = {id(f): f for node in reached if (f := anatomy.function_of(node)) is not None}
        reached = [site for f in functions.values() for site in anatomy.graph.call_sites(f)]
        starts += reached
        depth += 1
    return any(
        anatomy.precedes(line, call) and anatomy.function_of(call) is function
        for call in anatomy.script.training_calls
    ) or any(
        anatomy.precedes(line, node) and anatomy.function_of(node) is function for node in starts
    )


def _helpers_that_print(
    anatomy: Anatomy, models: set[str]
) -> list[tuple[cst.SimpleStatementLine, Helper]]:
    """Statements that call a function of another project file that does nothing but print
    (kuangliu's pytorch-cifar `progress_bar(batch_idx, len(trainloader), msg)` from
    `utils.py`, corpus, session 21): given nothing that runs a model or waits for the other
    processes, the call goes on rank 0 alone, like a print."""
    found = []
    for line in anatomy.simple_statements:
        if not (isinstance(line, cst.SimpleStatementLine) and is_lone(line, cst.Expr)):
            continue
        call = cast(cst.Expr, line.body[0]).value
        if not isinstance(call, cst.Call) or anatomy.ranks.guard(line) is not None:
            continue
        if anatomy.graph.calls_script(call) or not anatomy.script.after_setup(line):
            continue
        helper = anatomy.project.helper(call)
        if helper is None or not only_prints(helper, anatomy):
            continue
        if any(
            (isinstance(node, cst.Name) and node.value in models)
            or (
                isinstance(node, cst.Call)
                and node is not call
                and (anatomy.graph.calls_script(node) or anatomy.distributed.is_collective(node))
            )
            for node in walk(call)
        ):
            continue  # `progress(evaluate(model, loader))`: every process runs the model
        found.append((line, helper))
    return found


def _foreign_writers(ctx: ConvertContext, guarded: list[cst.CSTNode], models: set[str]) -> None:
    """A helper of another file that writes files, given the model, and called where it
    cannot be put on rank 0 alone (`acc = evaluate_and_dump(model, loader, path)`: it runs
    the model, and its result is kept, round-15 audit m03): every process would write
    them. Refused. (Given no model, `train_set = get_training_set()` downloading its data
    runs on rank 0 first: `_rank_zero_first`.)"""
    anatomy = ctx.anatomy
    for call in anatomy.calls:
        if (
            anatomy.graph.calls_script(call)
            or anatomy.ranks.guard(call) is not None
            or any(anatomy.inside(call, outer) for outer in guarded)
            or not anatomy.script.after_setup(call)
        ):
            continue
        instance = anatomy.project.called_instance(call)
        given = any(dotted(arg.value) in models for arg in call.args)
        if (
            instance is not None
            and anatomy.project.keeps_state(call)
            and (given or anatomy.project.changes_the_object(call))
        ):
            kept = anatomy.project.effects(instance)
            if kept.writes and not kept.trains:
                owner = instance.index.class_of(instance.function)
                named = owner.name.value if owner else "the object"
                where = anatomy.project.shown(instance.path)
                ctx.cannot(
                    call,
                    f"`{named}.__call__` ({where}) writes files (`{kept.writes[0]}`) and is "
                    "given the model, in an object whose state every process needs (an "
                    "early-stopping counter, a best score): each process would write them, "
                    "from the DDP wrapper (`module.` keys); give it `model.module` and put "
                    "its writes under `if dist.get_rank() == 0:` in that file, by hand"
                    if given
                    # timm's `best_metric, best_epoch = saver.save_checkpoint(epoch, metric)`
                    # (round-33 audit D timm_train_package): rank 1 renamed rank 0's file
                    else f"`{dotted(call.func)}(...)` ({where}) writes files "
                    f"(`{kept.writes[0]}`), and what it keeps or returns is read by every "
                    "process: each process would write them; make the object on rank 0 "
                    f"only (`... = {named}(...) if dist.get_rank() == 0 else None`) and call "
                    "it under `if ... is not None:`, as timm does, by hand",
                    blocking=True,
                )
                return
        helper = anatomy.project.helper(call)
        effects = anatomy.project.effects(helper) if helper is not None else None
        if helper is None or effects is None or effects.trains:
            continue
        if not any(dotted(arg.value) in models for arg in call.args):
            continue  # a download, a cache: rank 0 first (`_rank_zero_first`)
        if not effects.writes:
            if effects.prints:  # DeiT's `evaluate()` (round-15 audit m01b)
                ctx.info(
                    call,
                    f"`{helper.name}()` ({anatomy.project.shown(helper.path)}) is given the "
                    "model, which every process must run, and prints on every process: put "
                    "its prints under `if dist.get_rank() == 0:` in that file if once is wanted",
                )
            continue
        ctx.cannot(
            call,
            f"`{helper.name}()` ({anatomy.project.shown(helper.path)}) writes files "
            f"(`{effects.writes[0]}`), and is given the model, which every process must run: "
            "each process would write them; pass it a path only rank 0 writes to, or move "
            "the writes out of it, by hand",
            blocking=True,
        )
        return


LOG_LEVELS = {"debug", "info", "warning", "warn", "error", "critical", "exception"}


def _shows_model(anatomy: Anatomy, call: cst.Call) -> bool:
    """`torch.save(model, ...)`, `print(model)`, `str(model)`: the model saved or shown, not
    run; `torch.jit.script(model)` and the other exports, which get the bare model (DDP003)."""
    string_format = (  # `"Model:\n{}".format(model)` (detectron2's logger line)
        isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "format"
        and isinstance(call.func.value, cst.SimpleString | cst.ConcatenatedString)
    )
    # `logger.debug("model: %s", model)`: formatted with `%s` (round-45 audit D
    # c5_dictconfig: run as a forward pass on every rank, rank 1 tore the log file)
    logged = (
        isinstance(call.func, cst.Attribute)
        and call.func.attr.value in LOG_LEVELS
        and bool(call.args)
        and isinstance(call.args[0].value, cst.SimpleString | cst.ConcatenatedString)
    )
    return (
        string_format
        or logged
        or anatomy.is_call_to(call, {"torch.save", *EXPORTS})
        or dotted(call.func) in {"print", "str", "repr", "format"}
        # `writer.add_graph(model, x)`: traced on the bare model (DDP003), by rank 0's
        # writer (round-42 audit B tb_trainer: hoisted to every rank, NameError on rank 1)
        or is_method_call(call, "add_graph")
    )


SUMMARY_WRITERS = ("torch.utils.tensorboard.SummaryWriter", "tensorboardX.SummaryWriter")


def _writers_on_rank_zero(ctx: ConvertContext, guarded: list[cst.CSTNode]) -> None:
    """`writer = SummaryWriter(...)` makes an event file in every process: when every other
    statement that reads `writer` is on rank 0 (its `add_*` calls, guarded above, and its
    `close()` or `flush()`), the writer is made on rank 0 only too. Handed to a function of
    the script (`train_one_epoch(..., writer, epoch)`, the TensorBoard tutorial) whose every
    use of it is on rank 0, it is made as `SummaryWriter(...) if <rank 0> else None`: the
    name exists everywhere, the writer on rank 0 only. Made before the process group exists
    (makemore's `writer = SummaryWriter(log_dir=args.work_dir)` at the top of its `__main__`
    block), rank 0 is torchrun's `RANK` there."""
    anatomy = ctx.anatomy
    done: set[int] = set()
    for assign in anatomy.assigns:
        value = assign.value
        wrapping = isinstance(value, cst.Call) and anatomy.project.writer_class(value)
        if id(assign) in done or not (
            isinstance(value, cst.Call)
            and (wrapping or anatomy.is_call_to(value, SUMMARY_WRITERS))
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
            and anatomy.ranks.guard(assign) is None
        ):
            continue
        early = not anatomy.script.after_setup(assign)
        if early and (
            ctx.options.launcher is not Launcher.TORCHRUN or anatomy.script.entry is None
        ):
            continue  # made in mp.spawn's parent process, before the workers start
        name = assign.targets[0].target.value
        # the same writer made in each branch of an `if` (bearpaw's `Logger(..., resume=True)`
        # or a fresh one, round-38 audit C bearpaw_classification_logger_resume_b): made,
        # and used, on rank 0 together
        makers = _fellow_makers(anatomy, assign, name, wrapping)
        done |= {id(maker) for maker in makers}
        lines = [anatomy.statement_of(maker) for maker in makers]
        uses = _writer_uses(ctx, name, anatomy.function_of(assign), lines, guarded, wrapping)
        if uses is None:
            _handed_to_another_file(ctx, assign, name, value)
            continue  # read somewhere that runs on every rank: the writer must exist there
        closing, handed = uses
        here = LAUNCHED_RANK_ZERO if early else RANK_ZERO
        if early:
            ctx.add_import("os")
        if handed:
            for maker in makers:
                made = expression(
                    f"{anatomy.module.code_for_node(maker.value)} if {here} else None"
                )

                def on_rank_zero(_: cst.CSTNode, made: cst.BaseExpression = made) -> cst.CSTNode:
                    return made

                ctx.plan.replace(maker.value, on_rank_zero)
            ctx.add_import("torch.distributed", asname="dist")
        for closed in closing if handed else [*lines, *closing]:
            if not any(closed is done for done in guarded):
                after = anatomy.script.after_setup(closed)
                ctx.plan.guard(closed, expression(RANK_ZERO if after else LAUNCHED_RANK_ZERO))
                guarded.append(closed)
        ctx.changed(
            assign,
            f"`{dotted(value.func)}` makes what writes files (a TensorBoard writer, a log file, "
            "a file it opens to write): made, and used, on rank 0 only"
            if wrapping
            else "TensorBoard writer made (and closed) on rank 0 only"
            + (" (None on the others, where it is tested or handed on)" if handed else ""),
        )


def _attribute_writers_on_rank_zero(ctx: ConvertContext, guarded: list[cst.CSTNode]) -> None:
    """`self.writer = SummaryWriter(...)` in a method of a class of the script (a Trainer's
    `__init__`): when every other read of `self.writer` in the class's methods is on rank 0
    (its `add_*` calls, guarded above, and its `close()` or `flush()`) and no other code
    reads a `.writer` attribute, the writer is made as `SummaryWriter(...) if
    <rank 0> else None` and closed on rank 0: one event file, rank 0's (round-42 audit B
    tb_trainer: every rank wrote its own)."""
    anatomy = ctx.anatomy
    for assign in anatomy.assigns:
        value = assign.value
        method = anatomy.function_of(assign)
        owner = anatomy.class_of(method) if method is not None else None
        if not (
            owner is not None
            and method is not None
            and isinstance(value, cst.Call)
            and anatomy.is_call_to(value, SUMMARY_WRITERS)
            and len(assign.targets) == 1
            and anatomy.ranks.guard(assign) is None
            and anatomy.script.after_setup(assign)
        ):
            continue
        target = assign.targets[0].target
        params = method.params.params
        if not (
            isinstance(target, cst.Attribute)
            and params
            and is_name(target.value, params[0].name.value)
        ):
            continue
        attr = target.attr.value
        closing = _attribute_writer_uses(anatomy, owner, assign, attr, guarded)
        if closing is None:
            continue
        made = expression(f"{anatomy.module.code_for_node(value)} if {RANK_ZERO} else None")

        def on_rank_zero(_: cst.CSTNode, made: cst.BaseExpression = made) -> cst.CSTNode:
            return made

        ctx.plan.replace(value, on_rank_zero)
        ctx.add_import("torch.distributed", asname="dist")
        for closed in closing:
            ctx.plan.guard(closed, expression(RANK_ZERO))
            guarded.append(closed)
        ctx.changed(
            assign,
            "TensorBoard writer made (and closed) on rank 0 only (None on the others)",
        )


def _attribute_writer_uses(
    anatomy: Anatomy,
    owner: cst.ClassDef,
    assign: cst.Assign,
    attr: str,
    guarded: list[cst.CSTNode],
) -> list[cst.BaseStatement] | None:
    """The `self.<attr>.close()`/`.flush()` statements of `owner`'s methods, when every other
    read of an `<attr>` attribute in the file is one of `owner`'s on rank 0; None otherwise."""
    closing: list[cst.BaseStatement] = []
    for node in walk(anatomy.module):
        if not (isinstance(node, cst.Attribute) and node.attr.value == attr):
            continue
        if node is assign.targets[0].target:
            continue
        method = anatomy.function_of(node)
        params = method.params.params if method is not None else ()
        if not (
            method is not None
            and anatomy.class_of(method) is owner
            and params
            and is_name(node.value, params[0].name.value)
        ):
            return None  # another object's, or read from outside the class
        statement = anatomy.statement_of(node)
        if _on_rank_zero(anatomy, statement, guarded):
            continue
        if _method_line(anatomy, node, statement, {"close", "flush"}):
            closing.append(statement)
            continue
        return None
    return closing


def _on_rank_zero(
    anatomy: Anatomy, statement: cst.BaseStatement, guarded: list[cst.CSTNode]
) -> bool:
    """Whether `statement` runs on rank 0 only: guarded by this rule, or by the script."""
    return (
        any(anatomy.inside(statement, outer) or statement is outer for outer in guarded)
        or anatomy.ranks.guard(statement) is not None
    )


def _method_line(
    anatomy: Anatomy, node: cst.CSTNode, statement: cst.BaseStatement, names: set[str] | None
) -> bool:
    """Whether `statement` is one call of a method of `node` and nothing else
    (`writer.close()`), of one of `names` when given."""
    parent = anatomy.parent(node)
    return (
        isinstance(parent, cst.Attribute)
        and (names is None or parent.attr.value in names)
        and isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.Call)
        and statement.body[0].value.func is parent
    )


def _handed_to_another_file(
    ctx: ConvertContext, assign: cst.Assign, name: str, made: cst.Call
) -> None:
    """A writer (a SummaryWriter, a logger class of the project that writes a file) handed
    to a helper of another file that uses it (round-37 audit C logger_print_to_file_module_b:
    `train_one_epoch(..., logger, ...)` in engine.py calling `logger.write(...)`): every
    process would write the file, and the helper cannot be given None. Refused."""
    anatomy = ctx.anatomy
    scope = anatomy.function_of(assign)
    for call in anatomy.calls:
        if anatomy.function_of(call) is not scope or not any(
            is_name(arg.value, name) for arg in call.args
        ):
            continue
        helper = anatomy.project.helper(call)
        if helper is None:
            continue
        ctx.cannot(
            call,
            f"`{name}` (`{dotted(made.func)}(...)`, line {anatomy.line(assign)}) writes files "
            f"and is handed to `{helper.name}()` ({anatomy.project.shown(helper.path)}), "
            "which uses it on every process: each would write them; make it on rank 0 only "
            "and give the other processes an object whose methods do nothing, by hand",
            blocking=True,
        )
        return


def _fellow_makers(
    anatomy: Anatomy, assign: cst.Assign, name: str, wrapping: bool
) -> list[cst.Assign]:
    """`assign` and the other statements of its scope that bind `name` to a writer made by
    the same class, when every binding of `name` there is one; `assign` alone otherwise."""
    scope = anatomy.function_of(assign)
    bindings = [
        other
        for other in anatomy.assigns
        if anatomy.function_of(other) is scope
        and any(is_name(target.target, name) for target in other.targets)
    ]
    alike = all(
        isinstance(other.value, cst.Call)
        and len(other.targets) == 1
        and anatomy.ranks.guard(other) is None
        and isinstance(assign.value, cst.Call)
        and dotted(other.value.func) == dotted(assign.value.func)
        and (wrapping or anatomy.is_call_to(other.value, SUMMARY_WRITERS))
        for other in bindings
    )
    return bindings if alike and len(bindings) > 1 else [assign]


def _writer_uses(
    ctx: ConvertContext,
    name: str,
    scope: cst.FunctionDef | None,
    lines: list[cst.BaseStatement],
    guarded: list[cst.CSTNode],
    wrapping: bool,
    depth: int = 0,
) -> tuple[list[cst.BaseStatement], bool] | None:
    """The `close()`/`flush()` statements of the writer `name` holds in `scope`, and whether
    it is handed to a function of the script, when every other use is on rank 0 (in
    `scope` and in the functions it is handed to); None when one runs on every rank."""
    anatomy = ctx.anatomy
    closing: list[cst.BaseStatement] = []
    handed = False
    for node in walk(scope.body if scope is not None else anatomy.module):
        if not isinstance(node, cst.Name) or node.value != name:
            continue
        if any(anatomy.inside(node, line) for line in lines):
            continue
        if anatomy.is_attribute_name(node):
            continue  # `self.writer`: another object
        where = anatomy.function_of(node)
        if where is not scope and (
            where is None
            or name in anatomy.graph.parameters_of(where)
            or anatomy.values.binds(where, name)
        ):
            continue  # another object of that name
        statement = anatomy.statement_of(node)
        if _on_rank_zero(anatomy, statement, guarded):
            continue
        parent = anatomy.parent(node)
        if _method_line(anatomy, node, statement, None if wrapping else {"close", "flush"}):
            closing.append(statement)  # (a wrapping class's methods all write)
            continue
        call = anatomy.parent(parent) if isinstance(parent, cst.Arg) else None
        function = anatomy.graph.callee(call) if isinstance(call, cst.Call) else None
        if function is not None and depth < MAX_STEPS and isinstance(call, cst.Call):
            bound = [
                p
                for p in anatomy.graph.parameters_of(function)
                if anatomy.graph.bound_argument(call, function, p) is node
            ]
            inner = (
                _writer_uses(ctx, bound[0], function, [], guarded, wrapping, depth + 1)
                if len(bound) == 1
                else None
            )
            if inner is not None and (not inner[0] or wrapping):
                # its uses there guarded too (round-37 audit C logger_print_to_file_module_c:
                # `train_one_epoch(..., logger)` of the script calling `logger.write(...)`)
                closing += inner[0]
                handed = True
                continue
        if _tests_the_writer(anatomy, node, name):
            handed = True  # `if writer:` (a writer made only when TensorBoard imports)
            continue
        assigned = anatomy.parent(parent) if isinstance(parent, cst.AssignTarget) else None
        if isinstance(assigned, cst.Assign) and is_name(assigned.value, "None"):
            continue  # `except ImportError: writer = None`
        return None
    return closing, handed


def _tests_the_writer(anatomy: Anatomy, node: cst.Name, name: str) -> bool:
    """`if writer:` or `if writer is not None:`, with no `else`, whose every statement uses
    the writer: None on the other ranks, the block is skipped there and nothing else is
    (round-30 audit B so_global_step_tensorboard_fallback: a writer made in a `try:` and
    tested before each use was made on every rank)."""
    parent = anatomy.parent(node)
    test = parent if isinstance(parent, cst.Comparison) else node
    block = anatomy.parent(test)
    if isinstance(parent, cst.Comparison) and not (
        len(parent.comparisons) == 1
        and isinstance(parent.comparisons[0].operator, cst.IsNot)
        and is_name(parent.comparisons[0].comparator, "None")
    ):
        return False
    return (
        isinstance(block, cst.If)
        and block.test is test
        and block.orelse is None
        and all(
            any(isinstance(n, cst.Name) and n.value == name for n in walk(statement))
            for statement in block.body.body
        )
    )


def _one_line_blocks(ctx: ConvertContext, models: set[str], guarded: list[cst.CSTNode]) -> None:
    """`if i % 100 == 0: print(...)`, `if epoch == last: torch.save(...)`: a one-line `if`
    whose statements all print or write goes under the rank-0 guard whole. One that also
    does other work is reported (blocking when it writes a file)."""
    anatomy = ctx.anatomy
    for block in anatomy.ifs:
        if not isinstance(block.body, cst.SimpleStatementSuite) or block.orelse is not None:
            continue
        if (
            not anatomy.script.after_setup(block)
            or anatomy.ranks.guard(block) is not None
            or any(anatomy.inside(block, outer) for outer in guarded)
        ):
            continue
        kinds = [
            anatomy.effects.of(cst.SimpleStatementLine(body=[small])) for small in block.body.body
        ]
        if not any(kinds):
            continue
        elif_branch = isinstance(anatomy.parent(block), cst.If)  # `elif c: ...`: no room
        if all(kinds) and not elif_branch and not _must_run_everywhere(anatomy, block, models):
            ctx.plan.guard(block, expression(RANK_ZERO))
            guarded.append(block)
            ctx.changed(block, f"{', '.join(sorted(set(filter(None, kinds))))} on rank 0 only")
            continue
        writes = any(kind in FILE_WRITES for kind in kinds)
        ctx.cannot(
            block,
            "a one-line `if` that prints or writes and also does other work, or such an "
            "`elif`: every rank would print or write; put its statements on lines of their "
            "own first",
            blocking=writes,
        )


def _one_line_suites(ctx: ConvertContext, models: set[str], guarded: list[cst.CSTNode]) -> None:
    """`except ImportError: HAS_SK = False; print("install sklearn")` (MorvanZhou's 401_CNN),
    a one-line `for`, `while`, `with`, `try` or `else:` body that prints or logs: its
    statements go on lines of their own, the prints and logs under the rank-0 guard (one
    process prints the line, as the single-process script did). A one-line `if` is
    `_one_line_blocks`'."""
    anatomy = ctx.anatomy
    for suite in walk(anatomy.module):
        if not isinstance(suite, cst.SimpleStatementSuite):
            continue
        owner = anatomy.parent(suite)
        if owner is None or isinstance(owner, cst.If | cst.FunctionDef):
            continue
        if (
            not anatomy.script.after_setup(owner)
            or anatomy.ranks.guard(owner) is not None
            or any(anatomy.inside(owner, outer) for outer in guarded)
        ):
            continue
        kinds = [anatomy.effects.of(cst.SimpleStatementLine(body=[small])) for small in suite.body]
        shown = [kind in {"print", "log"} for kind in kinds]
        if not any(shown) or any(kind and kind not in {"print", "log"} for kind in kinds):
            continue
        if any(
            _must_run_everywhere(anatomy, small, models)
            for small, prints in zip(suite.body, shown, strict=True)
            if prints
        ):
            continue
        ctx.plan.replace(suite, partial(_unfolded, shown=shown))
        ctx.add_import("torch.distributed", asname="dist")
        ctx.changed(owner, "the one-line body on lines of its own, its prints on rank 0 only")


def _unfolded(suite: cst.CSTNode, shown: list[bool]) -> cst.CSTNode:
    """The suite as an indented block, the statements that print under the rank-0 guard."""
    assert isinstance(suite, cst.SimpleStatementSuite)
    lines: list[cst.BaseStatement] = []
    for small, prints in zip(suite.body, shown, strict=True):
        line = cst.SimpleStatementLine(
            body=[small.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)]
        )
        if prints:
            lines.append(cst.If(test=expression(RANK_ZERO), body=cst.IndentedBlock(body=[line])))
        else:
            lines.append(line)
    return cst.IndentedBlock(body=lines, footer=[])


FUNCTION_RUNS_MODEL = "a function that runs the model (DDP's forward talks to every rank)"
FUNCTION_RUNS_COLLECTIVE = "a function of another file that runs a collective"
RUNS = {FUNCTION_RUNS_COLLECTIVE: "a collective"}  # what a hoisted value is said to run
MODEL_RUNS = {
    "a forward pass",
    "a call that uses the model (it may run a forward pass)",
    FUNCTION_RUNS_MODEL,
    FUNCTION_RUNS_COLLECTIVE,
}


def _hoist_model_runs(
    ctx: ConvertContext, line: cst.CSTNode, models: set[str], taken: set[str]
) -> str:
    """`print(f"acc {accuracy(model, loader)}")`: the calls that run the model go into
    variables just before the print, on every rank (DDP's forward and anything the call
    synchronises need all of them); the print then shows the variables. The calls' code,
    or "" when the print cannot be split so (a one-line block, a call nested in a lambda)."""
    anatomy = ctx.anatomy
    if not isinstance(line, cst.SimpleStatementLine) or not isinstance(
        anatomy.parent(line), cst.IndentedBlock | cst.Module
    ):
        return ""
    runs: list[cst.Call] = []
    for node in walk(line):
        if not isinstance(node, cst.Call) or any(anatomy.inside(node, run) for run in runs):
            continue
        if (
            dotted(node.func) in models
            or (
                any(dotted(arg.value) in models for arg in node.args)
                and not _shows_model(anatomy, node)
            )
            or runs_collective(anatomy.project, node)
            or (
                anatomy.graph.callees(node)  # `trainer.train()` too (round-25 trl_sft_like)
                and anatomy.graph.reaches(
                    node,
                    lambda inner: isinstance(inner, cst.Call) and dotted(inner.func) in models,
                )
            )
        ):
            runs.append(node)
    # A run inside a comprehension (`sum(model(x).item() for x in batches)`) is computed
    # with the whole value shown; one deferred in a lambda cannot be.
    whole: list[cst.Call | cst.BaseExpression] = []
    for run in runs:
        within = [a for a in anatomy.ancestors(run) if anatomy.inside(a, line)]
        if any(isinstance(a, cst.Lambda) for a in within):
            return ""
        shown = (
            _shown_value(anatomy, run, line)
            if any(isinstance(a, cst.BaseComp) for a in within)
            else run
        )
        if shown is None:
            return ""
        if not any(shown is other for other in whole):
            whole.append(shown)
    if not whole:
        return ""
    code = cst.Module([]).code_for_node
    lines: list[Callable[[], cst.BaseStatement]] = []
    for value in whole:
        func = value.func if isinstance(value, cst.Call) else None
        called = (
            func.attr.value if isinstance(func, cst.Attribute) else dotted(func) if func else None
        )
        stem = f"{called or 'value'}_result"
        name, number = anatomy.free_name([stem]), 2
        while name in taken:  # given to an earlier print's value in this conversion
            name, number = anatomy.free_name([f"{stem}_{number}"]), number + 1
        taken.add(name)
        # The value as the other rules' edits leave it (`generate(model.module)`, DDP003),
        # taken where it is replaced by the name; the assignment is made from it after.
        edited: list[cst.BaseExpression] = []

        def hoist(
            updated: cst.BaseExpression, name: str = name, kept: list[cst.BaseExpression] = edited
        ) -> cst.Name:
            kept.append(updated)
            return cst.Name(name)

        def assign(
            name: str = name,
            kept: list[cst.BaseExpression] = edited,
            value: cst.BaseExpression = value,
        ) -> cst.BaseStatement:
            return statement(f"{name} = {code(kept[-1] if kept else value)}\n")

        ctx.plan.replace(value, hoist)
        lines.append(assign)
    ctx.plan.insert_before(line, lines)
    return ", ".join(f"`{code(value)}`" for value in whole)


def _shown_value(
    anatomy: Anatomy, node: cst.CSTNode, line: cst.CSTNode
) -> cst.BaseExpression | None:
    """The value `node` is part of that the print shows as one: an argument of the print
    (or log) call, or one `{...}` of an f-string in it."""
    assert isinstance(line, cst.SimpleStatementLine)
    top = line.body[0].value if isinstance(line.body[0], cst.Expr) else None
    for ancestor in anatomy.ancestors(node):
        if ancestor is line:
            break
        if isinstance(ancestor, cst.FormattedStringExpression):
            return ancestor.expression
        if isinstance(ancestor, cst.Arg) and anatomy.parent(ancestor) is top:
            return ancestor.value
    return None


def _must_run_everywhere(anatomy: Anatomy, statement: cst.CSTNode, models: set[str]) -> str:
    models = {name for name in models if not _made_again(anatomy, statement, name)}
    models -= _not_wrapped_yet(anatomy, statement)
    for node in walk(statement):
        if not isinstance(node, cst.Call):
            continue
        if dotted(node.func) in models:
            return "a forward pass"
        if (
            any(dotted(arg.value) in models for arg in node.args)
            and not _shows_model(anatomy, node)
            and not anatomy.is_call_to(node, MODEL_SAVES)  # `torch.jit.save(model, path)`
        ):
            return "a call that uses the model (it may run a forward pass)"
        if anatomy.distributed.is_collective(node):
            return "a collective"
        if runs_collective(anatomy.project, node):
            return FUNCTION_RUNS_COLLECTIVE  # `metrics.compute()` of metrics/, all-reducing
    if anatomy.graph.reaches(
        statement,
        lambda node: isinstance(node, cst.Call) and anatomy.distributed.is_collective(node),
    ):
        return "a function that runs a collective"
    if models and anatomy.graph.reaches(
        statement,
        lambda node: (
            isinstance(node, cst.Call)
            and dotted(node.func) in models
            and anatomy.function_of(node) is not anatomy.function_of(statement)
        ),
    ):
        return FUNCTION_RUNS_MODEL
    return ""


def _not_wrapped_yet(anatomy: Anatomy, statement: cst.CSTNode) -> set[str]:
    """Names of models the statement runs before their wrap, in the wrap's own block
    (`writer.add_graph(net, images)` just before `net = DDP(net)`, or the statement the
    wrap follows): still bare modules."""
    found: set[str] = set()
    for model in anatomy.models.all:
        placement = model.placement
        if placement is None or anatomy.function_of(placement) is not anatomy.function_of(
            statement
        ):
            continue
        holder = anatomy.parent(placement)
        if (
            holder is not None
            and anatomy.parent(statement) is holder
            and (statement is placement or anatomy.precedes(statement, placement))
        ):
            found |= model.names
    return found


def _made_again(anatomy: Anatomy, statement: cst.CSTNode, name: str) -> bool:
    """`name` holds a model built again after the wrap (`model = Net().to(device)` to reload
    the best weights for a final test): a bare module, so running it on rank 0 alone needs
    no other rank. The new assignment lies, in the statement's function, after the wrap and
    before the statement, outside any loop that also runs the wrap."""
    function = anatomy.function_of(statement)
    for model in anatomy.models.all:
        wrap = model.placement
        if name not in model.names or wrap is None or anatomy.function_of(wrap) is not function:
            continue
        if not anatomy.precedes(wrap, statement) or any(
            isinstance(loop, cst.For | cst.While) and anatomy.inside(wrap, loop)
            for loop in anatomy.ancestors(statement)
        ):
            return False
        again = model.rewrapped  # built again and wrapped again to train (DDP003 ran first)
        if again is not None and anatomy.precedes(again, statement):
            wrap = again  # (round-42 audit B best_whole_finetune_bn: a forward on rank 0 hung)
        return any(
            dotted(target.target) == name
            and anatomy.function_of(assign) is function
            and anatomy.precedes(wrap, assign)
            and anatomy.precedes(assign, statement)
            and not anatomy.inside(assign, wrap)
            # `model = model.to("cpu")` moves the wrapper; it makes no new model
            and not any(dotted(inner) == name for inner in walk(assign.value))
            for assign in anatomy.assigns
            for target in assign.targets
        )
    return False
