"""Runs a training script inside one process of a verify run, under observation.

    python -m ddpify.verify.harness --role original|converted --out DIR --workdir DIR
        --steps K [--epochs E] [--dump-at T] [--train-loader I --train-batch G]
        [--compare-with DIR --nproc N --rtol R --atol A] SCRIPT [ARGS...]

Before `runpy.run_path(SCRIPT, run_name="__main__")` it seeds every generator the same way,
maps CUDA to the CPU when there is no GPU, makes sampling sequential, makes dropout the
identity, resizes the original's training batch, and hooks every optimizer step. Each pass
over the training loader (an epoch) ends after K steps; the script is stopped
(StopTraining) when pass E+1 starts, after what it does between epochs, or after K x E
steps; then it records, and exits with os._exit so no teardown of the script's can hang.
The original's process then measures the converted run's tensors against its own
(ddpify.verify.compare).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from ddpify.verify.records import STACK

SEED = 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ddpify.verify.harness")
    parser.add_argument("--role", choices=["original", "converted"], required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--dump-at", type=float, default=None)
    parser.add_argument("--wait-for", type=Path, default=None)
    parser.add_argument("--parent", type=int, default=None)
    parser.add_argument("--source-dir", type=Path, default=None)
    parser.add_argument("--train-loader", type=int, default=None)
    parser.add_argument("--train-batch", type=int, default=None)
    parser.add_argument("--added-loaders", default="")
    parser.add_argument("--skip-seeds", default="")
    parser.add_argument("--compare-with", type=Path, default=None)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--atol", type=float, default=1e-6)
    parser.add_argument("--float32", action="store_true")
    parser.add_argument("script", type=Path)
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def watch_for_hangs(out: Path) -> IO[str]:
    """Each process dumps its Python stack on SIGUSR1 (sent when a peer rank died and this
    one is still waiting) and, see dump_before_timeout, shortly before the timeout."""
    stack = open(out / STACK, "w")  # noqa: SIM115 - open until the process ends
    faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
    return stack


def end_with_parent(parent: int | None) -> None:
    """Should the verifier itself be killed, its runs must not outlive it: end this process
    and its group (a DataLoader's workers) once the parent is gone. The parent's pid comes
    from the command line: it may be gone before this line runs."""
    if parent is None:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    threading.Thread(target=watch, name="ddpify-verify-parent-watch", daemon=True).start()


def dump_before_timeout(stack: IO[str], dump_at: float | None) -> None:
    if dump_at is not None:
        faulthandler.dump_traceback_later(max(0.1, dump_at - time.time()), file=stack)


def wait_for_go(options: argparse.Namespace) -> None:
    """The original starts (and imports torch) while the converted run trains; the runner
    then writes the batch to train with and the deadline into this file."""
    go: Path = options.wait_for
    while not go.exists():
        time.sleep(0.02)
    settings = json.loads(go.read_text(encoding="utf-8"))
    options.train_loader = settings.get("train_loader")
    options.train_batch = settings.get("train_batch")
    options.also_resized = {int(k): v for k, v in settings.get("also_resized", {}).items()}
    options.padded = bool(settings.get("padded"))
    options.dump_at = settings.get("dump_at")


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    stack = watch_for_hangs(options.out)
    end_with_parent(options.parent)

    import random

    import torch
    import torch.distributed as dist
    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    from ddpify.verify import patches
    from ddpify.verify.recorder import Recorder, StopTraining

    if options.wait_for is not None:
        wait_for_go(options)
    dump_before_timeout(stack, options.dump_at)
    real_open = open
    recorder = Recorder(
        options.out,
        options.workdir,
        options.steps,
        real_open,
        torch.save,
        epochs=options.epochs,
        train_loader=options.train_loader,
    )
    cuda = torch.cuda.is_available()
    recorder.event("start", role=options.role, pid=os.getpid(), cuda=cuda)

    # Every process of the converted run from a seed of its own, as under torchrun (torch,
    # numpy and random each seed an unseeded process apart): rank 0's is the original's, so
    # the two draw alike, and a draw the conversion leaves unshared differs between the
    # ranks as it would (round-23 audit B: with one seed everywhere, an unseeded
    # `torch.randperm` per rank and weights reset per rank after the wrap looked right).
    seed = SEED + (int(os.environ.get("RANK", "0")) if options.role == "converted" else 0)
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    # One intra-op thread in every process: the same reduction order in both runs.
    torch.set_num_threads(1)
    if cuda:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    else:
        patches.patch_cuda(recorder)
    patches.patch_process_group(recorder, map_cuda=not cuda)
    if options.role == "converted":
        patches.patch_spawn(recorder)
    added = {int(line) for line in options.added_loaders.split(",") if line}
    resized = {**getattr(options, "also_resized", {})}
    if options.train_loader is not None and options.train_batch is not None:
        resized[options.train_loader] = options.train_batch
    padded = options.role == "original" and getattr(options, "padded", False)
    pad_for = options.nproc if padded else 1
    patches.patch_data(recorder, resized, added, pad_for, options.train_loader)
    patches.patch_numpy(recorder)
    patches.patch_python_random(recorder)
    patches.patch_torch_seed(recorder)
    patches.patch_rnn_dropout(recorder)
    patches.patch_backward(recorder)
    if not options.float32:
        patches.patch_rnn_inputs()
    patches.patch_writes(recorder)
    patches.patch_loads(recorder)
    patches.patch_output(recorder, options.script)
    skipped = {int(line) for line in options.skip_seeds.split(",") if line}
    if skipped:
        patches.skip_seeds(recorder, options.script, skipped)
    register_module_forward_pre_hook(recorder.forward_starts)
    register_module_forward_hook(recorder.forward_ends)
    register_optimizer_step_post_hook(recorder.after_step)
    register_optimizer_step_pre_hook(recorder.before_step)
    if options.compare_with is not None:
        from ddpify.verify.records import ProcessRecord

        converted = ProcessRecord.read(options.compare_with / "rank0")
        recorder.replay = {
            (step.optimizer, step.step): tuple(zip(step.lr, step.momentum, strict=True))
            for step in converted.steps
            if len(step.momentum) == len(step.lr)
        }

    script = str(options.script)
    sys.argv = [script, *options.args]
    sys.path[0] = str(options.workdir)
    if options.source_dir is not None:
        sys.path.insert(1, str(options.source_dir))
    # float64 in both runs (issue 13): rounding noise, which Adam turns into whole steps on
    # parameters whose gradient is all but zero (a bias before BatchNorm), stays far below
    # the tolerance.
    if options.float32:
        recorder.changed(
            "float32", "float32, as the scripts are: in float64 they fail a dtype check"
        )
    else:
        torch.set_default_dtype(torch.float64)
        recorder.changed(
            "precision", "float64: the default dtype, and float32 tensors meeting float64 ones"
        )
    mode = patches.CheckMode(recorder, map_cuda=not cuda, float64=not options.float32)
    patches.patch_recompute(mode)

    import runpy

    code = 0
    reason, detail = "finished", ""
    mode.__enter__()  # type: ignore[no-untyped-call]
    try:
        runpy.run_path(script, run_name="__main__")
        recorder.step_by_hand()  # the last update by hand
    except StopTraining:
        reason = "steps"
    except SystemExit as stop:
        reason = "exit"
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        detail = f"SystemExit({stop.code!r})"
    except BaseException as error:  # the script's own failure: report it, as Python would
        import traceback

        traceback.print_exc()
        reason, detail, code = "error", f"{type(error).__name__}: {error}", 1
    finally:
        mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]
    if recorder.stopping and reason != "steps":  # it caught StopTraining, then ended
        reason, code = "steps", 0

    recorder.suppress_writes += 1
    # Compared even after a failure: the replicas against rank 0 hold whatever the original
    # did, and a run of it with its own batch may judge the rest (runner.batch_bound).
    if options.compare_with is not None:
        from ddpify.verify.compare import compare_runs, write_comparison

        try:
            comparison: dict[str, Any] = compare_runs(
                options.out, options.compare_with, options.nproc, options.rtol, options.atol
            )
        except Exception as error:  # reported, not raised
            comparison = {"error": f"{type(error).__name__}: {error}"}
        write_comparison(options.out, comparison)
    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):  # best effort: the process exits next
            dist.destroy_process_group()
    recorder.end(reason, detail)
    faulthandler.cancel_dump_traceback_later()
    stack.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
